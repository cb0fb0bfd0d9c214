/*
 * queries.c - the catalog's rows: runs, checkpoints and their tensors and
 * chunk lists, traces, losses, remote copies.
 *
 * Every writing call is one atomic unit (cat_tx_begin/cat_tx_end): its own
 * transaction, or a savepoint inside the caller's.  cat_ckpt_commit is the
 * exception by design: it is the commit point of a checkpoint, so it runs
 * alone, with synchronous=FULL, and returns only once the flip to
 * 'committed' is on disk.
 */
#include "catalog/catalog_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Step a statement that returns no rows. */
static int step_done(cat *c, sqlite3_stmt *st, const char *what)
{
	int src = cat_step(st);
	return src == SQLITE_DONE ? 0 : cat_sql_fail(c, src, what);
}

static int nomem(cat *c, const char *what)
{
	return qe_fail(QE_ENOMEM, "catalog '%s': %s: out of memory", c->path, what);
}

/* Grow an array of elem-sized rows to hold n+1. */
static int grow(void **rows, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? 2 * *cap : 16;
	void *p = qe_realloc(*rows, ncap * elem);
	if (!p)
		return -1;
	memset((char *)p + *cap * elem, 0, (ncap - *cap) * elem);
	*rows = p;
	*cap = ncap;
	return 0;
}

/*
 * The start of a query that fills a row array: check c, empty the array
 * (*rows, *n) and prepare sql; the caller binds its key.  The array is left
 * as it was when c itself is unusable, else empty.
 */
static int rows_begin(cat *c, void **rows, size_t *n, const char *sql, sqlite3_stmt **st, const char *what)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	*n = 0;
	*rows = NULL;
	return cat_prepare(c, sql, st, what);
}

/* Its end: src, the last step's answer, fails the query unless rc already did; st is finalized. */
static int rows_end(cat *c, sqlite3_stmt *st, int rc, int src, const char *what)
{
	if (!rc && src != SQLITE_DONE)
		rc = cat_sql_fail(c, src, what);
	sqlite3_finalize(st);
	return rc;
}

/* --- runs -------------------------------------------------------------------------- */

int cat_run_create(cat *c, const char *run_id, const char *config_json)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!run_id || !*run_id)
		return qe_fail(QE_EINVAL, "catalog '%s': empty run id", c->path);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st = NULL;
	rc = cat_prepare(c, "INSERT INTO runs(run_id, config_json) VALUES (?, ?)", &st, "add a run");
	if (!rc) {
		cat_bind_text(st, 1, run_id);
		cat_bind_text(st, 2, config_json ? config_json : "{}");
		int src = cat_step(st);
		if (src == SQLITE_CONSTRAINT_UNIQUE)
			rc = qe_fail(QE_EEXIST, "catalog '%s': run '%s' already exists", c->path, run_id);
		else if (src == SQLITE_CONSTRAINT_CHECK)
			rc = qe_fail(QE_EINVAL, "catalog '%s': run '%s': the configuration is not valid JSON", c->path,
				     run_id);
		else if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "add a run");
		sqlite3_finalize(st);
	}
	if (!rc)
		rc = cat_prepare(c, "UPDATE meta SET value = ? WHERE key = 'run_id' AND value = ''", &st,
				 "record the catalog's run");
	if (!rc) {
		cat_bind_text(st, 1, run_id);
		rc = step_done(c, st, "record the catalog's run");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_run_restart(cat *c, const char *run_id, const char *config_json, int64_t *dropped)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (dropped)
		*dropped = 0;
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st = NULL;
	int64_t committed = 0;
	rc = cat_prepare(c, "SELECT (SELECT count(*) FROM runs WHERE run_id = ?1), "
			    "(SELECT count(*) FROM checkpoints WHERE run_id = ?1 AND status = 'committed')",
			 &st, "count a run's committed checkpoints");
	if (!rc) {
		cat_bind_text(st, 1, run_id);
		int src = cat_step(st);
		if (src != SQLITE_ROW)
			rc = cat_sql_fail(c, src, "count a run's committed checkpoints");
		else if (sqlite3_column_int64(st, 0) == 0)
			rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no run '%s'", c->path, run_id ? run_id : "");
		else if ((committed = sqlite3_column_int64(st, 1)) > 0)
			rc = qe_fail(QE_EEXIST, "catalog '%s': run '%s' has %lld committed checkpoint%s: it cannot start over",
				     c->path, run_id, (long long)committed, committed == 1 ? "" : "s");
		sqlite3_finalize(st);
	}
	static const char *const drops[] = { "DELETE FROM checkpoints WHERE run_id = ?", "DELETE FROM traces WHERE run_id = ?",
					     "DELETE FROM losses WHERE run_id = ?" };
	for (int i = 0; i < 3 && !rc; i++) {
		if ((rc = cat_prepare(c, drops[i], &st, "drop the rows of a run that starts over")))
			break;
		cat_bind_text(st, 1, run_id);
		rc = step_done(c, st, "drop the rows of a run that starts over");
		if (!rc && i == 0 && dropped)
			*dropped = sqlite3_changes(c->db);
		sqlite3_finalize(st);
	}
	if (!rc && !(rc = cat_prepare(c, "UPDATE runs SET config_json = ? WHERE run_id = ?", &st, "replace a run's configuration"))) {
		cat_bind_text(st, 1, config_json ? config_json : "{}");
		cat_bind_text(st, 2, run_id);
		int src = cat_step(st);
		if (src == SQLITE_CONSTRAINT_CHECK)
			rc = qe_fail(QE_EINVAL, "catalog '%s': run '%s': the configuration is not valid JSON", c->path, run_id);
		else if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "replace a run's configuration");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_run_get(cat *c, const char *run_id, cat_run *out)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	sqlite3_stmt *st;
	if ((rc = cat_prepare(c, "SELECT run_id, created, config_json FROM runs WHERE run_id = ?", &st, "read a run")))
		return rc;
	cat_bind_text(st, 1, run_id);
	int src = cat_step(st);
	if (src == SQLITE_ROW) {
		out->run_id = cat_col_strdup(st, 0);
		out->created = cat_col_strdup(st, 1);
		out->config_json = cat_col_strdup(st, 2);
		if (!out->run_id || !out->created || !out->config_json) {
			cat_run_release(out);
			rc = nomem(c, "read a run");
		}
	} else if (src == SQLITE_DONE) {
		rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no run '%s'", c->path, run_id ? run_id : "");
	} else {
		rc = cat_sql_fail(c, src, "read a run");
	}
	sqlite3_finalize(st);
	return rc;
}

void cat_run_release(cat_run *r)
{
	if (!r)
		return;
	free(r->run_id);
	free(r->created);
	free(r->config_json);
	memset(r, 0, sizeof(*r));
}

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
		rc = step_done(c, st, "add a shard");
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
		rc = step_done(c, st, "add a tensor's chunks");
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
		rc = step_done(c, st, "set checkpoint sizes");
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
				 "UPDATE checkpoints SET status = 'aborted', note = 'superseded by checkpoint ' || ?1"
				 " WHERE status = 'committed' AND id <> ?1 AND step = ?2"
				 " AND run_id = (SELECT run_id FROM checkpoints WHERE id = ?1)",
				 &st, "supersede the previous checkpoint of this step");
		if (!rc) {
			sqlite3_bind_int64(st, 1, id);
			sqlite3_bind_int64(st, 2, step);
			rc = step_done(c, st, "supersede the previous checkpoint of this step");
			if (!rc && sqlite3_changes(c->db) > 0)
				qe_log(QE_LOG_INFO, "catalog '%s': checkpoint %lld supersedes the committed one of step %lld",
				       c->path, (long long)id, (long long)step);
			sqlite3_finalize(st);
		}
		if (!rc)
			rc = cat_prepare(c,
					 "UPDATE checkpoints SET status = 'committed',"
					 " committed_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?",
					 &st, "commit the checkpoint");
		if (!rc) {
			sqlite3_bind_int64(st, 1, id);
			rc = step_done(c, st, "commit the checkpoint");
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
			rc = step_done(c, st, "abort a checkpoint");
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
		rc = step_done(c, st, "delete a checkpoint");
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
		return nomem(c, "read a checkpoint");
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

int cat_ckpt_list(cat *c, const char *run_id, cat_ckpt_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n, CKPT_COLS "WHERE run_id = ? ORDER BY step, id", &st,
			    "list checkpoints");
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while (!rc && (src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows)))
			rc = nomem(c, "list checkpoints");
		else if (!(rc = ckpt_from_row(c, st, &out->rows[out->n])))
			out->n++;
	}
	rc = rows_end(c, st, rc, src, "list checkpoints");
	if (rc)
		cat_ckpt_rows_free(out);
	return rc;
}

void cat_ckpt_rows_free(cat_ckpt_rows *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		cat_ckpt_release(&l->rows[i]);
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

int cat_ckpt_tensors(cat *c, int64_t id, cat_tensor_rows *out)
{
	sqlite3_stmt *st;
	/* one statement, so tensors and chunks come from one snapshot */
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT t.id, t.stage, t.name, t.dtype, t.shape, t.bytes, t.kind, c.idx, c.hash, c.size,"
			    " t.store_id"
			    " FROM tensors t LEFT JOIN tensor_chunks c ON c.tensor_id = t.id"
			    " WHERE t.checkpoint_id = ? ORDER BY t.stage, t.name, c.idx",
			    &st, "list tensors");
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	size_t cap = 0, ccap = 0;
	int src = SQLITE_DONE;
	cat_tensor *cur = NULL;
	while (!rc && (src = cat_step(st)) == SQLITE_ROW) {
		int64_t tid = sqlite3_column_int64(st, 0);
		if (!cur || cur->id != tid) {
			if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
				rc = nomem(c, "list tensors");
				break;
			}
			cur = &out->rows[out->n++];
			ccap = 0;
			cur->id = tid;
			cur->stage = sqlite3_column_int(st, 1);
			cur->name = cat_col_strdup(st, 2);
			cur->dtype = cat_col_strdup(st, 3);
			cur->shape = cat_col_strdup(st, 4);
			cur->bytes = (uint64_t)sqlite3_column_int64(st, 5);
			cur->kind = cat_col_strdup(st, 6);
			cur->store_id = cat_col_strdup(st, 10);
			if (!cur->name || !cur->dtype || !cur->shape || !cur->kind || !cur->store_id) {
				rc = nomem(c, "list tensors");
				break;
			}
		}
		if (sqlite3_column_type(st, 7) == SQLITE_NULL)
			continue; /* a tensor without chunks (zero bytes) */
		if ((int64_t)cur->n_chunks != sqlite3_column_int64(st, 7) || sqlite3_column_bytes(st, 8) != 16) {
			rc = qe_fail(QE_ECORRUPT, "catalog '%s': tensor '%s' of checkpoint %lld: chunk %zu is misnumbered or its hash is not 16 bytes",
				     c->path, cur->name, (long long)id, cur->n_chunks);
			break;
		}
		if (grow((void **)&cur->chunks, &ccap, cur->n_chunks, sizeof(*cur->chunks))) {
			rc = nomem(c, "list tensor chunks");
			break;
		}
		cat_chunk *ch = &cur->chunks[cur->n_chunks++];
		memcpy(ch->hash, sqlite3_column_blob(st, 8), 16);
		ch->size = (uint64_t)sqlite3_column_int64(st, 9);
	}
	rc = rows_end(c, st, rc, src, "list tensors");
	if (rc)
		cat_tensor_rows_free(out);
	return rc;
}

void cat_tensor_rows_free(cat_tensor_rows *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		cat_tensor *t = &l->rows[i];
		free(t->name);
		free(t->dtype);
		free(t->shape);
		free(t->kind);
		free(t->store_id);
		free(t->chunks);
	}
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

int cat_ckpt_shards(cat *c, int64_t id, cat_shard_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT stage, rank, bytes FROM shards WHERE checkpoint_id = ? ORDER BY stage", &st, "list shards");
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while (!rc && (src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
			rc = nomem(c, "list shards");
			break;
		}
		cat_shard *s = &out->rows[out->n++];
		s->stage = sqlite3_column_int(st, 0);
		s->rank = sqlite3_column_int(st, 1);
		s->bytes = (uint64_t)sqlite3_column_int64(st, 2);
	}
	rc = rows_end(c, st, rc, src, "list shards");
	if (rc)
		cat_shard_rows_free(out);
	return rc;
}

void cat_shard_rows_free(cat_shard_rows *l)
{
	if (!l)
		return;
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

int cat_referenced_chunks(cat *c, cat_chunk_cb cb, void *ctx)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!cb)
		return qe_fail(QE_EINVAL, "catalog '%s': referenced chunks: NULL callback", c->path);
	sqlite3_stmt *st;
	if ((rc = cat_prepare(c, "SELECT hash, max(size) FROM tensor_chunks GROUP BY hash", &st,
			      "list referenced chunks")))
		return rc;
	cat_chunk *all = NULL;
	size_t n = 0, cap = 0;
	int src = SQLITE_DONE;
	while ((src = cat_step(st)) == SQLITE_ROW) {
		if (sqlite3_column_bytes(st, 0) != 16) {
			rc = qe_fail(QE_ECORRUPT, "catalog '%s': a chunk hash is not 16 bytes", c->path);
			break;
		}
		if (grow((void **)&all, &cap, n, sizeof(*all))) {
			rc = nomem(c, "list referenced chunks");
			break;
		}
		memcpy(all[n].hash, sqlite3_column_blob(st, 0), 16);
		all[n].size = (uint64_t)sqlite3_column_int64(st, 1);
		n++;
	}
	rc = rows_end(c, st, rc, src, "list referenced chunks");
	for (size_t i = 0; !rc && i < n; i++)
		rc = cb(ctx, all[i].hash, all[i].size);
	free(all);
	return rc;
}

/* --- traces and losses --------------------------------------------------------------- */

/* Binds row i of a multi-row put to st (the run id is parameter 1, bound by put_rows). */
typedef void (*bind_row_fn)(sqlite3_stmt *st, const void *rows, size_t i);

/*
 * Insert n rows of a run in one transaction with one prepared statement:
 * run_id is bound as parameter 1, bind the rest of row i.  what names the
 * operation in errors ("write traces").
 */
static int put_rows(cat *c, const char *run_id, const void *rows, size_t n, const char *sql, bind_row_fn bind,
		    const char *what)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (n && !rows)
		return qe_fail(QE_EINVAL, "catalog '%s': %s: NULL rows", c->path, what);
	if (!n)
		return 0;
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	if (!(rc = cat_prepare(c, sql, &st, what))) {
		for (size_t i = 0; !rc && i < n; i++) {
			cat_bind_text(st, 1, run_id);
			bind(st, rows, i);
			rc = step_done(c, st, what);
			sqlite3_reset(st);
		}
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

static void bind_trace(sqlite3_stmt *st, const void *rows, size_t i)
{
	const cat_trace *t = (const cat_trace *)rows + i;
	sqlite3_bind_int64(st, 2, t->step);
	sqlite3_bind_int(st, 3, t->stage);
	cat_bind_text(st, 4, t->category);
	sqlite3_bind_int64(st, 5, (int64_t)t->fingerprint);
}

int cat_trace_put(cat *c, const char *run_id, const cat_trace *rows, size_t n)
{
	return put_rows(c, run_id, rows, n,
			"INSERT OR REPLACE INTO traces(run_id, step, stage, category, fingerprint) VALUES (?, ?, ?, ?, ?)",
			bind_trace, "write traces");
}

int cat_trace_get(cat *c, const char *run_id, cat_trace_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT step, stage, category, fingerprint FROM traces WHERE run_id = ?"
			    " ORDER BY step, stage, category",
			    &st, "read traces");
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while ((src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
			rc = nomem(c, "read traces");
			break;
		}
		cat_trace *t = &out->rows[out->n];
		t->step = sqlite3_column_int64(st, 0);
		t->stage = sqlite3_column_int(st, 1);
		t->category = cat_col_strdup(st, 2);
		t->fingerprint = (uint64_t)sqlite3_column_int64(st, 3);
		if (!t->category) {
			rc = nomem(c, "read traces");
			break;
		}
		out->n++;
	}
	rc = rows_end(c, st, rc, src, "read traces");
	if (rc)
		cat_trace_rows_free(out);
	return rc;
}

void cat_trace_rows_free(cat_trace_rows *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free((char *)l->rows[i].category);
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

static void bind_real(sqlite3_stmt *st, int idx, double v)
{
	if (isnan(v))
		sqlite3_bind_null(st, idx);
	else
		sqlite3_bind_double(st, idx, v);
}

static double col_real(sqlite3_stmt *st, int col)
{
	return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

static void bind_loss(sqlite3_stmt *st, const void *rows, size_t i)
{
	const cat_loss *l = (const cat_loss *)rows + i;
	sqlite3_bind_int64(st, 2, l->step);
	bind_real(st, 3, l->loss);
	bind_real(st, 4, l->eval_loss);
	bind_real(st, 5, l->tokens_per_s);
	bind_real(st, 6, l->ms_per_step);
}

int cat_loss_put(cat *c, const char *run_id, const cat_loss *rows, size_t n)
{
	return put_rows(c, run_id, rows, n,
			"INSERT OR REPLACE INTO losses(run_id, step, loss, eval_loss, tokens_per_s, ms_per_step)"
			" VALUES (?, ?, ?, ?, ?, ?)",
			bind_loss, "write losses");
}

int cat_loss_get(cat *c, const char *run_id, cat_loss_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT step, loss, eval_loss, tokens_per_s, ms_per_step FROM losses WHERE run_id = ?"
			    " ORDER BY step",
			    &st, "read losses");
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while ((src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
			rc = nomem(c, "read losses");
			break;
		}
		cat_loss *l = &out->rows[out->n++];
		l->step = sqlite3_column_int64(st, 0);
		l->loss = col_real(st, 1);
		l->eval_loss = col_real(st, 2);
		l->tokens_per_s = col_real(st, 3);
		l->ms_per_step = col_real(st, 4);
	}
	rc = rows_end(c, st, rc, src, "read losses");
	if (rc)
		cat_loss_rows_free(out);
	return rc;
}

void cat_loss_rows_free(cat_loss_rows *l)
{
	if (!l)
		return;
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

/* --- remote copies -------------------------------------------------------------------- */

int cat_remote_add(cat *c, int64_t id, const char *url, const char *manifest_hash)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!url || !*url)
		return qe_fail(QE_EINVAL, "catalog '%s': remote of checkpoint %lld: empty url", c->path, (long long)id);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	if (!(rc = cat_prepare(c, "INSERT OR REPLACE INTO remotes(checkpoint_id, url, manifest_hash) VALUES (?, ?, ?)",
			       &st, "record a remote copy"))) {
		sqlite3_bind_int64(st, 1, id);
		cat_bind_text(st, 2, url);
		cat_bind_text(st, 3, manifest_hash);
		int src = cat_step(st);
		if (src == SQLITE_CONSTRAINT_FOREIGNKEY)
			rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no checkpoint %lld to record a remote copy of", c->path,
				     (long long)id);
		else if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "record a remote copy");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_remote_list(cat *c, int64_t id, cat_remote_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT checkpoint_id, url, pushed_at, manifest_hash FROM remotes WHERE checkpoint_id = ?"
			    " ORDER BY url",
			    &st, "list remote copies");
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while ((src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
			rc = nomem(c, "list remote copies");
			break;
		}
		cat_remote *r = &out->rows[out->n++];
		r->checkpoint_id = sqlite3_column_int64(st, 0);
		r->url = cat_col_strdup(st, 1);
		r->pushed_at = cat_col_strdup(st, 2);
		r->manifest_hash = cat_col_strdup(st, 3);
		if (!r->url || !r->pushed_at || !r->manifest_hash) {
			rc = nomem(c, "list remote copies");
			break;
		}
	}
	rc = rows_end(c, st, rc, src, "list remote copies");
	if (rc)
		cat_remote_rows_free(out);
	return rc;
}

int cat_remote_delete(cat *c, int64_t id, const char *url, int *deleted)
{
	if (deleted)
		*deleted = 0;
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!url || !*url)
		return qe_fail(QE_EINVAL, "catalog '%s': remote of checkpoint %lld: empty url", c->path, (long long)id);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	if (!(rc = cat_prepare(c, "DELETE FROM remotes WHERE checkpoint_id = ? AND url = ?", &st,
			       "forget a remote copy"))) {
		sqlite3_bind_int64(st, 1, id);
		cat_bind_text(st, 2, url);
		int src = cat_step(st);
		if (src != SQLITE_DONE)
			rc = cat_sql_fail(c, src, "forget a remote copy");
		else if (deleted)
			*deleted = sqlite3_changes(c->db);
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

void cat_remote_rows_free(cat_remote_rows *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->rows[i].url);
		free(l->rows[i].pushed_at);
		free(l->rows[i].manifest_hash);
	}
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

/* --- stores ------------------------------------------------------------------------ */

int cat_store_put(cat *c, const char *store_id, const char *run_id, int rank, const char *host, const char *path)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!store_id || !*store_id || !run_id || rank < 0)
		return qe_fail(QE_EINVAL, "catalog '%s': a store needs an id, a run and a rank", c->path);
	if ((rc = cat_tx_begin(c)))
		return rc;
	sqlite3_stmt *st;
	if (!(rc = cat_prepare(c,
			       "INSERT INTO stores(store_id, run_id, rank, host, path) VALUES (?, ?, ?, ?, ?)"
			       " ON CONFLICT(store_id) DO NOTHING",
			       &st, "record a store"))) {
		cat_bind_text(st, 1, store_id);
		cat_bind_text(st, 2, run_id);
		sqlite3_bind_int(st, 3, rank);
		cat_bind_text(st, 4, host);
		cat_bind_text(st, 5, path);
		rc = step_done(c, st, "record a store");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

int cat_store_list(cat *c, const char *run_id, cat_store_rows *out)
{
	sqlite3_stmt *st;
	int rc = rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT store_id, run_id, rank, host, path, created FROM stores WHERE run_id = ?"
			    " ORDER BY rank, store_id",
			    &st, "list stores");
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	size_t cap = 0;
	int src = SQLITE_DONE;
	while (!rc && (src = cat_step(st)) == SQLITE_ROW) {
		if (grow((void **)&out->rows, &cap, out->n, sizeof(*out->rows))) {
			rc = nomem(c, "list stores");
			break;
		}
		cat_store *r = &out->rows[out->n++];
		r->store_id = cat_col_strdup(st, 0);
		r->run_id = cat_col_strdup(st, 1);
		r->rank = sqlite3_column_int(st, 2);
		r->host = cat_col_strdup(st, 3);
		r->path = cat_col_strdup(st, 4);
		r->created = cat_col_strdup(st, 5);
		if (!r->store_id || !r->run_id || !r->host || !r->path || !r->created)
			rc = nomem(c, "list stores");
	}
	rc = rows_end(c, st, rc, src, "list stores");
	if (rc)
		cat_store_rows_free(out);
	return rc;
}

void cat_store_rows_free(cat_store_rows *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		cat_store *r = &l->rows[i];
		free(r->store_id);
		free(r->run_id);
		free(r->host);
		free(r->path);
		free(r->created);
	}
	free(l->rows);
	l->rows = NULL;
	l->n = 0;
}

const cat_store *cat_store_find(const cat_store_rows *l, const char *store_id)
{
	for (size_t i = 0; l && i < l->n; i++)
		if (strcmp(l->rows[i].store_id, store_id) == 0)
			return &l->rows[i];
	return NULL;
}
