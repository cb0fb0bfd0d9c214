/*
 * cpu_int.h - private interface between the cpu backend's op machinery
 * (cpu_ops.c: the op list's checks and dispatch; cpu_stream.c: streams and
 * capture) and its kernels (cpu_kernels.c, cpu_gemm.c).
 *
 * Kernels receive arguments already checked for shape, dtype and NULLs by
 * cpu_ops.c (through backend_check.c); they check only what depends on data
 * (token ids) and return a status.  Scratch memory belongs to the stream, so
 * a kernel never touches the backend allocator (forbidden while capturing)
 * and two streams used from two threads never share a buffer.
 */
#ifndef QE_CPU_INT_H
#define QE_CPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/backend.h"

/* Grow-only scratch buffers of one stream; freed with the stream. */
#define QE_CPU_SCRATCH_SLOTS 4

typedef struct qe_cpu_scratch {
	float *buf[QE_CPU_SCRATCH_SLOTS];
	size_t cap[QE_CPU_SCRATCH_SLOTS]; /* in floats */
} qe_cpu_scratch;

/* A buffer of at least n floats, 64-byte aligned; NULL (with qe_fail set) when out of memory. */
float *qe_cpu_scratch_get(qe_cpu_scratch *sc, int which, size_t n);
void qe_cpu_scratch_release(qe_cpu_scratch *sc);

/* Max that lets a NaN on either side win: the amax recording rule. */
static inline float qe_cpu_nanmax(float a, float b)
{
	if (a != a)
		return a;
	if (b != b)
		return b;
	return a > b ? a : b;
}

int qe_cpu_gemm(qe_cpu_scratch *sc, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		int accumulate);
/* the cast, its prologue (if any) computed into scratch 0 */
int qe_cpu_cast(qe_cpu_scratch *sc, const qe_cast_args *a);

void qe_cpu_add(float *y, const float *a, const float *b, int64_t n);
void qe_cpu_add_inplace(float *y, const float *a, int64_t n);
/* y = x + bias[c] over [rows, cols] (gemm's bias add; y may be x) */
void qe_cpu_add_bias(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
/* y = a + (b + bias[c]) over [rows, cols] (bias NULL: a + b) */
void qe_cpu_residual_add(float *y, const float *a, const float *b, const float *bias, int64_t rows, int64_t cols);
void qe_cpu_bias_grad(float *db, const float *dy, int64_t rows, int64_t cols);
void qe_cpu_gelu_fwd(float *y, const float *x, int64_t n);
/* bias (NULL or cols floats): x + bias[i % cols] is GELU's input (the cast's GELU-backward prologue) */
void qe_cpu_gelu_bwd(float *dx, const float *x, const float *dy, const float *bias, int64_t n, int64_t cols);
void qe_cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
			  int64_t rows, int64_t cols);
void qe_cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *mean,
			  const float *rstd, const float *w, int64_t rows, int64_t cols, const float *residual);
/* out[r] = wte[tok[r]] + wpe[r % T] (wpe NULL: the token rows alone) */
void qe_cpu_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t rows, int64_t T,
		      int64_t H);
int qe_cpu_embed_bwd(float *dwte, float *dwpe, const int32_t *tok, const float *dout, int64_t rows, int64_t T,
		     int64_t H, int64_t V, int32_t *rows_written, int accumulate);
void qe_cpu_attn_fwd(float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh);
void qe_cpu_attn_decode(float *out, float *probs, const float *q, const float *k, const float *v, int64_t T, int64_t H,
			int nh);
int qe_cpu_attn_bwd(qe_cpu_scratch *sc, float *dqkv, const float *dout, const float *qkv, const float *probs,
		    int64_t T, int64_t H, int nh);
int qe_cpu_attn_flash_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t H, int nh);
void qe_cpu_attn_flash_bwd(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
			   int64_t B, int64_t T, int64_t H, int nh);
int qe_cpu_xent(qe_cpu_scratch *sc, float *loss, void *dlogits, const void *logits, const int32_t *tgt, int64_t T,
		int64_t V, int64_t valid, float grad_scale, qe_dtype dt);
/* xent's loss and each row's softmax statistics (max, 1 / sum) without the gradient */
int qe_cpu_xent_rows(qe_cpu_scratch *sc, float *loss, float *stats, const void *logits, const int32_t *tgt,
		     int64_t T, int64_t V, int64_t valid, qe_dtype dt);
void qe_cpu_adamw(const qe_adamw_args *a);
/* adamw of each segment in turn: the bytes of one qe_cpu_adamw per segment. */
void qe_cpu_adamw_many(const qe_adamw_many_args *a);
void qe_cpu_grad_sumsq(const qe_adamw_many_args *a, float *out);
void qe_cpu_sum_views(float *out, const float *const *views, int nviews, int64_t n);

#endif
