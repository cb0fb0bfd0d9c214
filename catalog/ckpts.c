/*
 * ckpts.c - the catalog's checkpoint rows: a checkpoint's life (begin, its
 * shards and tensors and their chunk lists, sizes, commit, abort, delete),
 * the queries that read them back, and the chunks every checkpoint refers
 * to (gc's referenced set).
 *
 * Every writing call is one atomic unit (cat_tx_begin/cat_tx_end): its own
 * transaction, or a savepoint inside the caller's.  cat_ckpt_commit is the exception by design: it is
 * the commit point of a checkpoint, so it runs alone, with synchronous=FULL,
 * and returns only once the flip to 'committed' is on disk.
 */
#include "catalog/catalog_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- checkpoints: writing ---------------------------------------------------------- */

const char *cat_status_name(cat_status s)
{
	switch (s) {
	case CAT_PENDING:
		return "pending";
	case CAT_COMMITTED:
		return "committed";
	case CAT_ABORTED:
		return "aborted";
	}
	return "?";
}

static cat_status status_from(const unsigned char *t)
{
	if (t && strcmp((const char *)t, "committed") == 0)
		return CAT_COMMITTED;
	if (t && strcmp((const char *)t, "aborted") == 0)
		return CAT_ABORTED;
	return CAT_PENDING;
}

/* OUT *status and *step of checkpoint id; QE_ENOTFOUND when absent. */
static int ckpt_state(cat *c, int64_t id, cat_status *status, int64_t *step)
{
	sqlite3_stmt *st;
	int rc = cat_prepare(c, "SELECT status, step FROM checkpoints WHERE id = ?", &st, "read a checkpoint");
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	int src = cat_step(st);
	if (src == SQLITE_ROW) {
		*status = status_from(sqlite3_column_text(st, 0));
		*step = sqlite3_column_int64(st, 1);
	} else if (src == SQLITE_DONE) {
		rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no checkpoint %lld", c->path, (long long)id);
	} else {
		rc = cat_sql_fail(c, src, "read a checkpoint");
	}
	sqlite3_finalize(st);
	return rc;
}

/* QE_EINVAL unless checkpoint id exists and is pending. */
static int require_pending(cat *c, int64_t id, const char *what)
{
	cat_status s = CAT_PENDING;
	int64_t step = 0;
	int rc = ckpt_state(c, id, &s, &step);
	if (rc)
		return rc;
	if (s != CAT_PENDING)
		return qe_fail(QE_EINVAL, "catalog '%s': %s: checkpoint %lld (step %lld) is %s, not pending", c->path,
			       what, (long long)id, (long long)step, cat_status_name(s));
	return 0;
}

int cat_ckpt_begin(cat *c, const char *run_id, int64_t step, int64_t e_w, const char *topology,
		   const char *schedule, const char *recipe, int64_t *id)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!id || !run_id)
		return qe_fail(QE_EINVAL, "catalog '%s': begin checkpoint: NULL argument", c->path);
	if (step < 0 || e_w < 0)
		return qe_fail(QE_EINVAL, "catalog '%s': begin checkpoint: negative step %lld or e_W %lld", c->path,
			       (long long)step, (long long)e_w);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	rc = cat_prepare(c,
			 "INSERT INTO checkpoints(run_id, step, e_w, topology, schedule, recipe) VALUES (?, ?, ?, ?, ?, ?)",
			 &st, "begin a checkpoint");
	if (!rc) {
		cat_bind_text(st, 1, run_id);
		sqlite3_bind_int64(st, 2, step);
		sqlite3_bind_int64(st, 3, e_w);
		cat_bind_text(st, 4, topology);
		cat_bind_text(st, 5, schedule);
		cat_bind_text(st, 6, recipe);
		int src = cat_step(st);
		if (src == SQLITE_CONSTRAINT_FOREIGNKEY)
			rc = qe_fail(QE_ECATALOG, "catalog '%s': begin checkpoint of run '%s' step %lld: %s (no such run)",
				     c->path, run_id, (long long)step, sqlite3_errmsg(c->db));
		else if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "begin a checkpoint");
		else
			*id = sqlite3_last_insert_rowid(c->db);
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_ckpt_add_shard(cat *c, int64_t id, int stage, int rank, uint64_t bytes)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (stage < 0 || rank < 0 || bytes > INT64_MAX)
		return qe_fail(QE_EINVAL, "catalog '%s': shard of checkpoint %lld: bad stage %d, rank %d or size", c->path,
			       (long long)id, stage, rank);
	if ((rc = cat_tx_begin(c)))
		return rc;
	rc = require_pending(c, id, "add a shard");
	sqlite3_stmt *st;
	if (!rc && !(rc = cat_prepare(c, "INSERT OR REPLACE INTO shards(checkpoint_id, stage, rank, bytes) VALUES (?, ?, ?, ?)",
				      &st, "add a shard"))) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, stage);
		sqlite3_bind_int(st, 3, rank);
		sqlite3_bind_int64(st, 4, (int64_t)bytes);
		rc = cat_step_done(c, st, "add a shard");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_ckpt_add_tensor(cat *c, int64_t id, int stage, const char *name, const char *dtype, const char *shape,
			uint64_t bytes, const char *kind, const cat_chunk *chunks, size_t n_chunks)
{
	return cat_ckpt_add_tensor_in(c, id, "", stage, name, dtype, shape, bytes, kind, chunks, n_chunks);
}

int cat_ckpt_add_tensor_in(cat *c, int64_t id, const char *store_id, int stage, const char *name, const char *dtype,
			   const char *shape, uint64_t bytes, const char *kind, const cat_chunk *chunks,
			   size_t n_chunks)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!name || !*name || !kind || !*kind || stage < 0 || (n_chunks && !chunks) || bytes > INT64_MAX)
		return qe_fail(QE_EINVAL, "catalog '%s': tensor '%s' of checkpoint %lld: missing name or kind, bad stage",
			       c->path, name ? name : "", (long long)id);
	uint64_t total = 0;
	for (size_t i = 0; i < n_chunks; i++)
		total += chunks[i].size;
	if (total != bytes)
		return qe_fail(QE_EINVAL, "catalog '%s': tensor '%s' (stage %d): chunks cover %llu bytes, tensor has %llu",
			       c->path, name, stage, (unsigned long long)total, (unsigned long long)bytes);
	if ((rc = cat_tx_begin(c)))
		return rc;
	rc = require_pending(c, id, "add a tensor");
	sqlite3_stmt *st = NULL;
	if (!rc)
		rc = cat_prepare(c,
				 /* no store id: the column's default, so this also writes into a catalog being
				  * migrated from schema 2 (tests of migrations write at old versions) */
				 store_id && store_id[0]
					 ? "INSERT INTO tensors(checkpoint_id, stage, name, dtype, shape, bytes, kind, store_id)"
					   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
					 : "INSERT INTO tensors(checkpoint_id, stage, name, dtype, shape, bytes, kind)"
					   " VALUES (?, ?, ?, ?, ?, ?, ?)",
				 &st, "add a tensor");
	if (!rc) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, stage);
		cat_bind_text(st, 3, name);
		cat_bind_text(st, 4, dtype);
		cat_bind_text(st, 5, shape);
		sqlite3_bind_int64(st, 6, (int64_t)bytes);
		cat_bind_text(st, 7, kind);
		if (store_id && store_id[0])
			cat_bind_text(st, 8, store_id);
		int src = cat_step(st);
		if (src == SQLITE_CONSTRAINT_UNIQUE)
			rc = qe_fail(QE_EEXIST, "catalog '%s': tensor '%s' of stage %d is already in checkpoint %lld",
				     c->path, name, stage, (long long)id);
		else if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "add a tensor");
		sqlite3_finalize(st);
		st = NULL;
	}
	int64_t tid = sqlite3_last_insert_rowid(c->db);
	if (!rc && n_chunks)
		rc = cat_prepare(c, "INSERT INTO tensor_chunks(tensor_id, idx, hash, size) VALUES (?, ?, ?, ?)", &st,
				 "add a tensor's chunks");
	for (size_t i = 0; !rc && i < n_chunks; i++) {
		sqlite3_bind_int64(st, 1, tid);
		sqlite3_bind_int64(st, 2, (int64_t)i);
		sqlite3_bind_blob(st, 3, chunks[i].hash, 16, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, (int64_t)chunks[i].size);
		rc = cat_step_done(c, st, "add a tensor's chunks");
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	return cat_tx_end(c, rc);
}

int cat_ckpt_set_sizes(cat *c, int64_t id, uint64_t bytes, uint64_t runtime_state_bytes)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (bytes > INT64_MAX || runtime_state_bytes > INT64_MAX)
		return qe_fail(QE_EINVAL, "catalog '%s': checkpoint %lld: size out of range", c->path, (long long)id);
	if ((rc = cat_tx_begin(c)))
		return rc;
	rc = require_pending(c, id, "set sizes");
	sqlite3_stmt *st;
	if (!rc && !(rc = cat_prepare(c, "UPDATE checkpoints SET bytes = ?, runtime_state_bytes = ? WHERE id = ?", &st,
				      "set checkpoint sizes"))) {
		sqlite3_bind_int64(st, 1, (int64_t)bytes);
		sqlite3_bind_int64(st, 2, (int64_t)runtime_state_bytes);
		sqlite3_bind_int64(st, 3, id);
		rc = cat_step_done(c, st, "set checkpoint sizes");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_ckpt_commit(cat *c, int64_t id)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (c->in_txn == 1)
		return qe_fail(QE_EINVAL,
			       "catalog '%s': commit of checkpoint %lld inside a plain caller transaction; it must run "
			       "alone or in a durable one (cat_begin_durable)",
			       c->path, (long long)id);
	int inner = c->in_txn == CAT_TXN_DURABLE;
	/* The commit point must be on disk when we return (or, inside a durable
	 * transaction, when it commits); other writes may wait for the next WAL
	 * sync (synchronous=NORMAL). */
	if (inner)
		rc = cat_tx_begin(c);
	else if (!(rc = cat_exec(c, "PRAGMA synchronous = FULL", "set synchronous=FULL for the commit")) &&
		 (rc = cat_exec(c, "BEGIN IMMEDIATE", "begin the checkpoint commit")))
		goto out_sync;
	if (rc)
		return rc;
	cat_status s;
	int64_t step;
	rc = ckpt_state(c, id, &s, &step);
	if (!rc && s == CAT_ABORTED)
		rc = qe_fail(QE_EINVAL, "catalog '%s': checkpoint %lld (step %lld) was aborted; it cannot be committed",
			     c->path, (long long)id, (long long)step);
	if (!rc && s == CAT_PENDING) {
		sqlite3_stmt *st;
		/* an earlier committed checkpoint of this step gives way in the same transaction */
		rc = cat_prepare(c,
				 "UPDATE checkpoints SET status = 'aborted', note = 'superseded: step ' || ?2 || ' saved again'"
				 " WHERE status = 'committed' AND id <> ?1 AND step = ?2"
				 " AND run_id = (SELECT run_id FROM checkpoints WHERE id = ?1)",
				 &st, "supersede the previous checkpoint of this step");
		if (!rc) {
			sqlite3_bind_int64(st, 1, id);
			sqlite3_bind_int64(st, 2, step);
			rc = cat_step_done(c, st, "supersede the previous checkpoint of this step");
			if (!rc && sqlite3_changes(c->db) > 0)
				qe_log(QE_LOG_INFO, "catalog '%s': step %lld saved again: its earlier checkpoint is superseded",
				       c->path, (long long)step);
			sqlite3_finalize(st);
		}
		if (!rc)
			rc = cat_prepare(c,
					 "UPDATE checkpoints SET status = 'committed',"
					 " committed_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?",
					 &st, "commit the checkpoint");
		if (!rc) {
			sqlite3_bind_int64(st, 1, id);
			rc = cat_step_done(c, st, "commit the checkpoint");
			sqlite3_finalize(st);
		}
	}
	rc = cat_tx_end(c, rc);
	if (inner)
		return rc;
out_sync:;
	int rc2 = cat_exec(c, "PRAGMA synchronous = NORMAL", "restore synchronous=NORMAL");
	return rc ? rc : rc2;
}

int cat_ckpt_abort(cat *c, int64_t id, const char *reason)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if ((rc = cat_tx_begin(c)))
		return rc;
	cat_status s;
	int64_t step;
	rc = ckpt_state(c, id, &s, &step);
	if (!rc && s == CAT_COMMITTED)
		rc = qe_fail(QE_EINVAL, "catalog '%s': checkpoint %lld (step %lld) is committed; delete it instead of aborting",
			     c->path, (long long)id, (long long)step);
	if (!rc && s == CAT_PENDING) {
		sqlite3_stmt *st;
		if (!(rc = cat_prepare(c, "UPDATE checkpoints SET status = 'aborted', note = ? WHERE id = ?", &st,
				       "abort a checkpoint"))) {
			cat_bind_text(st, 1, reason ? reason : "aborted");
			sqlite3_bind_int64(st, 2, id);
			rc = cat_step_done(c, st, "abort a checkpoint");
			sqlite3_finalize(st);
		}
	}
	return cat_tx_end(c, rc);
}

int cat_ckpt_delete(cat *c, int64_t id)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	if (!(rc = cat_prepare(c, "DELETE FROM checkpoints WHERE id = ?", &st, "delete a checkpoint"))) {
		sqlite3_bind_int64(st, 1, id);
		rc = cat_step_done(c, st, "delete a checkpoint");
		if (!rc && sqlite3_changes(c->db) == 0)
			rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no checkpoint %lld to delete", c->path, (long long)id);
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

/* --- checkpoints: reading ---------------------------------------------------------- */

#define CKPT_COLS                                                                                   \
	"SELECT id, run_id, step, e_w, status, created, committed_at, bytes, runtime_state_bytes, " \
	"topology, schedule, recipe, note FROM checkpoints "

static int ckpt_from_row(cat *c, sqlite3_stmt *st, cat_ckpt *r)
{
	r->id = sqlite3_column_int64(st, 0);
	r->run_id = cat_col_strdup(st, 1);
	r->step = sqlite3_column_int64(st, 2);
	r->e_w = sqlite3_column_int64(st, 3);
	r->status = status_from(sqlite3_column_text(st, 4));
	r->created = cat_col_strdup(st, 5);
	r->committed_at = cat_col_strdup(st, 6);
	r->bytes = (uint64_t)sqlite3_column_int64(st, 7);
	r->runtime_state_bytes = (uint64_t)sqlite3_column_int64(st, 8);
	r->topology = cat_col_strdup(st, 9);
	r->schedule = cat_col_strdup(st, 10);
	r->recipe = cat_col_strdup(st, 11);
	r->note = cat_col_strdup(st, 12);
	if (!r->run_id || !r->created || !r->committed_at || !r->topology || !r->schedule || !r->recipe || !r->note) {
		cat_ckpt_release(r);
		return cat_nomem(c, "read a checkpoint");
	}
	return 0;
}

void cat_ckpt_release(cat_ckpt *r)
{
	if (!r)
		return;
	free(r->run_id);
	free(r->created);
	free(r->committed_at);
	free(r->topology);
	free(r->schedule);
	free(r->recipe);
	free(r->note);
	memset(r, 0, sizeof(*r));
}

/* Run a checkpoint query expected to give one row. */
static int ckpt_one(cat *c, const char *sql, const char *run_id, int64_t arg, cat_ckpt *out, const char *notfound)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!out)
		return qe_fail(QE_EINVAL, "catalog '%s': NULL output row", c->path);
	memset(out, 0, sizeof(*out));
	sqlite3_stmt *st;
	if ((rc = cat_prepare(c, sql, &st, "read a checkpoint")))
		return rc;
	int n = 1;
	if (run_id)
		cat_bind_text(st, n++, run_id);
	if (arg >= 0)
		sqlite3_bind_int64(st, n, arg);
	int src = cat_step(st);
	if (src == SQLITE_ROW)
		rc = ckpt_from_row(c, st, out);
	else if (src == SQLITE_DONE)
		rc = qe_fail(QE_ENOTFOUND, "catalog '%s': %s", c->path, notfound);
	else
		rc = cat_sql_fail(c, src, "read a checkpoint");
	sqlite3_finalize(st);
	return rc;
}

int cat_ckpt_latest_committed(cat *c, const char *run_id, cat_ckpt *out)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "run '%s' has no committed checkpoint", run_id ? run_id : "");
	return ckpt_one(c, CKPT_COLS "WHERE run_id = ? AND status = 'committed' ORDER BY step DESC, id DESC LIMIT 1",
			run_id ? run_id : "", -1, out, msg);
}

int cat_ckpt_get(cat *c, const char *run_id, int64_t step, cat_ckpt *out)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "run '%s' has no committed checkpoint at step %lld", run_id ? run_id : "",
		 (long long)step);
	if (step < 0)
		return qe_fail(QE_ENOTFOUND, "catalog '%s': %s", c ? c->path : "", msg);
	return ckpt_one(c, CKPT_COLS "WHERE run_id = ? AND step = ? AND status = 'committed'", run_id ? run_id : "",
			step, out, msg);
}

int cat_ckpt_get_id(cat *c, int64_t id, cat_ckpt *out)
{
	char msg[128];
	snprintf(msg, sizeof(msg), "no checkpoint %lld", (long long)id);
	if (id < 0)
		return qe_fail(QE_ENOTFOUND, "catalog '%s': %s", c ? c->path : "", msg);
	return ckpt_one(c, CKPT_COLS "WHERE id = ?", NULL, id, out, msg);
}

/* --- the lists: one shape each (catalog_int.h) ------------------------------------------ */

static int ckpt_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	(void)ctx;
	return ckpt_from_row(c, st, row);
}

static void ckpt_release(void *row)
{
	cat_ckpt_release(row);
}

static const cat_row_shape ckpt_shape = { sizeof(cat_ckpt), ckpt_fill, ckpt_release, "list checkpoints" };

int cat_ckpt_list(cat *c, const char *run_id, cat_ckpt_rows *out)
{
	sqlite3_stmt *st;
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n, CKPT_COLS "WHERE run_id = ? ORDER BY step, id", &st,
			    ckpt_shape.what);
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	return cat_rows_read(c, st, &ckpt_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_ckpt_rows_free(cat_ckpt_rows *l)
{
	if (l)
		cat_rows_free(&ckpt_shape, (void **)&l->rows, &l->n);
}

/* The capacity cat_grow_rows gave an array that holds n rows. */
static size_t grown_cap(size_t n)
{
	size_t cap = n ? 16 : 0;
	while (cap < n)
		cap *= 2;
	return cap;
}

/*
 * One row of the tensors-with-chunks join: a tensor's first row fills a new
 * tensor, each further one adds a chunk to prev.  ctx: the checkpoint id.
 */
static int tensor_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	cat_tensor *cur = row, *p = prev;
	int64_t tid = sqlite3_column_int64(st, 0);
	if (p && p->id == tid) {
		cur = p;
	} else {
		cur->id = tid;
		cur->stage = sqlite3_column_int(st, 1);
		cur->name = cat_col_strdup(st, 2);
		cur->dtype = cat_col_strdup(st, 3);
		cur->shape = cat_col_strdup(st, 4);
		cur->bytes = (uint64_t)sqlite3_column_int64(st, 5);
		cur->kind = cat_col_strdup(st, 6);
		cur->store_id = cat_col_strdup(st, 10);
		if (!cur->name || !cur->dtype || !cur->shape || !cur->kind || !cur->store_id)
			return cat_nomem(c, "list tensors");
	}
	int kept = cur == p ? CAT_ROW_SKIP : 0;
	if (sqlite3_column_type(st, 7) == SQLITE_NULL)
		return kept; /* a tensor without chunks (zero bytes) */
	if ((int64_t)cur->n_chunks != sqlite3_column_int64(st, 7) || sqlite3_column_bytes(st, 8) != 16)
		return qe_fail(QE_ECORRUPT, "catalog '%s': tensor '%s' of checkpoint %lld: chunk %zu is misnumbered or its hash is not 16 bytes",
			       c->path, cur->name, (long long)*(const int64_t *)ctx, cur->n_chunks);
	size_t ccap = grown_cap(cur->n_chunks);
	if (cat_grow_rows((void **)&cur->chunks, &ccap, cur->n_chunks, sizeof(*cur->chunks)))
		return cat_nomem(c, "list tensor chunks");
	cat_chunk *ch = &cur->chunks[cur->n_chunks++];
	memcpy(ch->hash, sqlite3_column_blob(st, 8), 16);
	ch->size = (uint64_t)sqlite3_column_int64(st, 9);
	return kept;
}

void cat_tensor_release(void *row)
{
	cat_tensor *t = row;
	free(t->name);
	free(t->dtype);
	free(t->shape);
	free(t->kind);
	free(t->store_id);
	free(t->chunks);
}

static const cat_row_shape tensor_shape = { sizeof(cat_tensor), tensor_fill, cat_tensor_release, "list tensors" };

int cat_ckpt_tensors(cat *c, int64_t id, cat_tensor_rows *out)
{
	sqlite3_stmt *st;
	/* one statement, so tensors and chunks come from one snapshot */
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT t.id, t.stage, t.name, t.dtype, t.shape, t.bytes, t.kind, c.idx, c.hash, c.size,"
			    " t.store_id"
			    " FROM tensors t LEFT JOIN tensor_chunks c ON c.tensor_id = t.id"
			    " WHERE t.checkpoint_id = ? ORDER BY t.stage, t.name, c.idx",
			    &st, tensor_shape.what);
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	return cat_rows_read(c, st, &tensor_shape, &id, (void **)&out->rows, &out->n);
}

void cat_tensor_rows_free(cat_tensor_rows *l)
{
	if (l)
		cat_rows_free(&tensor_shape, (void **)&l->rows, &l->n);
}

static int shard_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)c;
	(void)prev;
	(void)ctx;
	cat_shard *s = row;
	s->stage = sqlite3_column_int(st, 0);
	s->rank = sqlite3_column_int(st, 1);
	s->bytes = (uint64_t)sqlite3_column_int64(st, 2);
	return 0;
}

static const cat_row_shape shard_shape = { sizeof(cat_shard), shard_fill, NULL, "list shards" };

int cat_ckpt_shards(cat *c, int64_t id, cat_shard_rows *out)
{
	sqlite3_stmt *st;
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT stage, rank, bytes FROM shards WHERE checkpoint_id = ? ORDER BY stage", &st,
			    shard_shape.what);
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	return cat_rows_read(c, st, &shard_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_shard_rows_free(cat_shard_rows *l)
{
	if (l)
		cat_rows_free(&shard_shape, (void **)&l->rows, &l->n);
}

static int chunk_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	(void)ctx;
	cat_chunk *ch = row;
	if (sqlite3_column_bytes(st, 0) != 16)
		return qe_fail(QE_ECORRUPT, "catalog '%s': a chunk hash is not 16 bytes", c->path);
	memcpy(ch->hash, sqlite3_column_blob(st, 0), 16);
	ch->size = (uint64_t)sqlite3_column_int64(st, 1);
	return 0;
}

static const cat_row_shape chunk_shape = { sizeof(cat_chunk), chunk_fill, NULL, "list referenced chunks" };

int cat_referenced_chunks(cat *c, cat_chunk_cb cb, void *ctx)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!cb)
		return qe_fail(QE_EINVAL, "catalog '%s': referenced chunks: NULL callback", c->path);
	sqlite3_stmt *st;
	if ((rc = cat_prepare(c, "SELECT hash, max(size) FROM tensor_chunks GROUP BY hash", &st, chunk_shape.what)))
		return rc;
	cat_chunk *all = NULL;
	size_t n = 0;
	rc = cat_rows_read(c, st, &chunk_shape, NULL, (void **)&all, &n);
	for (size_t i = 0; !rc && i < n; i++)
		rc = cb(ctx, all[i].hash, all[i].size);
	free(all);
	return rc;
}
