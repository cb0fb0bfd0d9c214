/*
 * runs.c - the catalog's rows of a run: the run itself (its config), its
 * traces and its losses.
 *
 * Every writing call is one atomic unit (cat_tx_begin/cat_tx_end): its own
 * transaction, or a savepoint inside the caller's.
 */
#include "catalog/catalog_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		rc = cat_step_done(c, st, "record the catalog's run");
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
		rc = cat_step_done(c, st, "drop the rows of a run that starts over");
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
			rc = cat_nomem(c, "read a run");
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
			rc = cat_step_done(c, st, what);
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

static int trace_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	(void)ctx;
	cat_trace *t = row;
	t->step = sqlite3_column_int64(st, 0);
	t->stage = sqlite3_column_int(st, 1);
	t->category = cat_col_strdup(st, 2);
	t->fingerprint = (uint64_t)sqlite3_column_int64(st, 3);
	return t->category ? 0 : cat_nomem(c, "read traces");
}

static void trace_release(void *row)
{
	free((char *)((cat_trace *)row)->category);
}

static const cat_row_shape trace_shape = { sizeof(cat_trace), trace_fill, trace_release, "read traces" };

int cat_trace_get(cat *c, const char *run_id, cat_trace_rows *out)
{
	sqlite3_stmt *st;
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT step, stage, category, fingerprint FROM traces WHERE run_id = ?"
			    " ORDER BY step, stage, category",
			    &st, trace_shape.what);
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	return cat_rows_read(c, st, &trace_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_trace_rows_free(cat_trace_rows *l)
{
	if (l)
		cat_rows_free(&trace_shape, (void **)&l->rows, &l->n);
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
	bind_real(st, 7, l->lr);
	bind_real(st, 8, l->grad_norm);
}

int cat_loss_put(cat *c, const char *run_id, const cat_loss *rows, size_t n)
{
	return put_rows(c, run_id, rows, n,
			"INSERT OR REPLACE INTO losses(run_id, step, loss, eval_loss, tokens_per_s, ms_per_step, lr, grad_norm)"
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			bind_loss, "write losses");
}

static int loss_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)c;
	(void)prev;
	(void)ctx;
	cat_loss *l = row;
	l->step = sqlite3_column_int64(st, 0);
	l->loss = col_real(st, 1);
	l->eval_loss = col_real(st, 2);
	l->tokens_per_s = col_real(st, 3);
	l->ms_per_step = col_real(st, 4);
	l->lr = col_real(st, 5);
	l->grad_norm = col_real(st, 6);
	return 0;
}

static const cat_row_shape loss_shape = { sizeof(cat_loss), loss_fill, NULL, "read losses" };

int cat_loss_get(cat *c, const char *run_id, cat_loss_rows *out)
{
	sqlite3_stmt *st;
	/* a catalog opened read-only is not migrated: before version 5 it has no lr or grad_norm column */
	int version = 0;
	int rc = cat_schema_version(c, &version);
	if (rc)
		return rc;
	rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    version >= 5 ? "SELECT step, loss, eval_loss, tokens_per_s, ms_per_step, lr, grad_norm FROM losses"
					   " WHERE run_id = ? ORDER BY step"
					 : "SELECT step, loss, eval_loss, tokens_per_s, ms_per_step, NULL, NULL FROM losses"
					   " WHERE run_id = ? ORDER BY step",
			    &st, "read losses");
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	return cat_rows_read(c, st, &loss_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_loss_rows_free(cat_loss_rows *l)
{
	if (l)
		cat_rows_free(&loss_shape, (void **)&l->rows, &l->n);
}
