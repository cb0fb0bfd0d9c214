/*
 * resume_remote.h - `qeffect resume --remote s3://BUCKET/PREFIX ...`: pull
 * the checkpoint into --run-dir first (ckpt_remote_pull), then resume as
 * usual.  The resume command calls the two functions below; its own flag
 * parser never sees the remote flags.
 */
#ifndef CLI_RESUME_REMOTE_H
#define CLI_RESUME_REMOTE_H

#include <stdio.h>

/*
 * When argv holds --remote URL: take --remote, --endpoint and --remote-run-id
 * (and their values) out of argv (updating *argc), and pull the checkpoint
 * named by --from (default: the latest remote one) into the directory of
 * --run-dir.  Without --remote, or with --help, argv is left as it is
 * (remote flags still removed).  Returns 0 to go on with the resume, or an
 * exit status (1 pull failed, 2 bad usage) after printing why.
 */
int cli_resume_remote_prepare(int *argc, char **argv);
/* The remote flags' lines for resume --help. */
void cli_resume_remote_help(FILE *f);

#endif
