/*
 * catalog.h - the run catalog: a SQLite database (RUN/catalog.db) that says
 * which checkpoints exist, which of them are committed, what tensors they hold
 * and which store chunks make up each tensor; plus per-step trace
 * fingerprints and losses (DESIGN.md section 8).
 *
 * The commit point of a checkpoint is cat_ckpt_commit(): one transaction,
 * flushed to disk (synchronous=FULL), that flips the checkpoint from
 * 'pending' to 'committed'.  Everything before it (chunks in the store, rows
 * here) is invisible to a restore until then; a crash at any moment leaves the
 * last committed checkpoint loadable.
 *
 * The database runs in WAL mode, so one process may write while others read,
 * and several processes may write in turn (busy_timeout waits for the lock).
 * Open the catalog in each process after fork, never before; a handle used in
 * another process fails with QE_EINVAL.  A handle is for one thread at a time.
 *
 * Errors: QE_ECATALOG for SQLite failures (message: the file, what failed and
 * sqlite3_errmsg), QE_ENOSPC when the disk holding the catalog (or its WAL)
 * is full, QE_ECORRUPT for a file that is not a database or is
 * damaged, QE_EBUSY when the lock wait timed out, QE_EEXIST for a duplicate
 * (run, tensor), QE_ENOTFOUND for a missing row, QE_EUNSUPPORTED for a catalog
 * newer than this build.  Opening a file that is not a catalog never modifies
 * it.  Messages are read with qe_last_error().
 *
 * Ownership: every struct or list a call fills is released with the matching
 * _release/_free function; strings in them are owned by it.  Pointers passed
 * in are only read during the call.
 */
#ifndef QE_CATALOG_H
#define QE_CATALOG_H

#include <stddef.h>
#include <stdint.h>

/* Schema version this build creates and migrates to. */
#define CAT_SCHEMA_VERSION 5
/* PRAGMA application_id of a qeffect catalog ("qeCT"). */
#define CAT_APPLICATION_ID 0x71654354

typedef struct cat cat;

typedef struct cat_opts {
	int create;          /* create the file (and schema) when missing or empty */
	int quick_check;     /* run PRAGMA quick_check at open; damage is QE_ECORRUPT */
	int busy_timeout_ms; /* wait for another process's lock; 0: 10000 */
	int max_version;     /* tests of migrations: stop at this version; 0: CAT_SCHEMA_VERSION */
	/*
	 * For a reader (list, inspect, verify): nothing is created.  When the file
	 * or its folder is not writable (a read-only disk, no write permission) it
	 * is opened read-only: nothing is migrated or written, a catalog of an
	 * older schema is opened as it is (cat_schema_version tells; the queries
	 * expect CAT_SCHEMA_VERSION), and when the folder cannot hold the WAL
	 * index (-shm) and no WAL is left to replay, the file is opened immutable.
	 * When both are writable it is opened as usual: a read-only connection
	 * would leave the -wal and -shm files behind when it closes.
	 */
	int read_only;
} cat_opts;

/* --- open ---------------------------------------------------------------------- */

/*
 * Open the catalog at path, creating it when create and the file is missing
 * or empty, and apply pending migrations (each in its own transaction, from
 * the file's version up to CAT_SCHEMA_VERSION).  A file that is not a SQLite
 * database, is truncated, holds another application's schema or a newer
 * version fails with an error naming the file and is left as it was.
 * OUT *out: the handle, closed with cat_close(); NULL on failure.
 */
int cat_open(const char *path, int create, cat **out);
int cat_open_ex(const char *path, const cat_opts *opts, cat **out);
/* Close (NULL is a no-op).  An open caller transaction is rolled back. */
void cat_close(cat *c);
/* The file path; valid while the handle is open. */
const char *cat_path(const cat *c);
/* OUT *version: the file's schema version. */
int cat_schema_version(cat *c, int *version);
/* OUT *value: the meta table's value for key (malloc'd, caller frees); QE_ENOTFOUND when absent.
 * Keys: application, schema_version, created, run_id (the first run created here). */
int cat_meta_get(cat *c, const char *key, char **value);

/*
 * Caller-controlled transaction (BEGIN IMMEDIATE ... COMMIT), e.g. one per
 * shard of tensors.  Calls made inside it become part of it; each call is
 * still atomic on its own (a failed call leaves the transaction as it was
 * before the call).  Not nestable.  cat_ckpt_commit() refuses to run inside.
 */
int cat_begin(cat *c);
/*
 * The same, flushed to disk at cat_commit (synchronous=FULL for this one
 * transaction): for the checkpoint commit, which adds every rank's rows and
 * flips the checkpoint to committed in one transaction.  cat_ckpt_commit()
 * runs inside it.
 */
int cat_begin_durable(cat *c);
int cat_commit(cat *c);
int cat_rollback(cat *c);

/* --- runs ---------------------------------------------------------------------- */

typedef struct cat_run {
	char *run_id;
	char *created;     /* ISO 8601 UTC */
	char *config_json; /* model + parallel + recipe + schedule configuration */
} cat_run;

/* Add a run.  config_json must be valid JSON (NULL: "{}").  QE_EEXIST when run_id exists.
 * The first run of a catalog is also recorded as meta run_id. */
int cat_run_create(cat *c, const char *run_id, const char *config_json);
/*
 * Start run_id over (`qeffect train` on a run directory whose run never
 * committed a checkpoint), in one transaction: refused with QE_EEXIST when
 * the run has a committed checkpoint, QE_ENOTFOUND when there is no such
 * run; else every checkpoint of the run (pending or aborted attempts, with
 * their shards, tensors and chunk lists), its traces and losses are deleted
 * and its configuration replaced by config_json.  The run id, its created
 * time and its stores' rows stay.  OUT *dropped (may be NULL): checkpoint
 * rows deleted.  The stores' chunks become unreferenced (each rank deletes
 * them from its own store).
 */
int cat_run_restart(cat *c, const char *run_id, const char *config_json, int64_t *dropped);
/* OUT *out: the run, released with cat_run_release(); QE_ENOTFOUND when absent. */
int cat_run_get(cat *c, const char *run_id, cat_run *out);
void cat_run_release(cat_run *r);

/* --- checkpoints --------------------------------------------------------------- */

typedef enum cat_status { CAT_PENDING = 0, CAT_COMMITTED, CAT_ABORTED } cat_status;
/* "pending", "committed", "aborted". Static string. */
const char *cat_status_name(cat_status s);

typedef struct cat_ckpt {
	int64_t id;
	char *run_id;
	int64_t step;
	int64_t e_w;
	cat_status status;
	char *created;      /* ISO 8601 UTC */
	char *committed_at; /* "" until committed */
	uint64_t bytes;
	uint64_t runtime_state_bytes;
	char *topology; /* e.g. "pp=2 dp=1" */
	char *schedule;
	char *recipe;
	char *note; /* why it was aborted or superseded; "" otherwise */
} cat_ckpt;

typedef struct cat_ckpt_rows {
	size_t n;
	cat_ckpt *rows;
} cat_ckpt_rows;

/* One chunk of a tensor: same layout as store_chunk in store/store.h. */
typedef struct cat_chunk {
	unsigned char hash[16];
	uint64_t size;
} cat_chunk;

typedef struct cat_tensor {
	int64_t id;
	int stage;
	char *name;
	char *dtype;
	char *shape; /* e.g. "[64,256]" */
	uint64_t bytes;
	char *kind; /* "param", "adam_m", "adam_v", "fp8_meta", "runtime", "data", ... */
	char *store_id; /* the store holding its chunks; "" the shared RUN/store of schema-2 runs */
	size_t n_chunks;
	cat_chunk *chunks;
} cat_tensor;

typedef struct cat_tensor_rows {
	size_t n;
	cat_tensor *rows;
} cat_tensor_rows;

typedef struct cat_shard {
	int stage;
	int rank;
	uint64_t bytes;
} cat_shard;

typedef struct cat_shard_rows {
	size_t n;
	cat_shard *rows;
} cat_shard_rows;

/*
 * Start a checkpoint of run at step: a new 'pending' row.  Several attempts at
 * one step may exist (a crashed attempt stays pending until aborted or
 * deleted); at most one per (run, step) is ever committed.  Strings may be
 * NULL (stored as "").  An unknown run fails (foreign key).  OUT *id.
 */
int cat_ckpt_begin(cat *c, const char *run_id, int64_t step, int64_t e_w, const char *topology,
		   const char *schedule, const char *recipe, int64_t *id);
/* Record that rank wrote stage's shard of a pending checkpoint (bytes written). Replaces an earlier row. */
int cat_ckpt_add_shard(cat *c, int64_t id, int stage, int rank, uint64_t bytes);
/*
 * Add a tensor of a pending checkpoint with its chunks (in order; their
 * sizes must add up to bytes).  QE_EEXIST when (stage, name) is already
 * there; QE_EINVAL when the checkpoint is not pending.
 */
int cat_ckpt_add_tensor(cat *c, int64_t id, int stage, const char *name, const char *dtype, const char *shape,
			uint64_t bytes, const char *kind, const cat_chunk *chunks, size_t n_chunks);
/* The same, naming the store that holds the chunks (store_id NULL or "": the shared store of schema-2 runs). */
int cat_ckpt_add_tensor_in(cat *c, int64_t id, const char *store_id, int stage, const char *name, const char *dtype,
			   const char *shape, uint64_t bytes, const char *kind, const cat_chunk *chunks,
			   size_t n_chunks);
/* Total payload bytes and bytes of runtime state (RNG, data position, ...) of a pending checkpoint. */
int cat_ckpt_set_sizes(cat *c, int64_t id, uint64_t bytes, uint64_t runtime_state_bytes);
/*
 * The commit point: in one transaction flushed to disk, mark pending
 * checkpoint id committed (inside a cat_begin_durable transaction, the flip
 * is part of it and reaches the disk at its cat_commit).  A checkpoint committed earlier at the same (run,
 * step) is marked aborted in the same transaction, with a note naming its
 * successor, so exactly one stays loadable.  Committing a committed
 * checkpoint again is a no-op; an aborted one is QE_EINVAL.  Refused inside
 * a plain cat_begin transaction.
 */
int cat_ckpt_commit(cat *c, int64_t id);
/* Mark a pending checkpoint aborted with a reason (may be NULL).  A committed
 * one is QE_EINVAL (delete it instead); an aborted one is left as it is. */
int cat_ckpt_abort(cat *c, int64_t id, const char *reason);
/* Delete a checkpoint of any status with its shards, tensors, chunk lists and
 * remote records.  Its store chunks become unreferenced (gc). */
int cat_ckpt_delete(cat *c, int64_t id);

/* OUT *out: every checkpoint of run (all statuses) by step then id; free with cat_ckpt_rows_free(). */
int cat_ckpt_list(cat *c, const char *run_id, cat_ckpt_rows *out);
void cat_ckpt_rows_free(cat_ckpt_rows *l);
/* OUT *out: the committed checkpoint of run with the highest step; QE_ENOTFOUND when none. */
int cat_ckpt_latest_committed(cat *c, const char *run_id, cat_ckpt *out);
/* OUT *out: the committed checkpoint of run at step; QE_ENOTFOUND when none. */
int cat_ckpt_get(cat *c, const char *run_id, int64_t step, cat_ckpt *out);
/* OUT *out: checkpoint id whatever its status; QE_ENOTFOUND when absent. */
int cat_ckpt_get_id(cat *c, int64_t id, cat_ckpt *out);
void cat_ckpt_release(cat_ckpt *r);
/* OUT *out: the tensors of checkpoint id by stage then name, each with its chunks. */
int cat_ckpt_tensors(cat *c, int64_t id, cat_tensor_rows *out);
void cat_tensor_rows_free(cat_tensor_rows *l);
/* OUT *out: the shards of checkpoint id by stage. */
int cat_ckpt_shards(cat *c, int64_t id, cat_shard_rows *out);
void cat_shard_rows_free(cat_shard_rows *l);

/*
 * Call cb once per distinct chunk hash listed by any checkpoint still in the
 * catalog (pending, committed or aborted: delete a checkpoint to release its
 * chunks), with the chunk size.  The set is read in one snapshot before the
 * first call, so cb may use the catalog.  A non-zero return stops and is
 * returned.
 */
typedef int (*cat_chunk_cb)(void *ctx, const unsigned char hash[16], uint64_t size);
int cat_referenced_chunks(cat *c, cat_chunk_cb cb, void *ctx);

/* --- stores ------------------------------------------------------------------- */

/* A rank's chunk store, as the catalog knows it (DESIGN.md section 8: one store per rank). */
typedef struct cat_store {
	char *store_id;
	char *run_id;
	int rank;    /* the rank that created it */
	char *host;  /* where it lives */
	char *path;  /* its folder on that host */
	char *created;
} cat_store;

typedef struct cat_store_rows {
	size_t n;
	cat_store *rows;
} cat_store_rows;

/* Record a store (replacing nothing: a known store_id is left as it is). */
int cat_store_put(cat *c, const char *store_id, const char *run_id, int rank, const char *host, const char *path);
/* OUT *out: every store of run by rank then id; free with cat_store_rows_free(). */
int cat_store_list(cat *c, const char *run_id, cat_store_rows *out);
void cat_store_rows_free(cat_store_rows *l);
/* The row of store_id in l, or NULL. */
const cat_store *cat_store_find(const cat_store_rows *l, const char *store_id);

/* --- replica copies (catalog/copies.c) ---------------------------------------- */

/*
 * Record that store_id (another rank's store, usually on another host) holds
 * every chunk of tensor (stage, name) of pending checkpoint id, besides the
 * store the tensor row names.  A copy already recorded is left as it is; the
 * tensor's own store is QE_EINVAL.  QE_ENOTFOUND when there is no such tensor.
 * Runs inside the caller's commit transaction (cat_begin_durable).
 */
int cat_ckpt_add_copy(cat *c, int64_t id, int stage, const char *name, const char *store_id);
/*
 * Forget every copy store_id holds of a checkpoint other than keep_id (a
 * store that keeps only the newest checkpoint: the memory tier).  OUT
 * *dropped (may be NULL): how many copy rows went.  Runs inside the caller's
 * commit transaction, so the store's claim moves to keep_id atomically.
 */
int cat_copies_drop_store_except(cat *c, const char *store_id, int64_t keep_id, int64_t *dropped);
/*
 * Make tensor (stage, name) of checkpoint id name store_id as the store
 * holding its chunks (a pull that fetched it again after its store was
 * lost).  QE_ENOTFOUND when there is no such tensor.  Inside the caller's
 * transaction when one is open.
 */
int cat_ckpt_move_tensor(cat *c, int64_t id, int stage, const char *name, const char *store_id);
/*
 * OUT *out: one row per recorded copy of a tensor of checkpoint id, by stage,
 * name, store: the tensor's row (chunks included) with store_id naming the
 * copy's store.  Free with cat_tensor_rows_free().
 */
int cat_ckpt_copies(cat *c, int64_t id, cat_tensor_rows *out);
/*
 * How redundant checkpoint id is: OUT *copies, the fewest stores holding any
 * one of its tensors (1 + its copies), and *hosts, the fewest distinct hosts
 * among them (stores without a stores row count as one unknown host).  Both
 * 0 for a checkpoint without tensors.
 */
int cat_ckpt_redundancy(cat *c, int64_t id, int *copies, int *hosts);
/*
 * The same over some stores only: those whose id begins with prefix (match
 * 1) or does not (match 0).  A tensor no selected store holds makes both 0.
 */
int cat_ckpt_redundancy_of(cat *c, int64_t id, const char *prefix, int match, int *copies, int *hosts);

/* --- traces and losses --------------------------------------------------------- */

typedef struct cat_trace {
	int64_t step;
	int stage;
	const char *category; /* "loss", "params", "adam_m", "amax", ... */
	uint64_t fingerprint;
} cat_trace;

typedef struct cat_trace_rows {
	size_t n;
	cat_trace *rows; /* categories owned by the list */
} cat_trace_rows;

/* Store rows for run in one transaction; a row for an existing (step, stage,
 * category) replaces it (a resumed run recomputes steps after its checkpoint). */
int cat_trace_put(cat *c, const char *run_id, const cat_trace *rows, size_t n);
/* OUT *out: every trace row of run by step, stage, category; free with cat_trace_rows_free(). */
int cat_trace_get(cat *c, const char *run_id, cat_trace_rows *out);
void cat_trace_rows_free(cat_trace_rows *l);

typedef struct cat_loss {
	int64_t step;
	double loss;      /* NaN round-trips as NaN */
	double eval_loss; /* NaN: none */
	double tokens_per_s;
	double ms_per_step;
	double lr;        /* the learning rate the step's update used; NaN: not recorded (before version 5) */
	double grad_norm; /* the global gradient norm before clipping; NaN: not measured */
} cat_loss;

typedef struct cat_loss_rows {
	size_t n;
	cat_loss *rows;
} cat_loss_rows;

/* Store loss rows for run in one transaction, replacing rows of the same step. */
int cat_loss_put(cat *c, const char *run_id, const cat_loss *rows, size_t n);
/* OUT *out: the loss rows of run by step; free with cat_loss_rows_free(). */
int cat_loss_get(cat *c, const char *run_id, cat_loss_rows *out);
void cat_loss_rows_free(cat_loss_rows *l);

/* --- remote copies ------------------------------------------------------------- */

typedef struct cat_remote {
	int64_t checkpoint_id;
	char *url;
	char *pushed_at; /* ISO 8601 UTC */
	char *manifest_hash;
} cat_remote;

typedef struct cat_remote_rows {
	size_t n;
	cat_remote *rows;
} cat_remote_rows;

/* Record that checkpoint id was pushed to url (replaces an earlier push to the same url). */
int cat_remote_add(cat *c, int64_t id, const char *url, const char *manifest_hash);
/* OUT *out: the remote copies of checkpoint id by url; free with cat_remote_rows_free(). */
int cat_remote_list(cat *c, int64_t id, cat_remote_rows *out);
/* Forget the copy of checkpoint id at url (remote gc deleted it).  OUT *deleted (may be NULL): rows removed, 0 or 1. */
int cat_remote_delete(cat *c, int64_t id, const char *url, int *deleted);
void cat_remote_rows_free(cat_remote_rows *l);

#endif
