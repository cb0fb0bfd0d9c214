/*
 * backend_check.c - the op argument checks shared by the backends (see
 * backend_check.h): the only home of an op's argument rules, so that the cpu
 * reference and the cuda backend cannot drift apart in what they refuse or in
 * the words they refuse it with.
 */
#include "runtime/backend/backend_check.h"

#include <stdio.h>
#include <string.h>

#include "runtime/core/status.h"

static const char *dev_name(qe_device d)
{
	return d == QE_DEV_CUDA ? "cuda" : "cpu";
}

int qe__check_need(const void *p, int64_t count, const char *op, const char *name)
{
	if (count > 0 && !p)
		return qe_fail(QE_EINVAL, "%s: '%s' is NULL", op, name);
	return QE_OK;
}

int qe__check_size(int64_t v, const char *op, const char *name)
{
	if (v < 0)
		return qe_fail(QE_EINVAL, "%s: negative %s (%lld)", op, name, (long long)v);
	return QE_OK;
}

int qe__check_flash(const char *nm, int backward, const void *a, const void *b, const void *qkv, const void *out,
		    const void *lse, int64_t batch, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	int fwd = !backward;
	if (operands != QE_FLASH_TF32 && operands != QE_FLASH_BF16)
		return qe_fail(QE_EINVAL, "%s: operand kind %d (known: %d tf32, %d bf16)", nm, (int)operands,
			       (int)QE_FLASH_TF32, (int)QE_FLASH_BF16);
	if (dt != QE_F32 && dt != QE_BF16)
		return qe_fail(QE_ESHAPE, "%s: activations of %s; must be f32 or bf16", nm, qe_dtype_name(dt));
	if (dt == QE_BF16 && operands != QE_FLASH_BF16)
		return qe_fail(QE_EINVAL, "%s: bf16 activations need bf16 operands (the TF32 kernels take f32)", nm);
	int rc = qe__check_size(batch, nm, "batch");
	if (!rc)
		rc = qe__check_size(T, nm, "T");
	if (!rc)
		rc = qe__check_size(H, nm, "H");
	if (rc)
		return rc;
	if (nh < 1 || H % nh)
		return qe_fail(QE_ESHAPE, "%s: H=%lld is not a multiple of %d heads", nm, (long long)H, nh);
	int64_t D = H / nh;
	if (D != 16 && D != 32 && D != 64 && !(D == 128 && operands == QE_FLASH_BF16))
		return qe_fail(QE_EUNSUPPORTED, "%s: head dimension %lld (H=%lld / %d heads); the flash kernels take 16, 32 "
			       "or 64, and 128 with bf16 operands", nm, (long long)D, (long long)H, nh);
	int64_t N = batch * T;
	rc = qe__check_need(a, fwd ? N * H : N * 3 * H, nm, fwd ? "out" : "dqkv");
	if (!rc)
		rc = qe__check_need(b, fwd ? batch * nh * T : N * H, nm, fwd ? "lse" : "dout");
	if (!rc)
		rc = qe__check_need(qkv, N * 3 * H, nm, "qkv");
	if (!rc && !fwd)
		rc = qe__check_need(out, N * H, nm, "out");
	if (!rc && !fwd)
		rc = qe__check_need(lse, batch * nh * T, nm, "lse");
	return rc;
}

int qe__check_xent(const void *logits, const int32_t *tgt, int64_t T, int64_t V, int64_t valid, qe_dtype dt)
{
	const char *nm = "xent";
	if (dt != QE_F32 && dt != QE_BF16)
		return qe_fail(QE_ESHAPE, "xent: logits of %s; must be f32 or bf16", qe_dtype_name(dt));
	if (T < 1 || V < 1)
		return qe_fail(QE_EINVAL, "xent: T=%lld, V=%lld; both must be >= 1", (long long)T, (long long)V);
	if (valid < 1 || valid > V)
		return qe_fail(QE_EINVAL, "xent: %lld valid columns of %lld; must be in 1..V", (long long)valid,
			       (long long)V);
	int rc = qe__check_need(logits, 1, nm, "logits");
	return rc ? rc : qe__check_need(tgt, 1, nm, "tgt");
}

int qe__check_xent_rows(const float *stats, const void *logits, const int32_t *tgt, int64_t T, int64_t V,
			int64_t valid, qe_dtype dt)
{
	int rc = qe__check_xent(logits, tgt, T, V, valid, dt);
	return rc ? rc : qe__check_need(stats, 2 * T, "xent_rows", "stats");
}

int qe__check_embed_bwd(const float *dwte, const float *dwpe, const int32_t *tok, const void *dout, qe_dtype dout_dt,
			int64_t rows, int64_t T, int64_t H, int64_t V, const int32_t *rows_written, int accumulate)
{
	const char *nm = "embed_bwd";
	int rc;
	if (accumulate && rows_written)
		return qe_fail(QE_EINVAL, "%s: accumulate with rows_written (an accumulating call clears no rows)", nm);
	if (dout_dt != QE_F32 && dout_dt != QE_BF16)
		return qe_fail(QE_EUNSUPPORTED, "%s: dout of type %s (f32 or bf16)", nm, qe_dtype_name(dout_dt));
	if ((rc = qe__check_size(rows, nm, "rows")) || (rc = qe__check_size(H, nm, "H")) ||
	    (rc = qe__check_size(V, nm, "V")) || (rc = qe__check_need(dwte, V * H, nm, "dwte")) ||
	    (rc = qe__check_need(tok, rows, nm, "tok")))
		return rc;
	if (dwpe && rows > 0 && (T < 1 || rows % T != 0))
		return qe_fail(QE_EINVAL, "%s: %lld rows are not whole sequences of %lld positions", nm, (long long)rows,
			       (long long)T);
	return qe__check_need(dout, rows * H, nm, "dout");
}

int qe__check_copy(const void *dst, const void *src, size_t bytes, qe_copy_kind kind)
{
	if ((unsigned)kind > QE_COPY_D2D)
		return qe_fail(QE_EINVAL, "copy: unknown kind %d", (int)kind);
	if (bytes && (!dst || !src))
		return qe_fail(QE_EINVAL, "copy: NULL %s for %zu bytes", dst ? "src" : "dst", bytes);
	return QE_OK;
}

int qe__check_fill(const void *dst, size_t bytes)
{
	return qe__check_need(dst, (int64_t)bytes, "fill", "dst");
}

int qe__check_mem_info(const size_t *free_bytes, const size_t *total_bytes)
{
	if (!free_bytes || !total_bytes)
		return qe_fail(QE_EINVAL, "mem_info: NULL %s pointer", free_bytes ? "total_bytes" : "free_bytes");
	return QE_OK;
}

int qe__check_gemm(const qe_tensor *a, const qe_tensor *b, const qe_tensor *c, const float *bias, int accumulate,
		   qe_device dev)
{
	if (!a || !b || !c)
		return qe_fail(QE_EINVAL, "gemm: NULL tensor descriptor");
	char da[96], db[96], dc[96];
	qe_tensor_describe(a, da, sizeof(da));
	qe_tensor_describe(b, db, sizeof(db));
	qe_tensor_describe(c, dc, sizeof(dc));
	if (a->ndim != 2 || b->ndim != 2 || c->ndim != 2 || a->shape[1] != b->shape[1] ||
	    c->shape[0] != a->shape[0] || c->shape[1] != b->shape[0] || a->shape[0] < 0 || a->shape[1] < 0 ||
	    b->shape[0] < 0)
		return qe_fail(QE_ESHAPE, "gemm: A %s . B %s^T -> C %s: need A [m,k], B [n,k], C [m,n]", da, db, dc);
	if (a->device != dev || b->device != dev || c->device != dev)
		return qe_fail(QE_ESHAPE, "gemm: A %s, B %s, C %s: every operand must be on %s", da, db, dc,
			       dev_name(dev));
	if (c->dtype != QE_F32 && c->dtype != QE_BF16)
		return qe_fail(QE_ESHAPE, "gemm: C %s must be f32 or bf16", dc);
	if (c->dtype == QE_BF16 && (bias || accumulate))
		return qe_fail(QE_EINVAL, "gemm: C %s is bf16, which takes %s", dc,
			       bias ? "no bias (add it where the output is read)" : "no accumulation");
	const qe_tensor *ops[2] = { a, b };
	const char *nm[2] = { "A", "B" };
	for (int i = 0; i < 2; i++) {
		qe_dtype dt = ops[i]->dtype;
		if (dt != QE_F32 && dt != QE_BF16 && dt != QE_E4M3 && dt != QE_E5M2)
			return qe_fail(QE_ESHAPE, "gemm: %s %s is %s; operands must be f32, bf16, e4m3 or e5m2", nm[i],
				       i ? db : da, qe_dtype_name(dt));
		if (qe_dtype_is_fp8(dt) && !ops[i]->scale_inv)
			return qe_fail(QE_EINVAL, "gemm: FP8 operand %s %s has no scale_inv", nm[i], i ? db : da);
	}
	int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
	if (qe__check_need(a->data, m * k, "gemm", "A.data") || qe__check_need(b->data, n * k, "gemm", "B.data") ||
	    qe__check_need(c->data, m * n, "gemm", "C.data"))
		return QE_EINVAL;
	/* C must not overlap an operand: the result is written while they are read. */
	const char *cb = (const char *)c->data, *ce = cb + qe_tensor_nbytes(c);
	for (int i = 0; i < 2; i++) {
		const char *ob = (const char *)ops[i]->data, *oe = ob + qe_tensor_nbytes(ops[i]);
		if (m * n > 0 && qe_tensor_nbytes(ops[i]) > 0 && ob < ce && cb < oe)
			return qe_fail(QE_EINVAL, "gemm: C %s overlaps operand %s %s", dc, nm[i], i ? db : da);
	}
	return QE_OK;
}

int qe__check_cast(const qe_cast_args *a, qe_device dev)
{
	if (!a)
		return qe_fail(QE_EINVAL, "cast: NULL arguments");
	const char *on = dev_name(dev);
	char dx[96], dr[96], dcl[96];
	qe_tensor_describe(&a->x, dx, sizeof(dx));
	qe_tensor_describe(&a->row, dr, sizeof(dr));
	qe_tensor_describe(&a->col, dcl, sizeof(dcl));
	if (a->x.ndim != 2 || (a->x.dtype != QE_F32 && a->x.dtype != QE_BF16) || a->x.device != dev ||
	    a->x.shape[0] < 0 || a->x.shape[1] < 0)
		return qe_fail(QE_ESHAPE, "cast: input x %s must be f32 or bf16 [rows,cols] on %s", dx, on);
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	if (qe__check_need(a->x.data, rows * cols, "cast", "x.data"))
		return QE_EINVAL;
	qe_dtype out = QE_DTYPE_COUNT;
	if (a->row.data) {
		if (a->row.ndim != 2 || a->row.shape[0] != rows || a->row.shape[1] != cols || a->row.device != dev)
			return qe_fail(QE_ESHAPE, "cast: row output %s must be [%lld,%lld] on %s like x %s", dr,
				       (long long)rows, (long long)cols, on, dx);
		out = a->row.dtype;
	}
	if (a->col.data) {
		if (a->col.ndim != 2 || a->col.shape[0] != cols || a->col.shape[1] != rows || a->col.device != dev)
			return qe_fail(QE_ESHAPE, "cast: col output %s must be [%lld,%lld] (x %s transposed) on %s",
				       dcl, (long long)cols, (long long)rows, dx, on);
		if (out != QE_DTYPE_COUNT && out != a->col.dtype)
			return qe_fail(QE_ESHAPE, "cast: row %s and col %s outputs differ in dtype", dr, dcl);
		out = a->col.dtype;
	}
	if (out != QE_DTYPE_COUNT && out != QE_F32 && out != QE_BF16 && !qe_dtype_is_fp8(out))
		return qe_fail(QE_ESHAPE, "cast: output %s has dtype %s; must be f32, bf16, e4m3 or e5m2",
			       a->row.data ? dr : dcl, qe_dtype_name(out));
	if (out != QE_DTYPE_COUNT && qe_dtype_is_fp8(out) && !a->current && !a->scale)
		return qe_fail(QE_EINVAL, "cast: delayed scaling into %s needs a scale pointer", qe_dtype_name(out));
	if (a->row.data && a->col.data && a->row.data == a->col.data)
		return qe_fail(QE_EINVAL, "cast: row and col outputs share one buffer");
	if (a->pre_dgelu && a->pre_dgelu_dtype != QE_F32 && a->pre_dgelu_dtype != QE_BF16)
		return qe_fail(QE_ESHAPE, "cast: GELU's input (pre_dgelu) of x %s is %s; it must be f32 or bf16", dx,
			       qe_dtype_name(a->pre_dgelu_dtype));
	if (a->pre_dgelu && (a->pre_ln.mean || a->pre_gelu))
		return qe_fail(QE_EINVAL, "cast: the GELU backward prologue (pre_dgelu) of x %s together with pre_ln or "
			       "pre_gelu", dx);
	if (a->pre_xent.stats && (a->pre_ln.mean || a->pre_bias || a->pre_gelu || a->pre_dgelu))
		return qe_fail(QE_EINVAL, "cast: the cross-entropy prologue (pre_xent) of logits %s with another prologue",
			       dx);
	if (a->pre_xent.stats && (!a->pre_xent.tgt || a->pre_xent.valid < 1 || a->pre_xent.valid > cols))
		return qe_fail(QE_EINVAL, "cast: the cross-entropy prologue of logits %s needs the targets and 1..%lld "
			       "valid columns (have %lld)", dx, (long long)cols, (long long)a->pre_xent.valid);
	if (a->pre_ln.mean && (!a->pre_ln.rstd || !a->pre_ln.w || !a->pre_ln.b))
		return qe_fail(QE_EINVAL, "cast: layernorm prologue of x %s without rstd, w or b", dx);
	/* with no output written, the cast still scales by the described FP8 dtype (and records amax) */
	if (out == QE_DTYPE_COUNT && (qe_dtype_is_fp8(a->row.dtype) || qe_dtype_is_fp8(a->col.dtype)) && !a->current &&
	    !a->scale)
		return qe_fail(QE_EINVAL, "cast: delayed scaling needs a scale pointer");
	return QE_OK;
}

qe_dtype qe__cast_out_dtype(const qe_cast_args *a)
{
	if (a->row.data)
		return a->row.dtype;
	if (a->col.data)
		return a->col.dtype;
	if (qe_dtype_is_fp8(a->row.dtype))
		return a->row.dtype;
	if (qe_dtype_is_fp8(a->col.dtype))
		return a->col.dtype;
	return QE_F32;
}

int qe__check_fp8_update(const float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r)
{
	if (!block)
		return qe_fail(QE_EINVAL, "fp8_update: NULL role block");
	if (history_len < 1)
		return qe_fail(QE_EINVAL, "fp8_update: history length %d < 1", history_len);
	if (!qe_dtype_is_fp8(fmt))
		return qe_fail(QE_EINVAL, "fp8_update: format %s is not FP8", qe_dtype_name(fmt));
	int rc = qe_fp8_recipe_check(r);
	return rc ? qe_fail_ctx(rc, "fp8_update") : QE_OK;
}

int qe__check_fp8_update_many(const qe_fp8_update_item *items, int n, int history_len, const qe_fp8_recipe *r)
{
	const char *op = "fp8_update_many";
	if (n < 0)
		return qe_fail(QE_EINVAL, "%s: %d items; the count must not be negative", op, n);
	if (n > 0 && !items)
		return qe_fail(QE_EINVAL, "%s: item array is NULL for %d items", op, n);
	if (history_len < 1)
		return qe_fail(QE_EINVAL, "%s: history length %d < 1", op, history_len);
	int rc = qe_fp8_recipe_check(r);
	if (rc)
		return qe_fail_ctx(rc, "%s", op);
	for (int i = 0; i < n; i++) {
		if (!items[i].block)
			return qe_fail(QE_EINVAL, "%s: item %d of %d: NULL role block", op, i, n);
		if (!qe_dtype_is_fp8(items[i].fmt))
			return qe_fail(QE_EINVAL, "%s: item %d of %d: format %s is not FP8", op, i, n,
				       qe_dtype_name(items[i].fmt));
	}
	/*
	 * Overlapping blocks would make the result depend on the order the
	 * blocks run in, which one launch does not fix.  n is the roles of one
	 * stage (tens), so the pairwise test costs nothing.
	 */
	uintptr_t span = ((uintptr_t)history_len + 2) * sizeof(float); /* qe_fp8_role_floats, without int overflow */
	for (int i = 0; i < n; i++) {
		uintptr_t bi = (uintptr_t)items[i].block;
		for (int j = 0; j < i; j++) {
			uintptr_t bj = (uintptr_t)items[j].block;
			if (bi == bj)
				return qe_fail(QE_EINVAL, "%s: item %d of %d repeats the role block of item %d (%p)", op,
					       i, n, j, (void *)items[i].block);
			if (bi < bj + span && bj < bi + span)
				return qe_fail(QE_EINVAL,
					       "%s: item %d of %d: role block %p overlaps that of item %d (%p; %zu bytes each)",
					       op, i, n, (void *)items[i].block, j, (void *)items[j].block, (size_t)span);
		}
	}
	return QE_OK;
}

int qe__check_views(const float *const *views, int nviews, int64_t n, const char *op, int max_views)
{
	if (nviews < 1)
		return qe_fail(QE_EINVAL, "%s: %d views; need at least 1", op, nviews);
	if (max_views > 0 && nviews > max_views)
		return qe_fail(QE_EINVAL, "%s: %d views; this backend passes at most %d", op, nviews, max_views);
	if (!views)
		return qe_fail(QE_EINVAL, "%s: view pointer array is NULL", op);
	for (int i = 0; i < nviews; i++)
		if (n > 0 && !views[i])
			return qe_fail(QE_EINVAL, "%s: view %d of %d is NULL", op, i, nviews);
	return QE_OK;
}

/* n >= 0 and the k arrays of n floats named names[] present: the elementwise ops' rule. */
static int check_floats(const char *op, int64_t n, int k, const float *const *p, const char *const *names)
{
	int rc = qe__check_size(n, op, "n");
	for (int i = 0; i < k && !rc; i++)
		rc = qe__check_need(p[i], n, op, names[i]);
	return rc;
}

int qe__check_add(const float *y, const float *a, const float *b, int64_t n)
{
	return check_floats("add", n, 3, (const float *const[]){ y, a, b }, (const char *const[]){ "y", "a", "b" });
}

int qe__check_add_inplace(const float *y, const float *a, int64_t n)
{
	return check_floats("add_inplace", n, 2, (const float *const[]){ y, a }, (const char *const[]){ "y", "a" });
}

/* f32 or bf16: the types the residual stream and the layernorms' inputs may have */
static int check_act_dtype(const char *op, const char *name, qe_dtype dt)
{
	if (dt != QE_F32 && dt != QE_BF16)
		return qe_fail(QE_EUNSUPPORTED, "%s: %s of type %s (f32 or bf16)", op, name, qe_dtype_name(dt));
	return QE_OK;
}

int qe__check_residual_add(const void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
			    int64_t rows, int64_t cols, const float *mean, const float *rstd)
{
	const char *nm = "residual_add";
	int rc;
	if ((rc = check_act_dtype(nm, "y, a and b", dt)))
		return rc;
	if ((rc = qe__check_size(rows, nm, "rows")) || (rc = qe__check_size(cols, nm, "cols")))
		return rc;
	if (cols > 0 && rows > INT64_MAX / cols)
		return qe_fail(QE_EINVAL, "%s: %lld x %lld elements overflow", nm, (long long)rows, (long long)cols);
	int64_t n = rows * cols;
	if ((rc = qe__check_need(y, n, nm, "y")) || (rc = qe__check_need(a, n, nm, "a")) ||
	    (rc = qe__check_need(b, n, nm, "b")))
		return rc;
	if (!mean != !rstd)
		return qe_fail(QE_EINVAL, "%s: the layernorm statistics need both mean and rstd (%s is NULL)", nm,
			       mean ? "rstd" : "mean");
	if (mean && rows > 0 && cols == 0)
		return qe_fail(QE_EINVAL, "%s: layernorm statistics of %lld rows of 0 columns", nm, (long long)rows);
	return QE_OK;
}

int qe__check_gelu_fwd(const float *y, const float *x, int64_t n)
{
	return check_floats("gelu_fwd", n, 2, (const float *const[]){ y, x }, (const char *const[]){ "y", "x" });
}

int qe__check_gelu_bwd(const float *dx, const float *x, const float *dy, int64_t n)
{
	return check_floats("gelu_bwd", n, 3, (const float *const[]){ dx, x, dy },
			    (const char *const[]){ "dx", "x", "dy" });
}

int qe__check_bias_grad(const float *db, const float *dy, int64_t rows, int64_t cols)
{
	const char *nm = "bias_grad";
	int rc = qe__check_size(rows, nm, "rows");
	if (!rc)
		rc = qe__check_size(cols, nm, "cols");
	if (!rc)
		rc = qe__check_need(db, cols, nm, "db");
	if (!rc)
		rc = qe__check_need(dy, rows * cols, nm, "dy");
	return rc;
}

int qe__check_layernorm_fwd(const float *y, const float *mean, const float *rstd, const void *x, qe_dtype x_dt,
			    const float *w, const float *b, int64_t rows, int64_t cols)
{
	const char *nm = "layernorm_fwd";
	int64_t n = rows * cols;
	int rc = check_act_dtype(nm, "x", x_dt);
	if (!rc)
		rc = qe__check_size(rows, nm, "rows");
	if (!rc)
		rc = qe__check_size(cols, nm, "cols");
	if (!rc && rows > 0 && cols == 0)
		rc = qe_fail(QE_EINVAL, "layernorm_fwd: %lld rows of 0 columns", (long long)rows);
	if (!rc)
		rc = qe__check_need(x, n, nm, "x");
	if (!rc && y)
		rc = qe__check_need(w, n, nm, "w");
	if (!rc && y)
		rc = qe__check_need(b, n, nm, "b");
	/* without y the statistics are the output */
	if (!rc && !y)
		rc = qe__check_need(mean, rows, nm, "mean (y is NULL)");
	if (!rc && !y)
		rc = qe__check_need(rstd, rows, nm, "rstd (y is NULL)");
	return rc;
}

int qe__check_layernorm_bwd(const void *dx, const void *dy, qe_dtype dy_dt, const void *x, qe_dtype x_dt,
			    const float *mean, const float *rstd, const float *w, int64_t rows, int64_t cols)
{
	const char *nm = "layernorm_bwd";
	int64_t n = rows * cols;
	int rc = check_act_dtype(nm, "dy", dy_dt);
	if (!rc)
		rc = check_act_dtype(nm, "x", x_dt);
	if (!rc)
		rc = qe__check_size(rows, nm, "rows");
	if (!rc)
		rc = qe__check_size(cols, nm, "cols");
	if (!rc)
		rc = qe__check_need(dx, n, nm, "dx");
	if (!rc)
		rc = qe__check_need(dy, n, nm, "dy");
	if (!rc)
		rc = qe__check_need(x, n, nm, "x");
	if (!rc)
		rc = qe__check_need(mean, rows, nm, "mean");
	if (!rc)
		rc = qe__check_need(rstd, rows, nm, "rstd");
	if (!rc)
		rc = qe__check_need(w, n, nm, "w");
	return rc;
}

int qe__check_embed_fwd(const void *out, qe_dtype out_dt, const int32_t *tok, const float *wte, const float *wpe,
			int64_t rows, int64_t T, int64_t H)
{
	const char *nm = "embed_fwd";
	int rc = check_act_dtype(nm, "out", out_dt);
	if (!rc)
		rc = qe__check_size(rows, nm, "rows");
	if (!rc)
		rc = qe__check_size(H, nm, "H");
	if (!rc && wpe && rows > 0 && T < 1)
		rc = qe_fail(QE_EINVAL, "%s: positions of sequences of %lld tokens", nm, (long long)T);
	if (!rc && H > 0 && rows > INT64_MAX / H)
		rc = qe_fail(QE_EINVAL, "%s: %lld x %lld elements overflow", nm, (long long)rows, (long long)H);
	if (!rc)
		rc = qe__check_need(out, rows * H, nm, "out");
	if (!rc)
		rc = qe__check_need(tok, rows, nm, "tok");
	if (!rc)
		rc = qe__check_need(wte, rows * H, nm, "wte");
	return rc;
}

/* attn_fwd/bwd's sizes: T, H >= 0, whole heads, and on cuda cuBLAS's int dimensions. */
static int check_attn_sizes(const char *nm, int64_t T, int64_t H, int nh, int cublas_dims)
{
	int rc = qe__check_size(T, nm, "T");
	if (!rc)
		rc = qe__check_size(H, nm, "H");
	if (!rc && (nh < 1 || H % nh != 0))
		rc = qe_fail(QE_ESHAPE, "%s: H=%lld is not a multiple of %d heads", nm, (long long)H, nh);
	if (!rc && cublas_dims && (T > INT32_MAX || H > INT32_MAX / 3))
		rc = qe_fail(QE_EUNSUPPORTED, "%s: T=%lld, H=%lld exceed cuBLAS's int dimensions", nm, (long long)T,
			     (long long)H);
	return rc;
}

int qe__check_attn_fwd(const float *out, const float *probs, const float *qkv, int64_t T, int64_t H, int nh,
		       int cublas_dims)
{
	const char *nm = "attn_fwd";
	int rc = check_attn_sizes(nm, T, H, nh, cublas_dims);
	if (!rc)
		rc = qe__check_need(out, T * H, nm, "out");
	if (!rc)
		rc = qe__check_need(probs, T * H, nm, "probs");
	if (!rc)
		rc = qe__check_need(qkv, T * H, nm, "qkv");
	return rc;
}

/* Whether [a, a + na) and [b, b + nb) floats overlap. */
static int overlaps(const float *a, int64_t na, const float *b, int64_t nb)
{
	return a < b + nb && b < a + na;
}

int qe__check_attn_decode(const float *out, const float *probs, const float *q, const float *k, const float *v,
			  int64_t T, int64_t H, int nh)
{
	const char *nm = "attn_decode";
	int rc = check_attn_sizes(nm, T, H, nh, 0);
	if (!rc && T < 1)
		rc = qe_fail(QE_ESHAPE, "%s: T=%lld: there must be at least one cached position", nm, (long long)T);
	if (!rc)
		rc = qe__check_need(out, H, nm, "out");
	if (!rc)
		rc = qe__check_need(probs, T * nh, nm, "probs");
	if (!rc)
		rc = qe__check_need(q, H, nm, "q");
	if (!rc)
		rc = qe__check_need(k, T * H, nm, "k");
	if (!rc)
		rc = qe__check_need(v, T * H, nm, "v");
	if (!rc && H > 0 &&
	    (overlaps(out, H, q, H) || overlaps(out, H, k, T * H) || overlaps(out, H, v, T * H) ||
	     overlaps(out, H, probs, T * nh)))
		rc = qe_fail(QE_EINVAL, "%s: out overlaps q, k, v or probs", nm);
	return rc;
}

int qe__check_attn_bwd(const float *dqkv, const float *dout, const float *qkv, const float *probs, int64_t T,
		       int64_t H, int nh, int cublas_dims)
{
	const char *nm = "attn_bwd";
	int rc = check_attn_sizes(nm, T, H, nh, cublas_dims);
	if (!rc)
		rc = qe__check_need(dqkv, T * H, nm, "dqkv");
	if (!rc)
		rc = qe__check_need(dout, T * H, nm, "dout");
	if (!rc)
		rc = qe__check_need(qkv, T * H, nm, "qkv");
	if (!rc)
		rc = qe__check_need(probs, T * H, nm, "probs");
	return rc;
}

int qe__check_adamw(const qe_adamw_args *a, int max_views)
{
	const char *nm = "adamw";
	if (!a)
		return qe_fail(QE_EINVAL, "adamw: NULL arguments");
	int rc = qe__check_size(a->n, nm, "n");
	if (!rc)
		rc = qe__check_need(a->param, a->n, nm, "param");
	if (!rc)
		rc = qe__check_need(a->m, a->n, nm, "m");
	if (!rc)
		rc = qe__check_need(a->v, a->n, nm, "v");
	if (!rc)
		rc = qe__check_views(a->grads, a->nviews, a->n, nm, max_views);
	if (!rc && a->step < 1)
		rc = qe_fail(QE_EINVAL, "adamw: step %lld; steps are 1-based", (long long)a->step);
	return rc;
}

/* "adamw_many: segment i of n ('name')": the op name segment i's messages start with. */
static const char *seg_label(char *buf, size_t len, const qe_adamw_many_args *a, int i)
{
	const char *name = a->segs[i].name;
	if (name)
		snprintf(buf, len, "adamw_many: segment %d of %d ('%s')", i, a->nseg, name);
	else
		snprintf(buf, len, "adamw_many: segment %d of %d", i, a->nseg);
	return buf;
}

static int seg_overlaps(const qe_adamw_seg *x, const qe_adamw_seg *y)
{
	return x->n > 0 && y->n > 0 && x->offset < y->offset + y->n && y->offset < x->offset + x->n;
}

static int seg_overlap_fail(const qe_adamw_many_args *a, int i, int j)
{
	char nm[128], other[128];
	const qe_adamw_seg *x = &a->segs[i], *y = &a->segs[j];
	seg_label(nm, sizeof(nm), a, i);
	seg_label(other, sizeof(other), a, j);
	return qe_fail(QE_EINVAL, "%s: floats [%lld, %lld) overlap those of %s, [%lld, %lld)", nm, (long long)x->offset,
		       (long long)(x->offset + x->n), other + strlen("adamw_many: "), (long long)y->offset,
		       (long long)(y->offset + y->n));
}

int qe__check_adamw_many(const qe_adamw_many_args *a, int max_views)
{
	char nm[128];
	if (!a)
		return qe_fail(QE_EINVAL, "adamw_many: NULL arguments");
	if (a->nseg < 0)
		return qe_fail(QE_EINVAL, "adamw_many: %d segments; the count must not be negative", a->nseg);
	if (a->nseg > 0 && !a->segs)
		return qe_fail(QE_EINVAL, "adamw_many: segment array is NULL for %d segments", a->nseg);
	if (a->step < 1)
		return qe_fail(QE_EINVAL, "adamw_many: step %lld; steps are 1-based", (long long)a->step);
	int sorted = 1;
	for (int i = 0; i < a->nseg; i++) {
		const qe_adamw_seg *g = &a->segs[i];
		seg_label(nm, sizeof(nm), a, i);
		int rc = qe__check_size(g->offset, nm, "offset");
		if (!rc)
			rc = qe__check_size(g->n, nm, "n");
		if (!rc && g->offset > INT64_MAX - g->n)
			rc = qe_fail(QE_EINVAL, "%s: offset %lld + n %lld overflows", nm, (long long)g->offset,
				     (long long)g->n);
		if (!rc)
			rc = qe__check_need(a->param, g->n, nm, "param");
		if (!rc)
			rc = qe__check_need(a->m, g->n, nm, "m");
		if (!rc)
			rc = qe__check_need(a->v, g->n, nm, "v");
		if (!rc)
			rc = qe__check_views(g->grads, g->nviews, g->n, nm, max_views);
		if (rc)
			return rc;
		if (i > 0 && g->offset < a->segs[i - 1].offset)
			sorted = 0;
	}
	/*
	 * Overlapping segments would make the result depend on the order the
	 * segments run in, which one launch does not fix.  A stage lists its
	 * parameters in layout order: then a segment can only overlap the one
	 * before it that reaches furthest.  Any other order is compared pair by
	 * pair.
	 */
	int far = -1; /* sorted: the non-empty segment so far whose end is furthest */
	for (int i = 0; i < a->nseg; i++) {
		const qe_adamw_seg *x = &a->segs[i];
		if (x->n == 0)
			continue;
		if (sorted && far >= 0 && seg_overlaps(x, &a->segs[far]))
			return seg_overlap_fail(a, i, far);
		for (int j = 0; !sorted && j < i; j++)
			if (seg_overlaps(x, &a->segs[j]))
				return seg_overlap_fail(a, i, j);
		if (far < 0 || x->offset + x->n > a->segs[far].offset + a->segs[far].n)
			far = i;
	}
	return QE_OK;
}

int qe__check_sum_views(const float *out, const float *const *views, int nviews, int64_t n, int max_views)
{
	const char *nm = "sum_views";
	int rc = qe__check_size(n, nm, "n");
	if (!rc)
		rc = qe__check_need(out, n, nm, "out");
	if (!rc)
		rc = qe__check_views(views, nviews, n, nm, max_views);
	return rc;
}
