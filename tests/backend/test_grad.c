/*
 * test_grad.c - every backward op of the cpu backend against central finite
 * differences of its own forward.
 *
 * The probe loss is L = sum_i g_i y_i with fixed random g (the upstream
 * gradient), evaluated from the fp32 forward and summed in double.  Each
 * input element is moved by +-eps (eps = 1e-3 relative to max(1,|x|)), and
 * the step actually taken in fp32 is used as the denominator.  Tolerance per
 * element: |analytic - numeric| <= 1e-2 * max(|analytic|, |numeric|) + 1e-3 *
 * (largest |numeric| of that tensor), i.e. 1% relative with an absolute floor
 * tied to the gradient's scale (fp32 forward noise divided by 2 eps).
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "runtime/backend/colsum.h"

#define SEED 7771u
#define RTOL 1e-2
#define ATOL_REL 1e-3

static qe_rng rng;
static bk K;

typedef double (*loss_fn)(void *ctx);

/* Compare grad[0..n) with central differences of f over x[0..n). */
static void fd_check(const char *what, float *x, const float *grad, int64_t n, loss_fn f, void *ctx)
{
	double *num = malloc((size_t)n * sizeof(double));
	double maxnum = 0, worst = 0;
	for (int64_t i = 0; i < n; i++) {
		float x0 = x[i];
		float h = 1e-3f * fmaxf(1.0f, fabsf(x0));
		float xp = x0 + h, xm = x0 - h;
		x[i] = xp;
		double lp = f(ctx);
		x[i] = xm;
		double lm = f(ctx);
		x[i] = x0;
		num[i] = (lp - lm) / ((double)xp - (double)xm);
		if (fabs(num[i]) > maxnum)
			maxnum = fabs(num[i]);
	}
	int bad = 0;
	for (int64_t i = 0; i < n; i++) {
		double a = grad[i], err = fabs(a - num[i]);
		double tol = RTOL * fmax(fabs(a), fabs(num[i])) + ATOL_REL * maxnum;
		if (err / tol > worst)
			worst = err / tol;
		if (err > tol && bad++ < 5)
			CHECK(0, "%s[%lld]: analytic %.6g, numeric %.6g", what, (long long)i, a, num[i]);
	}
	CHECK(bad == 0, "%s: %d of %lld elements outside tolerance", what, bad, (long long)n);
	printf("%-16s n=%-4lld max|grad| %.3g, worst error %.3f of tolerance\n", what, (long long)n, maxnum, worst);
	free(num);
}

static double dot_d(const float *g, const float *y, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += (double)g[i] * y[i];
	return s;
}

/* ---- layernorm ---- */
typedef struct {
	int64_t R, C;
	float *x, *w, *b, *y, *mean, *rstd, *g;
} ln_ctx;

static double ln_loss(void *p)
{
	ln_ctx *c = p;
	CHECK_OK(K.o->layernorm_fwd(K.s, c->y, c->mean, c->rstd, c->x, QE_F32, c->w, c->b, c->R, c->C));
	return dot_d(c->g, c->y, c->R * c->C);
}

static void test_layernorm(void)
{
	ln_ctx c = { .R = 5, .C = 12 };
	int64_t n = c.R * c.C;
	c.x = bk_f32(&K, n), c.w = bk_f32(&K, c.C), c.b = bk_f32(&K, c.C), c.y = bk_f32(&K, n);
	c.mean = bk_f32(&K, c.R), c.rstd = bk_f32(&K, c.R), c.g = bk_f32(&K, n);
	float *dx = bk_f32(&K, n), *dw = bk_f32(&K, c.C), *db = bk_f32(&K, c.C);
	fill_normal(c.x, n, &rng, 2.0f);
	for (int64_t i = 0; i < c.C; i++) {
		c.w[i] = 1.0f + 0.3f * qe_rng_normal(&rng);
		c.b[i] = 0.1f * qe_rng_normal(&rng);
	}
	fill_normal(c.g, n, &rng, 1.0f);
	ln_loss(&c);
	dw[0] = 99.0f; /* overwritten, not accumulated */
	CHECK_OK(K.o->layernorm_bwd(K.s, dx, dw, db, c.g, QE_F32, c.x, QE_F32, c.mean, c.rstd, c.w, c.R, c.C, NULL));
	fd_check("layernorm dx", c.x, dx, n, ln_loss, &c);
	fd_check("layernorm dw", c.w, dw, c.C, ln_loss, &c);
	fd_check("layernorm db", c.b, db, c.C, ln_loss, &c);
	float *bufs[] = { c.x, c.w, c.b, c.y, c.mean, c.rstd, c.g, dx, dw, db };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
		K.o->free(K.b, bufs[i]);
}

/* ---- gelu ---- */
typedef struct {
	int64_t n;
	float *x, *y, *g;
} gelu_ctx;

static double gelu_loss(void *p)
{
	gelu_ctx *c = p;
	CHECK_OK(K.o->gelu_fwd(K.s, c->y, c->x, c->n));
	return dot_d(c->g, c->y, c->n);
}

static void test_gelu(void)
{
	gelu_ctx c = { .n = 64 };
	c.x = bk_f32(&K, c.n), c.y = bk_f32(&K, c.n), c.g = bk_f32(&K, c.n);
	float *dx = bk_f32(&K, c.n);
	fill_normal(c.x, c.n, &rng, 2.5f);
	fill_normal(c.g, c.n, &rng, 1.0f);
	CHECK_OK(K.o->gelu_bwd(K.s, dx, c.x, c.g, c.n));
	fd_check("gelu dx", c.x, dx, c.n, gelu_loss, &c);
	/* a spot value of the GPT-2 tanh form: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) */
	float one = 1.0f, y1;
	CHECK_OK(K.o->gelu_fwd(K.s, &y1, &one, 1));
	CHECK(fabs(y1 - 0.841192) < 1e-5, "gelu(1) = %.7f, want 0.841192", y1);
	K.o->free(K.b, c.x);
	K.o->free(K.b, c.y);
	K.o->free(K.b, c.g);
	K.o->free(K.b, dx);
}

/* ---- attention ---- */
typedef struct {
	int64_t T, H;
	int nh;
	float *qkv, *out, *probs, *g;
} attn_ctx;

static double attn_loss(void *p)
{
	attn_ctx *c = p;
	CHECK_OK(K.o->attn_fwd(K.s, c->out, c->probs, c->qkv, c->T, c->H, c->nh));
	return dot_d(c->g, c->out, c->T * c->H);
}

static void test_attention(void)
{
	attn_ctx c = { .T = 6, .H = 8, .nh = 2 };
	int64_t nq = c.T * 3 * c.H;
	c.qkv = bk_f32(&K, nq), c.out = bk_f32(&K, c.T * c.H), c.probs = bk_f32(&K, c.nh * c.T * c.T);
	c.g = bk_f32(&K, c.T * c.H);
	float *dqkv = bk_f32(&K, nq);
	fill_normal(c.qkv, nq, &rng, 1.0f);
	fill_normal(c.g, c.T * c.H, &rng, 1.0f);
	attn_loss(&c);
	/* causal: probabilities above the diagonal are exactly 0, rows sum to 1 */
	int bad = 0;
	for (int h = 0; h < c.nh; h++)
		for (int64_t t = 0; t < c.T; t++) {
			double s = 0;
			for (int64_t t2 = 0; t2 < c.T; t2++) {
				float pr = c.probs[(h * c.T + t) * c.T + t2];
				if (t2 > t && pr != 0.0f)
					bad++;
				s += pr;
			}
			if (fabs(s - 1) > 1e-5)
				bad++;
		}
	CHECK(bad == 0, "attention probs: %d causal/normalization violations", bad);
	for (int64_t i = 0; i < nq; i++)
		dqkv[i] = 42.0f; /* overwritten */
	CHECK_OK(K.o->attn_bwd(K.s, dqkv, c.g, c.qkv, c.probs, c.T, c.H, c.nh));
	fd_check("attention dqkv", c.qkv, dqkv, nq, attn_loss, &c);
	float *bufs[] = { c.qkv, c.out, c.probs, c.g, dqkv };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
		K.o->free(K.b, bufs[i]);
}

/*
 * The flash ops' operand kind: the cpu computes in fp32 whatever it is, so
 * both kinds give the same bytes; an unknown kind is refused, naming the op.
 */
static void test_flash_operands(void)
{
	const int64_t B = 2, T = 5, H = 32;
	const int nh = 2;
	float *qkv = bk_f32(&K, B * T * 3 * H), *o1 = bk_f32(&K, B * T * H), *o2 = bk_f32(&K, B * T * H);
	float *l1 = bk_f32(&K, B * nh * T), *l2 = bk_f32(&K, B * nh * T);
	fill_normal(qkv, B * T * 3 * H, &rng, 1.0f);
	CHECK_OK(K.o->attn_flash_fwd(K.s, o1, l1, qkv, NULL, B, T, H, nh, QE_FLASH_TF32, QE_F32));
	CHECK_OK(K.o->attn_flash_fwd(K.s, o2, l2, qkv, NULL, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK(bytes_diff(o1, o2, (size_t)(B * T * H) * 4) < 0 && bytes_diff(l1, l2, (size_t)(B * nh * T) * 4) < 0,
	      "cpu flash: the operand kind changed the result");
	qe_stream *s = NULL; /* a refusal fails its stream */
	CHECK_OK(K.o->stream_create(K.b, &s));
	int rc = K.o->attn_flash_fwd(s, o1, l1, qkv, NULL, B, T, H, nh, (qe_flash_operands)7, QE_F32);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "attn_flash_fwd") && strstr(qe_last_error(), "operand kind 7"),
	      "operand kind 7: got %s: %s", qe_errname(rc), qe_last_error());
	K.o->stream_destroy(s);
	printf("flash operands   tf32 == bf16 on the cpu; kind 7 refused: %s\n", qe_last_error());
	float *bufs[] = { qkv, o1, o2, l1, l2 };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
		K.o->free(K.b, bufs[i]);
}

/* ---- embedding ---- */
typedef struct {
	int64_t T, H, V;
	int32_t *tok;
	float *wte, *wpe, *out, *g;
} emb_ctx;

static double emb_loss(void *p)
{
	emb_ctx *c = p;
	CHECK_OK(K.o->embed_fwd(K.s, c->out, QE_F32, c->tok, c->wte, c->wpe, c->T, c->T, c->H));
	return dot_d(c->g, c->out, c->T * c->H);
}

static void test_embed(void)
{
	emb_ctx c = { .T = 7, .H = 5, .V = 9 };
	c.tok = bk_bytes(&K, (size_t)c.T * sizeof(int32_t));
	int32_t toks[7] = { 3, 0, 3, 8, 1, 3, 0 }; /* repeats exercise the scatter-add */
	memcpy(c.tok, toks, sizeof(toks));
	c.wte = bk_f32(&K, c.V * c.H), c.wpe = bk_f32(&K, c.T * c.H), c.out = bk_f32(&K, c.T * c.H);
	c.g = bk_f32(&K, c.T * c.H);
	float *dwte = bk_f32(&K, c.V * c.H), *dwpe = bk_f32(&K, c.T * c.H);
	fill_normal(c.wte, c.V * c.H, &rng, 1.0f);
	fill_normal(c.wpe, c.T * c.H, &rng, 1.0f);
	fill_normal(c.g, c.T * c.H, &rng, 1.0f);
	for (int64_t i = 0; i < c.V * c.H; i++)
		dwte[i] = 5.0f; /* zeroed by the op */
	CHECK_OK(K.o->embed_bwd(K.s, dwte, dwpe, c.tok, c.g, QE_F32, c.T, c.T, c.H, c.V, NULL, 0));
	fd_check("embed dwte", c.wte, dwte, c.V * c.H, emb_loss, &c);
	fd_check("embed dwpe", c.wpe, dwpe, c.T * c.H, emb_loss, &c);
	/* token 3 at t = 0, 2, 5: summed in t order, bit for bit */
	for (int64_t i = 0; i < c.H; i++) {
		float want = 0.0f;
		want += c.g[0 * c.H + i];
		want += c.g[2 * c.H + i];
		want += c.g[5 * c.H + i];
		CHECK(memcmp(&want, &dwte[3 * c.H + i], 4) == 0, "dwte[3,%lld] not the t-ordered sum", (long long)i);
	}
	/*
	 * rows_written: clearing only the previous call's rows gives the bytes of
	 * a full clear, call after call on one buffer, and hands tok on
	 */
	float *dw2 = bk_f32(&K, c.V * c.H), *full = bk_f32(&K, c.V * c.H), *g2 = bk_f32(&K, c.T * c.H);
	int32_t *rows = bk_bytes(&K, (size_t)c.T * sizeof(int32_t));
	for (int64_t t = 0; t < c.T; t++)
		rows[t] = -1;
	rows[1] = (int32_t)c.V + 40; /* ids outside [0, V) are skipped */
	int32_t seqs[3][7] = { { 3, 0, 3, 8, 1, 3, 0 }, { 2, 2, 7, 0, 4, 4, 6 }, { 5, 5, 5, 5, 5, 5, 5 } };
	for (int k = 0; k < 3; k++) {
		memcpy(c.tok, seqs[k], sizeof(seqs[k]));
		fill_normal(g2, c.T * c.H, &rng, 1.0f);
		CHECK_OK(K.o->embed_bwd(K.s, dw2, dwpe, c.tok, g2, QE_F32, c.T, c.T, c.H, c.V, rows, 0));
		CHECK_OK(K.o->embed_bwd(K.s, full, dwpe, c.tok, g2, QE_F32, c.T, c.T, c.H, c.V, NULL, 0));
		CHECK_OK(K.o->stream_sync(K.s));
		CHECK(memcmp(dw2, full, (size_t)(c.V * c.H) * 4) == 0,
		      "embed_bwd call %d: clearing the previous rows differs from clearing all of dwte", k);
		CHECK(memcmp(rows, seqs[k], sizeof(seqs[k])) == 0, "embed_bwd call %d: rows_written is not tok", k);
	}
	/*
	 * accumulate: the bits of an overwriting call on a zeroed buffer followed
	 * by add_inplace, on the rows tok names (repeats included); every other
	 * row keeps its bytes (a -0.0 in one of them stays -0.0: not even added to)
	 */
	float *sum = bk_f32(&K, c.V * c.H), *want = bk_f32(&K, c.V * c.H), *one = bk_f32(&K, c.V * c.H);
	fill_normal(sum, c.V * c.H, &rng, 1.0f);
	sum[6 * c.H + 1] = -0.0f; /* row 6: no token of seqs[0] names it */
	memcpy(want, sum, (size_t)(c.V * c.H) * 4);
	memcpy(c.tok, seqs[0], sizeof(seqs[0]));
	fill_normal(g2, c.T * c.H, &rng, 1.0f);
	CHECK_OK(K.o->embed_bwd(K.s, one, dwpe, c.tok, g2, QE_F32, c.T, c.T, c.H, c.V, NULL, 0));
	CHECK_OK(K.o->stream_sync(K.s));
	for (int64_t v = 0; v < c.V; v++) {
		int named = 0;
		for (int64_t t = 0; t < c.T; t++)
			named |= seqs[0][t] == v;
		if (named)
			CHECK_OK(K.o->add_inplace(K.s, want + v * c.H, one + v * c.H, c.H));
	}
	CHECK_OK(K.o->embed_bwd(K.s, sum, dwpe, c.tok, g2, QE_F32, c.T, c.T, c.H, c.V, NULL, 1));
	CHECK_OK(K.o->stream_sync(K.s));
	CHECK(memcmp(sum, want, (size_t)(c.V * c.H) * 4) == 0,
	      "embed_bwd accumulate differs from an overwriting call plus add_inplace on the named rows");
	CHECK(signbit(sum[6 * c.H + 1]), "embed_bwd accumulate touched a row no token names");
	/* accumulate clears nothing, so it takes no rows_written */
	qe_stream *s3;
	CHECK_OK(K.o->stream_create(K.b, &s3));
	int rc = K.o->embed_bwd(s3, sum, dwpe, c.tok, g2, QE_F32, c.T, c.T, c.H, c.V, rows, 1);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "accumulate with rows_written"),
	      "accumulate with rows_written: got %s: %s", qe_errname(rc), qe_last_error());
	K.o->stream_destroy(s3);
	printf("embed accumulate == overwrite + add on the named rows; with rows_written refused\n");
	K.o->free(K.b, sum);
	K.o->free(K.b, want);
	K.o->free(K.b, one);
	K.o->free(K.b, dw2);
	K.o->free(K.b, full);
	K.o->free(K.b, g2);
	K.o->free(K.b, rows);
	memcpy(c.tok, toks, sizeof(toks));

	/* an out-of-vocabulary token is an error, on a fresh stream */
	qe_stream *s2;
	CHECK_OK(K.o->stream_create(K.b, &s2));
	c.tok[2] = (int32_t)c.V;
	CHECK(K.o->embed_bwd(s2, dwte, dwpe, c.tok, c.g, QE_F32, c.T, c.T, c.H, c.V, NULL, 0) == QE_EINVAL, "token == V must fail");
	K.o->stream_destroy(s2);
	float *bufs[] = { c.wte, c.wpe, c.out, c.g, dwte, dwpe };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
		K.o->free(K.b, bufs[i]);
	K.o->free(K.b, c.tok);
}

/* ---- cross-entropy ---- */
typedef struct {
	int64_t T, V;
	float gs;
	float *logits, *loss;
	int32_t *tgt;
} xent_ctx;

static double xent_loss(void *p)
{
	xent_ctx *c = p;
	CHECK_OK(K.o->xent(K.s, c->loss, NULL, c->logits, c->tgt, c->T, c->V, c->V, c->gs, QE_F32));
	return (double)*c->loss * c->gs;
}

static void test_xent(void)
{
	xent_ctx c = { .T = 4, .V = 11, .gs = 2.0f };
	int64_t n = c.T * c.V;
	c.logits = bk_f32(&K, n), c.loss = bk_f32(&K, 1);
	c.tgt = bk_bytes(&K, (size_t)c.T * sizeof(int32_t));
	float *dl = bk_f32(&K, n), *alias = bk_f32(&K, n), *loss2 = bk_f32(&K, 1);
	fill_normal(c.logits, n, &rng, 2.0f);
	for (int64_t t = 0; t < c.T; t++)
		c.tgt[t] = (int32_t)qe_rng_below(&rng, (uint64_t)c.V);
	CHECK_OK(K.o->xent(K.s, c.loss, dl, c.logits, c.tgt, c.T, c.V, c.V, c.gs, QE_F32));
	/* the loss itself, against a double evaluation */
	double ref = 0;
	for (int64_t t = 0; t < c.T; t++) {
		double mx = -INFINITY, s = 0;
		for (int64_t v = 0; v < c.V; v++)
			mx = fmax(mx, c.logits[t * c.V + v]);
		for (int64_t v = 0; v < c.V; v++)
			s += exp(c.logits[t * c.V + v] - mx);
		ref += log(s) - (c.logits[t * c.V + c.tgt[t]] - mx);
	}
	ref /= c.T;
	CHECK(fabs(*c.loss - ref) <= 1e-5 * fabs(ref), "xent loss %.7g, double %.7g", *c.loss, ref);
	float loss1 = *c.loss;
	fd_check("xent dlogits", c.logits, dl, n, xent_loss, &c);
	/* dlogits may alias logits: same loss, same bytes */
	memcpy(alias, c.logits, (size_t)n * sizeof(float));
	CHECK_OK(K.o->xent(K.s, loss2, alias, alias, c.tgt, c.T, c.V, c.V, c.gs, QE_F32));
	CHECK_BYTES(alias, dl, (size_t)n * sizeof(float), "xent with dlogits aliasing logits");
	CHECK(memcmp(loss2, &loss1, 4) == 0, "aliased loss %g vs %g", *loss2, loss1);
	float *bufs[] = { c.logits, c.loss, dl, alias, loss2 };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
		K.o->free(K.b, bufs[i]);
	K.o->free(K.b, c.tgt);
}

/*
 * Column j of dy summed in colsum.h's order: row groups from 0, the groups'
 * partials from 0; with run > 0 (layernorm's order) a group's partial adds
 * its runs of `run` rows, each summed from 0.
 */
static float colsum_ref(const float *dy, int64_t R, int64_t C, int64_t j, int64_t run)
{
	float s = 0.0f;
	for (int64_t g = 0; g < qe_colsum_groups(R); g++) {
		float part = 0.0f, rs = 0.0f;
		int64_t r0 = qe_colsum_group_start(R, g), r1 = qe_colsum_group_start(R, g + 1);
		for (int64_t r = r0; r < r1; r++) {
			rs += dy[r * C + j];
			if (r + 1 == r1 || (run > 0 && (r + 1 - r0) % run == 0)) {
				part += rs;
				rs = 0.0f;
			}
		}
		s += part;
	}
	return s;
}

/* ---- bias_grad and add: exact fixed-order sums ---- */
static void test_small_ops(void)
{
	int64_t R = 203, C = 13; /* 203 rows: three groups of 64 and one of 11 */
	float *dy = bk_f32(&K, R * C), *db = bk_f32(&K, C), *y = bk_f32(&K, R * C);
	fill_normal(dy, R * C, &rng, 1.0f);
	CHECK_OK(K.o->bias_grad(K.s, db, dy, R, C));
	int rowwise_differs = 0;
	for (int64_t j = 0; j < C; j++) {
		float s = colsum_ref(dy, R, C, j, 0), plain = 0.0f;
		CHECK(memcmp(&s, &db[j], 4) == 0, "bias_grad[%lld] not the grouped sum of colsum.h", (long long)j);
		for (int64_t r = 0; r < R; r++)
			plain += dy[r * C + j];
		rowwise_differs += memcmp(&plain, &db[j], 4) != 0;
	}
	/* the order matters: some column's plain row-order sum rounds differently */
	CHECK(rowwise_differs > 0, "bias_grad: grouped and row-order sums agree on all %lld columns", (long long)C);
	/* the layernorm weight and bias gradients are column sums in runs of QE_COLSUM_RUN rows within the groups */
	float *x = bk_f32(&K, R * C), *mean = bk_f32(&K, R), *rstd = bk_f32(&K, R), *w = bk_f32(&K, C);
	float *dx = bk_f32(&K, R * C), *dw = bk_f32(&K, C), *db2 = bk_f32(&K, C), *term = bk_f32(&K, R * C);
	fill_normal(x, R * C, &rng, 2.0f);
	fill_normal(w, C, &rng, 1.0f);
	for (int64_t r = 0; r < R; r++) {
		mean[r] = 0.1f * qe_rng_normal(&rng);
		rstd[r] = 1.0f + 0.2f * qe_rng_normal(&rng);
		for (int64_t j = 0; j < C; j++)
			term[r * C + j] = ((x[r * C + j] - mean[r]) * rstd[r]) * dy[r * C + j];
	}
	CHECK_OK(K.o->layernorm_bwd(K.s, dx, dw, db2, dy, QE_F32, x, QE_F32, mean, rstd, w, R, C, NULL));
	int grouped_differs = 0;
	for (int64_t j = 0; j < C; j++) {
		float sw = colsum_ref(term, R, C, j, QE_COLSUM_RUN), sb = colsum_ref(dy, R, C, j, QE_COLSUM_RUN);
		float gb = colsum_ref(dy, R, C, j, 0);
		CHECK(memcmp(&sw, &dw[j], 4) == 0, "layernorm dw[%lld] not the sum in runs of colsum.h", (long long)j);
		CHECK(memcmp(&sb, &db2[j], 4) == 0, "layernorm db[%lld] not the sum in runs of colsum.h", (long long)j);
		grouped_differs += memcmp(&gb, &db2[j], 4) != 0;
	}
	/* the runs matter: some column's plain grouped sum rounds differently */
	CHECK(grouped_differs > 0, "layernorm db: runs and plain groups agree on all %lld columns", (long long)C);
	float *lbufs[] = { x, mean, rstd, w, dx, dw, db2, term };
	for (size_t i = 0; i < sizeof(lbufs) / sizeof(*lbufs); i++)
		K.o->free(K.b, lbufs[i]);
	CHECK_OK(K.o->add(K.s, y, dy, dy, R * C));
	CHECK_OK(K.o->add_inplace(K.s, y, dy, R * C));
	int bad = 0;
	for (int64_t i = 0; i < R * C; i++) {
		float want = dy[i] + dy[i];
		want += dy[i];
		bad += memcmp(&want, &y[i], 4) != 0;
	}
	CHECK(bad == 0, "add/add_inplace: %d differ", bad);
	K.o->free(K.b, dy);
	K.o->free(K.b, db);
	K.o->free(K.b, y);
}

int main(void)
{
	printf("seed %u; tolerance rel %.0e + %.0e * max|numeric grad|, step 1e-3*max(1,|x|)\n", SEED, RTOL, ATOL_REL);
	qe_rng_init(&rng, SEED);
	CHECK_OK(bk_open(&K));
	if (!K.s)
		return qe_test_done("backend_test_grad");
	test_layernorm();
	test_gelu();
	test_attention();
	test_flash_operands();
	test_embed();
	test_xent();
	test_small_ops();
	bk_close(&K);
	return qe_test_done("backend_test_grad");
}
