/*
 * copies.c - the catalog's record of replica copies (schema version 4).
 *
 * With --ckpt-replicas R a rank's chunks are also written into the stores of
 * R peer ranks on other hosts before its rows reach rank 0.  The tensor row
 * keeps naming the store its own rank wrote; every further store that holds
 * all of its chunks is one row of the copies table, added inside the same
 * durable commit transaction as the tensor rows.  Deleting a checkpoint
 * deletes its copies by cascade, so gc's referenced set (chunk hashes, store
 * independent) stays the truth for every copy.
 */
#include "catalog/catalog_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

int cat_ckpt_add_copy(cat *c, int64_t id, int stage, const char *name, const char *store_id)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!name || !store_id || !store_id[0])
		return qe_fail(QE_EINVAL, "catalog '%s': a copy needs a tensor name and a store id", c->path);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st = NULL;
	int64_t tid = -1;
	char *own = NULL;
	if (!(rc = cat_prepare(c, "SELECT id, store_id FROM tensors WHERE checkpoint_id = ? AND stage = ? AND name = ?",
			       &st, "find the tensor of a copy"))) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, stage);
		cat_bind_text(st, 3, name);
		int src = sqlite3_step(st);
		if (src == SQLITE_ROW) {
			tid = sqlite3_column_int64(st, 0);
			own = cat_col_strdup(st, 1);
		} else if (src != SQLITE_DONE) {
			rc = cat_sql_fail(c, src, "find the tensor of a copy");
		}
		sqlite3_finalize(st);
	}
	if (!rc && tid < 0)
		rc = qe_fail(QE_ENOTFOUND, "catalog '%s': checkpoint %lld has no tensor '%s' of stage %d to record a copy of",
			     c->path, (long long)id, name, stage);
	if (!rc && own && strcmp(own, store_id) == 0)
		rc = qe_fail(QE_EINVAL, "catalog '%s': store %s already holds tensor '%s' of stage %d of checkpoint %lld",
			     c->path, store_id, name, stage, (long long)id);
	free(own);
	if (!rc && !(rc = cat_prepare(c, "INSERT INTO copies(tensor_id, store_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
				      &st, "record a copy"))) {
		sqlite3_bind_int64(st, 1, tid);
		cat_bind_text(st, 2, store_id);
		int src = sqlite3_step(st);
		if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "record a copy");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_copies_drop_store_except(cat *c, const char *store_id, int64_t keep_id, int64_t *dropped)
{
	int rc = cat_check(c);
	if (dropped)
		*dropped = 0;
	if (rc)
		return rc;
	if (!store_id || !store_id[0])
		return qe_fail(QE_EINVAL, "catalog '%s': dropping copies needs a store id", c->path);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st = NULL;
	if (!(rc = cat_prepare(c,
			       "DELETE FROM copies WHERE store_id = ? AND tensor_id IN"
			       " (SELECT id FROM tensors WHERE checkpoint_id != ?)",
			       &st, "drop a store's older copies"))) {
		cat_bind_text(st, 1, store_id);
		sqlite3_bind_int64(st, 2, keep_id);
		int src = sqlite3_step(st);
		if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "drop a store's older copies");
		else if (dropped)
			*dropped = sqlite3_changes(c->db);
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

/* A read-only catalog of an older schema is read as it is: it has no copies table, so no copies. */
static int has_copies(cat *c)
{
	int v = 0;
	return cat_schema_version(c, &v) == QE_OK && v >= 4;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* One copy row: the tensor's row of prim (ctx), its store the copy's; a tensor gone since prim was read is skipped. */
static int copy_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	const cat_tensor_rows *prim = ctx;
	int64_t tid = sqlite3_column_int64(st, 0);
	const cat_tensor *p = NULL;
	for (size_t i = 0; i < prim->n && !p; i++)
		if (prim->rows[i].id == tid)
			p = &prim->rows[i];
	if (!p)
		return CAT_ROW_SKIP; /* the tensor went between the two reads: not a copy any more */
	cat_tensor *t = row;
	t->id = p->id;
	t->stage = p->stage;
	t->bytes = p->bytes;
	t->name = dup_or_null(p->name);
	t->dtype = dup_or_null(p->dtype);
	t->shape = dup_or_null(p->shape);
	t->kind = dup_or_null(p->kind);
	t->store_id = cat_col_strdup(st, 1);
	t->chunks = calloc(p->n_chunks + 1, sizeof(cat_chunk));
	if (!t->name || !t->dtype || !t->shape || !t->kind || !t->store_id || !t->chunks)
		return cat_nomem(c, "list copies");
	memcpy(t->chunks, p->chunks, p->n_chunks * sizeof(cat_chunk));
	t->n_chunks = p->n_chunks;
	return 0;
}

static const cat_row_shape copy_shape = { sizeof(cat_tensor), copy_fill, cat_tensor_release, "list copies" };

int cat_ckpt_copies(cat *c, int64_t id, cat_tensor_rows *out)
{
	memset(out, 0, sizeof(*out));
	cat_tensor_rows prim = { 0 };
	sqlite3_stmt *st = NULL;
	int rc = cat_check(c);
	if (rc || !has_copies(c))
		return rc;
	if ((rc = cat_ckpt_tensors(c, id, &prim)))
		return rc;
	if (!(rc = cat_prepare(c,
			       "SELECT c.tensor_id, c.store_id FROM copies c JOIN tensors t ON t.id = c.tensor_id"
			       " WHERE t.checkpoint_id = ? ORDER BY t.stage, t.name, c.store_id",
			       &st, copy_shape.what))) {
		sqlite3_bind_int64(st, 1, id);
		rc = cat_rows_read(c, st, &copy_shape, &prim, (void **)&out->rows, &out->n);
	}
	cat_tensor_rows_free(&prim);
	return rc;
}

int cat_ckpt_redundancy_of(cat *c, int64_t id, const char *prefix, int match, int *copies, int *hosts)
{
	*copies = *hosts = 0;
	sqlite3_stmt *st;
	int rc = cat_check(c);
	if (rc)
		return rc;
	/* every tensor of the checkpoint, with the selected stores that hold it (none counts 0) */
	char sql[1024];
	snprintf(sql, sizeof(sql), "%s"
		 " sel(tid, sid) AS (SELECT tid, sid FROM holders WHERE (substr(sid, 1, length(?2)) = ?2) = ?3),"
		 " per(n, h) AS (SELECT count(s.sid), count(DISTINCT coalesce(st.host, '?' || s.sid))"
		 "  FROM tensors t LEFT JOIN sel s ON s.tid = t.id LEFT JOIN stores st ON st.store_id = s.sid"
		 "  WHERE t.checkpoint_id = ?1 GROUP BY t.id)"
		 " SELECT coalesce(min(n), 0), coalesce(min(h), 0) FROM per",
		 has_copies(c) ? "WITH holders(tid, sid) AS ("
				 "  SELECT id, store_id FROM tensors WHERE checkpoint_id = ?1"
				 "  UNION SELECT c.tensor_id, c.store_id FROM copies c JOIN tensors t ON t.id = c.tensor_id"
				 "  WHERE t.checkpoint_id = ?1),"
			       : "WITH holders(tid, sid) AS (SELECT id, store_id FROM tensors WHERE checkpoint_id = ?1),");
	if ((rc = cat_prepare(c, sql, &st, "count the copies of a checkpoint")))
		return rc;
	sqlite3_bind_int64(st, 1, id);
	cat_bind_text(st, 2, prefix ? prefix : "");
	sqlite3_bind_int(st, 3, match ? 1 : 0);
	int src = sqlite3_step(st);
	if (src == SQLITE_ROW) {
		*copies = sqlite3_column_int(st, 0);
		*hosts = sqlite3_column_int(st, 1);
	} else {
		rc = cat_sql_fail(c, src, "count the copies of a checkpoint");
	}
	sqlite3_finalize(st);
	return rc;
}

int cat_ckpt_redundancy(cat *c, int64_t id, int *copies, int *hosts)
{
	return cat_ckpt_redundancy_of(c, id, "", 1, copies, hosts);
}

int cat_ckpt_move_tensor(cat *c, int64_t id, int stage, const char *name, const char *store_id)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!name || !store_id)
		return qe_fail(QE_EINVAL, "catalog '%s': moving a tensor needs its name and a store id", c->path);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st = NULL;
	if (!(rc = cat_prepare(c, "UPDATE tensors SET store_id = ? WHERE checkpoint_id = ? AND stage = ? AND name = ?", &st,
			       "move a tensor to another store"))) {
		cat_bind_text(st, 1, store_id);
		sqlite3_bind_int64(st, 2, id);
		sqlite3_bind_int(st, 3, stage);
		cat_bind_text(st, 4, name);
		int src = sqlite3_step(st);
		if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "move a tensor to another store");
		else if (sqlite3_changes(c->db) == 0)
			rc = qe_fail(QE_ENOTFOUND, "catalog '%s': checkpoint %lld has no tensor '%s' of stage %d to move",
				     c->path, (long long)id, name, stage);
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}
