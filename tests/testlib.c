/*
 * testlib.c - failure reporting for the C tests.
 */
#include "testlib.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

int qe_test_failures;
int qe_test_checks;

void qe_test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	qe_test_failures++;
	if (qe_test_failures > 50)
		return;
	fprintf(stderr, "FAIL %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *qe_test_shared_path(const char *name, char *buf, size_t len)
{
	const char *dir = getenv("QE_SHARED_DIR");
#ifdef QE_SHARED_DIR
	if (!dir)
		dir = QE_SHARED_DIR;
#endif
	if (!dir)
		return NULL;
	snprintf(buf, len, "%s/%s", dir, name);
	return access(buf, R_OK) == 0 ? buf : NULL;
}

int qe_test_done(const char *name)
{
	if (qe_test_failures) {
		fprintf(stderr, "%s: %d of %d checks FAILED\n", name, qe_test_failures, qe_test_checks);
		return 1;
	}
	printf("%s: all %d checks passed\n", name, qe_test_checks);
	return 0;
}
