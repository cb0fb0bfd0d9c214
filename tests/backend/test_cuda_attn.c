/*
 * test_cuda_attn.c - the cuda backend's attention against the cpu reference,
 * on fresh random inputs (the seed is printed; QE_TEST_SEED overrides it):
 * the probabilities path (attn_fwd, attn_bwd) and flash attention
 * (attn_flash_fwd, attn_flash_bwd) with either kind of tensor-core operand.
 *
 * What must agree within a bound, max|cuda - cpu| <= tol * max|cpu|:
 *   - attention, forward tol 4e-3 and backward 8e-3: its GEMMs run in TF32
 *     (cuda_attn.cu), operands rounded to 11 significant bits (2^-11 = 4.9e-4
 *     relative each) before fp32 accumulation; the softmax exponentiates the
 *     scores' error and the backward subtracts nearly equal sums;
 *   - flash attention: TF32 operands 4e-3, bf16 operands 1.6e-2, and the
 *     cpu's flash output against its probabilities path 1e-5 (why: the
 *     comment of test_flash_operands).
 * Seen on an H100 (seed 20261129): TF32 attention and flash up to 8.3e-4 of
 * max|cpu|, bf16 flash up to 5.0e-3, the cpu's two paths 0.
 * Activations stored in bf16, read where they lie, give the f32 run's
 * results on the same values, rounded (test_flash_bf16_rows).
 * Also: two runs on cuda are byte-identical; the probabilities above the
 * diagonal are exactly zero; the two flash operand kinds give different
 * bytes; an unknown operand kind is refused on both backends.
 * attn_decode (one query row over cached keys and values, the sampler's
 * step): out and probs within attn_decode_bound of the cpu's (bk_util.h:
 * a worst-case bound on two fp32 evaluations summing in different orders -
 * the cuda scores are warp butterflies, the softmax block trees, the
 * output runs of positions - derived there term by term), printed as the
 * fraction of the bound used, with head dimensions that take each of the
 * kernel's output paths (G = 256 / D runs of positions, or one); two cuda
 * runs byte-identical.
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "runtime/fp8/bf16.h"
#include "cuda_pair.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

#define NAME "backend_test_cuda_attn"

#ifdef QE_WITH_CUDA

/* ---- attention ------------------------------------------------------------------- */

/*
 * The flash attention against the cpu's, with each kind of tensor-core
 * operand: TF32 within the batched attention's bound (4e-3 of max|cpu|),
 * bf16 within 1.6e-2 (a bf16 operand keeps 8 significant bits against
 * TF32's 11, so its rounding is 8x coarser; the bound is 4x, because the
 * sums average most of it out); its forward also against the cpu's
 * probabilities path (out: both are the same math in fp32, 1e-5), two cuda
 * runs byte-identical (no atomics), the two operand kinds giving different
 * bytes (the bf16 kernels ran), and the backward from the cpu's out and
 * lse on both sides.
 */
static void test_flash_operands(qe_rng *r, int B, int T, int H, int nh, qe_flash_operands op)
{
	fresh_stream();
	const char *on = op == QE_FLASH_BF16 ? "bf16" : "tf32";
	double bound = op == QE_FLASH_BF16 ? 1.6e-2 : 4e-3;
	int64_t N = (int64_t)B * T, nq = N * 3 * H, no = N * H, nl = (int64_t)B * nh * T;
	float *hq = rnd(r, nq, 1.0f), *hdo = rnd(r, no, 1.0f);
	void *gq, *go, *gl, *gdo, *gdq, *go2, *gl2, *gdq2, *go3;
	float *cq = pair(hq, nq * 4, &gq), *co = pair(NULL, no * 4, &go), *cl = pair(NULL, nl * 4, &gl);
	float *cdo = pair(hdo, no * 4, &gdo), *cdq = pair(NULL, nq * 4, &gdq);
	pair(NULL, no * 4, &go2);
	pair(NULL, nl * 4, &gl2);
	pair(NULL, nq * 4, &gdq2);
	pair(NULL, no * 4, &go3);
	qe_flash_operands other = op == QE_FLASH_BF16 ? QE_FLASH_TF32 : QE_FLASH_BF16;
	CHECK_OK(K.co->attn_flash_fwd(K.cs, co, cl, cq, NULL, B, T, H, nh, op, QE_F32));
	CHECK_OK(K.go->attn_flash_fwd(K.gs, go, gl, gq, NULL, B, T, H, nh, op, QE_F32));
	CHECK_OK(K.go->attn_flash_fwd(K.gs, go2, gl2, gq, NULL, B, T, H, nh, op, QE_F32));
	const int tf32 = H / nh <= 64; /* the TF32 kernels stop at head dimension 64 */
	if (tf32)
		CHECK_OK(K.go->attn_flash_fwd(K.gs, go3, gl2, gq, NULL, B, T, H, nh, other, QE_F32));
	CHECK_OK(K.go->attn_flash_fwd(K.gs, go2, gl2, gq, NULL, B, T, H, nh, op, QE_F32));
	char what[112];
	float *h = fetch(go, no * 4), *h2 = fetch(go2, no * 4), *h3 = fetch(go3, no * 4);
	snprintf(what, sizeof(what), "flash_fwd %s B=%d T=%d H=%d nh=%d out", on, B, T, H, nh);
	close_to(what, co, h, no, bound);
	CHECK(bytes_diff(h, h2, no * 4) < 0, "%s: two cuda runs differ", what);
	CHECK(!tf32 || bytes_diff(h, h3, no * 4) >= 0, "%s: the same bytes under the other operand kind", what);
	free(h);
	free(h2);
	free(h3);
	h = fetch(gl, nl * 4);
	h2 = fetch(gl2, nl * 4);
	snprintf(what, sizeof(what), "flash_fwd %s B=%d T=%d H=%d nh=%d lse", on, B, T, H, nh);
	close_to(what, cl, h, nl, bound);
	CHECK(bytes_diff(h, h2, nl * 4) < 0, "%s: two cuda runs differ", what);
	free(h);
	free(h2);
	/* the cpu's flash output is the probabilities path's, sequence by sequence */
	float *po = malloc((size_t)no * 4), *pp = malloc((size_t)nh * T * T * 4);
	for (int b = 0; b < B; b++)
		CHECK_OK(K.co->attn_fwd(K.cs, po + (int64_t)b * T * H, pp, cq + (int64_t)b * T * 3 * H, T, H, nh));
	snprintf(what, sizeof(what), "flash_fwd cpu vs probs B=%d T=%d out", B, T);
	close_to(what, po, co, no, 1e-5);
	free(po);
	free(pp);
	/* backward from the cpu's out and lse on both sides */
	up(go, co, no * 4);
	up(gl, cl, nl * 4);
	CHECK_OK(K.co->attn_flash_bwd(K.cs, cdq, cdo, cq, NULL, co, cl, B, T, H, nh, op, QE_F32));
	CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq, gdo, gq, NULL, go, gl, B, T, H, nh, op, QE_F32));
	CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq2, gdo, gq, NULL, go, gl, B, T, H, nh, op, QE_F32));
	h = fetch(gdq, nq * 4);
	h2 = fetch(gdq2, nq * 4);
	snprintf(what, sizeof(what), "flash_bwd %s B=%d T=%d H=%d nh=%d dqkv", on, B, T, H, nh);
	close_to(what, cdq, h, nq, bound);
	CHECK(bytes_diff(h, h2, nq * 4) < 0, "%s: two cuda runs differ", what);
	free(h);
	free(h2);
	free(hq);
	free(hdo);
}

static void test_flash_case(qe_rng *r, int B, int T, int H, int nh)
{
	test_flash_operands(r, B, T, H, nh, QE_FLASH_TF32);
	test_flash_operands(r, B, T, H, nh, QE_FLASH_BF16);
	/* an unknown operand kind is refused before anything runs, on both backends */
	fresh_stream();
	int64_t N = (int64_t)B * T;
	void *gq, *go, *gl;
	float *cq = pair(NULL, N * 3 * H * 4, &gq), *co = pair(NULL, N * H * 4, &go);
	float *cl = pair(NULL, (int64_t)B * nh * T * 4, &gl);
	int rc = K.go->attn_flash_fwd(K.gs, go, gl, gq, NULL, B, T, H, nh, (qe_flash_operands)7, QE_F32);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "operand kind 7"), "cuda: operand kind 7: got %s: %s",
	      qe_errname(rc), qe_last_error());
	qe_stream *cs = NULL; /* a stream of its own: the refusal fails it */
	CHECK_OK(K.co->stream_create(K.cb, &cs));
	rc = K.co->attn_flash_fwd(cs, co, cl, cq, NULL, B, T, H, nh, (qe_flash_operands)7, QE_F32);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "operand kind 7"), "cpu: operand kind 7: got %s: %s",
	      qe_errname(rc), qe_last_error());
	K.co->stream_destroy(cs);
}

/* n floats rounded to bf16 codes */
static uint16_t *codes_of(const float *x, int64_t n)
{
	uint16_t *c = malloc((size_t)(n > 0 ? n : 1) * 2);
	for (int64_t i = 0; i < n; i++)
		c[i] = qe_bf16_from_f32(x[i]);
	return c;
}

/* x replaced by the floats of its bf16 rounding; returns the codes */
static uint16_t *round_in_place(float *x, int64_t n)
{
	uint16_t *c = codes_of(x, n);
	for (int64_t i = 0; i < n; i++)
		x[i] = qe_bf16_to_f32(c[i]);
	return c;
}

/*
 * The bf16 result of an op (n codes at g16 on cuda) against its f32 run on
 * the same values (g32): with same, the codes of the rounded f32 results to
 * the byte; always within the bf16 bound of the cpu's f32 result c.
 */
static void bf16_is_rounded(const char *what, const char *name, void *g32, void *g16, const float *c, int64_t n,
			    int same)
{
	float *f = fetch(g32, n * 4);
	uint16_t *h = (uint16_t *)fetch(g16, n * 2), *want = codes_of(f, n);
	char w[160];
	snprintf(w, sizeof(w), "%s %s", what, name);
	CHECK(!same || bytes_diff(want, h, n * 2) < 0, "%s: bf16 output is not the f32 run's output rounded", w);
	float *wide = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		wide[i] = qe_bf16_to_f32(h[i]);
	close_to(w, c, wide, n, 1.6e-2);
	free(f);
	free(h);
	free(want);
	free(wide);
}

/*
 * Flash attention on activations stored in bf16 (as training stores them),
 * read in place, against the same values given in f32 (the op's bf16 copy
 * of them).  Without a bias the arithmetic is the same, so the bf16 outputs
 * (out, dqkv) are the f32 run's rounded, to the byte, and lse is the same
 * bytes: what differs is only where the tiles come from (strided rows, zeros
 * after T).  With a QKV bias the two take it differently - the f32 copy
 * adds it before its one rounding; bf16 rows get it in shared memory for
 * the tiles a block copies once and dK/dV's Q tiles, and as row terms for
 * the forward's and dQ's K and V tiles - so both are held to the bf16
 * bound of the cpu, and the bf16 run must repeat to the byte.  The
 * backward of both runs starts from the cpu's out rounded to bf16.  On the
 * cpu bf16 is the f32 run rounded, bias or not.
 */
static void test_flash_bf16_rows(qe_rng *r, int B, int T, int H, int nh, int with_bias)
{
	fresh_stream();
	int64_t N = (int64_t)B * T, nq = N * 3 * H, no = N * H, nl = (int64_t)B * nh * T;
	float *hq = rnd(r, nq, 1.0f), *hdo = rnd(r, no, 1.0f), *hb = rnd(r, 3 * H, 0.5f);
	uint16_t *q16 = round_in_place(hq, nq), *do16 = round_in_place(hdo, no);
	void *gq, *gq16, *gdo, *gdo16, *gb, *go, *go16, *gl, *gl16, *gof, *gof16, *gdq, *gdq16, *gdq16b;
	float *cq = pair(hq, nq * 4, &gq), *cdo = pair(hdo, no * 4, &gdo), *cb = pair(hb, 3 * H * 4, &gb);
	pair(NULL, nq * 2, &gdq16b);
	if (!with_bias)
		cb = NULL, gb = NULL;
	void *cq16 = pair(q16, nq * 2, &gq16), *cdo16 = pair(do16, no * 2, &gdo16);
	float *co = pair(NULL, no * 4, &go), *cl = pair(NULL, nl * 4, &gl), *cdq = pair(NULL, nq * 4, &gdq);
	uint16_t *co16 = pair(NULL, no * 2, &go16), *cdq16 = pair(NULL, nq * 2, &gdq16);
	float *cl16 = pair(NULL, nl * 4, &gl16);
	CHECK_OK(K.co->attn_flash_fwd(K.cs, co, cl, cq, cb, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.co->attn_flash_fwd(K.cs, co16, cl16, cq16, cb, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.go->attn_flash_fwd(K.gs, go, gl, gq, gb, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.go->attn_flash_fwd(K.gs, go16, gl16, gq16, gb, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.co->stream_sync(K.cs));
	char what[112];
	snprintf(what, sizeof(what), "flash bf16 rows B=%d T=%d H=%d nh=%d%s", B, T, H, nh, with_bias ? " bias" : "");
	uint16_t *want = codes_of(co, no);
	CHECK(bytes_diff(want, co16, no * 2) < 0 && bytes_diff(cl, cl16, nl * 4) < 0,
	      "%s: the cpu's bf16 forward is not its f32 forward rounded", what);
	free(want);
	bf16_is_rounded(what, "out", go, go16, co, no, !with_bias);
	float *h = fetch(gl, nl * 4), *h2 = fetch(gl16, nl * 4);
	CHECK(with_bias || bytes_diff(h, h2, nl * 4) < 0, "%s lse: bf16 rows read in place differ from the f32 copy's",
	      what);
	char wl[128];
	snprintf(wl, sizeof(wl), "%s lse", what);
	close_to(wl, cl, h2, nl, 1.6e-2);
	free(h);
	free(h2);
	/* backward from the cpu's out rounded to bf16 */
	uint16_t *o16 = round_in_place(co, no);
	void *cof = pair(co, no * 4, &gof), *cof16 = pair(o16, no * 2, &gof16);
	CHECK_OK(K.co->attn_flash_bwd(K.cs, cdq, cdo, cq, cb, cof, cl, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.co->attn_flash_bwd(K.cs, cdq16, cdo16, cq16, cb, cof16, cl, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	up(gl, cl, nl * 4);
	CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq, gdo, gq, gb, gof, gl, B, T, H, nh, QE_FLASH_BF16, QE_F32));
	CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq16, gdo16, gq16, gb, gof16, gl, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq16b, gdo16, gq16, gb, gof16, gl, B, T, H, nh, QE_FLASH_BF16, QE_BF16));
	CHECK_OK(K.co->stream_sync(K.cs));
	want = codes_of(cdq, nq);
	CHECK(bytes_diff(want, cdq16, nq * 2) < 0, "%s: the cpu's bf16 backward is not its f32 backward rounded", what);
	free(want);
	bf16_is_rounded(what, "dqkv", gdq, gdq16, cdq, nq, !with_bias);
	h = fetch(gdq16, nq * 2);
	h2 = fetch(gdq16b, nq * 2);
	CHECK(bytes_diff(h, h2, nq * 2) < 0, "%s: two bf16 backwards differ", what);
	free(h);
	free(h2);
	free(hq);
	free(hdo);
	free(hb);
	free(q16);
	free(do16);
	free(o16);
}

static void test_attn_case(qe_rng *r, int T, int H, int nh)
{
	fresh_stream();
	int64_t nq = (int64_t)T * 3 * H, no = (int64_t)T * H, np = (int64_t)nh * T * T;
	float *hq = rnd(r, nq, 1.0f), *hdo = rnd(r, no, 1.0f);
	void *gq, *go, *gp, *gdo, *gdq, *gp2, *gdq2;
	float *cq = pair(hq, nq * 4, &gq), *co = pair(NULL, no * 4, &go), *cp = pair(NULL, np * 4, &gp);
	float *cdo = pair(hdo, no * 4, &gdo), *cdq = pair(NULL, nq * 4, &gdq);
	pair(NULL, np * 4, &gp2);
	pair(NULL, nq * 4, &gdq2);
	CHECK_OK(K.co->attn_fwd(K.cs, co, cp, cq, T, H, nh));
	CHECK_OK(K.go->attn_fwd(K.gs, go, gp, gq, T, H, nh));
	CHECK_OK(K.go->attn_fwd(K.gs, go, gp2, gq, T, H, nh));
	char what[96];
	float *h = fetch(go, no * 4);
	snprintf(what, sizeof(what), "attn_fwd T=%d H=%d nh=%d out", T, H, nh);
	close_to(what, co, h, no, 4e-3);
	free(h);
	h = fetch(gp, np * 4);
	float *h2 = fetch(gp2, np * 4);
	snprintf(what, sizeof(what), "attn_fwd T=%d H=%d nh=%d probs", T, H, nh);
	close_to(what, cp, h, np, 4e-3);
	CHECK(bytes_diff(h, h2, np * 4) < 0, "attn_fwd: two cuda runs differ");
	int upper_zero = 1;
	for (int hh = 0; hh < nh; hh++)
		for (int t = 0; t < T; t++)
			for (int t2 = t + 1; t2 < T; t2++)
				upper_zero &= h[((int64_t)hh * T + t) * T + t2] == 0.0f;
	CHECK(upper_zero, "attn_fwd: probs above the diagonal are not zero");
	free(h);
	free(h2);
	/* backward from the cpu's probabilities on both sides */
	up(gp, cp, np * 4);
	CHECK_OK(K.co->attn_bwd(K.cs, cdq, cdo, cq, cp, T, H, nh));
	CHECK_OK(K.go->attn_bwd(K.gs, gdq, gdo, gq, gp, T, H, nh));
	CHECK_OK(K.go->attn_bwd(K.gs, gdq2, gdo, gq, gp, T, H, nh));
	h = fetch(gdq, nq * 4);
	h2 = fetch(gdq2, nq * 4);
	snprintf(what, sizeof(what), "attn_bwd T=%d H=%d nh=%d dqkv", T, H, nh);
	close_to(what, cdq, h, nq, 8e-3);
	CHECK(bytes_diff(h, h2, nq * 4) < 0, "attn_bwd: two cuda runs differ");
	free(h);
	free(h2);
	free(hq);
	free(hdo);
}

/* ---- attn_decode ------------------------------------------------------------------ */

static void test_decode_case(qe_rng *r, int T, int H, int nh)
{
	fresh_stream();
	int64_t nkv = (int64_t)T * H, np = (int64_t)nh * T, D = H / nh;
	float *hq = rnd(r, H, 1.0f), *hk = rnd(r, nkv, 1.0f), *hv = rnd(r, nkv, 1.0f);
	void *gq, *gk, *gv, *go, *gp, *go2, *gp2;
	float *cq = pair(hq, (size_t)H * 4, &gq), *ck = pair(hk, (size_t)nkv * 4, &gk), *cv = pair(hv, (size_t)nkv * 4, &gv);
	float *co = pair(NULL, (size_t)H * 4, &go), *cp = pair(NULL, (size_t)np * 4, &gp);
	pair(NULL, (size_t)H * 4, &go2);
	pair(NULL, (size_t)np * 4, &gp2);
	CHECK_OK(K.co->attn_decode(K.cs, co, cp, cq, ck, cv, T, H, nh));
	CHECK_OK(K.go->attn_decode(K.gs, go, gp, gq, gk, gv, T, H, nh));
	CHECK_OK(K.go->attn_decode(K.gs, go2, gp2, gq, gk, gv, T, H, nh));
	float *ho = fetch(go, (size_t)H * 4), *hp = fetch(gp, (size_t)np * 4);
	float *ho2 = fetch(go2, (size_t)H * 4), *hp2 = fetch(gp2, (size_t)np * 4);
	double worst_o = 0, worst_p = 0, md = 0; /* |diff| / bound at its largest; max|diff| of out */
	for (int h = 0; h < nh; h++) {
		double c, bo = attn_decode_bound(hq, hk, hv, T, H, nh, h, &c);
		for (int64_t i = h * D; i < (h + 1) * D; i++) {
			double d = fabs((double)ho[i] - co[i]);
			md = d > md ? d : md;
			worst_o = d / bo > worst_o || isnan(d) ? d / bo : worst_o;
		}
		for (int64_t t = (int64_t)h * T; t < (int64_t)(h + 1) * T; t++) {
			double d = fabs((double)hp[t] - cp[t]) / (c * cp[t] + 0x1p-126);
			worst_p = d > worst_p || isnan(d) ? d : worst_p;
		}
	}
	int same = bytes_diff(ho, ho2, (size_t)H * 4) < 0 && bytes_diff(hp, hp2, (size_t)np * 4) < 0;
	printf("  attn_decode T=%-4d H=%-4d nh=%-2d D=%-3lld out max|diff| %.3g (max|cpu| %.3g), %.3g of the bound; "
	       "probs %.3g of the bound; repeat %s  %s\n",
	       T, H, nh, (long long)D, md, max_abs(co, H), worst_o, worst_p, same ? "same" : "DIFFERS",
	       worst_o <= 1 && worst_p <= 1 && same ? "PASS" : "FAIL");
	CHECK(worst_o <= 1, "attn_decode T=%d H=%d nh=%d: out off the cpu's by %.3g x the bound", T, H, nh, worst_o);
	CHECK(worst_p <= 1, "attn_decode T=%d H=%d nh=%d: probs off the cpu's by %.3g x the bound", T, H, nh, worst_p);
	CHECK(same, "attn_decode T=%d H=%d nh=%d: two cuda runs differ", T, H, nh);
	free(ho);
	free(hp);
	free(ho2);
	free(hp2);
	free(hq);
	free(hk);
	free(hv);
}

int main(void)
{
	qe_rng r;
	int rc = both_open(20261129u, &r);
	if (rc <= 0)
		return rc < 0 ? qe_test_done(NAME) : 0;

	printf("attention\n");
	test_attn_case(&r, 32, 64, 4);
	test_attn_case(&r, 48, 96, 3);
	test_attn_case(&r, 256, 256, 2);
	test_flash_case(&r, 1, 64, 64, 4);    /* D 16, one tile */
	test_flash_case(&r, 2, 100, 64, 2);   /* D 32, a partial tile, two sequences */
	test_flash_case(&r, 2, 200, 128, 2);  /* D 64 */
	test_flash_case(&r, 2, 330, 128, 2);  /* D 64, an odd count of tiles: half a forward block */
	test_flash_case(&r, 1, 1024, 768, 12); /* GPT-2's attention, one sequence */
	test_flash_case(&r, 2, 200, 256, 4);   /* D 64: T < one forward block */
	test_flash_case(&r, 1, 1000, 512, 8);  /* D 64, many blocks and a partial one */
	test_flash_operands(&r, 2, 300, 256, 2, QE_FLASH_BF16); /* D 128 (bf16 only): a partial block */
	test_flash_operands(&r, 1, 640, 512, 4, QE_FLASH_BF16); /* D 128, whole blocks */
	test_flash_operands(&r, 1, 2048, 1024, 8, QE_FLASH_BF16); /* D 128 at seq 2048 */
	for (int bias = 0; bias < 2; bias++) {
		test_flash_bf16_rows(&r, 2, 100, 64, 4, bias);   /* D 16, partial tiles: zeros after T */
		test_flash_bf16_rows(&r, 2, 130, 128, 4, bias);  /* D 32 */
		test_flash_bf16_rows(&r, 2, 330, 128, 2, bias);  /* D 64, half a forward block */
		test_flash_bf16_rows(&r, 1, 1024, 768, 12, bias); /* GPT-2's */
		test_flash_bf16_rows(&r, 2, 300, 256, 2, bias);   /* D 128 */
	}

	printf("attn_decode\n");
	test_decode_case(&r, 1, 64, 4);      /* the first token; D 16: 16 runs of positions */
	test_decode_case(&r, 37, 128, 4);    /* D 32, runs of 5 positions, the last short */
	test_decode_case(&r, 100, 256, 4);   /* D 64 */
	test_decode_case(&r, 255, 240, 3);   /* D 80: 3 runs and 16 idle threads */
	test_decode_case(&r, 64, 512, 2);    /* D 256: one run, a thread per column */
	test_decode_case(&r, 33, 400, 2);    /* D 200: one run */
	test_decode_case(&r, 1024, 768, 12); /* GPT-2's last position */
	test_decode_case(&r, 1024, 1600, 25); /* gpt2-xl's */

	/* leak accounting is the backends' business; the buffers die with the process */
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif