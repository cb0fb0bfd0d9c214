/*
 * stores.c - where the catalog says a run's bytes live: its stores (one per
 * rank and host) and the remote copies of its checkpoints (S3 URLs and
 * manifest hashes).
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

static int remote_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	(void)ctx;
	cat_remote *r = row;
	r->checkpoint_id = sqlite3_column_int64(st, 0);
	r->url = cat_col_strdup(st, 1);
	r->pushed_at = cat_col_strdup(st, 2);
	r->manifest_hash = cat_col_strdup(st, 3);
	return r->url && r->pushed_at && r->manifest_hash ? 0 : cat_nomem(c, "list remote copies");
}

static void remote_release(void *row)
{
	cat_remote *r = row;
	free(r->url);
	free(r->pushed_at);
	free(r->manifest_hash);
}

static const cat_row_shape remote_shape = { sizeof(cat_remote), remote_fill, remote_release, "list remote copies" };

int cat_remote_list(cat *c, int64_t id, cat_remote_rows *out)
{
	sqlite3_stmt *st;
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT checkpoint_id, url, pushed_at, manifest_hash FROM remotes WHERE checkpoint_id = ?"
			    " ORDER BY url",
			    &st, remote_shape.what);
	if (rc)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	return cat_rows_read(c, st, &remote_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_remote_rows_free(cat_remote_rows *l)
{
	if (l)
		cat_rows_free(&remote_shape, (void **)&l->rows, &l->n);
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
		rc = cat_step_done(c, st, "record a store");
		sqlite3_finalize(st);
	}
	return cat_tx_end(c, rc);
}

static int store_fill(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx)
{
	(void)prev;
	(void)ctx;
	cat_store *r = row;
	r->store_id = cat_col_strdup(st, 0);
	r->run_id = cat_col_strdup(st, 1);
	r->rank = sqlite3_column_int(st, 2);
	r->host = cat_col_strdup(st, 3);
	r->path = cat_col_strdup(st, 4);
	r->created = cat_col_strdup(st, 5);
	return r->store_id && r->run_id && r->host && r->path && r->created ? 0 : cat_nomem(c, "list stores");
}

static void store_release(void *row)
{
	cat_store *r = row;
	free(r->store_id);
	free(r->run_id);
	free(r->host);
	free(r->path);
	free(r->created);
}

static const cat_row_shape store_shape = { sizeof(cat_store), store_fill, store_release, "list stores" };

int cat_store_list(cat *c, const char *run_id, cat_store_rows *out)
{
	sqlite3_stmt *st;
	int rc = cat_rows_begin(c, (void **)&out->rows, &out->n,
			    "SELECT store_id, run_id, rank, host, path, created FROM stores WHERE run_id = ?"
			    " ORDER BY rank, store_id",
			    &st, store_shape.what);
	if (rc)
		return rc;
	cat_bind_text(st, 1, run_id);
	return cat_rows_read(c, st, &store_shape, NULL, (void **)&out->rows, &out->n);
}

void cat_store_rows_free(cat_store_rows *l)
{
	if (l)
		cat_rows_free(&store_shape, (void **)&l->rows, &l->n);
}

const cat_store *cat_store_find(const cat_store_rows *l, const char *store_id)
{
	for (size_t i = 0; l && i < l->n; i++)
		if (strcmp(l->rows[i].store_id, store_id) == 0)
			return &l->rows[i];
	return NULL;
}
