/*
 * run_args.h - the command line of the commands that read one run directory
 * (`qeffect list`, `verify`, `inspect`): --run-dir DIR is required, --json
 * is taken, and no operands.  One place for the checks and their messages,
 * so the commands answer bad usage alike.
 */
#ifndef CLI_RUN_ARGS_H
#define CLI_RUN_ARGS_H

#include "cli/flags.h"

/*
 * Parse argv (argv[0] is the command's name) against --run-dir DIR, --json
 * and the command's own rows (extra, a table of flags.h; NULL: none), then
 * check that --run-dir was given.  OUT *dir (points into argv), *json (0 or
 * 1).  Returns 0, 2 after printing a usage error prefixed "qeffect CMD:",
 * or -1 when --help was asked for (the caller prints its help and exits 0).
 */
int cli_run_args_parse(const char *cmd, int argc, char **argv, const cli_flag *extra, const char **dir, int *json);

#endif
