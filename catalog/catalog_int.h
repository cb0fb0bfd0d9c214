/*
 * catalog_int.h - internals shared by catalog.c (open, schema, migrations,
 * transactions, row helpers) and the row files: runs.c, ckpts.c, stores.c,
 * copies.c.  Not part of the public API.
 */
#ifndef QE_CATALOG_INT_H
#define QE_CATALOG_INT_H

#include "catalog/catalog.h"

#include <sqlite3.h>
#include <sys/types.h>

struct cat {
	sqlite3 *db;
	char *path;
	pid_t pid;
	int in_txn; /* a caller transaction is open: 1 cat_begin, CAT_TXN_DURABLE cat_begin_durable */
};

#define CAT_TXN_DURABLE 2

/* Convert a SQLite code into a QE code with a message naming the file and what failed. */
int cat_sql_fail(cat *c, int rc, const char *what);
/* QE_EINVAL when c is NULL or used in a process other than the one that opened it. */
int cat_check(cat *c);
int cat_exec(cat *c, const char *sql, const char *what);
/* COMMIT, failing with SQLITE_IOERR when QE_FAULT asks (runtime/core/fault.h); the
 * transaction is then still open, as after a real failed COMMIT. */
int cat_exec_commit(cat *c, const char *what);
/* sqlite3_step, answering SQLITE_IOERR without stepping when QE_FAULT asks. */
int cat_step(sqlite3_stmt *st);
int cat_prepare(cat *c, const char *sql, sqlite3_stmt **st, const char *what);

/*
 * Make one API call atomic: BEGIN IMMEDIATE (a write lock up front, so two
 * writers never deadlock upgrading) or, inside a caller transaction, a
 * savepoint.  cat_tx_end commits/releases when rc is 0, else rolls back to
 * where the call started; it returns rc, or the commit's error.
 */
int cat_tx_begin(cat *c);
int cat_tx_end(cat *c, int rc);

/* Column as a malloc'd string ("" for NULL).  NULL only when out of memory. */
char *cat_col_strdup(sqlite3_stmt *st, int col);
/* Bind text, NULL as "". */
int cat_bind_text(sqlite3_stmt *st, int idx, const char *s);

/* Step a statement that returns no rows: 0, or the step's failure naming what. */
int cat_step_done(cat *c, sqlite3_stmt *st, const char *what);
/* QE_ENOMEM naming the catalog and what ran out. */
int cat_nomem(cat *c, const char *what);
/* Grow an array of elem-sized rows (zeroed) to hold n+1, *cap its capacity; -1 when out of memory. */
int cat_grow_rows(void **rows, size_t *cap, size_t n, size_t elem);

/*
 * The lists of rows (cat_ckpt_rows, cat_tensor_rows, cat_shard_rows, ...):
 * each shape says how big a row is, how one is filled from a statement's
 * current row and how what it owns is freed, and one reader and one free
 * serve every list, so no list has a read loop or a free of its own.
 *
 * fill: row is a new zeroed element, prev the list's last one (NULL for the
 * first), ctx the caller's.  Returns 0 (row filled and kept), CAT_ROW_SKIP
 * (nothing new to keep: the SQL row was added to prev, or is not wanted;
 * row stays zeroed) or a failure, after which row is released with the list.
 * release: frees what one row owns (not the row); NULL when rows own nothing.
 */
#define CAT_ROW_SKIP 1
typedef struct cat_row_shape {
	size_t size;
	int (*fill)(cat *c, sqlite3_stmt *st, void *row, void *prev, void *ctx);
	void (*release)(void *row);
	const char *what; /* names the query in messages: "list checkpoints" */
} cat_row_shape;

/*
 * The start of a query that fills a row array: check c, empty the array
 * (*rows, *n) and prepare sql; the caller binds its key.  The array is left
 * as it was when c itself is unusable, else empty.
 */
int cat_rows_begin(cat *c, void **rows, size_t *n, const char *sql, sqlite3_stmt **st, const char *what);
/*
 * Its end: step st (cat_step) to the last row, filling (*rows, *n) by shape;
 * st is finalized.  On failure the list is freed (empty) and the code
 * returned: the fill's, QE_ENOMEM, or the step's naming shape->what.
 */
int cat_rows_read(cat *c, sqlite3_stmt *st, const cat_row_shape *shape, void *ctx, void **rows, size_t *n);
/* Free a list of shape: each row's release, then the array; (*rows, *n) left empty. */
void cat_rows_free(const cat_row_shape *shape, void **rows, size_t *n);

/* The tensor row's release (ckpts.c), shared by cat_ckpt_tensors and cat_ckpt_copies (copies.c). */
void cat_tensor_release(void *row);

#endif
