/*
 * test_fp8_scaling.c - delayed-scaling update and roll against hand-worked
 * sequences (DESIGN.md section 4, TransformerEngine semantics).
 *
 * A role block is [h0 h1 h2 h3 | scale | scale_inv] with L = 4.  Each case
 * states the block before and after in comments; expected floats that are not
 * exact are given by their bits, so the comparison is bit for bit.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/fp8/fp8.h"
#include "testlib.h"

#define L 4
#define NB (L + 2)

/* scale_inv values, worked out as the float nearest the exact quotient */
#define INV_224 qe_f32_from_bits(0x3b924925u)   /* 1/224 = 0.0044642859... */
#define INV_112 qe_f32_from_bits(0x3c124925u)   /* 1/112 */
#define INV_448 qe_f32_from_bits(0x3b124925u)   /* 1/448 */
#define S_448_3 qe_f32_from_bits(0x43155555u)   /* 448/3 = 149.33333 rounds to 149.333328 */
#define INV_S_448_3 qe_f32_from_bits(0x3bdb6db7u) /* 1/149.333328 = 0.0066964288 */
#define INV_FLT_MAX qe_f32_from_bits(0x00200000u) /* 1/FLT_MAX = 2^-128 (subnormal; the 2^-152 excess rounds away) */

static qe_fp8_recipe recipe(qe_amax_algo algo, int margin)
{
	qe_fp8_recipe r = qe_fp8_recipe_default();
	r.history_len = L;
	r.algo = algo;
	r.margin = margin;
	return r;
}

/* Run one update of block with fmt and recipe r, then compare every float bitwise to want. */
static void step(const char *what, float *block, qe_dtype fmt, const qe_fp8_recipe *r, const float want[NB])
{
	qe_fp8_role_update(block, L, fmt, r);
	for (int i = 0; i < NB; i++) {
		int same = qe_f32_bits(block[i]) == qe_f32_bits(want[i]);
		CHECK(same, "%s: block[%d] = %.9g (%08x), want %.9g (%08x)", what, i, (double)block[i], qe_f32_bits(block[i]),
		      (double)want[i], qe_f32_bits(want[i]));
	}
}

static void test_skip_when_nothing_cast(void)
{
	qe_fp8_recipe r = recipe(QE_AMAX_MAX, 0);
	float b[NB];
	qe_fp8_role_init(b, L);
	/* fresh: [0 0 0 0 | 1 | 1] stays exactly as it is */
	step("init, amax 0", b, QE_E4M3, &r, (float[NB]){ 0, 0, 0, 0, 1, 1 });

	/* [0 5 0 0 | 2 | 0.5]: row 0 is 0, so no update although max(history) = 5, and no roll */
	float c[NB] = { 0, 5, 0, 0, 2, 0.5f };
	step("row 0 is zero", c, QE_E4M3, &r, (float[NB]){ 0, 5, 0, 0, 2, 0.5f });

	/* -0 compares equal to 0: also "nothing cast" */
	float d[NB] = { -0.0f, 5, 0, 0, 2, 0.5f };
	qe_fp8_role_update(d, L, QE_E4M3, &r);
	CHECK(d[1] == 5 && d[L] == 2, "-0 in row 0 should skip the update");
}

/*
 * Rollover, E4M3 (max 448), algo max, margin 0.  Each step writes row 0 (the
 * amax of this action's cast) and updates; roll is new[i] = old[i+1],
 * new[3] = old[0], new[0] = 0 - so old[1] falls out of the window.
 */
static void test_rollover_max(void)
{
	qe_fp8_recipe r = recipe(QE_AMAX_MAX, 0);
	float b[NB];
	qe_fp8_role_init(b, L);

	/* [2 0 0 0]: amax 2, scale 448/2 = 224; roll -> [0 0 0 2] */
	b[0] = 2;
	step("rollover 1", b, QE_E4M3, &r, (float[NB]){ 0, 0, 0, 2, 224, INV_224 });
	/* [4 0 0 2]: amax 4, scale 112; roll -> [0 0 2 4] */
	b[0] = 4;
	step("rollover 2", b, QE_E4M3, &r, (float[NB]){ 0, 0, 2, 4, 112, INV_112 });
	/* [1 0 2 4]: amax 4, scale 112; roll -> [0 2 4 1] */
	b[0] = 1;
	step("rollover 3", b, QE_E4M3, &r, (float[NB]){ 0, 2, 4, 1, 112, INV_112 });
	/* [0.5 2 4 1]: amax 4; roll -> [2 4 1 0.5] with row 0 zeroed: [0 4 1 0.5] (the 2 is gone) */
	b[0] = 0.5f;
	step("rollover 4", b, QE_E4M3, &r, (float[NB]){ 0, 4, 1, 0.5f, 112, INV_112 });
	/* [0.25 4 1 0.5]: amax 4 (its last update in the window); roll -> [0 1 0.5 0.25] */
	b[0] = 0.25f;
	step("rollover 5", b, QE_E4M3, &r, (float[NB]){ 0, 1, 0.5f, 0.25f, 112, INV_112 });
	/* [0.125 1 0.5 0.25]: the 4 has rolled out, amax 1, scale 448; roll -> [0 0.5 0.25 0.125] */
	b[0] = 0.125f;
	step("rollover 6", b, QE_E4M3, &r, (float[NB]){ 0, 0.5f, 0.25f, 0.125f, 448, INV_448 });
	/* [3 0.5 0.25 0.125]: amax 3, scale 448/3 = 149.333328 (float), inv 0.0066964288 */
	b[0] = 3;
	step("rollover 7", b, QE_E4M3, &r, (float[NB]){ 0, 0.25f, 0.125f, 3, S_448_3, INV_S_448_3 });
	/* no cast since: nothing changes */
	step("rollover 8 (idle)", b, QE_E4M3, &r, (float[NB]){ 0, 0.25f, 0.125f, 3, S_448_3, INV_S_448_3 });
}

/* most_recent uses row 0 only: where max would keep 4 (scale 112), it takes 1 (scale 448). */
static void test_most_recent(void)
{
	qe_fp8_recipe rm = recipe(QE_AMAX_MOST_RECENT, 0);
	qe_fp8_recipe rx = recipe(QE_AMAX_MAX, 0);
	float a[NB] = { 1, 0, 2, 4, 112, INV_112 };
	float b[NB] = { 1, 0, 2, 4, 112, INV_112 };
	/* [1 0 2 4]: most_recent amax 1 -> 448; max amax 4 -> 112; both roll to [0 2 4 1] */
	step("most_recent", a, QE_E4M3, &rm, (float[NB]){ 0, 2, 4, 1, 448, INV_448 });
	step("max", b, QE_E4M3, &rx, (float[NB]){ 0, 2, 4, 1, 112, INV_112 });
	/* [8 2 4 1] with most_recent: amax 8 -> 56, inv 1/56 = 2^-3 * 1/7 */
	a[0] = 8;
	step("most_recent 2", a, QE_E4M3, &rm, (float[NB]){ 0, 4, 1, 8, 56, 1.0f / 56.0f });
}

static void test_margin_and_e5m2(void)
{
	/* margin 2: amax 7 -> (448/7)/2^2 = 64/4 = 16, inv 0.0625 */
	qe_fp8_recipe r2 = recipe(QE_AMAX_MAX, 2);
	float b[NB] = { 7, 0, 0, 0, 1, 1 };
	step("margin 2", b, QE_E4M3, &r2, (float[NB]){ 0, 0, 0, 7, 16, 0.0625f });

	/* E5M2 (grad_output under HYBRID): amax 7 -> 57344/7 = 8192, inv 2^-13 */
	qe_fp8_recipe r = recipe(QE_AMAX_MAX, 0);
	CHECK(qe_fp8_role_dtype(&r, QE_ROLE_GRAD_OUTPUT) == QE_E5M2, "hybrid grad_output is e5m2");
	float c[NB] = { 7, 0, 0, 0, 1, 1 };
	step("e5m2", c, qe_fp8_role_dtype(&r, QE_ROLE_GRAD_OUTPUT), &r,
	     (float[NB]){ 0, 0, 0, 7, 8192, 0x1p-13f });
	/* E5M2 with margin 3: amax 0.5 -> 114688/8 = 14336, inv 1/14336 = 2^-11/7 */
	qe_fp8_recipe r3 = recipe(QE_AMAX_MAX, 3);
	float d[NB] = { 0.5f, 0, 0, 0, 1, 1 };
	step("e5m2 margin 3", d, QE_E5M2, &r3, (float[NB]){ 0, 0, 0, 0.5f, 14336, 1.0f / 14336.0f });
}

/* inf or NaN amax: keep scale and scale_inv, but still roll (row 0 was not 0). */
static void test_non_finite(void)
{
	qe_fp8_recipe rx = recipe(QE_AMAX_MAX, 0);
	qe_fp8_recipe rm = recipe(QE_AMAX_MOST_RECENT, 0);

	/* [inf 1 0 0 | 224]: amax inf -> keep 224; roll -> [0 0 0 inf] */
	float b[NB] = { INFINITY, 1, 0, 0, 224, INV_224 };
	step("inf amax", b, QE_E4M3, &rx, (float[NB]){ 0, 0, 0, INFINITY, 224, INV_224 });
	/* [2 0 0 inf]: max still sees inf -> keep; roll -> [0 0 inf 2] */
	b[0] = 2;
	step("inf in window", b, QE_E4M3, &rx, (float[NB]){ 0, 0, INFINITY, 2, 224, INV_224 });
	/* same window, most_recent: amax 2 -> 224 ... start from a different scale to see it change */
	float c[NB] = { 2, 0, 0, INFINITY, 1, 1 };
	step("inf in window, most_recent", c, QE_E4M3, &rm, (float[NB]){ 0, 0, INFINITY, 2, 224, INV_224 });

	/* [NaN 1 0 0 | 112]: keep 112; roll -> [0 0 0 NaN] */
	float n[NB] = { NAN, 1, 0, 0, 112, INV_112 };
	qe_fp8_role_update(n, L, QE_E4M3, &rx);
	CHECK(n[0] == 0 && n[1] == 0 && n[2] == 0 && isnan(n[3]), "NaN amax: history rolled to [0 0 0 NaN], got [%g %g %g %g]",
	      (double)n[0], (double)n[1], (double)n[2], (double)n[3]);
	CHECK(n[L] == 112 && qe_f32_bits(n[L + 1]) == qe_f32_bits(INV_112), "NaN amax keeps scale 112, got %g / %g",
	      (double)n[L], (double)n[L + 1]);
	/* [8 0 0 NaN]: a NaN in the window makes max NaN -> keep 112 (8 alone would give 56) */
	n[0] = 8;
	qe_fp8_role_update(n, L, QE_E4M3, &rx);
	CHECK(n[L] == 112, "NaN in window (max) keeps scale 112, got %g", (double)n[L]);
	CHECK(n[0] == 0 && isnan(n[2]) && n[3] == 8, "NaN window rolled to [0 0 NaN 8]");
	/* most_recent ignores the NaN further back: [8 0 NaN 8] -> amax 8 -> 56 */
	n[0] = 8;
	qe_fp8_role_update(n, L, QE_E4M3, &rm);
	CHECK(n[L] == 56 && qe_f32_bits(n[L + 1]) == qe_f32_bits(1.0f / 56.0f), "most_recent past a NaN: scale 56, got %g",
	      (double)n[L]);
	/* NaN in row 0 with most_recent: keep */
	float m[NB] = { NAN, 0, 0, 0, 3, 1.0f / 3.0f };
	qe_fp8_role_update(m, L, QE_E4M3, &rm);
	CHECK(m[L] == 3 && isnan(m[3]) && m[0] == 0, "most_recent NaN: keep scale 3 and roll");
}

/* 448 / amax overflows float for tiny amax: the scale becomes FLT_MAX, never inf. */
static void test_flt_max(void)
{
	qe_fp8_recipe r = recipe(QE_AMAX_MAX, 0);
	/* amax = 2^-149 (smallest denormal): 448 * 2^149 ~ 3.2e47 > FLT_MAX -> FLT_MAX, inv 2^-128 */
	float b[NB] = { qe_f32_from_bits(0x00000001u), 0, 0, 0, 1, 1 };
	step("denormal amax", b, QE_E4M3, &r, (float[NB]){ 0, 0, 0, qe_f32_from_bits(0x00000001u), FLT_MAX, INV_FLT_MAX });
	/* amax = 2^-120 (normal): 448 * 2^120 = 1.75 * 2^128 overflows too */
	float c[NB] = { 0x1p-120f, 0, 0, 0, 1, 1 };
	step("tiny normal amax", c, QE_E4M3, &r, (float[NB]){ 0, 0, 0, 0x1p-120f, FLT_MAX, INV_FLT_MAX });
	/* with margin 1, inf / 2 is still inf -> FLT_MAX */
	qe_fp8_recipe r1 = recipe(QE_AMAX_MAX, 1);
	float d[NB] = { 0x1p-120f, 0, 0, 0, 1, 1 };
	step("tiny amax margin 1", d, QE_E4M3, &r1, (float[NB]){ 0, 0, 0, 0x1p-120f, FLT_MAX, INV_FLT_MAX });
	/* amax = 2^-118: 448 * 2^118 = 1.75 * 2^126 fits; margin 1 -> 1.75 * 2^125 exactly */
	float e[NB] = { 0x1p-118f, 0, 0, 0, 1, 1 };
	step("small amax margin 1", e, QE_E4M3, &r1,
	     (float[NB]){ 0, 0, 0, 0x1p-118f, 0x1.cp125f, 1.0f / 0x1.cp125f });
}

static void test_scale_for_amax(void)
{
	CHECK(qe_fp8_scale_for_amax(0.0f, 448, 0, 5.0f) == 5.0f, "amax 0 -> fallback");
	CHECK(qe_fp8_scale_for_amax(-1.0f, 448, 0, 5.0f) == 5.0f, "amax < 0 -> fallback");
	CHECK(qe_fp8_scale_for_amax(NAN, 448, 0, 5.0f) == 5.0f, "amax NaN -> fallback");
	CHECK(qe_fp8_scale_for_amax(INFINITY, 448, 0, 5.0f) == 5.0f, "amax inf -> fallback");
	CHECK(qe_fp8_scale_for_amax(2.0f, 448, 1, 5.0f) == 112.0f, "448/2/2 = 112");
	CHECK(qe_fp8_scale_for_amax(0x1p-149f, 57344, 0, 5.0f) == FLT_MAX, "overflow -> FLT_MAX");
}

static void test_recipe_helpers(void)
{
	qe_fp8_recipe d = qe_fp8_recipe_default();
	CHECK(d.format == QE_FP8_HYBRID && d.margin == 0 && d.history_len == 1024 && d.algo == QE_AMAX_MAX,
	      "TE defaults");
	CHECK_OK(qe_fp8_recipe_check(&d));
	qe_fp8_recipe bad = d;
	bad.history_len = 0;
	CHECK(qe_fp8_recipe_check(&bad) == QE_EINVAL && strstr(qe_last_error(), "history_len"),
	      "history_len 0 rejected naming the field: '%s'", qe_last_error());
	bad = d;
	bad.margin = -1;
	CHECK(qe_fp8_recipe_check(&bad) == QE_EINVAL && strstr(qe_last_error(), "margin"), "margin -1 rejected");
	bad = d;
	bad.algo = (qe_amax_algo)7;
	CHECK(qe_fp8_recipe_check(&bad) == QE_EINVAL && strstr(qe_last_error(), "algo"), "algo 7 rejected");
	bad = d;
	bad.format = (qe_fp8_format)9;
	CHECK(qe_fp8_recipe_check(&bad) == QE_EINVAL && strstr(qe_last_error(), "format"), "format 9 rejected");

	CHECK(qe_fp8_role_dtype(&d, QE_ROLE_INPUT) == QE_E4M3 && qe_fp8_role_dtype(&d, QE_ROLE_WEIGHT) == QE_E4M3,
	      "hybrid forward roles are e4m3");
	qe_fp8_recipe e = d;
	e.format = QE_FP8_E4M3_ONLY;
	CHECK(qe_fp8_role_dtype(&e, QE_ROLE_GRAD_OUTPUT) == QE_E4M3, "e4m3-only grad_output is e4m3");
	CHECK(strcmp(qe_fp8_role_name(QE_ROLE_INPUT), "input") == 0 &&
		      strcmp(qe_fp8_role_name(QE_ROLE_WEIGHT), "weight") == 0 &&
		      strcmp(qe_fp8_role_name(QE_ROLE_GRAD_OUTPUT), "grad_output") == 0,
	      "role names");

	qe_fp8_format f;
	qe_amax_algo a;
	CHECK(qe_fp8_format_parse("hybrid", &f) == 0 && f == QE_FP8_HYBRID, "parse hybrid");
	CHECK(qe_fp8_format_parse("e4m3", &f) == 0 && f == QE_FP8_E4M3_ONLY, "parse e4m3");
	CHECK(qe_fp8_format_parse("e5m2", &f) == QE_EINVAL && strstr(qe_last_error(), "'e5m2'"),
	      "bad format names the value: '%s'", qe_last_error());
	CHECK(qe_amax_algo_parse("max", &a) == 0 && a == QE_AMAX_MAX, "parse max");
	CHECK(qe_amax_algo_parse("most_recent", &a) == 0 && a == QE_AMAX_MOST_RECENT, "parse most_recent");
	CHECK(qe_amax_algo_parse("mean", &a) == QE_EINVAL && strstr(qe_last_error(), "'mean'"), "bad algo");
	for (int i = 0; i < 2; i++) {
		CHECK(qe_fp8_format_parse(qe_fp8_format_name((qe_fp8_format)i), &f) == 0 && (int)f == i,
		      "format name round trip %d", i);
		CHECK(qe_amax_algo_parse(qe_amax_algo_name((qe_amax_algo)i), &a) == 0 && (int)a == i,
		      "algo name round trip %d", i);
	}
	CHECK(qe_fp8_role_floats(4) == 6, "role block of L=4 is 6 floats");
}

int main(void)
{
	test_skip_when_nothing_cast();
	test_rollover_max();
	test_most_recent();
	test_margin_and_e5m2();
	test_non_finite();
	test_flt_max();
	test_scale_for_amax();
	test_recipe_helpers();
	return qe_test_done("fp8_test_fp8_scaling");
}
