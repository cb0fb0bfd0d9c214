/*
 * backend_check.h - the argument checks every backend runs before an op
 * (private to runtime/backend).  One copy, so that the cpu reference and the
 * cuda backend refuse the same calls with the same messages; only the device
 * the tensors must live on differs.  Each returns QE_OK or a status with the
 * message set (QE_EINVAL for missing pointers and bad counts, QE_ESHAPE for
 * shapes, dtypes and devices).
 *
 * There is one check per op of the table that takes arguments (qe__check_<op>;
 * the two flash ops share qe__check_flash), and a backend adds nothing of its
 * own except its limits, passed in (max_views, cublas_dims).  A pointer the op
 * may take as NULL, or that no backend ever checked (layernorm's mean and rstd
 * forward, dw and db backward; embed_fwd's wpe), is not an argument of its
 * check: the checks refuse exactly what each backend refused on its own.
 */
#ifndef QE_BACKEND_CHECK_H
#define QE_BACKEND_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/backend.h"

/* p may be NULL only when count is 0; name says which argument. */
int qe__check_need(const void *p, int64_t count, const char *op, const char *name);
/* A size argument must not be negative. */
int qe__check_size(int64_t v, const char *op, const char *name);
/* copy: a known kind, and dst and src present when bytes > 0. */
int qe__check_copy(const void *dst, const void *src, size_t bytes, qe_copy_kind kind);
/* fill: dst present when bytes > 0. */
int qe__check_fill(const void *dst, size_t bytes);
/* mem_info: both out pointers present. */
int qe__check_mem_info(const size_t *free_bytes, const size_t *total_bytes);
/*
 * The TN GEMM's operands: shapes, dtypes, scales, device dev, and C
 * overlapping neither.  A NULL descriptor is refused (QE_EINVAL).
 */
int qe__check_gemm(const qe_tensor *a, const qe_tensor *b, const qe_tensor *c, const float *bias, int accumulate,
		   qe_device dev);
/* The cast's input, outputs and scale pointers, on device dev; a NULL a is refused (QE_EINVAL). */
int qe__check_cast(const qe_cast_args *a, qe_device dev);
/*
 * The format a (checked) cast scales into: that of the outputs it writes,
 * else the FP8 dtype the outputs describe, else f32.
 */
qe_dtype qe__cast_out_dtype(const qe_cast_args *a);
/* One fp8_update: a non-NULL role block, history_len >= 1, an FP8 format and a valid recipe. */
int qe__check_fp8_update(const float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r);
/*
 * fp8_update_many: n >= 0, each item as fp8_update (the message names the
 * item), and no two role blocks overlapping.
 */
int qe__check_fp8_update_many(const qe_fp8_update_item *items, int n, int history_len, const qe_fp8_recipe *r);
/*
 * attn_flash_fwd/bwd's sizes and pointers: batch, T, H >= 1, H a multiple of
 * nh with D = H/nh in {16, 32, 64}; a and b are out and lse (forward) or
 * dqkv and dout (backward), c and d qkv and, backward, out and lse;
 * operands a known qe_flash_operands; dt (the activations' type) f32, or
 * bf16 with bf16 operands.
 */
int qe__check_flash(const char *nm, int backward, const void *a, const void *b, const void *qkv, const void *out,
		    const void *lse, int64_t batch, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt);
/* xent's sizes and pointers: T, V >= 1, 1 <= valid <= V, logits and tgt present, dt f32 or bf16. */
int qe__check_xent(const void *logits, const int32_t *tgt, int64_t T, int64_t V, int64_t valid, qe_dtype dt);
/* xent_rows: xent's rule and stats [2T] present. */
int qe__check_xent_rows(const float *stats, const void *logits, const int32_t *tgt, int64_t T, int64_t V,
			int64_t valid, qe_dtype dt);
/*
 * embed_bwd's sizes and pointers (dwpe and rows_written may be NULL; not rows_written with accumulate;
 * dout f32 or bf16; with dwpe, rows a multiple of T >= 1).
 */
int qe__check_embed_bwd(const float *dwte, const float *dwpe, const int32_t *tok, const void *dout, qe_dtype dout_dt,
			int64_t rows, int64_t T, int64_t H, int64_t V, const int32_t *rows_written, int accumulate);
/* nviews in 1..max_views (0: no upper bound) non-NULL views of n floats. */
int qe__check_views(const float *const *views, int nviews, int64_t n, const char *op, int max_views);

/* The elementwise ops: n >= 0 and each array of n floats present. */
int qe__check_add(const float *y, const float *a, const float *b, int64_t n);
int qe__check_add_inplace(const float *y, const float *a, int64_t n);
/* residual_add: dt f32 or bf16, rows, cols >= 0, y, a and b present, mean and rstd both or neither. */
int qe__check_residual_add(const void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
			    int64_t rows, int64_t cols, const float *mean, const float *rstd);
int qe__check_gelu_fwd(const float *y, const float *x, int64_t n);
int qe__check_gelu_bwd(const float *dx, const float *x, const float *dy, int64_t n);
/* bias_grad: rows, cols >= 0, db [cols] and dy [rows, cols] present. */
int qe__check_bias_grad(const float *db, const float *dy, int64_t rows, int64_t cols);
/* layernorm_fwd: rows, cols >= 0, no rows of 0 columns, y, x, w and b present, x f32 or bf16. */
int qe__check_layernorm_fwd(const float *y, const float *mean, const float *rstd, const void *x, qe_dtype x_dt,
			    const float *w, const float *b, int64_t rows, int64_t cols);
/* layernorm_bwd: rows, cols >= 0, dx, dy, x, mean, rstd and w present, dy and x each f32 or bf16. */
int qe__check_layernorm_bwd(const void *dx, const void *dy, qe_dtype dy_dt, const void *x, qe_dtype x_dt,
			    const float *mean, const float *rstd, const float *w, int64_t rows, int64_t cols);
/* embed_fwd: rows, H >= 0, T >= 1 with positions, out f32 or bf16, out, tok and wte present. */
int qe__check_embed_fwd(const void *out, qe_dtype out_dt, const int32_t *tok, const float *wte, const float *wpe,
			int64_t rows, int64_t T, int64_t H);
/*
 * attn_fwd/bwd: T, H >= 0, H a multiple of nh >= 1, and (forward) out, probs,
 * qkv or (backward) dqkv, dout, qkv, probs present.  cublas_dims nonzero
 * (cuda): T and 3H must also fit cuBLAS's int dimensions (QE_EUNSUPPORTED).
 */
int qe__check_attn_fwd(const float *out, const float *probs, const float *qkv, int64_t T, int64_t H, int nh,
		       int cublas_dims);
int qe__check_attn_bwd(const float *dqkv, const float *dout, const float *qkv, const float *probs, int64_t T,
		       int64_t H, int nh, int cublas_dims);
/*
 * attn_decode: T >= 1, H >= 0 a multiple of nh >= 1 (QE_ESHAPE), out, probs,
 * q, k and v present, and out apart from q, k, v and probs (QE_EINVAL).
 */
int qe__check_attn_decode(const float *out, const float *probs, const float *q, const float *k, const float *v,
			  int64_t T, int64_t H, int nh);
/*
 * adamw: a present, n >= 0, param, m, v present, grads as qe__check_views
 * (max_views as there), and a 1-based step.
 */
int qe__check_adamw(const qe_adamw_args *a, int max_views);
/*
 * adamw_many: a present, nseg >= 0, segs present when nseg > 0, a 1-based
 * step, and for each segment (the message names it, and its parameter when
 * it has a name): offset, n >= 0 without overflow, param, m, v present when
 * n > 0, grads as qe__check_views (max_views as there), and no two segments
 * with n > 0 overlapping.
 */
int qe__check_adamw_many(const qe_adamw_many_args *a, int max_views);
/* sum_views: n >= 0, out present, views as qe__check_views (max_views as there). */
int qe__check_sum_views(const float *out, const float *const *views, int nviews, int64_t n, int max_views);

#endif
