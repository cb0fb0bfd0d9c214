/*
 * testutil.h - helpers every module's tests may use: a scratch folder removed
 * at exit, seeded test bytes, and whole-file read/write.  Header-only (static
 * functions) so each test stays one file; no library beyond libc, so a test
 * of one module links only that module's libraries at any optimization level
 * (the LMDB helpers are in store/store_testutil.h).
 */
#ifndef QE_TESTUTIL_H
#define QE_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tu_root[256];

static void tu_cleanup(void)
{
	char cmd[320];
	if (!tu_root[0] || getenv("QE_KEEP_TMP"))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tu_root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tu_root);
}

/* A fresh scratch folder for this test process; removed at exit (unless
 * QE_KEEP_TMP is set). */
__attribute__((unused)) static const char *tu_tmpdir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	snprintf(tu_root, sizeof(tu_root), "%s/qe_%s_XXXXXX", base && *base ? base : "/tmp", tag);
	if (!mkdtemp(tu_root)) {
		perror("mkdtemp");
		exit(2);
	}
	atexit(tu_cleanup);
	return tu_root;
}

/* splitmix64: seeded, reproducible test bytes. */
static uint64_t tu_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

__attribute__((unused)) static void tu_fill(void *buf, size_t n, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t s = seed;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = tu_next(&s);
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

/* Whole file into a malloc'd buffer; NULL when unreadable. */
__attribute__((unused)) static unsigned char *tu_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = n > 0 ? (size_t)n : 0;
	return buf;
}

__attribute__((unused)) static int tu_write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(buf, 1, len, f);
	return (fclose(f) == 0 && w == len) ? 0 : -1;
}

#endif
