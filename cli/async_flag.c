/*
 * async_flag.c - parsing --ckpt-async for train and resume (async_flag.h).
 */
#include "cli/async_flag.h"

#include <string.h>

#include "ckpt/protocol/ckpt_async.h"

void cli_async_flag_help(FILE *f)
{
	fprintf(f, "  --ckpt-async[=wait|skip]\n"
		   "                         checkpoint asynchronously: training stalls only for the gate and a\n"
		   "                         host copy; chunks, rows and the commit are written in the background.\n"
		   "                         A checkpoint due while the previous one is still being written waits\n"
		   "                         for it (wait, the default) or is skipped (skip)\n");
}

int cli_async_flag_set(const char *cmd, const char *flag, const char *value, void *mode)
{
	if (strcmp(value, "wait") == 0) {
		*(int *)mode = CKPT_ASYNC_WAIT;
	} else if (strcmp(value, "skip") == 0) {
		*(int *)mode = CKPT_ASYNC_SKIP;
	} else {
		fprintf(stderr, "qeffect %s: %s takes wait or skip, got '%s'\n", cmd, flag, value);
		return 2;
	}
	return 0;
}
