/*
 * test_gemm.c - the cpu GEMM and FP8 cast against independent references.
 *
 * The GEMM's result is a contract (cpu_gemm.c): each C[i,j] is one fp32
 * chain over k ascending, then * sa * sb, + bias, + old C.  A three-line
 * scalar loop written here must therefore match it byte for byte, for every
 * operand dtype pair and for shapes that do not fill the blocking tiles.
 * Independently, the GEMM is exact on small integers and within the classic
 * k*u bound of a double reference.  The cast is checked for codes (row and
 * transposed col agree code for code, equal qe_fp8_encode of x*scale),
 * amax recording (max-ed in, NaN sticky), current scaling and f32 copies.
 */
#include <math.h>
#include <time.h>

#include "bk_util.h"
#include "runtime/fp8/fp8.h"

#define SEED 20240611u

static qe_rng rng;

/* The documented order, written plainly. */
static void ref_gemm(float *c, const float *a, const float *b, int64_t m, int64_t n, int64_t k, float sa, float sb,
		     const float *bias, int accumulate)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			float acc = 0.0f;
			for (int64_t x = 0; x < k; x++) {
				float p = a[i * k + x] * b[j * k + x];
				acc = acc + p;
			}
			float v = acc * sa;
			v = v * sb;
			if (bias)
				v = v + bias[j];
			if (accumulate)
				v = v + c[i * n + j];
			c[i * n + j] = v;
		}
}

static float decode_any(const void *p, int64_t i, qe_dtype dt)
{
	if (dt == QE_F32)
		return ((const float *)p)[i];
	return qe_fp8_decode(((const uint8_t *)p)[i], dt);
}

static void test_integer_exact(bk *k)
{
	int64_t m = 37, n = 29, kk = 53; /* none a multiple of the 4x8 tile or 64 blocks */
	float *a = bk_f32(k, m * kk), *b = bk_f32(k, n * kk), *c = bk_f32(k, m * n), *bias = bk_f32(k, n);
	fill_uniform_int(a, m * kk, &rng, -4, 4);
	fill_uniform_int(b, n * kk, &rng, -4, 4);
	fill_uniform_int(bias, n, &rng, -100, 100);
	fill_uniform_int(c, m * n, &rng, -1000, 1000);
	float old[37 * 29];
	memcpy(old, c, sizeof(old));
	qe_tensor A = qe_tensor_2d(a, QE_F32, QE_DEV_CPU, m, kk), B = qe_tensor_2d(b, QE_F32, QE_DEV_CPU, n, kk);
	qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, m, n);
	CHECK_OK(k->o->gemm(k->s, &A, &B, &C, bias, 1));
	int bad = 0;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			long long s = 0;
			for (int64_t x = 0; x < kk; x++)
				s += (long long)a[i * kk + x] * (long long)b[j * kk + x];
			s += (long long)bias[j] + (long long)old[i * n + j];
			if ((double)c[i * n + j] != (double)s && bad++ < 5)
				CHECK(0, "integer gemm C[%lld,%lld] = %.9g, exact %lld", (long long)i, (long long)j,
				      c[i * n + j], s);
		}
	CHECK(bad == 0, "integer gemm: %d of %lld entries inexact", bad, (long long)(m * n));
	k->o->free(k->b, a);
	k->o->free(k->b, b);
	k->o->free(k->b, c);
	k->o->free(k->b, bias);
}

/* |C - exact| <= gamma_k * sum_k |a||b|, gamma_k = k u / (1 - k u), u = 2^-24. */
static void test_double_bound(bk *k)
{
	int64_t m = 70, n = 45, kk = 300;
	float *a = bk_f32(k, m * kk), *b = bk_f32(k, n * kk), *c = bk_f32(k, m * n);
	fill_normal(a, m * kk, &rng, 1.0f);
	fill_normal(b, n * kk, &rng, 1.0f);
	qe_tensor A = qe_tensor_2d(a, QE_F32, QE_DEV_CPU, m, kk), B = qe_tensor_2d(b, QE_F32, QE_DEV_CPU, n, kk);
	qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, m, n);
	CHECK_OK(k->o->gemm(k->s, &A, &B, &C, NULL, 0));
	double u = ldexp(1.0, -24), g = kk * u / (1 - kk * u), worst = 0;
	int bad = 0;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0, sabs = 0;
			for (int64_t x = 0; x < kk; x++) {
				s += (double)a[i * kk + x] * b[j * kk + x];
				sabs += fabs((double)a[i * kk + x] * b[j * kk + x]);
			}
			double err = fabs(c[i * n + j] - s), bound = g * sabs;
			if (err / bound > worst)
				worst = err / bound;
			if (err > bound)
				bad++;
		}
	CHECK(bad == 0, "double reference: %d entries beyond gamma_k bound", bad);
	printf("gemm vs double: worst error = %.3f of the gamma_k bound (k=%lld)\n", worst, (long long)kk);
	k->o->free(k->b, a);
	k->o->free(k->b, b);
	k->o->free(k->b, c);
}

/* Every operand dtype pair, bias and accumulate, odd shapes: byte-identical to ref_gemm. */
static void test_dtype_pairs_bit_exact(bk *k)
{
	const qe_dtype dts[3] = { QE_F32, QE_E4M3, QE_E5M2 };
	int64_t m = 19, n = 71, kk = 45;
	float *xa = bk_f32(k, m * kk), *xb = bk_f32(k, n * kk), *bias = bk_f32(k, n);
	float *c = bk_f32(k, m * n), *ref = bk_f32(k, m * n), *da = bk_f32(k, m * kk), *db = bk_f32(k, n * kk);
	uint8_t *qa = bk_bytes(k, (size_t)(m * kk)), *qb = bk_bytes(k, (size_t)(n * kk));
	float *sia = bk_f32(k, 1), *sib = bk_f32(k, 1);
	fill_normal(xa, m * kk, &rng, 3.0f);
	fill_normal(xb, n * kk, &rng, 0.5f);
	fill_normal(bias, n, &rng, 1.0f);
	for (int ia = 0; ia < 3; ia++)
		for (int ib = 0; ib < 3; ib++)
			for (int acc = 0; acc < 2; acc++) {
				qe_dtype ta = dts[ia], tb = dts[ib];
				*sia = 0.37f;
				*sib = 3.5f;
				void *pa = xa, *pb = xb;
				if (ta != QE_F32) {
					for (int64_t i = 0; i < m * kk; i++)
						qa[i] = qe_fp8_encode(xa[i] * 2.7f, ta, 1);
					pa = qa;
				}
				if (tb != QE_F32) {
					for (int64_t i = 0; i < n * kk; i++)
						qb[i] = qe_fp8_encode(xb[i] * 0.3f, tb, 1);
					pb = qb;
				}
				for (int64_t i = 0; i < m * kk; i++)
					da[i] = decode_any(pa, i, ta);
				for (int64_t i = 0; i < n * kk; i++)
					db[i] = decode_any(pb, i, tb);
				fill_normal(c, m * n, &rng, 1.0f);
				memcpy(ref, c, (size_t)(m * n) * sizeof(float));
				qe_tensor A = qe_tensor_2d(pa, ta, QE_DEV_CPU, m, kk);
				qe_tensor B = qe_tensor_2d(pb, tb, QE_DEV_CPU, n, kk);
				A.scale_inv = sia;
				B.scale_inv = sib;
				qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, m, n);
				CHECK_OK(k->o->gemm(k->s, &A, &B, &C, acc ? bias : NULL, acc));
				ref_gemm(ref, da, db, m, n, kk, ta == QE_F32 ? 1.0f : *sia, tb == QE_F32 ? 1.0f : *sib,
					 acc ? bias : NULL, acc);
				char what[96];
				snprintf(what, sizeof(what), "gemm %s x %s accumulate=%d", qe_dtype_name(ta),
					 qe_dtype_name(tb), acc);
				CHECK_BYTES(c, ref, (size_t)(m * n) * sizeof(float), what);
			}
	float *bufs[] = { xa, xb, bias, c, ref, da, db, sia, sib };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		k->o->free(k->b, bufs[i]);
	k->o->free(k->b, qa);
	k->o->free(k->b, qb);
}

/*
 * The linear layer's three GEMMs through the cast: forward Y = X W^T from
 * row-wise FP8, wgrad dW = dY^T X from the transposed copies; each equals the
 * naive product of the decoded codes times the two scale_invs.
 */
static void test_fp8_linear(bk *k)
{
	int64_t N = 24, in = 40, out = 33;
	float *x = bk_f32(k, N * in), *w = bk_f32(k, out * in), *dy = bk_f32(k, N * out);
	uint8_t *xq = bk_bytes(k, (size_t)(N * in)), *xt = bk_bytes(k, (size_t)(N * in));
	uint8_t *wq = bk_bytes(k, (size_t)(out * in)), *dyq = bk_bytes(k, (size_t)(N * out)),
		*dyt = bk_bytes(k, (size_t)(N * out));
	float *meta = bk_f32(k, 9); /* scale, amax, scale_inv for x, w, dy */
	float *y = bk_f32(k, N * out), *dw = bk_f32(k, out * in), *ref = bk_f32(k, N * out + out * in);
	fill_normal(x, N * in, &rng, 2.0f);
	fill_normal(w, out * in, &rng, 0.05f);
	fill_normal(dy, N * out, &rng, 1e-3f);
	meta[0] = 50.0f;
	meta[3] = 3000.0f;
	meta[6] = 1e6f;
	qe_cast_args cx = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, N, in),
			    .row = qe_tensor_2d(xq, QE_E4M3, QE_DEV_CPU, N, in),
			    .col = qe_tensor_2d(xt, QE_E4M3, QE_DEV_CPU, in, N),
			    .scale = &meta[0], .amax = &meta[1], .scale_inv = &meta[2] };
	qe_cast_args cw = { .x = qe_tensor_2d(w, QE_F32, QE_DEV_CPU, out, in),
			    .row = qe_tensor_2d(wq, QE_E4M3, QE_DEV_CPU, out, in),
			    .scale = &meta[3], .amax = &meta[4], .scale_inv = &meta[5] };
	qe_cast_args cd = { .x = qe_tensor_2d(dy, QE_F32, QE_DEV_CPU, N, out),
			    .row = qe_tensor_2d(dyq, QE_E5M2, QE_DEV_CPU, N, out),
			    .col = qe_tensor_2d(dyt, QE_E5M2, QE_DEV_CPU, out, N),
			    .scale = &meta[6], .amax = &meta[7], .scale_inv = &meta[8] };
	CHECK_OK(k->o->cast(k->s, &cx));
	CHECK_OK(k->o->cast(k->s, &cw));
	CHECK_OK(k->o->cast(k->s, &cd));
	CHECK(meta[2] == 1.0f / 50.0f && meta[5] == 1.0f / 3000.0f && meta[8] == 1.0f / 1e6f,
	      "scale_inv = 1/scale: %g %g %g", meta[2], meta[5], meta[8]);

	/* forward */
	qe_tensor X = qe_tensor_2d(xq, QE_E4M3, QE_DEV_CPU, N, in), W = qe_tensor_2d(wq, QE_E4M3, QE_DEV_CPU, out, in);
	X.scale_inv = &meta[2];
	W.scale_inv = &meta[5];
	qe_tensor Y = qe_tensor_2d(y, QE_F32, QE_DEV_CPU, N, out);
	CHECK_OK(k->o->gemm(k->s, &X, &W, &Y, NULL, 0));
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = 0; j < out; j++) {
			float acc = 0.0f;
			for (int64_t t = 0; t < in; t++) {
				float p = qe_fp8_decode(xq[i * in + t], QE_E4M3) * qe_fp8_decode(wq[j * in + t], QE_E4M3);
				acc = acc + p;
			}
			float v = acc * meta[2];
			ref[i * out + j] = v * meta[5];
		}
	CHECK_BYTES(y, ref, (size_t)(N * out) * sizeof(float), "fp8 forward gemm vs decoded product");

	/* wgrad: dW[out,in] = dYT[out,N] . XT[in,N]^T */
	qe_tensor DYT = qe_tensor_2d(dyt, QE_E5M2, QE_DEV_CPU, out, N), XT = qe_tensor_2d(xt, QE_E4M3, QE_DEV_CPU, in, N);
	DYT.scale_inv = &meta[8];
	XT.scale_inv = &meta[2];
	qe_tensor DW = qe_tensor_2d(dw, QE_F32, QE_DEV_CPU, out, in);
	CHECK_OK(k->o->gemm(k->s, &DYT, &XT, &DW, NULL, 0));
	for (int64_t o = 0; o < out; o++)
		for (int64_t i = 0; i < in; i++) {
			float acc = 0.0f;
			for (int64_t t = 0; t < N; t++) {
				float p = qe_fp8_decode(dyq[t * out + o], QE_E5M2) * qe_fp8_decode(xq[t * in + i], QE_E4M3);
				acc = acc + p;
			}
			float v = acc * meta[8];
			ref[o * in + i] = v * meta[2];
		}
	CHECK_BYTES(dw, ref, (size_t)(out * in) * sizeof(float), "fp8 wgrad gemm (transposed copies) vs decoded product");

	float *fb[] = { x, w, dy, meta, y, dw, ref };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
	uint8_t *ub[] = { xq, xt, wq, dyq, dyt };
	for (size_t i = 0; i < sizeof(ub) / sizeof(ub[0]); i++)
		k->o->free(k->b, ub[i]);
}

static void test_cast(bk *k)
{
	int64_t R = 13, C = 70;
	float *x = bk_f32(k, R * C), *meta = bk_f32(k, 4), *f = bk_f32(k, R * C), *ft = bk_f32(k, R * C);
	uint8_t *q = bk_bytes(k, (size_t)(R * C)), *qt = bk_bytes(k, (size_t)(R * C)), *qt2 = bk_bytes(k, (size_t)(R * C));
	fill_normal(x, R * C, &rng, 4.0f);
	x[5] = 3000.0f; /* saturates at scale 1: 3000 > 448 */
	x[6] = -1e-9f;  /* underflows to -0 */
	float mx = 0;
	for (int64_t i = 0; i < R * C; i++)
		mx = fmaxf(mx, fabsf(x[i]));

	/* delayed: both layouts, codes = encode(x*scale), col = transpose of row */
	meta[0] = 1.0f;  /* scale */
	meta[1] = 0.5f;  /* amax already holds a smaller value */
	qe_cast_args a = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, R, C), .row = qe_tensor_2d(q, QE_E4M3, QE_DEV_CPU, R, C),
			   .col = qe_tensor_2d(qt, QE_E4M3, QE_DEV_CPU, C, R), .scale = &meta[0], .amax = &meta[1],
			   .scale_inv = &meta[2] };
	CHECK_OK(k->o->cast(k->s, &a));
	int bad = 0;
	for (int64_t r = 0; r < R; r++)
		for (int64_t c = 0; c < C; c++) {
			uint8_t want = qe_fp8_encode(x[r * C + c] * 1.0f, QE_E4M3, 1);
			if (q[r * C + c] != want || qt[c * R + r] != want)
				bad++;
		}
	CHECK(bad == 0, "cast codes: %d of %lld differ from encode(x*scale) or the transposed copy", bad, (long long)(R * C));
	CHECK(q[5] == 0x7E, "3000 saturates to 448 (0x7E), got 0x%02X", q[5]);
	CHECK(q[6] == 0x80, "-1e-9 becomes -0 (0x80), got 0x%02X", q[6]);
	CHECK(meta[1] == mx, "amax max-ed in: %g, want %g", meta[1], mx);
	CHECK(meta[2] == 1.0f, "scale_inv %g", meta[2]);

	/* col only gives the same codes; a larger amax already recorded is kept */
	meta[1] = 1e4f;
	a.row.data = NULL;
	a.col.data = qt2;
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK_BYTES(qt, qt2, (size_t)(R * C), "col-only cast vs row+col cast");
	CHECK(meta[1] == 1e4f, "amax keeps the larger old value: %g", meta[1]);

	/* current scaling: the scale comes from this tensor's amax */
	meta[0] = 123.0f;
	meta[1] = 0.0f;
	a.current = 1;
	a.margin = 1;
	a.row.data = q;
	a.col.data = qt;
	CHECK_OK(k->o->cast(k->s, &a));
	float want_scale = qe_fp8_scale_for_amax(mx, 448.0f, 1, 1.0f);
	CHECK(meta[0] == want_scale, "current scale %g, want %g", meta[0], want_scale);
	CHECK(meta[2] == 1.0f / want_scale, "current scale_inv %g", meta[2]);
	bad = 0;
	for (int64_t i = 0; i < R * C; i++)
		if (q[i] != qe_fp8_encode(x[i] * want_scale, QE_E4M3, 1))
			bad++;
	CHECK(bad == 0, "current-scaled codes: %d differ", bad);
	/* its max code is 448/2 (margin 1): 0x76 */
	CHECK(q[5] == 0x76, "the amax element encodes to 224 (0x76), got 0x%02X", q[5]);

	/* f32 outputs: exact copies, scale untouched, scale_inv 1 */
	meta[0] = 7.0f;
	a.current = 0;
	a.row = qe_tensor_2d(f, QE_F32, QE_DEV_CPU, R, C);
	a.col = qe_tensor_2d(ft, QE_F32, QE_DEV_CPU, C, R);
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK_BYTES(f, x, (size_t)(R * C) * sizeof(float), "f32 cast copy");
	bad = 0;
	for (int64_t r = 0; r < R; r++)
		for (int64_t c = 0; c < C; c++)
			if (memcmp(&ft[c * R + r], &x[r * C + c], 4))
				bad++;
	CHECK(bad == 0, "f32 transposed copy: %d differ", bad);
	CHECK(meta[0] == 7.0f && meta[2] == 1.0f, "f32 cast: scale %g (untouched), scale_inv %g (1)", meta[0], meta[2]);

	/* NaN: the amax becomes NaN and stays NaN */
	x[17] = NAN;
	meta[1] = 2.0f;
	a.row = qe_tensor_2d(q, QE_E5M2, QE_DEV_CPU, R, C);
	a.col.data = NULL;
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK(isnan(meta[1]), "NaN input gives NaN amax, got %g", meta[1]);
	CHECK(q[17] == 0x7F, "NaN encodes to 0x7F, got 0x%02X", q[17]);
	x[17] = 1.0f;
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK(isnan(meta[1]), "NaN amax sticks after a finite cast, got %g", meta[1]);

	/* delayed scaling without a scale pointer is refused */
	qe_stream *s2;
	CHECK_OK(k->o->stream_create(k->b, &s2));
	a.scale = NULL;
	CHECK(k->o->cast(s2, &a) == QE_EINVAL, "cast without scale must be QE_EINVAL");
	k->o->stream_destroy(s2);
	/* ... also when no output is written: the described FP8 dtype still sets the scaling */
	CHECK_OK(k->o->stream_create(k->b, &s2));
	a.row.data = NULL;
	CHECK(k->o->cast(s2, &a) == QE_EINVAL, "cast into no output without scale must be QE_EINVAL");
	k->o->stream_destroy(s2);

	float *fb[] = { x, meta, f, ft };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
	k->o->free(k->b, q);
	k->o->free(k->b, qt);
	k->o->free(k->b, qt2);
}

/* A shape error names the shapes, and the stream stays failed afterwards. */
static void test_shape_errors(bk *k)
{
	qe_stream *s;
	CHECK_OK(k->o->stream_create(k->b, &s));
	float *a = bk_f32(k, 64), *b = bk_f32(k, 64), *c = bk_f32(k, 64);
	qe_tensor A = qe_tensor_2d(a, QE_F32, QE_DEV_CPU, 4, 8), B = qe_tensor_2d(b, QE_F32, QE_DEV_CPU, 4, 7);
	qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, 4, 4);
	int rc = k->o->gemm(s, &A, &B, &C, NULL, 0);
	CHECK(rc == QE_ESHAPE, "k mismatch: want QE_ESHAPE, got %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "f32[4,8]") && strstr(qe_last_error(), "f32[4,7]"),
	      "message names the shapes: '%s'", qe_last_error());
	rc = k->o->add(s, c, a, b, 4);
	CHECK(rc == QE_ESHAPE, "a failed stream stays failed: got %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "failed earlier") != NULL, "sticky message: '%s'", qe_last_error());
	CHECK(k->o->stream_sync(s) == QE_ESHAPE, "sync reports the stream's error");
	k->o->stream_destroy(s);

	/* FP8 operand without scale_inv; C of the wrong dtype; C overlapping A */
	CHECK_OK(k->o->stream_create(k->b, &s));
	qe_tensor Aq = qe_tensor_2d(a, QE_E4M3, QE_DEV_CPU, 4, 8), B8 = qe_tensor_2d(b, QE_F32, QE_DEV_CPU, 4, 8);
	CHECK(k->o->gemm(s, &Aq, &B8, &C, NULL, 0) == QE_EINVAL, "FP8 A without scale_inv");
	k->o->stream_destroy(s);
	CHECK_OK(k->o->stream_create(k->b, &s));
	qe_tensor Cb = qe_tensor_2d(c, QE_E4M3, QE_DEV_CPU, 4, 4);
	CHECK(k->o->gemm(s, &A, &B8, &Cb, NULL, 0) == QE_ESHAPE, "C must be f32");
	k->o->stream_destroy(s);
	CHECK_OK(k->o->stream_create(k->b, &s));
	qe_tensor Ca = qe_tensor_2d(a, QE_F32, QE_DEV_CPU, 4, 4);
	CHECK(k->o->gemm(s, &A, &B8, &Ca, NULL, 0) == QE_EINVAL, "C overlapping A is refused");
	k->o->stream_destroy(s);
	k->o->free(k->b, a);
	k->o->free(k->b, b);
	k->o->free(k->b, c);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The `small` preset's typical GEMM; printed, and checked only against a generous ceiling. */
static void test_speed(bk *k)
{
	int64_t m = 256, n = 768, kk = 768;
	float *a = bk_f32(k, m * kk), *b = bk_f32(k, n * kk), *c = bk_f32(k, m * n), *si = bk_f32(k, 1);
	uint8_t *aq = bk_bytes(k, (size_t)(m * kk)), *bq = bk_bytes(k, (size_t)(n * kk));
	fill_normal(a, m * kk, &rng, 1.0f);
	fill_normal(b, n * kk, &rng, 1.0f);
	for (int64_t i = 0; i < m * kk; i++)
		aq[i] = qe_fp8_encode(a[i], QE_E4M3, 1);
	for (int64_t i = 0; i < n * kk; i++)
		bq[i] = qe_fp8_encode(b[i], QE_E4M3, 1);
	*si = 1.0f;
	qe_tensor A = qe_tensor_2d(a, QE_F32, QE_DEV_CPU, m, kk), B = qe_tensor_2d(b, QE_F32, QE_DEV_CPU, n, kk);
	qe_tensor Aq = qe_tensor_2d(aq, QE_E4M3, QE_DEV_CPU, m, kk), Bq = qe_tensor_2d(bq, QE_E4M3, QE_DEV_CPU, n, kk);
	Aq.scale_inv = Bq.scale_inv = si;
	qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, m, n);
	int reps = 5;
	double t0 = now_s();
	for (int r = 0; r < reps; r++)
		CHECK_OK(k->o->gemm(k->s, &A, &B, &C, NULL, 0));
	double t1 = now_s();
	for (int r = 0; r < reps; r++)
		CHECK_OK(k->o->gemm(k->s, &Aq, &Bq, &C, NULL, 0));
	double t2 = now_s();
	double flop = 2.0 * m * n * kk;
	printf("gemm 256x768x768: f32 %.1f ms (%.2f GFLOP/s), e4m3 %.1f ms (%.2f GFLOP/s)\n", (t1 - t0) / reps * 1e3,
	       flop * reps / (t1 - t0) * 1e-9, (t2 - t1) / reps * 1e3, flop * reps / (t2 - t1) * 1e-9);
	CHECK((t2 - t0) / (2 * reps) < 1.0, "gemm 256x768x768 took %.2f s (ceiling 1 s)", (t2 - t0) / (2 * reps));
	k->o->free(k->b, a);
	k->o->free(k->b, b);
	k->o->free(k->b, c);
	k->o->free(k->b, si);
	k->o->free(k->b, aq);
	k->o->free(k->b, bq);
}

int main(void)
{
	printf("seed %u\n", SEED);
	qe_rng_init(&rng, SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.s)
		return qe_test_done("backend_test_gemm");
	test_integer_exact(&k);
	test_double_bound(&k);
	test_dtype_pairs_bit_exact(&k);
	test_fp8_linear(&k);
	test_cast(&k);
	test_shape_errors(&k);
	test_speed(&k);
	bk_close(&k);
	return qe_test_done("backend_test_gemm");
}
