/*
 * run_tiers.h - what a rank process of train and resume says about the
 * checkpoint tiers: the background push of --ckpt-persist-every
 * (ckpt/tiers/ckpt_persist.h) and the retention of --ckpt-keep, which the
 * checkpoint policy (ckpt/protocol/ckpt_policy.h) runs at each boundary.
 * cli/run.c hands the policy's tier events here; this file prints them and
 * keeps what `--json` reports.  The tier flags are read from the variables
 * tier_flags.c sets.
 */
#ifndef CLI_RUN_TIERS_H
#define CLI_RUN_TIERS_H

#include <stdint.h>

#include "ckpt/protocol/ckpt_policy.h"

typedef struct cli_run_tiers cli_run_tiers;

/*
 * The policy's options from the flags: every (cfg.ckpt_every), async mode, and
 * the tiers, which run only with --ckpt-every (off when every is 0).
 * first_step: the step this job starts at (only later checkpoints are pushed);
 * catalog_path: rank 0's catalog (the push thread opens its own handle).  The
 * strings point into the tier flags' variables (they live as long as the process).
 */
void cli_run_tiers_policy(int64_t every, int async, const char *catalog_path, int64_t first_step,
			  ckpt_policy_opts *out);
/* The reporter of the tiers the flags ask for (*out stays NULL when none, or without --ckpt-every). */
int cli_run_tiers_open(int64_t every, int rank, const char *run_dir, int quiet, cli_run_tiers **out);
/* A tier event of the policy (RETAINED, PERSIST, END_WAIT): printed by rank 0, counted for --json;
 * a failed retention by the rank it failed on.  Other events and a NULL t are ignored. */
void cli_run_tiers_event(cli_run_tiers *t, const ckpt_policy_event *ev);
/* The policy's progress callback for the wait at the end (p: cli_run_tiers). */
void cli_run_tiers_progress(void *t, const ckpt_persist_progress *p);
/* Rank 0 after the end: QE_ESTORE saying how many background pushes failed and which steps, when any
 * did (the run then exits non-zero); QE_OK otherwise and on the other ranks. */
int cli_run_tiers_failed(const cli_run_tiers *t);
/* The --json fields ("persist_...") of this rank, each followed by a comma. */
void cli_run_tiers_json(const cli_run_tiers *t, int64_t steps_while_pushing);
void cli_run_tiers_close(cli_run_tiers *t);

#endif
