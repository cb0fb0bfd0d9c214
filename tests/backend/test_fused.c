/*
 * test_fused.c - the fused forms the model runs give the bytes of the ops they
 * replace (backend.h: qe_cast_args' prologue and column sums, residual_add,
 * layernorm_bwd's residual, flash attention's qkv_bias), on the cpu
 * backend, the reference the cuda kernels are held to (test_cuda_fused.c
 * checks the same identities on a GPU).
 *
 *  - cast with any combination of pre_ln, pre_bias and pre_gelu ==
 *    layernorm_fwd into a buffer, + bias (gemm's f32 add, done here in C:
 *    this file is built with -ffp-contract=off like the library), then
 *    gelu_fwd, then the plain cast: row and col codes, amax, scale_inv, and
 *    under current scaling the scale, for f32, bf16, e4m3 and e5m2 outputs,
 *    row and col together and alone, on a shape whose sides are multiples
 *    of 4 and one whose sides are odd;
 *  - layernorm_fwd with y NULL writes the statistics it writes with y;
 *    without mean or rstd it is refused;
 *  - the prologue is not a no-op: the fused cast's codes differ from the
 *    plain cast of x;
 *  - a cast's column sums (colsum) == bias_grad of x, with the codes of the
 *    cast without them, for every output dtype, on row counts that fill and
 *    cut colsum.h's row groups;
 *  - the GELU backward prologue (pre_dgelu, with and without pre_bias) ==
 *    gelu_bwd of pre_dgelu + pre_bias into a buffer then the plain cast,
 *    its column sums == bias_grad of that buffer; refused together with
 *    pre_gelu;
 *  - residual_add == b + bias (gemm's add) then add, also in place over a
 *    and over b; a NULL bias is refused; with mean and rstd it also writes
 *    the statistics layernorm_fwd writes from its y (in place too), and
 *    one of the two without the other is refused;
 *  - layernorm_bwd with a residual == layernorm_bwd then add(residual, dx),
 *    also in place over the residual, with the same dw and db; with dy in
 *    bf16, the bytes of dy widened to f32 (an FP8 dy is refused);
 *  - flash attention forward and backward with qkv_bias == the same on
 *    qkv + bias, both operand kinds.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

#define SEED 4242u

static qe_rng rng;
static bk K;

/*
 * Whether op call `call` on a stream of its own, s2 (a refusal fails its
 * stream for good), returns want; what names the call.
 */
#define REFUSED(want, what, call)                                                       \
	do {                                                                            \
		qe_stream *s2 = NULL;                                                   \
		CHECK_OK(K.o->stream_create(K.b, &s2));                                 \
		int rc_ = (call);                                                       \
		CHECK(rc_ == (want), "%s: rc %d, want %d", (what), rc_, (int)(want));   \
		qe_clear_error();                                                       \
		K.o->stream_destroy(s2);                                                \
	} while (0)

/* free the n backend buffers of bufs */
static void free_bufs(float *const *bufs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		K.o->free(K.b, bufs[i]);
}

typedef struct cast_out {
	void *row, *col;
	float meta[3]; /* scale, amax, scale_inv */
} cast_out;

/* One cast of x [R, C] into dt; pre: the prologue or NULL for none. */
/* a layernorm prologue's arguments (mean NULL: none) */
typedef struct ln_pre {
	const float *mean, *rstd, *w, *b;
} ln_pre;

static void run_cast(const float *x, int64_t R, int64_t C, qe_dtype dt, int current, int want_row, int want_col,
		     const ln_pre *ln, const float *pre_bias, int pre_gelu, cast_out *o)
{
	size_t esz = qe_dtype_size(dt);
	o->row = bk_bytes(&K, (size_t)(R * C) * esz);
	o->col = bk_bytes(&K, (size_t)(R * C) * esz);
	o->meta[0] = 37.0f; /* the delayed scale (current: overwritten) */
	o->meta[1] = 0.5f;  /* amax history row 0: max-ed with max|v| */
	o->meta[2] = 0.0f;
	qe_cast_args a = { .x = qe_tensor_2d((void *)x, QE_F32, QE_DEV_CPU, R, C),
			   .row = qe_tensor_2d(want_row ? o->row : NULL, dt, QE_DEV_CPU, R, C),
			   .col = qe_tensor_2d(want_col ? o->col : NULL, dt, QE_DEV_CPU, C, R),
			   .scale = &o->meta[0],
			   .amax = &o->meta[1],
			   .scale_inv = &o->meta[2],
			   .current = current,
			   .margin = 1,
			   .pre_bias = pre_bias,
			   .pre_gelu = pre_gelu };
	if (ln) {
		a.pre_ln.mean = ln->mean;
		a.pre_ln.rstd = ln->rstd;
		a.pre_ln.w = ln->w;
		a.pre_ln.b = ln->b;
	}
	CHECK_OK(K.o->cast(K.s, &a));
	CHECK_OK(K.o->stream_sync(K.s));
}

static void free_out(cast_out *o)
{
	K.o->free(K.b, o->row);
	K.o->free(K.b, o->col);
}

static void test_cast_prologue(int64_t R, int64_t C)
{
	float *x = bk_f32(&K, R * C), *bias = bk_f32(&K, C), *v = bk_f32(&K, R * C);
	float *mean = bk_f32(&K, R), *rstd = bk_f32(&K, R), *w = bk_f32(&K, C), *b = bk_f32(&K, C);
	fill_normal(x, R * C, &rng, 2.0f);
	fill_normal(bias, C, &rng, 0.5f);
	fill_normal(w, C, &rng, 1.0f);
	fill_normal(b, C, &rng, 0.3f);
	/* the statistics alone (y NULL), as the fused stage computes them */
	CHECK_OK(K.o->layernorm_fwd(K.s, NULL, mean, rstd, x, QE_F32, w, b, R, C));
	ln_pre lnp = { mean, rstd, w, b };
	const qe_dtype dts[] = { QE_F32, QE_BF16, QE_E4M3, QE_E5M2 };
	int cases = 0;
	for (size_t d = 0; d < sizeof(dts) / sizeof(*dts); d++) {
		for (int current = 0; current <= qe_dtype_is_fp8(dts[d]); current++) {
			for (int pre = 1; pre < 8; pre++) { /* bit 0: bias, bit 1: gelu, bit 2: layernorm */
				const float *pb = pre & 1 ? bias : NULL;
				int pg = (pre >> 1) & 1;
				const ln_pre *ln = pre & 4 ? &lnp : NULL;
				/* the unfused ops: layernorm_fwd into a buffer, gemm's bias add, gelu_fwd */
				float *m2 = bk_f32(&K, R), *s2 = bk_f32(&K, R);
				if (ln)
					CHECK_OK(K.o->layernorm_fwd(K.s, v, m2, s2, x, QE_F32, w, b, R, C));
				else
					memcpy(v, x, (size_t)(R * C) * sizeof(float));
				CHECK_BYTES(m2, mean, ln ? (size_t)R * sizeof(float) : 0, "layernorm mean, y NULL vs y");
				CHECK_BYTES(s2, rstd, ln ? (size_t)R * sizeof(float) : 0, "layernorm rstd, y NULL vs y");
				K.o->free(K.b, m2);
				K.o->free(K.b, s2);
				for (int64_t r = 0; r < R; r++)
					for (int64_t c = 0; c < C; c++)
						v[r * C + c] = pb ? v[r * C + c] + pb[c] : v[r * C + c];
				if (pg)
					CHECK_OK(K.o->gelu_fwd(K.s, v, v, R * C));
				for (int outs = 1; outs < 4; outs++) { /* 1: row, 2: col, 3: both */
					int wr = outs & 1, wc = outs >> 1;
					cast_out f, u, plain;
					run_cast(x, R, C, dts[d], current, wr, wc, ln, pb, pg, &f);
					run_cast(v, R, C, dts[d], current, wr, wc, NULL, NULL, 0, &u);
					run_cast(x, R, C, dts[d], current, wr, wc, NULL, NULL, 0, &plain);
					char what[128];
					size_t nb = (size_t)(R * C) * qe_dtype_size(dts[d]);
					snprintf(what, sizeof(what), "[%lld,%lld] %s%s pre %d outs %d", (long long)R,
						 (long long)C, qe_dtype_name(dts[d]), current ? " current" : "", pre, outs);
					if (wr)
						CHECK_BYTES(f.row, u.row, nb, what);
					if (wc)
						CHECK_BYTES(f.col, u.col, nb, what);
					CHECK_BYTES(f.meta, u.meta, sizeof(f.meta), what);
					/* the prologue shows in the codes */
					CHECK(bytes_diff(wr ? f.row : f.col, wr ? plain.row : plain.col, nb) >= 0,
					      "%s: the fused cast gave the codes of the plain cast of x", what);
					free_out(&f);
					free_out(&u);
					free_out(&plain);
					cases++;
				}
			}
		}
	}
	printf("cast prologue [%lld,%lld]: %d cases == the unfused ops\n", (long long)R, (long long)C, cases);
	/* statistics need somewhere to go */
	REFUSED(QE_EINVAL, "layernorm_fwd with neither y nor mean",
		K.o->layernorm_fwd(s2, NULL, NULL, rstd, x, QE_F32, w, b, R, C));
	float *bufs[] = { x, bias, v, mean, rstd, w, b };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

static void test_cast_colsum(int64_t R, int64_t C)
{
	float *x = bk_f32(&K, R * C), *want = bk_f32(&K, C), *got = bk_f32(&K, C);
	fill_normal(x, R * C, &rng, 2.0f);
	CHECK_OK(K.o->bias_grad(K.s, want, x, R, C));
	const qe_dtype dts[] = { QE_F32, QE_BF16, QE_E4M3, QE_E5M2 };
	for (size_t d = 0; d < sizeof(dts) / sizeof(*dts); d++) {
		size_t nb = (size_t)(R * C) * qe_dtype_size(dts[d]);
		cast_out f, u;
		float meta[3] = { 37.0f, 0.5f, 0.0f };
		f.row = bk_bytes(&K, nb);
		f.col = bk_bytes(&K, nb);
		memcpy(f.meta, meta, sizeof(meta));
		memset(got, 0xff, (size_t)C * sizeof(float)); /* NaNs: every column must be written */
		qe_cast_args a = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, R, C),
				   .row = qe_tensor_2d(f.row, dts[d], QE_DEV_CPU, R, C),
				   .col = qe_tensor_2d(f.col, dts[d], QE_DEV_CPU, C, R),
				   .scale = &f.meta[0],
				   .amax = &f.meta[1],
				   .scale_inv = &f.meta[2],
				   .colsum = got };
		CHECK_OK(K.o->cast(K.s, &a));
		run_cast(x, R, C, dts[d], 0, 1, 1, NULL, NULL, 0, &u);
		char what[96];
		snprintf(what, sizeof(what), "cast colsum [%lld,%lld] %s", (long long)R, (long long)C, qe_dtype_name(dts[d]));
		CHECK_OK(K.o->stream_sync(K.s));
		CHECK_BYTES(got, want, (size_t)C * sizeof(float), what);
		CHECK_BYTES(f.row, u.row, nb, what);
		CHECK_BYTES(f.col, u.col, nb, what);
		CHECK_BYTES(f.meta, u.meta, sizeof(f.meta), what);
		free_out(&f);
		free_out(&u);
	}
	K.o->free(K.b, x);
	K.o->free(K.b, want);
	K.o->free(K.b, got);
}

static void test_residual_add(int64_t R, int64_t C)
{
	int64_t n = R * C;
	float *a = bk_f32(&K, n), *b = bk_f32(&K, n), *bias = bk_f32(&K, C), *v = bk_f32(&K, n);
	float *want = bk_f32(&K, n), *got = bk_f32(&K, n), *plain = bk_f32(&K, n);
	fill_normal(a, n, &rng, 2.0f);
	fill_normal(b, n, &rng, 1.0f);
	fill_normal(bias, C, &rng, 0.5f);
	for (int64_t i = 0; i < n; i++)
		v[i] = b[i] + bias[i % C];
	CHECK_OK(K.o->add(K.s, want, a, v, n));
	CHECK_OK(K.o->add(K.s, plain, a, b, n));
	CHECK_OK(K.o->residual_add(K.s, got, a, b, QE_F32, bias, R, C, NULL, NULL));
	CHECK_OK(K.o->stream_sync(K.s));
	char what[96];
	snprintf(what, sizeof(what), "residual_add [%lld,%lld]", (long long)R, (long long)C);
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), what);
	CHECK(bytes_diff(got, plain, (size_t)n * sizeof(float)) >= 0, "%s: the bias changed nothing", what);
	/* in place: y = a, then y = b */
	memcpy(got, a, (size_t)n * sizeof(float));
	CHECK_OK(K.o->residual_add(K.s, got, got, b, QE_F32, bias, R, C, NULL, NULL));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), "residual_add in place over a");
	memcpy(got, b, (size_t)n * sizeof(float));
	CHECK_OK(K.o->residual_add(K.s, got, a, got, QE_F32, bias, R, C, NULL, NULL));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), "residual_add in place over b");
	/* without a bias: the bytes of add */
	CHECK_OK(K.o->residual_add(K.s, got, a, b, QE_F32, NULL, R, C, NULL, NULL));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, plain, (size_t)n * sizeof(float), "residual_add without a bias == add");
	/* with the layernorm statistics: the bytes of layernorm_fwd from the same y, also in place over a */
	float *m_want = bk_f32(&K, R), *s_want = bk_f32(&K, R), *m_got = bk_f32(&K, R), *s_got = bk_f32(&K, R);
	CHECK_OK(K.o->layernorm_fwd(K.s, NULL, m_want, s_want, want, QE_F32, NULL, NULL, R, C));
	memcpy(got, a, (size_t)n * sizeof(float));
	CHECK_OK(K.o->residual_add(K.s, got, got, b, QE_F32, bias, R, C, m_got, s_got));
	CHECK_OK(K.o->stream_sync(K.s));
	snprintf(what, sizeof(what), "residual_add [%lld,%lld] with statistics", (long long)R, (long long)C);
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), what);
	CHECK_BYTES(m_got, m_want, (size_t)R * sizeof(float), "residual_add's mean == layernorm_fwd's");
	CHECK_BYTES(s_got, s_want, (size_t)R * sizeof(float), "residual_add's rstd == layernorm_fwd's");
	CHECK(m_want[0] != 0.0f && s_want[0] != 0.0f, "%s: statistics of zero", what);
	REFUSED(QE_EINVAL, "residual_add with a mean and no rstd",
		K.o->residual_add(s2, got, a, b, QE_F32, bias, R, C, m_got, NULL));
	REFUSED(QE_EINVAL, "residual_add with an rstd and no mean",
		K.o->residual_add(s2, got, a, b, QE_F32, bias, R, C, NULL, s_got));
	float *bufs[] = { a, b, bias, v, want, got, plain, m_want, s_want, m_got, s_got };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

/* n bf16 values near normal(0, sd), and their exact f32 widening */
static uint16_t *bf16_normal(int64_t n, float sd, float *wide)
{
	uint16_t *h = bk_bytes(&K, (size_t)n * 2);
	for (int64_t i = 0; i < n; i++) {
		h[i] = qe_bf16_from_f32(sd * qe_rng_normal(&rng));
		wide[i] = qe_bf16_to_f32(h[i]);
	}
	return h;
}

/*
 * The residual stream in bf16: residual_add of bf16 a and b is each sum
 * a + (b + bias) of their widenings rounded once to bf16 (with no bias,
 * a + b), in place too; its statistics are layernorm_fwd's of the stored
 * bf16 y, which are those of y's f32 widening; layernorm_bwd of a bf16 x
 * writes the bytes it writes from x widened; an FP8 stream is refused.
 */
static void test_residual_bf16(int64_t R, int64_t C)
{
	int64_t n = R * C;
	float *aw = bk_f32(&K, n), *bw = bk_f32(&K, n), *bias = bk_f32(&K, C), *yw = bk_f32(&K, n);
	uint16_t *a = bf16_normal(n, 2.0f, aw), *b = bf16_normal(n, 1.0f, bw);
	uint16_t *want = bk_bytes(&K, (size_t)n * 2), *got = bk_bytes(&K, (size_t)n * 2), *nob = bk_bytes(&K, (size_t)n * 2);
	fill_normal(bias, C, &rng, 0.5f);
	int rounded = 0;
	for (int64_t i = 0; i < n; i++) {
		float v = aw[i] + (bw[i] + bias[i % C]);
		want[i] = qe_bf16_from_f32(v);
		yw[i] = qe_bf16_to_f32(want[i]);
		rounded += yw[i] != v;
	}
	char what[96];
	snprintf(what, sizeof(what), "residual_add bf16 [%lld,%lld]", (long long)R, (long long)C);
	CHECK(rounded > 0, "%s: no sum needed rounding, so the test shows nothing", what);
	float *m = bk_f32(&K, R), *sd = bk_f32(&K, R), *mw = bk_f32(&K, R), *sw = bk_f32(&K, R), *m16 = bk_f32(&K, R),
	      *s16 = bk_f32(&K, R);
	memcpy(got, a, (size_t)n * 2); /* in place over a */
	CHECK_OK(K.o->residual_add(K.s, got, got, b, QE_BF16, bias, R, C, m, sd));
	CHECK_OK(K.o->layernorm_fwd(K.s, NULL, mw, sw, yw, QE_F32, NULL, NULL, R, C));
	CHECK_OK(K.o->layernorm_fwd(K.s, NULL, m16, s16, want, QE_BF16, NULL, NULL, R, C));
	CHECK_OK(K.o->residual_add(K.s, nob, a, b, QE_BF16, NULL, R, C, NULL, NULL));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, want, (size_t)n * 2, what);
	CHECK_BYTES(m, mw, (size_t)R * sizeof(float), "residual_add bf16: mean == layernorm_fwd's of y widened");
	CHECK_BYTES(sd, sw, (size_t)R * sizeof(float), "residual_add bf16: rstd == layernorm_fwd's of y widened");
	CHECK_BYTES(m16, mw, (size_t)R * sizeof(float), "layernorm_fwd bf16 x: mean == that of x widened");
	CHECK_BYTES(s16, sw, (size_t)R * sizeof(float), "layernorm_fwd bf16 x: rstd == that of x widened");
	int bad = 0;
	for (int64_t i = 0; i < n; i++)
		bad += nob[i] != qe_bf16_from_f32(aw[i] + bw[i]);
	CHECK(bad == 0, "residual_add bf16 without a bias: %d of %lld sums differ from a + b rounded", bad, (long long)n);
	REFUSED(QE_EUNSUPPORTED, "residual_add of an FP8 stream",
		K.o->residual_add(s2, got, a, b, QE_E4M3, bias, R, C, NULL, NULL));

	/*
	 * layernorm_bwd on the bf16 stream (x, the residual and dx bf16): dx is
	 * the same call's f32 dx on x and the residual widened, rounded once;
	 * dw and db are its bytes; in place over the residual too
	 */
	float *dy = bk_f32(&K, n), *w = bk_f32(&K, C), *resw = bk_f32(&K, n), *dx[2], *dw[2], *db[2];
	uint16_t *res = bf16_normal(n, 1.0f, resw), *dx16 = bk_bytes(&K, (size_t)n * 2);
	fill_normal(dy, n, &rng, 1.0f);
	fill_normal(w, C, &rng, 1.0f);
	for (int k = 0; k < 2; k++) {
		dx[k] = bk_f32(&K, n);
		dw[k] = bk_f32(&K, C);
		db[k] = bk_f32(&K, C);
	}
	CHECK_OK(K.o->layernorm_bwd(K.s, dx[0], dw[0], db[0], dy, QE_F32, yw, QE_F32, mw, sw, w, R, C, resw));
	CHECK_OK(K.o->layernorm_bwd(K.s, dx16, dw[1], db[1], dy, QE_F32, want, QE_BF16, mw, sw, w, R, C, res));
	CHECK_OK(K.o->stream_sync(K.s));
	bad = 0;
	int moved = 0;
	for (int64_t i = 0; i < n; i++) {
		bad += dx16[i] != qe_bf16_from_f32(dx[0][i]);
		moved += qe_bf16_to_f32(dx16[i]) != dx[0][i];
	}
	CHECK(bad == 0, "layernorm_bwd bf16 stream: %d of %lld dx are not the f32 dx rounded", bad, (long long)n);
	CHECK(moved > 0, "layernorm_bwd bf16 stream: no dx needed rounding, so the test shows nothing");
	CHECK_BYTES(dw[1], dw[0], (size_t)C * sizeof(float), "layernorm_bwd bf16 stream: dw");
	CHECK_BYTES(db[1], db[0], (size_t)C * sizeof(float), "layernorm_bwd bf16 stream: db");
	uint16_t *inplace = bk_bytes(&K, (size_t)n * 2);
	memcpy(inplace, res, (size_t)n * 2);
	CHECK_OK(K.o->layernorm_bwd(K.s, inplace, NULL, NULL, dy, QE_F32, want, QE_BF16, mw, sw, w, R, C, inplace));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(inplace, dx16, (size_t)n * 2, "layernorm_bwd bf16 stream in place over the residual");
	K.o->free(K.b, inplace);
	K.o->free(K.b, dx16);
	REFUSED(QE_EUNSUPPORTED, "layernorm_bwd with an FP8 x",
		K.o->layernorm_bwd(s2, dx[1], dw[1], db[1], dy, QE_F32, want, QE_E5M2, mw, sw, w, R, C, res));
	REFUSED(QE_EUNSUPPORTED, "layernorm_fwd with an FP8 x",
		K.o->layernorm_fwd(s2, NULL, m, sd, want, QE_E4M3, NULL, NULL, R, C));
	float *bufs[] = { aw, bw, bias, yw, (float *)a, (float *)b, (float *)want, (float *)got, (float *)nob, m, sd, mw,
			  sw, m16, s16, dy, w, resw, (float *)res, dx[0], dx[1], dw[0], dw[1], db[0], db[1] };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

/*
 * embed_fwd over a batch of sequences: row r is wte[tok[r]] + wpe[r % T],
 * the same f32 bytes as one call per sequence, and in bf16 each of those
 * sums rounded once.
 */
static void test_embed_batch(int64_t B, int64_t T, int64_t H, int64_t V)
{
	int64_t N = B * T;
	float *wte = bk_f32(&K, V * H), *wpe = bk_f32(&K, T * H), *want = bk_f32(&K, N * H), *got = bk_f32(&K, N * H);
	int32_t *tok = bk_bytes(&K, (size_t)N * 4);
	uint16_t *got16 = bk_bytes(&K, (size_t)N * H * 2);
	fill_normal(wte, V * H, &rng, 1.0f);
	fill_normal(wpe, T * H, &rng, 1.0f);
	for (int64_t i = 0; i < N; i++)
		tok[i] = (int32_t)qe_rng_below(&rng, (uint64_t)V);
	for (int64_t q = 0; q < B; q++)
		CHECK_OK(K.o->embed_fwd(K.s, want + q * T * H, QE_F32, tok + q * T, wte, wpe, T, T, H));
	CHECK_OK(K.o->embed_fwd(K.s, got, QE_F32, tok, wte, wpe, N, T, H));
	CHECK_OK(K.o->embed_fwd(K.s, got16, QE_BF16, tok, wte, wpe, N, T, H));
	CHECK_OK(K.o->stream_sync(K.s));
	char what[96];
	snprintf(what, sizeof(what), "embed_fwd of %lld sequences of %lld", (long long)B, (long long)T);
	CHECK_BYTES(got, want, (size_t)(N * H) * sizeof(float), what);
	int bad = 0;
	for (int64_t i = 0; i < N * H; i++)
		bad += got16[i] != qe_bf16_from_f32(want[i]);
	CHECK(bad == 0, "%s in bf16: %d of %lld values are not the f32 sums rounded", what, bad, (long long)(N * H));
	CHECK(want[T * H] == wte[(int64_t)tok[T] * H] + wpe[0], "%s: the second sequence's first row", what);
	REFUSED(QE_EINVAL, "embed_fwd with positions of sequences of 0", K.o->embed_fwd(s2, got, QE_F32, tok, wte, wpe, N, 0, H));
	/*
	 * embed_bwd over the batch: dwte as one call over all rows, dwpe the
	 * sequences' position rows added in order from 0; a bf16 dout gives the
	 * bytes of its f32 widening
	 */
	float *dwte[2], *dwpe[2], *d32 = bk_f32(&K, N * H), *pw = bk_f32(&K, T * H);
	uint16_t *d16 = bf16_normal(N * H, 1.0f, d32);
	for (int k = 0; k < 2; k++) {
		dwte[k] = bk_f32(&K, V * H);
		dwpe[k] = bk_f32(&K, T * H);
	}
	CHECK_OK(K.o->embed_bwd(K.s, dwte[0], dwpe[0], tok, d32, QE_F32, N, T, H, V, NULL, 0));
	CHECK_OK(K.o->embed_bwd(K.s, dwte[1], dwpe[1], tok, d16, QE_BF16, N, T, H, V, NULL, 0));
	CHECK_OK(K.o->stream_sync(K.s));
	for (int64_t i = 0; i < T * H; i++) {
		float acc = 0.0f;
		for (int64_t q = 0; q < B; q++)
			acc += d32[q * T * H + i];
		pw[i] = acc;
	}
	snprintf(what, sizeof(what), "embed_bwd of %lld sequences of %lld", (long long)B, (long long)T);
	CHECK_BYTES(dwpe[0], pw, (size_t)(T * H) * sizeof(float), what);
	CHECK_BYTES(dwpe[1], dwpe[0], (size_t)(T * H) * sizeof(float), "embed_bwd bf16 dout: dwpe");
	CHECK_BYTES(dwte[1], dwte[0], (size_t)(V * H) * sizeof(float), "embed_bwd bf16 dout: dwte");
	REFUSED(QE_EINVAL, "embed_bwd of rows that are not whole sequences",
		K.o->embed_bwd(s2, dwte[0], dwpe[0], tok, d32, QE_F32, N - 1, T, H, V, NULL, 0));
	float *bufs[] = { wte, wpe, want, got, (float *)tok, (float *)got16, dwte[0], dwte[1], dwpe[0], dwpe[1], d32,
			  pw, (float *)d16 };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

/*
 * The logits' gradient made by the head's dY cast: xent_rows gives xent's
 * loss to the bit, and a cast of the logits with its statistics (pre_xent)
 * writes the bytes - codes, transposed copy, amax and scale_inv - of xent's
 * stored gradient cast plainly, for f32 and bf16 logits, into e5m2 with
 * delayed and current scaling and into bf16; the padding gets no gradient.
 */
static void test_cast_xent(int64_t R, int64_t V, int64_t valid)
{
	int64_t n = R * V;
	float *l32 = bk_f32(&K, n), *stats = bk_f32(&K, 2 * R), *d32 = bk_f32(&K, n), *loss = bk_f32(&K, 4);
	uint16_t *l16 = bk_bytes(&K, (size_t)n * 2), *d16 = bk_bytes(&K, (size_t)n * 2);
	int32_t *tgt = bk_bytes(&K, (size_t)R * 4);
	for (int64_t i = 0; i < n; i++) {
		l16[i] = qe_bf16_from_f32(3.0f * qe_rng_normal(&rng));
		l32[i] = qe_bf16_to_f32(l16[i]) + 0.01f * qe_rng_normal(&rng);
	}
	for (int64_t r = 0; r < R; r++)
		tgt[r] = (int32_t)qe_rng_below(&rng, (uint64_t)valid);
	const float gs = 0.25f;
	for (int k = 0; k < 2; k++) {
		qe_dtype lt = k ? QE_BF16 : QE_F32;
		const void *logits = k ? (const void *)l16 : (const void *)l32;
		void *dl = k ? (void *)d16 : (void *)d32;
		float want_loss, got_loss;
		CHECK_OK(K.o->xent(K.s, loss, dl, logits, tgt, R, V, valid, gs, lt));
		CHECK_OK(K.o->stream_sync(K.s));
		want_loss = *loss;
		CHECK_OK(K.o->xent_rows(K.s, loss, stats, logits, tgt, R, V, valid, lt));
		CHECK_OK(K.o->stream_sync(K.s));
		got_loss = *loss;
		char what[128];
		snprintf(what, sizeof(what), "xent_rows [%lld,%lld] %s logits: loss", (long long)R, (long long)V,
			 qe_dtype_name(lt));
		CHECK_BYTES(&got_loss, &want_loss, sizeof(float), what);
		for (int cfg = 0; cfg < 3; cfg++) {
			qe_dtype ot = cfg == 2 ? QE_BF16 : QE_E5M2;
			int current = cfg == 1;
			size_t esz = qe_dtype_size(ot);
			cast_out o[2];
			for (int j = 0; j < 2; j++) {
				o[j].row = bk_bytes(&K, (size_t)n * esz);
				o[j].col = bk_bytes(&K, (size_t)n * esz);
				o[j].meta[0] = 3000.0f;
				o[j].meta[1] = 0.0f;
				o[j].meta[2] = 0.0f;
				qe_cast_args a = { .x = qe_tensor_2d(j ? (void *)logits : dl, lt, QE_DEV_CPU, R, V),
						   .row = qe_tensor_2d(o[j].row, ot, QE_DEV_CPU, R, V),
						   .col = qe_tensor_2d(o[j].col, ot, QE_DEV_CPU, V, R),
						   .scale = &o[j].meta[0],
						   .amax = current ? NULL : &o[j].meta[1],
						   .scale_inv = &o[j].meta[2],
						   .current = current,
						   .margin = 0 };
				if (j) {
					a.pre_xent.stats = stats;
					a.pre_xent.tgt = tgt;
					a.pre_xent.valid = valid;
					a.pre_xent.grad_scale = gs;
				}
				CHECK_OK(K.o->cast(K.s, &a));
				CHECK_OK(K.o->stream_sync(K.s));
			}
			snprintf(what, sizeof(what), "cast pre_xent [%lld,%lld] %s logits into %s%s", (long long)R,
				 (long long)V, qe_dtype_name(lt), qe_dtype_name(ot), current ? " (current)" : "");
			CHECK_BYTES(o[1].row, o[0].row, (size_t)n * esz, what);
			CHECK_BYTES(o[1].col, o[0].col, (size_t)n * esz, what);
			CHECK_BYTES(o[1].meta, o[0].meta, sizeof(o[0].meta), what);
			CHECK(ot == QE_BF16 || current || o[0].meta[1] > 0.0f, "%s: no amax recorded", what);
			int nonzero_pad = 0;
			for (int64_t r = 0; r < R; r++)
				for (int64_t c = valid; c < V; c++)
					nonzero_pad += ot == QE_BF16 ? ((uint16_t *)o[1].row)[r * V + c] != 0
								     : ((uint8_t *)o[1].row)[r * V + c] != 0;
			CHECK(nonzero_pad == 0, "%s: %d gradients in the padding", what, nonzero_pad);
			free_out(&o[0]);
			free_out(&o[1]);
		}
	}
	qe_cast_args bad = { .x = qe_tensor_2d(l32, QE_F32, QE_DEV_CPU, R, V),
			     .row = qe_tensor_2d(d32, QE_F32, QE_DEV_CPU, R, V) };
	bad.pre_xent.stats = stats;
	bad.pre_xent.tgt = tgt;
	bad.pre_xent.valid = valid;
	bad.pre_ln.mean = stats;
	REFUSED(QE_EINVAL, "cast pre_xent with a layernorm prologue", K.o->cast(s2, &bad));
	bad.pre_ln.mean = NULL;
	bad.pre_xent.valid = V + 1;
	REFUSED(QE_EINVAL, "cast pre_xent with more valid columns than the logits have", K.o->cast(s2, &bad));
	float *bufs[] = { l32, stats, d32, loss, (float *)l16, (float *)d16, (float *)tgt };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

static void test_layernorm_bwd_residual(int64_t R, int64_t C)
{
	int64_t n = R * C;
	float *x = bk_f32(&K, n), *dy = bk_f32(&K, n), *res = bk_f32(&K, n), *w = bk_f32(&K, C), *b = bk_f32(&K, C);
	float *mean = bk_f32(&K, R), *rstd = bk_f32(&K, R), *g = bk_f32(&K, n), *want = bk_f32(&K, n), *got = bk_f32(&K, n);
	float *dw[2] = { bk_f32(&K, C), bk_f32(&K, C) }, *db[2] = { bk_f32(&K, C), bk_f32(&K, C) };
	fill_normal(x, n, &rng, 2.0f);
	fill_normal(dy, n, &rng, 1.0f);
	fill_normal(res, n, &rng, 1.0f);
	fill_normal(w, C, &rng, 1.0f);
	fill_normal(b, C, &rng, 0.3f);
	CHECK_OK(K.o->layernorm_fwd(K.s, NULL, mean, rstd, x, QE_F32, w, b, R, C));
	CHECK_OK(K.o->layernorm_bwd(K.s, g, dw[0], db[0], dy, QE_F32, x, QE_F32, mean, rstd, w, R, C, NULL));
	CHECK_OK(K.o->add(K.s, want, res, g, n));
	CHECK_OK(K.o->layernorm_bwd(K.s, got, dw[1], db[1], dy, QE_F32, x, QE_F32, mean, rstd, w, R, C, res));
	CHECK_OK(K.o->stream_sync(K.s));
	char what[96];
	snprintf(what, sizeof(what), "layernorm_bwd residual [%lld,%lld]", (long long)R, (long long)C);
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), what);
	CHECK(bytes_diff(got, g, (size_t)n * sizeof(float)) >= 0, "%s: the residual changed nothing", what);
	CHECK_BYTES(dw[1], dw[0], (size_t)C * sizeof(float), "layernorm_bwd residual: dw");
	CHECK_BYTES(db[1], db[0], (size_t)C * sizeof(float), "layernorm_bwd residual: db");
	/* in place: dx is the residual */
	memcpy(got, res, (size_t)n * sizeof(float));
	CHECK_OK(K.o->layernorm_bwd(K.s, got, NULL, NULL, dy, QE_F32, x, QE_F32, mean, rstd, w, R, C, got));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, want, (size_t)n * sizeof(float), "layernorm_bwd residual in place");
	/* dy in bf16: every output the bytes of dy widened to f32 */
	uint16_t *dy16 = bk_bytes(&K, (size_t)n * 2);
	for (int64_t i = 0; i < n; i++) {
		dy16[i] = qe_bf16_from_f32(dy[i]);
		dy[i] = qe_bf16_to_f32(dy16[i]);
	}
	CHECK_OK(K.o->layernorm_bwd(K.s, g, dw[0], db[0], dy, QE_F32, x, QE_F32, mean, rstd, w, R, C, res));
	CHECK_OK(K.o->layernorm_bwd(K.s, got, dw[1], db[1], dy16, QE_BF16, x, QE_F32, mean, rstd, w, R, C, res));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK_BYTES(got, g, (size_t)n * sizeof(float), "layernorm_bwd bf16 dy: dx");
	CHECK_BYTES(dw[1], dw[0], (size_t)C * sizeof(float), "layernorm_bwd bf16 dy: dw");
	CHECK_BYTES(db[1], db[0], (size_t)C * sizeof(float), "layernorm_bwd bf16 dy: db");
	REFUSED(QE_EUNSUPPORTED, "layernorm_bwd with an FP8 dy",
		K.o->layernorm_bwd(s2, got, dw[1], db[1], dy16, QE_E4M3, x, QE_F32, mean, rstd, w, R, C, res));
	K.o->free(K.b, dy16);
	float *bufs[] = { x, dy, res, w, b, mean, rstd, g, want, got, dw[0], dw[1], db[0], db[1] };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

static void test_cast_dgelu(int64_t R, int64_t C)
{
	int64_t n = R * C;
	float *dy = bk_f32(&K, n), *u = bk_f32(&K, n), *bias = bk_f32(&K, C), *v = bk_f32(&K, n);
	float *want = bk_f32(&K, C), *got = bk_f32(&K, C), *ub = bk_f32(&K, n);
	fill_normal(dy, n, &rng, 1.0f);
	fill_normal(u, n, &rng, 2.0f);
	fill_normal(bias, C, &rng, 0.5f);
	const qe_dtype dts[] = { QE_F32, QE_BF16, QE_E5M2 };
	int cases = 0;
	for (int wb = 0; wb < 2; wb++) {
		const float *pb = wb ? bias : NULL;
		/* GELU's input: u, plus the bias as gemm would add it */
		for (int64_t i = 0; i < n; i++)
			ub[i] = pb ? u[i] + pb[i % C] : u[i];
		CHECK_OK(K.o->gelu_bwd(K.s, v, ub, dy, n));
		CHECK_OK(K.o->bias_grad(K.s, want, v, R, C));
		for (size_t d = 0; d < sizeof(dts) / sizeof(*dts); d++) {
			for (int current = 0; current <= qe_dtype_is_fp8(dts[d]); current++) {
				size_t nb = (size_t)n * qe_dtype_size(dts[d]);
				cast_out f, ref;
				f.row = bk_bytes(&K, nb);
				f.col = bk_bytes(&K, nb);
				f.meta[0] = 37.0f;
				f.meta[1] = 0.5f;
				f.meta[2] = 0.0f;
				memset(got, 0xff, (size_t)C * sizeof(float));
				qe_cast_args a = { .x = qe_tensor_2d(dy, QE_F32, QE_DEV_CPU, R, C),
						   .row = qe_tensor_2d(f.row, dts[d], QE_DEV_CPU, R, C),
						   .col = qe_tensor_2d(f.col, dts[d], QE_DEV_CPU, C, R),
						   .scale = &f.meta[0],
						   .amax = &f.meta[1],
						   .scale_inv = &f.meta[2],
						   .current = current,
						   .margin = 1,
						   .pre_bias = pb,
						   .pre_dgelu = u,
						   .colsum = got };
				CHECK_OK(K.o->cast(K.s, &a));
				run_cast(v, R, C, dts[d], current, 1, 1, NULL, NULL, 0, &ref);
				char what[96];
				snprintf(what, sizeof(what), "dgelu cast [%lld,%lld] %s%s%s", (long long)R, (long long)C,
					 qe_dtype_name(dts[d]), current ? " current" : "", pb ? " bias" : "");
				CHECK_BYTES(f.row, ref.row, nb, what);
				CHECK_BYTES(f.col, ref.col, nb, what);
				CHECK_BYTES(f.meta, ref.meta, sizeof(f.meta), what);
				CHECK_BYTES(got, want, (size_t)C * sizeof(float), what);
				free_out(&f);
				free_out(&ref);
				cases++;
			}
		}
	}
	printf("dgelu cast [%lld,%lld]: %d cases == gelu_bwd, bias_grad and the plain cast\n", (long long)R, (long long)C,
	       cases);
	qe_cast_args a = { .x = qe_tensor_2d(dy, QE_F32, QE_DEV_CPU, R, C),
			   .row = qe_tensor_2d(NULL, QE_F32, QE_DEV_CPU, R, C),
			   .col = qe_tensor_2d(NULL, QE_F32, QE_DEV_CPU, C, R),
			   .pre_gelu = 1,
			   .pre_dgelu = u };
	REFUSED(QE_EINVAL, "cast with pre_dgelu and pre_gelu", K.o->cast(s2, &a));
	float *bufs[] = { dy, u, bias, v, want, got, ub };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

static void test_flash_qkv_bias(int64_t B, int64_t T, int64_t H, int nh)
{
	int64_t N = B * T, n3 = N * 3 * H;
	float *qkv = bk_f32(&K, n3), *bias = bk_f32(&K, 3 * H), *qb = bk_f32(&K, n3), *dout = bk_f32(&K, N * H);
	float *o[2] = { bk_f32(&K, N * H), bk_f32(&K, N * H) }, *l[2] = { bk_f32(&K, B * nh * T), bk_f32(&K, B * nh * T) };
	float *dq[2] = { bk_f32(&K, n3), bk_f32(&K, n3) };
	fill_normal(qkv, n3, &rng, 1.0f);
	fill_normal(bias, 3 * H, &rng, 0.5f);
	fill_normal(dout, N * H, &rng, 1.0f);
	for (int64_t i = 0; i < n3; i++)
		qb[i] = qkv[i] + bias[i % (3 * H)];
	const qe_flash_operands kinds[] = { QE_FLASH_TF32, QE_FLASH_BF16 };
	for (int k = 0; k < 2; k++) {
		CHECK_OK(K.o->attn_flash_fwd(K.s, o[0], l[0], qb, NULL, B, T, H, nh, kinds[k], QE_F32));
		CHECK_OK(K.o->attn_flash_fwd(K.s, o[1], l[1], qkv, bias, B, T, H, nh, kinds[k], QE_F32));
		CHECK_OK(K.o->attn_flash_bwd(K.s, dq[0], dout, qb, NULL, o[0], l[0], B, T, H, nh, kinds[k], QE_F32));
		CHECK_OK(K.o->attn_flash_bwd(K.s, dq[1], dout, qkv, bias, o[1], l[1], B, T, H, nh, kinds[k], QE_F32));
		CHECK_OK(K.o->stream_sync(K.s));
		char what[96];
		snprintf(what, sizeof(what), "flash qkv_bias B %lld T %lld H %lld kind %d", (long long)B, (long long)T,
			 (long long)H, (int)kinds[k]);
		CHECK_BYTES(o[1], o[0], (size_t)(N * H) * sizeof(float), what);
		CHECK_BYTES(l[1], l[0], (size_t)(B * nh * T) * sizeof(float), what);
		CHECK_BYTES(dq[1], dq[0], (size_t)n3 * sizeof(float), what);
	}
	/* the bias shows: attention of the unbiased qkv differs */
	CHECK_OK(K.o->attn_flash_fwd(K.s, o[0], l[0], qkv, NULL, B, T, H, nh, QE_FLASH_TF32, QE_F32));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK(bytes_diff(o[0], o[1], (size_t)(N * H) * sizeof(float)) >= 0, "flash qkv_bias: the bias changed nothing");
	/*
	 * Activations stored in bf16 (flash's under bf16 activations): read
	 * widened exactly and written rounded, so out and dqkv are the codes of
	 * the f32 run's on the same values, bias and all, and lse its bytes;
	 * refused with TF32 operands and in any other type.
	 */
	uint16_t *q16 = (uint16_t *)bk_f32(&K, n3), *d16 = (uint16_t *)bk_f32(&K, N * H);
	uint16_t *o16 = (uint16_t *)bk_f32(&K, N * H), *dq16 = (uint16_t *)bk_f32(&K, n3);
	uint16_t *want = (uint16_t *)bk_f32(&K, n3);
	for (int64_t i = 0; i < n3; i++)
		qb[i] = qe_bf16_to_f32(q16[i] = qe_bf16_from_f32(qkv[i]));
	for (int64_t i = 0; i < N * H; i++)
		dout[i] = qe_bf16_to_f32(d16[i] = qe_bf16_from_f32(dout[i]));
	CHECK_OK(K.o->attn_flash_fwd(K.s, o[0], l[0], qb, bias, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.o->attn_flash_fwd(K.s, o16, l[1], q16, bias, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.o->stream_sync(K.s));
	for (int64_t i = 0; i < N * H; i++)
		o[0][i] = qe_bf16_to_f32(want[i] = qe_bf16_from_f32(o[0][i]));
	CHECK_BYTES(o16, want, (size_t)(N * H) * 2, "flash bf16 activations: out");
	CHECK_BYTES(l[1], l[0], (size_t)(B * nh * T) * sizeof(float), "flash bf16 activations: lse");
	/* the backward from the rounded out on both sides */
	CHECK_OK(K.o->attn_flash_bwd(K.s, dq[0], dout, qb, bias, o[0], l[0], B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.o->attn_flash_bwd(K.s, dq16, d16, q16, bias, o16, l[0], B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.o->stream_sync(K.s));
	for (int64_t i = 0; i < n3; i++)
		want[i] = qe_bf16_from_f32(dq[0][i]);
	CHECK_BYTES(dq16, want, (size_t)n3 * 2, "flash bf16 activations: dqkv");
	REFUSED(QE_EINVAL, "flash bf16 activations with tf32 operands",
		K.o->attn_flash_fwd(s2, o16, l[1], q16, NULL, B, T, H, nh, QE_FLASH_TF32, QE_BF16));
	REFUSED(QE_ESHAPE, "flash e4m3 activations",
		K.o->attn_flash_bwd(s2, dq16, d16, q16, NULL, o16, l[0], B, T, H, nh, QE_FLASH_BF16, QE_E4M3));
	float *bufs[] = { qkv,		 bias,		 qb,	      dout,	    o[0],	   o[1],
			  l[0],		 l[1],		 dq[0],	      dq[1],	    (float *)q16,  (float *)d16,
			  (float *)o16, (float *)dq16, (float *)want };
	free_bufs(bufs, sizeof(bufs) / sizeof(*bufs));
}

int main(void)
{
	qe_rng_init(&rng, SEED);
	CHECK_OK(bk_open(&K));
	if (!K.s)
		return qe_test_done("backend_test_fused");
	test_cast_prologue(24, 20);
	test_cast_prologue(13, 7);
	test_cast_colsum(200, 20); /* row groups of 64, 64, 64 and 8 */
	test_cast_colsum(13, 7);
	test_cast_colsum(64, 12);
	test_cast_dgelu(200, 20);
	test_cast_dgelu(13, 7);
	test_residual_add(24, 20);
	test_residual_add(13, 7);
	test_residual_bf16(24, 20);
	test_residual_bf16(13, 7);
	test_embed_batch(3, 5, 8, 11);
	test_cast_xent(24, 40, 37);
	test_cast_xent(13, 12, 12);
	test_layernorm_bwd_residual(24, 20);
	test_layernorm_bwd_residual(13, 7);
	test_flash_qkv_bias(2, 40, 64, 4);
	test_flash_qkv_bias(1, 17, 32, 1);
	bk_close(&K);
	return qe_test_done("backend_test_fused");
}
