/*
 * resume_remote.h - `qeffect resume --remote s3://BUCKET/PREFIX ...`: pull
 * the checkpoint into --run-dir first (ckpt_remote_pull), then resume as
 * usual.  The resume command calls the two functions below; its flag
 * table (train_flags.c) takes --remote, --endpoint and --remote-run-id.
 */
#ifndef CLI_RESUME_REMOTE_H
#define CLI_RESUME_REMOTE_H

#include <stdio.h>

#include "cli/train_flags.h"

/*
 * When the command line held --remote URL (cli_storage_get()->given): pull
 * the checkpoint named by --from (default: the latest remote one) into the
 * directory of --run-dir; with --ckpt-persist-every and the run already
 * there, nothing (--remote names where to push).  Returns 0 to go on with
 * the resume, or an exit status (1 pull failed, 2 bad usage) after
 * printing why.
 */
int cli_resume_remote_prepare(const cli_train_args *a);
/* The remote flags' lines for resume --help. */
void cli_resume_remote_help(FILE *f);

#endif
