/*
 * remote_flags.c - the flag parser shared by `qeffect push` and `qeffect
 * pull` (remote_flags.h).  getopt_long with the same option set as before
 * the two commands shared it, so abbreviations and messages are unchanged.
 */
#include "cli/remote_flags.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

enum { O_RUNDIR = 1, O_REMOTE, O_ENDPOINT, O_STEP, O_JSON, O_QUIET, O_HELP, O_ALL, O_RUNID };

static const struct option every_opt[] = { { "run-dir", 1, 0, O_RUNDIR }, { "remote", 1, 0, O_REMOTE },
					   { "endpoint", 1, 0, O_ENDPOINT }, { "step", 1, 0, O_STEP },
					   { "all", 0, 0, O_ALL },	     { "run-id", 1, 0, O_RUNID },
					   { "json", 0, 0, O_JSON },	     { "quiet", 0, 0, O_QUIET },
					   { "help", 0, 0, O_HELP } };

#define N_OPTS (sizeof(every_opt) / sizeof(every_opt[0]))

int cli_remote_flags_parse(const char *cmd, int argc, char **argv, unsigned accept, cli_remote_args *out)
{
	struct option opts[N_OPTS + 1];
	int n = 0, c;
	for (size_t i = 0; i < N_OPTS; i++) {
		if ((every_opt[i].val == O_ALL && !(accept & CLI_REMOTE_ALL)) ||
		    (every_opt[i].val == O_RUNID && !(accept & CLI_REMOTE_RUN_ID)))
			continue;
		opts[n++] = every_opt[i];
	}
	memset(&opts[n], 0, sizeof(opts[n]));
	memset(out, 0, sizeof(*out));
	out->step = -1;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
		case O_HELP:
			return -1;
		case O_RUNDIR:
			if (cli_parse_path(cmd, "--run-dir", optarg))
				return 2;
			out->run_dir = optarg;
			break;
		case O_REMOTE:
			out->remote = optarg;
			break;
		case O_ENDPOINT:
			out->endpoint = optarg;
			break;
		case O_RUNID:
			out->run_id = optarg;
			break;
		case O_STEP:
			if (cli_parse_long(cmd, "--step", optarg, &out->step))
				return 2;
			if (out->step < 0) {
				fprintf(stderr, "qeffect %s: --step needs a step >= 0\n", cmd);
				return 2;
			}
			break;
		case O_ALL:
			out->all = 1;
			break;
		case O_JSON:
			out->json = 1;
			break;
		case O_QUIET:
			out->quiet = 1;
			break;
		default:
			fprintf(stderr, "qeffect %s: unknown flag or missing value '%s' (see --help)\n", cmd,
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "qeffect %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
		return 2;
	}
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
