/*
 * train.h - the training loop of one rank: steps until a target step count,
 * held-out evaluation, progress lines, traces, and a hook after every step
 * where the caller persists traces and takes checkpoints.
 *
 * The loop itself knows nothing of the catalog or the store: the hook (the
 * CLI wires it to catalog/ and ckpt/) decides what to keep.
 */
#ifndef QE_TRAIN_H
#define QE_TRAIN_H

#include "runtime/exec/rank.h"
#include "runtime/train/trace.h"

typedef struct qe_step_report {
	int64_t step;        /* steps done after this one (1-based) */
	float loss;          /* mean training loss of the step */
	float eval_loss;     /* held-out loss when evaluated at this step, else NaN */
	double ms;           /* wall time of the step on this rank */
	double tokens_per_s;
	double grad_norm;    /* global gradient norm before clipping (qe_rank_grad_norm); NaN: not measured */
	double lr;           /* the learning rate the step's update used */
	const qe_trace_row *rows; /* this rank's fingerprints of the step */
	int nrows;
} qe_step_report;

typedef struct qe_train_hooks {
	void *ctx;
	/* Called on every rank after every step; a non-zero return stops the loop with that status. */
	int (*on_step)(void *ctx, qe_rank *r, const qe_step_report *rep);
	/* 1: fingerprint the state after every step (costs a pass over all state; off without a consumer) */
	int want_trace;
} qe_train_hooks;

/*
 * Run steps until qe_rank_steps_done(r) == until, with a report of each step
 * to hooks->on_step (the command prints the progress line from it), or until
 * the ranks agree to stop early (qe_rank_stop_agreed, after on_step): then
 * it returns QE_OK with fewer steps done, the same number on every rank.
 */
int qe_train_run(qe_rank *r, const qe_data *data, int64_t until, const qe_train_hooks *hooks);

#endif
