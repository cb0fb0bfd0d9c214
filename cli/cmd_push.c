/*
 * cmd_push.c - `qeffect push`: replicate committed checkpoints of a run to
 * S3-compatible object storage (ckpt/remote/ckpt_remote.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/query/ckpt_job.h"
#include "ckpt/remote/ckpt_remote.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "cli/remote_flags.h"
#include "cli/store_job.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect push --run-dir DIR --remote s3://BUCKET/PREFIX [--endpoint URL] [--step S | --all]\n"
		"                    [--nproc N] [--json] [--quiet]\n\n"
		"Copy committed checkpoints of the run in DIR to object storage (AWS S3 or any S3-compatible\n"
		"server), default the latest committed one.  Chunks go to PREFIX/chunks/<content hash> and are\n"
		"sent only when the remote lacks them; the manifest PREFIX/checkpoints/RUN/STEP/manifest.json is\n"
		"written last - its presence is the remote commit, so an interrupted push leaves no checkpoint\n"
		"behind and running it again finishes it.  Each pushed copy is recorded in DIR/catalog.db.\n"
		"The manifest carries the checkpoint's catalog rows (every tensor with its chunks and store).\n\n"
		"Alone, push reads the stores on this host's disk only.  As a job (--nproc N, or one process per\n"
		"host under a launcher: torchrun, srun or mpirun (README, \"Launchers\"), the same command line\n"
		"everywhere) every rank uploads the chunks of the stores on its own disk, in parallel, and rank\n"
		"0 (the host with the catalog) writes the manifest once all are there.\n\n"
		"  --run-dir DIR      the run to push from\n"
		"  --remote URL       s3://BUCKET/PREFIX\n"
		"  --endpoint URL     the server (http://host:port); default AWS_ENDPOINT_URL, else AWS\n"
		"  --step S           push the committed checkpoint at step S\n"
		"  --all              push every committed checkpoint\n"
		"  --nproc N          fork N local ranks (as train --nproc)\n"
		"  --json             one JSON line per pushed checkpoint\n"
		"  --quiet            print nothing on success\n\n"
		"environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION\n"
		"(us-east-1), AWS_ENDPOINT_URL; QE_S3_RETRIES (4), QE_S3_BACKOFF_MS (200),\n"
		"QE_S3_TIMEOUT_S (60) + bytes / QE_S3_MIN_RATE (65536 B/s): each request's deadline;\n"
		"QE_S3_LOW_SPEED_BPS (65536) for QE_S3_LOW_SPEED_S (30): slower than that fails;\n"
		"QE_S3_MULTIPART_BYTES (64 MiB), QE_S3_PART_BYTES (16 MiB).\n\n"
		"exit status: 0 pushed, 1 failed (nothing to push, refused, unreachable), 2 bad usage.\n"
		"\nexample:\n  qeffect push --run-dir runs/a --remote s3://ckpts/team/a --endpoint http://127.0.0.1:4568\n");
}

typedef struct push_out {
	int json;
	int quiet;
	int n;
} push_out;

static int on_pushed(void *ctx, const ckpt_push_result *r)
{
	push_out *o = ctx;
	o->n++;
	if (o->json) {
		printf("{\"run_id\":\"%s\",\"step\":%lld,\"chunks\":%llu,\"chunks_uploaded\":%llu,\"chunks_present\":%llu,"
		       "\"bytes\":%llu,\"bytes_uploaded\":%llu,\"manifest\":\"%s\",\"manifest_hash\":\"%s\",\"ms\":%.1f}\n",
		       r->run_id, (long long)r->step, (unsigned long long)r->chunks,
		       (unsigned long long)r->chunks_uploaded, (unsigned long long)r->chunks_present,
		       (unsigned long long)r->bytes, (unsigned long long)r->bytes_uploaded, r->manifest_url,
		       r->manifest_hash, r->ms);
	} else if (!o->quiet) {
		printf("pushed %s step %lld to %s: %llu chunks (%llu uploaded, %llu already there), %llu bytes sent, "
		       "%.1f ms\n",
		       r->run_id, (long long)r->step, r->manifest_url, (unsigned long long)r->chunks,
		       (unsigned long long)r->chunks_uploaded, (unsigned long long)r->chunks_present,
		       (unsigned long long)r->bytes_uploaded, r->ms);
	}
	fflush(stdout);
	return 0;
}

typedef struct push_job_args {
	const cli_remote_args *a;
	push_out *o;
	const store_remote_opts *ro;
} push_job_args;

/* A rank of the push job (every rank runs it; rank 0 prints and holds the run's lock). */
static int push_job(qe_comm *comm, void *varg)
{
	push_job_args *j = varg;
	const cli_remote_args *a = j->a;
	int rank0 = !comm || qe_comm_rank(comm) == 0, rc = 0;
	ckpt_lock *lock = NULL;
	if (rank0 && !cli_store_job_forked())
		rc = cli_run_lock(a->run_dir, "push", 0, &lock);
	if (!rc)
		rc = ckpt_job_push(comm, a->run_dir, a->remote, j->ro,
				   a->all ? CKPT_PUSH_ALL : (a->step >= 0 ? a->step : CKPT_PUSH_LATEST), on_pushed, j->o, NULL);
	ckpt_unlock(lock);
	if (rc && !rank0) {
		fprintf(stderr, "qeffect push: %s (%s)\n", qe_last_error(), qe_errname(rc));
		return 1;
	}
	if (rc) {
		char what[160];
		snprintf(what, sizeof(what), "push to %s failed%s", a->remote,
			 j->o->n ? " (the checkpoints reported above were pushed)" : "; nothing was committed remotely");
		return cli_report("push", rc, what);
	}
	return 0;
}

int cli_push_main(int argc, char **argv)
{
	cli_remote_args a;
	int rc = cli_remote_flags_parse("push", argc, argv, CLI_REMOTE_ALL, &a);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (a.all && a.step >= 0) {
		fprintf(stderr, "qeffect push: --step and --all exclude each other\n");
		return 2;
	}
	push_out o = { a.json, a.quiet, 0 };
	store_remote_opts ro;
	cli_remote_store_opts(&a, &ro);
	/* push records each remote copy in the run's catalog: it writes the run. */
	ckpt_lock *lock = NULL;
	if (cli_store_job_wanted(a.nproc)) {
		push_job_args j = { &a, &o, &ro };
		if (cli_store_job_locks(1) && (rc = cli_run_lock(a.run_dir, "push", 0, &lock)))
			return cli_report("push", rc, a.run_dir);
		rc = cli_store_job_run("push", a.nproc, push_job, &j);
		ckpt_unlock(lock);
		return rc;
	}
	if ((rc = cli_run_lock(a.run_dir, "push", 0, &lock)))
		return cli_report("push", rc, a.run_dir);
	rc = ckpt_remote_push(a.run_dir, a.remote, &ro, a.all ? CKPT_PUSH_ALL : (a.step >= 0 ? a.step : CKPT_PUSH_LATEST),
			      on_pushed, &o);
	ckpt_unlock(lock);
	if (rc) {
		char what[160];
		snprintf(what, sizeof(what), "push to %s failed%s", a.remote,
			 o.n ? " (the checkpoints reported above were pushed)" : "; nothing was committed remotely");
		return cli_report("push", rc, what);
	}
	return 0;
}
