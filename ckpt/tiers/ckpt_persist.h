/*
 * ckpt_persist.h - the persistent tier of a training run (`--ckpt-persist-every
 * K2`): every K2-th step's committed checkpoint is pushed to S3-compatible
 * storage by background threads while training goes on, in the layout of
 * `qeffect push` (ckpt_remote.h: content-addressed chunks, the manifest
 * written last as the remote commit), and recorded in the catalog as push
 * records it (cat_remote_add).  Local checkpoints (`--ckpt-every K`, with
 * replicas) stay the frequent tier; this one is rare and survives the loss of
 * every host.
 *
 * Protocol.  At each persist point (a collective call on the training
 * thread, made at every checkpoint boundary and once at the end) rank 0
 * decides, from its catalog alone: when its push thread is still running,
 * nothing starts (the point is "busy"); otherwise the oldest committed
 * checkpoint of this job whose step is a multiple of K2 and that has no
 * remote copy at the URL yet - so a push starts only after the commit,
 * pushes that fall behind catch up in order, and a failed one is tried again
 * at the next point (after a second failure it is left for `qeffect push`) -
 * and broadcasts the choice.
 * Then every rank starts a thread and returns:
 *  - rank 0's thread reads the checkpoint's rows on its own catalog handle
 *    and sends every rank the chunks its store holds (the rows name the
 *    store, the stores table names its rank; service lane tag
 *    CKPT_SVC_PERSIST_PLAN), uploads its own, then waits for every rank's
 *    report (CKPT_SVC_PERSIST_REPORT);
 *  - every other rank's thread uploads the chunks of its plan from its own
 *    store (HEAD first: a chunk already there is not sent again; every read
 *    re-hashed by the store) and reports, success or not, exactly once;
 *    until then it sends rank 0 its progress (bytes done) on the same tag at
 *    least every QE_COMM_TIMEOUT_MS / 4, so that rank 0's wait is bounded
 *    by a rank's silence, not by the length of its uploads;
 *  - when every rank reported success, rank 0 writes the manifest (the
 *    remote commit), records the copy in the catalog, and applies the remote
 *    retention (ckpt_remote_gc with keep_last = keep: manifests first, then
 *    unreferenced chunks older than the grace).
 * A push that fails anywhere writes no manifest: the remote never shows a
 * checkpoint with missing chunks, and training is not stopped - the outcome
 * is reported by the next point (ckpt_persist_event) and the checkpoint is
 * tried again at the next point, or left for `qeffect push`.
 *
 * Training stalls only for the decision (one broadcast); the catalog reads,
 * the uploads and the manifest are in the threads, on the comm's service
 * lane and on one S3 handle per thread.
 *
 * The wait at the end of training (ckpt_persist_finish) is bounded the same
 * way: while rank 0 waits for its thread it tells every other rank, at
 * least every QE_COMM_TIMEOUT_MS / 4, that the push still runs
 * (CKPT_SVC_PERSIST_WAIT), then that it is over.  A rank that dies closes
 * its connections and fails the others at once; one that hangs, or whose
 * host is lost, is silent and fails them after QE_COMM_TIMEOUT_MS (rank 0
 * hears the others only after its own uploads: a silent rank is noticed
 * then).  Rank 0 logs the push's progress (bytes of all ranks) every 30 s.
 *
 * Test hooks:
 *  - QE_CKPT_PERSIST_PAUSE=STEP:FILE makes rank 0's push thread, before it
 *    writes the manifest of STEP, create FILE and wait (up to 300 s) until
 *    FILE is removed - a test sees training go on while the push is held.
 *  - QE_CKPT_PERSIST_SLOW_MS=N[:RANK] makes the push thread of every rank
 *    (of global rank RANK only, when given) sleep N ms (0..600000) before
 *    each chunk it uploads, so that a test's push lasts as long as it needs
 *    (longer than QE_COMM_TIMEOUT_MS) on a fast S3, on the rank it chooses.
 *
 * Nothing here exits or prints except through qe_log.  A handle belongs to
 * one rank process and its training thread.
 */
#ifndef QE_CKPT_PERSIST_H
#define QE_CKPT_PERSIST_H

#include <stdint.h>

#include "ckpt/session/ckpt.h"

typedef struct ckpt_persist ckpt_persist;

typedef struct ckpt_persist_opts {
	const char *url;          /* s3://BUCKET/PREFIX (required) */
	const char *endpoint;     /* NULL: AWS_ENDPOINT_URL, else AWS */
	int64_t every;            /* push checkpoints whose step is a multiple of this (>= 1) */
	int keep;                 /* remote retention: the keep latest manifests of the run; 0 keeps all */
	uint64_t grace_s;         /* remote retention: unreferenced chunks younger than this stay */
	const char *catalog_path; /* rank 0: the run's catalog, opened again by its push thread */
	int64_t min_step;         /* only checkpoints above this step (the job's first step) are pushed */
} ckpt_persist_opts;

/* What one persist point did, and the push that finished since the last one (rank 0 knows it all). */
typedef struct ckpt_persist_event {
	int started;               /* a push of `step` started */
	int64_t step;
	int busy;                  /* the previous push was still running: nothing started */
	int done;                  /* a push finished since the last event */
	int64_t done_step;
	int done_rc;               /* 0 pushed; else why not (done_msg) */
	char done_msg[1024];
	char done_url[1400];       /* the manifest's URL when pushed, else the remote's */
	uint64_t chunks, chunks_uploaded, bytes_uploaded;
	int remote_dropped;        /* manifests the remote retention deleted */
	double done_ms;
} ckpt_persist_event;

/* Progress of the push in flight (rank 0): for the wait at the end of training. */
typedef struct ckpt_persist_progress {
	int64_t step;
	uint64_t chunks_total;     /* rank 0's own chunks to upload */
	uint64_t chunks_done;
	uint64_t bytes_total;      /* every rank's chunks (0 until planned) */
	uint64_t bytes_done;       /* of those, uploaded or found there: rank 0's, and the others' as they said */
	int ranks_done;            /* reports heard, of ranks_total */
	int ranks_total;
	const char *phase;         /* "planning", "uploading", "waiting for ranks", "manifest", "retention" */
} ckpt_persist_progress;
typedef void (*ckpt_persist_progress_cb)(void *ctx, const ckpt_persist_progress *p);

/* QE_EINVAL for a bad URL or period.  OUT *out: freed with ckpt_persist_close(). */
int ckpt_persist_open(ckpt_session *s, const ckpt_persist_opts *o, ckpt_persist **out);
/*
 * A persist point (collective).  OUT *ev (may be NULL).  Fails only when the
 * ranks cannot agree (the comm failed); a failed push is an event, not a
 * failure.
 */
int ckpt_persist_point(ckpt_persist *p, qe_rank *r, ckpt_persist_event *ev);
/*
 * At the end of training (collective): wait for the push in flight, then
 * push every due checkpoint not yet on the remote, one after the other,
 * waiting for each - until none is left or a push fails (the rest is left
 * for `qeffect push`).  cb (may be NULL) hears the progress about once a
 * second while rank 0 waits; on_event (may be NULL) hears every point's
 * event (a finished push: done).
 */
typedef void (*ckpt_persist_event_cb)(void *ctx, const ckpt_persist_event *ev);
int ckpt_persist_finish(ckpt_persist *p, qe_rank *r, ckpt_persist_progress_cb cb, void *ctx,
			ckpt_persist_event_cb on_event, void *ev_ctx);
/* 1 while this rank's push thread runs. */
int ckpt_persist_busy(ckpt_persist *p);
/* The step whose push is in flight, -1 when none (rank 0: local retention pins it). */
int64_t ckpt_persist_inflight(ckpt_persist *p);
/* Rank 0: the step the next point would push (the newest due one not on the remote), -1 when none. */
int64_t ckpt_persist_due(ckpt_persist *p);
/* Wait for the thread (if any) and free (NULL is a no-op). */
void ckpt_persist_close(ckpt_persist *p);

/* --- local retention at checkpoint boundaries (ckpt_retain.c, --ckpt-keep) ---------- */

typedef struct ckpt_retain_result {
	uint64_t dropped;          /* checkpoints dropped from the catalog (rank 0) */
	uint64_t kept;
	uint64_t chunks_deleted;   /* from this rank's own store */
	uint64_t bytes_reclaimed;
	uint64_t chunks_young;     /* unreferenced but within the grace: left */
} ckpt_retain_result;

/*
 * Collective, with no checkpoint write in flight on any rank: rank 0 drops
 * the checkpoints gc's policy does not keep (keep latest committed, pinned
 * steps - the one being pushed - and pending ones in progress), catalog
 * rows first in one durable transaction; then every rank deletes from its
 * own store the chunks no remaining checkpoint lists (rank 0 sends the list)
 * and that are older than grace_s.  A failure leaves orphan chunks at worst.
 * OUT *out (may be NULL).
 */
int ckpt_retain_local(ckpt_session *s, qe_rank *r, int keep, const int64_t *pins, size_t npins, uint64_t grace_s,
		      ckpt_retain_result *out);

#endif
