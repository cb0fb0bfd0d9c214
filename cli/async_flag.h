/*
 * async_flag.h - the --ckpt-async flag of `qeffect train` and `qeffect
 * resume` (ckpt/protocol/ckpt_async.h), a row of their flag table
 * (train_flags.c): --ckpt-async, --ckpt-async=wait or --ckpt-async=skip.
 */
#ifndef CLI_ASYNC_FLAG_H
#define CLI_ASYNC_FLAG_H

#include <stdio.h>

/*
 * The flag's value ("wait" when it came alone) into the int at mode, a
 * ckpt_async_mode (CKPT_ASYNC_OFF when the flag is absent).  Returns 0, or
 * 2 after printing a usage error naming the value.  A CLI_FLAG_FN of
 * flags.h.
 */
int cli_async_flag_set(const char *cmd, const char *flag, const char *value, void *mode);
/* The flag's lines for --help. */
void cli_async_flag_help(FILE *f);

#endif
