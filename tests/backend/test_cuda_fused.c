/*
 * test_cuda_fused.c - the fused forms the model runs give, on the GPU, the bytes
 * of the ops they replace, run there too (the cpu checks the same
 * identities in test_fused.c): the cast's prologues (FC1's bias and GELU,
 * the layernorm from its statistics, GELU's backward) and its column sums,
 * residual_add (also against the cpu, f32 and bf16), layernorm_bwd
 * with a residual (also in place, f32 and bf16), and flash attention with
 * the QKV bias, through every kernel each picks (four-wide and byte-wide
 * casts, current scaling, bf16, f32; row-in-registers and plain
 * layernorms; bf16 and TF32 flash).
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "cuda_pair.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

#define NAME "backend_test_cuda_fused"

#ifdef QE_WITH_CUDA

/* one cast shape: x [rows, cols] into dt, delayed or current scaling */
typedef struct cast_case {
	int rows, cols;
	qe_dtype dt;
	int current;
} cast_case;

/*
 * Two casts of the same shape on the GPU, each into outputs and a role block
 * of its own: [0] casts what the unfused ops wrote, [1] is the fused form.
 */
typedef struct cast_twins {
	const cast_case *c;
	void *row[2], *col[2], *role[2];
	char name[96];
} cast_twins;

static const float twin_role[3] = { 0.25f, 37.5f, 0.0f }; /* amax history row, scale, scale_inv */

static void twins_init(cast_twins *t, const cast_case *c, const char *kind)
{
	size_t nb = (size_t)c->rows * c->cols * qe_dtype_size(c->dt) + 1;
	t->c = c;
	for (int k = 0; k < 2; k++) {
		t->row[k] = g_mem(nb);
		t->col[k] = g_mem(nb);
		t->role[k] = g_mem(sizeof(twin_role));
		up(t->role[k], twin_role, sizeof(twin_role));
	}
	snprintf(t->name, sizeof(t->name), "%s %dx%d %s%s", kind, c->rows, c->cols, qe_dtype_name(c->dt),
		 c->current ? " current" : "");
}

/* cast k's arguments on x (device); the caller adds the fused fields */
static qe_cast_args twins_args(const cast_twins *t, int k, const void *x)
{
	const cast_case *c = t->c;
	qe_cast_args a = { .x = qe_tensor_2d((void *)x, QE_F32, QE_DEV_CUDA, c->rows, c->cols),
			   .row = qe_tensor_2d(t->row[k], c->dt, QE_DEV_CUDA, c->rows, c->cols),
			   .col = qe_tensor_2d(t->col[k], c->dt, QE_DEV_CUDA, c->cols, c->rows),
			   .scale = (float *)t->role[k] + 1,
			   .amax = t->role[k],
			   .scale_inv = (float *)t->role[k] + 2,
			   .current = c->current };
	return a;
}

/* the two casts' row and col codes and role blocks, byte for byte */
static void twins_same(const cast_twins *t)
{
	size_t nb = (size_t)t->c->rows * t->c->cols * qe_dtype_size(t->c->dt);
	char what[128];
	snprintf(what, sizeof(what), "%s row", t->name);
	same_dev_bytes(what, t->row[0], t->row[1], nb);
	snprintf(what, sizeof(what), "%s col", t->name);
	same_dev_bytes(what, t->col[0], t->col[1], nb);
	snprintf(what, sizeof(what), "%s amax/scale", t->name);
	same_dev_bytes(what, t->role[0], t->role[1], sizeof(twin_role));
}

static void twins_free(cast_twins *t)
{
	for (int k = 0; k < 2; k++) {
		K.go->free(K.gb, t->row[k]);
		K.go->free(K.gb, t->col[k]);
		K.go->free(K.gb, t->role[k]);
	}
}

/* a device copy of n host floats */
static void *dev_of(const float *h, int64_t n)
{
	void *d = g_mem((size_t)n * 4);
	up(d, h, (size_t)n * 4);
	return d;
}

/*
 * FC1's bias and GELU in FC2's input cast: the bytes of x + bias (the add
 * gemm would do, here on the host), gelu_fwd and the plain cast, for every
 * kernel the cast picks; the f32 values against the cpu's within gelu_fwd's
 * bound.
 */
static void test_cast_gelu(qe_rng *r)
{
	static const cast_case cases[] = {
		{ 64, 256, QE_E4M3, 0 },   { 33, 17, QE_E4M3, 0 },  { 64, 256, QE_E4M3, 1 }, { 33, 17, QE_E5M2, 1 },
		{ 128, 3072, QE_E4M3, 0 }, { 64, 256, QE_BF16, 0 }, { 33, 17, QE_BF16, 0 },  { 64, 256, QE_F32, 0 },
		{ 33, 17, QE_F32, 0 },
	};
	printf("cast with FC1's bias and GELU\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const cast_case *c = &cases[ci];
		int64_t R = c->rows, C = c->cols, n = R * C;
		fresh_stream();
		float *x = rnd(r, n, 2.0f), *bias = rnd(r, C, 0.5f), *v = malloc((size_t)n * 4);
		for (int64_t i = 0; i < n; i++)
			v[i] = x[i] + bias[i % C];
		void *gx = dev_of(x, n), *gb = dev_of(bias, C), *gv = dev_of(v, n);
		cast_twins t;
		twins_init(&t, c, "gelu cast");
		CHECK_OK(K.go->gelu_fwd(K.gs, gv, gv, n));
		qe_cast_args a0 = twins_args(&t, 0, gv), a1 = twins_args(&t, 1, gx);
		a1.pre_bias = gb;
		a1.pre_gelu = 1;
		CHECK_OK(K.go->cast(K.gs, &a0));
		CHECK_OK(K.go->cast(K.gs, &a1));
		twins_same(&t);
		char what[96];
		if (c->dt == QE_F32) { /* the fused values against the cpu's */
			float *cx = c_mem((size_t)n * 4), *cb = c_mem((size_t)C * 4), *crow = c_mem((size_t)n * 4);
			memcpy(cx, x, (size_t)n * 4);
			memcpy(cb, bias, (size_t)C * 4);
			qe_cast_args ca = { .x = qe_tensor_2d(cx, QE_F32, QE_DEV_CPU, R, C),
					    .row = qe_tensor_2d(crow, QE_F32, QE_DEV_CPU, R, C),
					    .col = qe_tensor_2d(NULL, QE_F32, QE_DEV_CPU, C, R),
					    .pre_bias = cb,
					    .pre_gelu = 1 };
			CHECK_OK(K.co->cast(K.cs, &ca));
			float *hg = fetch(t.row[1], (size_t)n * 4);
			snprintf(what, sizeof(what), "gelu cast %lldx%lld f32 vs cpu", (long long)R, (long long)C);
			close_to(what, crow, hg, n, 1e-5);
			free(hg);
			K.co->free(K.cb, cx);
			K.co->free(K.cb, cb);
			K.co->free(K.cb, crow);
		}
		twins_free(&t);
		void *bufs[] = { gx, gb, gv };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
			K.go->free(K.gb, bufs[i]);
		free(x);
		free(bias);
		free(v);
	}
}

/*
 * A cast's column sums (colsum): the bytes of bias_grad on the GPU and on
 * the cpu, with the codes of the cast without them, through the four-wide
 * kernel's partials (FP8 delayed and current, bf16; row counts that fill and
 * cut colsum.h's groups) and through the fallback (odd shapes, f32) that
 * runs bias_grad's kernels first.
 */
static void test_cast_colsum(qe_rng *r)
{
	static const cast_case cases[] = {
		{ 256, 3072, QE_E5M2, 0 }, { 200, 64, QE_E5M2, 0 }, { 200, 68, QE_BF16, 0 }, { 128, 256, QE_E4M3, 1 },
		{ 8192, 96, QE_E5M2, 0 },  { 33, 17, QE_E5M2, 0 },  { 64, 256, QE_F32, 0 },
	};
	printf("cast with column sums\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const cast_case *c = &cases[ci];
		int64_t R = c->rows, C = c->cols, n = R * C;
		fresh_stream();
		float *x = rnd(r, n, 2.0f);
		void *gx;
		float *cx = pair(x, (size_t)n * 4, &gx), *csum = c_mem((size_t)C * 4);
		void *gsum[2] = { g_mem((size_t)C * 4), g_mem((size_t)C * 4) };
		cast_twins t;
		twins_init(&t, c, "colsum cast");
		CHECK_OK(K.co->bias_grad(K.cs, csum, cx, R, C));
		CHECK_OK(K.go->bias_grad(K.gs, gsum[0], gx, R, C));
		qe_cast_args a0 = twins_args(&t, 0, gx), a1 = twins_args(&t, 1, gx);
		a1.colsum = gsum[1];
		CHECK_OK(K.go->cast(K.gs, &a0));
		CHECK_OK(K.go->cast(K.gs, &a1));
		twins_same(&t);
		char what[128];
		snprintf(what, sizeof(what), "%s sums", t.name);
		same_dev_bytes(what, gsum[0], gsum[1], (size_t)C * 4);
		float *hs = fetch(gsum[1], (size_t)C * 4);
		snprintf(what, sizeof(what), "%s sums vs cpu", t.name);
		same_bytes(what, csum, hs, (size_t)C * 4);
		free(hs);
		twins_free(&t);
		K.go->free(K.gb, gsum[0]);
		K.go->free(K.gb, gsum[1]);
		K.go->free(K.gb, gx);
		K.co->free(K.cb, cx);
		K.co->free(K.cb, csum);
		free(x);
	}
}

/*
 * The layernorm prologue: layernorm_fwd with y NULL gives the statistics it
 * gives with y, and a cast that normalizes with them gives the bytes of
 * casting layernorm_fwd's output (four-wide and byte-wide cast kernels, the
 * row-in-registers and the plain layernorm kernels).
 */
static void test_cast_layernorm(qe_rng *r)
{
	static const cast_case cases[] = {
		{ 64, 768, QE_E4M3, 0 }, { 33, 17, QE_E4M3, 0 }, { 64, 768, QE_E4M3, 1 }, { 128, 1600, QE_E4M3, 0 },
		{ 64, 768, QE_BF16, 0 }, { 33, 17, QE_BF16, 0 }, { 64, 768, QE_F32, 0 },
	};
	printf("cast with a layernorm prologue\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const cast_case *c = &cases[ci];
		int64_t R = c->rows, C = c->cols, n = R * C;
		fresh_stream();
		float *x = rnd(r, n, 2.0f), *w = rnd(r, C, 1.0f), *b = rnd(r, C, 0.3f);
		void *gx = dev_of(x, n), *gw = dev_of(w, C), *gb = dev_of(b, C), *gy = g_mem((size_t)n * 4);
		void *gm[2] = { g_mem((size_t)R * 4), g_mem((size_t)R * 4) }, *gs[2] = { g_mem((size_t)R * 4), g_mem((size_t)R * 4) };
		cast_twins t;
		twins_init(&t, c, "ln cast");
		CHECK_OK(K.go->layernorm_fwd(K.gs, gy, gm[0], gs[0], gx, QE_F32, gw, gb, R, C));
		CHECK_OK(K.go->layernorm_fwd(K.gs, NULL, gm[1], gs[1], gx, QE_F32, gw, gb, R, C));
		qe_cast_args a0 = twins_args(&t, 0, gy), a1 = twins_args(&t, 1, gx);
		a1.pre_ln.mean = gm[1];
		a1.pre_ln.rstd = gs[1];
		a1.pre_ln.w = gw;
		a1.pre_ln.b = gb;
		CHECK_OK(K.go->cast(K.gs, &a0));
		CHECK_OK(K.go->cast(K.gs, &a1));
		twins_same(&t);
		char what[128];
		snprintf(what, sizeof(what), "%s mean (y NULL vs y)", t.name);
		same_dev_bytes(what, gm[0], gm[1], (size_t)R * 4);
		snprintf(what, sizeof(what), "%s rstd (y NULL vs y)", t.name);
		same_dev_bytes(what, gs[0], gs[1], (size_t)R * 4);
		twins_free(&t);
		void *bufs[] = { gx, gw, gb, gy, gm[0], gm[1], gs[0], gs[1] };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
			K.go->free(K.gb, bufs[i]);
		free(x);
		free(w);
		free(b);
	}
}

/*
 * GELU's backward in FC1's dY cast, with the column sums of its values: the
 * bytes of gelu_bwd (of u + bias, made on the host: one f32 add, as gemm's)
 * into a buffer, bias_grad of it and the plain cast,
 * through the four-wide kernel (partials in the tile) and the fallback (odd
 * shapes and f32: the values made in scratch, summed, then cast).
 */
static void test_cast_gelu_backward(qe_rng *r)
{
	static const cast_case cases[] = {
		{ 256, 3072, QE_E5M2, 0 }, { 200, 64, QE_E5M2, 1 }, { 200, 68, QE_BF16, 0 },
		{ 33, 17, QE_E5M2, 0 },	   { 64, 256, QE_F32, 0 },  { 33, 17, QE_F32, 0 },
	};
	printf("cast with GELU's backward\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const cast_case *c = &cases[ci];
		int64_t R = c->rows, C = c->cols, n = R * C;
		fresh_stream();
		float *dy = rnd(r, n, 1.0f), *u = rnd(r, n, 2.0f), *bias = rnd(r, C, 0.5f), *ub = malloc((size_t)n * 4);
		for (int64_t i = 0; i < n; i++)
			ub[i] = u[i] + bias[i % C];
		void *gdy = dev_of(dy, n), *gu = dev_of(u, n), *gb = dev_of(bias, C), *gv = g_mem((size_t)n * 4);
		void *gub = dev_of(ub, n);
		void *gsum[2] = { g_mem((size_t)C * 4), g_mem((size_t)C * 4) };
		cast_twins t;
		twins_init(&t, c, "dgelu cast");
		CHECK_OK(K.go->gelu_bwd(K.gs, gv, gub, gdy, n));
		CHECK_OK(K.go->bias_grad(K.gs, gsum[0], gv, R, C));
		qe_cast_args a0 = twins_args(&t, 0, gv), a1 = twins_args(&t, 1, gdy);
		a1.pre_bias = gb;
		a1.pre_dgelu = gu;
		a1.colsum = gsum[1];
		CHECK_OK(K.go->cast(K.gs, &a0));
		CHECK_OK(K.go->cast(K.gs, &a1));
		twins_same(&t);
		char what[128];
		snprintf(what, sizeof(what), "%s sums", t.name);
		same_dev_bytes(what, gsum[0], gsum[1], (size_t)C * 4);
		twins_free(&t);
		void *bufs[] = { gdy, gu, gb, gv, gub, gsum[0], gsum[1] };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
			K.go->free(K.gb, bufs[i]);
		free(dy);
		free(u);
		free(bias);
		free(ub);
	}
}

/* n values of type dt (f32 or bf16 codes) in a fresh host buffer, from f32 x (bf16: rounded) */
static void *host_of(const float *x, int64_t n, qe_dtype dt)
{
	void *h = malloc((size_t)n * qe_dtype_size(dt));
	for (int64_t i = 0; i < n; i++)
		if (dt == QE_BF16)
			((uint16_t *)h)[i] = qe_bf16_from_f32(x[i]);
		else
			((float *)h)[i] = x[i];
	return h;
}

/*
 * residual_add of one shape, dt and bias (or none): y the cpu's bytes (the
 * f32 adds, bf16: then rounded) from the four-wide or scalar kernel; in
 * place over a with the layernorm statistics, y the same bytes and mean
 * and rstd the bytes of cuda's layernorm_fwd reading that y as stored,
 * from the one-pass kernel where the shape takes it; then the same call on
 * copies off alignment (y, a and b one element, or 8 bytes - bf16's
 * four-wide loads but not f32's - past an aligned address; or the bias 4
 * bytes past), each the aligned call's bytes, whatever kernels they take.
 * a and b hold -0 at two places, where a + b is -0 but a + (b + 0) is +0:
 * no bias must not act as a bias of zeros.
 */
static void residual_add_case(qe_rng *r, int64_t R, int64_t C, qe_dtype dt, int with_bias)
{
	int64_t n = R * C;
	size_t esz = qe_dtype_size(dt), nb = (size_t)n * esz;
	fresh_stream();
	float *fa = rnd(r, n, 2.0f), *fb = rnd(r, n, 1.0f), *hbias = rnd(r, C, 0.5f);
	fa[0] = fb[0] = fa[n - 1] = fb[n - 1] = -0.0f;
	void *ha = host_of(fa, n, dt), *hb = host_of(fb, n, dt);
	void *ga, *gb, *gy, *gbias = NULL;
	void *ca = pair(ha, nb, &ga), *cb = pair(hb, nb, &gb), *cy = pair(NULL, nb, &gy);
	float *cbias = with_bias ? pair(hbias, (size_t)C * 4, &gbias) : NULL;
	char name[64], what[160];
	snprintf(name, sizeof(name), "residual_add %lldx%lld %s%s", (long long)R, (long long)C, qe_dtype_name(dt),
		 with_bias ? "" : " (no bias)");
	CHECK_OK(K.co->residual_add(K.cs, cy, ca, cb, dt, cbias, R, C, NULL, NULL));
	CHECK_OK(K.go->residual_add(K.gs, gy, ga, gb, dt, gbias, R, C, NULL, NULL));
	float *h = fetch(gy, nb);
	snprintf(what, sizeof(what), "%s: y", name);
	same_bytes(what, cy, h, nb);
	free(h);

	void *gm = g_mem((size_t)R * 4), *gs = g_mem((size_t)R * 4), *gm2 = g_mem((size_t)R * 4);
	void *gs2 = g_mem((size_t)R * 4), *gy2 = g_mem(nb);
	up(gy2, ha, nb); /* y over a */
	CHECK_OK(K.go->layernorm_fwd(K.gs, NULL, gm, gs, gy, dt, NULL, NULL, R, C));
	CHECK_OK(K.go->residual_add(K.gs, gy2, gy2, gb, dt, gbias, R, C, gm2, gs2));
	h = fetch(gy2, nb);
	snprintf(what, sizeof(what), "%s with statistics, in place: y", name);
	same_bytes(what, cy, h, nb);
	free(h);
	snprintf(what, sizeof(what), "%s: mean == layernorm_fwd's of y", name);
	same_dev_bytes(what, gm, gm2, (size_t)R * 4);
	snprintf(what, sizeof(what), "%s: rstd == layernorm_fwd's of y", name);
	same_dev_bytes(what, gs, gs2, (size_t)R * 4);
	float *s2 = fetch(gs2, (size_t)R * 4);
	CHECK(s2[0] > 0.0f, "%s: rstd not written", name);
	free(s2);

	/* off alignment: byte offsets of y (over a), b and the bias */
	const int offs[3][2] = { { (int)esz, 0 }, { 8, 0 }, { 0, 4 } };
	for (int k = 0; k < 3; k++) {
		if (offs[k][1] && !with_bias)
			continue;
		char *y3 = (char *)g_mem(nb + 16) + offs[k][0], *b3 = (char *)g_mem(nb + 16) + offs[k][0];
		void *bias3 = NULL;
		if (with_bias) {
			bias3 = (char *)g_mem((size_t)C * 4 + 16) + offs[k][1];
			up(bias3, hbias, (size_t)C * 4);
		}
		void *gm3 = g_mem((size_t)R * 4), *gs3 = g_mem((size_t)R * 4);
		up(y3, ha, nb);
		up(b3, hb, nb);
		CHECK_OK(K.go->residual_add(K.gs, y3, y3, b3, dt, bias3, R, C, gm3, gs3));
		h = fetch(y3, nb);
		snprintf(what, sizeof(what), "%s, y a b +%d B, bias +%d B: y", name, offs[k][0], offs[k][1]);
		same_bytes(what, cy, h, nb);
		free(h);
		snprintf(what, sizeof(what), "%s, y a b +%d B, bias +%d B: mean", name, offs[k][0], offs[k][1]);
		same_dev_bytes(what, gm2, gm3, (size_t)R * 4);
		snprintf(what, sizeof(what), "%s, y a b +%d B, bias +%d B: rstd", name, offs[k][0], offs[k][1]);
		same_dev_bytes(what, gs2, gs3, (size_t)R * 4);
	}
	free(fa);
	free(fb);
	free(hbias);
	free(ha);
	free(hb);
}

/*
 * residual_add through every kernel, f32 and bf16, with and without a
 * bias: the one-pass kernel in each of its widths (a lane's float4s: 16x128
 * 1, 16x256 2, 16x512 4, 64x768 and 130x1024 8, 24x1600 16), and the
 * fallbacks (13x7 and 33x17: not whole float4s, the scalar kernels; 8x4096:
 * rows too long, the four-wide add and then the block-a-row layernorm).
 */
static void test_residual_add(qe_rng *r)
{
	static const int shapes[][2] = { { 16, 128 }, { 16, 256 }, { 16, 512 }, { 64, 768 }, { 130, 1024 },
					 { 24, 1600 }, { 13, 7 },   { 33, 17 },  { 8, 4096 } };
	printf("residual_add\n");
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		for (int v = 0; v < 4; v++)
			residual_add_case(r, shapes[k][0], shapes[k][1], v & 1 ? QE_BF16 : QE_F32, v < 2);
}

/*
 * layernorm_bwd with a residual: the bytes of layernorm_bwd then add, dw
 * and db unchanged.  Then in place (residual = dx, as the model joins the
 * branches), in f32 and in bf16 (x, the residual and dx all of the stream's
 * type): the bytes of the same call with a residual buffer of its own -
 * each element's residual is read before its dx is stored - through the
 * warp-a-row kernel (768), the scalar one (17) and the block-a-row one (1600).
 */
static void test_layernorm_bwd_residual(qe_rng *r)
{
	static const int shapes[][2] = { { 64, 768 }, { 33, 17 }, { 16, 1600 } };
	printf("layernorm_bwd with a residual\n");
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int64_t R = shapes[k][0], C = shapes[k][1], n = R * C;
		fresh_stream();
		float *hx = rnd(r, n, 2.0f), *hdy = rnd(r, n, 1.0f), *hres = rnd(r, n, 1.0f), *hw = rnd(r, C, 1.0f);
		float *hb = rnd(r, C, 0.3f);
		void *gx = dev_of(hx, n), *gdy = dev_of(hdy, n), *gres = dev_of(hres, n), *gw = dev_of(hw, C);
		void *gb = dev_of(hb, C), *gm = g_mem((size_t)R * 4), *gs = g_mem((size_t)R * 4), *gg = g_mem((size_t)n * 4);
		void *gdx[2] = { g_mem((size_t)n * 4), g_mem((size_t)n * 4) };
		void *gdw[2] = { g_mem((size_t)C * 4), g_mem((size_t)C * 4) };
		void *gdb[2] = { g_mem((size_t)C * 4), g_mem((size_t)C * 4) };
		CHECK_OK(K.go->layernorm_fwd(K.gs, NULL, gm, gs, gx, QE_F32, gw, gb, R, C));
		CHECK_OK(K.go->layernorm_bwd(K.gs, gg, gdw[0], gdb[0], gdy, QE_F32, gx, QE_F32, gm, gs, gw, R, C, NULL));
		CHECK_OK(K.go->add(K.gs, gdx[0], gres, gg, n));
		CHECK_OK(K.go->layernorm_bwd(K.gs, gdx[1], gdw[1], gdb[1], gdy, QE_F32, gx, QE_F32, gm, gs, gw, R, C, gres));
		char what[64];
		snprintf(what, sizeof(what), "ln_bwd residual %lldx%lld dx", (long long)R, (long long)C);
		same_dev_bytes(what, gdx[0], gdx[1], (size_t)n * 4);
		snprintf(what, sizeof(what), "ln_bwd residual %lldx%lld dw", (long long)R, (long long)C);
		same_dev_bytes(what, gdw[0], gdw[1], (size_t)C * 4);
		snprintf(what, sizeof(what), "ln_bwd residual %lldx%lld db", (long long)R, (long long)C);
		same_dev_bytes(what, gdb[0], gdb[1], (size_t)C * 4);
		uint16_t *hx16 = malloc((size_t)n * 2), *hres16 = malloc((size_t)n * 2);
		for (int64_t i = 0; i < n; i++) {
			hx16[i] = qe_bf16_from_f32(hx[i]);
			hres16[i] = qe_bf16_from_f32(hres[i]);
		}
		void *gx16 = g_mem((size_t)n * 2), *gres16 = g_mem((size_t)n * 2);
		up(gx16, hx16, (size_t)n * 2);
		up(gres16, hres16, (size_t)n * 2);
		for (int b16 = 0; b16 < 2; b16++) {
			qe_dtype dt = b16 ? QE_BF16 : QE_F32;
			size_t nb = (size_t)n * qe_dtype_size(dt);
			const void *x = b16 ? gx16 : gx, *res = b16 ? gres16 : gres;
			CHECK_OK(K.go->layernorm_bwd(K.gs, gdx[0], gdw[0], gdb[0], gdy, QE_F32, x, dt, gm, gs, gw, R, C,
						     res));
			CHECK_OK(K.go->copy(K.gs, gdx[1], res, nb, QE_COPY_D2D));
			CHECK_OK(K.go->layernorm_bwd(K.gs, gdx[1], gdw[1], gdb[1], gdy, QE_F32, x, dt, gm, gs, gw, R, C,
						     gdx[1]));
			snprintf(what, sizeof(what), "ln_bwd in place %lldx%lld %s dx", (long long)R, (long long)C,
				 qe_dtype_name(dt));
			same_dev_bytes(what, gdx[0], gdx[1], nb);
		}
		free(hx16);
		free(hres16);
		void *bufs[] = { gx, gdy, gres, gw, gb, gm, gs, gg, gdx[0], gdx[1], gdw[0], gdw[1], gdb[0], gdb[1],
				 gx16, gres16 };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
			K.go->free(K.gb, bufs[i]);
		free(hx);
		free(hdy);
		free(hres);
		free(hw);
		free(hb);
	}
}

/*
 * Flash attention with qkv_bias: forward and backward give the bytes of the
 * same op on qkv + bias (made on the host: one f32 add, as gemm's), for both
 * operand kinds (bf16: added in the bf16 copy; TF32: a biased copy first).
 */
static void test_flash_qkv_bias(qe_rng *r)
{
	static const int cases[][4] = { { 2, 100, 64, 2 }, { 1, 64, 256, 4 } }; /* B, T, H, nh */
	printf("flash attention with the QKV bias\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t B = cases[ci][0], T = cases[ci][1], H = cases[ci][2], N = B * T, n3 = N * 3 * H;
		int nh = cases[ci][3];
		float *hq = rnd(r, n3, 1.0f), *hb = rnd(r, 3 * H, 0.5f), *hdo = rnd(r, N * H, 1.0f);
		float *hqb = malloc((size_t)n3 * 4);
		for (int64_t i = 0; i < n3; i++)
			hqb[i] = hq[i] + hb[i % (3 * H)];
		for (int kind = 0; kind < 2; kind++) {
			qe_flash_operands op = kind ? QE_FLASH_BF16 : QE_FLASH_TF32;
			fresh_stream();
			void *gq = dev_of(hq, n3), *gb = dev_of(hb, 3 * H), *gqb = dev_of(hqb, n3), *gdo = dev_of(hdo, N * H);
			void *go[2] = { g_mem((size_t)N * H * 4), g_mem((size_t)N * H * 4) };
			void *gl[2] = { g_mem((size_t)B * nh * T * 4), g_mem((size_t)B * nh * T * 4) };
			void *gdq[2] = { g_mem((size_t)n3 * 4), g_mem((size_t)n3 * 4) };
			CHECK_OK(K.go->attn_flash_fwd(K.gs, go[0], gl[0], gqb, NULL, B, T, H, nh, op, QE_F32));
			CHECK_OK(K.go->attn_flash_fwd(K.gs, go[1], gl[1], gq, gb, B, T, H, nh, op, QE_F32));
			CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq[0], gdo, gqb, NULL, go[0], gl[0], B, T, H, nh, op, QE_F32));
			CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq[1], gdo, gq, gb, go[1], gl[1], B, T, H, nh, op, QE_F32));
			void *pairs[3][2] = { { go[0], go[1] }, { gl[0], gl[1] }, { gdq[0], gdq[1] } };
			size_t sizes[3] = { (size_t)N * H * 4, (size_t)B * nh * T * 4, (size_t)n3 * 4 };
			static const char *nm[] = { "out", "lse", "dqkv" };
			for (int p = 0; p < 3; p++) {
				char what[96];
				snprintf(what, sizeof(what), "flash qkv_bias %s B%lld T%lld H%lld %s", kind ? "bf16" : "tf32",
					 (long long)B, (long long)T, (long long)H, nm[p]);
				same_dev_bytes(what, pairs[p][0], pairs[p][1], sizes[p]);
			}
			void *bufs[] = { gq, gb, gqb, gdo, go[0], go[1], gl[0], gl[1], gdq[0], gdq[1] };
			for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
				K.go->free(K.gb, bufs[i]);
		}
		free(hq);
		free(hb);
		free(hdo);
		free(hqb);
	}
}

int main(void)
{
	qe_rng r;
	int rc = both_open(20261204u, &r);
	if (rc <= 0)
		return rc < 0 ? qe_test_done(NAME) : 0;
	test_cast_gelu(&r);
	test_cast_colsum(&r);
	test_cast_layernorm(&r);
	test_cast_gelu_backward(&r);
	test_residual_add(&r);
	test_layernorm_bwd_residual(&r);
	test_flash_qkv_bias(&r);
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif
