/*
 * test_badfile.c - files that are not healthy catalogs are refused with an
 * error naming them, and are not modified (bytes compared before and after;
 * no journal files left behind):
 *  - random bytes, a text file, 50 bytes of a real catalog (less than the
 *    100-byte header), a real catalog truncated to half;
 *  - a catalog with a damaged table page: PRAGMA quick_check at open finds it;
 *  - a folder, a missing file.
 */
#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "testutil.h"
#include "testlib.h"

#define SEED 0x5eedca03ull

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void expect_refused(const char *path, const cat_opts *o, int want, const char *what)
{
	size_t n0, n1;
	char wal[600], shm[600];
	snprintf(wal, sizeof(wal), "%s-wal", path);
	snprintf(shm, sizeof(shm), "%s-shm", path);
	unsigned char *before = tu_read_file(path, &n0);
	cat *c = NULL;
	int rc = cat_open_ex(path, o, &c);
	CHECK(rc == want && !c, "%s: open gave %s, want %s", what, qe_errname(rc), qe_errname(want));
	CHECK(strstr(qe_last_error(), path) != NULL, "%s: message does not name the file: %s", what, qe_last_error());
	printf("%s: %s\n", what, qe_last_error());
	unsigned char *after = tu_read_file(path, &n1);
	CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0, "%s: file modified (%zu -> %zu bytes)",
	      what, n0, n1);
	CHECK(!exists(wal) && !exists(shm), "%s: journal files left behind", what);
	cat_close(c);
	free(before);
	free(after);
}

/* A healthy catalog with enough rows to span many pages; closed (WAL folded in). */
static void make_catalog(const char *path)
{
	cat *c = NULL;
	CHECK_OK(cat_open(path, 1, &c));
	if (!c)
		return;
	CHECK_OK(cat_run_create(c, "r", "{\"model\":\"tiny\"}"));
	int64_t id;
	CHECK_OK(cat_ckpt_begin(c, "r", 1, 1, "pp=1", "ref", "", &id));
	CHECK_OK(cat_begin(c));
	for (int t = 0; t < 400; t++) {
		char name[64];
		cat_chunk ch[4];
		for (int i = 0; i < 4; i++) {
			tu_fill(ch[i].hash, 16, SEED + (uint64_t)t * 4 + (uint64_t)i);
			ch[i].size = 100;
		}
		snprintf(name, sizeof(name), "blocks.%d.some_rather_long_parameter_name.weight", t);
		CHECK_OK(cat_ckpt_add_tensor(c, id, t % 4, name, "f32", "[10,10]", 400, "param", ch, 4));
	}
	CHECK_OK(cat_commit(c));
	CHECK_OK(cat_ckpt_commit(c, id));
	cat_close(c);
}

int main(void)
{
	const char *dir = tu_tmpdir("cat_bad");
	char p[6][512];
	const char *names[6] = { "random.db", "text.db", "short.db", "half.db", "damaged.db", "good.db" };
	for (int i = 0; i < 6; i++)
		snprintf(p[i], sizeof(p[i]), "%s/%s", dir, names[i]);
	printf("seed 0x%llx, folder %s\n", (unsigned long long)SEED, dir);
	cat_opts create = { .create = 1 }, plain = { 0 }, checked = { .quick_check = 1 };

	unsigned char junk[8192];
	tu_fill(junk, sizeof(junk), SEED);
	CHECK(tu_write_file(p[0], junk, sizeof(junk)) == 0, "write random file");
	expect_refused(p[0], &create, QE_ECORRUPT, "random bytes");
	const char *text = "step,loss\n1,5.5\n2,5.25\n";
	CHECK(tu_write_file(p[1], text, strlen(text)) == 0, "write text file");
	expect_refused(p[1], &plain, QE_ECORRUPT, "text file");

	make_catalog(p[5]);
	size_t n;
	unsigned char *good = tu_read_file(p[5], &n);
	CHECK(good && n > 16384, "catalog is only %zu bytes", n);
	if (good && n > 16384) {
		tu_write_file(p[2], good, 50);
		expect_refused(p[2], &create, QE_ECORRUPT, "50 bytes of a catalog");
		tu_write_file(p[3], good, n / 2);
		expect_refused(p[3], &create, QE_ECORRUPT, "catalog truncated to half");

		/* garble most of one page in the middle (not page 1, the header) */
		size_t page = 4096, victim = (n / page) / 2;
		unsigned char *bad = malloc(n);
		memcpy(bad, good, n);
		tu_fill(bad + victim * page + 8, page - 16, SEED + 1);
		tu_write_file(p[4], bad, n);
		expect_refused(p[4], &checked, QE_ECORRUPT, "damaged page with quick_check");
		free(bad);
	}
	free(good);

	/* the healthy one still opens, with the check */
	cat *c = NULL;
	CHECK_OK(cat_open_ex(p[5], &checked, &c));
	cat_close(c);

	/* a folder; a missing file */
	c = NULL;
	int rc = cat_open(dir, 1, &c);
	CHECK(rc == QE_EINVAL && !c && strstr(qe_last_error(), dir), "folder gave %s: %s", qe_errname(rc),
	      qe_last_error());
	char missing[600];
	snprintf(missing, sizeof(missing), "%s/nope.db", dir);
	rc = cat_open(missing, 0, &c);
	CHECK(rc == QE_ENOTFOUND && !exists(missing), "missing file gave %s (created: %d)", qe_errname(rc),
	      exists(missing));
	return qe_test_done("catalog_test_badfile");
}
