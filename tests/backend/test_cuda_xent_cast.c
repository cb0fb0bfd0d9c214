/*
 * test_cuda_xent_cast.c - the head's backward without a stored gradient, on
 * the GPU: xent_rows keeps each row's softmax max and 1 / sum, and the dY
 * cast makes the logits' gradient from them as it loads the logits
 * (qe_cast_args pre_xent).  For f32 and bf16 logits:
 *
 *  (i)   xent_rows's loss is xent's to the byte; its max is the exact max of
 *        the row's valid logits and its 1 / sum is within 1e-5 of the sum
 *        taken in double on the host (finite, > 0);
 *  (ii)  the cast with pre_xent gives the bytes - row codes, transposed
 *        codes, amax, scale and scale_inv, and the column sums where asked
 *        for - of xent writing its gradient followed by the plain cast of
 *        it, into e5m2 with delayed and with current scaling and into bf16,
 *        through every path the cast picks: the four-wide kernel on GPT-2's
 *        head width (64 x 50304, 50257 valid) and on partial tiles
 *        (132 x 1000), the byte-wide kernel (130 x 1000, 13 x 37), the
 *        streaming xent rows (over 200 KB), column sums in the tile and in
 *        the materialized fallback, the current-scaling amax pass;
 *  (iii) against the cpu's cast with pre_xent (the cpu's own xent_rows
 *        statistics): its expf and left-to-right sum differ from the GPU's
 *        __expf and tree in the last bits, so each decoded code may differ
 *        by one step of the output format at the larger of the two, plus
 *        1e-4 of the largest gradient g = grad_scale / rows (the xent bound
 *        of test_cuda_bf16_act.c) in the codes' scale; the amax by that
 *        1e-4 of g plus one step of the logits' type.  Current scaling is
 *        left out here: its scale follows the amax, so its codes are not
 *        comparable one by one (its bytes are held to the unfused GPU path
 *        in (ii));
 *  (iv)  a padded column (valid..V-1, whose logits here are 40 and NaN)
 *        never gets a nonzero code, in the row-wise or the transposed copy.
 *
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "cuda_pair.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

#define NAME "backend_test_cuda_xent_cast"

#ifdef QE_WITH_CUDA

#define GRAD_SCALE 0.5f
#define DELAYED_SCALE 4096.0f /* e5m2's delayed scale: the gradients (at most g in size) well inside its range */

/* The output configurations of (ii): e5m2 delayed (with the column sums once), e5m2 current, bf16. */
typedef struct out_cfg {
	qe_dtype dt;
	int current;
	const char *name;
} out_cfg;

static const out_cfg CFGS[3] = { { QE_E5M2, 0, "e5m2 delayed" }, { QE_E5M2, 1, "e5m2 current" },
				 { QE_BF16, 0, "bf16" } };

/* One cast's outputs on the GPU: the row-wise and transposed codes, the role (amax, scale, scale_inv), colsum. */
typedef struct gpu_out {
	void *row, *col, *role, *sums;
} gpu_out;

static void out_alloc(gpu_out *o, int64_t n, int64_t cols, size_t esz)
{
	static const float role[3] = { 0.0f, DELAYED_SCALE, 0.0f };
	o->row = g_mem((size_t)n * esz + 1);
	o->col = g_mem((size_t)n * esz + 1);
	o->role = g_mem(sizeof(role));
	o->sums = g_mem((size_t)cols * sizeof(float));
	up(o->role, role, sizeof(role));
}

static void out_free(gpu_out *o)
{
	K.go->free(K.gb, o->row);
	K.go->free(K.gb, o->col);
	K.go->free(K.gb, o->role);
	K.go->free(K.gb, o->sums);
}

/* The cast of x [rows, cols] of type xt into o with configuration c; pre_xent when stats is not NULL. */
static void gpu_cast(const out_cfg *c, const void *x, qe_dtype xt, int64_t rows, int64_t cols, const gpu_out *o,
		     int colsum, const float *stats, const int32_t *tgt, int64_t valid)
{
	qe_cast_args a;
	memset(&a, 0, sizeof(a));
	a.x = qe_tensor_2d((void *)x, xt, QE_DEV_CUDA, rows, cols);
	a.row = qe_tensor_2d(o->row, c->dt, QE_DEV_CUDA, rows, cols);
	a.col = qe_tensor_2d(o->col, c->dt, QE_DEV_CUDA, cols, rows);
	a.amax = o->role;
	a.scale = (float *)o->role + 1;
	a.scale_inv = (float *)o->role + 2;
	a.current = c->current;
	a.colsum = colsum ? o->sums : NULL;
	if (stats) {
		a.pre_xent.stats = stats;
		a.pre_xent.tgt = tgt;
		a.pre_xent.valid = valid;
		a.pre_xent.grad_scale = GRAD_SCALE;
	}
	CHECK_OK(K.go->cast(K.gs, &a));
}

/* A code of dt (e5m2 or bf16) at i decoded to its value, unscaled. */
static double code_value(const void *q, int64_t i, qe_dtype dt)
{
	if (dt == QE_BF16)
		return qe_bf16_to_f32(((const uint16_t *)q)[i]);
	return qe_fp8_decode(((const uint8_t *)q)[i], dt);
}

/* The spacing of dt's values at magnitude v (the step to the next code up): e5m2 or bf16. */
static double step_at(double v, qe_dtype dt)
{
	v = fabs(v);
	if (dt == QE_BF16)
		return v < 0x1p-126 ? 0x1p-133 : ldexp(1.0, ilogb(v) - 7);
	return v < 0x1p-14 ? 0x1p-16 : ldexp(1.0, ilogb(v) - 2);
}

/* (iv): every code of the padded columns, row-wise and transposed, is 0. */
static void no_padding_codes(const char *what, const void *drow, const void *dcol, int64_t rows, int64_t cols,
			     int64_t valid, size_t esz)
{
	size_t bytes = (size_t)(rows * cols) * esz;
	uint8_t *row = (uint8_t *)fetch(drow, bytes), *col = (uint8_t *)fetch(dcol, bytes);
	int64_t bad = 0, nonzero = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			for (size_t b = 0; b < esz; b++) {
				int nz = row[(r * cols + c) * esz + b] != 0, nzt = col[(c * rows + r) * esz + b] != 0;
				if (c >= valid)
					bad += nz + nzt;
				else
					nonzero += nz;
			}
	printf("  %-60s padding codes nonzero %lld, valid codes nonzero %lld\n", what, (long long)bad,
	       (long long)nonzero);
	CHECK(bad == 0, "%s: %lld nonzero code bytes in the padded columns %lld..%lld", what, (long long)bad,
	      (long long)valid, (long long)cols - 1);
	CHECK(nonzero > 0, "%s: every code is 0 (the comparison would prove nothing)", what);
	free(row);
	free(col);
}

/*
 * (iii): the GPU's codes against the cpu's, decoded, within one step of dt at
 * the larger of the two plus tol_abs (in the codes' scale); the amax within
 * amax_tol.
 */
static void near_cpu(const char *what, const void *cpu_row, const float *cpu_role, const void *drow,
		     const void *drole, int64_t n, qe_dtype dt, double tol_abs, double amax_tol)
{
	size_t esz = qe_dtype_size(dt);
	void *row = fetch(drow, (size_t)n * esz);
	float *role = fetch(drole, 3 * sizeof(float));
	double worst = 0.0; /* max of |diff| / bound */
	int64_t at = -1;
	for (int64_t i = 0; i < n; i++) {
		double a = code_value(cpu_row, i, dt), b = code_value(row, i, dt);
		double ratio;
		if (!isfinite(a) || !isfinite(b))
			ratio = (isnan(a) && isnan(b)) || a == b ? 0.0 : INFINITY;
		else
			ratio = fabs(a - b) / (step_at(fmax(fabs(a), fabs(b)), dt) + tol_abs);
		if (ratio > worst) {
			worst = ratio;
			at = i;
		}
	}
	printf("  %-60s max|diff|/bound %.3g  amax cpu %.9g cuda %.9g\n", what, worst, cpu_role[0], role[0]);
	CHECK(worst <= 1.0, "%s: code %lld cpu %.9g cuda %.9g differ by more than a step + %.3g", what, (long long)at,
	      at >= 0 ? code_value(cpu_row, at, dt) : 0.0, at >= 0 ? code_value(row, at, dt) : 0.0, tol_abs);
	CHECK(fabs((double)cpu_role[0] - role[0]) <= amax_tol, "%s: amax cpu %.9g cuda %.9g differ by more than %.3g",
	      what, cpu_role[0], role[0], amax_tol);
	CHECK(cpu_role[2] == role[2], "%s: scale_inv cpu %.9g cuda %.9g", what, cpu_role[2], role[2]);
	free(row);
	free(role);
}

/*
 * (i): loss bytes of xent_rows == xent's; the max exact, 1 / sum within
 * 1e-5 of the host's in double.  w: the logits as f32 (bf16 widened).
 */
static void check_stats(const char *what, const float *w, int64_t T, int64_t V, int64_t valid, const void *gloss_xent,
			const void *gloss_rows, const void *gstats)
{
	float *lx = fetch(gloss_xent, sizeof(float)), *lr = fetch(gloss_rows, sizeof(float));
	char line[200];
	snprintf(line, sizeof(line), "%s: xent_rows loss == xent loss", what);
	same_bytes(line, lx, lr, sizeof(float));
	CHECK(isfinite(*lr) && *lr > 0.0f, "%s: loss %.9g", what, *lr);
	float *st = fetch(gstats, (size_t)(2 * T) * sizeof(float));
	int64_t bad = 0;
	double worst = 0.0;
	for (int64_t t = 0; t < T; t++) {
		const float *l = w + t * V;
		float m = -INFINITY;
		for (int64_t v = 0; v < valid; v++)
			if (l[v] > m)
				m = l[v];
		double sum = 0.0;
		for (int64_t v = 0; v < valid; v++)
			sum += exp((double)l[v] - m);
		float maxv = st[2 * t], inv = st[2 * t + 1];
		double rel = fabs(inv * sum - 1.0);
		if (rel > worst)
			worst = rel;
		if (maxv != m || !isfinite(inv) || !(inv > 0.0f) || !(rel <= 1e-5)) {
			if (bad++ == 0)
				qe_test_fail(__FILE__, __LINE__, "%s: row %lld stats max %.9g inv %.9g, host max %.9g inv %.9g",
					     what, (long long)t, maxv, inv, m, 1.0 / sum);
		}
	}
	printf("  %-60s rows %lld, max |inv*sum - 1| %.3g (bound 1e-5), bad rows %lld\n", what, (long long)T, worst,
	       (long long)bad);
	CHECK(bad == 0, "%s: %lld rows with wrong statistics", what, (long long)bad);
	free(lx);
	free(lr);
	free(st);
}

/*
 * One shape and logits type: xent and xent_rows on the GPU, xent_rows on the
 * cpu, then for each output configuration the unfused GPU path (xent's
 * stored gradient cast plainly), the fused one (pre_xent) and the cpu's
 * fused one.  sums: ask for the column sums in the delayed e5m2 cast.
 */
static void test_case(qe_rng *r, int64_t T, int64_t V, int64_t valid, qe_dtype lt, int sums)
{
	fresh_stream();
	char what[96];
	int64_t n = T * V;
	size_t lsz = qe_dtype_size(lt);
	float *hl = rnd(r, n, 3.0f);
	int32_t *tg = malloc((size_t)T * sizeof(int32_t));
	for (int64_t t = 0; t < T; t++)
		tg[t] = (int32_t)qe_rng_below(r, (uint64_t)valid);
	tg[0] = (int32_t)(valid - 1); /* the last valid column, beside the padding */
	if (T > 1)
		tg[1] = 0;
	for (int64_t t = 0; t < T && valid < V; t++) {
		hl[t * V + V - 1] = 40.0f; /* would dominate the row if the padding were not masked */
		hl[t * V + valid] = NAN;   /* and would spread everywhere if it were read at all */
	}
	/* the logits as stored (bf16 codes or f32) and as the host sees them (w: f32) */
	void *src = hl;
	float *w = hl;
	if (lt == QE_BF16) {
		uint16_t *q = malloc((size_t)n * 2);
		w = malloc((size_t)n * 4);
		for (int64_t i = 0; i < n; i++) {
			q[i] = qe_bf16_from_f32(hl[i]);
			w[i] = qe_bf16_to_f32(q[i]);
		}
		src = q;
	}
	void *gl, *gt, *gd, *gstats;
	void *cl = pair(src, (size_t)n * lsz, &gl);
	int32_t *ct = pair(tg, (size_t)T * sizeof(int32_t), &gt);
	float *cstats = pair(NULL, (size_t)(2 * T) * sizeof(float), &gstats);
	float *closs = c_mem(sizeof(float));
	gd = g_mem((size_t)n * lsz);
	void *gloss_x = g_mem(sizeof(float)), *gloss_r = g_mem(sizeof(float));
	snprintf(what, sizeof(what), "[%lld,%lld] valid %lld %s logits", (long long)T, (long long)V, (long long)valid,
		 qe_dtype_name(lt));
	printf("%s\n", what);

	/* (i) */
	CHECK_OK(K.go->xent(K.gs, gloss_x, gd, gl, gt, T, V, valid, GRAD_SCALE, lt));
	CHECK_OK(K.go->xent_rows(K.gs, gloss_r, gstats, gl, gt, T, V, valid, lt));
	check_stats(what, w, T, V, valid, gloss_x, gloss_r, gstats);
	CHECK_OK(K.co->xent_rows(K.cs, closs, cstats, cl, ct, T, V, valid, lt));
	CHECK_OK(K.co->stream_sync(K.cs));

	double g = (double)(GRAD_SCALE / (float)T); /* the largest gradient's size */
	for (int ci = 0; ci < 3; ci++) {
		const out_cfg *c = &CFGS[ci];
		int colsum = sums && ci == 0;
		size_t esz = qe_dtype_size(c->dt);
		gpu_out plain, fused;
		out_alloc(&plain, n, V, esz);
		out_alloc(&fused, n, V, esz);
		/* (ii) */
		gpu_cast(c, gd, lt, T, V, &plain, colsum, NULL, NULL, 0);
		gpu_cast(c, gl, lt, T, V, &fused, colsum, gstats, gt, valid);
		static const char *part[4] = { "row", "col", "amax/scale/scale_inv", "column sums" };
		void *pv[4] = { plain.row, plain.col, plain.role, plain.sums }, *fv[4] = { fused.row, fused.col, fused.role,
											   fused.sums };
		size_t sizes[4] = { (size_t)n * esz, (size_t)n * esz, 3 * sizeof(float), (size_t)V * sizeof(float) };
		for (int i = 0; i < (colsum ? 4 : 3); i++) {
			char line[200];
			snprintf(line, sizeof(line), "%s -> %s: pre_xent == xent + cast, %s", what, c->name, part[i]);
			same_dev_bytes(line, pv[i], fv[i], sizes[i]);
		}
		float *role = fetch(fused.role, 3 * sizeof(float));
		CHECK(c->dt == QE_BF16 || role[0] > 0.0f, "%s -> %s: no amax recorded", what, c->name);
		free(role);
		/* (iv) */
		char line[200];
		snprintf(line, sizeof(line), "%s -> %s", what, c->name);
		no_padding_codes(line, fused.row, fused.col, T, V, valid, esz);
		/* (iii) */
		if (!c->current) {
			float crole[3] = { 0.0f, DELAYED_SCALE, 0.0f };
			void *crow = c_mem((size_t)n * esz + 1), *ccol = c_mem((size_t)n * esz + 1);
			qe_cast_args a;
			memset(&a, 0, sizeof(a));
			a.x = qe_tensor_2d(cl, lt, QE_DEV_CPU, T, V);
			a.row = qe_tensor_2d(crow, c->dt, QE_DEV_CPU, T, V);
			a.col = qe_tensor_2d(ccol, c->dt, QE_DEV_CPU, V, T);
			a.amax = &crole[0];
			a.scale = &crole[1];
			a.scale_inv = &crole[2];
			a.pre_xent.stats = cstats;
			a.pre_xent.tgt = ct;
			a.pre_xent.valid = valid;
			a.pre_xent.grad_scale = GRAD_SCALE;
			CHECK_OK(K.co->cast(K.cs, &a));
			CHECK_OK(K.co->stream_sync(K.cs));
			double s = c->dt == QE_BF16 ? 1.0 : DELAYED_SCALE;
			double amax_tol = 1e-4 * g + (lt == QE_BF16 ? step_at(crole[0], QE_BF16) : 0.0);
			snprintf(line, sizeof(line), "%s -> %s: cuda ~ cpu", what, c->name);
			near_cpu(line, crow, crole, fused.row, fused.role, n, c->dt, 1e-4 * g * s, amax_tol);
			K.co->free(K.cb, crow);
			K.co->free(K.cb, ccol);
		}
		out_free(&plain);
		out_free(&fused);
	}
	K.co->free(K.cb, cl);
	K.co->free(K.cb, ct);
	K.co->free(K.cb, cstats);
	K.co->free(K.cb, closs);
	void *gbufs[] = { gl, gt, gd, gstats, gloss_x, gloss_r };
	for (size_t i = 0; i < sizeof(gbufs) / sizeof(gbufs[0]); i++)
		K.go->free(K.gb, gbufs[i]);
	if (lt == QE_BF16) {
		free(src);
		free(w);
	}
	free(hl);
	free(tg);
}

int main(void)
{
	qe_rng r;
	int rc = both_open(20261212u, &r);
	if (rc <= 0)
		return rc < 0 ? qe_test_done(NAME) : 0;
	if (!K.go->xent_rows || !K.co->xent_rows) {
		CHECK(0, "xent_rows missing from the %s backend's table", K.go->xent_rows ? "cpu" : "cuda");
		return qe_test_done(NAME);
	}
	static const struct {
		int64_t T, V, valid;
		int sums;
	} shapes[] = {
		{ 64, 50304, 50257, 1 }, /* GPT-2's head width: full 64x64 tiles, padding inside the last */
		{ 132, 1000, 997, 1 },	 /* the four-wide kernel with a partial last row tile and column tile */
		{ 130, 1000, 997, 1 },	 /* rows % 4 != 0: the byte-wide kernel, column sums materialized */
		{ 13, 37, 30, 1 },	 /* odd both ways: the byte-wide kernel */
		{ 4, 120000, 119997, 0 }, /* long rows: 240 KB in bf16, 480 KB in f32 */
	};
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
		for (int k = 0; k < 2; k++)
			test_case(&r, shapes[si].T, shapes[si].V, shapes[si].valid, k ? QE_F32 : QE_BF16,
				  shapes[si].sums);
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif
