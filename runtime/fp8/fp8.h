/*
 * fp8.h - E4M3/E5M2 formats and the delayed-scaling recipe (DESIGN.md section 4).
 *
 * Encoding follows the H200's conversion instructions bit for bit: round to
 * nearest even, subnormals, NaN, and either saturation to the max finite
 * value (SATFINITE, what TransformerEngine uses) or not.  The role meta of one
 * linear layer is stored as plain float arrays so that both backends and the
 * checkpoint can treat it as a typed array:
 *
 *   role block = [ amax_history[0..L-1] | scale | scale_inv ]   (L + 2 floats)
 *
 * amax_history[0] is the current (not yet rolled) amax.
 */
#ifndef QE_FP8_H
#define QE_FP8_H

#include <stdint.h>
#include <string.h>

#include "runtime/core/tensor.h"

/* The bits of a float32, and the float32 of some bits (codes are worked out on the bits). */
static inline uint32_t qe_f32_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static inline float qe_f32_from_bits(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

/* Encode x into the FP8 format fmt (QE_E4M3 or QE_E5M2). */
uint8_t qe_fp8_encode(float x, qe_dtype fmt, int saturate);
/* Decode an FP8 code; exact (every FP8 value is a float32 value). */
float qe_fp8_decode(uint8_t code, qe_dtype fmt);
/* Largest finite value: 448 for E4M3, 57344 for E5M2. */
float qe_fp8_max(qe_dtype fmt);

typedef enum qe_fp8_format { QE_FP8_HYBRID = 0, QE_FP8_E4M3_ONLY = 1 } qe_fp8_format;
typedef enum qe_amax_algo { QE_AMAX_MAX = 0, QE_AMAX_MOST_RECENT = 1 } qe_amax_algo;
typedef enum qe_fp8_role { QE_ROLE_INPUT = 0, QE_ROLE_WEIGHT = 1, QE_ROLE_GRAD_OUTPUT = 2, QE_ROLE_COUNT } qe_fp8_role;

typedef struct qe_fp8_recipe {
	qe_fp8_format format; /* HYBRID: forward E4M3, backward E5M2 */
	int margin;           /* scale = (fp8_max / amax) / 2^margin */
	int history_len;      /* L >= 1 */
	qe_amax_algo algo;
} qe_fp8_recipe;

/* TE defaults: HYBRID, margin 0, L = 1024, algo max. */
qe_fp8_recipe qe_fp8_recipe_default(void);
/* QE_OK, or QE_EINVAL with a message naming the bad field. */
int qe_fp8_recipe_check(const qe_fp8_recipe *r);
/* The storage format of a role under the recipe. */
qe_dtype qe_fp8_role_dtype(const qe_fp8_recipe *r, qe_fp8_role role);
const char *qe_fp8_role_name(qe_fp8_role role);
int qe_fp8_format_parse(const char *s, qe_fp8_format *out);
int qe_amax_algo_parse(const char *s, qe_amax_algo *out);
const char *qe_fp8_format_name(qe_fp8_format f);
const char *qe_amax_algo_name(qe_amax_algo a);

/* Floats in one role block. */
static inline int qe_fp8_role_floats(int history_len)
{
	return history_len + 2;
}

/* Set a role block to its initial state: history zeros, scale 1, scale_inv 1. */
void qe_fp8_role_init(float *block, int history_len);

/*
 * The scale for an amax: (fp8_max / amax) / 2^margin, with an infinite
 * result replaced by FLT_MAX.  Returns `fallback` when amax is not finite or
 * not > 0.
 */
float qe_fp8_scale_for_amax(float amax, float fp8_max, int margin, float fallback);

/*
 * Update and roll one role block at the end of an action (DESIGN.md 4):
 * if history[0] == 0, nothing is cast since the last update: do nothing.
 * Otherwise amax = max(history) or history[0]; if finite and > 0 set scale
 * and scale_inv; then roll new[i] = old[i+1], new[L-1] = old[0], new[0] = 0.
 */
void qe_fp8_role_update(float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r);

#endif
