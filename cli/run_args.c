/*
 * run_args.c - command-line parsing shared by the commands that read one run
 * directory (run_args.h).
 */
#include "cli/run_args.h"

#include <stdio.h>

#include "cli/run.h"

int cli_run_args_parse(const char *cmd, int argc, char **argv, const cli_flag *extra, const char **dir, int *json)
{
	*dir = NULL;
	*json = 0;
	const cli_flag flags[] = {
		{ "run-dir", 0, CLI_FLAG_PATH, .dst = dir },
		{ "json", 0, CLI_FLAG_BOOL, .dst = json },
		{ .kind = CLI_FLAG_INCLUDE, .include = extra },
		{ 0 },
	};
	int rc = cli_flags_parse(cmd, flags, argc, argv, NULL);
	if (rc)
		return rc;
	if (!*dir) {
		fprintf(stderr, "qeffect %s: --run-dir DIR is required (see --help)\n", cmd);
		return 2;
	}
	cli_recall_local_dir(*dir);
	return 0;
}
