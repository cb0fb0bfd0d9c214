/*
 * cmd_gc.c - `qeffect gc --run-dir DIR --keep-last N`: drop old checkpoints
 * (catalog rows first), then the chunks nothing references any more; with
 * --remote s3://BUCKET/PREFIX the same policy on object storage (manifests
 * first, then unreferenced chunk objects).  The policy and the crash-safe
 * orders are in ckpt/query/ckpt_query_gc.c and ckpt/remote/ckpt_remote_gc.c; this file
 * parses flags and prints what was kept, what went and why.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/run.h"
#include "cli/store_job.h"
#include "ckpt/query/ckpt_job.h"
#include "ckpt/query/ckpt_query.h"
#include "ckpt/remote/ckpt_remote.h"
#include "runtime/core/env.h"
#include "runtime/core/status.h"

#define MAX_PINS 256
#define DEFAULT_GRACE 600

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect gc --run-dir DIR --keep-last N [--keep-every K] [--pin STEP]...\n"
		   "                 [--grace SECONDS] [--compact | --dry-run] [--nproc N] [--json]\n"
		   "       qeffect gc --remote s3://BUCKET/PREFIX [--endpoint URL] [--run-dir DIR] [--run-id ID]\n"
		   "                 --keep-last N [--keep-every K] [--pin STEP]... [--grace SECONDS] [--dry-run] [--json]\n\n"
		   "Drop the checkpoints of a run that are not kept, then delete the store chunks that no\n"
		   "remaining checkpoint lists.  Kept: the N latest committed (N >= 1), committed steps\n"
		   "that are multiples of K, every --pin'ned step, and pending checkpoints that may still\n"
		   "be in progress.  Dropped: other committed checkpoints, aborted ones (never loadable),\n"
		   "pending ones below the newest committed step and older than the grace period.\n"
		   "--grace SECONDS (default %d) also protects store chunks put that recently: a\n"
		   "checkpoint being written stores its chunks before the catalog lists them.  Use\n"
		   "--grace 0 only when no training writes to this run.\n"
		   "Catalog rows go first (one transaction, flushed), chunks after, so a crash never\n"
		   "leaves a committed checkpoint with missing chunks.  The store file does not shrink:\n"
		   "the freed bytes are reusable inside the store (LMDB reuses the pages for later\n"
		   "checkpoints), which is what gc reports.  --dry-run decides and counts, changing nothing.\n"
		   "  --compact       then rewrite every store with LMDB's compacting copy (a temporary file\n"
		   "                  beside it, flushed, renamed over data.mdb, the folder flushed) and report\n"
		   "                  the bytes freed on disk.  It needs each store alone: a training, resume or\n"
		   "                  reader that has one open makes it fail (QE_EBUSY, naming the pid); a\n"
		   "                  failure (a full disk: the copy needs room for the live data) leaves that\n"
		   "                  store as it was.\n"
		   "\n"
		   "Alone, gc collects the stores on this host's disk.  As a job (--nproc N, or one process\n"
		   "per host under a launcher: torchrun, srun or mpirun (README, \"Launchers\"), the same command\n"
		   "line everywhere) rank 0 (the host with the catalog) drops the rows, then sends every rank\n"
		   "the chunks to keep, and each rank collects the stores on its own disk, in parallel.\n"
		   "  --nproc N       fork N local ranks (as train --nproc)\n"
		   "\n"
		   "With --remote, the same policy applies to the manifests under PREFIX/checkpoints/, per run\n"
		   "(or only run ID with --run-id): dropped manifests are deleted first, then every object\n"
		   "PREFIX/chunks/<hash> that no remaining manifest of any run lists and whose LastModified is\n"
		   "older than --grace (a push uploads its chunks before its manifest; the server's clock is\n"
		   "compared with ours).  Every manifest is read before anything is deleted: an unreadable one\n"
		   "stops gc.  --run-dir DIR (optional here) also forgets the dropped copies in DIR's catalog.\n"
		   "Do not gc a prefix while a push re-uses chunks that only a dropped manifest lists.\n"
		   "  --endpoint URL  the server (http://host:port); default AWS_ENDPOINT_URL, else AWS\n"
		   "  credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION\n"
		   "Exit status: 0 done, 1 failure, 2 bad usage.\n",
		DEFAULT_GRACE);
}

static void remote_print(const char *url, const ckpt_remote_gc_report *g, int dry, int json, long grace)
{
	if (json) {
		json_t *o = json_object(), *a = json_array(), *mp = json_array();
		for (size_t i = 0; i < g->n; i++)
			json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I,s:b,s:i,s:s}", "run_id", g->items[i].run_id,
							   "step", (json_int_t)g->items[i].step, "bytes",
							   (json_int_t)g->items[i].bytes, "manifest_bytes",
							   (json_int_t)g->items[i].manifest_bytes, "dropped", g->items[i].drop,
							   "catalog_rows", g->items[i].catalog_rows, "why", g->items[i].why));
		for (size_t i = 0; i < g->n_missing_pins; i++)
			json_array_append_new(mp, json_integer(g->missing_pins[i]));
		json_object_set_new(o, "remote", json_string(url));
		json_object_set_new(o, "dry_run", json_boolean(dry));
		json_object_set_new(o, "checkpoints", a);
		json_object_set_new(o, "runs", json_integer((json_int_t)g->runs));
		json_object_set_new(o, "dropped", json_integer((json_int_t)g->dropped));
		json_object_set_new(o, "dropped_bytes", json_integer((json_int_t)g->dropped_bytes));
		json_object_set_new(o, "kept", json_integer((json_int_t)g->kept));
		json_object_set_new(o, "missing_pins", mp);
		json_object_set_new(o, "manifests_late", json_integer((json_int_t)g->manifests_late));
		json_object_set_new(o, "chunks_listed", json_integer((json_int_t)g->chunks_listed));
		json_object_set_new(o, "chunks_referenced", json_integer((json_int_t)g->chunks_referenced));
		json_object_set_new(o, "chunks_missing", json_integer((json_int_t)g->chunks_missing));
		json_object_set_new(o, "chunks_deleted", json_integer((json_int_t)g->chunks_deleted));
		json_object_set_new(o, "chunk_bytes_deleted", json_integer((json_int_t)g->chunk_bytes_deleted));
		json_object_set_new(o, "chunks_young", json_integer((json_int_t)g->chunks_young));
		json_object_set_new(o, "young_bytes", json_integer((json_int_t)g->young_bytes));
		json_object_set_new(o, "manifest_bytes_deleted", json_integer((json_int_t)g->manifest_bytes_deleted));
		json_object_set_new(o, "bytes_reclaimed", json_integer((json_int_t)g->bytes_reclaimed));
		json_object_set_new(o, "foreign_objects", json_integer((json_int_t)g->foreign));
		json_object_set_new(o, "catalog_rows", json_integer((json_int_t)g->catalog_rows));
		json_object_set_new(o, "requests", json_integer((json_int_t)g->requests));
		json_object_set_new(o, "grace_s", json_integer(grace));
		json_object_set_new(o, "ms", json_real(g->ms));
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
		return;
	}
	const char *would = dry ? "would drop" : "dropped";
	for (size_t i = 0; i < g->n; i++)
		printf("%-11s %s step %6lld  %12llu bytes  %s\n", g->items[i].drop ? would : "kept", g->items[i].run_id,
		       (long long)g->items[i].step, (unsigned long long)g->items[i].bytes, g->items[i].why);
	for (size_t i = 0; i < g->n_missing_pins; i++)
		printf("note: pinned step %lld has no manifest\n", (long long)g->missing_pins[i]);
	printf("%s%s: %s %llu manifests, kept %llu; chunks: %llu listed, %llu referenced, %llu %s; %llu bytes %s\n",
	       dry ? "dry run: " : "", url, would, (unsigned long long)g->dropped, (unsigned long long)g->kept,
	       (unsigned long long)g->chunks_listed, (unsigned long long)g->chunks_referenced,
	       (unsigned long long)g->chunks_deleted, dry ? "would be deleted" : "deleted",
	       (unsigned long long)g->bytes_reclaimed, dry ? "would be reclaimed" : "reclaimed");
	if (g->catalog_rows)
		printf("%llu remote-copy rows %s from the local catalog\n", (unsigned long long)g->catalog_rows,
		       dry ? "would be dropped" : "dropped");
	if (g->chunks_young)
		printf("%llu unreferenced chunks (%llu bytes) are younger than %ld s and were left for a later gc "
		       "(--grace)\n",
		       (unsigned long long)g->chunks_young, (unsigned long long)g->young_bytes, grace);
	if (g->chunks_missing)
		printf("warning: %llu chunks listed by remaining manifests are missing on the remote\n",
		       (unsigned long long)g->chunks_missing);
}

static int gc_run(const char *dir, const char *remote, const char *endpoint, const char *run_id, long keep_last,
		  long keep_every, int64_t *pins, size_t npins, long grace, int dry, int compact, int json);

/* Bytes compaction freed on disk (negative when the file took more blocks than before). */
static json_int_t freed(const store_compact_result *c)
{
	return (json_int_t)c->disk_before - (json_int_t)c->disk_after;
}

/* The report of a local gc; job: where each store is and what went there (the job form), or NULL. */
static void local_print(const char *dir, const ckpt_gc_report *g, const ckpt_job_report *job, int dry, int json,
			long grace)
{
	if (json) {
		json_t *o = json_object(), *a = json_array(), *mp = json_array();
		for (size_t i = 0; i < g->n; i++)
			json_array_append_new(a, json_pack("{s:I,s:I,s:s,s:I,s:b,s:s}", "id", (json_int_t)g->items[i].id,
							   "step", (json_int_t)g->items[i].step, "status",
							   cat_status_name(g->items[i].status), "bytes",
							   (json_int_t)g->items[i].bytes, "dropped", g->items[i].drop, "why",
							   g->items[i].why));
		for (size_t i = 0; i < g->n_missing_pins; i++)
			json_array_append_new(mp, json_integer(g->missing_pins[i]));
		json_object_set_new(o, "run_dir", json_string(dir));
		json_object_set_new(o, "dry_run", json_boolean(dry));
		json_object_set_new(o, "checkpoints", a);
		json_object_set_new(o, "dropped", json_integer((json_int_t)g->dropped));
		json_object_set_new(o, "dropped_bytes", json_integer((json_int_t)g->dropped_bytes));
		json_object_set_new(o, "kept", json_integer((json_int_t)g->kept));
		json_object_set_new(o, "missing_pins", mp);
		json_object_set_new(o, "keep_chunks", json_integer((json_int_t)g->keep_chunks));
		json_object_set_new(o, "chunks_examined", json_integer((json_int_t)g->store.examined));
		json_object_set_new(o, "chunks_deleted", json_integer((json_int_t)g->store.deleted));
		json_object_set_new(o, "chunks_young", json_integer((json_int_t)g->store.young));
		/* bytes_reclaimed: freed pages inside the stores, reusable there (the files keep their size) */
		json_object_set_new(o, "bytes_reclaimed", json_integer((json_int_t)g->store.bytes_reclaimed));
		json_object_set_new(o, "bytes_reusable_in_stores", json_integer((json_int_t)g->store.bytes_reclaimed));
		json_object_set_new(o, "compacted_stores", json_integer(g->compacted));
		if (g->compacted) {
			const store_compact_result *c = &g->compact;
			json_object_set_new(o, "disk_bytes_before", json_integer((json_int_t)c->disk_before));
			json_object_set_new(o, "disk_bytes_after", json_integer((json_int_t)c->disk_after));
			json_object_set_new(o, "disk_bytes_freed", json_integer(freed(c)));
		}
		json_object_set_new(o, "grace_s", json_integer(grace));
		if (job) {
			json_t *sa = json_array();
			for (size_t i = 0; i < job->n; i++) {
				const ckpt_job_store *x = &job->stores[i];
				json_t *so = json_pack("{s:s,s:i,s:i,s:s,s:s,s:I,s:I,s:I,s:I,s:b}", "store_id", x->store_id,
						       "owner", x->owner, "rank", x->rank, "host", x->host, "path", x->path,
						       "examined", (json_int_t)x->gc.examined, "deleted",
						       (json_int_t)x->gc.deleted, "young", (json_int_t)x->gc.young,
						       "bytes_reclaimed", (json_int_t)x->gc.bytes_reclaimed, "compacted",
						       x->compacted);
				if (so && x->compacted) {
					json_object_set_new(so, "disk_bytes_before", json_integer((json_int_t)x->compact.disk_before));
					json_object_set_new(so, "disk_bytes_after", json_integer((json_int_t)x->compact.disk_after));
					json_object_set_new(so, "disk_bytes_freed", json_integer(freed(&x->compact)));
				}
				json_array_append_new(sa, so);
			}
			json_object_set_new(o, "ranks", json_integer(job->world));
			json_object_set_new(o, "stores", sa);
		}
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		const char *would = dry ? "would drop" : "dropped";
		for (size_t i = 0; i < g->n; i++)
			printf("%-11s step %6lld  %-9s  %12llu bytes  %s\n", g->items[i].drop ? would : "kept",
			       (long long)g->items[i].step, cat_status_name(g->items[i].status),
			       (unsigned long long)g->items[i].bytes, g->items[i].why);
		for (size_t i = 0; i < g->n_missing_pins; i++)
			printf("note: pinned step %lld has no checkpoint\n", (long long)g->missing_pins[i]);
		printf("%s%s %llu checkpoints (%llu logical bytes), kept %llu; chunks: %llu examined, %llu still "
		       "referenced, %llu %s, %llu bytes %s inside the stores%s\n",
		       dry ? "dry run: " : "", would, (unsigned long long)g->dropped, (unsigned long long)g->dropped_bytes,
		       (unsigned long long)g->kept, (unsigned long long)g->store.examined,
		       (unsigned long long)g->keep_chunks, (unsigned long long)g->store.deleted,
		       dry ? "would be deleted" : "deleted", (unsigned long long)g->store.bytes_reclaimed,
		       dry ? "would become reusable" : "reusable",
		       g->compacted || !g->store.bytes_reclaimed ? "" : " (the files keep their size; --compact frees them on disk)");
		if (g->compacted)
			printf("compacted %d store%s: %llu bytes on disk before, %llu after: %lld bytes freed on disk\n",
			       g->compacted, g->compacted == 1 ? "" : "s", (unsigned long long)g->compact.disk_before,
			       (unsigned long long)g->compact.disk_after, (long long)freed(&g->compact));
		for (size_t i = 0; job && i < job->n; i++) {
			const ckpt_job_store *x = &job->stores[i];
			if (x->rank < 0)
				printf("store %s of rank %d on host '%s': no rank of this job sees it; its unreferenced chunks "
				       "stay until a gc reaches it\n",
				       x->store_id, x->owner, x->host);
			else
				printf("store %s of rank %d on host '%s' (rank %d): %llu chunks examined, %llu %s%s",
				       x->store_id[0] ? x->store_id : "RUN/store", x->owner, x->host, x->rank,
				       (unsigned long long)x->gc.examined, (unsigned long long)x->gc.deleted,
				       dry ? "would be deleted" : "deleted", x->compacted ? "" : "\n");
			if (x->rank >= 0 && x->compacted)
				printf("; compacted: %llu bytes on disk before, %llu after\n",
				       (unsigned long long)x->compact.disk_before, (unsigned long long)x->compact.disk_after);
		}
		if (g->store.young)
			printf("%llu unreferenced chunks were put within the last %ld s and were left for a later gc "
			       "(--grace)\n",
			       (unsigned long long)g->store.young, grace);
	}
}

typedef struct gc_job_args {
	const char *dir;
	ckpt_gc_policy p;
	int json;
	long grace;
} gc_job_args;

/* A rank of the gc job (every rank runs it; rank 0 prints). */
static int gc_job(qe_comm *comm, void *varg)
{
	gc_job_args *a = varg;
	ckpt_lock *lock = NULL;
	int rank0 = !comm || qe_comm_rank(comm) == 0, rc = 0;
	ckpt_gc_report g;
	ckpt_job_report where;
	memset(&g, 0, sizeof(g));
	/* under an external launcher rank 0 takes the run's lock itself (forked ranks share the parent's) */
	if (rank0 && !a->p.dry_run && cli_launched(NULL) && !cli_store_job_forked())
		rc = cli_run_lock(a->dir, "gc", 0, &lock);
	rc = rc ? rc : ckpt_job_gc(comm, a->dir, &a->p, &g, &where);
	int status = 0;
	if (rc && !rank0)
		fprintf(stderr, "qeffect gc: %s (%s)\n", qe_last_error(), qe_errname(rc));
	else if (rc)
		status = cli_report("gc", rc, a->dir);
	else if (rank0) {
		local_print(a->dir, &g, &where, a->p.dry_run, a->json, a->grace);
		ckpt_job_report_free(&where);
	}
	ckpt_gc_report_free(&g);
	ckpt_unlock(lock);
	return rc ? (status ? status : 1) : 0;
}

/* --keep-last N: N >= 1, and the message says why. */
static int keep_last_flag(const char *cmd, const char *flag, const char *value, void *dst)
{
	long n;
	if (cli_parse_long(cmd, flag, value, &n))
		return 2;
	if (n < 1) {
		fprintf(stderr, "qeffect %s: %s must be at least 1, got %ld (gc never drops the latest committed "
				"checkpoint)\n", cmd, flag, n);
		return 2;
	}
	*(long *)dst = n;
	return 0;
}

typedef struct pin_list {
	int64_t step[MAX_PINS];
	size_t n;
} pin_list;

/* --pin STEP, as often as needed: one more step to keep. */
static int pin_flag(const char *cmd, const char *flag, const char *value, void *dst)
{
	pin_list *p = dst;
	long v;
	if (cli_parse_long(cmd, flag, value, &v))
		return 2;
	if (v < 0 || p->n == MAX_PINS) {
		fprintf(stderr, "qeffect %s: %s takes a step >= 0 (at most %d pins), got '%s'\n", cmd, flag, MAX_PINS,
			value);
		return 2;
	}
	p->step[p->n++] = v;
	return 0;
}

int cli_gc_main(int argc, char **argv)
{
	const char *dir = NULL, *remote = NULL, *endpoint = NULL, *run_id = NULL;
	long keep_last = -1, keep_every = 0, grace = DEFAULT_GRACE;
	pin_list pins = { .n = 0 };
	int json = 0, dry = 0, compact = 0, rc, nproc = 0;
	const cli_flag flags[] = {
		{ "run-dir", 0, CLI_FLAG_PATH, .dst = &dir },
		{ "keep-last", 0, CLI_FLAG_FN, &keep_last, .fn = keep_last_flag },
		{ "keep-every", 0, CLI_FLAG_LONG, &keep_every, .lo = 0, .hi = LLONG_MAX },
		{ "pin", 0, CLI_FLAG_FN, &pins, .fn = pin_flag },
		{ "grace", 0, CLI_FLAG_LONG, &grace, .lo = 0, .hi = LLONG_MAX },
		{ "dry-run", 0, CLI_FLAG_BOOL, .dst = &dry },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ "remote", 0, CLI_FLAG_STRING, .dst = &remote },
		{ "endpoint", 0, CLI_FLAG_STRING, .dst = &endpoint },
		{ "run-id", 0, CLI_FLAG_STRING, .dst = &run_id },
		cli_store_job_nproc_flag(&nproc),
		{ "compact", 0, CLI_FLAG_BOOL, .dst = &compact },
		{ 0 },
	};
	if ((rc = cli_flags_parse("gc", flags, argc, argv, NULL)) < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if ((!dir && !remote) || keep_last < 0) {
		fprintf(stderr, "qeffect gc: --run-dir DIR (or --remote URL) and --keep-last N are required (see --help)\n");
		return 2;
	}
	if (compact && (dry || remote)) {
		fprintf(stderr, "qeffect gc: --compact rewrites the local stores: not with %s\n",
			dry ? "--dry-run" : "--remote");
		return 2;
	}
	if (!remote && (endpoint || run_id)) {
		fprintf(stderr, "qeffect gc: --endpoint and --run-id go with --remote\n");
		return 2;
	}
	/* gc writes the run (catalog rows, chunks, remote records): one writer at a time.  A dry run
	 * only reads. */
	if (remote && nproc) {
		fprintf(stderr, "qeffect gc: --nproc goes with --run-dir alone (a remote gc is one process)\n");
		return 2;
	}
	int as_job = !remote && cli_store_job_wanted(nproc);
	ckpt_lock *lock = NULL;
	if (dir && !dry && cli_store_job_locks(as_job) && (rc = cli_run_lock(dir, "gc", 0, &lock)))
		return cli_report("gc", rc, dir);
	if (as_job) {
		gc_job_args a = { dir, { .keep_last = (int)keep_last, .keep_every = keep_every, .pins = pins.step,
					 .n_pins = pins.n, .grace_s = (uint64_t)grace, .dry_run = dry, .compact = compact },
				  json, grace };
		rc = cli_store_job_run("gc", nproc, gc_job, &a);
	} else {
		rc = gc_run(dir, remote, endpoint, run_id, keep_last, keep_every, pins.step, pins.n, grace, dry, compact, json);
	}
	ckpt_unlock(lock);
	return rc;
}

/* The gc itself, under the caller's lock.  Returns an exit status. */
static int gc_run(const char *dir, const char *remote, const char *endpoint, const char *run_id, long keep_last,
		  long keep_every, int64_t *pins, size_t npins, long grace, int dry, int compact, int json)
{
	int rc;
	if (remote) {
		store_remote_opts ro = { 0 };
		ro.retries = -1;
		ro.endpoint = endpoint;
		ckpt_gc_policy rp = { .keep_last = (int)keep_last,
				      .keep_every = keep_every,
				      .pins = pins,
				      .n_pins = npins,
				      .grace_s = (uint64_t)grace,
				      .dry_run = dry };
		ckpt_remote_gc_report rg;
		rc = ckpt_remote_gc(remote, &ro, dir, run_id, &rp, &rg);
		int st = 0;
		if (rc) {
			char what[1200];
			snprintf(what, sizeof(what), "remote gc of %s", remote);
			st = cli_report("gc", rc, what);
		} else {
			remote_print(remote, &rg, dry, json, grace);
		}
		ckpt_remote_gc_report_free(&rg);
		return st;
	}
	ckpt_run *r;
	cli_recall_local_dir(dir);
	if ((rc = ckpt_run_open(dir, CKPT_RUN_STORE | (dry ? 0 : CKPT_RUN_WRITE), &r)))
		return cli_report("gc", rc, dir);
	ckpt_gc_policy p = { .keep_last = (int)keep_last,
			     .keep_every = keep_every,
			     .pins = pins,
			     .n_pins = npins,
			     .grace_s = (uint64_t)grace,
			     .dry_run = dry,
			     .compact = compact };
	ckpt_gc_report g;
	rc = ckpt_q_gc(r, &p, &g);
	int status = 0;
	if (rc)
		status = cli_report("gc", rc, dir);
	else
		local_print(dir, &g, NULL, dry, json, grace);
	ckpt_gc_report_free(&g);
	ckpt_run_close(r);
	return status;
}
