/*
 * cli.h - the `qeffect` command's subcommands.
 *
 * Each subcommand lives in cli/cmd_<name>.c and exposes one entry point
 * `int cli_<name>_main(int argc, char **argv)` (argv[0] is the subcommand
 * name) returning the process exit status: 0 success, 1 a failed check or
 * operation, 2 bad usage.  Only cli/ may exit the process.  Every command
 * answers --help; commands whose output scripts read take --json.
 */
#ifndef QE_CLI_H
#define QE_CLI_H

typedef struct cli_command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *summary;
} cli_command;

/* Print "qeffect NAME: message" plus qe_last_error() detail to stderr; returns 1. */
int cli_report(const char *cmd, int rc, const char *what);
/* True when argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);

/* The path of the shared data folder (QE_SHARED_DIR env or the build-time default). */
const char *cli_shared_dir(void);

int cli_fp8_main(int argc, char **argv);
int cli_schedule_main(int argc, char **argv);
int cli_selftest_main(int argc, char **argv);
int cli_train_main(int argc, char **argv);
int cli_compare_main(int argc, char **argv);
int cli_env_main(int argc, char **argv);
int cli_list_main(int argc, char **argv);
int cli_inspect_main(int argc, char **argv);
int cli_export_main(int argc, char **argv);
int cli_sample_main(int argc, char **argv);
int cli_eval_main(int argc, char **argv);
int cli_verify_main(int argc, char **argv);
int cli_gc_main(int argc, char **argv);
int cli_plot_main(int argc, char **argv);
int cli_resume_main(int argc, char **argv);
int cli_push_main(int argc, char **argv);
int cli_pull_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);
int cli_tokenize_main(int argc, char **argv);

#endif
