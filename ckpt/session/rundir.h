/*
 * rundir.h - the one owner of a run directory's layout (DESIGN.md section 8):
 * which file is where, who may write it, what a store says about itself, and
 * the one opener of a run (ckpt_run_open).
 *
 *   RUN/catalog.db            the catalog; only on rank 0's host, written only by rank 0
 *   RUN/lock                  the writer lock (flock) held for the life of a writing job
 *   STORES/rank-R/            rank R's LMDB chunk store on this host
 *   STORES/rank-R/identity    run id, rank, store id and host of that store
 *   STORES/rank-R/lock        held by the rank process writing the store
 *   RUN/store/                the one shared store of schema-2 runs: read, never written
 *
 * STORES is LOCAL/stores when a node-local folder is named (QE_LOCAL_DIR, set
 * by --local-dir), else RUN/stores.  Nothing here assumes that two ranks see
 * one directory: with the same command line on every host, RUN and LOCAL are
 * different disks on different hosts, and each rank finds the stores on its
 * own disk with ckpt_local_stores_scan().
 *
 * LMDB and SQLite must not live on network filesystems (LMDB's locking and
 * SQLite's WAL both need every process on one host): ckpt_fs_check() refuses
 * NFS, CIFS/SMB, Lustre, GPFS, Ceph, FUSE and the like unless
 * QE_ALLOW_NETWORK_FS=1 (set by --allow-network-fs).
 *
 * Every call returns 0 or a QE_E* code with a message naming the path.
 * Nothing here exits the process.
 */
#ifndef QE_CKPT_RUNDIR_H
#define QE_CKPT_RUNDIR_H

#include <stddef.h>

#include "catalog/catalog.h"
#include "store/store.h"

#define CKPT_PATH_MAX 1200
#define CKPT_STORE_ID_MAX 48
#define CKPT_HOST_MAX 256

/* Paths: OUT buf (len bytes).  QE_EINVAL when the result does not fit. */
int ckpt_rundir_catalog(const char *run_dir, char *buf, size_t len);
/* Make dir and its missing parents (mkdir -p); the error names the folder that could not be made. */
int ckpt_mkdirs(const char *dir);
/* STORES: LOCAL/stores (QE_LOCAL_DIR) or RUN/stores. */
int ckpt_rundir_stores(const char *run_dir, char *buf, size_t len);
/* STORES/rank-R. */
int ckpt_rundir_rank_store(const char *run_dir, int rank, char *buf, size_t len);
/* RUN/store, the schema-2 shared store. */
int ckpt_rundir_legacy_store(const char *run_dir, char *buf, size_t len);

/* This host's name (gethostname; "unknown" when it fails). */
void ckpt_host_name(char *buf, size_t len);

/* --- store identity ----------------------------------------------------------- */

typedef struct ckpt_store_identity {
	char run_id[64];
	int rank;                          /* the rank that created the store */
	char store_id[CKPT_STORE_ID_MAX];  /* "" for the schema-2 shared store */
	char host[CKPT_HOST_MAX];          /* where it was created */
} ckpt_store_identity;

/* Read STORE/identity.  QE_ENOTFOUND when the store has none; QE_ECORRUPT naming the file when malformed. */
int ckpt_store_identity_read(const char *store_dir, ckpt_store_identity *out);
/*
 * The stores of this host's run directory (RUN/store and STORES/rank-*) that
 * carry an identity all name run_id; else QE_EMISMATCH naming the store, its
 * run, catalog_path and run_id (a catalog copied from another run).
 */
int ckpt_rundir_check_owner(const char *run_dir, const char *run_id, const char *catalog_path);
/*
 * Give a new store folder its identity (a fresh random store id), written
 * durably (temp file, fsync, rename, fsync of the folder).  An existing
 * identity is read instead; one of another run is QE_EMISMATCH naming both.
 */
int ckpt_store_identity_ensure(const char *store_dir, const char *run_id, int rank, ckpt_store_identity *out);

/*
 * The memory tier (--ckpt-memory MEM, env QE_CKPT_MEMORY_DIR): replica
 * targets also keep the copies of the latest checkpoint in a store under
 * MEM/<run id>/rank-R, where MEM is a memory filesystem (tmpfs, ramfs) of
 * their host, so ranks restarted while their hosts live restore without
 * reading a disk.  Such a store's id begins with 'm' (disk stores' with
 * 'r'), which is how the catalog, the restore plan and list tell the tiers
 * apart.  MEM is NULL when no memory tier is configured.
 */
const char *ckpt_memory_dir(void);
#define CKPT_MEMORY_STORE_PREFIX "m"
/* MEM/<run_id>/rank-R; QE_ENOTFOUND when no memory tier is configured. */
int ckpt_rundir_memory_store(const char *run_id, int rank, char *buf, size_t len);
/* QE_EINVAL naming dir and its filesystem unless dir (or its nearest existing parent) is tmpfs or ramfs. */
int ckpt_memory_fs_check(const char *dir);
int ckpt_store_id_is_memory(const char *store_id);
/* ckpt_store_identity_ensure for a memory-tier store: its new id begins with 'm'. */
int ckpt_store_identity_ensure_memory(const char *store_dir, const char *run_id, int rank, ckpt_store_identity *out);

/* A store this host can see. */
typedef struct ckpt_local_store {
	ckpt_store_identity id;
	char path[CKPT_PATH_MAX];
} ckpt_local_store;

/*
 * Every store of run_id on this host: STORES/rank-* with an identity of
 * this run, the memory tier's MEM/<run_id>/rank-* when one is configured,
 * and the schema-2 RUN/store when its run_id file names the run.  Folders of another run are skipped with a warning.  OUT *out
 * (malloc'd, free()) and *n; an empty list when there is none.
 */
int ckpt_local_stores_scan(const char *run_dir, const char *run_id, ckpt_local_store **out, int *n);

/* --- the stores of a run on this host, open ------------------------------------------ */

typedef struct ckpt_storeset ckpt_storeset;

/*
 * Open every store of run_id this host sees (ckpt_local_stores_scan), read-only
 * unless writable.  An empty set is not an error.  OUT *out: closed with
 * ckpt_storeset_close().  Open after fork.
 */
int ckpt_storeset_open(const char *run_dir, const char *run_id, int writable, ckpt_storeset **out);
void ckpt_storeset_close(ckpt_storeset *s);
int ckpt_storeset_count(const ckpt_storeset *s);
/* Store i (0 .. count-1) and where it is; valid while the set is open. */
store *ckpt_storeset_at(ckpt_storeset *s, int i);
const ckpt_local_store *ckpt_storeset_where(const ckpt_storeset *s, int i);
/* The index of the store with store_id ("" the schema-2 store), or -1 when this host has none. */
int ckpt_storeset_find(const ckpt_storeset *s, const char *store_id);
/*
 * Copy chunk h from whichever store here holds it (chunks are content
 * addressed and re-hashed on read, so any copy is the chunk).  QE_ENOTFOUND
 * naming the chunk when none does.  OUT *size as store_get_chunk.
 */
int ckpt_storeset_get_chunk(ckpt_storeset *s, const store_hash *h, void *dst, size_t cap, uint64_t *size);

/* --- writer locks ----------------------------------------------------------------- */

typedef struct ckpt_lock ckpt_lock;

/*
 * Take the exclusive lock file `path` (flock, released by the kernel when
 * the process dies) without waiting, and write who holds it (pid, host,
 * command) into it.  Held: QE_EBUSY naming the holder's pid and command.
 * OUT *out: released with ckpt_unlock().  Forked children share the lock.
 */
int ckpt_lock_take(const char *path, const char *command, ckpt_lock **out);
/* RUN/lock, the lock of every command that writes the run. */
int ckpt_rundir_lock(const char *run_dir, const char *command, ckpt_lock **out);
void ckpt_unlock(ckpt_lock *l);

/* --- filesystems ----------------------------------------------------------------- */

/*
 * Refuse a network filesystem under path (or its nearest existing parent):
 * QE_EUNSUPPORTED naming the path and the filesystem, unless
 * QE_ALLOW_NETWORK_FS=1.  what says what would live there ("the catalog").
 */
int ckpt_fs_check(const char *path, const char *what);

/* --- a run, open ---------------------------------------------------------------------- */

/*
 * The one opener of a run directory: the checkpoint commands (list, inspect,
 * verify, gc, push, ...) and cli's resume and compare (cli_run_open) all open
 * a run through it.
 */

typedef struct ckpt_run ckpt_run;

enum {
	CKPT_RUN_STORE = 1, /* also open the run's stores on this host (read-only unless CKPT_RUN_WRITE) */
	CKPT_RUN_WRITE = 2, /* open the catalog and the stores for writing (gc); else both read-only */
};

/*
 * Open run directory dir: its catalog (never created: a folder without
 * catalog.db is QE_ENOTFOUND naming it; read-only without CKPT_RUN_WRITE, so
 * a run on a read-only disk can be read, unless its schema is older and must
 * be migrated) and, with CKPT_RUN_STORE, every
 * store of the run on this host (STORES/rank-* and a schema-2 RUN/store).
 * Having none is not an error here: the queries (ckpt/query/ckpt_query.h)
 * treat the chunks of a store not on this host as missing and say where it
 * was.  Refuses a catalog beside another run's stores
 * (ckpt_rundir_check_owner) and a catalog with no run yet.  Open after fork.
 * OUT *out: closed with ckpt_run_close(); NULL on failure.
 */
int ckpt_run_open(const char *dir, int flags, ckpt_run **out);
void ckpt_run_close(ckpt_run *r);
/* Valid while r is open. */
const char *ckpt_run_dir(const ckpt_run *r);
const char *ckpt_run_id(const ckpt_run *r);
const char *ckpt_run_config_json(const ckpt_run *r); /* the run's configuration as stored */
const char *ckpt_run_created(const ckpt_run *r);
cat *ckpt_run_catalog(ckpt_run *r);
/* The run's stores on this host (CKPT_RUN_STORE; possibly none), or NULL when not opened. */
ckpt_storeset *ckpt_run_stores(ckpt_run *r);

#endif
