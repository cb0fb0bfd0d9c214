/*
 * test_fp8_vectors.c - encode/decode against the H200's own conversions.
 *
 * data/fp8-vectors.txt was produced by __nv_cvt_float_to_fp8 on sm_90: every
 * conversion line gives a float's bits and its four codes (E4M3 and E5M2,
 * SATFINITE and NOSAT), every 'd' line a code and the float bits it decodes
 * to.  Matching all of them is what lets the cpu backend stand in for the GPU.
 * Built-in spot checks run too, so the test still asserts the corner cases
 * (overflow boundary, ties, subnormals, NaN, signed zero) where the shared
 * folder is missing.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/fp8/fp8.h"
#include "testlib.h"

/* Report at most this many mismatches per kind; the count still covers all. */
#define MAX_REPORT 20

static int check_file(const char *path)
{
	FILE *f = fopen(path, "r");
	CHECK(f != NULL, "open %s", path);
	if (!f)
		return 0;

	char line[256];
	long lineno = 0, conv_lines = 0, dec_lines = 0, bad = 0;
	int seen_code[256] = { 0 };
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (line[0] == 'd' && line[1] == ' ') { /* a float's bits may start with hex d */
			unsigned code, b4, b5;
			int n = sscanf(line, "d %x %x %x", &code, &b4, &b5);
			CHECK(n == 3 && code < 256, "%s:%ld: malformed decode line", path, lineno);
			if (n != 3 || code >= 256)
				continue;
			dec_lines++;
			seen_code[code] = 1;
			uint32_t g4 = qe_f32_bits(qe_fp8_decode((uint8_t)code, QE_E4M3));
			uint32_t g5 = qe_f32_bits(qe_fp8_decode((uint8_t)code, QE_E5M2));
			if (g4 != b4 || g5 != b5) {
				if (bad++ < MAX_REPORT)
					fprintf(stderr, "%s:%ld: decode %02x: e4m3 %08" PRIx32 " (want %08x), e5m2 %08" PRIx32
						" (want %08x)\n", path, lineno, code, g4, b4, g5, b5);
				qe_test_failures++;
			}
			qe_test_checks++;
			continue;
		}
		unsigned bits, c[4];
		int n = sscanf(line, "%x %x %x %x %x", &bits, &c[0], &c[1], &c[2], &c[3]);
		CHECK(n == 5, "%s:%ld: malformed conversion line", path, lineno);
		if (n != 5)
			continue;
		conv_lines++;
		float x = qe_f32_from_bits(bits);
		unsigned g[4] = {
			qe_fp8_encode(x, QE_E4M3, 1),
			qe_fp8_encode(x, QE_E5M2, 1),
			qe_fp8_encode(x, QE_E4M3, 0),
			qe_fp8_encode(x, QE_E5M2, 0),
		};
		if (memcmp(g, c, sizeof g) != 0) {
			if (bad++ < MAX_REPORT)
				fprintf(stderr, "%s:%ld: %08x (%.9g): got %02x %02x %02x %02x, want %02x %02x %02x %02x\n",
					path, lineno, bits, (double)x, g[0], g[1], g[2], g[3], c[0], c[1], c[2], c[3]);
			qe_test_failures++;
		}
		qe_test_checks++;
	}
	fclose(f);
	int all = 1;
	for (int i = 0; i < 256; i++)
		all &= seen_code[i];
	CHECK(all, "%s: the decode table does not cover all 256 codes", path);
	CHECK(conv_lines > 1000, "%s: only %ld conversion lines", path, conv_lines);
	printf("fp8 vectors: %s: checked %ld conversion lines (4 codes each) and %ld decode lines; %ld mismatches\n",
	       path, conv_lines, dec_lines, bad);
	return 1;
}

/* One spot check: the four codes of a float, in the vector file's column order. */
static void spot(float x, unsigned e4s, unsigned e5s, unsigned e4n, unsigned e5n)
{
	unsigned g[4] = {
		qe_fp8_encode(x, QE_E4M3, 1),
		qe_fp8_encode(x, QE_E5M2, 1),
		qe_fp8_encode(x, QE_E4M3, 0),
		qe_fp8_encode(x, QE_E5M2, 0),
	};
	CHECK(g[0] == e4s && g[1] == e5s && g[2] == e4n && g[3] == e5n,
	      "encode %.9g (%08x): got %02x %02x %02x %02x, want %02x %02x %02x %02x", (double)x, qe_f32_bits(x), g[0], g[1],
	      g[2], g[3], e4s, e5s, e4n, e5n);
}

static void spot_checks(void)
{
	/* Zeros keep their sign. */
	spot(0.0f, 0x00, 0x00, 0x00, 0x00);
	spot(-0.0f, 0x80, 0x80, 0x80, 0x80);
	spot(1.0f, 0x38, 0x3c, 0x38, 0x3c);
	spot(-2.0f, 0xc0, 0xc0, 0xc0, 0xc0);
	/* E4M3 max, and just above it: 449 rounds down to 448 either way. */
	spot(448.0f, 0x7e, 0x5f, 0x7e, 0x5f);
	spot(449.0f, 0x7e, 0x5f, 0x7e, 0x5f);
	/* 464 is the tie between 448 (mantissa 110, even) and 480: even wins, no overflow. */
	spot(464.0f, 0x7e, 0x5f, 0x7e, 0x5f);
	/* One ulp above the tie rounds to 480, which E4M3 lacks: max with sat, NaN without. */
	spot(qe_f32_from_bits(0x43e80001u), 0x7e, 0x5f, 0x7f, 0x5f);
	spot(-480.0f, 0xfe, 0xe0, 0xff, 0xe0);
	/* E5M2 max; 61440 is the tie between 57344 (odd mantissa 11) and 65536: rounds up, overflows. */
	spot(57344.0f, 0x7e, 0x7b, 0x7f, 0x7b);
	spot(qe_f32_from_bits(0x476fffffu), 0x7e, 0x7b, 0x7f, 0x7b);
	spot(61440.0f, 0x7e, 0x7b, 0x7f, 0x7c);
	spot(1e9f, 0x7e, 0x7b, 0x7f, 0x7c);
	spot(-1e9f, 0xfe, 0xfb, 0xff, 0xfc);
	/* Infinities saturate to max, or become NaN (E4M3) / inf (E5M2). */
	spot(INFINITY, 0x7e, 0x7b, 0x7f, 0x7c);
	spot(-INFINITY, 0xfe, 0xfb, 0xff, 0xfc);
	/* Any NaN, either sign, becomes the positive canonical 0x7f. */
	spot(NAN, 0x7f, 0x7f, 0x7f, 0x7f);
	spot(qe_f32_from_bits(0xffc00000u), 0x7f, 0x7f, 0x7f, 0x7f);
	spot(qe_f32_from_bits(0x7f800001u), 0x7f, 0x7f, 0x7f, 0x7f);
	/* Smallest subnormals: E4M3 2^-9, E5M2 2^-16; half of them is a tie to even zero. */
	spot(ldexpf(1.0f, -9), 0x01, 0x18, 0x01, 0x18); /* E5M2: normal, exponent field 6 */
	spot(ldexpf(1.0f, -10), 0x00, 0x14, 0x00, 0x14);
	spot(qe_f32_from_bits(0x3a800001u), 0x01, 0x14, 0x01, 0x14); /* 2^-10 plus 1 ulp rounds up */
	spot(ldexpf(1.0f, -16), 0x00, 0x01, 0x00, 0x01);
	spot(ldexpf(1.0f, -17), 0x00, 0x00, 0x00, 0x00);
	spot(ldexpf(3.0f, -17), 0x00, 0x02, 0x00, 0x02); /* 1.5 subnormal quanta: tie to even 2 */
	spot(-ldexpf(1.0f, -9), 0x81, 0x98, 0x81, 0x98);
	/* Float subnormals are far below any FP8 value. */
	spot(qe_f32_from_bits(0x00000001u), 0x00, 0x00, 0x00, 0x00);

	/* Decode: max values, subnormal min, signed zero, inf and the NaN bits. */
	CHECK(qe_f32_bits(qe_fp8_decode(0x7e, QE_E4M3)) == qe_f32_bits(448.0f), "decode e4m3 7e");
	CHECK(qe_f32_bits(qe_fp8_decode(0x7b, QE_E5M2)) == qe_f32_bits(57344.0f), "decode e5m2 7b");
	CHECK(qe_f32_bits(qe_fp8_decode(0x01, QE_E4M3)) == qe_f32_bits(ldexpf(1.0f, -9)), "decode e4m3 01");
	CHECK(qe_f32_bits(qe_fp8_decode(0x01, QE_E5M2)) == qe_f32_bits(ldexpf(1.0f, -16)), "decode e5m2 01");
	CHECK(qe_f32_bits(qe_fp8_decode(0x80, QE_E4M3)) == 0x80000000u, "decode e4m3 80 is -0");
	CHECK(qe_f32_bits(qe_fp8_decode(0x80, QE_E5M2)) == 0x80000000u, "decode e5m2 80 is -0");
	CHECK(qe_f32_bits(qe_fp8_decode(0x7c, QE_E5M2)) == 0x7f800000u, "decode e5m2 7c is +inf");
	CHECK(qe_f32_bits(qe_fp8_decode(0xfc, QE_E5M2)) == 0xff800000u, "decode e5m2 fc is -inf");
	CHECK(qe_f32_bits(qe_fp8_decode(0x7f, QE_E4M3)) == 0x7fffffffu, "decode e4m3 7f is NaN 7fffffff");
	CHECK(qe_f32_bits(qe_fp8_decode(0xff, QE_E4M3)) == 0x7fffffffu, "decode e4m3 ff is NaN 7fffffff");
	CHECK(qe_f32_bits(qe_fp8_decode(0xfd, QE_E5M2)) == 0x7fffffffu, "decode e5m2 fd is NaN 7fffffff");
	CHECK(qe_fp8_max(QE_E4M3) == 448.0f && qe_fp8_max(QE_E5M2) == 57344.0f, "fp8 max values");

	/* Every non-NaN code survives decode -> encode (with and without saturation). */
	for (int fi = 0; fi < 2; fi++) {
		qe_dtype fmt = fi ? QE_E5M2 : QE_E4M3;
		for (int c = 0; c < 256; c++) {
			float v = qe_fp8_decode((uint8_t)c, fmt);
			if (isnan(v))
				continue;
			int back = qe_fp8_encode(v, fmt, 0);
			CHECK(back == c, "%s code %02x decodes to %.9g which encodes back to %02x", qe_dtype_name(fmt), c,
			      (double)v, back);
		}
	}
}

int main(void)
{
	char buf[4096] = "data/fp8-vectors.txt";
	spot_checks();
	const char *path = qe_test_shared_path("data/fp8-vectors.txt", buf, sizeof buf);
	if (path)
		check_file(path);
	else
		printf("SKIP: %s not found (set QE_SHARED_DIR); ran only the built-in spot checks\n", buf);
	return qe_test_done("fp8_test_fp8_vectors");
}
