/*
 * cmd_pull.c - `qeffect pull`: fetch a checkpoint from S3-compatible object
 * storage into a run directory that `qeffect resume` can continue
 * (ckpt/remote/ckpt_remote.h).
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
		"usage: qeffect pull --run-dir DIR --remote s3://BUCKET/PREFIX [--run-id ID] [--step S]\n"
		"                    [--endpoint URL] [--nproc N] [--json] [--quiet]\n\n"
		"Fetch a pushed checkpoint (default: the latest of the only run under PREFIX) into DIR: a new\n"
		"DIR gets a catalog with the run's configuration and per-rank stores; a DIR that already holds\n"
		"the same run is added to.  Only the chunks the local store lacks are downloaded, and every one\n"
		"is re-hashed against its name before it is stored.  The checkpoint is committed locally\n"
		"last, so an interrupted pull commits nothing; run it again to finish.  Then continue with\n"
		"'qeffect resume --run-dir DIR' (or do both at once with 'qeffect resume --remote ...').\n\n"
		"Each tensor lands in the store of the rank that saved it (DIR/stores/rank-R, or under\n"
		"--local-dir), the catalog on rank 0.  Alone, pull is rank 0 of one and fills stores/rank-0.\n"
		"As a job (--nproc N, or one process per host under a launcher: torchrun, srun or mpirun,\n"
		"README \"Launchers\"; the same command line everywhere) every rank fetches its own\n"
		"tensors onto its own disk, in parallel: start it as the resume that follows will be.\n\n"
		"  --run-dir DIR      the run directory to fill (created when missing)\n"
		"  --remote URL       s3://BUCKET/PREFIX\n"
		"  --run-id ID        which run under PREFIX (needed when there are several)\n"
		"  --step S           which step (default: the latest with a manifest)\n"
		"  --endpoint URL     the server (http://host:port); default AWS_ENDPOINT_URL, else AWS\n"
		"  --nproc N          fork N local ranks (as train --nproc)\n"
		"  --json             one JSON line describing what was pulled\n"
		"  --quiet            print nothing on success\n\n"
		"environment: as for 'qeffect push --help'.\n\n"
		"exit status: 0 pulled (or already there), 1 failed, 2 bad usage.\n"
		"\nexample:\n  qeffect pull --run-dir runs/b --remote s3://ckpts/team/a --endpoint http://127.0.0.1:4568\n");
}

static void print_pulled(const cli_remote_args *a, const ckpt_pull_result *r)
{
	if (a->json) {
		printf("{\"run_id\":\"%s\",\"step\":%lld,\"e_w\":%lld,\"run_dir\":\"%s\",\"created\":%s,\"up_to_date\":%s,"
		       "\"chunks\":%llu,\"chunks_fetched\":%llu,\"chunks_present\":%llu,\"bytes\":%llu,\"bytes_fetched\":%llu,"
		       "\"manifest\":\"%s\",\"manifest_hash\":\"%s\",\"ms\":%.1f}\n",
		       r->run_id, (long long)r->step, (long long)r->e_w, a->run_dir, r->created ? "true" : "false",
		       r->up_to_date ? "true" : "false", (unsigned long long)r->chunks, (unsigned long long)r->chunks_fetched,
		       (unsigned long long)r->chunks_present, (unsigned long long)r->bytes, (unsigned long long)r->bytes_fetched,
		       r->manifest_url, r->manifest_hash, r->ms);
	} else if (!a->quiet) {
		if (r->up_to_date)
			printf("%s step %lld from %s is already committed in %s\n", r->run_id, (long long)r->step,
			       r->manifest_url, a->run_dir);
		else
			printf("pulled %s step %lld into %s%s: %llu chunks (%llu fetched, %llu already here), %llu bytes "
			       "fetched, %.1f ms\n",
			       r->run_id, (long long)r->step, a->run_dir, r->created ? " (new run directory)" : "",
			       (unsigned long long)r->chunks, (unsigned long long)r->chunks_fetched,
			       (unsigned long long)r->chunks_present, (unsigned long long)r->bytes_fetched, r->ms);
	}
}

typedef struct pull_job_args {
	const cli_remote_args *a;
	const store_remote_opts *ro;
} pull_job_args;

/* A rank of the pull (every rank runs it; rank 0 prints and holds the run's lock). */
static int pull_job(qe_comm *comm, void *varg)
{
	pull_job_args *j = varg;
	const cli_remote_args *a = j->a;
	int rank0 = !comm || qe_comm_rank(comm) == 0, rc = 0;
	ckpt_lock *lock = NULL;
	ckpt_pull_result r;
	if (rank0 && comm && !cli_store_job_forked())
		rc = cli_run_lock(a->run_dir, "pull", 1, &lock);
	if (!rc)
		rc = ckpt_job_pull(comm, a->run_dir, a->remote, j->ro, a->run_id, a->step, &r, NULL);
	ckpt_unlock(lock);
	if (rc && !rank0) {
		fprintf(stderr, "qeffect pull: %s (%s)\n", qe_last_error(), qe_errname(rc));
		return 1;
	}
	if (rc)
		return cli_report("pull", rc, "pull failed; nothing was committed locally");
	if (rank0)
		print_pulled(a, &r);
	return 0;
}

int cli_pull_main(int argc, char **argv)
{
	cli_remote_args a;
	int rc = cli_remote_flags_parse("pull", argc, argv, CLI_REMOTE_RUN_ID, &a);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	store_remote_opts ro;
	cli_remote_store_opts(&a, &ro);
	pull_job_args j = { &a, &ro };
	/* alone, or the parent of forked ranks: the run's lock first (the ranks share it) */
	ckpt_lock *lock = NULL;
	int as_job = cli_store_job_wanted(a.nproc);
	if (cli_store_job_locks(as_job) && (rc = cli_run_lock(a.run_dir, "pull", 1, &lock)))
		return cli_report("pull", rc, a.run_dir);
	rc = cli_store_job_run("pull", as_job ? a.nproc : 1, pull_job, &j);
	ckpt_unlock(lock);
	return rc;
}
