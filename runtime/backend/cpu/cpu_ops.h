/*
 * cpu_ops.h - the cpu backend's op list and the record of one op call
 * (private to runtime/backend/cpu).
 *
 * Every op a cpu stream runs or captures is one entry of QE_CPU_OPS, in the
 * manner of QE_STATUS_LIST (runtime/core/status.h).  An entry X(NAME, name)
 * generates the kind QE_CPU_OP_NAME, the name "name" used in messages, the
 * member `name` of the record's union (of type qe_cpu_name_args), the check
 * and exec cases of the dispatch in cpu_ops.c, and the table entry
 * `.name = qe__cpu_enqueue_name` in cpu_backend.c, which is why `name` is
 * the op's name in qe_backend_ops.  What stays hand-written, once per op, is
 * what differs from op to op: its argument struct below, and in cpu_ops.c (or
 * cpu_stream.c for the stream ops) its check, its exec and its enqueue
 * function with the table's signature.
 *
 * Two lists, because two files run the ops:
 * - QE_CPU_STREAM_OPS: event bookkeeping; cpu_stream.c checks the event when
 *   the op is enqueued and runs the op itself (it touches the stream's
 *   counters).
 * - QE_CPU_WORK_OPS: copies and compute; cpu_ops.c checks them (through
 *   backend_check.c) and runs them (through the kernels of cpu_int.h).
 *
 * A record holds pointers, never data.  Its pointer arrays (AdamW gradient
 * views, summed views, the items of fp8_update_many, adamw_many's segments
 * and their views) belong to the caller
 * until a capture records the op; qe__cpu_op_own then copies them into the
 * record and qe__cpu_op_release frees them with the graph.
 */
#ifndef QE_CPU_OPS_H
#define QE_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/cpu_int.h"

#define QE_CPU_STREAM_OPS(X)         \
	X(EVENT_RECORD, event_record) \
	X(STREAM_WAIT, stream_wait)

#define QE_CPU_WORK_OPS(X)                 \
	X(COPY, copy)                      \
	X(FILL, fill)                      \
	X(CAST, cast)                      \
	X(FP8_UPDATE, fp8_update)          \
	X(FP8_UPDATE_MANY, fp8_update_many) \
	X(GEMM, gemm)                      \
	X(ADD, add)                        \
	X(ADD_INPLACE, add_inplace)        \
	X(RESIDUAL_ADD, residual_add)      \
	X(BIAS_GRAD, bias_grad)            \
	X(GELU_FWD, gelu_fwd)              \
	X(GELU_BWD, gelu_bwd)              \
	X(LAYERNORM_FWD, layernorm_fwd)    \
	X(LAYERNORM_BWD, layernorm_bwd)    \
	X(EMBED_FWD, embed_fwd)            \
	X(EMBED_BWD, embed_bwd)            \
	X(ATTN_FWD, attn_fwd)              \
	X(ATTN_BWD, attn_bwd)              \
	X(ATTN_FLASH_FWD, attn_flash_fwd)  \
	X(ATTN_FLASH_BWD, attn_flash_bwd)  \
	X(ATTN_DECODE, attn_decode)        \
	X(XENT, xent)                      \
	X(XENT_ROWS, xent_rows)            \
	X(ADAMW, adamw)                    \
	X(SUM_VIEWS, sum_views)            \
	X(ADAMW_MANY, adamw_many)          \
	X(GRAD_SUMSQ, grad_sumsq)

#define QE_CPU_OPS(X) QE_CPU_STREAM_OPS(X) QE_CPU_WORK_OPS(X)

typedef enum qe_cpu_op_kind {
#define QE_CPU_OP_KIND_(NAME, name) QE_CPU_OP_##NAME,
	QE_CPU_OPS(QE_CPU_OP_KIND_)
#undef QE_CPU_OP_KIND_
	QE_CPU_OP_COUNT
} qe_cpu_op_kind;

/*
 * The arguments of each op, in the order of its parameters in
 * qe_backend_ops (backend.h says what each means), so an enqueue function
 * fills its struct positionally.
 */
typedef struct qe_cpu_event_args {
	qe_event *ev;
} qe_cpu_event_args;
typedef qe_cpu_event_args qe_cpu_event_record_args;
typedef qe_cpu_event_args qe_cpu_stream_wait_args;

typedef struct qe_cpu_copy_args {
	void *dst;
	const void *src;
	size_t bytes;
	qe_copy_kind kind;
} qe_cpu_copy_args;

typedef struct qe_cpu_fill_args {
	void *dst;
	uint8_t byte;
	size_t bytes;
} qe_cpu_fill_args;

typedef qe_cast_args qe_cpu_cast_args;

typedef struct qe_cpu_fp8_update_args {
	float *block;
	int history_len;
	qe_dtype fmt;
	qe_fp8_recipe recipe;
} qe_cpu_fp8_update_args;

typedef struct qe_cpu_fp8_update_many_args {
	const qe_fp8_update_item *items; /* owned by the record once captured */
	int n;
	int history_len;
	qe_fp8_recipe recipe;
} qe_cpu_fp8_update_many_args;

typedef struct qe_cpu_gemm_args {
	qe_tensor a, b, c; /* copies of the descriptors */
	const float *bias;
	int accumulate;
} qe_cpu_gemm_args;

typedef struct qe_cpu_add_args {
	float *y;
	const float *a, *b;
	int64_t n;
} qe_cpu_add_args;

typedef struct qe_cpu_add_inplace_args {
	float *y;
	const float *a;
	int64_t n;
} qe_cpu_add_inplace_args;

typedef struct qe_cpu_residual_add_args {
	void *y;
	const void *a, *b;
	qe_dtype dt;
	const float *bias;
	int64_t rows, cols;
	float *mean, *rstd;
} qe_cpu_residual_add_args;

typedef struct qe_cpu_bias_grad_args {
	float *db;
	const float *dy;
	int64_t rows, cols;
} qe_cpu_bias_grad_args;

typedef struct qe_cpu_gelu_fwd_args {
	float *y;
	const float *x;
	int64_t n;
} qe_cpu_gelu_fwd_args;

typedef struct qe_cpu_gelu_bwd_args {
	float *dx;
	const float *x, *dy;
	int64_t n;
} qe_cpu_gelu_bwd_args;

typedef struct qe_cpu_layernorm_fwd_args {
	float *y, *mean, *rstd;
	const void *x;
	qe_dtype x_dt;
	const float *w, *b;
	int64_t rows, cols;
} qe_cpu_layernorm_fwd_args;

typedef struct qe_cpu_layernorm_bwd_args {
	void *dx;
	float *dw, *db;
	const void *dy;
	qe_dtype dy_dt;
	const void *x;
	qe_dtype x_dt;
	const float *mean, *rstd, *w;
	int64_t rows, cols;
	const void *residual;
} qe_cpu_layernorm_bwd_args;

typedef struct qe_cpu_embed_fwd_args {
	void *out;
	qe_dtype out_dt;
	const int32_t *tok;
	const float *wte, *wpe;
	int64_t rows, T, H;
} qe_cpu_embed_fwd_args;

typedef struct qe_cpu_embed_bwd_args {
	float *dwte, *dwpe;
	const int32_t *tok;
	const void *dout;
	qe_dtype dout_dt;
	int64_t rows, T, H, V;
	int32_t *rows_written;
	int accumulate;
} qe_cpu_embed_bwd_args;

typedef struct qe_cpu_attn_fwd_args {
	float *out, *probs;
	const float *qkv;
	int64_t T, H;
	int nh;
} qe_cpu_attn_fwd_args;

typedef struct qe_cpu_attn_decode_args {
	float *out, *probs;
	const float *q, *k, *v;
	int64_t T, H;
	int nh;
} qe_cpu_attn_decode_args;

typedef struct qe_cpu_attn_bwd_args {
	float *dqkv;
	const float *dout, *qkv, *probs;
	int64_t T, H;
	int nh;
} qe_cpu_attn_bwd_args;

typedef struct qe_cpu_attn_flash_fwd_args {
	void *out;   /* of dt */
	float *lse;
	const void *qkv; /* of dt */
	const float *qkv_bias;
	int64_t batch, T, H;
	int nh;
	qe_flash_operands operands; /* checked; the cpu computes in fp32 */
	qe_dtype dt;                /* f32, or bf16: read widened exactly, written rounded to nearest even */
} qe_cpu_attn_flash_fwd_args;

typedef struct qe_cpu_attn_flash_bwd_args {
	void *dqkv;      /* of dt */
	const void *dout, *qkv; /* of dt */
	const float *qkv_bias;
	const void *out; /* of dt */
	const float *lse;
	int64_t batch, T, H;
	int nh;
	qe_flash_operands operands;
	qe_dtype dt;
} qe_cpu_attn_flash_bwd_args;

typedef struct qe_cpu_xent_args {
	float *loss;
	void *dlogits;
	const void *logits;
	const int32_t *tgt;
	int64_t T, V, valid;
	float grad_scale;
	qe_dtype dt;
} qe_cpu_xent_args;

typedef struct qe_cpu_xent_rows_args {
	float *loss, *stats;
	const void *logits;
	const int32_t *tgt;
	int64_t T, V, valid;
	qe_dtype dt;
} qe_cpu_xent_rows_args;

typedef qe_adamw_args qe_cpu_adamw_args; /* grads owned by the record once captured */

typedef struct qe_cpu_sum_views_args {
	float *out;
	const float *const *views; /* owned by the record once captured */
	int nviews;
	int64_t n;
} qe_cpu_sum_views_args;

/* segs, and each segment's grads, owned by the record once captured (one block; names cleared) */
typedef qe_adamw_many_args qe_cpu_adamw_many_args;

/* grad_sumsq: adamw_many's arguments (owned as adamw_many's once captured) and where the sums go */
typedef struct qe_cpu_grad_sumsq_args {
	qe_adamw_many_args a;
	float *out;
} qe_cpu_grad_sumsq_args;

/* One op call: its kind and, in the member the list names, its arguments. */
typedef struct qe_cpu_op {
	qe_cpu_op_kind kind;
	union {
#define QE_CPU_OP_MEMBER_(NAME, name) qe_cpu_##name##_args name;
		QE_CPU_OPS(QE_CPU_OP_MEMBER_)
#undef QE_CPU_OP_MEMBER_
	} u;
} qe_cpu_op;

/* The op's name as the table spells it ("layernorm_fwd"); static string. */
const char *qe__cpu_op_name(qe_cpu_op_kind kind);

/*
 * Everything about op that can be checked without reading the data; run
 * when the op is enqueued.  Stream ops pass (cpu_stream.c checked their
 * event before packing them).  QE_OK or a status with the message set.
 */
int qe__cpu_op_check(const qe_cpu_op *op);

/*
 * Run a checked work op with the stream's scratch sc; QE_OK or the status of
 * a data-dependent failure (a token id outside the vocabulary).  Stream ops
 * are not run here.
 */
int qe__cpu_op_exec(qe_cpu_scratch *sc, const qe_cpu_op *op);

/*
 * Give a record about to be captured its own copy of the caller's pointer
 * array, if its op has one.  QE_OK, or QE_ENOMEM with the record unchanged
 * (then it owns nothing).
 */
int qe__cpu_op_own(qe_cpu_op *op);
/* Free what qe__cpu_op_own gave the record. */
void qe__cpu_op_release(qe_cpu_op *op);

/*
 * The table entries of the work ops (qe_backend_ops says what each does).
 * Each packs its arguments into a record and hands it to qe__cpu_submit.
 */
int qe__cpu_enqueue_copy(qe_stream *s, void *dst, const void *src, size_t bytes, qe_copy_kind kind);
int qe__cpu_enqueue_fill(qe_stream *s, void *dst, uint8_t byte, size_t bytes);
int qe__cpu_enqueue_cast(qe_stream *s, const qe_cast_args *a);
int qe__cpu_enqueue_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, qe_fp8_recipe recipe);
int qe__cpu_enqueue_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
				    qe_fp8_recipe recipe);
int qe__cpu_enqueue_gemm(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
			 int accumulate);
int qe__cpu_enqueue_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n);
int qe__cpu_enqueue_add_inplace(qe_stream *s, float *y, const float *a, int64_t n);
int qe__cpu_enqueue_residual_add(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
				 int64_t rows, int64_t cols, float *mean, float *rstd);
int qe__cpu_enqueue_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols);
int qe__cpu_enqueue_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n);
int qe__cpu_enqueue_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n);
int qe__cpu_enqueue_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
				  const float *w, const float *b, int64_t rows, int64_t cols);
int qe__cpu_enqueue_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
				  const void *x, qe_dtype x_dt, const float *mean, const float *rstd, const float *w,
				  int64_t rows, int64_t cols, const void *residual);
int qe__cpu_enqueue_embed_fwd(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
			      const float *wpe, int64_t rows, int64_t T, int64_t H);
int qe__cpu_enqueue_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout,
			      qe_dtype dout_dt, int64_t rows, int64_t T, int64_t H, int64_t V, int32_t *rows_written,
			      int accumulate);
int qe__cpu_enqueue_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh);
int qe__cpu_enqueue_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs,
			     int64_t T, int64_t H, int nh);
int qe__cpu_enqueue_attn_flash_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias,
				   int64_t batch, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt);
int qe__cpu_enqueue_attn_flash_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv,
				   const float *qkv_bias, const void *out, const float *lse, int64_t batch, int64_t T,
				   int64_t H, int nh, qe_flash_operands operands, qe_dtype dt);
int qe__cpu_enqueue_attn_decode(qe_stream *s, float *out, float *probs, const float *q, const float *k,
				 const float *v, int64_t T, int64_t H, int nh);
int qe__cpu_enqueue_xent(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt,
			 int64_t T, int64_t V, int64_t valid, float grad_scale, qe_dtype dt);
int qe__cpu_enqueue_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt,
			      int64_t T, int64_t V, int64_t valid, qe_dtype dt);
int qe__cpu_enqueue_adamw(qe_stream *s, const qe_adamw_args *a);
int qe__cpu_enqueue_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n);
int qe__cpu_enqueue_adamw_many(qe_stream *s, const qe_adamw_many_args *a);
int qe__cpu_enqueue_grad_sumsq(qe_stream *s, const qe_adamw_many_args *a, float *out);

#endif
