/*
 * backend_check.h - the argument checks every backend runs before an op
 * (private to runtime/backend).  One copy, so that the cpu reference and the
 * cuda backend refuse the same calls with the same messages; only the device
 * the tensors must live on differs.  Each returns QE_OK or a status with the
 * message set (QE_EINVAL for missing pointers and bad counts, QE_ESHAPE for
 * shapes, dtypes and devices).
 */
#ifndef QE_BACKEND_CHECK_H
#define QE_BACKEND_CHECK_H

#include <stdint.h>

#include "runtime/backend/backend.h"

/* p may be NULL only when count is 0; name says which argument. */
int qe__check_need(const void *p, int64_t count, const char *op, const char *name);
/* A size argument must not be negative. */
int qe__check_size(int64_t v, const char *op, const char *name);
/* The TN GEMM's operands: shapes, dtypes, scales, device dev, and C overlapping neither. */
int qe__check_gemm(const qe_tensor *a, const qe_tensor *b, const qe_tensor *c, qe_device dev);
/* The cast's input, outputs and scale pointers, on device dev. */
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
 * dqkv and dout (backward), c and d qkv and, backward, out and lse.
 */
int qe__check_flash(const char *nm, int backward, const void *a, const void *b, const void *qkv, const void *out,
		    const void *lse, int64_t batch, int64_t T, int64_t H, int nh);
/* xent's sizes and pointers: T, V >= 1, 1 <= valid <= V, logits and tgt present. */
int qe__check_xent(const float *logits, const int32_t *tgt, int64_t T, int64_t V, int64_t valid);
/* embed_bwd's sizes and pointers (dwpe and rows_written may be NULL). */
int qe__check_embed_bwd(const float *dwte, const int32_t *tok, const float *dout, int64_t T, int64_t H, int64_t V);
/* nviews in 1..max_views (0: no upper bound) non-NULL views of n floats. */
int qe__check_views(const float *const *views, int nviews, int64_t n, const char *op, int max_views);

#endif
