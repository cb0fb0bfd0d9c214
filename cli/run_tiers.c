/*
 * run_tiers.c - what a rank process says about the persistent tier and local
 * retention (run_tiers.h): the policy's options from the tier flags, and
 * the lines and --json fields of the tier events the checkpoint policy
 * (ckpt/protocol/ckpt_policy.h) reports at each boundary and at the end.
 *
 * A failed background push never stops training: it is printed to stderr
 * (step, URL, error) and kept for `--json`; the checkpoint stays local and
 * is tried again at the next point.  A failed retention is printed too and
 * training goes on (the policy returns only a comm failure).
 */
#include "cli/run_tiers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/core/status.h"
#include "cli/tier_flags.h"

#define MAX_EVENTS 256

struct cli_run_tiers {
	cli_tiers cfg;
	int quiet;
	int rank;
	char run_dir[1024];
	int64_t pushes_started;
	int64_t pushed[MAX_EVENTS];
	int npushed;
	json_t *failed; /* rank 0: [{"step", "url", "error"}] */
	int64_t nfailed;  /* rank 0: background pushes that failed */
	char failed_steps[256];
	uint64_t local_dropped, chunks_deleted, bytes_reclaimed;
	uint64_t remote_dropped;
};

void cli_run_tiers_policy(int64_t every, int async, const char *catalog_path, int64_t first_step,
			  ckpt_policy_opts *out)
{
	cli_tiers cfg;
	cli_tiers_get(&cfg);
	memset(out, 0, sizeof(*out));
	out->every = every;
	out->async = (ckpt_async_mode)async;
	if (every <= 0)
		return; /* the tiers work at checkpoint boundaries: none without --ckpt-every */
	out->keep = cfg.keep;
	out->keep_grace_s = cfg.keep_grace_s;
	out->persist = (ckpt_persist_opts){ .url = cfg.remote,
					    .endpoint = cfg.endpoint,
					    .every = cfg.persist_every,
					    .keep = cfg.persist_keep,
					    .grace_s = cfg.persist_grace_s,
					    .catalog_path = catalog_path,
					    .min_step = first_step };
}

int cli_run_tiers_open(int64_t every, int rank, const char *run_dir, int quiet, cli_run_tiers **out)
{
	*out = NULL;
	cli_tiers cfg;
	cli_tiers_get(&cfg);
	if (every <= 0 || (!cfg.keep && !cfg.persist_every))
		return QE_OK;
	cli_run_tiers *t = calloc(1, sizeof(*t));
	if (!t || !(t->failed = json_array())) {
		free(t);
		return qe_fail(QE_ENOMEM, "checkpoint tiers: out of memory");
	}
	t->cfg = cfg;
	t->quiet = quiet;
	t->rank = rank;
	snprintf(t->run_dir, sizeof(t->run_dir), "%s", run_dir);
	*out = t;
	return QE_OK;
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

/* A push started: at a boundary, or in the final wait (end). */
static void report_started(cli_run_tiers *t, const ckpt_persist_event *ev, int end)
{
	if (!ev->started)
		return;
	t->pushes_started++;
	if (t->rank == 0 && !t->quiet) {
		printf("checkpoint step %lld: pushing it to %s in the background%s\n", (long long)ev->step, t->cfg.remote,
		       end ? " (end of training)" : "");
		fflush(stdout);
	}
}

static void report_retained(cli_run_tiers *t, const ckpt_policy_event *ev)
{
	if (ev->rc) {
		fprintf(stderr, "qeffect: rank %d: --ckpt-keep: %s (training goes on)\n", t->rank, qe_last_error());
		return;
	}
	const ckpt_retain_result *res = ev->retain;
	t->local_dropped += res->dropped;
	t->chunks_deleted += res->chunks_deleted;
	t->bytes_reclaimed += res->bytes_reclaimed;
	if (t->rank == 0 && res->dropped && !t->quiet) {
		printf("--ckpt-keep %d: dropped %llu older local checkpoint%s\n", t->cfg.keep, (unsigned long long)res->dropped,
		       res->dropped == 1 ? "" : "s");
		fflush(stdout);
	}
}

void cli_run_tiers_event(cli_run_tiers *t, const ckpt_policy_event *ev)
{
	if (!t)
		return;
	switch (ev->what) {
	case CKPT_POLICY_RETAINED:
		report_retained(t, ev);
		break;
	case CKPT_POLICY_PERSIST:
		report_done(t, ev->persist);
		report_started(t, ev->persist, ev->at_end);
		break;
	case CKPT_POLICY_END_WAIT:
		if (t->rank == 0 && !t->quiet) {
			printf("training done; waiting for the background push of checkpoint step %lld\n", (long long)ev->step);
			fflush(stdout);
		}
		break;
	default:
		break;
	}
}

void cli_run_tiers_progress(void *ctx, const ckpt_persist_progress *p)
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

void cli_run_tiers_json(const cli_run_tiers *t, int64_t steps_while_pushing)
{
	if (!t)
		return;
	printf("\"persist_every\":%lld,\"persist_started\":%lld,\"persist_steps_while_pushing\":%lld,\"persist_pushed\":[",
	       (long long)t->cfg.persist_every, (long long)t->pushes_started, (long long)steps_while_pushing);
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
	json_decref(t->failed);
	free(t);
}
