/*
 * async_flag.h - the --ckpt-async flag of `qeffect train` and `qeffect
 * resume` (ckpt/protocol/ckpt_async.h): taken out of argv before the shared train
 * flag parser runs, so that parser stays about the run's configuration.
 */
#ifndef CLI_ASYNC_FLAG_H
#define CLI_ASYNC_FLAG_H

#include <stdio.h>

/*
 * Remove --ckpt-async, --ckpt-async=wait and --ckpt-async=skip from argv
 * (updating *argc).  OUT *mode: a ckpt_async_mode (CKPT_ASYNC_OFF when
 * absent).  Returns 0, or 2 after printing a usage error naming the value.
 */
int cli_async_flag_extract(const char *cmd, int *argc, char **argv, int *mode);
/* The flag's lines for --help. */
void cli_async_flag_help(FILE *f);

#endif
