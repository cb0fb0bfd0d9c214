/*
 * test_bf16.c - float32 -> bfloat16 rounding (runtime/fp8/bf16.h) on every
 * value class, and against an independent formulation.
 *
 * The spot table names each case the rounding has to get right: exact
 * values, ties to even in both directions, just above and below a tie, the
 * largest finite bf16 and the values that round past it to inf, +-inf,
 * NaNs of both signs, quiet and signalling (all become 0x7FFF, as the H200's
 * cvt.rn.bf16.f32 does; a signalling NaN with a low payload must not become
 * inf, which plain truncation would make of it), +-0, and float32 subnormals,
 * including one that rounds up to the smallest normal.
 *
 * The sweep compares qe_bf16_from_f32 (an integer add-and-shift) with
 * ref_round below, which works in doubles instead: it takes the two bf16
 * grid points around |x|, measures both distances exactly, and picks the
 * nearer, the even one on a tie, with 2^128 and above becoming inf as IEEE
 * overflow prescribes.  It runs over all 2^16
 * upper halves with the lower halves that sit on and around the rounding
 * boundaries, and over 2^22 random bit patterns (seed printed).  Setting
 * QE_BF16_EXHAUSTIVE=1 also runs all 2^32 floats (a few minutes).
 * Widening is checked on all 65536 codes: exact, and the round trip returns
 * every non-NaN code.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/rng.h"
#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"
#include "testlib.h"

#define SEED 20261207u
#define MAX_REPORT 20

/*
 * RNE of the float with these bits to bf16, in doubles: |x| lies in the
 * binade [2^E, 2^(E+1)) (E clamped to -126 below, where the grid is the
 * subnormal one), whose bf16 grid has the quantum 2^(E-7); the two grid
 * points around |x| are n and n + 1 quanta, both distances are exact, and
 * a tie takes the even multiple (an even multiple is an even code).  A
 * result of 2^128 or more is inf.  No bit of x's encoding is looked at.
 */
static uint16_t ref_round(uint32_t bits)
{
	float x = qe_f32_from_bits(bits);
	if (isnan(x))
		return QE_BF16_NAN;
	double ax = fabs((double)x);
	int neg = signbit(x) != 0;
	double v;
	if (isinf(x)) {
		v = INFINITY;
	} else if (ax == 0.0) {
		v = 0.0;
	} else {
		int e;
		frexp(ax, &e); /* ax in [2^(e-1), 2^e) */
		int E = e - 1 < -126 ? -126 : e - 1;
		double q = ldexp(1.0, E - 7);
		double n = floor(ax / q);
		double dlo = ax - n * q, dhi = (n + 1) * q - ax;
		if (dhi < dlo || (dhi == dlo && fmod(n, 2.0) != 0.0))
			n = n + 1;
		v = n * q;
	}
	if (v >= ldexp(1.0, 128))
		return neg ? 0xFF80u : 0x7F80u;
	float f = (float)(neg ? -v : v); /* exact: v is on the bf16 grid */
	return (uint16_t)(qe_f32_bits(f) >> 16);
}

static long report_bad;

/* 1 when qe_bf16_from_f32 and the reference agree on these bits; the first disagreements are printed. */
static int agree(uint32_t bits)
{
	uint16_t got = qe_bf16_from_f32(qe_f32_from_bits(bits)), want = ref_round(bits);
	if (got == want)
		return 1;
	if (report_bad++ < MAX_REPORT)
		fprintf(stderr, "bf16 of %08" PRIx32 " (%.9g): got %04x, reference %04x\n", bits,
			(double)qe_f32_from_bits(bits), got, want);
	return 0;
}

static void spot_checks(void)
{
	static const struct {
		uint32_t in;
		uint16_t out;
		const char *what;
	} t[] = {
		{ 0x3F800000u, 0x3F80u, "1.0 is exact" },
		{ 0xC0000000u, 0xC000u, "-2.0 is exact" },
		{ 0x3F810000u, 0x3F81u, "1.0078125 (one bf16 ulp above 1) is exact" },
		{ 0x3F808000u, 0x3F80u, "tie between 0x3F80 and 0x3F81 goes down to even" },
		{ 0x3F818000u, 0x3F82u, "tie between 0x3F81 and 0x3F82 goes up to even" },
		{ 0xBF808000u, 0xBF80u, "negative tie goes to even (down in magnitude)" },
		{ 0xBF818000u, 0xBF82u, "negative tie goes to even (up in magnitude)" },
		{ 0x3F807FFFu, 0x3F80u, "just below a tie rounds down" },
		{ 0x3F808001u, 0x3F81u, "just above a tie (even side) rounds up" },
		{ 0x3F817FFFu, 0x3F81u, "just below a tie (odd side) rounds down" },
		{ 0x3F818001u, 0x3F82u, "just above a tie (odd side) rounds up" },
		{ 0x3FFF8000u, 0x4000u, "a tie carries into the next binade" },
		{ 0x7F7F0000u, 0x7F7Fu, "largest finite bf16 is exact" },
		{ 0x7F7F7FFFu, 0x7F7Fu, "just below the overflow tie stays finite" },
		{ 0x7F7F8000u, 0x7F80u, "overflow tie (0x7F7F is odd) rounds to inf" },
		{ 0x7F7FFFFFu, 0x7F80u, "FLT_MAX rounds past the largest bf16 to inf" },
		{ 0xFF7FFFFFu, 0xFF80u, "-FLT_MAX rounds to -inf" },
		{ 0x7F800000u, 0x7F80u, "inf stays inf" },
		{ 0xFF800000u, 0xFF80u, "-inf stays -inf" },
		{ 0x7FC00000u, 0x7FFFu, "quiet NaN becomes 0x7FFF" },
		{ 0xFFC00000u, 0x7FFFu, "negative quiet NaN becomes 0x7FFF (the sign is not kept)" },
		{ 0x7F800001u, 0x7FFFu, "signalling NaN with payload 1 becomes 0x7FFF, not inf" },
		{ 0xFF800001u, 0x7FFFu, "negative signalling NaN becomes 0x7FFF, not -inf" },
		{ 0x7FBFFFFFu, 0x7FFFu, "signalling NaN with the largest payload becomes 0x7FFF" },
		{ 0x7FFFFFFFu, 0x7FFFu, "all-ones NaN stays 0x7FFF (rounding would carry into the sign)" },
		{ 0xFFFFFFFFu, 0x7FFFu, "negative all-ones NaN becomes 0x7FFF" },
		{ 0x7FC18000u, 0x7FFFu, "NaN whose lower half is a tie becomes 0x7FFF" },
		{ 0x00000000u, 0x0000u, "+0 stays +0" },
		{ 0x80000000u, 0x8000u, "-0 stays -0" },
		{ 0x00000001u, 0x0000u, "smallest fp32 subnormal rounds to +0" },
		{ 0x80000001u, 0x8000u, "smallest negative fp32 subnormal rounds to -0" },
		{ 0x00008000u, 0x0000u, "subnormal tie with 0 goes to +0 (even)" },
		{ 0x00008001u, 0x0001u, "just above half the smallest bf16 subnormal rounds up to it" },
		{ 0x00010000u, 0x0001u, "smallest bf16 subnormal is exact (no flush)" },
		{ 0x00018000u, 0x0002u, "subnormal tie goes up to even" },
		{ 0x007F0000u, 0x007Fu, "largest bf16 subnormal is exact" },
		{ 0x007F7FFFu, 0x007Fu, "below the tie under the smallest normal stays subnormal" },
		{ 0x007F8000u, 0x0080u, "subnormal tie rounds up to the smallest normal" },
		{ 0x007FFFFFu, 0x0080u, "largest fp32 subnormal rounds up to the smallest normal" },
		{ 0x807FFFFFu, 0x8080u, "negative: rounds up in magnitude to the smallest normal" },
		{ 0x00800000u, 0x0080u, "smallest fp32 normal is exact" },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		uint16_t got = qe_bf16_from_f32(qe_f32_from_bits(t[i].in));
		CHECK(got == t[i].out, "%s: %08" PRIx32 " -> %04x, want %04x", t[i].what, t[i].in, got, t[i].out);
		CHECK(ref_round(t[i].in) == t[i].out, "the reference itself on %s: %04x, want %04x", t[i].what,
		      ref_round(t[i].in), t[i].out);
		float r = qe_bf16_round(qe_f32_from_bits(t[i].in));
		CHECK(qe_f32_bits(r) == (uint32_t)t[i].out << 16, "qe_bf16_round of %08" PRIx32 ": %08" PRIx32
		      ", want %08" PRIx32, t[i].in, qe_f32_bits(r), (uint32_t)t[i].out << 16);
	}
	CHECK(isnan(qe_bf16_to_f32(QE_BF16_NAN)), "0x7FFF widens to a NaN");
	CHECK(qe_bf16_to_f32(0x7F7Fu) == 3.3895313892515355e38f, "largest finite bf16 is 3.3895314e38, got %.9g",
	      (double)qe_bf16_to_f32(0x7F7Fu));
}

/* Widening is exact, and every non-NaN code comes back from its value. */
static void all_codes(void)
{
	long bad = 0;
	for (uint32_t c = 0; c < 65536u; c++) {
		float v = qe_bf16_to_f32((uint16_t)c);
		qe_test_checks++;
		if (qe_f32_bits(v) != c << 16) {
			if (bad++ < MAX_REPORT)
				fprintf(stderr, "widen %04x: %08" PRIx32 "\n", c, qe_f32_bits(v));
			qe_test_failures++;
			continue;
		}
		uint16_t back = qe_bf16_from_f32(v);
		uint16_t want = isnan(v) ? QE_BF16_NAN : (uint16_t)c;
		qe_test_checks++;
		if (back != want) {
			if (bad++ < MAX_REPORT)
				fprintf(stderr, "round trip %04x -> %.9g -> %04x, want %04x\n", c, (double)v, back, want);
			qe_test_failures++;
		}
	}
	printf("all 65536 codes widen exactly%s\n", bad ? "" : " and round back");
}

static void sweep(void)
{
	/* lower halves on and around the boundaries: exact, tie, either side of it, the ends */
	static const uint16_t lows[] = { 0x0000, 0x0001, 0x3FFF, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFE, 0xFFFF };
	const int nlows = (int)(sizeof(lows) / sizeof(lows[0]));
	long bad = 0;
	for (uint32_t hi = 0; hi < 65536u; hi++)
		for (int l = 0; l < nlows; l++)
			bad += !agree(hi << 16 | lows[l]);
	CHECK(bad == 0, "sweep: %ld of the 2^16 x %d edge patterns differ from the reference", bad, nlows);
	qe_rng r;
	qe_rng_init(&r, SEED);
	bad = 0;
	for (long i = 0; i < (1L << 22); i++)
		bad += !agree((uint32_t)qe_rng_u64(&r));
	CHECK(bad == 0, "sweep: %ld of 2^22 random patterns (seed %u) differ from the reference", bad, SEED);
	printf("sweep: 2^16 upper halves x %d lower halves and 2^22 random patterns (seed %u) agree with the reference\n",
	       nlows, SEED);
	const char *ex = getenv("QE_BF16_EXHAUSTIVE");
	if (ex && strcmp(ex, "1") == 0) {
		long long xbad = 0;
		uint32_t b = 0;
		do
			xbad += !agree(b);
		while (++b != 0);
		CHECK(xbad == 0, "exhaustive: %lld of 2^32 floats differ from the reference", xbad);
		printf("exhaustive: all 2^32 floats: %lld differ\n", xbad);
	}
}

int main(void)
{
	spot_checks();
	all_codes();
	sweep();
	return qe_test_done("fp8_test_bf16");
}
