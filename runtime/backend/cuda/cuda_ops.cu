/*
 * cuda_ops.cu - the compute ops of the cuda table: each wrapper takes the op
 * path of cuda_backend.cu (resolve the stream, fail fast on a failed one),
 * runs the op's argument check from backend_check.c - the one the cpu
 * backend runs too, so both refuse the same calls with the same messages;
 * only cuda's limits (QE_CUDA_MAX_VIEWS, cuBLAS's int dimensions) are passed
 * in - then the launcher, and marks the stream failed on any error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_int.h"

static int cu_cast(qe_stream *s, const qe_cast_args *a)
{
	int rc = qe__cuda_op_begin(&s, "cast");
	if (rc)
		return rc;
	rc = qe__check_cast(a, QE_DEV_CUDA);
	if (!rc)
		rc = qe__cuda_cast(s, a);
	return qe__cuda_op_end(s, rc, "cast");
}

static int cu_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, qe_fp8_recipe recipe)
{
	int rc = qe__cuda_op_begin(&s, "fp8_update");
	if (rc)
		return rc;
	rc = qe__check_fp8_update(block, history_len, fmt, &recipe);
	if (!rc)
		rc = qe__cuda_fp8_update(s, block, history_len, fmt, &recipe);
	return qe__cuda_op_end(s, rc, "fp8_update");
}

static int cu_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
			      qe_fp8_recipe recipe)
{
	int rc = qe__cuda_op_begin(&s, "fp8_update_many");
	if (rc)
		return rc;
	rc = qe__check_fp8_update_many(items, n, history_len, &recipe);
	if (!rc)
		rc = qe__cuda_fp8_update_many(s, items, n, history_len, &recipe);
	return qe__cuda_op_end(s, rc, "fp8_update_many");
}

static int cu_gemm(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		   int accumulate)
{
	int rc = qe__cuda_op_begin(&s, "gemm");
	if (rc)
		return rc;
	rc = qe__check_gemm(a, b, c, bias, accumulate, QE_DEV_CUDA);
	if (!rc)
		rc = qe__cuda_gemm(s, a, b, c, bias, accumulate);
	return qe__cuda_op_end(s, rc, "gemm");
}

static int cu_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n)
{
	int rc = qe__cuda_op_begin(&s, "add");
	if (rc)
		return rc;
	if (!(rc = qe__check_add(y, a, b, n)))
		rc = qe__cuda_add(s, y, a, b, n);
	return qe__cuda_op_end(s, rc, "add");
}

static int cu_residual_add(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
			   int64_t rows, int64_t cols, float *mean, float *rstd)
{
	int rc = qe__cuda_op_begin(&s, "residual_add");
	if (rc)
		return rc;
	if (!(rc = qe__check_residual_add(y, a, b, dt, bias, rows, cols, mean, rstd)))
		rc = qe__cuda_residual_add(s, y, a, b, dt, bias, rows, cols, mean, rstd);
	return qe__cuda_op_end(s, rc, "residual_add");
}

static int cu_add_inplace(qe_stream *s, float *y, const float *a, int64_t n)
{
	int rc = qe__cuda_op_begin(&s, "add_inplace");
	if (rc)
		return rc;
	if (!(rc = qe__check_add_inplace(y, a, n)))
		rc = qe__cuda_add_inplace(s, y, a, n);
	return qe__cuda_op_end(s, rc, "add_inplace");
}

static int cu_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols)
{
	const char *nm = "bias_grad";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_bias_grad(db, dy, rows, cols)))
		rc = qe__cuda_bias_grad(s, db, dy, rows, cols);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n)
{
	int rc = qe__cuda_op_begin(&s, "gelu_fwd");
	if (rc)
		return rc;
	if (!(rc = qe__check_gelu_fwd(y, x, n)))
		rc = qe__cuda_gelu_fwd(s, y, x, n);
	return qe__cuda_op_end(s, rc, "gelu_fwd");
}

static int cu_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n)
{
	int rc = qe__cuda_op_begin(&s, "gelu_bwd");
	if (rc)
		return rc;
	if (!(rc = qe__check_gelu_bwd(dx, x, dy, n)))
		rc = qe__cuda_gelu_bwd(s, dx, x, dy, n);
	return qe__cuda_op_end(s, rc, "gelu_bwd");
}

static int cu_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
			    const float *w, const float *b, int64_t rows, int64_t cols)
{
	const char *nm = "layernorm_fwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_layernorm_fwd(y, mean, rstd, x, x_dt, w, b, rows, cols)))
		rc = qe__cuda_layernorm_fwd(s, y, mean, rstd, x, x_dt, w, b, rows, cols);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
			    const void *x, qe_dtype x_dt, const float *mean, const float *rstd, const float *w,
			    int64_t rows, int64_t cols, const void *residual)
{
	const char *nm = "layernorm_bwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_layernorm_bwd(dx, dy, dy_dt, x, x_dt, mean, rstd, w, rows, cols)))
		rc = qe__cuda_layernorm_bwd(s, dx, dw, db, dy, dy_dt, x, x_dt, mean, rstd, w, rows, cols, residual);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_embed_fwd(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
			const float *wpe, int64_t rows, int64_t T, int64_t H)
{
	const char *nm = "embed_fwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_embed_fwd(out, out_dt, tok, wte, wpe, rows, T, H)))
		rc = qe__cuda_embed_fwd(s, out, out_dt, tok, wte, wpe, rows, T, H);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout,
			qe_dtype dout_dt, int64_t rows, int64_t T, int64_t H, int64_t V, int32_t *rows_written,
			int accumulate)
{
	const char *nm = "embed_bwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_embed_bwd(dwte, dwpe, tok, dout, dout_dt, rows, T, H, V, rows_written, accumulate)))
		rc = qe__cuda_embed_bwd(s, dwte, dwpe, tok, dout, dout_dt, rows, T, H, V, rows_written, accumulate);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh)
{
	const char *nm = "attn_fwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_attn_fwd(out, probs, qkv, T, H, nh, 1)))
		rc = qe__cuda_attn_fwd(s, out, probs, qkv, T, H, nh);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_attn_decode(qe_stream *s, float *out, float *probs, const float *q, const float *k, const float *v,
			  int64_t T, int64_t H, int nh)
{
	const char *nm = "attn_decode";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_attn_decode(out, probs, q, k, v, T, H, nh)))
		rc = qe__cuda_attn_decode(s, out, probs, q, k, v, T, H, nh);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs, int64_t T,
		       int64_t H, int nh)
{
	const char *nm = "attn_bwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_attn_bwd(dqkv, dout, qkv, probs, T, H, nh, 1)))
		rc = qe__cuda_attn_bwd(s, dqkv, dout, qkv, probs, T, H, nh);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_attn_flash_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias,
			     int64_t batch, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	const char *nm = "attn_flash_fwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_flash(nm, 0, out, lse, qkv, NULL, NULL, batch, T, H, nh, operands, dt)))
		rc = qe__cuda_attn_flash_fwd(s, out, lse, qkv, qkv_bias, batch, T, H, nh, operands, dt);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_attn_flash_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv, const float *qkv_bias,
			     const void *out, const float *lse, int64_t batch, int64_t T, int64_t H, int nh,
			     qe_flash_operands operands, qe_dtype dt)
{
	const char *nm = "attn_flash_bwd";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_flash(nm, 1, dqkv, dout, qkv, out, lse, batch, T, H, nh, operands, dt)))
		rc = qe__cuda_attn_flash_bwd(s, dqkv, dout, qkv, qkv_bias, out, lse, batch, T, H, nh, operands, dt);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_xent(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt, int64_t T,
		   int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	const char *nm = "xent";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_xent(logits, tgt, T, V, valid, dt)))
		rc = qe__cuda_xent(s, loss, dlogits, logits, tgt, T, V, valid, grad_scale, dt);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt, int64_t T,
			int64_t V, int64_t valid, qe_dtype dt)
{
	const char *nm = "xent_rows";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_xent_rows(stats, logits, tgt, T, V, valid, dt)))
		rc = qe__cuda_xent_rows(s, loss, stats, logits, tgt, T, V, valid, dt);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_adamw(qe_stream *s, const qe_adamw_args *a)
{
	const char *nm = "adamw";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_adamw(a, QE_CUDA_MAX_VIEWS)))
		rc = qe__cuda_adamw(s, a);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n)
{
	const char *nm = "sum_views";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_sum_views(out, views, nviews, n, QE_CUDA_MAX_VIEWS)))
		rc = qe__cuda_sum_views(s, out, views, nviews, n);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_adamw_many(qe_stream *s, const qe_adamw_many_args *a)
{
	const char *nm = "adamw_many";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_adamw_many(a, QE_CUDA_MAX_VIEWS)))
		rc = qe__cuda_adamw_many(s, a);
	return qe__cuda_op_end(s, rc, nm);
}

static int cu_grad_sumsq(qe_stream *s, const qe_adamw_many_args *a, float *out)
{
	const char *nm = "grad_sumsq";
	int rc = qe__cuda_op_begin(&s, nm);
	if (rc)
		return rc;
	if (!(rc = qe__check_adamw_many(a, QE_CUDA_MAX_VIEWS)) && !out)
		rc = qe_fail(QE_EINVAL, "grad_sumsq: out is NULL");
	if (!rc)
		rc = qe__cuda_grad_sumsq(s, a, out);
	return qe__cuda_op_end(s, rc, nm);
}

/* The compute ops' entries of the cuda table (cuda_backend.cu fills the rest). */
void qe__cuda_ops_fill(qe_backend_ops *o)
{
	o->cast = cu_cast;
	o->fp8_update = cu_fp8_update;
	o->fp8_update_many = cu_fp8_update_many;
	o->gemm = cu_gemm;
	o->add = cu_add;
	o->add_inplace = cu_add_inplace;
	o->residual_add = cu_residual_add;
	o->bias_grad = cu_bias_grad;
	o->gelu_fwd = cu_gelu_fwd;
	o->gelu_bwd = cu_gelu_bwd;
	o->layernorm_fwd = cu_layernorm_fwd;
	o->layernorm_bwd = cu_layernorm_bwd;
	o->embed_fwd = cu_embed_fwd;
	o->embed_bwd = cu_embed_bwd;
	o->attn_fwd = cu_attn_fwd;
	o->attn_bwd = cu_attn_bwd;
	o->attn_decode = cu_attn_decode;
	o->attn_flash_fwd = cu_attn_flash_fwd;
	o->attn_flash_bwd = cu_attn_flash_bwd;
	o->xent = cu_xent;
	o->xent_rows = cu_xent_rows;
	o->adamw = cu_adamw;
	o->sum_views = cu_sum_views;
	o->adamw_many = cu_adamw_many;
	o->grad_sumsq = cu_grad_sumsq;
}
