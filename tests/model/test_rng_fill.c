/*
 * test_rng_fill.c - the threaded normal fill used to initialize parameters
 * gives bitwise the values of the serial loop, and leaves the generator where
 * the loop would, for sizes below, at and above the threading threshold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/rng.h"
#include "tests/testlib.h"

int main(void)
{
	const int64_t sizes[] = { 0, 1, 7, (1 << 20) - 1, 1 << 20, (int64_t)5 * (1 << 20) + 3, (int64_t)33 << 20 };
	uint64_t seed = 20261129;
	printf("seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int64_t n = sizes[i];
		float *a = malloc((size_t)(n ? n : 1) * 4), *b = malloc((size_t)(n ? n : 1) * 4);
		CHECK(a && b, "out of memory for %lld floats", (long long)n);
		qe_rng r1 = qe_rng_derive(seed, (uint64_t)i), r2 = r1;
		qe_rng_u64(&r1); /* start mid-stream: the fill must honour the counter */
		qe_rng_u64(&r2);
		for (int64_t k = 0; k < n; k++)
			a[k] = 0.02f * qe_rng_normal(&r1);
		qe_rng_normal_fill(&r2, b, n, 0.02f);
		CHECK(memcmp(a, b, (size_t)n * 4) == 0, "n=%lld: fill differs from the serial loop", (long long)n);
		CHECK(r1.counter == r2.counter && r1.seed == r2.seed, "n=%lld: counter %llu, loop left %llu", (long long)n,
		      (unsigned long long)r2.counter, (unsigned long long)r1.counter);
		CHECK(qe_rng_u64(&r1) == qe_rng_u64(&r2), "n=%lld: next draw differs", (long long)n);
		free(a);
		free(b);
	}
	return qe_test_done("rng_fill");
}
