/*
 * ckpt_policy.h - when a training run checkpoints, and what each checkpoint
 * boundary does: the one call a training loop makes after every step
 * (issue 36 item 3).
 *
 * The policy, as train and resume have always run it:
 *  - a checkpoint after every step that is a multiple of `every`
 *    (--ckpt-every K; 0: none), and one when the ranks stop early on a
 *    signal, unless that step's was just taken;
 *  - synchronous (ckpt_save) or, with an async handle (--ckpt-async), a
 *    snapshot whose write continues in the background (ckpt_async_save);
 *  - retention (--ckpt-keep N, ckpt_retain_local) needs no write in flight:
 *    with async checkpoints the write in flight is drained and retention runs
 *    before the new snapshot; with synchronous ones it runs after the
 *    persist point;
 *  - a persist point (--ckpt-persist-every K2, ckpt_persist_point) after the
 *    boundary's checkpoint call;
 *  - at the end of training, after the async drain (the caller's, which
 *    keeps its own error ordering): the last push, waited for, then a last
 *    retention (ckpt_policy_end).
 * Retention never collects the checkpoint being pushed nor the one the next
 * point would push (rank 0's pins).  A retention that fails is reported
 * (CKPT_POLICY_RETAINED with rc) and training goes on, unless the comm
 * failed; a failed push is an event, never an error (ckpt_persist.h).
 *
 * What each boundary did reaches the caller through one callback, in the
 * order it happened, so the command prints its lines; nothing here prints
 * or exits.  Every call is collective like ckpt_save; a handle belongs to
 * one rank process and its training thread.
 */
#ifndef QE_CKPT_POLICY_H
#define QE_CKPT_POLICY_H

#include <stdint.h>

#include "ckpt/protocol/ckpt_async.h"
#include "ckpt/session/ckpt.h"
#include "ckpt/tiers/ckpt_persist.h"

/* What one boundary does, in this order (ckpt_policy_plan). */
enum {
	CKPT_DO_DRAIN = 1 << 0,         /* wait for the async write in flight (before retention) */
	CKPT_DO_RETAIN_BEFORE = 1 << 1, /* retention before the save (async: nothing in flight now) */
	CKPT_DO_SAVE = 1 << 2,          /* a checkpoint of this step */
	CKPT_DO_ASYNC = 1 << 3,         /* ... as an async snapshot (with CKPT_DO_SAVE) */
	CKPT_DO_PERSIST = 1 << 4,       /* a persist point */
	CKPT_DO_RETAIN_AFTER = 1 << 5,  /* retention after the persist point (synchronous saves) */
};

typedef struct ckpt_policy_opts {
	int64_t every;            /* a checkpoint after every step that is a multiple of this; 0: none */
	ckpt_async_mode async;    /* CKPT_ASYNC_OFF: synchronous saves; else an async handle is given */
	int keep;                 /* local retention: the latest `keep` committed checkpoints; 0: off */
	uint64_t keep_grace_s;    /* unreferenced chunks younger than this stay in the stores */
	ckpt_persist_opts persist; /* persist.every 0: no persistent tier (the other fields are then unused) */
} ckpt_policy_opts;

/*
 * The plan of the boundary after `step`: CKPT_DO_* bits, 0 when the step is no
 * boundary.  last: the step of the last checkpoint this process took (-1:
 * none).  stop: training stops after this step (the ranks agreed on a
 * signal): a boundary unless `last` is this step.  Pure: no handle, no I/O.
 */
unsigned ckpt_policy_plan(const ckpt_policy_opts *o, int64_t last, int64_t step, int stop);

typedef enum ckpt_policy_what {
	CKPT_POLICY_DRAINED,  /* the write in flight waited for: async->done_step (-1: none), done_ms */
	CKPT_POLICY_RETAINED, /* retention ran: retain; rc != 0: it failed and training goes on
			       * (qe_last_error() says why, during the callback) */
	CKPT_POLICY_SAVED,    /* a synchronous checkpoint committed: saved */
	CKPT_POLICY_SNAPSHOT, /* an async snapshot taken or skipped: async (with the earlier write it
			       * learned of: done_step, done_ms) */
	CKPT_POLICY_PERSIST,  /* a persist point: persist (at_end: one of the final wait's points) */
	CKPT_POLICY_END_WAIT, /* the end of training: the push of `step` still runs and is waited for */
} ckpt_policy_what;

typedef struct ckpt_policy_event {
	ckpt_policy_what what;
	int64_t step;         /* the boundary's step; END_WAIT: the step being pushed */
	int rc;               /* RETAINED only */
	int at_end;           /* PERSIST only: from ckpt_policy_end */
	/* The result the event is about (the one matching `what`, else NULL); valid during the callback. */
	const ckpt_result *saved;
	const ckpt_async_result *async;
	const ckpt_persist_event *persist;
	const ckpt_retain_result *retain;
} ckpt_policy_event;

typedef void (*ckpt_policy_event_cb)(void *ctx, const ckpt_policy_event *ev);

typedef struct ckpt_policy ckpt_policy;

/*
 * A policy for the session's rank process, opened after any restore (only
 * checkpoints above o->persist.min_step are pushed).  async: the async
 * handle when o->async is not CKPT_ASYNC_OFF, else NULL (not owned; must
 * outlive the policy).  Opens the persistent tier when o->persist.every > 0
 * (QE_EINVAL for a bad URL or period, "--ckpt-persist-every: ...").
 * on_event (may be NULL) hears every event with ctx.  OUT *out: closed with
 * ckpt_policy_close().
 */
int ckpt_policy_open(ckpt_session *s, ckpt_async *async, const ckpt_policy_opts *o, ckpt_policy_event_cb on_event,
		     void *ctx, ckpt_policy **out);
/*
 * After every training step (collective): the boundary's plan, done, when
 * step is one.  A failed checkpoint fails with its code and "checkpoint at
 * step N: ..."; a failed persist point or retention only when the comm
 * failed (the ranks can no longer agree).
 */
int ckpt_policy_step(ckpt_policy *p, qe_rank *r, int64_t step);
/* Training stops early after `step` (the ranks agreed on a signal): its checkpoint unless just taken. */
int ckpt_policy_stop(ckpt_policy *p, qe_rank *r, int64_t step);
/*
 * The end of training (collective, after the async drain): the last push
 * (ckpt_persist_finish, its progress to cb), then a last retention.  Nothing
 * when neither tier is on.
 */
int ckpt_policy_end(ckpt_policy *p, qe_rank *r, ckpt_persist_progress_cb cb, void *cb_ctx);
/* Steps after which this rank's push thread was still running (--json). */
int64_t ckpt_policy_steps_while_pushing(const ckpt_policy *p);
/* Free, closing the persistent tier (NULL is a no-op). */
void ckpt_policy_close(ckpt_policy *p);

#endif
