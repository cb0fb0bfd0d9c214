/*
 * remote_flags.h - the flags `qeffect push` and `qeffect pull` share
 * (--run-dir, --remote, --endpoint, --step, --json, --quiet, --nproc, --help) and the
 * one each adds (push --all, pull --run-id), parsed in one place so the two
 * commands name, check and report them the same way.
 */
#ifndef CLI_REMOTE_FLAGS_H
#define CLI_REMOTE_FLAGS_H

#include "store/remote.h"

/* The command-specific flags a caller accepts (bits of `accept`). */
enum { CLI_REMOTE_ALL = 1 << 0, CLI_REMOTE_RUN_ID = 1 << 1 };

/* Pointers point into argv (they live as long as it does). */
typedef struct cli_remote_args {
	const char *run_dir;  /* required */
	const char *remote;   /* required: s3://BUCKET/PREFIX */
	const char *endpoint; /* NULL: AWS_ENDPOINT_URL, else AWS */
	const char *run_id;   /* --run-id (CLI_REMOTE_RUN_ID); NULL when absent */
	long step;            /* --step S (>= 0); -1 when absent */
	int all;              /* --all (CLI_REMOTE_ALL) */
	int json;
	int quiet;
	int nproc;            /* --nproc N: run as a job of N local ranks (store_job.h); 0 when absent */
} cli_remote_args;

/*
 * Parse argv (argv[0] is the command name `cmd`) into *out, then check that
 * no operand is left and that --run-dir and --remote were given.  Returns 0,
 * 2 after printing a usage error naming the flag, or -1 when --help was asked
 * for (the caller prints its help and exits 0).
 */
int cli_remote_flags_parse(const char *cmd, int argc, char **argv, unsigned accept, cli_remote_args *out);

/* The S3 client options both commands use: --endpoint, retries from the environment. */
void cli_remote_store_opts(const cli_remote_args *a, store_remote_opts *ro);

#endif
