/*
 * cmd_resume.c - `qeffect resume`: continue a run from a committed checkpoint
 * in fresh rank processes.
 *
 * The run's configuration comes from its catalog.  Only mapping and
 * execution flags may change (pp, dp, chunks, schedule, backward, exec, grad,
 * backend, cadences): checkpoints are keyed by global stage, so any mapping
 * of the same stages restores.  A model, recipe, seed, microbatch, learning
 * rate or data flag that differs from the run would silently make another
 * run, so it is refused before anything starts or is written.  Data is the
 * exception in form, not in substance: another path is accepted when it holds
 * the same tokens (check_data).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/session/ckpt.h"
#include "cli/async_flag.h"
#include "cli/tier_flags.h"
#include "cli/cli.h"
#include "cli/resume_remote.h"
#include "cli/run.h"
#include "runtime/core/env.h"
#include "runtime/core/status.h"
#include "runtime/job/data.h"
#include "cli/train_flags.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect resume --run-dir DIR [--from STEP] [--steps N] [FLAGS]\n\n"
		   "Continue the run in DIR from its latest committed checkpoint (or --from STEP) in fresh\n"
		   "rank processes: its configuration is read from DIR/catalog.db, the numerical state is\n"
		   "restored before any graph is built, and traces, losses and checkpoints continue into the\n"
		   "same catalog (rows of recomputed steps are replaced).  --steps N trains until N steps are\n"
		   "done (default: the run's --steps); N equal to the checkpoint's step only restores.\n\n"
		   "The mapping may change (a --pp 2 checkpoint resumes under --pp 1 or --pp 4).  Model,\n"
		   "recipe, seed, microbatch, learning-rate and data flags are accepted only when they equal\n"
		   "the run's values; a conflicting one is refused with exit status 2 and nothing is written.\n"
		   "--data may name another path (another host's copy) when its tokens have the fingerprint the\n"
		   "run recorded; without --data the run's own data path must be readable here.\n\n");
	cli_train_flags_help(f, 1);
	cli_async_flag_help(f);
	cli_tier_flags_help(f);
	cli_resume_remote_help(f);
	fprintf(f, "\nexit status: 0 done, 1 the run cannot be resumed (no run, no committed checkpoint, corrupt\n"
		   "or mismatched checkpoint, training failed), 2 bad usage or a conflicting flag.\n"
		   "\nexample:\n  qeffect resume --run-dir runs/a --steps 40 --pp 4 --schedule interleaved --chunks 1\n");
}

static int conflict(const char *flag, const char *given, const char *saved)
{
	fprintf(stderr,
		"qeffect resume: %s %s conflicts with the run, which was trained with %s; a run keeps its model, "
		"recipe, seed, microbatches, optimizer settings and data (start a new run with 'qeffect train')\n",
		flag, given, saved);
	return 2;
}

/* An optimizer flag given to resume that differs from the run's: refused naming it (exit 2). */
static int optim_conflict(unsigned given, const qe_adamw_config *g, const qe_adamw_config *s)
{
	char x[64], y[96];
	if ((given & CLI_O_SCHEDULE) && g->lr_schedule != s->lr_schedule) {
		snprintf(y, sizeof(y), "learning-rate schedule %s", qe_lr_schedule_name(s->lr_schedule));
		return conflict("--lr-schedule", qe_lr_schedule_name(g->lr_schedule), y);
	}
	const struct {
		unsigned bit;
		const char *flag, *what;
		double gv, sv;
	} v[] = { { CLI_O_WARMUP, "--warmup", "warmup of", (double)g->warmup, (double)s->warmup },
		  { CLI_O_DECAY, "--lr-decay-steps", "decay over", (double)g->decay_steps, (double)s->decay_steps },
		  { CLI_O_LR_MIN, "--lr-min", "minimum learning rate", (double)g->lr_min, (double)s->lr_min },
		  { CLI_O_WD, "--weight-decay", "weight decay", (double)g->weight_decay, (double)s->weight_decay },
		  { CLI_O_BETA1, "--beta1", "beta1", (double)g->beta1, (double)s->beta1 },
		  { CLI_O_BETA2, "--beta2", "beta2", (double)g->beta2, (double)s->beta2 },
		  { CLI_O_EPS, "--eps", "eps", (double)g->eps, (double)s->eps },
		  { CLI_O_CLIP, "--grad-clip", "gradient clipping at", (double)g->grad_clip, (double)s->grad_clip } };
	for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
		if ((given & v[k].bit) && v[k].gv != v[k].sv) {
			snprintf(x, sizeof(x), "%g", v[k].gv);
			snprintf(y, sizeof(y), "%s %g", v[k].what, v[k].sv);
			return conflict(v[k].flag, x, y);
		}
	return 0;
}

static int same_file(const char *a, const char *b)
{
	if (strcmp(a, b) == 0)
		return 1;
	char ra[PATH_MAX], rb[PATH_MAX];
	return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* The first model/recipe/run flag on the command line whose value differs from the run's: exit status 2. */
static int check_conflicts(const cli_train_args *a, const qe_train_config *s)
{
	const qe_train_config *g = &a->cfg;
	unsigned f = a->given;
	char x[160], y[160];
	if ((f & CLI_F_SHAPE) && !(f & CLI_F_PRESET)) {
		/* shape flags alone: each against the run's own value */
		qe_model_config sm = s->model;
		for (int i = 0; i < 7; i++) {
			int want = *cli_shape_field(&sm, i);
			if (a->shape[i] && a->shape[i] != want) {
				snprintf(x, sizeof(x), "%d", a->shape[i]);
				snprintf(y, sizeof(y), "%s %d", cli_shape_flags[i] + 2, want);
				return conflict(cli_shape_flags[i], x, y);
			}
		}
		if (a->attn && qe_model_attn(&g->model) != qe_model_attn(&sm)) {
			snprintf(y, sizeof(y), "attention %s", qe_attn_mode_name(qe_model_attn(&sm)));
			return conflict("--attention", qe_attn_mode_name((qe_attn_mode)(a->attn - 1)), y);
		}
	} else if (f & CLI_F_PRESET) {
		const qe_model_config *gm = &g->model, *sm = &s->model;
		if (strcmp(gm->preset, sm->preset) || gm->hidden != sm->hidden || gm->layers != sm->layers ||
		    gm->vocab != sm->vocab || gm->ffn != sm->ffn || gm->heads != sm->heads || gm->seq != sm->seq ||
		    gm->batch != sm->batch) {
			snprintf(x, sizeof(x), "%s (hidden %d, layers %d)", gm->preset, gm->hidden, gm->layers);
			snprintf(y, sizeof(y), "model '%s' (hidden %d, layers %d)", sm->preset, sm->hidden, sm->layers);
			return conflict("--preset", x, y);
		}
	}
	if (a->tie && a->tie - 1 != s->model.tie_embeddings)
		return conflict("--tie-embeddings", a->tie == 2 ? "on" : "off",
				s->model.tie_embeddings ? "tied embeddings" : "untied embeddings");
	if ((f & CLI_F_FP8) && g->prec.mode != s->prec.mode) {
		snprintf(y, sizeof(y), "precision %s (fp8 %s)", qe_prec_mode_name(s->prec.mode),
			 qe_prec_is_fp8(&s->prec) ? "on" : "off");
		return conflict(a->prec_flag, a->prec_value, y);
	}
	if ((f & CLI_F_HEAD) && g->prec.head_current != s->prec.head_current)
		return conflict("--head-scaling", g->prec.head_current ? "current" : "delayed",
				s->prec.head_current ? "head scaling current" : "head scaling delayed");
	if ((f & CLI_F_FORMAT) && g->prec.recipe.format != s->prec.recipe.format) {
		snprintf(y, sizeof(y), "fp8 format %s", qe_fp8_format_name(s->prec.recipe.format));
		return conflict("--fp8-format", qe_fp8_format_name(g->prec.recipe.format), y);
	}
	if ((f & CLI_F_HISTORY) && g->prec.recipe.history_len != s->prec.recipe.history_len) {
		snprintf(x, sizeof(x), "%d", g->prec.recipe.history_len);
		snprintf(y, sizeof(y), "amax history %d", s->prec.recipe.history_len);
		return conflict("--amax-history", x, y);
	}
	if ((f & CLI_F_MARGIN) && g->prec.recipe.margin != s->prec.recipe.margin) {
		snprintf(x, sizeof(x), "%d", g->prec.recipe.margin);
		snprintf(y, sizeof(y), "amax margin %d", s->prec.recipe.margin);
		return conflict("--amax-margin", x, y);
	}
	if ((f & CLI_F_ALGO) && g->prec.recipe.algo != s->prec.recipe.algo) {
		snprintf(y, sizeof(y), "amax algo %s", qe_amax_algo_name(s->prec.recipe.algo));
		return conflict("--amax-algo", qe_amax_algo_name(g->prec.recipe.algo), y);
	}
	if ((f & CLI_F_SEED) && g->seed != s->seed) {
		snprintf(x, sizeof(x), "%llu", (unsigned long long)g->seed);
		snprintf(y, sizeof(y), "seed %llu", (unsigned long long)s->seed);
		return conflict("--seed", x, y);
	}
	if ((f & CLI_F_MICRO) && g->micro != s->micro) {
		snprintf(x, sizeof(x), "%d", g->micro);
		snprintf(y, sizeof(y), "%d microbatches", s->micro);
		return conflict("--micro", x, y);
	}
	if ((f & CLI_F_LR) && g->optim.lr != s->optim.lr) {
		snprintf(x, sizeof(x), "%g", (double)g->optim.lr);
		snprintf(y, sizeof(y), "learning rate %g", (double)s->optim.lr);
		return conflict("--lr", x, y);
	}
	return optim_conflict(a->optim_given, &g->optim, &s->optim);
}

/* The fingerprint of the tokens in path; exit status 2 (printed) when it cannot be read. */
static int fingerprint_of(const char *flag, const char *path, uint64_t *out)
{
	qe_data d;
	if (qe_data_load(path, &d)) {
		fprintf(stderr, "qeffect resume: %s: %s\n", flag, qe_last_error());
		return 2;
	}
	*out = qe_data_fingerprint(&d);
	qe_data_free(&d);
	return 0;
}

/*
 * Which file the resumed ranks read, and that it holds the run's tokens.
 * Hosts differ: the run's data may lie at another path here, so --data names
 * it.  Either way the file read is fingerprinted and must match the run's
 * recorded fingerprint - also when it is the run's own path, which may have
 * been edited in place since.  A run recorded before fingerprints is checked
 * against its own file when that is readable here (and trusted, with a
 * warning, when it is not).  Without --data the run's own path must be
 * readable; a refusal says what to pass.  --data is recorded as an absolute
 * path, as train records it.
 */
static int check_data(const cli_train_args *a, const qe_train_config *s, qe_train_config *m)
{
	const char *given = (a->given & CLI_F_DATA) ? a->cfg.data : NULL;
	if (!given && s->data[0] && access(s->data, R_OK)) {
		fprintf(stderr,
			"qeffect resume: the run's data '%s' cannot be read on this host (%s): pass --data PATH "
			"naming a copy of it\n",
			s->data, strerror(errno));
		return 2;
	}
	const char *path = given ? given : s->data;
	uint64_t want = s->data_fingerprint, got;
	int rc;
	if (!want) { /* recorded before fingerprints: the run's own file, if it is here, is the reference */
		if (!given || same_file(given, s->data))
			return 0;
		if (s->data[0] && access(s->data, R_OK) == 0 && (rc = fingerprint_of("the run's data", s->data, &want)))
			return rc;
	}
	if ((rc = fingerprint_of(given ? "--data" : "the run's data", path, &got)))
		return rc;
	if (!want) {
		fprintf(stderr,
			"qeffect resume: warning: the run was recorded before data fingerprints and its data '%s' is not "
			"on this host: trusting that --data '%s' holds the same tokens\n",
			s->data, given);
	} else if (got != want && (!given || same_file(given, s->data))) {
		fprintf(stderr,
			"qeffect resume: the run's data '%s' has changed since the run recorded it: its tokens have "
			"fingerprint %016llx, the run trained on %016llx; restore the file, or pass --data PATH naming a "
			"copy of the tokens the run trained on\n",
			path, (unsigned long long)got, (unsigned long long)want);
		return 2;
	} else if (got != want) {
		char x[600], y[600];
		snprintf(x, sizeof(x), "'%.280s' (tokens %016llx)", given, (unsigned long long)got);
		snprintf(y, sizeof(y), "data '%.280s' (tokens %016llx)", s->data, (unsigned long long)want);
		return conflict("--data", x, y);
	}
	if (given) {
		char abs[PATH_MAX];
		const char *rec = realpath(given, abs) && strlen(abs) < sizeof(m->data) ? abs : given;
		snprintf(m->data, sizeof(m->data), "%s", rec);
		m->data_fingerprint = got;
	}
	return 0;
}

/* The run's config with the mapping and execution flags of the command line. */
static void apply_mapping(const cli_train_args *a, qe_train_config *m)
{
	const qe_train_config *g = &a->cfg;
	unsigned f = a->given;
	int stages = m->pp * m->chunks; /* the checkpoint's virtual stages: any mapping keeps them */
	if (f & CLI_F_PP)
		m->pp = g->pp;
	if (f & CLI_F_DP)
		m->dp = g->dp;
	if (f & CLI_F_SCHEDULE)
		m->schedule = g->schedule;
	if (f & CLI_F_BACKWARD)
		m->backward = g->backward;
	if (f & CLI_F_EXEC)
		m->exec = g->exec;
	if (f & CLI_F_GRAD)
		m->grad = g->grad;
	if (f & CLI_F_BACKEND)
		snprintf(m->backend, sizeof(m->backend), "%s", g->backend);
	if (f & CLI_F_EVAL)
		m->eval_every = g->eval_every;
	if (f & CLI_F_EVAL_MICRO)
		m->eval_micro = g->eval_micro;
	if (f & CLI_F_CKPT)
		m->ckpt_every = g->ckpt_every;
	if (f & CLI_F_LOG)
		m->log_every = g->log_every;
	if (f & CLI_F_STEPS)
		m->steps = g->steps;
	if (f & CLI_F_CHUNKS)
		m->chunks = g->chunks;
	else if (f & (CLI_F_PP | CLI_F_SCHEDULE))
		cli_train_config_finish(m, 0, stages); /* the run's virtual stages under the new pp */
	snprintf(m->run_dir, sizeof(m->run_dir), "%s", g->run_dir);
}


/*
 * resume --from S with committed checkpoints after step S: say which steps
 * they are, that each stays restorable with --from until this run saves
 * that step again (the new save supersedes it; gc's policy drops it later),
 * and which of them this run will save again.
 */
static void say_newer(cat *c, const char *run_id, int64_t from, int64_t every, int64_t until)
{
	cat_ckpt_rows l = { 0 };
	if (cat_ckpt_list(c, run_id, &l))
		return;
	char steps[512] = "", again[512] = "";
	size_t n = 0, m = 0;
	for (size_t i = 0; i < l.n; i++) {
		const cat_ckpt *k = &l.rows[i];
		if (k->status != CAT_COMMITTED || k->step <= from)
			continue;
		size_t u = strlen(steps);
		snprintf(steps + u, sizeof(steps) - u, "%s%lld", n++ ? ", " : "", (long long)k->step);
		if (every > 0 && k->step % every == 0 && k->step <= until) {
			u = strlen(again);
			snprintf(again + u, sizeof(again) - u, "%s%lld", m++ ? ", " : "", (long long)k->step);
		}
	}
	cat_ckpt_rows_free(&l);
	if (!n)
		return;
	printf("note: the run has committed checkpoints after step %lld (step%s %s); they stay restorable with --from "
	       "until this run saves the same step again, which supersedes the earlier save (gc's policy drops it "
	       "later)%s%s%s\n",
	       (long long)from, n > 1 ? "s" : "", steps, m ? "; this run saves step" : "", m > 1 ? "s " : m ? " " : "",
	       again);
}

int cli_resume_main(int argc, char **argv)
{
	cli_train_args a;
	int rc = cli_train_flags_parse("resume", argc, argv, &a, 1);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	/* --remote: pull the checkpoint into --run-dir first (resume_remote.c). */
	if ((rc = cli_resume_remote_prepare(&a)))
		return rc;
	if (!(a.given & CLI_F_RUNDIR) || !a.cfg.run_dir[0]) {
		fprintf(stderr, "qeffect resume: --run-dir DIR is required (the run to continue)\n");
		return 2;
	}
	const char *dir = a.cfg.run_dir;
	int launched_rank;
	if (cli_launched(&launched_rank) && launched_rank != 0) {
		/* An external launcher's rank other than 0: its host need not have the catalog; rank 0
		 * checks the run and sends the configuration and the checkpoint to resume from. */
		cli_rank_job job;
		cli_rank_job_init(&job, &a, a.async);
		job.resume = 1;
		return cli_run_job("resume", &job, a.nproc);
	}
	ckpt_run *run = NULL;
	char run_id[64];
	qe_train_config saved;
	cli_recall_local_dir(dir);
	if ((rc = cli_run_open(dir, 1, &run, &saved)))
		return cli_report("resume", rc, "cannot open the run");
	cat *c = ckpt_run_catalog(run);
	snprintf(run_id, sizeof(run_id), "%s", ckpt_run_id(run));

	int status = check_conflicts(&a, &saved);
	qe_train_config merged = saved;
	char why[256];
	if (!status)
		status = check_data(&a, &saved, &merged);
	if (!status) {
		apply_mapping(&a, &merged);
		if (qe_train_config_check(&merged)) {
			fprintf(stderr, "qeffect resume: %s\n", qe_last_error());
			status = 2;
		} else if (qe_train_config_compatible(&saved, &merged, why, sizeof(why))) {
			fprintf(stderr, "qeffect resume: the run's checkpoints do not fit: %s\n", why);
			status = 2;
		}
	}
	if (!status)
		status = cli_tier_flags_check("resume", merged.ckpt_every);
	cat_ckpt ck = { 0 };
	if (!status && (rc = ckpt_find(dir, c, run_id, a.from_step, &ck)))
		status = cli_report("resume", rc, "nothing to resume from");
	if (!status && !(a.given & CLI_F_STEPS) && merged.steps <= ck.step) {
		fprintf(stderr,
			"qeffect resume: nothing to train: the checkpoint is at step %lld and the run was to train %lld "
			"steps; give --steps N (N > %lld) to train on, or --steps %lld to only restore\n",
			(long long)ck.step, (long long)merged.steps, (long long)ck.step, (long long)ck.step);
		status = 2;
	}
	if (!status && merged.steps < ck.step) {
		fprintf(stderr, "qeffect resume: --steps %lld is before the checkpoint's step %lld: nothing to train\n",
			(long long)merged.steps, (long long)ck.step);
		status = 2;
	}
	if (!status && a.from_step >= 0 && !a.quiet)
		say_newer(c, run_id, ck.step, merged.ckpt_every, merged.steps);
	/* The rank processes open the catalog themselves, after fork. */
	ckpt_run_close(run);
	/* Checked before locking, so a refused resume leaves the run directory as it was; a second
	 * writer that got in meanwhile holds the lock and this one stops here. */
	ckpt_lock *lock = NULL;
	if (!status && (rc = cli_run_lock(dir, "resume", 0, &lock)))
		status = cli_report("resume", rc, "cannot lock the run");
	if (status) {
		cat_ckpt_release(&ck);
		return status;
	}

	cli_rank_job job;
	cli_rank_job_init(&job, &a, a.async);
	job.cfg = merged;
	snprintf(job.run_id, sizeof(job.run_id), "%s", run_id);
	job.resume = 1;
	job.from_step = ck.step; /* exactly the checkpoint checked here */
	job.until = merged.steps;
	if (!a.quiet) {
		printf("resuming %s (%s) from checkpoint step %lld (saved under %s, %s): pp %d, dp %d, %s/%s, exec %s, "
		       "grad %s, until step %lld\n",
		       run_id, dir, (long long)ck.step, ck.topology, ck.schedule, merged.pp, merged.dp,
		       qe_sched_kind_name(merged.schedule), qe_sched_backward_name(merged.backward),
		       qe_exec_name(merged.exec), qe_grad_name(merged.grad), (long long)merged.steps);
		fflush(stdout);
	}
	cat_ckpt_release(&ck);
	rc = cli_run_job("resume", &job, a.nproc);
	ckpt_unlock(lock);
	return rc;
}
