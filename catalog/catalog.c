/*
 * catalog.c - opening the catalog: tell a qeffect catalog from anything else
 * without writing to it, bring its schema up to date, and the transaction
 * helpers every query uses.
 *
 * Identification comes first and is read-only: PRAGMA application_id and
 * user_version come from the file header, and listing sqlite_master reads the
 * schema, so a file that is not a database (SQLITE_NOTADB), a truncated one
 * (SQLITE_CORRUPT) or another application's database is refused before
 * anything (journal mode, migrations) could write to it.
 *
 * Migrations: migrations[v] takes the schema from version v to v+1.  Each runs
 * in its own BEGIN IMMEDIATE transaction that first re-reads the version, so
 * processes opening the same file at once apply each step exactly once.  The
 * version lives in PRAGMA user_version (read without touching the schema)
 * and is mirrored in meta.schema_version for people reading the file.
 */
#include "catalog/catalog_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_BUSY_MS 10000
#define CAT_PATH_MAX 4096
#define NOW_SQL "(strftime('%Y-%m-%dT%H:%M:%fZ','now'))"

/* Version 0 -> 1: the tables of DESIGN.md section 8. */
static const char schema_v1[] =
	"CREATE TABLE meta("
	"  key TEXT PRIMARY KEY,"
	"  value TEXT NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE runs("
	"  id INTEGER PRIMARY KEY,"
	"  run_id TEXT NOT NULL UNIQUE CHECK (length(run_id) > 0),"
	"  created TEXT NOT NULL DEFAULT " NOW_SQL ","
	"  config_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config_json)));"
	"CREATE TABLE checkpoints("
	"  id INTEGER PRIMARY KEY,"
	"  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
	"  step INTEGER NOT NULL CHECK (step >= 0),"
	"  e_w INTEGER NOT NULL CHECK (e_w >= 0),"
	"  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'committed', 'aborted')),"
	"  created TEXT NOT NULL DEFAULT " NOW_SQL ","
	"  committed_at TEXT NOT NULL DEFAULT '',"
	"  bytes INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0),"
	"  runtime_state_bytes INTEGER NOT NULL DEFAULT 0 CHECK (runtime_state_bytes >= 0),"
	"  topology TEXT NOT NULL DEFAULT '',"
	"  schedule TEXT NOT NULL DEFAULT '',"
	"  recipe TEXT NOT NULL DEFAULT '',"
	"  note TEXT NOT NULL DEFAULT '');"
	/* attempts at one step may pile up; only one of them is ever committed */
	"CREATE UNIQUE INDEX checkpoints_committed_step ON checkpoints(run_id, step) WHERE status = 'committed';"
	"CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);"
	"CREATE TABLE shards("
	"  checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,"
	"  stage INTEGER NOT NULL CHECK (stage >= 0),"
	"  rank INTEGER NOT NULL CHECK (rank >= 0),"
	"  bytes INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0),"
	"  PRIMARY KEY (checkpoint_id, stage));"
	"CREATE TABLE tensors("
	"  id INTEGER PRIMARY KEY,"
	"  checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,"
	"  stage INTEGER NOT NULL CHECK (stage >= 0),"
	"  name TEXT NOT NULL CHECK (length(name) > 0),"
	"  dtype TEXT NOT NULL,"
	"  shape TEXT NOT NULL,"
	"  bytes INTEGER NOT NULL CHECK (bytes >= 0),"
	"  kind TEXT NOT NULL CHECK (length(kind) > 0),"
	"  UNIQUE (checkpoint_id, stage, name));"
	"CREATE TABLE tensor_chunks("
	"  tensor_id INTEGER NOT NULL REFERENCES tensors(id) ON DELETE CASCADE,"
	"  idx INTEGER NOT NULL CHECK (idx >= 0),"
	"  hash BLOB NOT NULL CHECK (typeof(hash) = 'blob' AND length(hash) = 16),"
	"  size INTEGER NOT NULL CHECK (size >= 0),"
	"  PRIMARY KEY (tensor_id, idx)) WITHOUT ROWID;"
	"CREATE TABLE traces("
	"  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
	"  step INTEGER NOT NULL,"
	"  stage INTEGER NOT NULL,"
	"  category TEXT NOT NULL,"
	"  fingerprint INTEGER NOT NULL," /* the 64-bit value's bits, as SQLite's signed integer */
	"  PRIMARY KEY (run_id, step, stage, category)) WITHOUT ROWID;"
	"CREATE TABLE losses("
	"  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
	"  step INTEGER NOT NULL,"
	"  loss REAL," /* NULL: NaN (SQLite stores NaN as NULL) */
	"  eval_loss REAL,"
	"  tokens_per_s REAL,"
	"  ms_per_step REAL,"
	"  PRIMARY KEY (run_id, step)) WITHOUT ROWID;"
	"CREATE TABLE remotes("
	"  id INTEGER PRIMARY KEY,"
	"  checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,"
	"  url TEXT NOT NULL,"
	"  pushed_at TEXT NOT NULL DEFAULT " NOW_SQL ","
	"  manifest_hash TEXT NOT NULL DEFAULT '',"
	"  UNIQUE (checkpoint_id, url));"
	"INSERT INTO meta(key, value) VALUES ('application', 'qeffect-catalog'), ('created', " NOW_SQL "),"
	"  ('run_id', ''), ('schema_version', '0');";

/* Version 1 -> 2: gc and "which checkpoints use this chunk" look chunks up by hash. */
static const char schema_v2[] = "CREATE INDEX tensor_chunks_hash ON tensor_chunks(hash);";

/*
 * Version 2 -> 3: a store per rank (DESIGN.md section 8).  Each tensor row
 * names the store that holds its chunks ('' is the shared RUN/store of
 * version 2 runs), and each store is described once: the rank that wrote
 * it, its host and its path there, so a missing chunk can be traced to a
 * machine.
 */
static const char schema_v3[] =
	"ALTER TABLE tensors ADD COLUMN store_id TEXT NOT NULL DEFAULT '';"
	"CREATE TABLE stores("
	"  store_id TEXT PRIMARY KEY CHECK (length(store_id) > 0),"
	"  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
	"  rank INTEGER NOT NULL CHECK (rank >= 0),"
	"  host TEXT NOT NULL DEFAULT '',"
	"  path TEXT NOT NULL DEFAULT '',"
	"  created TEXT NOT NULL DEFAULT " NOW_SQL ") WITHOUT ROWID;"
	"CREATE INDEX tensors_store ON tensors(store_id);";

/*
 * Version 3 -> 4: replicas (--ckpt-replicas).  A tensor row names the store
 * its rank wrote; each further store holding every chunk of it - a peer
 * rank's store on another host - is one copies row, recorded in the same
 * commit transaction, so restore, verify and list know every copy.
 */
static const char schema_v4[] =
	"CREATE TABLE copies("
	"  tensor_id INTEGER NOT NULL REFERENCES tensors(id) ON DELETE CASCADE,"
	"  store_id TEXT NOT NULL CHECK (length(store_id) > 0),"
	"  PRIMARY KEY (tensor_id, store_id)) WITHOUT ROWID;"
	"CREATE INDEX copies_store ON copies(store_id);";

/*
 * Version 4 -> 5: each step's learning rate and global gradient norm beside
 * its loss (NULL where a step did not measure the norm, and in rows written
 * before version 5).
 */
static const char schema_v5[] = "ALTER TABLE losses ADD COLUMN lr REAL;"
				"ALTER TABLE losses ADD COLUMN grad_norm REAL;";

static const char *const migrations[CAT_SCHEMA_VERSION] = { schema_v1, schema_v2, schema_v3, schema_v4, schema_v5 };

/* --- errors and helpers ----------------------------------------------------------- */

int cat_sql_fail(cat *c, int rc, const char *what)
{
	int code = QE_ECATALOG;
	switch (rc & 0xff) {
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		code = QE_ECORRUPT;
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		code = QE_EBUSY;
		break;
	case SQLITE_NOMEM:
		code = QE_ENOMEM;
		break;
	case SQLITE_CONSTRAINT:
		if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
			code = QE_EEXIST;
		break;
	case SQLITE_FULL:
		code = QE_ENOSPC;
		break;
	case SQLITE_IOERR:
		/* a write, fsync or truncate of the database, its WAL or its -shm that found the disk full */
		if (c->db && qe_errno_status(sqlite3_system_errno(c->db)) == QE_ENOSPC)
			code = QE_ENOSPC;
		break;
	}
	const char *msg = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
	if (code == QE_ENOSPC)
		return qe_fail(code, "catalog '%s': %s: no space left on device (%s)", c->path, what, msg);
	return qe_fail(code, "catalog '%s': %s: %s", c->path, what, msg);
}

int cat_check(cat *c)
{
	if (!c)
		return qe_fail(QE_EINVAL, "catalog: NULL handle");
	if (getpid() != c->pid)
		return qe_fail(QE_EINVAL,
			       "catalog '%s': handle opened by process %d used in process %d; open the catalog after fork",
			       c->path, (int)c->pid, (int)getpid());
	return 0;
}

const char *cat_path(const cat *c)
{
	return c ? c->path : "";
}

int cat_exec(cat *c, const char *sql, const char *what)
{
	int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : cat_sql_fail(c, rc, what);
}

int cat_exec_commit(cat *c, const char *what)
{
	if (qe_fault_hit(QE_FAULT_SQLITE_COMMIT))
		return cat_sql_fail(c, SQLITE_IOERR, what);
	return cat_exec(c, "COMMIT", what);
}

int cat_step(sqlite3_stmt *st)
{
	return qe_fault_hit(QE_FAULT_SQLITE_STEP) ? SQLITE_IOERR : sqlite3_step(st);
}

int cat_prepare(cat *c, const char *sql, sqlite3_stmt **st, const char *what)
{
	int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
	return rc == SQLITE_OK ? 0 : cat_sql_fail(c, rc, what);
}

char *cat_col_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	return qe_strdup(t ? (const char *)t : "");
}

int cat_bind_text(sqlite3_stmt *st, int idx, const char *s)
{
	return sqlite3_bind_text(st, idx, s ? s : "", -1, SQLITE_TRANSIENT);
}

/* Run a one-row, one-integer query.  OUT *v. */
static int query_int(cat *c, const char *sql, int64_t *v, const char *what)
{
	sqlite3_stmt *st;
	int rc = cat_prepare(c, sql, &st, what);
	if (rc)
		return rc;
	int src = cat_step(st);
	if (src == SQLITE_ROW) {
		*v = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = cat_sql_fail(c, src == SQLITE_DONE ? SQLITE_ERROR : src, what);
	}
	sqlite3_finalize(st);
	return rc;
}

/* --- transactions ---------------------------------------------------------------- */

int cat_tx_begin(cat *c)
{
	if (c->in_txn)
		return cat_exec(c, "SAVEPOINT qe_call", "begin a savepoint");
	return cat_exec(c, "BEGIN IMMEDIATE", "begin a write transaction");
}

int cat_tx_end(cat *c, int rc)
{
	if (c->in_txn) {
		if (rc == 0)
			return cat_exec(c, "RELEASE qe_call", "release a savepoint");
		/* keep the message of the failure, not of the rollback */
		sqlite3_exec(c->db, "ROLLBACK TO qe_call; RELEASE qe_call", NULL, NULL, NULL);
		return rc;
	}
	if (rc == 0) {
		int crc = cat_exec_commit(c, "commit");
		if (crc == 0)
			return 0;
		rc = crc;
	}
	if (!sqlite3_get_autocommit(c->db))
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

int cat_begin(cat *c)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (c->in_txn)
		return qe_fail(QE_EINVAL, "catalog '%s': cat_begin inside an open transaction", c->path);
	if ((rc = cat_exec(c, "BEGIN IMMEDIATE", "begin a transaction")))
		return rc;
	c->in_txn = 1;
	return 0;
}

int cat_begin_durable(cat *c)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (c->in_txn)
		return qe_fail(QE_EINVAL, "catalog '%s': cat_begin_durable inside an open transaction", c->path);
	if ((rc = cat_exec(c, "PRAGMA synchronous = FULL", "set synchronous=FULL for a durable transaction")))
		return rc;
	if ((rc = cat_exec(c, "BEGIN IMMEDIATE", "begin a durable transaction"))) {
		cat_exec(c, "PRAGMA synchronous = NORMAL", "restore synchronous=NORMAL");
		return rc;
	}
	c->in_txn = CAT_TXN_DURABLE;
	return 0;
}

int cat_commit(cat *c)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!c->in_txn)
		return qe_fail(QE_EINVAL, "catalog '%s': cat_commit without cat_begin", c->path);
	int durable = c->in_txn == CAT_TXN_DURABLE;
	rc = cat_exec_commit(c, "commit a transaction");
	if (rc && !sqlite3_get_autocommit(c->db))
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
	c->in_txn = 0;
	if (durable) {
		int rc2 = cat_exec(c, "PRAGMA synchronous = NORMAL", "restore synchronous=NORMAL");
		if (!rc)
			rc = rc2;
	}
	return rc;
}

int cat_rollback(cat *c)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	if (!c->in_txn)
		return qe_fail(QE_EINVAL, "catalog '%s': cat_rollback without cat_begin", c->path);
	int durable = c->in_txn == CAT_TXN_DURABLE;
	c->in_txn = 0;
	rc = 0;
	if (!sqlite3_get_autocommit(c->db)) /* else SQLite already rolled back (e.g. after an I/O error) */
		rc = cat_exec(c, "ROLLBACK", "roll back a transaction");
	if (durable)
		sqlite3_exec(c->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
	return rc;
}

/* --- open ------------------------------------------------------------------------ */

static int quick_check(cat *c)
{
	sqlite3_stmt *st;
	char problems[512] = "";
	int rc = cat_prepare(c, "PRAGMA quick_check(3)", &st, "quick check");
	if (rc)
		return rc;
	int src;
	while ((src = cat_step(st)) == SQLITE_ROW) {
		const char *row = (const char *)sqlite3_column_text(st, 0);
		if (row && strcmp(row, "ok") != 0) {
			size_t len = strlen(problems);
			snprintf(problems + len, sizeof(problems) - len, "%s%s", len ? "; " : "", row);
		}
	}
	if (src != SQLITE_DONE)
		rc = cat_sql_fail(c, src, "quick check");
	sqlite3_finalize(st);
	for (char *ch = problems; *ch; ch++)
		if (*ch == '\n')
			*ch = ' ';
	if (!rc && problems[0])
		rc = qe_fail(QE_ECORRUPT, "catalog '%s': quick check failed: %s", c->path, problems);
	return rc;
}

/* WAL lets rank processes write in turn while readers go on; the mode is
 * stored in the file, so this only writes when the file is not yet in WAL. */
static int ensure_wal(cat *c)
{
	for (int attempt = 0;; attempt++) {
		sqlite3_stmt *st;
		int rc = cat_prepare(c, "PRAGMA journal_mode", &st, "read the journal mode");
		if (rc)
			return rc;
		int src = cat_step(st);
		int is_wal = src == SQLITE_ROW && sqlite3_column_text(st, 0) &&
			     strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
		sqlite3_finalize(st);
		if (src != SQLITE_ROW)
			return cat_sql_fail(c, src, "read the journal mode");
		if (is_wal)
			return 0;
		if (attempt >= 50)
			return qe_fail(QE_ECATALOG, "catalog '%s': could not switch to WAL journal mode", c->path);
		src = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
		if (src != SQLITE_OK && (src & 0xff) != SQLITE_BUSY)
			return cat_sql_fail(c, src, "switch to WAL journal mode");
		if (src != SQLITE_OK)
			sqlite3_sleep(100);
	}
}

/* Apply migrations until the file is at version target. */
static int migrate(cat *c, int target)
{
	for (;;) {
		int64_t v;
		int rc = query_int(c, "PRAGMA user_version", &v, "read the schema version");
		if (rc)
			return rc;
		if (v >= target)
			return 0;
		if ((rc = cat_exec(c, "BEGIN IMMEDIATE", "begin a migration")))
			return rc;
		/* another process may have migrated while we waited for the lock */
		int64_t v2, app;
		if (!(rc = query_int(c, "PRAGMA user_version", &v2, "read the schema version")) &&
		    !(rc = query_int(c, "PRAGMA application_id", &app, "read the application id")) && v2 == v) {
			char sql[160];
			if (v == 0 && app != 0)
				rc = qe_fail(QE_ECATALOG, "catalog '%s': not a qeffect catalog (application_id 0x%08llx)",
					     c->path, (unsigned long long)app);
			if (!rc)
				rc = cat_exec(c, migrations[v], "apply a schema migration");
			if (!rc && v == 0) {
				snprintf(sql, sizeof(sql), "PRAGMA application_id = %d", CAT_APPLICATION_ID);
				rc = cat_exec(c, sql, "set the application id");
			}
			if (!rc) {
				snprintf(sql, sizeof(sql),
					 "UPDATE meta SET value = '%lld' WHERE key = 'schema_version'; PRAGMA user_version = %lld",
					 (long long)v + 1, (long long)v + 1);
				rc = cat_exec(c, sql, "record the schema version");
			}
			if (!rc)
				qe_log(QE_LOG_DEBUG, "catalog '%s': schema migrated from version %lld to %lld", c->path,
				       (long long)v, (long long)v + 1);
		}
		if (rc) {
			sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
			return qe_fail_ctx(rc, "migration from version %lld", (long long)v);
		}
		if ((rc = cat_exec_commit(c, "commit a migration")))
			return rc;
	}
}

/* Whether the catalog file and its folder (where the WAL files go) may be written. */
static int writable_here(const char *path)
{
	char dir[CAT_PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		slash[1] = 0;
	else
		*slash = 0;
	return access(path, W_OK) == 0 && access(dir, W_OK) == 0;
}

/*
 * A read-only connection to a WAL database needs the WAL index (-shm): in a
 * folder it may not write, with no -shm left by a writer, SQLite cannot open
 * it (SQLITE_CANTOPEN or SQLITE_READONLY_* at the first read).  Nobody can be writing then, so when
 * no WAL with frames is left either the file is reopened immutable (no locks,
 * no WAL): it reads exactly what is committed in the file.
 */
static int open_read_only_fallback(cat *c, int busy_ms)
{
	sqlite3_stmt *st = NULL;
	int src = sqlite3_prepare_v2(c->db, "PRAGMA schema_version", -1, &st, NULL);
	if (src == SQLITE_OK)
		src = cat_step(st);
	sqlite3_finalize(st);
	if ((src & 0xff) != SQLITE_CANTOPEN && (src & 0xff) != SQLITE_READONLY)
		return 0; /* readable as it is, or an error the identification below reports */
	char wal[CAT_PATH_MAX + 8];
	struct stat sb;
	snprintf(wal, sizeof(wal), "%s-wal", c->path);
	if (stat(wal, &sb) == 0 && sb.st_size > 0)
		return qe_fail(QE_ECATALOG,
			       "catalog '%s': cannot be read: its WAL '%s' holds changes that only a writer may replay, "
			       "and the folder is not writable",
			       c->path, wal);
	/* file:PATH?immutable=1, with the characters a URI path cannot hold escaped */
	char uri[3 * CAT_PATH_MAX + 32];
	size_t n = (size_t)snprintf(uri, sizeof(uri), "file:");
	for (const unsigned char *p = (const unsigned char *)c->path; *p && n + 4 < sizeof(uri); p++) {
		if (*p == '%' || *p == '?' || *p == '#' || *p < 0x21 || *p >= 0x7f)
			n += (size_t)snprintf(uri + n, sizeof(uri) - n, "%%%02X", *p);
		else
			uri[n++] = (char)*p;
	}
	snprintf(uri + n, sizeof(uri) - n, "?immutable=1");
	sqlite3_close_v2(c->db);
	c->db = NULL;
	src = sqlite3_open_v2(uri, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
	if (src != SQLITE_OK)
		return cat_sql_fail(c, src, "open read-only (immutable)");
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_busy_timeout(c->db, busy_ms);
	qe_log(QE_LOG_DEBUG, "catalog '%s': its folder is not writable: opened immutable", c->path);
	return 0;
}

/* Remove a catalog file this open created, with its -wal and -shm. */
static void remove_created(const char *path)
{
	static const char *const tails[] = { "", "-wal", "-shm", "-journal" };
	char p[4200];
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", path, tails[i]);
		unlink(p);
	}
}

int cat_open(const char *path, int create, cat **out)
{
	cat_opts o = { .create = create };
	return cat_open_ex(path, &o, out);
}

int cat_open_ex(const char *path, const cat_opts *opts, cat **out)
{
	cat_opts o = { 0 };
	struct stat st;
	int rc;

	if (!out)
		return qe_fail(QE_EINVAL, "cat_open: NULL out");
	*out = NULL;
	if (!path || !*path)
		return qe_fail(QE_EINVAL, "cat_open: empty path");
	if (opts)
		o = *opts;
	if (o.busy_timeout_ms <= 0)
		o.busy_timeout_ms = DEFAULT_BUSY_MS;
	int target = o.max_version > 0 && o.max_version < CAT_SCHEMA_VERSION ? o.max_version : CAT_SCHEMA_VERSION;

	int created = 0; /* the file is new: a failed open removes it, so no reader finds an empty database */
	if (stat(path, &st) != 0) {
		if (errno != ENOENT)
			return qe_fail(QE_EIO, "catalog '%s': stat: %s", path, strerror(errno));
		if (!o.create)
			return qe_fail(QE_ENOTFOUND, "catalog '%s' does not exist", path);
		created = 1;
	} else if (!S_ISREG(st.st_mode)) {
		return qe_fail(QE_EINVAL, "catalog '%s' is not a regular file", path);
	}

	cat *c = qe_calloc(1, sizeof(*c));
	if (!c || !(c->path = qe_strdup(path))) {
		free(c);
		return qe_fail(QE_ENOMEM, "catalog '%s': allocate the handle", path);
	}
	c->pid = getpid();
	if (o.read_only) {
		o.create = 0;
		o.read_only = !writable_here(path);
	}
	int flags = o.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | (o.create ? SQLITE_OPEN_CREATE : 0);
	int src = sqlite3_open_v2(path, &c->db, flags, NULL);
	if (src != SQLITE_OK) {
		rc = cat_sql_fail(c, src, "open");
		goto fail;
	}
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_busy_timeout(c->db, o.busy_timeout_ms);
	if (o.read_only && (rc = open_read_only_fallback(c, o.busy_timeout_ms)))
		goto fail;

	/* Identify the file, reading only. */
	int64_t app = 0, version = 0, objects = 0;
	if ((rc = query_int(c, "PRAGMA application_id", &app, "read the file header")) ||
	    (rc = query_int(c, "PRAGMA user_version", &version, "read the file header")) ||
	    (rc = query_int(c, "SELECT count(*) FROM sqlite_master", &objects, "read the schema")))
		goto fail;
	if (app != CAT_APPLICATION_ID) {
		if (app != 0 || objects != 0) {
			rc = qe_fail(QE_ECATALOG,
				     "catalog '%s': not a qeffect catalog (a SQLite database with application_id 0x%08llx and %lld schema objects)",
				     path, (unsigned long long)app, (long long)objects);
			goto fail;
		}
		if (!o.create) {
			rc = qe_fail(QE_ECATALOG, "catalog '%s': an empty database, not a qeffect catalog", path);
			goto fail;
		}
	} else if (version > CAT_SCHEMA_VERSION) {
		rc = qe_fail(QE_EUNSUPPORTED, "catalog '%s': schema version %lld is newer than this build supports (%d)",
			     path, (long long)version, CAT_SCHEMA_VERSION);
		goto fail;
	}
	if (o.quick_check && (rc = quick_check(c)))
		goto fail;
	if (o.read_only) {
		if ((rc = cat_exec(c, "PRAGMA foreign_keys = ON", "enable foreign keys")))
			goto fail;
		*out = c;
		return 0;
	}

	/* Now it is ours (or new): configure and migrate. */
	if ((rc = cat_exec(c, "PRAGMA foreign_keys = ON", "enable foreign keys")) || (rc = ensure_wal(c)) ||
	    (rc = cat_exec(c, "PRAGMA synchronous = NORMAL", "set synchronous")) || (rc = migrate(c, target)))
		goto fail;
	*out = c;
	return 0;

fail:
	sqlite3_close_v2(c->db);
	if (created)
		remove_created(path);
	free(c->path);
	free(c);
	return rc;
}

void cat_close(cat *c)
{
	if (!c)
		return;
	/* A connection inherited through fork is not ours to close: SQLite's
	 * locks and WAL index belong to the parent. */
	if (getpid() == c->pid) {
		if (c->in_txn && !sqlite3_get_autocommit(c->db))
			sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
		sqlite3_close_v2(c->db);
	}
	free(c->path);
	free(c);
}

int cat_schema_version(cat *c, int *version)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	int64_t v = 0;
	rc = query_int(c, "PRAGMA user_version", &v, "read the schema version");
	*version = (int)v;
	return rc;
}

int cat_meta_get(cat *c, const char *key, char **value)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	*value = NULL;
	sqlite3_stmt *st;
	if ((rc = cat_prepare(c, "SELECT value FROM meta WHERE key = ?", &st, "read meta")))
		return rc;
	cat_bind_text(st, 1, key);
	int src = cat_step(st);
	if (src == SQLITE_ROW) {
		*value = cat_col_strdup(st, 0);
		rc = *value ? 0 : qe_fail(QE_ENOMEM, "catalog '%s': meta value", c->path);
	} else if (src == SQLITE_DONE) {
		rc = qe_fail(QE_ENOTFOUND, "catalog '%s': no meta key '%s'", c->path, key ? key : "");
	} else {
		rc = cat_sql_fail(c, src, "read meta");
	}
	sqlite3_finalize(st);
	return rc;
}

/* --- helpers of the row files (runs.c, ckpts.c, stores.c) ---------------------------- */

/* Step a statement that returns no rows. */
int cat_step_done(cat *c, sqlite3_stmt *st, const char *what)
{
	int src = cat_step(st);
	return src == SQLITE_DONE ? 0 : cat_sql_fail(c, src, what);
}

int cat_nomem(cat *c, const char *what)
{
	return qe_fail(QE_ENOMEM, "catalog '%s': %s: out of memory", c->path, what);
}

int cat_grow_rows(void **rows, size_t *cap, size_t n, size_t elem)
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

int cat_rows_begin(cat *c, void **rows, size_t *n, const char *sql, sqlite3_stmt **st, const char *what)
{
	int rc = cat_check(c);
	if (rc)
		return rc;
	*n = 0;
	*rows = NULL;
	return cat_prepare(c, sql, st, what);
}

int cat_rows_read(cat *c, sqlite3_stmt *st, const cat_row_shape *shape, void *ctx, void **rows, size_t *n)
{
	size_t cap = 0; /* the list starts empty: cat_rows_begin (or the caller) emptied it */
	int rc = 0, src = SQLITE_DONE;
	while (!rc && (src = cat_step(st)) == SQLITE_ROW) {
		if (cat_grow_rows(rows, &cap, *n, shape->size)) {
			rc = cat_nomem(c, shape->what);
			break;
		}
		char *row = (char *)*rows + *n * shape->size;
		int f = shape->fill(c, st, row, *n ? row - shape->size : NULL, ctx);
		if (f == 0) {
			(*n)++;
		} else if (f != CAT_ROW_SKIP) {
			rc = f;
			if (shape->release)
				shape->release(row);
		}
	}
	if (!rc && src != SQLITE_DONE)
		rc = cat_sql_fail(c, src, shape->what);
	sqlite3_finalize(st);
	if (rc)
		cat_rows_free(shape, rows, n);
	return rc;
}

void cat_rows_free(const cat_row_shape *shape, void **rows, size_t *n)
{
	for (size_t i = 0; shape->release && *rows && i < *n; i++)
		shape->release((char *)*rows + i * shape->size);
	free(*rows);
	*rows = NULL;
	*n = 0;
}
