/*
 * cmd_pull.c - `qeffect pull`: fetch a checkpoint from S3-compatible object
 * storage into a run directory that `qeffect resume` can continue
 * (ckpt/ckpt_remote.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_remote.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "cli/remote_flags.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect pull --run-dir DIR --remote s3://BUCKET/PREFIX [--run-id ID] [--step S]\n"
		"                    [--endpoint URL] [--json] [--quiet]\n\n"
		"Fetch a pushed checkpoint (default: the latest of the only run under PREFIX) into DIR: a new\n"
		"DIR gets a catalog with the run's configuration and a store; a DIR that already holds the\n"
		"same run is added to.  Only the chunks the local store lacks are downloaded, and every one\n"
		"is re-hashed against its name before it is stored.  The checkpoint is committed locally\n"
		"last, so an interrupted pull commits nothing; run it again to finish.  Then continue with\n"
		"'qeffect resume --run-dir DIR' (or do both at once with 'qeffect resume --remote ...').\n\n"
		"  --run-dir DIR      the run directory to fill (created when missing)\n"
		"  --remote URL       s3://BUCKET/PREFIX\n"
		"  --run-id ID        which run under PREFIX (needed when there are several)\n"
		"  --step S           which step (default: the latest with a manifest)\n"
		"  --endpoint URL     the server (http://host:port); default AWS_ENDPOINT_URL, else AWS\n"
		"  --json             one JSON line describing what was pulled\n"
		"  --quiet            print nothing on success\n\n"
		"environment: as for 'qeffect push --help'.\n\n"
		"exit status: 0 pulled (or already there), 1 failed, 2 bad usage.\n"
		"\nexample:\n  qeffect pull --run-dir runs/b --remote s3://ckpts/team/a --endpoint http://127.0.0.1:4568\n");
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
	ckpt_pull_result r;
	ckpt_lock *lock = NULL;
	if ((rc = cli_run_lock(a.run_dir, "pull", 1, &lock)))
		return cli_report("pull", rc, a.run_dir);
	rc = ckpt_remote_pull(a.run_dir, a.remote, &ro, a.run_id, a.step, &r);
	ckpt_unlock(lock);
	if (rc)
		return cli_report("pull", rc, "pull failed; nothing was committed locally");
	if (a.json) {
		printf("{\"run_id\":\"%s\",\"step\":%lld,\"e_w\":%lld,\"run_dir\":\"%s\",\"created\":%s,\"up_to_date\":%s,"
		       "\"chunks\":%llu,\"chunks_fetched\":%llu,\"chunks_present\":%llu,\"bytes\":%llu,\"bytes_fetched\":%llu,"
		       "\"manifest\":\"%s\",\"manifest_hash\":\"%s\",\"ms\":%.1f}\n",
		       r.run_id, (long long)r.step, (long long)r.e_w, a.run_dir, r.created ? "true" : "false",
		       r.up_to_date ? "true" : "false", (unsigned long long)r.chunks, (unsigned long long)r.chunks_fetched,
		       (unsigned long long)r.chunks_present, (unsigned long long)r.bytes, (unsigned long long)r.bytes_fetched,
		       r.manifest_url, r.manifest_hash, r.ms);
	} else if (!a.quiet) {
		if (r.up_to_date)
			printf("%s step %lld from %s is already committed in %s\n", r.run_id, (long long)r.step,
			       r.manifest_url, a.run_dir);
		else
			printf("pulled %s step %lld into %s%s: %llu chunks (%llu fetched, %llu already here), %llu bytes "
			       "fetched, %.1f ms\n",
			       r.run_id, (long long)r.step, a.run_dir, r.created ? " (new run directory)" : "",
			       (unsigned long long)r.chunks, (unsigned long long)r.chunks_fetched,
			       (unsigned long long)r.chunks_present, (unsigned long long)r.bytes_fetched, r.ms);
	}
	return 0;
}
