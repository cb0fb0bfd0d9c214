/*
 * comm_test_util.h - helpers shared by the comm tests: open a comm from the
 * launcher's variables with short timeouts (a broken test must fail in
 * seconds, never hang), deterministic payloads, and a rank-side verdict.
 *
 * Rank functions run in forked children: they CHECK as usual and return
 * non-zero when any check failed, which the launcher reports per rank.
 */
#ifndef QE_COMM_TEST_UTIL_H
#define QE_COMM_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/launch_vars.h"
#include "runtime/core/status.h"
#include "testlib.h"

/* Timeouts used by the tests: generous for a loaded 2-core box, short enough to never hang. */
#define TU_OPEN_MS 15000
#define TU_OP_MS 20000

static inline int64_t tu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void tu_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/*
 * The tests stand in for cli, which reads the launcher's variables once and
 * hands them to the runtime in memory (runtime/comm/launch_vars.h): tu_setenv
 * sets a variable (NULL: unsets it) and, for one of the launcher's, the
 * runtime's copy too.  A rank forked by the launcher finds its RANK, ... in
 * qe_launch_var, not in its environment.
 */
static inline void tu_setenv(const char *name, const char *value)
{
	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
	for (int i = 0; i < qe_launch_nvars; i++)
		if (!strcmp(qe_launch_var_names[i], name))
			qe_launch_var_set(name, value);
}

/* Open the comm of this child; on failure print why and return NULL. */
static inline qe_comm *tu_open(int op_timeout_ms)
{
	qe_dist_env env;
	qe_comm *c = NULL;
	int rc = qe_dist_env_from_environ(&env);
	if (rc == 0) {
		env.timeout_ms = op_timeout_ms;
		rc = qe_comm_open(&env, TU_OPEN_MS, &c);
	}
	CHECK(rc == 0, "rank %s: open -> %s: %s", getenv("RANK"), qe_errname(rc), qe_last_error());
	return c;
}

/* Child verdict: reset the inherited counters first, return this at the end. */
static inline void tu_child_begin(void)
{
	qe_test_failures = 0;
	qe_test_checks = 0;
}

static inline int tu_child_end(void)
{
	return qe_test_failures ? 1 : 0;
}

/* Deterministic bytes for (seed, index): splitmix64. */
static inline uint64_t tu_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline void tu_fill(unsigned char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = tu_mix(seed * 0x100000001b3ull + i);
		for (size_t k = 0; k < 8 && i + k < n; k++)
			p[i + k] = (unsigned char)(v >> (8 * k));
	}
}

/* Index of the first differing byte, or -1. */
static inline long tu_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return (long)i;
	return -1;
}

#endif
