/*
 * test_copies.c - replica copies in the catalog (schema version 4).
 *  - a version-3 catalog (a per-rank-store run without replicas) migrates to
 *    version 4 keeping its tensors, stores and their chunk lists; before
 *    the migration, read-only readers see no copies and one copy per tensor;
 *  - copies recorded inside a durable commit transaction are listed with the
 *    tensor's chunks and the copy's store; the tensor's own store and an
 *    unknown tensor are refused; recording a copy twice keeps one;
 *  - cat_ckpt_redundancy counts the fewest stores and hosts of any tensor;
 *  - deleting the checkpoint deletes its copies (cascade).
 */
#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "testutil.h"
#include "testlib.h"

#include <sqlite3.h>
#include <string.h>

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

/* CHECK that a call fails with exactly code. */
#define CHECK_ERR(expr, code)                                                                                   \
	do {                                                                                                    \
		int rc_ = (expr);                                                                               \
		CHECK(rc_ == (code), "%s -> %s, expected %s", #expr, qe_errname(rc_), qe_errname(code));         \
	} while (0)

int main(void)
{
	const char *dir = tu_tmpdir("cat_copies");
	char path[512];
	snprintf(path, sizeof(path), "%s/catalog.db", dir);

	/* a version-3 catalog: two ranks' stores on two hosts, one tensor each */
	cat_opts o = { .create = 1, .max_version = 3 };
	cat *c = NULL;
	int64_t id = 0;
	cat_chunk ch[2] = { { { 1, 2, 3 }, 6 }, { { 4, 5, 6 }, 4 } };
	CHECK_OK(cat_open_ex(path, &o, &c));
	if (!c)
		return qe_test_done("catalog_test_copies");
	int version = 0;
	CHECK_OK(cat_schema_version(c, &version));
	CHECK(version == 3, "max_version 3 gave version %d", version);
	CHECK_OK(cat_run_create(c, "r", "{}"));
	CHECK_OK(cat_store_put(c, "s0", "r", 0, "hostA", "/run/stores/rank-0"));
	CHECK_OK(cat_store_put(c, "s1", "r", 1, "hostB", "/run/stores/rank-1"));
	CHECK_OK(cat_ckpt_begin(c, "r", 3, 3, "", "", "", &id));
	CHECK_OK(cat_ckpt_add_tensor_in(c, id, "s0", 0, "params", "f32", "[2]", 10, "param", ch, 2));
	CHECK_OK(cat_ckpt_add_tensor_in(c, id, "s1", 1, "params", "f32", "[2]", 10, "param", ch, 2));
	CHECK_OK(cat_ckpt_commit(c, id));
	int copies = -1, hosts = -1;
	CHECK_OK(cat_ckpt_redundancy(c, id, &copies, &hosts));
	CHECK(copies == 1 && hosts == 1, "version 3: %d copies on %d hosts, expected 1 on 1", copies, hosts);
	cat_tensor_rows cp = { 0 };
	CHECK_OK(cat_ckpt_copies(c, id, &cp));
	CHECK(cp.n == 0, "version 3 lists %zu copies", cp.n);
	cat_tensor_rows_free(&cp);
	cat_close(c);

	/* open: migrated to the current version, rows kept */
	CHECK_OK(cat_open(path, 0, &c));
	if (!c)
		return qe_test_done("catalog_test_copies");
	CHECK_OK(cat_schema_version(c, &version));
	CHECK(version == CAT_SCHEMA_VERSION && version >= 4, "migrated to version %d", version);
	cat_tensor_rows tr = { 0 };
	CHECK_OK(cat_ckpt_tensors(c, id, &tr));
	CHECK(tr.n == 2 && tr.rows[0].n_chunks == 2 && strcmp(tr.rows[1].store_id, "s1") == 0,
	      "tensor rows lost in the migration (%zu rows)", tr.n);
	cat_tensor_rows_free(&tr);

	/* a new checkpoint with replicas: each rank's tensor also in the other's store */
	int64_t id2 = 0;
	CHECK_OK(cat_ckpt_begin(c, "r", 6, 6, "", "", "", &id2));
	CHECK_OK(cat_begin_durable(c));
	CHECK_OK(cat_ckpt_add_tensor_in(c, id2, "s0", 0, "params", "f32", "[2]", 10, "param", ch, 2));
	CHECK_OK(cat_ckpt_add_tensor_in(c, id2, "s1", 1, "params", "f32", "[1]", 4, "param", ch + 1, 1));
	CHECK_OK(cat_ckpt_add_copy(c, id2, 0, "params", "s1"));
	CHECK_OK(cat_ckpt_add_copy(c, id2, 0, "params", "s1")); /* twice: one row */
	CHECK_ERR(cat_ckpt_add_copy(c, id2, 1, "params", "s1"), QE_EINVAL);
	CHECK_ERR(cat_ckpt_add_copy(c, id2, 2, "params", "s0"), QE_ENOTFOUND);
	CHECK_OK(cat_ckpt_redundancy(c, id2, &copies, &hosts));
	CHECK(copies == 1 && hosts == 1, "stage 1 has no copy yet: %d copies on %d hosts", copies, hosts);
	CHECK_OK(cat_ckpt_add_copy(c, id2, 1, "params", "s0"));
	CHECK_OK(cat_ckpt_set_sizes(c, id2, 14, 0));
	CHECK_OK(cat_ckpt_commit(c, id2));
	CHECK_OK(cat_commit(c));
	CHECK_OK(cat_ckpt_redundancy(c, id2, &copies, &hosts));
	CHECK(copies == 2 && hosts == 2, "replicated: %d copies on %d hosts, expected 2 on 2", copies, hosts);
	CHECK_OK(cat_ckpt_copies(c, id2, &cp));
	CHECK(cp.n == 2, "%zu copies listed, expected 2", cp.n);
	if (cp.n == 2) {
		CHECK(cp.rows[0].stage == 0 && strcmp(cp.rows[0].store_id, "s1") == 0 && cp.rows[0].n_chunks == 2 &&
			      memcmp(cp.rows[0].chunks[1].hash, ch[1].hash, 16) == 0,
		      "copy 0: stage %d in '%s' with %zu chunks", cp.rows[0].stage, cp.rows[0].store_id, cp.rows[0].n_chunks);
		CHECK(cp.rows[1].stage == 1 && strcmp(cp.rows[1].store_id, "s0") == 0 && cp.rows[1].n_chunks == 1,
		      "copy 1: stage %d in '%s'", cp.rows[1].stage, cp.rows[1].store_id);
	}
	cat_tensor_rows_free(&cp);
	CHECK_OK(cat_ckpt_delete(c, id2));
	cat_close(c);
	CHECK(raw_int(path, "SELECT count(*) FROM copies") == 0, "deleting the checkpoint left its copies");
	CHECK(raw_int(path, "PRAGMA user_version") == CAT_SCHEMA_VERSION, "user_version");
	return qe_test_done("catalog_test_copies");
}
