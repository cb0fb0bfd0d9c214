/*
 * rng.h - counter-based random numbers.
 *
 * The whole generator state is {seed, counter}: draw k is a pure function of
 * (seed, k), so the state checkpoints as 16 bytes and a stream can be split by
 * deriving seeds (qe_rng_derive) instead of sharing a sequence.
 */
#ifndef QE_RNG_H
#define QE_RNG_H

#include <stdint.h>

typedef struct qe_rng {
	uint64_t seed;
	uint64_t counter;
} qe_rng;

void qe_rng_init(qe_rng *r, uint64_t seed);
/* A generator for sub-stream `stream` of seed, independent of the parent's counter. */
qe_rng qe_rng_derive(uint64_t seed, uint64_t stream);
uint64_t qe_rng_u64(qe_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float qe_rng_uniform(qe_rng *r);
/* Uniform integer in [0, n); n > 0. */
uint64_t qe_rng_below(qe_rng *r, uint64_t n);
/* Standard normal (Box-Muller on two draws). */
float qe_rng_normal(qe_rng *r);

/*
 * out[k] = scale * qe_rng_normal(r) for k = 0..n-1, in order, leaving r as
 * that loop would (each normal takes two draws, so draw k is a pure function
 * of the counter and large fills split across threads with bitwise the same
 * result).  A thread that cannot be started leaves its slice to the caller.
 */
void qe_rng_normal_fill(qe_rng *r, float *out, int64_t n, float scale);

#endif
