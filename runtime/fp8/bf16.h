/*
 * bf16.h - bfloat16 conversion, bit for bit as the H200 converts
 * (__float2bfloat16_rn, i.e. cvt.rn.bf16.f32 on sm_90).
 *
 * bf16 is the upper half of a float32: sign, the full 8-bit exponent, 7
 * mantissa bits.  It has float32's exponent range, so no value is too small
 * to keep its exponent and subnormals stay subnormals (nothing is flushed).
 * The rules, checked against all 2^32 float32 inputs on an H200
 * (see bf16.c):
 *
 *   - finite values round to nearest, ties to even, on the bf16 grid;
 *     subnormals included (the smallest ones round to +-0);
 *   - a finite value whose rounded magnitude exceeds the largest finite bf16
 *     (0x7F7F, 3.3895314e38) becomes +-inf: 0x7F7FFFFF rounds to 0x7F80.
 *     There is no saturation: bf16 has an infinity;
 *   - +-inf stay +-inf (0x7F80 / 0xFF80);
 *   - every NaN, whatever its sign, payload or quiet bit, becomes 0x7FFF
 *     (positive, quiet).  The hardware does that, so the cpu does too: a
 *     cast must give the same bytes on both backends.
 *
 * Widening is exact: every bf16 value is a float32 value (a NaN code widens
 * to the float32 with the same upper half, which is again a NaN).
 */
#ifndef QE_BF16_H
#define QE_BF16_H

#include <stdint.h>

/* The canonical NaN every NaN input becomes. */
#define QE_BF16_NAN 0x7FFFu

/* x rounded to bf16 (round to nearest even, overflow to inf, NaN -> QE_BF16_NAN). */
uint16_t qe_bf16_from_f32(float x);
/* The float32 of a bf16 code: its bits shifted into the upper half; exact. */
float qe_bf16_to_f32(uint16_t code);
/* The float32 nearest x that a bf16 holds: qe_bf16_to_f32(qe_bf16_from_f32(x)). */
float qe_bf16_round(float x);

#endif
