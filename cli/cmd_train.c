/*
 * cmd_train.c - `qeffect train`: configure a run, create its run directory
 * and catalog, and launch the rank processes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async_flag.h"
#include "cli.h"
#include "run.h"
#include "runtime/core/status.h"
#include "train_flags.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect train [FLAGS]\n\n"
		   "Train a GPT-style model with FP8 delayed scaling under a pipeline schedule.  Ranks are\n"
		   "processes (P x D of them); with --run-dir, per-step fingerprints, losses and checkpoints\n"
		   "go into RUN/catalog.db (rank 0's host) and a store per rank, RUN/stores/rank-R on each rank's\n"
		   "own disk (or LOCAL/stores/rank-R with --local-dir LOCAL).\n\n");
	cli_train_flags_help(f, 0);
	cli_async_flag_help(f);
	fprintf(f, "\nexample:\n  qeffect train --preset tiny --pp 2 --micro 4 --schedule zbv --steps 20 --run-dir runs/a\n");
}

int cli_train_main(int argc, char **argv)
{
	int async = 0;
	int rc = cli_async_flag_extract("train", &argc, argv, &async);
	if (rc)
		return rc;
	cli_train_args a;
	rc = cli_train_flags_parse("train", argc, argv, &a, 0);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	cli_train_config_finish(&a.cfg, a.given, 0);
	if (qe_train_config_check(&a.cfg)) {
		fprintf(stderr, "qeffect train: %s\n", qe_last_error());
		return 2;
	}
	if (a.cfg.ckpt_every > 0 && !a.cfg.run_dir[0]) {
		fprintf(stderr, "qeffect train: --ckpt-every needs --run-dir\n");
		return 2;
	}
	cli_rank_job job;
	cli_rank_job_init(&job, &a, async);
	/* Under an external launcher only rank 0 creates the run directory and holds its lock. */
	const char *rank_env = getenv("RANK");
	ckpt_lock *lock = NULL;
	if (a.cfg.run_dir[0] && (!rank_env || strcmp(rank_env, "0") == 0)) {
		if ((rc = cli_run_lock(a.cfg.run_dir, "train", 1, &lock)))
			return cli_report("train", rc, "locking the run directory");
		if ((rc = cli_run_create(a.cfg.run_dir, &a.cfg, job.run_id))) {
			ckpt_unlock(lock);
			return cli_report("train", rc, "creating the run directory");
		}
	}
	if (!a.quiet) {
		const qe_model_config *mc = &a.cfg.model;
		printf("training %s (%d layers, hidden %d, heads %d, seq %d, batch %d, vocab %d): pp %d, dp %d, "
		       "%d microbatches, %s/%s, exec %s, grad %s, precision %s, %lld steps%s%s\n",
		       mc->preset, mc->layers, mc->hidden, mc->heads, mc->seq, mc->batch, mc->vocab, a.cfg.pp, a.cfg.dp,
		       a.cfg.micro, qe_sched_kind_name(a.cfg.schedule), qe_sched_backward_name(a.cfg.backward),
		       qe_exec_name(a.cfg.exec), qe_grad_name(a.cfg.grad), qe_prec_mode_name(a.cfg.prec.mode),
		       (long long)a.cfg.steps, a.cfg.run_dir[0] ? ", run " : "", a.cfg.run_dir);
		fflush(stdout);
	}
	rc = cli_run_job("train", &job, a.nproc);
	ckpt_unlock(lock);
	return rc;
}
