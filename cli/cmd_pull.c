/*
 * cmd_pull.c - `qeffect pull`: fetch a checkpoint from S3-compatible object
 * storage into a run directory that `qeffect resume` can continue
 * (ckpt/ckpt_remote.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_remote.h"
#include "cli.h"
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
	const char *run_dir = NULL, *remote = NULL, *endpoint = NULL, *run_id = NULL;
	long step = -1;
	int json = 0, quiet = 0;
	enum { O_RUNDIR = 1, O_REMOTE, O_ENDPOINT, O_STEP, O_RUNID, O_JSON, O_QUIET, O_HELP };
	static const struct option opts[] = { { "run-dir", 1, 0, O_RUNDIR }, { "remote", 1, 0, O_REMOTE },
					       { "endpoint", 1, 0, O_ENDPOINT }, { "step", 1, 0, O_STEP },
					       { "run-id", 1, 0, O_RUNID },	   { "json", 0, 0, O_JSON },
					       { "quiet", 0, 0, O_QUIET },	   { "help", 0, 0, O_HELP },
					       { 0, 0, 0, 0 } };
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
		case O_HELP:
			help(stdout);
			return 0;
		case O_RUNDIR:
			run_dir = optarg;
			break;
		case O_REMOTE:
			remote = optarg;
			break;
		case O_ENDPOINT:
			endpoint = optarg;
			break;
		case O_RUNID:
			run_id = optarg;
			break;
		case O_STEP:
			if (cli_parse_long("pull", "--step", optarg, &step))
				return 2;
			if (step < 0) {
				fprintf(stderr, "qeffect pull: --step needs a step >= 0\n");
				return 2;
			}
			break;
		case O_JSON:
			json = 1;
			break;
		case O_QUIET:
			quiet = 1;
			break;
		default:
			fprintf(stderr, "qeffect pull: unknown flag or missing value '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "qeffect pull: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (!run_dir || !remote) {
		fprintf(stderr, "qeffect pull: --run-dir DIR and --remote s3://BUCKET/PREFIX are required (see --help)\n");
		return 2;
	}
	store_remote_opts ro = { 0 };
	ro.retries = -1;
	ro.endpoint = endpoint;
	ckpt_pull_result r;
	int rc = ckpt_remote_pull(run_dir, remote, &ro, run_id, step, &r);
	if (rc)
		return cli_report("pull", rc, "pull failed; nothing was committed locally");
	if (json) {
		printf("{\"run_id\":\"%s\",\"step\":%lld,\"e_w\":%lld,\"run_dir\":\"%s\",\"created\":%s,\"up_to_date\":%s,"
		       "\"chunks\":%llu,\"chunks_fetched\":%llu,\"chunks_present\":%llu,\"bytes\":%llu,\"bytes_fetched\":%llu,"
		       "\"manifest\":\"%s\",\"manifest_hash\":\"%s\",\"ms\":%.1f}\n",
		       r.run_id, (long long)r.step, (long long)r.e_w, run_dir, r.created ? "true" : "false",
		       r.up_to_date ? "true" : "false", (unsigned long long)r.chunks, (unsigned long long)r.chunks_fetched,
		       (unsigned long long)r.chunks_present, (unsigned long long)r.bytes, (unsigned long long)r.bytes_fetched,
		       r.manifest_url, r.manifest_hash, r.ms);
	} else if (!quiet) {
		if (r.up_to_date)
			printf("%s step %lld from %s is already committed in %s\n", r.run_id, (long long)r.step,
			       r.manifest_url, run_dir);
		else
			printf("pulled %s step %lld into %s%s: %llu chunks (%llu fetched, %llu already here), %llu bytes "
			       "fetched, %.1f ms\n",
			       r.run_id, (long long)r.step, run_dir, r.created ? " (new run directory)" : "",
			       (unsigned long long)r.chunks, (unsigned long long)r.chunks_fetched,
			       (unsigned long long)r.chunks_present, (unsigned long long)r.bytes_fetched, r.ms);
	}
	return 0;
}
