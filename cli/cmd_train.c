/*
 * cmd_train.c - `qeffect train`: configure a run, create its run directory
 * and catalog, and launch the rank processes.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/async_flag.h"
#include "cli/tier_flags.h"
#include "cli/cli.h"
#include "cli/import.h"
#include "cli/run.h"
#include "cli/storage_options.h"
#include "runtime/core/status.h"
#include "runtime/job/data.h"
#include "cli/train_flags.h"

/*
 * What can be known wrong before the run directory is touched: a run that
 * could never commit a checkpoint would leave one that neither train nor
 * resume could use.  Returns 0 or 2 after printing a usage error.
 */
static int check_run_flags(const qe_train_config *cfg)
{
	if (cfg->ckpt_every > 0 && !cfg->run_dir[0]) {
		fprintf(stderr, "qeffect train: --ckpt-every needs --run-dir\n");
		return 2;
	}
	if (!cfg->run_dir[0])
		return 0;
	if (cfg->steps == 0) {
		fprintf(stderr, "qeffect train: --steps 0 trains nothing: there would be nothing to put in --run-dir '%s'\n",
			cfg->run_dir);
		return 2;
	}
	if (cfg->ckpt_every > cfg->steps) {
		fprintf(stderr,
			"qeffect train: --ckpt-every %lld is larger than --steps %lld: the run would end without a "
			"checkpoint in --run-dir '%s' (make --ckpt-every at most --steps)\n",
			(long long)cfg->ckpt_every, (long long)cfg->steps, cfg->run_dir);
		return 2;
	}
	return 0;
}

/*
 * Read and check the --init-from file against the model, before anything is
 * written, and record it (absolute path, format, hash) in the run's config.
 * Returns 0 or 1 after printing the error.
 */
static int init_from_check(const char *path, qe_train_config *cfg, int quiet)
{
	cli_import im;
	int rc = cli_import_open(path, &cfg->model, 1, &im);
	if (rc) {
		cli_import_release(&im);
		return cli_report("train", rc, "--init-from");
	}
	char abs[PATH_MAX];
	if (!realpath(path, abs) || strlen(abs) >= sizeof(cfg->init_from)) {
		cli_import_release(&im);
		fprintf(stderr, "qeffect train: --init-from '%s': cannot record its absolute path\n", path);
		return 1;
	}
	snprintf(cfg->init_from, sizeof(cfg->init_from), "%s", abs);
	snprintf(cfg->init_format, sizeof(cfg->init_format), "%s", im.format);
	snprintf(cfg->init_hash, sizeof(cfg->init_hash), "%s", im.hash);
	if (!quiet)
		fprintf(stderr, "qeffect train: weights from %s (%s, xxh3-128 %s)%s%s\n", im.path, im.format, im.hash,
			im.skipped ? "; tensors in it that are not parameters skipped" : "",
			cfg->model.tie_embeddings ? "; the output head is wte (tied embeddings)" : "");
	/* said even with --quiet: an untied model's head is not what the file held */
	if (im.head_tied)
		fprintf(stderr, "qeffect train: note: %s has no separate lm_head.weight (%s ties it to wte): the output "
				"head starts as a copy of wte and trains on its own from there (--tie-embeddings on keeps it wte)\n",
			im.path, strcmp(im.format, "llmc") ? "GPT-2" : "llm.c");
	cli_import_release(&im);
	return 0;
}

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect train [FLAGS]\n\n"
		   "Train a GPT-style model with FP8 delayed scaling under a pipeline schedule.  Ranks are\n"
		   "processes (P x D of them); with --run-dir, per-step fingerprints, losses and checkpoints\n"
		   "go into RUN/catalog.db (rank 0's host) and a store per rank, RUN/stores/rank-R on each rank's\n"
		   "own disk (or LOCAL/stores/rank-R with --local-dir LOCAL).  Flags and --data are checked before\n"
		   "anything is written.  A --run-dir whose run has a committed checkpoint is refused (continue it\n"
		   "with resume); one whose run never committed one (it failed or was killed before) starts again:\n"
		   "same run id, its uncommitted attempts, traces and losses dropped, every rank's store emptied.\n\n");
	cli_train_flags_help(f, 0);
	cli_async_flag_help(f);
	cli_tier_flags_help(f);
	cli_tier_remote_help(f);
	fprintf(f, "  --init-from PATH       start from a GPT-2 model file instead of random weights: a Hugging Face\n"
		   "                         safetensors file or folder (model.safetensors [+ config.json]) or an llm.c\n"
		   "                         model file (what `qeffect export` writes).  Every tensor is checked against\n"
		   "                         the model's shapes first; AdamW moments start at zero and the FP8 state\n"
		   "                         fresh; the run records the file and its hash (`inspect` shows them).\n"
		   "                         With tied embeddings the head is wte's copy (a file whose\n"
		   "                         lm_head.weight differs from its wte is refused); untied, a file\n"
		   "                         without lm_head.weight starts the head as a copy of wte\n");
	fprintf(f, "\nexample:\n  qeffect train --preset tiny --pp 2 --micro 4 --schedule zbv --steps 20 --run-dir runs/a\n");
}

int cli_train_main(int argc, char **argv)
{
	cli_train_args a;
	int rc = cli_train_flags_parse("train", argc, argv, &a, 0);
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
	if ((rc = check_run_flags(&a.cfg)) || (rc = cli_tier_flags_check("train", a.cfg.ckpt_every)) ||
	    (rc = cli_run_nproc_check("train", &a.cfg, a.nproc)))
		return rc;
	/* The data is read (and so checked) before anything goes to disk; forked ranks share this copy. */
	qe_data data;
	if ((rc = qe_data_load(a.cfg.data, &data))) {
		fprintf(stderr, "qeffect train: --data: %s\n", qe_last_error());
		return 2;
	}
	if ((rc = qe_data_check_vocab(&data, a.cfg.model.vocab, a.cfg.model.preset))) {
		fprintf(stderr, "qeffect train: --data: %s\n", qe_last_error());
		qe_data_free(&data);
		return 2;
	}
	if (a.init_from && (rc = init_from_check(a.init_from, &a.cfg, a.quiet))) {
		qe_data_free(&data);
		return rc;
	}
	a.cfg.data_fingerprint = qe_data_fingerprint(&data); /* lets a resume find the same tokens at another path */
	/* recorded absolute: a resume from another working directory reads the same file, or is told */
	char abs[PATH_MAX];
	if (a.cfg.data[0] && realpath(a.cfg.data, abs) && strlen(abs) < sizeof(a.cfg.data))
		snprintf(a.cfg.data, sizeof(a.cfg.data), "%s", abs);
	/* --local-dir recorded absolute with the run: verify, inspect, gc and resume find the stores there
	 * without the flag (a relative one names a folder of this working directory) */
	const char *local = cli_storage_get()->ckpt.local_dir;
	if (local[0]) {
		char cwd[PATH_MAX];
		if (strlen(local) >= sizeof(a.cfg.local_dir))
			a.cfg.local_dir[0] = 0; /* too long to record: later commands need the flag */
		else if (local[0] == '/' || !getcwd(cwd, sizeof(cwd)))
			memcpy(a.cfg.local_dir, local, strlen(local) + 1);
		else if ((size_t)snprintf(a.cfg.local_dir, sizeof(a.cfg.local_dir), "%s/%s", cwd, local) >=
			 sizeof(a.cfg.local_dir))
			a.cfg.local_dir[0] = 0; /* too long to record: later commands need the flag */
	}
	cli_rank_job job;
	cli_rank_job_init(&job, &a, a.async);
	job.data = &data;
	/* Under an external launcher only rank 0 creates the run directory and holds its lock. */
	int launched_rank;
	int launched = cli_launched(&launched_rank);
	ckpt_lock *lock = NULL;
	if (a.cfg.run_dir[0] && (!launched || launched_rank == 0)) {
		int64_t dropped = -1;
		if ((rc = cli_run_lock(a.cfg.run_dir, "train", 1, &lock))) {
			qe_data_free(&data);
			return cli_report("train", rc, "locking the run directory");
		}
		if ((rc = cli_run_create(a.cfg.run_dir, &a.cfg, job.run_id, &dropped))) {
			ckpt_unlock(lock);
			qe_data_free(&data);
			return cli_report("train", rc, "creating the run directory");
		}
		job.restart = dropped >= 0;
		if (job.restart)
			fprintf(stderr,
				"qeffect train: run directory '%s' holds run '%s', which never committed a checkpoint: "
				"starting it again (dropped %lld uncommitted attempt%s and the old traces and losses; each rank "
				"deletes the chunks in its own store)\n",
				a.cfg.run_dir, job.run_id, (long long)dropped, dropped == 1 ? "" : "s");
	}
	if (!a.quiet) {
		const qe_model_config *mc = &a.cfg.model;
		double nparam = qe_model_param_count(mc);
		FILE *o = a.log_json ? stderr : stdout; /* --log-format json: stdout holds JSON lines alone */
		fprintf(o, "training %s (%d layers, hidden %d, heads %d, ffn %d, seq %d, batch %d, vocab %d; %.2fM parameters): "
		       "pp %d, dp %d, "
		       "%d microbatches, %s/%s, exec %s, grad %s, precision %s, %lld steps%s%s\n",
		       mc->preset, mc->layers, mc->hidden, mc->heads, mc->ffn, mc->seq, mc->batch, mc->vocab, nparam / 1e6,
		       a.cfg.pp, a.cfg.dp,
		       a.cfg.micro, qe_sched_kind_name(a.cfg.schedule), qe_sched_backward_name(a.cfg.backward),
		       qe_exec_name(a.cfg.exec), qe_grad_name(a.cfg.grad), qe_prec_mode_name(a.cfg.prec.mode),
		       (long long)a.cfg.steps, a.cfg.run_dir[0] ? ", run " : "", a.cfg.run_dir);
		/* which tokens: a run without --data and without the shared corpus trains on the built-in text */
		fprintf(o, "data: %s (%lld training tokens, %lld held out)%s%s%s\n", data.path, (long long)data.ntrain,
		       (long long)data.nheldout, a.cfg.data[0] ? "" : ": no --data given and no corpus at ",
		       a.cfg.data[0] ? "" : cli_shared_dir(), a.cfg.data[0] ? "" : "/data/brown.jsonl");
		fflush(stdout);
	}
	rc = cli_run_job("train", &job, a.nproc);
	ckpt_unlock(lock);
	qe_data_free(&data);
	return rc;
}
