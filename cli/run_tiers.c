/*
 * run_tiers.c - the persistent tier and local retention inside a rank
 * process (run_tiers.h): opening them from the tier flags, the persist point
 * and retention at each checkpoint boundary, the wait at the end, and what
 * rank 0 prints about them.
 *
 * A failed background push never stops training: it is printed to stderr
 * (step, URL, error) and kept for `--json`; the checkpoint stays local and
 * is tried again at the next point.  A failed retention is printed too and
 * training goes on; only a comm failure (the ranks can no longer agree) is
 * returned.
 */
#include "cli/run_tiers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt/tiers/ckpt_persist.h"
#include "runtime/comm/comm.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/rank.h"
#include "cli/tier_flags.h"

#define MAX_EVENTS 256

struct cli_run_tiers {
	cli_tiers cfg;
	ckpt_persist *persist;
	int quiet;
	int rank;
	char run_dir[1024];
	int64_t steps_while_pushing;
	int64_t pushes_started;
	int64_t pushed[MAX_EVENTS];
	int npushed;
	json_t *failed; /* rank 0: [{"step", "url", "error"}] */
	int64_t nfailed;  /* rank 0: background pushes that failed */
	char failed_steps[256];
	uint64_t local_dropped, chunks_deleted, bytes_reclaimed;
	uint64_t remote_dropped;
};

int cli_run_tiers_open(ckpt_session *ck, qe_rank *r, const char *catalog_path, int64_t first_step, int quiet,
		       cli_run_tiers **out)
{
	*out = NULL;
	cli_tiers cfg;
	cli_tiers_get(&cfg);
	if (!ck || (!cfg.keep && !cfg.persist_every))
		return QE_OK;
	cli_run_tiers *t = calloc(1, sizeof(*t));
	if (!t || !(t->failed = json_array())) {
		free(t);
		return qe_fail(QE_ENOMEM, "checkpoint tiers: out of memory");
	}
	t->cfg = cfg;
	t->quiet = quiet;
	t->rank = qe_rank_index(r);
	snprintf(t->run_dir, sizeof(t->run_dir), "%s", qe_rank_config(r)->run_dir);
	if (cfg.persist_every) {
		ckpt_persist_opts o = { .url = cfg.remote,
					.endpoint = cfg.endpoint,
					.every = cfg.persist_every,
					.keep = cfg.persist_keep,
					.grace_s = cfg.persist_grace_s,
					.catalog_path = catalog_path,
					.min_step = first_step };
		int rc = ckpt_persist_open(ck, &o, &t->persist);
		if (rc) {
			json_decref(t->failed);
			free(t);
			return qe_fail_ctx(rc, "--ckpt-persist-every");
		}
	}
	*out = t;
	return QE_OK;
}

void cli_run_tiers_step(cli_run_tiers *t)
{
	if (t && ckpt_persist_busy(t->persist))
		t->steps_while_pushing++;
}

int cli_run_tiers_retains(const cli_run_tiers *t)
{
	return t && t->cfg.keep > 0;
}

/* Rank 0: what a finished push says. */
static void report_done(cli_run_tiers *t, const ckpt_persist_event *ev)
{
	if (!ev->done || t->rank != 0)
		return;
	if (!ev->done_rc) {
		if (t->npushed < MAX_EVENTS)
			t->pushed[t->npushed++] = ev->done_step;
		t->remote_dropped += (uint64_t)ev->remote_dropped;
		if (!t->quiet)
			printf("checkpoint step %lld pushed to %s in the background: %llu chunks (%llu uploaded, %llu bytes) "
			       "in %.1f ms%s\n",
			       (long long)ev->done_step, ev->done_url, (unsigned long long)ev->chunks,
			       (unsigned long long)ev->chunks_uploaded, (unsigned long long)ev->bytes_uploaded, ev->done_ms,
			       ev->remote_dropped ? "; older pushed checkpoints dropped from the remote" : "");
		fflush(stdout);
		return;
	}
	fprintf(stderr,
		"qeffect: the background push of checkpoint step %lld to %s failed: %s (training goes on; the checkpoint "
		"stays local and is tried again at the next checkpoint, or push it with 'qeffect push --run-dir %s "
		"--remote %s --step %lld')\n",
		(long long)ev->done_step, ev->done_url, ev->done_msg, t->run_dir, t->cfg.remote, (long long)ev->done_step);
	fflush(stderr);
	size_t u = strlen(t->failed_steps);
	if (t->nfailed++ < 16)
		snprintf(t->failed_steps + u, sizeof(t->failed_steps) - u, "%s%lld", u ? ", " : "", (long long)ev->done_step);
	if (json_array_size(t->failed) < MAX_EVENTS) {
		json_t *o = json_object();
		if (o) {
			json_object_set_new(o, "step", json_integer((json_int_t)ev->done_step));
			json_object_set_new(o, "url", json_string(ev->done_url));
			json_object_set_new(o, "error", json_string(ev->done_msg));
			json_array_append_new(t->failed, o);
		}
	}
}

int cli_run_tiers_point(cli_run_tiers *t, qe_rank *r)
{
	if (!t || !t->persist)
		return QE_OK;
	ckpt_persist_event ev;
	int rc = ckpt_persist_point(t->persist, r, &ev);
	if (rc)
		return rc;
	report_done(t, &ev);
	if (ev.started) {
		t->pushes_started++;
		if (t->rank == 0 && !t->quiet) {
			printf("checkpoint step %lld: pushing it to %s in the background\n", (long long)ev.step, t->cfg.remote);
			fflush(stdout);
		}
	}
	return QE_OK;
}

int cli_run_tiers_retain(cli_run_tiers *t, ckpt_session *ck, qe_rank *r)
{
	if (!cli_run_tiers_retains(t))
		return QE_OK;
	/* Never collected here: the checkpoint being pushed, and the one the next point would push. */
	int64_t pins[2];
	size_t npins = 0;
	if (t->rank == 0 && t->persist) {
		int64_t a = ckpt_persist_inflight(t->persist), b = ckpt_persist_due(t->persist);
		if (a >= 0)
			pins[npins++] = a;
		if (b >= 0 && b != a)
			pins[npins++] = b;
	}
	ckpt_retain_result res;
	int rc = ckpt_retain_local(ck, r, t->cfg.keep, pins, npins, t->cfg.keep_grace_s, &res);
	if (rc) {
		qe_comm *c = qe_rank_comm(r);
		if (c && qe_comm_failed(c))
			return rc;
		fprintf(stderr, "qeffect: rank %d: --ckpt-keep: %s (training goes on)\n", t->rank, qe_last_error());
		return QE_OK;
	}
	t->local_dropped += res.dropped;
	t->chunks_deleted += res.chunks_deleted;
	t->bytes_reclaimed += res.bytes_reclaimed;
	if (t->rank == 0 && res.dropped && !t->quiet) {
		printf("--ckpt-keep %d: dropped %llu older local checkpoint%s\n", t->cfg.keep, (unsigned long long)res.dropped,
		       res.dropped == 1 ? "" : "s");
		fflush(stdout);
	}
	return QE_OK;
}

/* Every point's event in the final wait: finished pushes reported, started ones counted. */
static void on_event(void *ctx, const ckpt_persist_event *ev)
{
	cli_run_tiers *t = ctx;
	report_done(t, ev);
	if (ev->started) {
		t->pushes_started++;
		if (t->rank == 0 && !t->quiet) {
			printf("checkpoint step %lld: pushing it to %s in the background (end of training)\n", (long long)ev->step,
			       t->cfg.remote);
			fflush(stdout);
		}
	}
}

static void progress(void *ctx, const ckpt_persist_progress *p)
{
	cli_run_tiers *t = ctx;
	if (t->quiet)
		return;
	printf("waiting for the background push of checkpoint step %lld to %s: %s, %llu of %llu bytes done, %llu of "
	       "%llu chunks of rank 0 uploaded, %d of %d ranks done\n",
	       (long long)p->step, t->cfg.remote, p->phase, (unsigned long long)p->bytes_done,
	       (unsigned long long)p->bytes_total, (unsigned long long)p->chunks_done,
	       (unsigned long long)p->chunks_total, p->ranks_done, p->ranks_total);
	fflush(stdout);
}

int cli_run_tiers_end(cli_run_tiers *t, ckpt_session *ck, qe_rank *r)
{
	if (!t)
		return QE_OK;
	if (t->persist) {
		if (t->rank == 0 && !t->quiet && ckpt_persist_busy(t->persist)) {
			printf("training done; waiting for the background push of checkpoint step %lld\n",
			       (long long)ckpt_persist_inflight(t->persist));
			fflush(stdout);
		}
		int rc = ckpt_persist_finish(t->persist, r, progress, t, on_event, t);
		if (rc)
			return rc;
	}
	return cli_run_tiers_retain(t, ck, r);
}

int cli_run_tiers_failed(const cli_run_tiers *t)
{
	if (!t || t->rank != 0 || !t->nfailed)
		return QE_OK;
	return qe_fail(QE_ESTORE,
		       "%lld background push%s to %s failed (step%s %s%s); training finished and every checkpoint stays "
		       "local: push them with 'qeffect push --run-dir %s --remote %s --all'",
		       (long long)t->nfailed, t->nfailed > 1 ? "es" : "", t->cfg.remote, t->nfailed > 1 ? "s" : "",
		       t->failed_steps, t->nfailed > 16 ? ", ..." : "", t->run_dir, t->cfg.remote);
}

void cli_run_tiers_json(const cli_run_tiers *t)
{
	if (!t)
		return;
	printf("\"persist_every\":%lld,\"persist_started\":%lld,\"persist_steps_while_pushing\":%lld,\"persist_pushed\":[",
	       (long long)t->cfg.persist_every, (long long)t->pushes_started, (long long)t->steps_while_pushing);
	for (int i = 0; i < t->npushed; i++)
		printf("%s%lld", i ? "," : "", (long long)t->pushed[i]);
	char *failed = json_dumps(t->failed, JSON_COMPACT);
	printf("],\"persist_failed\":%s,\"persist_remote_dropped\":%llu,\"keep_local_dropped\":%llu,"
	       "\"keep_chunks_deleted\":%llu,\"keep_bytes_reclaimed\":%llu,",
	       failed ? failed : "[]", (unsigned long long)t->remote_dropped, (unsigned long long)t->local_dropped,
	       (unsigned long long)t->chunks_deleted, (unsigned long long)t->bytes_reclaimed);
	free(failed);
}

void cli_run_tiers_close(cli_run_tiers *t)
{
	if (!t)
		return;
	ckpt_persist_close(t->persist);
	json_decref(t->failed);
	free(t);
}
