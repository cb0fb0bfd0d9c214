/*
 * cuda_int.h - private interface between the cuda backend's op machinery
 * (cuda_backend.cu: streams, events, graphs, argument checks, the default
 * stream) and its launchers (cuda_fp8.cu, cuda_gemm.cu, cuda_attn.cu,
 * cuda_kernels.cu, cuda_layernorm.cu, cuda_layernorm_bwd.cu).
 *
 * A launcher receives arguments already checked for shape, dtype and NULLs
 * and a live, non-failed stream; it checks what depends on the device
 * (alignment, cuBLASLt limits), sizes the grid, enqueues, checks the launch
 * and returns a status with the message set.  Marking the stream failed is
 * the caller's job, so that one place owns the sticky-failure rule.
 *
 * Per-stream resources (cuBLAS handle, GEMM workspace, scratch, a small
 * word area) are allocated when the stream is created, so nothing is
 * allocated while a stream captures.  Graphs captured on a stream bake in
 * the addresses of that stream's workspace and scratch: two such graphs must
 * not run at the same time on different streams.
 */
#ifndef QE_CUDA_INT_H
#define QE_CUDA_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime's headers are plain C without linkage guards. */
#include "runtime/comm/launch_vars.h"
#include "runtime/core/env.h"
#include "runtime/core/log.h"
#include "runtime/core/rt_options.h"
#include "runtime/core/status.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/backend_check.h"

#define QE_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt / cuBLAS workspace per stream */
#define QE_CUDA_SCRATCH_BYTES ((size_t)16 << 20)   /* initial per-stream scratch (attention, xent) */
#define QE_CUDA_MAX_VIEWS 256                      /* view pointers passed by value to adamw / sum_views */
#define QE_CUDA_UPDATE_BATCH 32                    /* role blocks passed by value to one fp8_update_many launch */
#define QE_CUDA_ADAMW_SEGS 256                     /* segments passed by value to one adamw_many launch */
#define QE_CUDA_ADAMW_VIEWS 2048                   /* and the view pointers of those segments */

/* Bits of the per-stream device error word, set by kernels that find bad data. */
#define QE_CUDA_ERR_TOKEN 1u  /* embed_bwd: a token outside [0, V) */
#define QE_CUDA_ERR_TARGET 2u /* xent: a target outside [0, V) */

/*
 * Process-wide state shared by every cuda backend of the process (created
 * with the first, released with the last, in cuda_backend.cu): the
 * cuBLASLt handle and the default stream behind NULL.  The GEMM algorithm
 * cache (cuda_gemm.cu) is process-wide too, so a shape gets one algorithm
 * whichever backend or stream runs it.
 */
extern cublasLtHandle_t qe__cuda_lt;

typedef struct qe_cuda_backend {
	qe_backend pub; /* first: a qe_backend * is a qe_cuda_backend * */
	int device;
	int capturing; /* streams of this backend now capturing (atomic) */
	long live_allocs, live_streams, live_events, live_graphs; /* atomic */
	pthread_mutex_t lock; /* deferred frees */
	void **deferred; /* frees requested while capturing, done when the last capture ends */
	int ndeferred, capdeferred;
	size_t scratch_high; /* the largest stream scratch any op of this backend needed (atomic max) */
} qe_cuda_backend;

struct qe_stream {
	qe_cuda_backend *be; /* NULL for the default stream */
	cudaStream_t cs;
	cublasHandle_t blas; /* attention GEMMs; bound to cs and ws */
	void *ws;            /* QE_CUDA_WORKSPACE_BYTES */
	void *scratch;       /* grow-only, outside capture */
	size_t scratch_bytes;
	unsigned *words; /* device, 256 B: [0] amax of a current-scaled cast, [1] error bits, [4] [8] GEMM scales */
	int capturing;
	int is_default; /* the process-wide stream behind NULL */
	int failed;     /* first error, sticky */
	char failmsg[512];
};

struct qe_event {
	qe_cuda_backend *be;
	cudaEvent_t ev;
};

struct qe_graph {
	qe_cuda_backend *be;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	int nodes;
};

/* qe_fail with QE_ECUDA naming the op, the call and CUDA's text. Returns QE_ECUDA. */
int qe__cuda_err(cudaError_t e, const char *op, const char *call);
/* The same for cuBLAS / cuBLASLt statuses. */
int qe__blas_err(cublasStatus_t st, const char *op, const char *call);
/* Check the last kernel launch. */
int qe__cuda_launched(const char *op, const char *kernel);
/*
 * A scratch buffer of at least bytes on stream s, grown (after a stream
 * sync) when too small; growing while the stream captures is refused with
 * QE_ECAPTURE.  Valid until the next call on the same stream.
 */
int qe__cuda_scratch(qe_stream *s, size_t bytes, const char *op, void **out);

/* ---- launchers (arguments checked by cuda_backend.cu) ---- */
int qe__cuda_cast(qe_stream *s, const qe_cast_args *a);
int qe__cuda_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r);
int qe__cuda_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
			     const qe_fp8_recipe *r);
int qe__cuda_gemm(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		  int accumulate);
int qe__cuda_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n);
int qe__cuda_add_inplace(qe_stream *s, float *y, const float *a, int64_t n);
/*
 * y, a and b of dt (f32 or bf16), bias NULL or [cols]; with mean and rstd:
 * also the rows' layernorm statistics (layernorm_fwd's, of y as stored)
 */
int qe__cuda_residual_add(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
			  int64_t rows, int64_t cols, float *mean, float *rstd);
int qe__cuda_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols);
/*
 * db[j] = the sum of pb[g * cols + j] over g in group order from 0: the last
 * step of colsum.h's column sums, for partials some other kernel wrote (the
 * cast's, cuda_fp8.cu).
 */
int qe__cuda_colsum_finish(qe_stream *s, const char *op, float *db, const float *pb, int64_t groups, int64_t cols);
/* bias_grad's column sums of dy into db with the partials in part (qe_colsum_groups(rows) x cols floats). */
int qe__cuda_colsum_with(qe_stream *s, const char *op, float *db, const float *dy, int64_t rows, int64_t cols,
			 float *part);
int qe__cuda_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n);
int qe__cuda_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n);
/* x of x_dt, dy of dy_dt: each f32 or bf16 */
int qe__cuda_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
			   const float *w, const float *b, int64_t rows, int64_t cols);
/* dx and residual of x_dt, as x */
int qe__cuda_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
			   const void *x, qe_dtype x_dt, const float *mean, const float *rstd, const float *w,
			   int64_t rows, int64_t cols, const void *residual);
/* rows of out (f32 or bf16), position r % T of each */
int qe__cuda_embed_fwd(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
		       const float *wpe, int64_t rows, int64_t T, int64_t H);
/* dout [rows, H] of dout_dt (f32 or bf16); dwpe [T, H] summed over the rows / T sequences */
int qe__cuda_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout, qe_dtype dout_dt,
		       int64_t rows, int64_t T, int64_t H, int64_t V, int32_t *rows_written, int accumulate);
int qe__cuda_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh);
int qe__cuda_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs, int64_t T,
		      int64_t H, int nh);
int qe__cuda_attn_decode(qe_stream *s, float *out, float *probs, const float *q, const float *k, const float *v,
			 int64_t T, int64_t H, int nh);
int qe__cuda_attn_flash_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias, int64_t B,
			    int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt);
int qe__cuda_attn_flash_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv, const float *qkv_bias,
			    const void *out, const float *lse, int64_t B, int64_t T, int64_t H, int nh,
			    qe_flash_operands operands, qe_dtype dt);
/*
 * The bf16-operand kernels (cuda_flash16.cu), after cuda_flash.cu's checks:
 * qkv, out, dout and dqkv of dt (f32 or bf16); qkv_bias may be NULL.
 */
int qe__cuda_flash16_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias, int64_t B,
			 int T, int H, int nh, qe_dtype dt);
/*
 * The forward on Hopper's warp-group MMA (cuda_flash_wg_fwd.cu) for head
 * dimensions 64 and 128: qkv16 bf16 as the GEMM wrote it, bias the QKV bias
 * or NULL, out of out_dt (f32 or bf16).
 */
int qe__cuda_flashwg_fwd(qe_stream *s, void *out, float *lse, const void *qkv16, const float *qkv_bias, int64_t B,
			 int T, int H, int nh, qe_dtype out_dt);
/* its backward (cuda_flash_wg_bwd.cu): dQ, then dK and dV, from Dt (flash_dot_kernel) and the forward's lse */
int qe__cuda_flashwg_bwd(qe_stream *s, void *dqkv, const void *qkv16, const void *do16, const float *qkv_bias,
			 const float *lse, const float *Dt, int64_t B, int T, int H, int nh, qe_dtype out_dt);
int qe__cuda_flash16_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv, const float *qkv_bias,
			 const void *out, const float *lse, int64_t B, int T, int H, int nh, qe_dtype dt);
/* n rounded up to a multiple of 256: where the next piece of a shared scratch buffer starts */
static inline size_t qe__cuda_align256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}
/* c[r, j] += bias[j] over c [m, n] (gemm's bias add, cuda_gemm.cu); op names the caller */
int qe__cuda_add_bias(qe_stream *s, const char *op, float *c, const float *bias, int64_t m, int64_t n);
/* softmax cross-entropy over f32 or bf16 logits (cuda_xent.cu) */
int qe__cuda_xent(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt, int64_t T,
		  int64_t V, int64_t valid, float grad_scale, qe_dtype dt);
/* xent's loss and each row's max and 1 / sum, no gradient (cuda_xent.cu; the cast's pre_xent reads them) */
int qe__cuda_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt, int64_t T,
		       int64_t V, int64_t valid, qe_dtype dt);
int qe__cuda_adamw(qe_stream *s, const qe_adamw_args *a);
int qe__cuda_adamw_many(qe_stream *s, const qe_adamw_many_args *a);
int qe__cuda_grad_sumsq(qe_stream *s, const qe_adamw_many_args *a, float *out);
int qe__cuda_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n);

/* Set the link ops of the table (NCCL); left NULL when built without NCCL. */
void qe__cuda_link_fill(qe_backend_ops *o);
/* The compute ops' entries of the table (cuda_ops.cu). */
void qe__cuda_ops_fill(qe_backend_ops *o);
/*
 * The op path (cuda_backend.cu): begin resolves *ps (NULL -> the default
 * stream, locked until end; refused while any stream of the process
 * captures) and fails fast on a stream that failed earlier; end finishes the
 * op (the default stream runs it to completion and unlocks) and marks the
 * stream failed when rc is an error, returning rc.
 */
int qe__cuda_op_begin(qe_stream **ps, const char *what);
int qe__cuda_op_end(qe_stream *s, int rc, const char *what);

/* Forget every cached GEMM algorithm (when the last backend closes). */
void qe__cuda_gemm_cache_clear(void);

#ifdef __cplusplus
}
#endif

#endif
