/*
 * fault.h - fault injection for the write paths, in the manner of SQLite's
 * fault loops (test_malloc.c, malloc_common.tcl): let N-1 calls of one kind
 * succeed, fail the Nth as the real call would fail, and check that the
 * operation either succeeds or returns an error with nothing leaked and the
 * committed state intact (tests/cli/fault_loop.sh).
 *
 * The kinds are the calls through which the checkpoint service changes
 * anything: allocations, LMDB puts, commits and syncs, SQLite steps and
 * commits, write, fsync and rename, the backend's copy and each S3 request.
 * Each call site asks qe_fault_hit(kind) (or calls a wrapper below) just
 * before the real call; this module lives in runtime/core, the layer every
 * write path (store, catalog, ckpt, cli) already depends on.
 *
 * Set by (through qe_rt_options, which cli fills from the variables of the
 * same names; runtime/core/rt_options.h):
 *  - QE_FAULT=KIND:N[,KIND:N...]: the Nth call (1-based, counted from the
 *    start of the process or from the fork that made it) of KIND fails, once.
 *  - QE_FAULT_COUNT=1 prints, at exit, one line per process on stderr with
 *    the number of calls of every kind ("fault counts (pid P): alloc=12
 *    lmdb_put=3 ... fired=fsync#2"); QE_FAULT_COUNT=PATH appends that line to
 *    the file PATH instead.  A loop test learns the range of N from it.
 *
 * An injected failure looks like the real one: the wrappers return -1 (or
 * NULL) with errno set (ENOMEM for allocations, ENOSPC for writes, EIO for
 * fsync and rename); other call sites return the code of their library
 * (EIO from LMDB, SQLITE_IOERR, a curl error, QE_EIO from a copy).  So the
 * existing error paths run.  The first message qe_fail() records on that
 * thread afterwards ends with "(injected fault: fsync #3)", so the command's
 * error names the call that was made to fail.
 *
 * Counters are process-wide and thread-safe; a forked child starts from zero.
 */
#ifndef QE_FAULT_H
#define QE_FAULT_H

#include <stddef.h>
#include <sys/types.h>

/* X(ENUM, name, where it is injected) */
#define QE_FAULT_LIST(X)                                                                     \
	X(ALLOC, "alloc", "malloc, calloc, realloc and strdup in store/, catalog/ and ckpt/")  \
	X(LMDB_PUT, "lmdb_put", "mdb_put of a chunk, its touch time or a store record")       \
	X(LMDB_COMMIT, "lmdb_commit", "mdb_txn_commit of a store write transaction")          \
	X(LMDB_SYNC, "lmdb_sync", "mdb_env_sync of store_sync")                               \
	X(SQLITE_STEP, "sqlite_step", "sqlite3_step of a catalog statement")                  \
	X(SQLITE_COMMIT, "sqlite_commit", "COMMIT of a catalog transaction")                  \
	X(WRITE, "write", "write and pwrite of chunk payloads and run files")                 \
	X(FSYNC, "fsync", "fsync and fdatasync of stores, run files and folders")             \
	X(RENAME, "rename", "rename of a finished temporary file into place")                 \
	X(COPY, "copy", "the backend's copy (ops->copy) of checkpoint data")                 \
	X(S3, "s3", "each S3 request (one curl_easy_perform, retries counted apart)")

typedef enum qe_fault_kind {
#define QE_FAULT_ENUM_(e, name, where) QE_FAULT_##e,
	QE_FAULT_LIST(QE_FAULT_ENUM_)
#undef QE_FAULT_ENUM_
	QE_FAULT_KINDS
} qe_fault_kind;

/*
 * Take QE_FAULT and QE_FAULT_COUNT from qe_rt_options_get() (done on first
 * use otherwise; cli sets the options, then calls it, so that a malformed
 * value is a usage error).  QE_EINVAL
 * with a message naming the bad entry; the faults are then off.
 */
int qe_fault_init(void);

/*
 * Count one call of kind; 1 when this call must fail (then errno is set as
 * the kind's wrapper would set it and the thread's next qe_fail message
 * names the fault), else 0.
 */
int qe_fault_hit(qe_fault_kind kind);

/* "alloc", "fsync", ... Static string; "?" for an unknown kind. */
const char *qe_fault_name(qe_fault_kind kind);

/*
 * Write the counts line when QE_FAULT_COUNT asks for it (registered with
 * atexit by qe_fault_init; a process that leaves with _exit, like a forked
 * rank, calls it itself).  Prints once per process.
 */
void qe_fault_report(void);

/*
 * For status.c: when a fault fired on this thread and no message named it
 * yet, append " (injected fault: KIND #N)" to msg (cap bytes) and forget it.
 */
void qe_fault__annotate(char *msg, size_t cap);

/* The real calls, failing as described above when their kind's turn comes. */
void *qe_malloc(size_t n);
void *qe_calloc(size_t n, size_t size);
void *qe_realloc(void *p, size_t n);
char *qe_strdup(const char *s);
ssize_t qe_write(int fd, const void *buf, size_t n);
ssize_t qe_pwrite(int fd, const void *buf, size_t n, off_t off);
int qe_fsync(int fd);
int qe_fdatasync(int fd);
int qe_rename(const char *from, const char *to);

#endif
