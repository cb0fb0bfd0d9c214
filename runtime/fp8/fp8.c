/*
 * fp8.c - E4M3 and E5M2 encode/decode, bit for bit as the H200 converts.
 *
 * The cpu backend is the reference the CUDA path is compared against, so the
 * conversion here must agree with __nv_cvt_float_to_fp8 on every float, not
 * just on "ordinary" ones.  The rules, all checked against the hardware's own
 * vectors (/work/shared/data/fp8-vectors.txt, tests/fp8/test_fp8_vectors.c):
 *
 *   - round to nearest, ties to even, on the FP8 grid including subnormals;
 *     values below half the smallest subnormal become a signed zero;
 *   - a NaN input, whatever its sign or payload, becomes 0x7F (the positive
 *     canonical NaN of both formats);
 *   - a finite input whose rounded magnitude exceeds the max finite value,
 *     and +-inf, become +-max with saturation (SATFINITE); without it they
 *     become +-NaN (E4M3 has no infinity: 0x7F/0xFF) or +-inf (E5M2: 0x7C/0xFC).
 *     "Rounded" matters: 464 is the tie between 448 and the would-be 480 and
 *     rounds to even, i.e. to 448, so it is not an overflow even without
 *     saturation; 61440 in E5M2 rounds to even 65536 and so overflows;
 *   - decoding a NaN code gives the float 0x7FFFFFFF, as the hardware does.
 *
 * The rounding is done on integers so that it does not depend on the FPU's
 * rounding mode or on how the compiler treats float arithmetic.
 */
#include "runtime/fp8/fp8.h"

#include <math.h>
#include <string.h>

/* The parameters of one FP8 format. */
typedef struct fp8_fmt {
	int mbits;       /* mantissa bits */
	int bias;        /* exponent bias */
	int max_code;    /* largest finite magnitude code */
	int ovf_code;    /* what an overflow becomes without saturation */
	int has_inf;     /* E5M2: exponent field all ones, mantissa 0 is inf */
} fp8_fmt;

static const fp8_fmt E4M3 = { 3, 7, 0x7E, 0x7F, 0 };
static const fp8_fmt E5M2 = { 2, 15, 0x7B, 0x7C, 1 };

#define FP8_NAN 0x7F

static const fp8_fmt *fmt_of(qe_dtype fmt)
{
	if (fmt == QE_E4M3)
		return &E4M3;
	if (fmt == QE_E5M2)
		return &E5M2;
	return NULL;
}

uint8_t qe_fp8_encode(float x, qe_dtype fmt, int saturate)
{
	const fp8_fmt *f = fmt_of(fmt);
	if (!f)
		return FP8_NAN; /* not an FP8 format: a value nobody mistakes for data */

	uint32_t bits = qe_f32_bits(x);
	uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
	uint32_t a = bits & 0x7FFFFFFFu;

	if (a > 0x7F800000u)
		return FP8_NAN;
	if (a == 0x7F800000u)
		return sign | (uint8_t)(saturate ? f->max_code : f->ovf_code);
	if (a == 0)
		return sign;

	/* |x| = m * 2^(e - 23) with m the 24-bit significand. */
	int fexp = (int)(a >> 23);
	uint32_t m = a & 0x7FFFFFu;
	int e;
	if (fexp == 0) {
		e = -126; /* float subnormal: no implicit bit */
	} else {
		e = fexp - 127;
		m |= 0x800000u;
	}

	/*
	 * The FP8 quantum at this magnitude is 2^(E - mbits), with E the value's
	 * exponent clamped to the smallest normal exponent (below it the grid is
	 * the uniform subnormal one).  q = round(|x| / quantum) then holds the
	 * FP8 significand, implicit bit included.
	 */
	int emin = 1 - f->bias;
	int E = e;
	if (fexp == 0 || E < emin)
		E = emin;
	/* m * 2^(e-23) / 2^(E-mbits) = m >> shift, shift = E - mbits - e + 23 >= 20 */
	int shift = E - f->mbits - e + 23;
	uint32_t q;
	if (shift >= 26) {
		q = 0; /* m < 2^24, so |x|/quantum < 1/4: rounds to zero */
	} else {
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		q = m >> shift;
		if (rem > half || (rem == half && (q & 1)))
			q++;
	}
	if (q == 0)
		return sign;
	if (q >= (2u << f->mbits)) { /* rounding carried into the next binade */
		q >>= 1;
		E++;
	}

	long code;
	if (q < (1u << f->mbits))
		code = (long)q; /* subnormal (only possible at E == emin) */
	else
		code = ((long)(E + f->bias) << f->mbits) | (long)(q - (1u << f->mbits));
	if (code > f->max_code)
		return sign | (uint8_t)(saturate ? f->max_code : f->ovf_code);
	return sign | (uint8_t)code;
}

float qe_fp8_decode(uint8_t code, qe_dtype fmt)
{
	const fp8_fmt *f = fmt_of(fmt);
	if (!f)
		return qe_f32_from_bits(0x7FFFFFFFu);

	int neg = code & 0x80;
	int mag = code & 0x7F;
	int ef = mag >> f->mbits;
	int mf = mag & ((1 << f->mbits) - 1);
	int eall = (1 << (7 - f->mbits)) - 1;

	if (f->has_inf) {
		if (ef == eall)
			return mf ? qe_f32_from_bits(0x7FFFFFFFu) : qe_f32_from_bits(neg ? 0xFF800000u : 0x7F800000u);
	} else if (mag == 0x7F) {
		return qe_f32_from_bits(0x7FFFFFFFu);
	}
	float v;
	if (ef == 0)
		v = ldexpf((float)mf, 1 - f->bias - f->mbits);
	else
		v = ldexpf((float)((1 << f->mbits) | mf), ef - f->bias - f->mbits);
	return neg ? -v : v;
}

float qe_fp8_max(qe_dtype fmt)
{
	if (fmt == QE_E4M3)
		return 448.0f;
	if (fmt == QE_E5M2)
		return 57344.0f;
	return qe_f32_from_bits(0x7FFFFFFFu);
}
