/*
 * run_args.c - command-line parsing shared by the commands that read one run
 * directory (run_args.h).
 */
#include "cli/run_args.h"

#include <getopt.h>
#include <stdio.h>

#include "cli/cli.h"
#include "cli/run.h"

int cli_run_args_unknown(const char *cmd, char **argv)
{
	fprintf(stderr, "qeffect %s: unknown flag or missing value '%s' (see --help)\n", cmd, argv[optind - 1]);
	return 2;
}

int cli_run_args_check(const char *cmd, int argc, char **argv, const char *dir)
{
	if (optind < argc) {
		fprintf(stderr, "qeffect %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
		return 2;
	}
	if (!dir) {
		fprintf(stderr, "qeffect %s: --run-dir DIR is required (see --help)\n", cmd);
		return 2;
	}
	if (cli_parse_path(cmd, "--run-dir", dir))
		return 2;
	cli_recall_local_dir(dir);
	return 0;
}

int cli_run_args_parse(const char *cmd, int argc, char **argv, const char **dir, int *json)
{
	static const struct option opts[] = { { "run-dir", 1, 0, 'r' }, { "json", 0, 0, 'j' },
					       { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	int c;
	*dir = NULL;
	*json = 0;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h')
			return -1;
		else if (c == 'r')
			*dir = optarg;
		else if (c == 'j')
			*json = 1;
		else
			return cli_run_args_unknown(cmd, argv);
	}
	return cli_run_args_check(cmd, argc, argv, *dir);
}
