/*
 * progress.h - the progress line of train and resume, and the summary line
 * that ends every run, as text or as JSON lines (--log-format json).
 *
 * Rank 0 prints; every rank tracks the same numbers (the loss, learning rate
 * and gradient norm are the same on every rank).  Model FLOPs are
 * qe_model_flops_per_token (6 N plus 12 L H T per token, forward and
 * backward) times the tokens of a step, over its wall time on rank 0.
 */
#ifndef QE_CLI_PROGRESS_H
#define QE_CLI_PROGRESS_H

#include <stdint.h>

#include "runtime/job/config.h"
#include "runtime/train/train.h"

typedef struct cli_progress {
	int print;              /* this process prints (rank 0, not --quiet) */
	int json;               /* --log-format json */
	int peak;               /* show peak backend memory (cuda) */
	int log_every;
	int64_t first, until;   /* steps done when this process started; the last step */
	double tokens_per_step; /* all replicas */
	double flops_per_token;
	double t0_ms;           /* when the first step of this process started */
	double ms_sum;          /* wall ms of this process's steps */
	int64_t steps;          /* steps this process ran */
	double last_loss, last_eval, best_eval;
	double last_norm;
} cli_progress;

/* Set up before the first step; done = the steps the run has before it (a resume's checkpoint). */
void cli_progress_init(cli_progress *p, const qe_train_config *cfg, int print, int json, int peak, int64_t done,
		       int64_t until);
/* After each step: the line, on the steps --log-every names and the last. */
void cli_progress_step(cli_progress *p, const qe_step_report *rep);
/* The one summary line, after the last step (nothing when no step ran). */
void cli_progress_summary(const cli_progress *p);

#endif
