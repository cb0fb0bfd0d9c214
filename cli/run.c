/*
 * run.c - run directories and the rank process body shared by train and resume.
 */
#include "cli/run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "ckpt/session/ckpt.h"
#include "ckpt/protocol/ckpt_async.h"
#include "ckpt/protocol/ckpt_policy.h"
#include "ckpt/session/rundir.h"
#include "runtime/comm/comm.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/rank.h"
#include "cli/import.h"
#include "cli/preempt.h"
#include "cli/progress.h"
#include "cli/rank_meter.h"
#include "cli/run_tiers.h"
#include "cli/storage_options.h"
#include "cli/train_flags.h"
#include "cli/train_sample.h"

int cli_run_lock(const char *dir, const char *cmd, int create, ckpt_lock **out)
{
	*out = NULL;
	struct stat sb;
	int rc;
	if (create && (rc = ckpt_mkdirs(dir)))
		return qe_fail_ctx(rc, "cannot create run directory '%s'", dir);
	if (stat(dir, &sb))
		return qe_fail(QE_ENOTFOUND, "run directory '%s' does not exist", dir);
	if (!S_ISDIR(sb.st_mode))
		return qe_fail(QE_EINVAL, "run directory '%s' is not a directory", dir);
	char what[96];
	snprintf(what, sizeof(what), "qeffect %s", cmd);
	return ckpt_rundir_lock(dir, what, out);
}

/*
 * RUN's catalog exists: its run starts over when it never committed a
 * checkpoint (cat_run_restart checks, in the transaction that drops its
 * rows), else the directory is refused.  A catalog whose run row was never
 * written (a crash right after it was created) gets its first run now.
 */
static int run_restart(const char *dir, const char *path, const char *json, char *run_id, int64_t *dropped)
{
	cat *c = NULL;
	char *id = NULL;
	int rc = cat_open(path, 0, &c);
	if (!rc)
		rc = cat_meta_get(c, "run_id", &id);
	if (!rc && !id[0]) {
		*dropped = 0;
		rc = cat_run_create(c, run_id, json);
	} else if (!rc) {
		rc = cat_run_restart(c, id, json, dropped);
		if (!rc)
			snprintf(run_id, 64, "%s", id);
	}
	if (rc == QE_EEXIST)
		rc = qe_fail(QE_EEXIST,
			     "run directory '%s' already holds run '%s' with committed checkpoints (%s): continue it with "
			     "'qeffect resume --run-dir %s' or choose another directory",
			     dir, id, path, dir);
	else if (rc && !strstr(qe_last_error(), path))
		rc = qe_fail_ctx(rc, "run directory '%s' (%s) cannot start over", dir, path);
	free(id);
	cat_close(c);
	return rc;
}

int cli_run_create(const char *dir, const qe_train_config *cfg, char *run_id, int64_t *dropped)
{
	char path[CKPT_PATH_MAX];
	int rc;
	*dropped = -1;
	if ((rc = ckpt_rundir_catalog(dir, path, sizeof(path))))
		return rc;
	if ((rc = ckpt_mkdirs(dir)))
		return qe_fail_ctx(rc, "cannot create run directory '%s'", dir);
	if ((rc = ckpt_fs_check(path, "the catalog")))
		return rc;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(run_id, 64, "run-%08lx-%05x", (unsigned long)ts.tv_sec, (unsigned)(getpid() ^ ts.tv_nsec) & 0xfffff);
	char *json = qe_train_config_to_json(cfg);
	if (!json)
		return qe_fail(QE_ENOMEM, "run config: out of memory");
	if (access(path, F_OK) == 0) {
		rc = run_restart(dir, path, json, run_id, dropped);
		free(json);
		return rc;
	}
	cat *c = NULL;
	rc = cat_open(path, 1, &c);
	if (!rc)
		rc = cat_run_create(c, run_id, json);
	cat_close(c);
	free(json);
	return rc;
}

int cli_run_open(const char *dir, int writable, ckpt_run **out, qe_train_config *cfg)
{
	ckpt_run *r;
	char path[CKPT_PATH_MAX];
	int rc;
	*out = NULL;
	if ((rc = ckpt_run_open(dir, writable ? CKPT_RUN_WRITE : 0, &r)))
		return rc;
	if (cfg && (rc = qe_train_config_from_json(ckpt_run_config_json(r), cfg))) {
		if (ckpt_rundir_catalog(dir, path, sizeof(path)) == QE_OK && !strstr(qe_last_error(), path))
			rc = qe_fail_ctx(rc, "catalog '%s'", path); /* catalog messages usually name the file already */
		ckpt_run_close(r);
		return rc;
	}
	*out = r;
	return QE_OK;
}

void cli_recall_local_dir(const char *dir)
{
	cli_storage *s = cli_storage_get();
	if (s->ckpt.local_dir[0] || !dir || !dir[0])
		return;
	ckpt_run *r = NULL;
	qe_train_config *cfg = calloc(1, sizeof(*cfg));
	if (cfg && !cli_run_open(dir, 0, &r, cfg) && cfg->local_dir[0] &&
	    !cli_storage_text(NULL, "the recorded --local-dir", cfg->local_dir, s->ckpt.local_dir,
			      sizeof(s->ckpt.local_dir))) {
		cli_storage_commit();
		fprintf(stderr, "qeffect: run '%s' keeps its stores under --local-dir %s (as recorded)\n", dir,
			cfg->local_dir);
	}
	ckpt_run_close(r);
	free(cfg);
}

void cli_rank_job_init(cli_rank_job *job, const cli_train_args *a, int ckpt_async)
{
	memset(job, 0, sizeof(*job));
	job->cfg = a->cfg;
	job->quiet = a->quiet;
	job->json = a->json;
	job->log_json = a->log_json;
	job->ckpt_on_signal = a->ckpt_on_signal;
	job->no_trace = a->no_trace;
	job->ckpt_async = ckpt_async;
	job->from_step = -1;
	job->until = a->cfg.steps;
	job->sample_every = a->sample_every;
	job->sample_tokens = a->sample_tokens;
}

/* ---- the rank process ------------------------------------------------------ */

typedef struct rank_ctx {
	cli_rank_job *job;
	cat *cat;
	ckpt_session *ck;
	ckpt_async *async; /* --ckpt-async: checkpoints written in the background */
	ckpt_policy *policy; /* when to checkpoint and what each boundary does (ckpt_policy.h); with ck */
	cli_run_tiers *tiers; /* what the tiers' events print (run_tiers.h); NULL without --ckpt-persist-every, --ckpt-keep */
	cli_train_sample *sample; /* --sample-every (train_sample.h); NULL when off */
	cli_progress progress; /* the progress and summary lines (rank 0 prints) */
	qe_rank *rank;         /* for the policy's events */
	float last_loss;
	/* --json: each step's wall time on this rank and the memory it holds (rank_meter.h) */
	double *step_ms;
	int nsteps, capsteps;
	double first_step_end_unix_ms;
	size_t alloc_setup, alloc_base, alloc_last;
	size_t mem_setup, mem_base, mem_last, mem_peak;
	const char *mem_probe;
	/* --json: every synchronous checkpoint this process saved (all ranks' bytes, the save's
	 * wall time from the gate to the commit) and the restore it started from */
	struct { long long step; unsigned long long bytes; double ms; } ckpts[64];
	int nckpts;
	long long restore_step;
	unsigned long long restore_bytes;
	double restore_ms;
	unsigned long long restore_read_disk, restore_read_memory; /* bytes this rank read from its host, by tier */
} rank_ctx;

static double unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Sample the memory measures: after setup (rep NULL) or after a step, whose time is kept. */
static void meter_sample(rank_ctx *ctx, qe_rank *r, const qe_step_report *rep)
{
	cli_alloc_stats a;
	size_t used = 0;
	cli_rank_meter_get(&a);
	cli_rank_meter_probe(qe_rank_backend(r), &used, &ctx->mem_probe);
	if (used > ctx->mem_peak)
		ctx->mem_peak = used;
	if (!rep) {
		ctx->alloc_setup = ctx->alloc_base = ctx->alloc_last = a.live;
		ctx->mem_setup = ctx->mem_base = ctx->mem_last = used;
		return;
	}
	if (ctx->nsteps == ctx->capsteps) {
		int cap = ctx->capsteps ? 2 * ctx->capsteps : 64;
		double *n = realloc(ctx->step_ms, (size_t)cap * sizeof(*n));
		if (!n)
			return;
		ctx->step_ms = n;
		ctx->capsteps = cap;
	}
	ctx->step_ms[ctx->nsteps++] = rep->ms;
	if (ctx->nsteps == 1)
		ctx->first_step_end_unix_ms = unix_ms();
	ctx->alloc_last = a.live;
	ctx->mem_last = used;
	/* Growth is measured from the end of this process's second step: in graph mode the one
	 * that captured the graphs and replayed them first. */
	if (ctx->nsteps <= 2) {
		ctx->alloc_base = a.live;
		ctx->mem_base = used;
	}
}

static void print_async_done(const rank_ctx *ctx, const qe_rank *r, int64_t step, double ms)
{
	if (step >= 0 && qe_rank_index(r) == 0 && !ctx->job->quiet)
		printf("checkpoint step %lld committed in the background after %.1f ms\n", (long long)step, ms);
	fflush(stdout);
}

/* What a checkpoint boundary did (ckpt_policy.h), in the order it happened: the checkpoint's lines
 * here, the tiers' in run_tiers.c. */
static void on_policy_event(void *vctx, const ckpt_policy_event *ev)
{
	rank_ctx *ctx = vctx;
	qe_rank *r = ctx->rank;
	int speak = qe_rank_index(r) == 0 && !ctx->job->quiet;
	if (ev->what == CKPT_POLICY_DRAINED) {
		print_async_done(ctx, r, ev->async->done_step, ev->async->done_ms);
	} else if (ev->what == CKPT_POLICY_SNAPSHOT) {
		const ckpt_async_result *res = ev->async;
		print_async_done(ctx, r, res->done_step, res->done_ms);
		if (speak) {
			if (res->skipped)
				printf("checkpoint step %lld skipped: the previous one is still being written (stall %.2f ms)\n",
				       (long long)ev->step, res->stall_ms);
			else
				printf("checkpoint step %lld: %llu bytes snapshot in %.2f ms, training stalled %.2f ms (%.2f ms "
				       "waiting for the previous write); writing in the background\n",
				       (long long)ev->step, (unsigned long long)res->bytes, res->snapshot_ms, res->stall_ms,
				       res->wait_ms);
			fflush(stdout);
		}
	} else if (ev->what == CKPT_POLICY_SAVED) {
		const ckpt_result *res = ev->saved;
		if (ctx->nckpts < (int)(sizeof(ctx->ckpts) / sizeof(ctx->ckpts[0]))) {
			ctx->ckpts[ctx->nckpts].step = (long long)ev->step;
			ctx->ckpts[ctx->nckpts].bytes = (unsigned long long)res->bytes;
			ctx->ckpts[ctx->nckpts++].ms = res->ms;
		}
		if (speak)
			printf("checkpoint step %lld committed: %llu bytes (%llu runtime-state bytes) in %.1f ms\n",
			       (long long)ev->step, (unsigned long long)res->bytes,
			       (unsigned long long)res->runtime_state_bytes, res->ms);
	} else {
		cli_run_tiers_event(ctx->tiers, ev);
	}
}

static int on_step(void *vctx, qe_rank *r, const qe_step_report *rep)
{
	rank_ctx *ctx = vctx;
	int rc;
	ctx->last_loss = rep->loss;
	cli_progress_step(&ctx->progress, rep);
	if (ctx->job->json)
		meter_sample(ctx, r, rep);
	/* Traces and losses go to rank 0's catalog (replica 0 speaks for its replicas); then the
	 * checkpoint policy: whether this step is a boundary, and what it does. */
	if (ctx->ck) {
		cat_loss l = { rep->step, rep->loss, rep->eval_loss, rep->tokens_per_s, rep->ms, rep->lr, rep->grad_norm };
		if ((rc = ckpt_record_step(ctx->ck, r, rep->rows, (size_t)rep->nrows, &l)))
			return qe_fail_ctx(rc, "recording step %lld", (long long)rep->step);
		if ((rc = ckpt_policy_step(ctx->policy, r, rep->step)))
			return rc;
	}
	return cli_train_sample_step(ctx->sample, r, rep->step);
}

/* One JSON line per rank: what it ran and the resources it provisioned. */
static void print_counters(qe_rank *r, const rank_ctx *ctx)
{
	qe_rank_counters k;
	qe_rank_get_counters(r, &k);
	int peak = k.peak_live_tapes;
	uint64_t delayed = k.delayed_dw;
	/* A fingerprint of the parameters: replicas of one pipeline rank must agree. */
	XXH3_state_t *h = XXH3_createState();
	XXH3_64bits_reset(h);
	for (int c = 0; c < qe_rank_nchunks(r); c++) {
		qe_stage *st = qe_rank_stage(r, c);
		size_t n = qe_stage_param_floats(st) * 4;
		void *buf = malloc(n);
		if (buf && !qe_rank_backend(r)->ops->copy(NULL, buf, qe_stage_params(st), n, QE_COPY_D2H))
			XXH3_64bits_update(h, buf, n);
		free(buf);
	}
	unsigned long long pfp = (unsigned long long)XXH3_64bits_digest(h);
	XXH3_freeState(h);
	printf("{\"rank\":%d,\"params_fp\":\"%016llx\",\"pipeline_rank\":%d,\"replica\":%d,\"chunks\":%d,\"steps\":%lld,\"last_loss\":%.6f,"
	       "\"graphs\":%d,\"replays\":%llu,\"handoffs\":%llu,\"capture_ms\":%.3f,\"arena_bytes\":%zu,"
	       "\"peak_live_tapes\":%d,\"delayed_dw\":%llu,\"arena_writes\":%llu,\"live_tapes\":%d,\"tape_slots\":%d,"
	       "\"p2p\":\"%s\",\"link_sends\":%lld,\"link_bytes\":%lld,",
	       qe_rank_index(r), pfp, qe_rank_pipeline_rank(r), qe_rank_replica(r), qe_rank_nchunks(r), (long long)k.steps,
	       ctx->last_loss, k.graphs, (unsigned long long)k.replays, (unsigned long long)k.handoffs, k.capture_ms,
	       k.arena_bytes, peak, (unsigned long long)delayed, (unsigned long long)k.arena_writes, k.live_tapes,
	       k.tape_slots,
	       k.device_links ? "device" : "host", (long long)k.link_sends, (long long)k.link_bytes);
	/* Memory (rank_meter.h) and per-step times; growth from the end of this process's second step. */
	cli_run_tiers_json(ctx->tiers, ckpt_policy_steps_while_pushing(ctx->policy));
	cli_alloc_stats a;
	cli_rank_meter_get(&a);
	printf("\"alloc_setup_bytes\":%zu,\"alloc_peak_bytes\":%zu,\"alloc_live_bytes\":%zu,\"alloc_growth_bytes\":%lld,"
	       "\"mem_probe\":\"%s\",\"mem_setup_bytes\":%zu,\"mem_peak_bytes\":%zu,\"mem_growth_bytes\":%lld,"
	       "\"first_step_end_unix_ms\":%.3f,\"step_ms\":[",
	       ctx->alloc_setup, a.peak, a.live, (long long)ctx->alloc_last - (long long)ctx->alloc_base,
	       ctx->mem_probe ? ctx->mem_probe : "none", ctx->mem_setup, ctx->mem_peak,
	       (long long)ctx->mem_last - (long long)ctx->mem_base, ctx->first_step_end_unix_ms);
	for (int i = 0; i < ctx->nsteps; i++)
		printf("%s%.3f", i ? "," : "", ctx->step_ms[i]);
	printf("],\"ckpts\":[");
	for (int i = 0; i < ctx->nckpts; i++)
		printf("%s{\"step\":%lld,\"bytes\":%llu,\"ms\":%.3f}", i ? "," : "", ctx->ckpts[i].step,
		       ctx->ckpts[i].bytes, ctx->ckpts[i].ms);
	printf("]");
	if (ctx->restore_ms > 0)
		printf(",\"restore\":{\"step\":%lld,\"bytes\":%llu,\"ms\":%.3f,\"read_disk_bytes\":%llu,"
		       "\"read_memory_bytes\":%llu}",
		       ctx->restore_step, ctx->restore_bytes, ctx->restore_ms, ctx->restore_read_disk,
		       ctx->restore_read_memory);
	printf("}\n");
	fflush(stdout);
}

int cli_rank_main(void *vjob)
{
	cli_rank_job *job = vjob;
	qe_train_config *cfg = &job->cfg;
	qe_dist_env env;
	qe_comm *comm = NULL;
	qe_backend *b = NULL;
	qe_rank *r = NULL;
	qe_data data = { 0 };
	rank_ctx ctx = { .job = job };
	int rc = qe_dist_env_from_environ(&env);
	if (!rc && env.world_size > 1)
		rc = qe_comm_open(&env, 0, &comm);
	/*
	 * Under an external launcher only rank 0 created or opened the run (the
	 * others' hosts may have no catalog): everyone takes its run id and
	 * configuration.  Forked ranks already hold the same.
	 */
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, job->run_id, sizeof(job->run_id));
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, cfg, sizeof(*cfg));
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, &job->from_step, sizeof(job->from_step));
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, &job->until, sizeof(job->until));
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, &job->restart, sizeof(job->restart));
	/* --sample-every is collective: every rank takes rank 0's, whatever its own command line said */
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, &job->sample_every, sizeof(job->sample_every));
	if (!rc && comm)
		rc = qe_comm_bcast(comm, 0, &job->sample_tokens, sizeof(job->sample_tokens));
	if (!rc) {
		qe_log_set_rank(env.world_size > 1 ? env.rank : -1);
		rc = qe_backend_open(cfg->backend, &b);
	}
	/* the allocation meter: --json's counters, and the progress line's peak on cuda */
	if (!rc && (job->json || b->ops->device == QE_DEV_CUDA))
		rc = cli_rank_meter_attach(b);
	/* The command loaded the data before it wrote anything (a forked rank has its copy). */
	if (!rc && job->data)
		data = *job->data;
	else if (!rc)
		rc = qe_data_load(cfg->data, &data);
	if (!rc)
		rc = qe_data_check_vocab(&data, cfg->model.vocab, cfg->model.preset);
	if (!rc) {
		/* per-step traces read every microbatch's outputs at the step's end: one slot each */
		qe_train_config rcfg = *cfg;
		rcfg.full_slots = cfg->run_dir[0] && !job->no_trace;
		rc = qe_rank_create(&rcfg, b, comm, &r);
	}
	ctx.rank = r;
	if (!rc && job->ckpt_on_signal) {
		cli_preempt_install();
		qe_rank_set_stop_source(r, cli_preempt_flag());
	}
	if (!rc && job->json)
		meter_sample(&ctx, r, NULL);
	if (!rc && cfg->run_dir[0]) {
		/* Only rank 0 opens the catalog: the other ranks' hosts may not have it. */
		char path[CKPT_PATH_MAX];
		rc = ckpt_rundir_catalog(cfg->run_dir, path, sizeof(path));
		if (!rc && env.rank == 0)
			rc = cat_open(path, 0, &ctx.cat);
		if (!rc)
			rc = ckpt_session_open(cfg->run_dir, job->run_id, ctx.cat, &ctx.ck);
		/* another run's store where this rank's will be: refused before step 1 */
		if (!rc && (cfg->ckpt_every > 0 || job->resume))
			rc = ckpt_store_check_owner(ctx.ck, r);
		if (!rc && job->restart) {
			/* The run starts over: this rank's store holds only chunks of attempts that never committed. */
			uint64_t n = 0, bytes = 0;
			rc = ckpt_store_clear(ctx.ck, r, &n, &bytes);
			if (!rc && n)
				qe_log(QE_LOG_INFO, "the run starts over: deleted %llu chunks (%llu bytes) of its earlier attempts "
						    "from this rank's store",
				       (unsigned long long)n, (unsigned long long)bytes);
		}
		/* Replica targets (--ckpt-replicas): agreed now, so a bad count fails before training. */
		if (!rc && cfg->ckpt_every > 0)
			rc = ckpt_replicas_prepare(ctx.ck, r);
		if (!rc && job->ckpt_async)
			rc = ckpt_async_open(ctx.ck, env.rank == 0 ? path : NULL, (ckpt_async_mode)job->ckpt_async, &ctx.async);
		if (!rc && ctx.async && ckpt_async_prepare(ctx.async, r))
			qe_log(QE_LOG_WARN, "async checkpoints: the snapshot memory will be allocated at the first save (%s)",
			       qe_last_error());
	}
	/* train --init-from: every rank loads its own stages' weights before step 1; never on resume */
	if (!rc && cfg->init_from[0] && !job->resume) {
		cli_import im;
		rc = cli_import_open(cfg->init_from, &cfg->model, 0, &im);
		if (!rc)
			rc = cli_import_load_rank(&im, r);
		cli_import_release(&im);
	}
	if (!rc && job->resume) {
		ckpt_result res;
		rc = ckpt_restore(ctx.ck, r, job->from_step, &res);
		if (!rc) {
			ctx.restore_step = (long long)res.step;
			ctx.restore_bytes = (unsigned long long)res.bytes;
			ctx.restore_ms = res.ms;
			ctx.restore_read_disk = (unsigned long long)res.read_disk_bytes;
			ctx.restore_read_memory = (unsigned long long)res.read_memory_bytes;
		}
		if (!rc && env.rank == 0 && !job->quiet)
			fprintf(job->log_json ? stderr : stdout, "resumed from checkpoint step %lld (%llu bytes) in %.1f ms\n",
				(long long)res.step,
			       (unsigned long long)res.bytes, res.ms);
	}
	/* The policy and its tiers start after a restore: only checkpoints of this job's steps are pushed. */
	if (!rc && ctx.ck) {
		char path[CKPT_PATH_MAX];
		ckpt_policy_opts po;
		rc = ckpt_rundir_catalog(cfg->run_dir, path, sizeof(path));
		if (!rc)
			rc = cli_run_tiers_open(cfg->ckpt_every, qe_rank_index(r), cfg->run_dir, job->quiet, &ctx.tiers);
		if (!rc) {
			cli_run_tiers_policy(cfg->ckpt_every, job->ckpt_async, env.rank == 0 ? path : NULL,
					     qe_rank_steps_done(r), &po);
			rc = ckpt_policy_open(ctx.ck, ctx.async, &po, on_policy_event, &ctx, &ctx.policy);
		}
	}
	if (!rc && job->sample_every > 0)
		rc = cli_train_sample_open(r, job->sample_every, job->sample_tokens, job->log_json, &ctx.sample);
	if (!rc) {
		qe_train_hooks hooks = { &ctx, on_step, ctx.ck != NULL && !job->no_trace };
		cli_progress_init(&ctx.progress, cfg, env.rank == 0 && !job->quiet, job->log_json,
				  b->ops->device == QE_DEV_CUDA, qe_rank_steps_done(r), job->until);
		rc = qe_train_run(r, &data, job->until, &hooks);
	}
	/* stopped early on a signal: every rank is at the same step; a checkpoint there unless one was just taken */
	int stopped = !rc && qe_rank_stop_agreed(r) && qe_rank_steps_done(r) < job->until;
	if (stopped && ctx.ck)
		rc = ckpt_policy_stop(ctx.policy, r, qe_rank_steps_done(r));
	if (ctx.async) {
		/* The last checkpoint may still be in flight: it must be committed (or fail) before we exit.
		 * A failure before it keeps its code and message first: the drain's must not pass for it. */
		char first[1024];
		snprintf(first, sizeof(first), "%s", rc ? qe_last_error() : "");
		ckpt_async_result done;
		/* Every rank together when training succeeded here (the last write's commit frees what it
		 * replaced in the memory tier); a rank that failed only waits for its own write. */
		int drc = rc ? ckpt_async_drain(ctx.async, &done) : ckpt_async_finish(ctx.async, r, &done);
		if (!drc)
			print_async_done(&ctx, r, done.done_step, done.done_ms);
		else if (!rc)
			rc = drc;
		else {
			char then[1024];
			snprintf(then, sizeof(then), "%s", qe_last_error());
			qe_fail(rc, "%s; and then %s", first, then);
		}
		if (rc && !drc)
			qe_fail(rc, "%s", first);
	}
	/* The last push (waited for, with progress) and the last retention, after the last commit. */
	if (!rc && ctx.policy)
		rc = ckpt_policy_end(ctx.policy, r, cli_run_tiers_progress, ctx.tiers);
	if (!rc)
		cli_progress_summary(&ctx.progress);
	if (!rc && stopped && env.rank == 0)
		fprintf(stderr, "qeffect: stopped after step %lld of %lld on SIGTERM or SIGINT to a rank%s%s (exit status %d)\n",
			(long long)qe_rank_steps_done(r), (long long)job->until,
			ctx.ck ? ": its checkpoint is committed; continue with: qeffect resume --run-dir "
			       : "; no --run-dir, so nothing was saved",
			ctx.ck ? cfg->run_dir : "", CLI_EXIT_PREEMPTED);
	if (!rc && job->json)
		print_counters(r, &ctx);
	/* Every step trained, but a background push that failed makes the run's exit non-zero; the ranks
	 * still end together (no abandon: nothing is wrong with them). */
	int pushes_rc = rc ? QE_OK : cli_run_tiers_failed(ctx.tiers);
	if (pushes_rc)
		fprintf(stderr, "qeffect: %s\n", qe_last_error());
	if (rc) {
		fprintf(stderr, "qeffect: rank %d: %s (%s)\n", env.rank, qe_last_error()[0] ? qe_last_error() : qe_strerror(rc),
			qe_errname(rc));
		qe_rank_abandon(r);
	}
	cli_train_sample_close(ctx.sample);
	ckpt_policy_close(ctx.policy);
	cli_run_tiers_close(ctx.tiers);
	ckpt_async_close(ctx.async);
	ckpt_session_close(ctx.ck);
	cat_close(ctx.cat);
	qe_rank_free(r);
	if (!job->data)
		qe_data_free(&data);
	free(ctx.step_ms);
	if (b) {
		cli_rank_meter_detach(b);
		qe_backend_close(b);
	}
	qe_comm_close(comm);
	fflush(stdout);
	return rc || pushes_rc ? 1 : stopped ? CLI_EXIT_PREEMPTED : 0;
}

int cli_launched(int *rank)
{
	qe_dist_env env;
	int rc = qe_dist_env_from_environ(&env);
	if (rank)
		*rank = rc ? -1 : env.rank;
	if (rc)
		qe_clear_error();
	return rc || env.source != QE_DIST_NONE;
}

int cli_run_nproc_check(const char *cmd, const qe_train_config *cfg, int nproc)
{
	int world = cfg->pp * cfg->dp;
	if (nproc <= 0 || nproc == world || cli_launched(NULL))
		return 0;
	fprintf(stderr, "qeffect %s: --nproc %d does not match --pp %d x --dp %d = %d ranks\n", cmd, nproc, cfg->pp,
		cfg->dp, world);
	return 2;
}

int cli_run_job(const char *cmd, cli_rank_job *job, int nproc)
{
	int world = job->cfg.pp * job->cfg.dp;
	if (nproc <= 0)
		nproc = world;
	if (cli_launched(NULL))
		return cli_rank_main(job); /* started by an external launcher */
	int rc = cli_run_nproc_check(cmd, &job->cfg, nproc);
	if (rc)
		return rc;
	if (nproc == 1)
		return cli_rank_main(job);
	fflush(stdout);
	fflush(stderr);
	qe_launch_result res;
	rc = qe_launch_local(nproc, cli_rank_main, job, NULL, 0, &res);
	if (rc) {
		fprintf(stderr, "qeffect %s: %s\n", cmd, qe_last_error());
		return 1;
	}
	for (int i = 0; i < res.nproc; i++)
		if (res.ranks[i].exit_code == CLI_EXIT_PREEMPTED)
			return CLI_EXIT_PREEMPTED; /* the ranks stopped together on a signal (preempt.h) */
	return 0;
}
