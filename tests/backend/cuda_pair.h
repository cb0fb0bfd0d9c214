/*
 * cuda_pair.h - what the cuda backend tests share: the cpu and cuda backends
 * open side by side (K), buffers on either, copies, random inputs, and the
 * comparisons that print what they compared (within a bound, or byte for
 * byte, of host buffers or of device buffers fetched first).
 */
#ifndef QE_TEST_CUDA_PAIR_H
#define QE_TEST_CUDA_PAIR_H

#ifdef QE_WITH_CUDA

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bk_util.h"
#include "runtime/backend/cuda/cuda_backend.h"

typedef struct both {
	qe_backend *cb, *gb;
	const qe_backend_ops *co, *go;
	qe_stream *cs, *gs;
} both;

static both K;

static inline void *c_mem(size_t bytes)
{
	void *p = NULL;
	int rc = K.co->alloc(K.cb, bytes, &p);
	CHECK(rc == 0, "cpu alloc %zu: %s", bytes, qe_last_error());
	return p;
}

static inline void *g_mem(size_t bytes)
{
	void *p = NULL;
	int rc = K.go->alloc(K.gb, bytes, &p);
	CHECK(rc == 0, "cuda alloc %zu: %s", bytes, qe_last_error());
	return p;
}

static inline void up(void *dev, const void *host, size_t bytes)
{
	CHECK_OK(K.go->copy(K.gs, dev, host, bytes, QE_COPY_H2D));
}

static inline void down(void *host, const void *dev, size_t bytes)
{
	CHECK_OK(K.go->copy(K.gs, host, dev, bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(K.gs));
}

/* A cpu buffer holding host data and a cuda copy of it. */
static inline void *pair(const void *host, size_t bytes, void **dev)
{
	void *c = c_mem(bytes);
	*dev = g_mem(bytes);
	if (c && host)
		memcpy(c, host, bytes);
	if (*dev && host)
		up(*dev, host, bytes);
	return c;
}

static inline float *rnd(qe_rng *r, int64_t n, float sd)
{
	float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	fill_normal(x, n, r, sd);
	return x;
}

static inline double max_abs(const float *x, int64_t n)
{
	double m = 0;
	for (int64_t i = 0; i < n; i++)
		if (fabs(x[i]) > m)
			m = fabs(x[i]);
	return m;
}

/* max|got - ref| <= tol * max|ref| (1 when ref is all zero); prints the numbers. */
static inline void close_to(const char *what, const float *ref, const float *got, int64_t n, double tol)
{
	double mref = max_abs(ref, n), md = 0;
	int64_t at = -1;
	for (int64_t i = 0; i < n; i++) {
		double d = isnan(ref[i]) != isnan(got[i]) ? INFINITY : isnan(ref[i]) ? 0 : fabs((double)got[i] - ref[i]);
		if (d > md) {
			md = d;
			at = i;
		}
	}
	double bound = tol * (mref > 0 ? mref : 1.0);
	printf("  %-34s n=%-7lld max|diff| %.3g  max|ref| %.3g  rel %.3g  (bound %.0e)\n", what, (long long)n, md, mref,
	       mref > 0 ? md / mref : md, tol);
	CHECK(md <= bound, "%s: max|cuda-cpu| %.6g at %lld (cpu %.9g cuda %.9g) exceeds %.1e * max|cpu| %.6g", what, md,
	      (long long)at, at >= 0 ? ref[at] : 0.0, at >= 0 ? got[at] : 0.0, tol, mref);
}

static inline void same_bytes(const char *what, const void *ref, const void *got, size_t n)
{
	long off = bytes_diff(ref, got, n);
	printf("  %-34s %zu bytes %s\n", what, n, off < 0 ? "identical" : "DIFFER");
	CHECK(off < 0, "%s: cuda and cpu differ first at byte %ld of %zu", what, off, n);
}

/* A new main cuda stream, so that a failed op (sticky on its stream) does not hide the next case. */
static inline void fresh_stream(void)
{
	if (K.gs)
		K.go->stream_destroy(K.gs);
	K.gs = NULL;
	CHECK_OK(K.go->stream_create(K.gb, &K.gs));
}

/* Download n floats of a device buffer into a fresh host buffer. */
static inline float *fetch(const void *dev, size_t bytes)
{
	float *h = malloc(bytes ? bytes : 1);
	down(h, dev, bytes);
	return h;
}



/* nbytes of two device buffers, byte for byte (what names the pair). */
static inline void same_dev_bytes(const char *what, const void *a, const void *b, size_t nbytes)
{
	void *ha = fetch(a, nbytes), *hb = fetch(b, nbytes);
	same_bytes(what, ha, hb, nbytes);
	free(ha);
	free(hb);
}

/*
 * Open the cpu and cuda backends and a stream on each into K, and seed r
 * (QE_TEST_SEED overrides seed; printed).  1: ready; 0: no CUDA device
 * (SKIP printed); -1: a failure, recorded by CHECK.
 */
static inline int both_open(uint64_t seed, qe_rng *r)
{
	if (qe_cuda_device_count() < 1) {
		printf("SKIP: no CUDA device\n");
		return 0;
	}
	const char *env = getenv("QE_TEST_SEED");
	if (env)
		seed = strtoull(env, NULL, 0);
	printf("seed %llu\n", (unsigned long long)seed);
	qe_rng_init(r, seed);
	CHECK_OK(qe_backend_open("cpu", &K.cb));
	CHECK_OK(qe_backend_open("cuda", &K.gb));
	if (!K.cb || !K.gb)
		return -1;
	K.co = K.cb->ops;
	K.go = K.gb->ops;
	CHECK_OK(K.co->stream_create(K.cb, &K.cs));
	CHECK_OK(K.go->stream_create(K.gb, &K.gs));
	return K.cs && K.gs ? 1 : -1;
}

/* n floats of two device buffers, byte for byte */
static inline void same_dev(const char *what, const float *a, const float *b, int64_t n)
{
	same_dev_bytes(what, a, b, (size_t)n * 4);
}

#endif /* QE_WITH_CUDA */

#endif
