/*
 * remote_flags.c - the flag parser shared by `qeffect push` and `qeffect
 * pull` (remote_flags.h): one flag table (flags.h) with the rows each
 * command adds.
 */
#include "cli/remote_flags.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/flags.h"
#include "cli/store_job.h"

int cli_remote_flags_parse(const char *cmd, int argc, char **argv, unsigned accept, cli_remote_args *out)
{
	memset(out, 0, sizeof(*out));
	out->step = -1;
	const cli_flag all[] = { { "all", 0, CLI_FLAG_BOOL, .dst = &out->all }, { 0 } };
	const cli_flag run_id[] = { { "run-id", 0, CLI_FLAG_STRING, .dst = &out->run_id }, { 0 } };
	const cli_flag flags[] = {
		{ "run-dir", 0, CLI_FLAG_PATH, .dst = &out->run_dir },
		{ "remote", 0, CLI_FLAG_STRING, .dst = &out->remote },
		{ "endpoint", 0, CLI_FLAG_STRING, .dst = &out->endpoint },
		{ "step", 0, CLI_FLAG_LONG, &out->step, .lo = 0, .hi = LLONG_MAX },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &out->json },
		{ "quiet", 0, CLI_FLAG_BOOL, .dst = &out->quiet },
		cli_store_job_nproc_flag(&out->nproc),
		{ .kind = CLI_FLAG_INCLUDE, .include = accept & CLI_REMOTE_ALL ? all : NULL },
		{ .kind = CLI_FLAG_INCLUDE, .include = accept & CLI_REMOTE_RUN_ID ? run_id : NULL },
		{ 0 },
	};
	int rc = cli_flags_parse(cmd, flags, argc, argv, NULL);
	if (rc)
		return rc;
	if (!out->run_dir || !out->remote) {
		fprintf(stderr,
			"qeffect %s: --run-dir DIR and --remote s3://BUCKET/PREFIX are required (see --help)\n", cmd);
		return 2;
	}
	return 0;
}

void cli_remote_store_opts(const cli_remote_args *a, store_remote_opts *ro)
{
	memset(ro, 0, sizeof(*ro));
	ro->retries = -1;
	ro->endpoint = a->endpoint;
}
