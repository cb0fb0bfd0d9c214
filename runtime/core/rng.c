/*
 * rng.c - a keyed mixing function (the splitmix64 finalizer applied to
 * seed and counter) used as a counter-based generator.
 */
#include "runtime/core/rng.h"

#include <math.h>
#include <pthread.h>
#include <unistd.h>

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void qe_rng_init(qe_rng *r, uint64_t seed)
{
	r->seed = seed;
	r->counter = 0;
}

qe_rng qe_rng_derive(uint64_t seed, uint64_t stream)
{
	qe_rng r = { mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ULL)), 0 };
	return r;
}

uint64_t qe_rng_u64(qe_rng *r)
{
	uint64_t c = r->counter++;
	return mix64(mix64(r->seed) + c * 0x9e3779b97f4a7c15ULL);
}

float qe_rng_uniform(qe_rng *r)
{
	return (float)(qe_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t qe_rng_below(qe_rng *r, uint64_t n)
{
	/* Rejection keeps the draw unbiased; the loop almost never repeats. */
	uint64_t lim = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;
	do
		x = qe_rng_u64(r);
	while (x >= lim);
	return x % n;
}

float qe_rng_normal(qe_rng *r)
{
	double u1 = ((double)(qe_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
	double u2 = (double)(qe_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- filling large tensors ------------------------------------------------- */

/* A slice of a fill: its own generator positioned at the slice's first draw. */
typedef struct fill_part {
	qe_rng r;
	float *out;
	int64_t n;
	float scale;
} fill_part;

static void *fill_run(void *arg)
{
	fill_part *p = arg;
	for (int64_t k = 0; k < p->n; k++)
		p->out[k] = p->scale * qe_rng_normal(&p->r);
	return NULL;
}

#define FILL_MAX_THREADS 16
#define FILL_MIN_PER_THREAD ((int64_t)1 << 20)

void qe_rng_normal_fill(qe_rng *r, float *out, int64_t n, float scale)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int64_t want = n / FILL_MIN_PER_THREAD;
	int nt = (int)(want < 1 ? 1 : want > FILL_MAX_THREADS ? FILL_MAX_THREADS : want);
	if (cpus > 0 && nt > cpus)
		nt = (int)cpus;
	fill_part parts[FILL_MAX_THREADS];
	pthread_t tids[FILL_MAX_THREADS];
	int started[FILL_MAX_THREADS] = { 0 };
	int64_t per = n / nt, begin = 0;
	for (int t = 0; t < nt; t++) {
		int64_t len = t == nt - 1 ? n - begin : per;
		parts[t] = (fill_part){ { r->seed, r->counter + 2 * (uint64_t)begin }, out + begin, len, scale };
		begin += len;
	}
	for (int t = 1; t < nt; t++)
		started[t] = pthread_create(&tids[t], NULL, fill_run, &parts[t]) == 0;
	fill_run(&parts[0]);
	for (int t = 1; t < nt; t++) {
		if (started[t])
			pthread_join(tids[t], NULL);
		else
			fill_run(&parts[t]); /* no thread: the caller does that slice too */
	}
	r->counter += 2 * (uint64_t)n;
}
