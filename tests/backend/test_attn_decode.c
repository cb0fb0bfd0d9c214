/*
 * test_attn_decode.c - the cpu backend's attn_decode (one query row over
 * cached keys and values) against a straightforward double-precision
 * reference and against attn_fwd, on random inputs (seed printed).
 *
 * Checked:
 *   - out and probs within attn_decode_bound (bk_util.h: the score's dot
 *     product error, the softmax's sums, the output's sum, each stated
 *     there) of the reference computed in double;
 *   - bytes: with q, k and v cut from one qkv [T, 3H], out and probs are
 *     attn_fwd's last row (the same sums in the same order; backend.h);
 *   - refusals with nothing run: T = 0 and H not a multiple of nh
 *     (QE_ESHAPE), out overlapping k (QE_EINVAL), a NULL probs (QE_EINVAL).
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"

#define NAME "backend_test_attn_decode"

/* out [H] and probs [nh, T] in double: the definition, written once more. */
static void reference(double *out, double *probs, const float *q, const float *k, const float *v, int64_t T,
		      int64_t H, int nh)
{
	int64_t D = H / nh;
	for (int h = 0; h < nh; h++) {
		double *p = probs + h * T, mx = -INFINITY, sum = 0;
		for (int64_t t = 0; t < T; t++) {
			double s = 0;
			for (int64_t i = 0; i < D; i++)
				s += (double)q[h * D + i] * k[t * H + h * D + i];
			p[t] = s / sqrt((double)D);
			mx = p[t] > mx ? p[t] : mx;
		}
		for (int64_t t = 0; t < T; t++)
			sum += p[t] = exp(p[t] - mx);
		for (int64_t t = 0; t < T; t++)
			p[t] /= sum;
		for (int64_t i = 0; i < D; i++) {
			double o = 0;
			for (int64_t t = 0; t < T; t++)
				o += p[t] * v[t * H + h * D + i];
			out[h * D + i] = o;
		}
	}
}

static void test_case(bk *k, qe_rng *r, int T, int H, int nh)
{
	int64_t nq = (int64_t)T * 3 * H;
	float *qkv = bk_f32(k, nq), *q = bk_f32(k, H), *kc = bk_f32(k, (int64_t)T * H), *vc = bk_f32(k, (int64_t)T * H);
	float *out = bk_f32(k, H), *probs = bk_f32(k, (int64_t)nh * T);
	float *fout = bk_f32(k, (int64_t)T * H), *fprobs = bk_f32(k, (int64_t)nh * T * T);
	double *rout = malloc((size_t)H * sizeof(double)), *rprobs = malloc((size_t)nh * T * sizeof(double));
	if (!qkv || !q || !kc || !vc || !out || !probs || !fout || !fprobs)
		return;
	fill_normal(qkv, nq, r, 1.0f);
	for (int t = 0; t < T; t++) {
		memcpy(kc + (int64_t)t * H, qkv + (int64_t)t * 3 * H + H, (size_t)H * sizeof(float));
		memcpy(vc + (int64_t)t * H, qkv + (int64_t)t * 3 * H + 2 * H, (size_t)H * sizeof(float));
	}
	memcpy(q, qkv + (int64_t)(T - 1) * 3 * H, (size_t)H * sizeof(float));
	CHECK_OK(k->o->attn_decode(k->s, out, probs, q, kc, vc, T, H, nh));
	reference(rout, rprobs, q, kc, vc, T, H, nh);

	int64_t D = H / nh;
	double worst_o = 0, worst_p = 0; /* max of |diff| / bound */
	for (int h = 0; h < nh; h++) {
		double c;
		double bo = attn_decode_bound(q, kc, vc, T, H, nh, h, &c);
		for (int64_t i = 0; i < D; i++) {
			double d = fabs(out[h * D + i] - rout[h * D + i]) / bo;
			worst_o = d > worst_o || isnan(d) ? d : worst_o;
		}
		for (int t = 0; t < T; t++) {
			double d = fabs(probs[(int64_t)h * T + t] - rprobs[(int64_t)h * T + t]) /
				   (c * rprobs[(int64_t)h * T + t] + 0x1p-126);
			worst_p = d > worst_p || isnan(d) ? d : worst_p;
		}
	}
	printf("  T=%-4d H=%-4d nh=%-2d max|out - double| %.3g of its bound, probs %.3g of its bound  %s\n", T, H, nh,
	       worst_o, worst_p, worst_o <= 1 && worst_p <= 1 ? "PASS" : "FAIL");
	CHECK(worst_o <= 1, "T=%d H=%d nh=%d: out off the double reference by %.3g x its bound", T, H, nh, worst_o);
	CHECK(worst_p <= 1, "T=%d H=%d nh=%d: probs off the double reference by %.3g x its bound", T, H, nh, worst_p);

	/* attn_fwd's last row: the same bytes */
	CHECK_OK(k->o->attn_fwd(k->s, fout, fprobs, qkv, T, H, nh));
	CHECK_BYTES(out, fout + (int64_t)(T - 1) * H, (size_t)H * sizeof(float), "out vs attn_fwd's last row");
	for (int h = 0; h < nh; h++)
		CHECK_BYTES(probs + (int64_t)h * T, fprobs + ((int64_t)h * T + T - 1) * T, (size_t)T * sizeof(float),
			    "probs vs attn_fwd's last row");
	k->o->free(k->b, qkv);
	k->o->free(k->b, q);
	k->o->free(k->b, kc);
	k->o->free(k->b, vc);
	k->o->free(k->b, out);
	k->o->free(k->b, probs);
	k->o->free(k->b, fout);
	k->o->free(k->b, fprobs);
	free(rout);
	free(rprobs);
}

/* A refused call: rc and a stream of its own (a refusal fails the stream it was enqueued on). */
static void refused(bk *k, const char *what, int want, float *out, float *probs, const float *q, const float *kc,
		    const float *vc, int64_t T, int64_t H, int nh)
{
	qe_stream *s = NULL;
	CHECK_OK(k->o->stream_create(k->b, &s));
	int rc = k->o->attn_decode(s, out, probs, q, kc, vc, T, H, nh);
	printf("  refused %-28s %s: %s\n", what, qe_errname(rc), qe_last_error());
	CHECK(rc == want, "%s: got %s, want %s", what, qe_errname(rc), qe_errname(want));
	k->o->stream_destroy(s);
}

int main(void)
{
	bk k;
	uint64_t seed = 20261206u;
	qe_rng r;
	qe_rng_init(&r, seed);
	printf("seed %llu\n", (unsigned long long)seed);
	CHECK_OK(bk_open(&k));
	test_case(&k, &r, 1, 64, 4);  /* the first token: one position */
	test_case(&k, &r, 17, 64, 4);
	test_case(&k, &r, 100, 96, 3); /* D 32 */
	test_case(&k, &r, 64, 128, 1); /* one head of 128 */

	float *b = bk_f32(&k, 4 * 64);
	refused(&k, "T = 0", QE_ESHAPE, b, b + 64, b + 128, b + 192, b + 192, 0, 64, 4);
	refused(&k, "H = 64, nh = 3", QE_ESHAPE, b, b + 64, b + 128, b + 192, b + 192, 1, 64, 3);
	refused(&k, "out overlapping k", QE_EINVAL, b + 192, b + 64, b + 128, b + 192, b + 192, 1, 64, 4);
	refused(&k, "probs NULL", QE_EINVAL, b, NULL, b + 128, b + 192, b + 192, 1, 64, 4);
	k.o->free(k.b, b);
	bk_close(&k);
	return qe_test_done(NAME);
}
