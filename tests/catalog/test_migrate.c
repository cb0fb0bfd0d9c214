/*
 * test_migrate.c - schema versions and migrations.
 *  - a catalog created at version 1 (max_version) is migrated to the current
 *    version on the next open, keeping its rows; opening again changes
 *    nothing (idempotent); meta.schema_version mirrors user_version.
 *  - two processes opening a version-1 catalog at once both succeed and the
 *    migration runs once.
 *  - a newer version, another application's database and an empty database
 *    opened without create are refused, and the file is not modified.
 */
#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "testutil.h"
#include "testlib.h"

#include <sqlite3.h>
#include <sys/wait.h>

static int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t v = -1;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
	return v;
}

static int raw_exec(const char *path, const char *sql)
{
	sqlite3 *db;
	int rc = sqlite3_open(path, &db);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

static void make_v1(const char *path)
{
	cat_opts o = { .create = 1, .max_version = 1 };
	cat *c = NULL;
	int version = 0;
	CHECK_OK(cat_open_ex(path, &o, &c));
	if (!c)
		return;
	CHECK_OK(cat_schema_version(c, &version));
	CHECK(version == 1, "max_version 1 gave version %d", version);
	CHECK_OK(cat_run_create(c, "r", "{}"));
	int64_t id;
	cat_chunk ch = { { 1, 2, 3 }, 10 };
	CHECK_OK(cat_ckpt_begin(c, "r", 5, 5, "", "", "", &id));
	CHECK_OK(cat_ckpt_add_tensor(c, id, 0, "w", "f32", "[2]", 10, "param", &ch, 1));
	CHECK_OK(cat_ckpt_commit(c, id));
	cat_close(c);
	CHECK(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'tensor_chunks_hash'") == 0,
	      "version 1 already has the version 2 index");
}

/* Open must fail with want, naming the file, and leave it byte for byte. */
static void expect_refused(const char *path, int create, int want, const char *what)
{
	size_t n0, n1;
	unsigned char *before = tu_read_file(path, &n0);
	cat *c = NULL;
	int rc = cat_open(path, create, &c);
	CHECK(rc == want && !c, "%s: open gave %s, want %s", what, qe_errname(rc), qe_errname(want));
	CHECK(strstr(qe_last_error(), path) != NULL, "%s: message does not name the file: %s", what, qe_last_error());
	printf("%s: %s\n", what, qe_last_error());
	unsigned char *after = tu_read_file(path, &n1);
	CHECK(before && after && n0 == n1 && (n0 == 0 || memcmp(before, after, n0) == 0), "%s: file modified", what);
	cat_close(c);
	free(before);
	free(after);
}

int main(void)
{
	const char *dir = tu_tmpdir("cat_migrate");
	char p1[512], p2[512], p3[512], p4[512], p5[512];
	snprintf(p1, sizeof(p1), "%s/v1.db", dir);
	snprintf(p2, sizeof(p2), "%s/race.db", dir);
	snprintf(p3, sizeof(p3), "%s/newer.db", dir);
	snprintf(p4, sizeof(p4), "%s/foreign.db", dir);
	snprintf(p5, sizeof(p5), "%s/empty.db", dir);
	printf("folder %s\n", dir);

	/* 1 -> current, then idempotent */
	make_v1(p1);
	for (int round = 0; round < 3; round++) {
		cat *c = NULL;
		int version = 0;
		CHECK_OK(cat_open(p1, 0, &c));
		if (!c)
			break;
		CHECK_OK(cat_schema_version(c, &version));
		CHECK(version == CAT_SCHEMA_VERSION, "round %d: version %d", round, version);
		char *v = NULL;
		CHECK_OK(cat_meta_get(c, "schema_version", &v));
		CHECK(v && atoi(v) == CAT_SCHEMA_VERSION, "round %d: meta schema_version '%s'", round, v ? v : "");
		free(v);
		cat_ckpt row;
		CHECK_OK(cat_ckpt_latest_committed(c, "r", &row));
		CHECK(row.step == 5, "round %d: rows lost in migration", round);
		cat_tensor_rows tl;
		CHECK_OK(cat_ckpt_tensors(c, row.id, &tl));
		CHECK(tl.n == 1 && tl.rows[0].n_chunks == 1 && tl.rows[0].chunks[0].hash[2] == 3,
		      "round %d: tensor rows lost in migration", round);
		cat_tensor_rows_free(&tl);
		cat_ckpt_release(&row);
		cat_close(c);
		CHECK(raw_int(p1, "SELECT count(*) FROM sqlite_master WHERE name = 'tensor_chunks_hash'") == 1,
		      "round %d: the version 2 index is missing", round);
		CHECK(raw_int(p1, "PRAGMA application_id") == CAT_APPLICATION_ID, "application id");
		CHECK(raw_int(p1, "SELECT journal_mode = 'wal' FROM pragma_journal_mode") == 1, "not in WAL mode");
		CHECK(raw_int(p1, "SELECT count(*) FROM sqlite_master") > 10, "schema objects");
	}

	/* two processes migrate the same version-1 file at once */
	make_v1(p2);
	fflush(NULL);
	pid_t pids[2];
	for (int i = 0; i < 2; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			cat *c = NULL;
			int version = 0;
			int rc = cat_open(p2, 0, &c);
			if (!rc)
				rc = cat_schema_version(c, &version);
			if (rc)
				fprintf(stderr, "child %d: %s\n", i, qe_last_error());
			cat_close(c);
			_exit(rc == 0 && version == CAT_SCHEMA_VERSION ? 0 : 1);
		}
	}
	for (int i = 0; i < 2; i++) {
		int status = 0;
		waitpid(pids[i], &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "concurrent migration in child %d failed", i);
	}
	CHECK(raw_int(p2, "PRAGMA user_version") == CAT_SCHEMA_VERSION, "racing migration left version %lld",
	      (long long)raw_int(p2, "PRAGMA user_version"));

	/* a newer version */
	make_v1(p3);
	CHECK(raw_exec(p3, "PRAGMA user_version = 99") == SQLITE_OK, "set user_version");
	expect_refused(p3, 1, QE_EUNSUPPORTED, "newer schema");

	/* another application's database */
	CHECK(raw_exec(p4, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('hi')") ==
		      SQLITE_OK,
	      "make a foreign database");
	expect_refused(p4, 1, QE_ECATALOG, "foreign database");
	CHECK(raw_exec(p4, "PRAGMA application_id = 1234") == SQLITE_OK, "set application_id");
	expect_refused(p4, 1, QE_ECATALOG, "foreign application_id");

	/* an empty file is a new catalog only when asked to create */
	CHECK(tu_write_file(p5, "", 0) == 0, "make an empty file");
	expect_refused(p5, 0, QE_ECATALOG, "empty file without create");
	cat *c = NULL;
	CHECK_OK(cat_open(p5, 1, &c));
	cat_close(c);
	CHECK(raw_int(p5, "PRAGMA user_version") == CAT_SCHEMA_VERSION, "empty file with create not initialized");
	return qe_test_done("catalog_test_migrate");
}
