/*
 * run_args.h - the command line of the commands that read one run directory
 * (`qeffect list`, `verify`, `inspect`): --run-dir DIR is required and no
 * operands are taken.  One place for the checks and their messages, so the
 * commands answer bad usage alike.
 */
#ifndef CLI_RUN_ARGS_H
#define CLI_RUN_ARGS_H

/*
 * The checks after getopt_long: nothing left in argv past optind, and a
 * --run-dir given (dir != NULL) that is not ''.  Returns 0, or 2 after printing a usage
 * error on stderr prefixed "qeffect CMD:".
 */
int cli_run_args_check(const char *cmd, int argc, char **argv, const char *dir);

/*
 * The whole command line of a command taking only --run-dir DIR and --json
 * (list, verify).  OUT *dir (points into argv), *json (0 or 1).  Returns 0,
 * 2 after printing a usage error, or -1 when --help was asked for (the
 * caller prints its help and exits 0).
 */
int cli_run_args_parse(const char *cmd, int argc, char **argv, const char **dir, int *json);

/* The usage error for an option getopt_long did not accept; returns 2. */
int cli_run_args_unknown(const char *cmd, char **argv);

#endif
