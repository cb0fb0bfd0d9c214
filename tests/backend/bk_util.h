/*
 * bk_util.h - helpers shared by the backend tests: an opened cpu backend with
 * one stream, seeded random buffers, and byte comparison that says where two
 * buffers first differ.
 */
#ifndef QE_BK_UTIL_H
#define QE_BK_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/backend/backend.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"
#include "testlib.h"

typedef struct bk {
	qe_backend *b;
	const qe_backend_ops *o;
	qe_stream *s;
} bk;

static inline int bk_open(bk *k)
{
	int rc = qe_backend_open("cpu", &k->b);
	if (rc)
		return rc;
	k->o = k->b->ops;
	return k->o->stream_create(k->b, &k->s);
}

static inline void bk_close(bk *k)
{
	if (k->s)
		k->o->stream_destroy(k->s);
	qe_backend_close(k->b);
}

/* Backend memory for n floats (zeroed); NULL only on a failed allocation, which CHECK records. */
static inline float *bk_f32(bk *k, int64_t n)
{
	void *p = NULL;
	int rc = k->o->alloc(k->b, (size_t)n * sizeof(float), &p);
	CHECK(rc == 0, "alloc %lld floats: %s", (long long)n, qe_last_error());
	return p;
}

static inline void *bk_bytes(bk *k, size_t n)
{
	void *p = NULL;
	int rc = k->o->alloc(k->b, n, &p);
	CHECK(rc == 0, "alloc %zu bytes: %s", n, qe_last_error());
	return p;
}

static inline void fill_normal(float *x, int64_t n, qe_rng *r, float sd)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = qe_rng_normal(r) * sd;
}

static inline void fill_uniform_int(float *x, int64_t n, qe_rng *r, int lo, int hi)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(lo + (int)qe_rng_below(r, (uint64_t)(hi - lo + 1)));
}

/* -1 when equal, else the first differing byte offset. */
static inline long bytes_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return (long)i;
	return -1;
}

#define CHECK_BYTES(a, b, n, what)                                                                         \
	do {                                                                                               \
		long off_ = bytes_diff((a), (b), (n));                                                     \
		CHECK(off_ < 0, "%s: buffers differ first at byte %ld of %zu", (what), off_, (size_t)(n)); \
	} while (0)

/*
 * attn_decode's bound between two fp32 evaluations that sum in different
 * orders (or one and the exact value), head h of q [H], k, v [T, H]:
 * each score is a D-term dot product within D 2^-24 S of the exact one
 * (S = max over t of sum_i |q_i k_ti| / sqrt(D)), so two of them differ by
 * ds = 2 D 2^-24 S; a probability's relative error is then within c = 2 ds
 * (the score and the max subtracted) + (T + 16) 2^-22 (each side's sum of
 * T exponentials, exp's own ulps, the division), and an output within
 * (c + T 2^-23) max|v| (p's errors, then each side's T-term sum).  OUT:
 * *c_rel for the probabilities (|dp| <= c_rel p), the return value for the
 * outputs of that head.
 */
static inline double attn_decode_bound(const float *q, const float *k, const float *v, int64_t T, int64_t H, int nh,
				       int h, double *c_rel)
{
	int64_t D = H / nh;
	double S = 0, maxv = 0;
	for (int64_t t = 0; t < T; t++) {
		double a = 0;
		for (int64_t i = 0; i < D; i++) {
			a += fabs((double)q[h * D + i] * k[t * H + h * D + i]);
			double av = fabs((double)v[t * H + h * D + i]);
			maxv = av > maxv ? av : maxv;
		}
		S = a > S ? a : S;
	}
	S /= sqrt((double)(D > 0 ? D : 1));
	double ds = 2.0 * (double)D * 0x1p-24 * S;
	*c_rel = 2.0 * ds + (double)(T + 16) * 0x1p-22;
	return (*c_rel + (double)T * 0x1p-23) * maxv;
}

#endif
