/*
 * testlib.h - the tiny harness every C test uses: CHECK records a failure with
 * file, line and a message and keeps going; qe_test_done() prints a summary
 * and returns the process exit code (non-zero when anything failed).
 */
#ifndef QE_TESTLIB_H
#define QE_TESTLIB_H

#include <stdio.h>

extern int qe_test_failures;
extern int qe_test_checks;

void qe_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(cond, ...)                                             \
	do {                                                         \
		qe_test_checks++;                                    \
		if (!(cond))                                         \
			qe_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

/* CHECK that a status is QE_OK, printing qe_last_error() when not. */
#define CHECK_OK(expr)                                                                                      \
	do {                                                                                                \
		int rc_ = (expr);                                                                           \
		qe_test_checks++;                                                                           \
		if (rc_ != 0)                                                                               \
			qe_test_fail(__FILE__, __LINE__, "%s -> %s: %s", #expr, qe_errname(rc_), qe_last_error()); \
	} while (0)

/* Path of a file in the shared data folder; NULL when that folder is absent. */
const char *qe_test_shared_path(const char *name, char *buf, size_t len);
int qe_test_done(const char *name);

#endif
