/*
 * ckpt_async.h - asynchronous checkpoints (`--ckpt-async`): training stalls
 * only for the gate and a host snapshot; the store writes, the catalog rows
 * and the commit run in a background thread while training continues.
 *
 * At the quiescent boundary every rank, together: checks the gate, hears the
 * pending checkpoint id from rank 0, copies its persistent items (the same
 * ones ckpt_save writes) into host memory, and reports; then returns to
 * training.  Each rank's background thread then puts the copies' chunks into
 * its own store, flushes it once, and sends its rows to rank 0 on the comm's
 * service lane (matched by tag, so it never disturbs training's messages or
 * collectives).  Rank 0's thread waits for every rank's rows and writes them
 * and the commit in one durable transaction on its own catalog handle - the
 * same single commit point as a synchronous save.  A rank whose write fails
 * sends why instead, and rank 0 marks the checkpoint aborted.
 *
 * One write is in flight at a time.  A new request while one is in flight
 * waits for it (CKPT_ASYNC_WAIT) or is skipped by every rank
 * (CKPT_ASYNC_SKIP: all ranks skip when any is still writing).  The outcome
 * of a background write is reported by the next ckpt_async_save() (to every
 * rank alike) or by ckpt_async_drain().
 *
 * Crash consistency is that of ckpt_save: until rank 0's commit the attempt
 * is a 'pending' row no restore reads, so a process killed during background
 * persistence leaves the previous committed checkpoint loadable.  The
 * QE_CKPT_KILL phases chunk, sync, synced, row, rows, commit and committed
 * fire in the background thread too.
 *
 * Rank 0's thread waits for the other ranks' rows as long as any comm wait
 * may take (QE_COMM_TIMEOUT_MS); a rank that dies fails the wait at once.
 * Environment: QE_CKPT_ASYNC_TEST_DELAY_MS (tests only): the background thread sleeps this
 * long after flushing the store and before writing its rows, so a test can
 * keep a write in flight (wait/skip, SIGKILL while persisting).
 *
 * Calls are collective like ckpt_save; a handle belongs to one rank process
 * and its training thread.  Nothing here exits the process.
 */
#ifndef QE_CKPT_ASYNC_H
#define QE_CKPT_ASYNC_H

#include <stdint.h>

#include "ckpt/session/ckpt.h"

typedef enum ckpt_async_mode {
	CKPT_ASYNC_OFF = 0,
	CKPT_ASYNC_WAIT, /* a request while a write is in flight waits for it */
	CKPT_ASYNC_SKIP, /* ... is skipped (by every rank) */
} ckpt_async_mode;

typedef struct ckpt_async ckpt_async;

typedef struct ckpt_async_result {
	int64_t id;           /* the checkpoint started (-1 when skipped) */
	int64_t step;
	int64_t e_w;
	int skipped;          /* 1: skipped because a write was still in flight */
	uint64_t bytes;       /* all ranks' snapshot bytes */
	double stall_ms;      /* time in ckpt_async_save: what training waited */
	double wait_ms;       /* of which waiting for the previous write (CKPT_ASYNC_WAIT) */
	double snapshot_ms;   /* of which copying this rank's items to host memory */
	/* The previous background write, when this call learned its outcome: */
	int64_t done_step;    /* -1: none finished since the last report */
	double done_ms;       /* its background time, snapshot to commit (rank 0) or rows (others) */
} ckpt_async_result;

/*
 * A handle for the session's rank process.  catalog_path: the run's
 * catalog, opened again by rank 0's background thread (ignored elsewhere; may
 * be NULL there).  OUT *out: closed with
 * ckpt_async_close().
 */
int ckpt_async_open(ckpt_session *s, const char *catalog_path, ckpt_async_mode mode, ckpt_async **out);
/*
 * Take a checkpoint at the current quiescent boundary (collective).  Returns
 * after the snapshot; the write continues in the background.  Fails (every
 * rank alike) when the gate refuses, a snapshot fails, or the previous
 * background write failed.  OUT *out (may be NULL).
 */
int ckpt_async_save(ckpt_async *a, qe_rank *r, ckpt_async_result *out);

/*
 * Allocate the host snapshot memory for r's state now (pinned on cuda, which
 * takes seconds for large states), so that the first checkpoint's stall is
 * the copy alone.  Optional: without it the first save allocates.  Returns
 * 0, QE_ENOMEM, QE_ECUDA; nothing is lost on failure (the save retries).
 */
int ckpt_async_prepare(ckpt_async *a, qe_rank *r);
/* Wait for the write in flight, if any, and return its outcome. OUT *out (may be NULL): done_step, done_ms. */
int ckpt_async_drain(ckpt_async *a, ckpt_async_result *out);
/*
 * The end of a run, on every rank together (a collective when the world has
 * more than one rank): drain, then agree on every rank's outcome.  When every
 * last write succeeded, the last checkpoint committed, so the memory tier
 * drops what it replaced (ckpt_memtier.c) and memory ends holding the latest
 * checkpoint only; after any failure memory keeps everything.  Returns this
 * rank's drain outcome, else the agreement's.
 */
int ckpt_async_finish(ckpt_async *a, qe_rank *r, ckpt_async_result *out);
/* Drain, then free (NULL is a no-op). */
void ckpt_async_close(ckpt_async *a);
/* "wait", "skip", "off". */
const char *ckpt_async_mode_name(ckpt_async_mode m);

#endif
