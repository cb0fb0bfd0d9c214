/*
 * catalog_int.h - internals shared by catalog.c (open, schema, migrations,
 * transactions) and queries.c (the rows).  Not part of the public API.
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

#endif
