/*
 * test_bf16_act.c - activations stored in bf16, on the cpu backend (the
 * reference the cuda kernels are held to in test_cuda_ops.c):
 *
 *  - gemm into a bf16 C: each element is qe_bf16_from_f32 of what the same
 *    GEMM writes into an f32 C, for FP8, bf16 and f32 operands; a bias or
 *    accumulate with a bf16 C is refused (QE_EINVAL) and C left as it was;
 *  - the cast of a bf16 x: the bytes (codes, amax, scale_inv, the scale
 *    under current scaling, column sums) of the same cast of x widened to
 *    f32, for e4m3, e5m2, bf16 and f32 outputs, with and without the
 *    layernorm and bias + GELU prologues;
 *  - GELU's backward prologue with GELU's input u in bf16: the bytes of the
 *    cast with u widened, for an f32 and a bf16 x;
 *  - xent over bf16 logits: the loss of xent over the widened logits, and
 *    a gradient that is that gradient rounded to bf16, padded columns
 *    included, written apart or over the logits;
 *  - refusals: xent of another dtype, a cast from an FP8 x (QE_ESHAPE).
 */
#include <math.h>

#include "bk_util.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

#define SEED 20261206u

static qe_rng rng;

/* A refused op runs on a stream of its own: a failed op poisons its stream. */
static qe_stream *fresh(bk *k)
{
	qe_stream *s = NULL;
	CHECK_OK(k->o->stream_create(k->b, &s));
	return s;
}

/* x rounded to bf16: the codes into q, their widened values into w */
static void to_bf16(uint16_t *q, float *w, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		q[i] = qe_bf16_from_f32(x[i]);
		w[i] = qe_bf16_to_f32(q[i]);
	}
}

static void test_gemm_bf16_out(bk *k)
{
	const qe_dtype dts[4] = { QE_E4M3, QE_BF16, QE_F32, QE_E5M2 };
	int64_t m = 21, n = 67, kk = 48;
	float *xa = bk_f32(k, m * kk), *xb = bk_f32(k, n * kk), *c32 = bk_f32(k, m * n), *bias = bk_f32(k, n);
	uint16_t *c16 = bk_bytes(k, (size_t)(m * n) * 2), *keep = bk_bytes(k, (size_t)(m * n) * 2);
	uint8_t *qa = bk_bytes(k, (size_t)(m * kk) * 4), *qb = bk_bytes(k, (size_t)(n * kk) * 4);
	float *sinv = bk_f32(k, 2);
	fill_normal(xa, m * kk, &rng, 2.0f);
	fill_normal(xb, n * kk, &rng, 0.7f);
	sinv[0] = 0.41f;
	sinv[1] = 2.5f;
	int pairs = 0;
	for (int i = 0; i < 3; i++) {
		qe_dtype ta = dts[i], tb = ta == QE_E4M3 ? QE_E5M2 : ta;
		for (int64_t j = 0; j < m * kk; j++) {
			if (ta == QE_F32)
				((float *)qa)[j] = xa[j];
			else if (ta == QE_BF16)
				((uint16_t *)qa)[j] = qe_bf16_from_f32(xa[j]);
			else
				qa[j] = qe_fp8_encode(xa[j] * 3.0f, ta, 1);
		}
		for (int64_t j = 0; j < n * kk; j++) {
			if (tb == QE_F32)
				((float *)qb)[j] = xb[j];
			else if (tb == QE_BF16)
				((uint16_t *)qb)[j] = qe_bf16_from_f32(xb[j]);
			else
				qb[j] = qe_fp8_encode(xb[j] * 0.5f, tb, 1);
		}
		qe_tensor A = qe_tensor_2d(qa, ta, QE_DEV_CPU, m, kk), B = qe_tensor_2d(qb, tb, QE_DEV_CPU, n, kk);
		A.scale_inv = &sinv[0];
		B.scale_inv = &sinv[1];
		qe_tensor C32 = qe_tensor_2d(c32, QE_F32, QE_DEV_CPU, m, n), C16 = qe_tensor_2d(c16, QE_BF16, QE_DEV_CPU, m, n);
		CHECK_OK(k->o->gemm(k->s, &A, &B, &C32, NULL, 0));
		CHECK_OK(k->o->gemm(k->s, &A, &B, &C16, NULL, 0));
		long bad = 0;
		for (int64_t j = 0; j < m * n; j++)
			bad += c16[j] != qe_bf16_from_f32(c32[j]);
		CHECK(bad == 0, "gemm %s x %s into bf16: %ld of %lld codes are not the f32 result rounded",
		      qe_dtype_name(ta), qe_dtype_name(tb), bad, (long long)(m * n));
		pairs++;
		/* a bias or accumulation into bf16 is refused, C untouched */
		memcpy(keep, c16, (size_t)(m * n) * 2);
		for (int r = 0; r < 2; r++) {
			qe_stream *rs = fresh(k);
			int rc = k->o->gemm(rs, &A, &B, &C16, r ? NULL : bias, r);
			k->o->stream_destroy(rs);
			CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "bf16"),
			      "gemm into bf16 with %s: rc %d (%s), want QE_EINVAL naming bf16", r ? "accumulate" : "a bias",
			      rc, qe_last_error());
		}
		CHECK_BYTES(c16, keep, (size_t)(m * n) * 2, "bf16 C after the refused GEMMs");
	}
	printf("gemm into bf16: %d operand kinds\n", pairs);
	void *fb[] = { xa, xb, c32, bias, c16, keep, qa, qb, sinv };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
}

/* One cast of x (bf16 when q is not NULL, else the f32 w) into row/col of dtype dt; the role's scalars in sc. */
typedef struct cast_out {
	void *row, *col;
	float *sc; /* scale, amax, scale_inv, then cols column sums */
} cast_out;

static void run_cast(bk *k, const uint16_t *q, const float *w, int64_t rows, int64_t cols, qe_dtype dt, int current,
		     int prologue, const float *st, cast_out *o)
{
	qe_cast_args a = { 0 };
	a.x = q ? qe_tensor_2d((void *)q, QE_BF16, QE_DEV_CPU, rows, cols)
		: qe_tensor_2d((void *)w, QE_F32, QE_DEV_CPU, rows, cols);
	a.row = qe_tensor_2d(o->row, dt, QE_DEV_CPU, rows, cols);
	a.col = qe_tensor_2d(o->col, dt, QE_DEV_CPU, cols, rows);
	o->sc[0] = 0.75f;
	o->sc[1] = 0.5f;
	a.scale = &o->sc[0];
	a.amax = &o->sc[1];
	a.scale_inv = &o->sc[2];
	a.current = current;
	a.colsum = o->sc + 3;
	if (prologue == 1) { /* layernorm from statistics st = mean[rows] rstd[rows] w[cols] b[cols] */
		a.pre_ln.mean = st;
		a.pre_ln.rstd = st + rows;
		a.pre_ln.w = st + 2 * rows;
		a.pre_ln.b = st + 2 * rows + cols;
	} else if (prologue == 2) { /* bias and GELU */
		a.pre_bias = st + 2 * rows;
		a.pre_gelu = 1;
	}
	CHECK_OK(k->o->cast(k->s, &a));
}

static void test_cast_bf16_in(bk *k)
{
	const qe_dtype outs[4] = { QE_E4M3, QE_E5M2, QE_BF16, QE_F32 };
	const int64_t shapes[2][2] = { { 64, 96 }, { 13, 7 } };
	int cases = 0;
	for (int si = 0; si < 2; si++) {
		int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
		float *x = bk_f32(k, n), *w = bk_f32(k, n), *st = bk_f32(k, 2 * rows + 2 * cols);
		uint16_t *q = bk_bytes(k, (size_t)n * 2);
		fill_normal(x, n, &rng, 4.0f);
		x[3] = 0.0f;
		to_bf16(q, w, x, n);
		fill_normal(st, 2 * rows + 2 * cols, &rng, 1.0f);
		for (int64_t r = 0; r < rows; r++)
			st[rows + r] = fabsf(st[rows + r]) + 0.1f; /* rstd > 0 */
		for (int oi = 0; oi < 4; oi++)
			for (int cur = 0; cur < 2; cur++)
				for (int pro = 0; pro < 3; pro++) {
					qe_dtype dt = outs[oi];
					size_t bytes = (size_t)n * qe_dtype_size(dt);
					cast_out a = { bk_bytes(k, bytes), bk_bytes(k, bytes), bk_f32(k, 3 + cols) };
					cast_out b = { bk_bytes(k, bytes), bk_bytes(k, bytes), bk_f32(k, 3 + cols) };
					run_cast(k, q, NULL, rows, cols, dt, cur, pro, st, &a);
					run_cast(k, NULL, w, rows, cols, dt, cur, pro, st, &b);
					char what[128];
					snprintf(what, sizeof(what), "cast of bf16 x [%lld,%lld] to %s current=%d prologue=%d",
						 (long long)rows, (long long)cols, qe_dtype_name(dt), cur, pro);
					CHECK_BYTES(a.row, b.row, bytes, what);
					CHECK_BYTES(a.col, b.col, bytes, what);
					CHECK_BYTES(a.sc, b.sc, (size_t)(3 + cols) * sizeof(float), what);
					cases++;
					void *fb[] = { a.row, a.col, a.sc, b.row, b.col, b.sc };
					for (size_t i = 0; i < 6; i++)
						k->o->free(k->b, fb[i]);
				}
		void *fb[] = { x, w, st, q };
		for (size_t i = 0; i < 4; i++)
			k->o->free(k->b, fb[i]);
	}
	printf("cast of a bf16 x: %d cases == the cast of x widened\n", cases);
}

/* GELU's backward prologue with GELU's input in bf16 == with that input widened (x f32 or bf16). */
static void test_dgelu_bf16_u(bk *k)
{
	const int64_t rows = 64, cols = 48, n = rows * cols;
	float *x = bk_f32(k, n), *u = bk_f32(k, n), *wu = bk_f32(k, n), *wx = bk_f32(k, n), *bias = bk_f32(k, cols);
	uint16_t *qu = bk_bytes(k, (size_t)n * 2), *qx = bk_bytes(k, (size_t)n * 2);
	fill_normal(x, n, &rng, 0.1f);
	fill_normal(u, n, &rng, 2.0f);
	fill_normal(bias, cols, &rng, 0.5f);
	to_bf16(qu, wu, u, n);
	to_bf16(qx, wx, x, n);
	int cases = 0;
	for (int xb = 0; xb < 2; xb++) {
		uint8_t *q[2] = { bk_bytes(k, (size_t)n), bk_bytes(k, (size_t)n) };
		uint8_t *qt[2] = { bk_bytes(k, (size_t)n), bk_bytes(k, (size_t)n) };
		float *sc[2] = { bk_f32(k, 3 + cols), bk_f32(k, 3 + cols) };
		for (int side = 0; side < 2; side++) {
			qe_cast_args a = { 0 };
			a.x = xb ? qe_tensor_2d(qx, QE_BF16, QE_DEV_CPU, rows, cols) : qe_tensor_2d(wx, QE_F32, QE_DEV_CPU, rows, cols);
			a.row = qe_tensor_2d(q[side], QE_E5M2, QE_DEV_CPU, rows, cols);
			a.col = qe_tensor_2d(qt[side], QE_E5M2, QE_DEV_CPU, cols, rows);
			sc[side][0] = 1024.0f;
			a.scale = &sc[side][0];
			a.amax = &sc[side][1];
			a.scale_inv = &sc[side][2];
			a.colsum = sc[side] + 3;
			a.pre_bias = bias;
			a.pre_dgelu = side ? (const void *)qu : wu;
			a.pre_dgelu_dtype = side ? QE_BF16 : QE_F32;
			CHECK_OK(k->o->cast(k->s, &a));
		}
		char what[96];
		snprintf(what, sizeof(what), "GELU backward cast, u in bf16, x %s", xb ? "bf16" : "f32");
		CHECK_BYTES(q[1], q[0], (size_t)n, what);
		CHECK_BYTES(qt[1], qt[0], (size_t)n, what);
		CHECK_BYTES(sc[1], sc[0], (size_t)(3 + cols) * sizeof(float), what);
		cases++;
		for (int i = 0; i < 2; i++) {
			k->o->free(k->b, q[i]);
			k->o->free(k->b, qt[i]);
			k->o->free(k->b, sc[i]);
		}
	}
	void *fb[] = { x, u, wu, wx, bias, qu, qx };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
	printf("GELU backward prologue with a bf16 u: %d cases == u widened\n", cases);
}

static void test_xent_bf16(bk *k)
{
	const int64_t T = 9, V = 136, valid = 120;
	float *x = bk_f32(k, T * V), *w = bk_f32(k, T * V), *d32 = bk_f32(k, T * V), *loss = bk_f32(k, 2);
	uint16_t *q = bk_bytes(k, (size_t)(T * V) * 2), *d16 = bk_bytes(k, (size_t)(T * V) * 2);
	int32_t *tgt = bk_bytes(k, (size_t)T * sizeof(int32_t));
	fill_normal(x, T * V, &rng, 3.0f);
	to_bf16(q, w, x, T * V);
	for (int64_t t = 0; t < T; t++)
		tgt[t] = (int32_t)((t * 37) % valid);
	CHECK_OK(k->o->xent(k->s, &loss[0], d32, w, tgt, T, V, valid, 0.5f, QE_F32));
	for (int alias = 0; alias < 2; alias++) {
		uint16_t *src = q;
		if (alias) { /* the gradient over the logits */
			memcpy(d16, q, (size_t)(T * V) * 2);
			src = d16;
		}
		memset(&loss[1], 0xFF, sizeof(float));
		CHECK_OK(k->o->xent(k->s, &loss[1], d16, src, tgt, T, V, valid, 0.5f, QE_BF16));
		CHECK_BYTES(&loss[1], &loss[0], sizeof(float), alias ? "xent bf16 loss (aliased)" : "xent bf16 loss");
		long bad = 0;
		for (int64_t i = 0; i < T * V; i++)
			bad += d16[i] != qe_bf16_from_f32(d32[i]);
		CHECK(bad == 0, "xent over bf16 logits%s: %ld of %lld gradient codes are not the f32 gradient rounded",
		      alias ? " (aliased)" : "", bad, (long long)(T * V));
	}
	/* padded columns: exactly zero */
	long pad = 0;
	for (int64_t t = 0; t < T; t++)
		for (int64_t v = valid; v < V; v++)
			pad += d16[t * V + v] != 0;
	CHECK(pad == 0, "xent bf16: %ld padded gradient codes are not 0", pad);
	qe_stream *rs = fresh(k);
	int rc = k->o->xent(rs, &loss[1], d16, q, tgt, T, V, valid, 0.5f, QE_E4M3);
	k->o->stream_destroy(rs);
	CHECK(rc == QE_ESHAPE && strstr(qe_last_error(), "xent"), "xent of e4m3 logits: rc %d (%s), want QE_ESHAPE", rc,
	      qe_last_error());
	qe_cast_args a = { 0 };
	a.x = qe_tensor_2d(q, QE_E4M3, QE_DEV_CPU, T, V);
	a.row = qe_tensor_2d(d16, QE_BF16, QE_DEV_CPU, T, V);
	rs = fresh(k);
	rc = k->o->cast(rs, &a);
	k->o->stream_destroy(rs);
	CHECK(rc == QE_ESHAPE && strstr(qe_last_error(), "f32 or bf16"), "cast of an e4m3 x: rc %d (%s), want QE_ESHAPE",
	      rc, qe_last_error());
	void *fb[] = { x, w, d32, loss, q, d16, tgt };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
}

int main(void)
{
	printf("seed %u\n", SEED);
	qe_rng_init(&rng, SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.s)
		return qe_test_done("backend_test_bf16_act");
	test_gemm_bf16_out(&k);
	test_cast_bf16_in(&k);
	test_dgelu_bf16_u(&k);
	test_xent_bf16(&k);
	bk_close(&k);
	return qe_test_done("backend_test_bf16_act");
}
