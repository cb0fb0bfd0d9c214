/*
 * test_cuda_bf16_act.c - activations stored in bf16 on the GPU against the
 * cpu reference (test_bf16_act.c pins the cpu's forms to the f32 ops):
 *
 *  - the cast of a bf16 x: codes, the role's amax/scale/scale_inv and the
 *    column sums byte for byte those of the cast of x widened to f32, and
 *    (without GELU, whose expf differs in its last bits) of the cpu's,
 *    through every kernel the cast picks (four-wide and byte-wide, delayed
 *    and current scaling, with the bias + GELU prologue, column sums in the
 *    tile and in their own pass);
 *  - GELU's backward prologue with its input u in bf16: the bytes of the
 *    same cast with u widened;
 *  - gemm into a bf16 C from FP8 and bf16 operands: within the f32 GEMM's
 *    bound (test_cuda_ops.c: 1e-3 of max|C| for FP8, 1e-5 for bf16) plus one
 *    bf16 step (2^-8 of max|C|: the two sides may round a value either way
 *    of a tie their f32 results straddle); two cuda runs byte-identical;
 *  - xent over bf16 logits (rows read in uint4 chunks or not, short and
 *    long rows: 240 KB), and f32 rows of 280 KB: loss
 *    within 1e-5, the gradient within 1e-4 of max|dlogits| (f32) plus one
 *    bf16 step (bf16), padded columns exactly 0, dlogits apart and over the
 *    logits.
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "cuda_pair.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

#define NAME "backend_test_cuda_bf16_act"
#define BF16_STEP (1.0 / 256.0)

#ifdef QE_WITH_CUDA

static uint16_t *bf16_codes(const float *x, int64_t n)
{
	uint16_t *q = malloc((size_t)(n > 0 ? n : 1) * 2);
	for (int64_t i = 0; i < n; i++)
		q[i] = qe_bf16_from_f32(x[i]);
	return q;
}

static float *widened(const uint16_t *q, int64_t n)
{
	float *w = malloc((size_t)(n > 0 ? n : 1) * 4);
	for (int64_t i = 0; i < n; i++)
		w[i] = qe_bf16_to_f32(q[i]);
	return w;
}

typedef struct cast16_case {
	int rows, cols;
	qe_dtype dt;
	int current, gelu, colsum;
} cast16_case;

/* One cast on the GPU of x (bf16 or f32, device) with case c's arguments; outputs in o[0..3] (row, col, role, sums). */
static void gpu_cast(const cast16_case *c, void *x, qe_dtype xdt, void *const o[4], void *bias)
{
	static const float role[3] = { 0.25f, 37.5f, 0.0f };
	up(o[2], role, sizeof(role));
	qe_cast_args a;
	memset(&a, 0, sizeof(a));
	a.x = qe_tensor_2d(x, xdt, QE_DEV_CUDA, c->rows, c->cols);
	a.row = qe_tensor_2d(o[0], c->dt, QE_DEV_CUDA, c->rows, c->cols);
	a.col = qe_tensor_2d(o[1], c->dt, QE_DEV_CUDA, c->cols, c->rows);
	a.scale = (float *)o[2] + 1;
	a.amax = o[2];
	a.scale_inv = (float *)o[2] + 2;
	a.current = c->current;
	if (c->gelu) {
		a.pre_bias = bias;
		a.pre_gelu = 1;
	}
	a.colsum = c->colsum ? o[3] : NULL;
	CHECK_OK(K.go->cast(K.gs, &a));
}

/*
 * Each case three times: the cpu on the bf16 x, the GPU on the bf16 x, the
 * GPU on x widened to f32.  The two GPU casts give the same bytes (the bf16
 * path is the f32 path of the widened values); the GPU and the cpu give the
 * same bytes where no GELU runs (GELU's expf differs in its last bits
 * between the two, which the column sums of its values show; the cast
 * tests of test_cuda_ops.c hold the same rule).
 */
static void test_cast(qe_rng *r)
{
	static const cast16_case cases[] = {
		{ 64, 256, QE_E4M3, 0, 0, 0 },	{ 128, 192, QE_E5M2, 0, 0, 1 }, { 128, 192, QE_E4M3, 0, 1, 1 },
		{ 33, 17, QE_E4M3, 0, 0, 0 },	{ 37, 50, QE_E5M2, 0, 1, 1 },	{ 37, 50, QE_E5M2, 0, 0, 1 },
		{ 128, 192, QE_E4M3, 1, 0, 0 }, { 33, 17, QE_E4M3, 1, 1, 0 },	{ 64, 256, QE_BF16, 0, 0, 1 },
		{ 256, 12288, QE_E5M2, 0, 0, 1 },
	};
	printf("cast of a bf16 x\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const cast16_case *c = &cases[ci];
		fresh_stream();
		int64_t n = (int64_t)c->rows * c->cols;
		size_t esz = qe_dtype_size(c->dt), sizes[4] = { n * esz, n * esz, 3 * sizeof(float), c->cols * sizeof(float) };
		float *x = rnd(r, n, 2.0f), *bias = rnd(r, c->cols, 0.5f);
		x[0] = 3e4f;
		uint16_t *q = bf16_codes(x, n);
		float *w = widened(q, n);
		void *gq, *gw, *gbias, *gpu16[4], *gpu32[4];
		uint16_t *cq = pair(q, (size_t)n * 2, &gq);
		pair(w, (size_t)n * 4, &gw);
		float *cbias = pair(bias, (size_t)c->cols * 4, &gbias);
		for (int i = 0; i < 4; i++) {
			gpu16[i] = g_mem(sizes[i] + 1);
			gpu32[i] = g_mem(sizes[i] + 1);
		}
		/* the cpu on the bf16 x */
		float role[3] = { 0.25f, 37.5f, 0.0f };
		uint8_t *crow = c_mem(n * esz + 1), *ccol = c_mem(n * esz + 1);
		float *csum = c_mem((size_t)c->cols * 4);
		qe_cast_args a;
		memset(&a, 0, sizeof(a));
		a.x = qe_tensor_2d(cq, QE_BF16, QE_DEV_CPU, c->rows, c->cols);
		a.row = qe_tensor_2d(crow, c->dt, QE_DEV_CPU, c->rows, c->cols);
		a.col = qe_tensor_2d(ccol, c->dt, QE_DEV_CPU, c->cols, c->rows);
		a.scale = role + 1;
		a.amax = role;
		a.scale_inv = role + 2;
		a.current = c->current;
		if (c->gelu) {
			a.pre_bias = cbias;
			a.pre_gelu = 1;
		}
		a.colsum = c->colsum ? csum : NULL;
		CHECK_OK(K.co->cast(K.cs, &a));
		gpu_cast(c, gq, QE_BF16, gpu16, gbias);
		gpu_cast(c, gw, QE_F32, gpu32, gbias);
		const void *cref[4] = { crow, ccol, role, csum };
		static const char *part[4] = { "row", "col", "amax/scale/scale_inv", "column sums" };
		for (int i = 0; i < 4; i++) {
			if (i == 3 && !c->colsum)
				continue;
			char what[128];
			snprintf(what, sizeof(what), "cast bf16 x %dx%d -> %s%s%s %s: bf16 x == f32 x", c->rows, c->cols,
				 qe_dtype_name(c->dt), c->current ? " current" : "", c->gelu ? " +gelu" : "", part[i]);
			same_dev_bytes(what, gpu16[i], gpu32[i], sizes[i]);
			if (c->gelu)
				continue;
			snprintf(what, sizeof(what), "cast bf16 x %dx%d -> %s%s %s: cuda == cpu", c->rows, c->cols,
				 qe_dtype_name(c->dt), c->current ? " current" : "", part[i]);
			void *h = fetch(gpu16[i], sizes[i]);
			same_bytes(what, cref[i], h, sizes[i]);
			free(h);
		}
		for (int i = 0; i < 4; i++) {
			K.go->free(K.gb, gpu16[i]);
			K.go->free(K.gb, gpu32[i]);
		}
		free(x);
		free(bias);
		free(q);
		free(w);
	}
}

/*
 * GELU's backward prologue with GELU's input u in bf16 on the GPU: the bytes
 * of the same cast with u widened to f32 (x bf16 and f32; four-wide and
 * byte-wide kernels, column sums).
 */
static void test_dgelu_u(qe_rng *r)
{
	static const int shapes[2][2] = { { 128, 192 }, { 37, 50 } };
	printf("GELU backward prologue, u in bf16\n");
	for (int si = 0; si < 2; si++)
		for (int xb = 0; xb < 2; xb++) {
			fresh_stream();
			int rows = shapes[si][0], cols = shapes[si][1];
			int64_t n = (int64_t)rows * cols;
			float *x = rnd(r, n, 0.1f), *u = rnd(r, n, 2.0f), *bias = rnd(r, cols, 0.5f);
			uint16_t *qu = bf16_codes(u, n), *qx = bf16_codes(x, n);
			float *wu = widened(qu, n), *wx = widened(qx, n);
			void *gqu, *gwu, *gx, *gbias, *o[2][4];
			pair(qu, (size_t)n * 2, &gqu);
			pair(wu, (size_t)n * 4, &gwu);
			pair(xb ? (void *)qx : wx, (size_t)n * (xb ? 2 : 4), &gx);
			pair(bias, (size_t)cols * 4, &gbias);
			size_t sizes[4] = { (size_t)n, (size_t)n, 3 * sizeof(float), (size_t)cols * 4 };
			for (int side = 0; side < 2; side++) {
				for (int i = 0; i < 4; i++)
					o[side][i] = g_mem(sizes[i] + 1);
				static const float role[3] = { 0.25f, 1024.0f, 0.0f };
				up(o[side][2], role, sizeof(role));
				qe_cast_args a;
				memset(&a, 0, sizeof(a));
				a.x = qe_tensor_2d(gx, xb ? QE_BF16 : QE_F32, QE_DEV_CUDA, rows, cols);
				a.row = qe_tensor_2d(o[side][0], QE_E5M2, QE_DEV_CUDA, rows, cols);
				a.col = qe_tensor_2d(o[side][1], QE_E5M2, QE_DEV_CUDA, cols, rows);
				a.amax = o[side][2];
				a.scale = (float *)o[side][2] + 1;
				a.scale_inv = (float *)o[side][2] + 2;
				a.colsum = o[side][3];
				a.pre_bias = gbias;
				a.pre_dgelu = side ? gqu : gwu;
				a.pre_dgelu_dtype = side ? QE_BF16 : QE_F32;
				CHECK_OK(K.go->cast(K.gs, &a));
			}
			static const char *part[4] = { "row", "col", "amax/scale/scale_inv", "column sums" };
			for (int i = 0; i < 4; i++) {
				char what[112];
				snprintf(what, sizeof(what), "dgelu cast %dx%d x %s, u bf16 == u f32: %s", rows, cols,
					 xb ? "bf16" : "f32", part[i]);
				same_dev_bytes(what, o[1][i], o[0][i], sizes[i]);
			}
			for (int side = 0; side < 2; side++)
				for (int i = 0; i < 4; i++)
					K.go->free(K.gb, o[side][i]);
			free(x), free(u), free(bias), free(qu), free(qx), free(wu), free(wx);
		}
}

static void test_gemm(qe_rng *r, int m, int n, int k, qe_dtype dt)
{
	fresh_stream();
	float *ha = rnd(r, (int64_t)m * k, 1.0f), *hb = rnd(r, (int64_t)n * k, 1.0f);
	size_t esz = qe_dtype_size(dt);
	uint8_t *qa = malloc((size_t)m * k * esz), *qb = malloc((size_t)n * k * esz);
	float sc[2] = { 1.0f, 1.0f };
	qe_dtype bdt = dt;
	if (dt == QE_BF16) {
		for (int64_t i = 0; i < (int64_t)m * k; i++)
			((uint16_t *)qa)[i] = qe_bf16_from_f32(ha[i]);
		for (int64_t i = 0; i < (int64_t)n * k; i++)
			((uint16_t *)qb)[i] = qe_bf16_from_f32(hb[i]);
	} else {
		bdt = QE_E4M3;
		for (int64_t i = 0; i < (int64_t)m * k; i++)
			qa[i] = qe_fp8_encode(ha[i] * 1000.0f, dt, 1);
		for (int64_t i = 0; i < (int64_t)n * k; i++)
			qb[i] = qe_fp8_encode(hb[i] * 100.0f, bdt, 1);
		sc[0] = 1.0f / 1000.0f;
		sc[1] = 1.0f / 100.0f;
	}
	void *ga, *gb, *gc, *gc2, *gsc, *gdummy;
	void *ca = pair(qa, (size_t)m * k * esz, &ga), *cb = pair(qb, (size_t)n * k * esz, &gb);
	float *cc = pair(NULL, (size_t)m * n * 4, &gdummy), *csc = pair(sc, sizeof(sc), &gsc);
	pair(NULL, (size_t)m * n * 2, &gc);
	pair(NULL, (size_t)m * n * 2, &gc2);
	qe_tensor A[2], B[2];
	for (int side = 0; side < 2; side++) {
		qe_device dev = side ? QE_DEV_CUDA : QE_DEV_CPU;
		A[side] = qe_tensor_2d(side ? ga : ca, dt, dev, m, k);
		B[side] = qe_tensor_2d(side ? gb : cb, bdt, dev, n, k);
		A[side].scale_inv = side ? (float *)gsc : csc;
		B[side].scale_inv = side ? (float *)gsc + 1 : csc + 1;
	}
	qe_tensor C32 = qe_tensor_2d(cc, QE_F32, QE_DEV_CPU, m, n);
	qe_tensor G1 = qe_tensor_2d(gc, QE_BF16, QE_DEV_CUDA, m, n), G2 = G1;
	G2.data = gc2;
	CHECK_OK(K.co->gemm(K.cs, &A[0], &B[0], &C32, NULL, 0));
	CHECK_OK(K.go->gemm(K.gs, &A[1], &B[1], &G1, NULL, 0));
	CHECK_OK(K.go->gemm(K.gs, &A[1], &B[1], &G2, NULL, 0));
	uint16_t *h = (uint16_t *)fetch(gc, (size_t)m * n * 2);
	float *w = widened(h, (int64_t)m * n);
	char what[96];
	snprintf(what, sizeof(what), "gemm %s x %s %dx%dx%d into bf16", qe_dtype_name(dt), qe_dtype_name(bdt), m, n,
		 k);
	close_to(what, cc, w, (int64_t)m * n, (dt == QE_BF16 ? 1e-5 : 1e-3) + BF16_STEP);
	same_dev_bytes("gemm into bf16, two cuda runs", gc, gc2, (size_t)m * n * 2);
	free(h);
	free(w);
	free(ha);
	free(hb);
	free(qa);
	free(qb);
}

/* dt: the logits' type; valid < V: padded columns */
static void test_xent(qe_rng *r, int T, int V, int valid, int alias, qe_dtype dt)
{
	fresh_stream();
	int64_t n = (int64_t)T * V;
	size_t esz = qe_dtype_size(dt);
	float *hl = rnd(r, n, 3.0f);
	int32_t *tg = malloc((size_t)T * 4);
	for (int t = 0; t < T; t++)
		tg[t] = (int32_t)qe_rng_below(r, valid);
	if (valid < V)
		for (int t = 0; t < T; t++)
			hl[(int64_t)t * V + V - 1] = 40.0f; /* a padded logit that would dominate if not masked */
	void *src = hl;
	uint16_t *q = NULL;
	if (dt == QE_BF16)
		src = q = bf16_codes(hl, n);
	void *gl, *gd, *gt, *gloss;
	void *cl = pair(src, n * esz, &gl), *cd = pair(NULL, n * esz, &gd);
	int32_t *ct = pair(tg, (size_t)T * 4, &gt);
	float *closs = pair(NULL, 4, &gloss);
	CHECK_OK(K.co->xent(K.cs, closs, alias ? cl : cd, cl, ct, T, V, valid, 0.5f, dt));
	CHECK_OK(K.go->xent(K.gs, gloss, alias ? gl : gd, gl, gt, T, V, valid, 0.5f, dt));
	char what[112];
	float *h = fetch(gloss, 4);
	snprintf(what, sizeof(what), "xent %s T=%d V=%d valid %d%s loss", qe_dtype_name(dt), T, V, valid,
		 alias ? " (aliased)" : "");
	close_to(what, closs, h, 1, 1e-5);
	free(h);
	void *hd = fetch(alias ? gl : gd, n * esz);
	const void *cref = alias ? cl : cd;
	float *got = dt == QE_BF16 ? widened(hd, n) : hd, *ref = dt == QE_BF16 ? widened(cref, n) : (float *)cref;
	snprintf(what, sizeof(what), "xent %s T=%d V=%d valid %d%s dlogits", qe_dtype_name(dt), T, V, valid,
		 alias ? " (aliased)" : "");
	close_to(what, ref, got, n, dt == QE_BF16 ? 1e-4 + BF16_STEP : 1e-4);
	int nonzero = 0;
	for (int t = 0; t < T; t++)
		for (int v = valid; v < V; v++)
			nonzero += got[(int64_t)t * V + v] != 0.0f;
	CHECK(nonzero == 0, "%s: %d padded columns with a non-zero gradient", what, nonzero);
	if (dt == QE_BF16) {
		free(got);
		free(ref);
	}
	free(hd);
	free(hl);
	free(tg);
	free(q);
}

int main(void)
{
	qe_rng r;
	int rc = both_open(20261206u, &r);
	if (rc <= 0)
		return rc < 0 ? qe_test_done(NAME) : 0;
	test_cast(&r);
	test_dgelu_u(&r);
	printf("gemm into bf16\n");
	test_gemm(&r, 64, 512, 256, QE_E4M3);
	test_gemm(&r, 128, 1024, 768, QE_E5M2);
	test_gemm(&r, 48, 80, 64, QE_BF16);
	test_gemm(&r, 37, 53, 29, QE_BF16);
	printf("xent\n");
	test_xent(&r, 16, 50304, 50257, 0, QE_BF16); /* GPT-2's padded vocabulary: 100 KB rows */
	test_xent(&r, 16, 50304, 50257, 1, QE_BF16);
	test_xent(&r, 5, 1000, 1000, 1, QE_BF16);
	test_xent(&r, 7, 385, 300, 0, QE_BF16);		/* 770-byte rows: not in uint4s */
	test_xent(&r, 3, 120000, 119999, 1, QE_BF16); /* 240 KB rows */
	test_xent(&r, 3, 70000, 70000, 0, QE_F32);	/* 280 KB rows */
	test_xent(&r, 3, 70000, 69000, 1, QE_F32);
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif
