/*
 * cpu_ops.c - the cpu backend's work ops: for each, its argument check, its
 * execution and its enqueue function (the table entry), driven by the op
 * list of cpu_ops.h.
 *
 * An op is three short functions side by side: check_<op> hands the packed
 * arguments to the shared check of backend_check.c (one copy of every rule,
 * so cpu and cuda refuse the same calls with the same words), exec_<op> calls
 * the kernel of cpu_int.h, and qe__cpu_enqueue_<op> packs the table's
 * parameters into a record and submits it (cpu_stream.c: run now, or record
 * into a capture).  The dispatch from a record to its check and exec is
 * generated from the list, so an op in the list without its functions does
 * not compile, and no switch has to be kept in step by hand.
 *
 * Kernels receive arguments already checked for shape, dtype and NULLs;
 * they check only what depends on data (token ids).
 */
#include "runtime/backend/cpu/cpu_ops.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/backend/backend_check.h"
#include "runtime/backend/cpu/cpu_stream.h"
#include "runtime/core/status.h"
#include "runtime/fp8/bf16.h"

static const char *const op_names[QE_CPU_OP_COUNT] = {
#define QE_CPU_OP_NAME_(NAME, name) [QE_CPU_OP_##NAME] = #name,
	QE_CPU_OPS(QE_CPU_OP_NAME_)
#undef QE_CPU_OP_NAME_
};

const char *qe__cpu_op_name(qe_cpu_op_kind kind)
{
	return (unsigned)kind < QE_CPU_OP_COUNT ? op_names[kind] : "?";
}

/* A packed record for the stream; the caller's arrays are copied only if a capture records it. */
#define SUBMIT(s, NAME, name, ...) \
	qe__cpu_submit((s), &(qe_cpu_op){ .kind = QE_CPU_OP_##NAME, .u.name = { __VA_ARGS__ } })

/*
 * n values of type dt at x as f32: x itself when it is f32, else widened
 * exactly into scratch slot; NULL when out of memory (said).
 */
static const float *f32_of(qe_cpu_scratch *sc, int slot, const void *x, qe_dtype dt, int64_t n)
{
	if (dt == QE_F32)
		return x;
	float *w = qe_cpu_scratch_get(sc, slot, (size_t)n);
	if (w) {
		const uint16_t *src = x;
		for (int64_t i = 0; i < n; i++)
			w[i] = qe_bf16_to_f32(src[i]);
	}
	return w;
}

/* Where an op writes n values of type dt: y itself when it is f32, else an f32 buffer in scratch slot. */
static float *f32_out(qe_cpu_scratch *sc, int slot, void *y, qe_dtype dt, int64_t n)
{
	return dt == QE_F32 ? y : qe_cpu_scratch_get(sc, slot, (size_t)n);
}

/* The f32 results at f (f32_out) into y of type dt: rounded to nearest even when bf16. */
static void put_out(void *y, const float *f, qe_dtype dt, int64_t n)
{
	if (dt == QE_F32)
		return;
	uint16_t *d = y;
	for (int64_t i = 0; i < n; i++)
		d[i] = qe_bf16_from_f32(f[i]);
}

/*
 * A missing argument struct or descriptor: the stream's own refusal first (a
 * failed stream keeps its first error), else the shared check's, which fails
 * the stream.
 */
static int refuse_null(qe_stream *s, const char *op, int check_rc)
{
	int rc = qe__cpu_stream_check(s, op);
	return rc ? rc : qe__cpu_stream_fail(s, check_rc);
}

/* ---- memory ops ------------------------------------------------------------- */

static int check_copy(const qe_cpu_copy_args *a)
{
	return qe__check_copy(a->dst, a->src, a->bytes, a->kind);
}

static int exec_copy(qe_cpu_scratch *sc, const qe_cpu_copy_args *a)
{
	(void)sc;
	if (a->bytes)
		memmove(a->dst, a->src, a->bytes);
	return QE_OK;
}

int qe__cpu_enqueue_copy(qe_stream *s, void *dst, const void *src, size_t bytes, qe_copy_kind kind)
{
	return SUBMIT(s, COPY, copy, dst, src, bytes, kind);
}

static int check_fill(const qe_cpu_fill_args *a)
{
	return qe__check_fill(a->dst, a->bytes);
}

static int exec_fill(qe_cpu_scratch *sc, const qe_cpu_fill_args *a)
{
	(void)sc;
	if (a->bytes)
		memset(a->dst, a->byte, a->bytes);
	return QE_OK;
}

int qe__cpu_enqueue_fill(qe_stream *s, void *dst, uint8_t byte, size_t bytes)
{
	return SUBMIT(s, FILL, fill, dst, byte, bytes);
}

/* ---- FP8 ---------------------------------------------------------------------- */

static int check_cast(const qe_cpu_cast_args *a)
{
	return qe__check_cast(a, QE_DEV_CPU);
}

static int exec_cast(qe_cpu_scratch *sc, const qe_cpu_cast_args *a)
{
	return qe_cpu_cast(sc, a);
}

int qe__cpu_enqueue_cast(qe_stream *s, const qe_cast_args *a)
{
	if (!a)
		return refuse_null(s, "cast", qe__check_cast(NULL, QE_DEV_CPU));
	return qe__cpu_submit(s, &(qe_cpu_op){ .kind = QE_CPU_OP_CAST, .u.cast = *a });
}

static int check_fp8_update(const qe_cpu_fp8_update_args *a)
{
	return qe__check_fp8_update(a->block, a->history_len, a->fmt, &a->recipe);
}

static int exec_fp8_update(qe_cpu_scratch *sc, const qe_cpu_fp8_update_args *a)
{
	(void)sc;
	qe_fp8_role_update(a->block, a->history_len, a->fmt, &a->recipe);
	return QE_OK;
}

int qe__cpu_enqueue_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, qe_fp8_recipe recipe)
{
	return SUBMIT(s, FP8_UPDATE, fp8_update, block, history_len, fmt, recipe);
}

static int check_fp8_update_many(const qe_cpu_fp8_update_many_args *a)
{
	return qe__check_fp8_update_many(a->items, a->n, a->history_len, &a->recipe);
}

static int exec_fp8_update_many(qe_cpu_scratch *sc, const qe_cpu_fp8_update_many_args *a)
{
	(void)sc;
	for (int i = 0; i < a->n; i++)
		qe_fp8_role_update(a->items[i].block, a->history_len, a->items[i].fmt, &a->recipe);
	return QE_OK;
}

int qe__cpu_enqueue_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
				    qe_fp8_recipe recipe)
{
	return SUBMIT(s, FP8_UPDATE_MANY, fp8_update_many, items, n, history_len, recipe);
}

/* ---- GEMM ----------------------------------------------------------------------- */

static int check_gemm(const qe_cpu_gemm_args *a)
{
	return qe__check_gemm(&a->a, &a->b, &a->c, a->bias, a->accumulate, QE_DEV_CPU);
}

static int exec_gemm(qe_cpu_scratch *sc, const qe_cpu_gemm_args *a)
{
	qe_tensor c = a->c;
	return qe_cpu_gemm(sc, &a->a, &a->b, &c, a->bias, a->accumulate);
}

int qe__cpu_enqueue_gemm(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
			 int accumulate)
{
	if (!a || !b || !c)
		return refuse_null(s, "gemm", qe__check_gemm(a, b, c, bias, accumulate, QE_DEV_CPU));
	return SUBMIT(s, GEMM, gemm, *a, *b, *c, bias, accumulate);
}

/* ---- elementwise and row ops ------------------------------------------------ */

static int check_add(const qe_cpu_add_args *a)
{
	return qe__check_add(a->y, a->a, a->b, a->n);
}

static int exec_add(qe_cpu_scratch *sc, const qe_cpu_add_args *a)
{
	(void)sc;
	qe_cpu_add(a->y, a->a, a->b, a->n);
	return QE_OK;
}

int qe__cpu_enqueue_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n)
{
	return SUBMIT(s, ADD, add, y, a, b, n);
}

static int check_add_inplace(const qe_cpu_add_inplace_args *a)
{
	return qe__check_add_inplace(a->y, a->a, a->n);
}

static int exec_add_inplace(qe_cpu_scratch *sc, const qe_cpu_add_inplace_args *a)
{
	(void)sc;
	qe_cpu_add_inplace(a->y, a->a, a->n);
	return QE_OK;
}

int qe__cpu_enqueue_add_inplace(qe_stream *s, float *y, const float *a, int64_t n)
{
	return SUBMIT(s, ADD_INPLACE, add_inplace, y, a, n);
}

static int check_residual_add(const qe_cpu_residual_add_args *a)
{
	return qe__check_residual_add(a->y, a->a, a->b, a->dt, a->bias, a->rows, a->cols, a->mean, a->rstd);
}

/*
 * slots (bf16): 0 a and 1 b widened, 2 the f32 sum, then y as stored
 * (widened again), which the statistics are taken from
 */
static int exec_residual_add(qe_cpu_scratch *sc, const qe_cpu_residual_add_args *a)
{
	int64_t n = a->rows * a->cols;
	const float *x = f32_of(sc, 0, a->a, a->dt, n), *y = x ? f32_of(sc, 1, a->b, a->dt, n) : NULL;
	float *sum = y ? f32_out(sc, 2, a->y, a->dt, n) : NULL;
	if (!sum)
		return QE_ENOMEM;
	qe_cpu_residual_add(sum, x, y, a->bias, a->rows, a->cols);
	put_out(a->y, sum, a->dt, n);
	if (a->mean) /* the statistics layernorm_fwd would write from y as stored */
		qe_cpu_layernorm_fwd(NULL, a->mean, a->rstd, f32_of(sc, 2, a->y, a->dt, n), NULL, NULL, a->rows,
				     a->cols);
	return QE_OK;
}

int qe__cpu_enqueue_residual_add(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
				 int64_t rows, int64_t cols, float *mean, float *rstd)
{
	return SUBMIT(s, RESIDUAL_ADD, residual_add, y, a, b, dt, bias, rows, cols, mean, rstd);
}

static int check_bias_grad(const qe_cpu_bias_grad_args *a)
{
	return qe__check_bias_grad(a->db, a->dy, a->rows, a->cols);
}

static int exec_bias_grad(qe_cpu_scratch *sc, const qe_cpu_bias_grad_args *a)
{
	(void)sc;
	qe_cpu_bias_grad(a->db, a->dy, a->rows, a->cols);
	return QE_OK;
}

int qe__cpu_enqueue_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols)
{
	return SUBMIT(s, BIAS_GRAD, bias_grad, db, dy, rows, cols);
}

static int check_gelu_fwd(const qe_cpu_gelu_fwd_args *a)
{
	return qe__check_gelu_fwd(a->y, a->x, a->n);
}

static int exec_gelu_fwd(qe_cpu_scratch *sc, const qe_cpu_gelu_fwd_args *a)
{
	(void)sc;
	qe_cpu_gelu_fwd(a->y, a->x, a->n);
	return QE_OK;
}

int qe__cpu_enqueue_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n)
{
	return SUBMIT(s, GELU_FWD, gelu_fwd, y, x, n);
}

static int check_gelu_bwd(const qe_cpu_gelu_bwd_args *a)
{
	return qe__check_gelu_bwd(a->dx, a->x, a->dy, a->n);
}

static int exec_gelu_bwd(qe_cpu_scratch *sc, const qe_cpu_gelu_bwd_args *a)
{
	(void)sc;
	qe_cpu_gelu_bwd(a->dx, a->x, a->dy, NULL, a->n, 1);
	return QE_OK;
}

int qe__cpu_enqueue_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n)
{
	return SUBMIT(s, GELU_BWD, gelu_bwd, dx, x, dy, n);
}

static int check_layernorm_fwd(const qe_cpu_layernorm_fwd_args *a)
{
	return qe__check_layernorm_fwd(a->y, a->mean, a->rstd, a->x, a->x_dt, a->w, a->b, a->rows, a->cols);
}

/* slot 0: x widened when bf16 */
static int exec_layernorm_fwd(qe_cpu_scratch *sc, const qe_cpu_layernorm_fwd_args *a)
{
	const float *x = f32_of(sc, 0, a->x, a->x_dt, a->rows * a->cols);
	if (!x)
		return QE_ENOMEM;
	qe_cpu_layernorm_fwd(a->y, a->mean, a->rstd, x, a->w, a->b, a->rows, a->cols);
	return QE_OK;
}

int qe__cpu_enqueue_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
				  const float *w, const float *b, int64_t rows, int64_t cols)
{
	return SUBMIT(s, LAYERNORM_FWD, layernorm_fwd, y, mean, rstd, x, x_dt, w, b, rows, cols);
}

static int check_layernorm_bwd(const qe_cpu_layernorm_bwd_args *a)
{
	return qe__check_layernorm_bwd(a->dx, a->dy, a->dy_dt, a->x, a->x_dt, a->mean, a->rstd, a->w, a->rows,
				       a->cols);
}

/*
 * slots: 0 dy, 1 x, 2 the residual, each widened when bf16; 3 dx in f32
 * when it is stored in bf16 (the residual, which dx may be, is read first)
 */
static int exec_layernorm_bwd(qe_cpu_scratch *sc, const qe_cpu_layernorm_bwd_args *a)
{
	int64_t n = a->rows * a->cols;
	const float *dy = f32_of(sc, 0, a->dy, a->dy_dt, n), *x = dy ? f32_of(sc, 1, a->x, a->x_dt, n) : NULL;
	const float *res = !x ? NULL : a->residual ? f32_of(sc, 2, a->residual, a->x_dt, n) : x;
	float *dx = res ? f32_out(sc, 3, a->dx, a->x_dt, n) : NULL;
	if (!dx)
		return QE_ENOMEM;
	qe_cpu_layernorm_bwd(dx, a->dw, a->db, dy, x, a->mean, a->rstd, a->w, a->rows, a->cols,
			     a->residual ? res : NULL);
	put_out(a->dx, dx, a->x_dt, n);
	return QE_OK;
}

int qe__cpu_enqueue_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
				  const void *x, qe_dtype x_dt, const float *mean, const float *rstd, const float *w,
				  int64_t rows, int64_t cols, const void *residual)
{
	return SUBMIT(s, LAYERNORM_BWD, layernorm_bwd, dx, dw, db, dy, dy_dt, x, x_dt, mean, rstd, w, rows, cols,
		      residual);
}

/* ---- embedding ----------------------------------------------------------------- */

static int check_embed_fwd(const qe_cpu_embed_fwd_args *a)
{
	return qe__check_embed_fwd(a->out, a->out_dt, a->tok, a->wte, a->wpe, a->rows, a->T, a->H);
}

/* slot 0: the f32 rows when out is bf16 */
static int exec_embed_fwd(qe_cpu_scratch *sc, const qe_cpu_embed_fwd_args *a)
{
	int64_t n = a->rows * a->H;
	float *out = f32_out(sc, 0, a->out, a->out_dt, n);
	if (!out)
		return QE_ENOMEM;
	qe_cpu_embed_fwd(out, a->tok, a->wte, a->wpe, a->rows, a->T, a->H);
	put_out(a->out, out, a->out_dt, n);
	return QE_OK;
}

int qe__cpu_enqueue_embed_fwd(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
			      const float *wpe, int64_t rows, int64_t T, int64_t H)
{
	return SUBMIT(s, EMBED_FWD, embed_fwd, out, out_dt, tok, wte, wpe, rows, T, H);
}

static int check_embed_bwd(const qe_cpu_embed_bwd_args *a)
{
	return qe__check_embed_bwd(a->dwte, a->dwpe, a->tok, a->dout, a->dout_dt, a->rows, a->T, a->H, a->V,
				   a->rows_written, a->accumulate);
}

/* slot 0: dout widened when bf16 */
static int exec_embed_bwd(qe_cpu_scratch *sc, const qe_cpu_embed_bwd_args *a)
{
	const float *dout = f32_of(sc, 0, a->dout, a->dout_dt, a->rows * a->H);
	if (!dout)
		return QE_ENOMEM;
	return qe_cpu_embed_bwd(a->dwte, a->dwpe, a->tok, dout, a->rows, a->T, a->H, a->V, a->rows_written,
				a->accumulate);
}

int qe__cpu_enqueue_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout,
			      qe_dtype dout_dt, int64_t rows, int64_t T, int64_t H, int64_t V, int32_t *rows_written,
			      int accumulate)
{
	return SUBMIT(s, EMBED_BWD, embed_bwd, dwte, dwpe, tok, dout, dout_dt, rows, T, H, V, rows_written, accumulate);
}

/* ---- attention -------------------------------------------------------------------- */

static int check_attn_fwd(const qe_cpu_attn_fwd_args *a)
{
	return qe__check_attn_fwd(a->out, a->probs, a->qkv, a->T, a->H, a->nh, 0);
}

static int exec_attn_fwd(qe_cpu_scratch *sc, const qe_cpu_attn_fwd_args *a)
{
	(void)sc;
	qe_cpu_attn_fwd(a->out, a->probs, a->qkv, a->T, a->H, a->nh);
	return QE_OK;
}

int qe__cpu_enqueue_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh)
{
	return SUBMIT(s, ATTN_FWD, attn_fwd, out, probs, qkv, T, H, nh);
}

static int check_attn_decode(const qe_cpu_attn_decode_args *a)
{
	return qe__check_attn_decode(a->out, a->probs, a->q, a->k, a->v, a->T, a->H, a->nh);
}

static int exec_attn_decode(qe_cpu_scratch *sc, const qe_cpu_attn_decode_args *a)
{
	(void)sc;
	qe_cpu_attn_decode(a->out, a->probs, a->q, a->k, a->v, a->T, a->H, a->nh);
	return QE_OK;
}

int qe__cpu_enqueue_attn_decode(qe_stream *s, float *out, float *probs, const float *q, const float *k,
				 const float *v, int64_t T, int64_t H, int nh)
{
	return SUBMIT(s, ATTN_DECODE, attn_decode, out, probs, q, k, v, T, H, nh);
}

static int check_attn_bwd(const qe_cpu_attn_bwd_args *a)
{
	return qe__check_attn_bwd(a->dqkv, a->dout, a->qkv, a->probs, a->T, a->H, a->nh, 0);
}

static int exec_attn_bwd(qe_cpu_scratch *sc, const qe_cpu_attn_bwd_args *a)
{
	return qe_cpu_attn_bwd(sc, a->dqkv, a->dout, a->qkv, a->probs, a->T, a->H, a->nh);
}

int qe__cpu_enqueue_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs,
			     int64_t T, int64_t H, int nh)
{
	return SUBMIT(s, ATTN_BWD, attn_bwd, dqkv, dout, qkv, probs, T, H, nh);
}

static int check_attn_flash_fwd(const qe_cpu_attn_flash_fwd_args *a)
{
	return qe__check_flash("attn_flash_fwd", 0, a->out, a->lse, a->qkv, NULL, NULL, a->batch, a->T, a->H, a->nh,
			       a->operands, a->dt);
}

/* qkv as f32, plus bias (gemm's f32 add) when there is one: in scratch 0 unless qkv is f32 and unbiased */
static const float *biased_qkv(qe_cpu_scratch *sc, const void *qkv, qe_dtype dt, const float *bias, int64_t rows,
			       int64_t H)
{
	const float *x = f32_of(sc, 0, qkv, dt, rows * 3 * H);
	if (!x || !bias)
		return x;
	float *q = qe_cpu_scratch_get(sc, 0, (size_t)(rows * 3 * H)); /* the same slot: bf16 was widened there */
	if (q)
		qe_cpu_add_bias(q, x, bias, rows, 3 * H);
	return q;
}

/* slots: 0 qkv, 1 out */
static int exec_attn_flash_fwd(qe_cpu_scratch *sc, const qe_cpu_attn_flash_fwd_args *a)
{
	int64_t no = a->batch * a->T * a->H;
	const float *qkv = biased_qkv(sc, a->qkv, a->dt, a->qkv_bias, a->batch * a->T, a->H);
	float *out = qkv ? f32_out(sc, 1, a->out, a->dt, no) : NULL;
	if (!out)
		return QE_ENOMEM;
	int rc = qe_cpu_attn_flash_fwd(out, a->lse, qkv, a->batch, a->T, a->H, a->nh);
	if (!rc)
		put_out(a->out, out, a->dt, no);
	return rc;
}

int qe__cpu_enqueue_attn_flash_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias,
				   int64_t batch, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	return SUBMIT(s, ATTN_FLASH_FWD, attn_flash_fwd, out, lse, qkv, qkv_bias, batch, T, H, nh, operands, dt);
}

static int check_attn_flash_bwd(const qe_cpu_attn_flash_bwd_args *a)
{
	return qe__check_flash("attn_flash_bwd", 1, a->dqkv, a->dout, a->qkv, a->out, a->lse, a->batch, a->T, a->H,
			       a->nh, a->operands, a->dt);
}

/* slots: 0 qkv, 1 dout, 2 out, 3 dqkv */
static int exec_attn_flash_bwd(qe_cpu_scratch *sc, const qe_cpu_attn_flash_bwd_args *a)
{
	int64_t no = a->batch * a->T * a->H, nq = 3 * no;
	const float *qkv = biased_qkv(sc, a->qkv, a->dt, a->qkv_bias, a->batch * a->T, a->H);
	const float *dout = qkv ? f32_of(sc, 1, a->dout, a->dt, no) : NULL;
	const float *out = dout ? f32_of(sc, 2, a->out, a->dt, no) : NULL;
	float *dqkv = out ? f32_out(sc, 3, a->dqkv, a->dt, nq) : NULL;
	if (!dqkv)
		return QE_ENOMEM;
	qe_cpu_attn_flash_bwd(dqkv, dout, qkv, out, a->lse, a->batch, a->T, a->H, a->nh);
	put_out(a->dqkv, dqkv, a->dt, nq);
	return QE_OK;
}

int qe__cpu_enqueue_attn_flash_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv,
				   const float *qkv_bias, const void *out, const float *lse, int64_t batch, int64_t T,
				   int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	return SUBMIT(s, ATTN_FLASH_BWD, attn_flash_bwd, dqkv, dout, qkv, qkv_bias, out, lse, batch, T, H, nh, operands,
		      dt);
}

static int check_xent(const qe_cpu_xent_args *a)
{
	return qe__check_xent(a->logits, a->tgt, a->T, a->V, a->valid, a->dt);
}

static int exec_xent(qe_cpu_scratch *sc, const qe_cpu_xent_args *a)
{
	return qe_cpu_xent(sc, a->loss, a->dlogits, a->logits, a->tgt, a->T, a->V, a->valid, a->grad_scale, a->dt);
}

int qe__cpu_enqueue_xent(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt,
			 int64_t T, int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	return SUBMIT(s, XENT, xent, loss, dlogits, logits, tgt, T, V, valid, grad_scale, dt);
}

static int check_xent_rows(const qe_cpu_xent_rows_args *a)
{
	return qe__check_xent_rows(a->stats, a->logits, a->tgt, a->T, a->V, a->valid, a->dt);
}

static int exec_xent_rows(qe_cpu_scratch *sc, const qe_cpu_xent_rows_args *a)
{
	return qe_cpu_xent_rows(sc, a->loss, a->stats, a->logits, a->tgt, a->T, a->V, a->valid, a->dt);
}

int qe__cpu_enqueue_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt,
			      int64_t T, int64_t V, int64_t valid, qe_dtype dt)
{
	return SUBMIT(s, XENT_ROWS, xent_rows, loss, stats, logits, tgt, T, V, valid, dt);
}

static int check_adamw(const qe_cpu_adamw_args *a)
{
	return qe__check_adamw(a, 0);
}

static int exec_adamw(qe_cpu_scratch *sc, const qe_cpu_adamw_args *a)
{
	(void)sc;
	qe_cpu_adamw(a);
	return QE_OK;
}

int qe__cpu_enqueue_adamw(qe_stream *s, const qe_adamw_args *a)
{
	if (!a)
		return refuse_null(s, "adamw", qe__check_adamw(NULL, 0));
	return qe__cpu_submit(s, &(qe_cpu_op){ .kind = QE_CPU_OP_ADAMW, .u.adamw = *a });
}

static int check_sum_views(const qe_cpu_sum_views_args *a)
{
	return qe__check_sum_views(a->out, a->views, a->nviews, a->n, 0);
}

static int exec_sum_views(qe_cpu_scratch *sc, const qe_cpu_sum_views_args *a)
{
	(void)sc;
	qe_cpu_sum_views(a->out, a->views, a->nviews, a->n);
	return QE_OK;
}

int qe__cpu_enqueue_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n)
{
	return SUBMIT(s, SUM_VIEWS, sum_views, out, views, nviews, n);
}

static int check_adamw_many(const qe_cpu_adamw_many_args *a)
{
	return qe__check_adamw_many(a, 0);
}

static int exec_adamw_many(qe_cpu_scratch *sc, const qe_cpu_adamw_many_args *a)
{
	(void)sc;
	if (a->sumsq)
		qe_cpu_grad_sumsq(a, a->sumsq); /* the same bytes as the grad_sumsq op: read before the update */
	qe_cpu_adamw_many(a);
	return QE_OK;
}

int qe__cpu_enqueue_adamw_many(qe_stream *s, const qe_adamw_many_args *a)
{
	if (!a)
		return refuse_null(s, "adamw_many", qe__check_adamw_many(NULL, 0));
	return qe__cpu_submit(s, &(qe_cpu_op){ .kind = QE_CPU_OP_ADAMW_MANY, .u.adamw_many = *a });
}

static int check_grad_sumsq(const qe_cpu_grad_sumsq_args *a)
{
	int rc = qe__check_adamw_many(&a->a, 0);
	if (!rc && !a->out)
		rc = qe_fail(QE_EINVAL, "grad_sumsq: out is NULL");
	return rc;
}

static int exec_grad_sumsq(qe_cpu_scratch *sc, const qe_cpu_grad_sumsq_args *a)
{
	(void)sc;
	qe_cpu_grad_sumsq(&a->a, a->out);
	return QE_OK;
}

int qe__cpu_enqueue_grad_sumsq(qe_stream *s, const qe_adamw_many_args *a, float *out)
{
	if (!a)
		return refuse_null(s, "grad_sumsq", qe__check_adamw_many(NULL, 0));
	return qe__cpu_submit(s, &(qe_cpu_op){ .kind = QE_CPU_OP_GRAD_SUMSQ, .u.grad_sumsq = { *a, out } });
}

/* ---- dispatch, generated from the op list ------------------------------------------ */

int qe__cpu_op_check(const qe_cpu_op *op)
{
	switch (op->kind) {
#define QE_CPU_OP_CHECK_(NAME, name) \
	case QE_CPU_OP_##NAME:       \
		return check_##name(&op->u.name);
		QE_CPU_WORK_OPS(QE_CPU_OP_CHECK_)
#undef QE_CPU_OP_CHECK_
#define QE_CPU_OP_PASS_(NAME, name) case QE_CPU_OP_##NAME:
		QE_CPU_STREAM_OPS(QE_CPU_OP_PASS_)
#undef QE_CPU_OP_PASS_
		return QE_OK;
	case QE_CPU_OP_COUNT:
		break;
	}
	return qe_fail(QE_EINVAL, "cpu backend: unknown op %d", (int)op->kind);
}

int qe__cpu_op_exec(qe_cpu_scratch *sc, const qe_cpu_op *op)
{
	switch (op->kind) {
#define QE_CPU_OP_EXEC_(NAME, name) \
	case QE_CPU_OP_##NAME:      \
		return exec_##name(sc, &op->u.name);
		QE_CPU_WORK_OPS(QE_CPU_OP_EXEC_)
#undef QE_CPU_OP_EXEC_
	default:
		break;
	}
	return qe_fail(QE_EINVAL, "cpu backend: unknown op %d", (int)op->kind);
}

/* ---- the pointer arrays a captured record owns --------------------------------------- */

/* A copy of n elements of size sz at p (NULL for n == 0); NULL with qe_fail set when out of memory. */
static void *dup_array(const void *p, int n, size_t sz)
{
	if (n <= 0)
		return NULL;
	void *arr = malloc((size_t)n * sz);
	if (arr)
		memcpy(arr, p, (size_t)n * sz);
	return arr;
}

/*
 * adamw_many's segments and all their view pointers in one block (freed as
 * segs): the segments first, then each one's views in segment order.  The
 * names are dropped: only the check, at enqueue, reads them.
 */
static int own_adamw_many(qe_cpu_adamw_many_args *a)
{
	if (a->nseg <= 0) {
		a->segs = NULL;
		return QE_OK;
	}
	size_t nviews = 0;
	for (int i = 0; i < a->nseg; i++)
		nviews += (size_t)a->segs[i].nviews;
	size_t bytes = (size_t)a->nseg * sizeof(qe_adamw_seg) + nviews * sizeof(const float *);
	qe_adamw_seg *segs = malloc(bytes);
	if (!segs)
		return qe_fail(QE_ENOMEM, "capture: copying %d segments (%zu views) of adamw_many", a->nseg, nviews);
	const float **views = (const float **)(segs + a->nseg);
	for (int i = 0; i < a->nseg; i++) {
		segs[i] = a->segs[i];
		segs[i].name = NULL;
		memcpy(views, a->segs[i].grads, (size_t)a->segs[i].nviews * sizeof(*views));
		segs[i].grads = views;
		views += a->segs[i].nviews;
	}
	a->segs = segs;
	return QE_OK;
}

int qe__cpu_op_own(qe_cpu_op *op)
{
	switch (op->kind) {
	case QE_CPU_OP_ADAMW: {
		int nv = op->u.adamw.nviews;
		const float **arr = dup_array(op->u.adamw.grads, nv, sizeof(*arr));
		if (!arr)
			return qe_fail(QE_ENOMEM, "capture: copying %d view pointers of %s", nv, op_names[op->kind]);
		op->u.adamw.grads = arr;
		return QE_OK;
	}
	case QE_CPU_OP_SUM_VIEWS: {
		int nv = op->u.sum_views.nviews;
		const float **arr = dup_array(op->u.sum_views.views, nv, sizeof(*arr));
		if (!arr)
			return qe_fail(QE_ENOMEM, "capture: copying %d view pointers of %s", nv, op_names[op->kind]);
		op->u.sum_views.views = arr;
		return QE_OK;
	}
	case QE_CPU_OP_ADAMW_MANY:
		return own_adamw_many(&op->u.adamw_many);
	case QE_CPU_OP_GRAD_SUMSQ:
		return own_adamw_many(&op->u.grad_sumsq.a);
	case QE_CPU_OP_FP8_UPDATE_MANY: {
		int n = op->u.fp8_update_many.n;
		qe_fp8_update_item *arr = dup_array(op->u.fp8_update_many.items, n, sizeof(*arr));
		if (n > 0 && !arr)
			return qe_fail(QE_ENOMEM, "capture: copying %d items of fp8_update_many", n);
		op->u.fp8_update_many.items = arr;
		return QE_OK;
	}
	default:
		return QE_OK;
	}
}

void qe__cpu_op_release(qe_cpu_op *op)
{
	if (op->kind == QE_CPU_OP_ADAMW)
		free((void *)op->u.adamw.grads);
	else if (op->kind == QE_CPU_OP_SUM_VIEWS)
		free((void *)op->u.sum_views.views);
	else if (op->kind == QE_CPU_OP_FP8_UPDATE_MANY)
		free((void *)op->u.fp8_update_many.items);
	else if (op->kind == QE_CPU_OP_ADAMW_MANY)
		free((void *)op->u.adamw_many.segs);
	else if (op->kind == QE_CPU_OP_GRAD_SUMSQ)
		free((void *)op->u.grad_sumsq.a.segs);
}
