/*
 * run_tiers.h - the checkpoint tiers inside a rank process of train and
 * resume: the background push of --ckpt-persist-every (ckpt/tiers/ckpt_persist.h)
 * and the retention of --ckpt-keep at checkpoint boundaries, with what they
 * print and what `--json` reports.  cli/run.c calls these at the points of
 * its training loop; the tier flags are read from the variables
 * tier_flags.c sets.
 */
#ifndef CLI_RUN_TIERS_H
#define CLI_RUN_TIERS_H

#include <stdint.h>

#include "ckpt/session/ckpt.h"

typedef struct cli_run_tiers cli_run_tiers;

/*
 * Open the tiers the flags ask for (*out stays NULL when none).  first_step:
 * the step this job starts at (only later checkpoints are pushed);
 * catalog_path: rank 0's catalog (the push thread opens its own handle).
 */
int cli_run_tiers_open(ckpt_session *ck, qe_rank *r, const char *catalog_path, int64_t first_step, int quiet,
		       cli_run_tiers **out);
/* After every training step (counts the steps done while a push ran). */
void cli_run_tiers_step(cli_run_tiers *t);
/* 1 when retention runs at boundaries (async checkpoints are drained before it). */
int cli_run_tiers_retains(const cli_run_tiers *t);
/* Local retention (collective; no checkpoint write in flight).  Failures are reported, not returned,
 * unless the comm failed. */
int cli_run_tiers_retain(cli_run_tiers *t, ckpt_session *ck, qe_rank *r);
/* A persist point (collective), after the boundary's checkpoint call. */
int cli_run_tiers_point(cli_run_tiers *t, qe_rank *r);
/* The end of training (collective, after the async drain): the last push, waited for with progress,
 * then a last retention. */
int cli_run_tiers_end(cli_run_tiers *t, ckpt_session *ck, qe_rank *r);
/* Rank 0 after the end: QE_ESTORE saying how many background pushes failed and which steps, when any
 * did (the run then exits non-zero); QE_OK otherwise and on the other ranks. */
int cli_run_tiers_failed(const cli_run_tiers *t);
/* The --json fields ("persist_...") of this rank, each followed by a comma. */
void cli_run_tiers_json(const cli_run_tiers *t);
void cli_run_tiers_close(cli_run_tiers *t);

#endif
