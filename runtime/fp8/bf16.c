/*
 * bf16.c - float32 <-> bfloat16 (see bf16.h for the rules).
 *
 * Rounding to nearest even on the bits: add 0x7FFF plus the lowest kept bit
 * to the float32's bits and drop the lower half.  Below a tie the carry never
 * reaches bit 16, above it always does, and at a tie it does exactly when
 * the kept part is odd.  A carry out of the mantissa increments the exponent
 * field, which is the next binade's first value; out of the largest binade it
 * gives 0x7F80, inf, which is the RNE overflow.  The sum never leaves 32
 * bits (the largest non-NaN magnitude is 0x7F800000).  NaNs are set aside
 * first: rounding their payload could carry into the sign or turn them into
 * inf.
 *
 * An exhaustive run of __float2bfloat16_rn over all 2^32 inputs on an H200
 * (sm_90, CUDA 13) agreed with this on every non-NaN input and gave 0x7FFF
 * for each of the 2^24 - 2 NaNs; tests/fp8/test_bf16.c checks the rounding
 * against a formulation on doubles, and tests/backend/test_cuda_ops.c the
 * cuda cast against this function.
 *
 * Integer arithmetic, so nothing depends on the FPU's rounding mode or on how
 * the compiler treats float arithmetic.
 */
#include "runtime/fp8/bf16.h"

#include <string.h>

uint16_t qe_bf16_from_f32(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return QE_BF16_NAN;
	u += 0x7FFFu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float qe_bf16_to_f32(uint16_t code)
{
	uint32_t u = (uint32_t)code << 16;
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

float qe_bf16_round(float x)
{
	return qe_bf16_to_f32(qe_bf16_from_f32(x));
}
