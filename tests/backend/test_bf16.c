/*
 * test_bf16.c - bf16 through the cpu backend: the cast into bf16 and the
 * GEMM with bf16 operands, against definitions written here.
 *
 * Cast: every code (row-wise and in the transposed copy, together and
 * alone) is qe_bf16_from_f32 of its element, special values included (NaN,
 * +-inf, a value that rounds to inf, a tie, subnormals); nothing is scaled:
 * scale is neither read nor written, also under current scaling and a
 * margin, and scale_inv becomes 1; amax is max-ed with max|x| as for FP8
 * (a larger old value kept, a NaN sticky).
 * GEMM: the backend.h contract says a bf16 operand is widened exactly and
 * the chain is the f32 one, so with bf16, f32 and FP8 operands in every
 * pairing, bias and accumulate, at shapes that do not fill the blocking
 * tiles, C must equal byte for byte both the f32 GEMM of the widened
 * operands (the backend's own) and a plain scalar loop; a bf16 operand's
 * scale_inv is not read (NULL, or a value that would show).  A linear
 * layer's forward and wgrad GEMMs through the bf16 cast equal the f32 GEMMs
 * of the pre-rounded tensors.
 * Refusals (backend_check.c): a bf16 output of the wrong shape, row and col
 * in different dtypes, an output dtype the cast does not make, an operand
 * dtype the GEMM does not take - each QE_ESHAPE, naming the tensor.
 */
#include <math.h>

#include "bk_util.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

#define SEED 20261207u

static qe_rng rng;

/* The documented order, written plainly (as tests/backend/test_gemm.c). */
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

static void test_cast(bk *k)
{
	int64_t R = 37, C = 70; /* neither a multiple of the 32-element transpose block */
	int64_t n = R * C;
	float *x = bk_f32(k, n), *meta = bk_f32(k, 3);
	uint16_t *q = bk_bytes(k, (size_t)n * 2), *qt = bk_bytes(k, (size_t)n * 2), *qt2 = bk_bytes(k, (size_t)n * 2);
	fill_normal(x, n, &rng, 3.0f);
	x[1] = qe_f32_from_bits(0x7F7FFFFFu);  /* FLT_MAX: rounds to inf */
	x[2] = -INFINITY;
	x[3] = qe_f32_from_bits(0x3F818000u);  /* a tie, up to even */
	x[4] = qe_f32_from_bits(0x007FFFFFu);  /* subnormal, up to the smallest normal */
	x[5] = qe_f32_from_bits(0x00010000u);  /* the smallest bf16 subnormal: kept */
	x[6] = qe_f32_from_bits(0xFF800001u);  /* a signalling NaN: 0x7FFF, not -inf */
	x[7] = -0.0f;
	float mx = 0.0f;
	for (int64_t i = 0; i < n; i++)
		if (!isnan(x[i]) && fabsf(x[i]) > mx)
			mx = fabsf(x[i]);
	x[6] = 1.0f; /* first without the NaN, for the amax */

	meta[0] = 7.0f;	 /* scale: neither read nor written */
	meta[1] = 0.25f; /* amax: smaller than max|x| */
	meta[2] = 0.0f;	 /* scale_inv */
	qe_cast_args a = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, R, C),
			   .row = qe_tensor_2d(q, QE_BF16, QE_DEV_CPU, R, C),
			   .col = qe_tensor_2d(qt, QE_BF16, QE_DEV_CPU, C, R),
			   .scale = &meta[0], .amax = &meta[1], .scale_inv = &meta[2] };
	CHECK_OK(k->o->cast(k->s, &a));
	int bad = 0;
	for (int64_t r = 0; r < R; r++)
		for (int64_t c = 0; c < C; c++) {
			uint16_t want = qe_bf16_from_f32(x[r * C + c]);
			if (q[r * C + c] != want || qt[c * R + r] != want)
				bad++;
		}
	CHECK(bad == 0, "bf16 cast: %d of %lld codes differ from qe_bf16_from_f32 or the transposed copy", bad,
	      (long long)n);
	CHECK(q[1] == 0x7F80u && q[2] == 0xFF80u && q[3] == 0x3F82u && q[4] == 0x0080u && q[5] == 0x0001u &&
		      q[7] == 0x8000u,
	      "bf16 cast specials: %04x %04x %04x %04x %04x %04x", q[1], q[2], q[3], q[4], q[5], q[7]);
	CHECK(meta[0] == 7.0f, "bf16 cast left scale alone: %g", meta[0]);
	CHECK(meta[1] == INFINITY, "amax max-ed with max|x| (inf from x[2]): %g", meta[1]);
	CHECK(meta[2] == 1.0f, "bf16 cast: scale_inv %g, want 1", meta[2]);

	/* finite amax: max-ed in, and a larger old value kept */
	x[1] = 1.0f;
	x[2] = -2.0f;
	meta[1] = 0.25f;
	CHECK_OK(k->o->cast(k->s, &a));
	mx = 0.0f;
	for (int64_t i = 0; i < n; i++)
		mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
	CHECK(meta[1] == mx, "bf16 cast amax %g, want max|x| %g", meta[1], mx);
	meta[1] = 1e6f;
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK(meta[1] == 1e6f, "bf16 cast keeps a larger recorded amax: %g", meta[1]);

	/* col alone, under current scaling and a margin (both ignored for bf16), NaN inside */
	x[6] = qe_f32_from_bits(0xFF800001u);
	CHECK_OK(k->o->cast(k->s, &a));
	a.row.data = NULL;
	a.col.data = qt2;
	a.current = 1;
	a.margin = 3;
	meta[0] = 7.0f;
	meta[2] = 0.0f;
	CHECK_OK(k->o->cast(k->s, &a));
	CHECK_BYTES(qt, qt2, (size_t)n * 2, "bf16 col-only cast (current, margin 3) vs row+col cast");
	CHECK(qt2[6 * R] == QE_BF16_NAN, "signalling NaN in the col copy: %04x, want 7fff", qt2[6 * R]);
	CHECK(meta[0] == 7.0f && meta[2] == 1.0f, "current scaling into bf16: scale %g (untouched), scale_inv %g (1)",
	      meta[0], meta[2]);
	CHECK(isnan(meta[1]), "NaN input makes the amax NaN: %g", meta[1]);

	/* no scale pointer needed for bf16 */
	a.scale = NULL;
	a.current = 0;
	CHECK_OK(k->o->cast(k->s, &a));
	k->o->free(k->b, x);
	k->o->free(k->b, meta);
	k->o->free(k->b, q);
	k->o->free(k->b, qt);
	k->o->free(k->b, qt2);
}

/* An operand of dtype dt holding (a rounding of) x: its data and, widened, its values. */
static void *make_operand(bk *k, const float *x, int64_t n, qe_dtype dt, float fp8_scale, float *wide)
{
	void *p = bk_bytes(k, (size_t)n * qe_dtype_size(dt));
	for (int64_t i = 0; i < n; i++) {
		if (dt == QE_F32) {
			((float *)p)[i] = x[i];
			wide[i] = x[i];
		} else if (dt == QE_BF16) {
			((uint16_t *)p)[i] = qe_bf16_from_f32(x[i]);
			wide[i] = qe_bf16_round(x[i]);
		} else {
			uint8_t c = qe_fp8_encode(x[i] * fp8_scale, dt, 1);
			((uint8_t *)p)[i] = c;
			wide[i] = qe_fp8_decode(c, dt);
		}
	}
	return p;
}

static void test_gemm_pairs(bk *k)
{
	const qe_dtype dts[4] = { QE_BF16, QE_F32, QE_E4M3, QE_E5M2 };
	int64_t m = 19, n = 71, kk = 45;
	float *xa = bk_f32(k, m * kk), *xb = bk_f32(k, n * kk), *bias = bk_f32(k, n);
	float *wa = bk_f32(k, m * kk), *wb = bk_f32(k, n * kk);
	float *c = bk_f32(k, m * n), *c32 = bk_f32(k, m * n), *ref = bk_f32(k, m * n), *sinv = bk_f32(k, 2);
	fill_normal(xa, m * kk, &rng, 3.0f);
	fill_normal(xb, n * kk, &rng, 0.5f);
	fill_normal(bias, n, &rng, 1.0f);
	sinv[0] = 0.37f;
	sinv[1] = 3.5f;
	int pairs = 0;
	for (int ia = 0; ia < 4; ia++)
		for (int ib = 0; ib < 4; ib++) {
			qe_dtype ta = dts[ia], tb = dts[ib];
			if (ta != QE_BF16 && tb != QE_BF16)
				continue; /* test_gemm.c has the others */
			void *pa = make_operand(k, xa, m * kk, ta, 2.7f, wa);
			void *pb = make_operand(k, xb, n * kk, tb, 0.3f, wb);
			for (int acc = 0; acc < 2; acc++) {
				qe_tensor A = qe_tensor_2d(pa, ta, QE_DEV_CPU, m, kk);
				qe_tensor B = qe_tensor_2d(pb, tb, QE_DEV_CPU, n, kk);
				/* FP8 operands need their scale_inv; a bf16 one's is not read: NULL, or 0.37 / 3.5 */
				A.scale_inv = (ta == QE_BF16 && acc == 0) ? NULL : &sinv[0];
				B.scale_inv = (tb == QE_BF16 && acc == 0) ? NULL : &sinv[1];
				float sa = qe_dtype_is_fp8(ta) ? sinv[0] : 1.0f, sb = qe_dtype_is_fp8(tb) ? sinv[1] : 1.0f;
				fill_normal(c, m * n, &rng, 1.0f);
				memcpy(ref, c, (size_t)(m * n) * sizeof(float));
				memcpy(c32, c, (size_t)(m * n) * sizeof(float));
				qe_tensor Cc = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, m, n);
				CHECK_OK(k->o->gemm(k->s, &A, &B, &Cc, acc ? bias : NULL, acc));
				/* the backend's f32 GEMM of the widened operands, scaled as the FP8 ones are */
				qe_tensor A32 = qe_tensor_2d(wa, QE_F32, QE_DEV_CPU, m, kk);
				qe_tensor B32 = qe_tensor_2d(wb, QE_F32, QE_DEV_CPU, n, kk);
				qe_tensor C32 = qe_tensor_2d(c32, QE_F32, QE_DEV_CPU, m, n);
				if (sa == 1.0f && sb == 1.0f) {
					CHECK_OK(k->o->gemm(k->s, &A32, &B32, &C32, acc ? bias : NULL, acc));
					char w32[96];
					snprintf(w32, sizeof(w32), "gemm %s x %s acc=%d vs f32 gemm of the widened operands",
						 qe_dtype_name(ta), qe_dtype_name(tb), acc);
					CHECK_BYTES(c, c32, (size_t)(m * n) * sizeof(float), w32);
				}
				ref_gemm(ref, wa, wb, m, n, kk, sa, sb, acc ? bias : NULL, acc);
				char what[96];
				snprintf(what, sizeof(what), "gemm %s x %s accumulate=%d vs scalar loop", qe_dtype_name(ta),
					 qe_dtype_name(tb), acc);
				CHECK_BYTES(c, ref, (size_t)(m * n) * sizeof(float), what);
				pairs++;
			}
			k->o->free(k->b, pa);
			k->o->free(k->b, pb);
		}
	printf("bf16 gemm: %d pairings, each plain and with bias + accumulate: %d GEMMs compared\n", pairs / 2, pairs);
	float *fb[] = { xa, xb, bias, wa, wb, c, c32, ref, sinv };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
}

/*
 * A linear layer in bf16 through the cast: forward Y = X W^T (+ bias) from
 * the row-wise copies, wgrad dW += dY^T X from the transposed ones, each
 * equal to the backend's f32 GEMM of qe_bf16_round of the same tensors.
 */
static void test_linear(bk *k)
{
	int64_t N = 24, in = 40, out = 33;
	float *x = bk_f32(k, N * in), *w = bk_f32(k, out * in), *dy = bk_f32(k, N * out), *bias = bk_f32(k, out);
	uint16_t *xq = bk_bytes(k, (size_t)(N * in) * 2), *xt = bk_bytes(k, (size_t)(N * in) * 2);
	uint16_t *wq = bk_bytes(k, (size_t)(out * in) * 2), *dyt = bk_bytes(k, (size_t)(N * out) * 2);
	float *xr = bk_f32(k, N * in), *xrt = bk_f32(k, N * in), *wr = bk_f32(k, out * in), *dyrt = bk_f32(k, N * out);
	float *y = bk_f32(k, N * out), *yref = bk_f32(k, N * out), *dw = bk_f32(k, out * in), *dwref = bk_f32(k, out * in);
	float *si = bk_f32(k, 3);
	fill_normal(x, N * in, &rng, 2.0f);
	fill_normal(w, out * in, &rng, 0.05f);
	fill_normal(dy, N * out, &rng, 1e-3f);
	fill_normal(bias, out, &rng, 0.1f);
	fill_normal(dw, out * in, &rng, 1e-2f);
	memcpy(dwref, dw, (size_t)(out * in) * sizeof(float));
	qe_cast_args cx = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, N, in),
			    .row = qe_tensor_2d(xq, QE_BF16, QE_DEV_CPU, N, in),
			    .col = qe_tensor_2d(xt, QE_BF16, QE_DEV_CPU, in, N), .scale_inv = &si[0] };
	qe_cast_args cw = { .x = qe_tensor_2d(w, QE_F32, QE_DEV_CPU, out, in),
			    .row = qe_tensor_2d(wq, QE_BF16, QE_DEV_CPU, out, in), .scale_inv = &si[1] };
	qe_cast_args cd = { .x = qe_tensor_2d(dy, QE_F32, QE_DEV_CPU, N, out),
			    .col = qe_tensor_2d(dyt, QE_BF16, QE_DEV_CPU, out, N), .scale_inv = &si[2] };
	CHECK_OK(k->o->cast(k->s, &cx));
	CHECK_OK(k->o->cast(k->s, &cw));
	CHECK_OK(k->o->cast(k->s, &cd));
	CHECK(si[0] == 1.0f && si[1] == 1.0f && si[2] == 1.0f, "bf16 casts' scale_inv: %g %g %g", si[0], si[1], si[2]);
	for (int64_t r = 0; r < N; r++)
		for (int64_t c = 0; c < in; c++) {
			xr[r * in + c] = qe_bf16_round(x[r * in + c]);
			xrt[c * N + r] = xr[r * in + c];
		}
	for (int64_t i = 0; i < out * in; i++)
		wr[i] = qe_bf16_round(w[i]);
	for (int64_t r = 0; r < N; r++)
		for (int64_t c = 0; c < out; c++)
			dyrt[c * N + r] = qe_bf16_round(dy[r * out + c]);

	qe_tensor X = qe_tensor_2d(xq, QE_BF16, QE_DEV_CPU, N, in), W = qe_tensor_2d(wq, QE_BF16, QE_DEV_CPU, out, in);
	qe_tensor Y = qe_tensor_2d(y, QE_F32, QE_DEV_CPU, N, out);
	CHECK_OK(k->o->gemm(k->s, &X, &W, &Y, bias, 0));
	qe_tensor Xr = qe_tensor_2d(xr, QE_F32, QE_DEV_CPU, N, in), Wr = qe_tensor_2d(wr, QE_F32, QE_DEV_CPU, out, in);
	qe_tensor Yr = qe_tensor_2d(yref, QE_F32, QE_DEV_CPU, N, out);
	CHECK_OK(k->o->gemm(k->s, &Xr, &Wr, &Yr, bias, 0));
	CHECK_BYTES(y, yref, (size_t)(N * out) * sizeof(float), "bf16 forward (+bias) vs f32 gemm of rounded X, W");

	qe_tensor DYT = qe_tensor_2d(dyt, QE_BF16, QE_DEV_CPU, out, N), XT = qe_tensor_2d(xt, QE_BF16, QE_DEV_CPU, in, N);
	qe_tensor DW = qe_tensor_2d(dw, QE_F32, QE_DEV_CPU, out, in);
	CHECK_OK(k->o->gemm(k->s, &DYT, &XT, &DW, NULL, 1));
	qe_tensor DYTr = qe_tensor_2d(dyrt, QE_F32, QE_DEV_CPU, out, N), XTr = qe_tensor_2d(xrt, QE_F32, QE_DEV_CPU, in, N);
	qe_tensor DWr = qe_tensor_2d(dwref, QE_F32, QE_DEV_CPU, out, in);
	CHECK_OK(k->o->gemm(k->s, &DYTr, &XTr, &DWr, NULL, 1));
	CHECK_BYTES(dw, dwref, (size_t)(out * in) * sizeof(float),
		    "bf16 wgrad (accumulate, transposed copies) vs f32 gemm of rounded dY^T, X^T");

	float *fb[] = { x, w, dy, bias, xr, xrt, wr, dyrt, y, yref, dw, dwref, si };
	for (size_t i = 0; i < sizeof(fb) / sizeof(fb[0]); i++)
		k->o->free(k->b, fb[i]);
	uint16_t *hb[] = { xq, xt, wq, dyt };
	for (size_t i = 0; i < sizeof(hb) / sizeof(hb[0]); i++)
		k->o->free(k->b, hb[i]);
}

/* The call on a fresh stream must fail with rc and a message containing each of the strings. */
static void refused_cast(bk *k, const qe_cast_args *a, int rc_want, const char *what, const char *s1, const char *s2)
{
	qe_stream *s;
	CHECK_OK(k->o->stream_create(k->b, &s));
	int rc = k->o->cast(s, a);
	const char *msg = qe_last_error();
	CHECK(rc == rc_want && strstr(msg, s1) && (!s2 || strstr(msg, s2)), "%s: got %s '%s', want %s naming '%s'%s%s",
	      what, qe_errname(rc), msg, qe_errname(rc_want), s1, s2 ? " and " : "", s2 ? s2 : "");
	printf("  refused: %-28s %s\n", what, msg);
	k->o->stream_destroy(s);
}

static void test_refusals(bk *k)
{
	float *x = bk_f32(k, 12 * 8), *si = bk_f32(k, 1);
	uint16_t *q = bk_bytes(k, 2 * 13 * 9), *qt = bk_bytes(k, 2 * 13 * 9);
	qe_cast_args a = { .x = qe_tensor_2d(x, QE_F32, QE_DEV_CPU, 12, 8), .scale_inv = si };

	a.row = qe_tensor_2d(q, QE_BF16, QE_DEV_CPU, 12, 9);
	refused_cast(k, &a, QE_ESHAPE, "bf16 row of the wrong shape", "bf16[12,9]", "[12,8]");
	a.row = qe_tensor_2d(NULL, QE_BF16, QE_DEV_CPU, 12, 8);
	a.col = qe_tensor_2d(qt, QE_BF16, QE_DEV_CPU, 12, 8);
	refused_cast(k, &a, QE_ESHAPE, "bf16 col not transposed", "bf16[12,8]", "transposed");
	a.row = qe_tensor_2d(q, QE_BF16, QE_DEV_CPU, 12, 8);
	a.col = qe_tensor_2d(qt, QE_E4M3, QE_DEV_CPU, 8, 12);
	refused_cast(k, &a, QE_ESHAPE, "bf16 row, e4m3 col", "bf16[12,8]", "e4m3[8,12]");
	a.row = qe_tensor_2d(q, QE_I32, QE_DEV_CPU, 12, 8);
	a.col = qe_tensor_2d(NULL, QE_I32, QE_DEV_CPU, 8, 12);
	refused_cast(k, &a, QE_ESHAPE, "i32 output", "i32[12,8]", "bf16");

	/* GEMM: an operand dtype it does not take; a k mismatch names the bf16 shapes */
	float *c = bk_f32(k, 64);
	qe_tensor A = qe_tensor_2d(q, QE_BF16, QE_DEV_CPU, 4, 8), B = qe_tensor_2d(x, QE_I32, QE_DEV_CPU, 4, 8);
	qe_tensor C = qe_tensor_2d(c, QE_F32, QE_DEV_CPU, 4, 4);
	qe_stream *s;
	CHECK_OK(k->o->stream_create(k->b, &s));
	int rc = k->o->gemm(s, &A, &B, &C, NULL, 0);
	CHECK(rc == QE_ESHAPE && strstr(qe_last_error(), "i32[4,8]") && strstr(qe_last_error(), "bf16"),
	      "gemm bf16 x i32: %s '%s'", qe_errname(rc), qe_last_error());
	printf("  refused: %-28s %s\n", "gemm bf16 x i32", qe_last_error());
	k->o->stream_destroy(s);
	CHECK_OK(k->o->stream_create(k->b, &s));
	B = qe_tensor_2d(x, QE_BF16, QE_DEV_CPU, 4, 7);
	rc = k->o->gemm(s, &A, &B, &C, NULL, 0);
	CHECK(rc == QE_ESHAPE && strstr(qe_last_error(), "bf16[4,8]") && strstr(qe_last_error(), "bf16[4,7]"),
	      "gemm bf16 k mismatch: %s '%s'", qe_errname(rc), qe_last_error());
	k->o->stream_destroy(s);
	k->o->free(k->b, x);
	k->o->free(k->b, si);
	k->o->free(k->b, q);
	k->o->free(k->b, qt);
	k->o->free(k->b, c);
}

int main(void)
{
	printf("seed %u\n", SEED);
	qe_rng_init(&rng, SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.s)
		return qe_test_done("backend_test_bf16");
	test_cast(&k);
	test_gemm_pairs(&k);
	test_linear(&k);
	test_refusals(&k);
	bk_close(&k);
	return qe_test_done("backend_test_bf16");
}
