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

int cli_async_flag_extract(const char *cmd, int *argc, char **argv, int *mode)
{
	int out = 1;
	*mode = CKPT_ASYNC_OFF;
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if (strncmp(a, "--ckpt-async", 12) || (a[12] && a[12] != '=')) {
			argv[out++] = argv[i];
			continue;
		}
		const char *v = a[12] == '=' ? a + 13 : "wait";
		if (strcmp(v, "wait") == 0) {
			*mode = CKPT_ASYNC_WAIT;
		} else if (strcmp(v, "skip") == 0) {
			*mode = CKPT_ASYNC_SKIP;
		} else {
			fprintf(stderr, "qeffect %s: --ckpt-async takes wait or skip, got '%s'\n", cmd, v);
			return 2;
		}
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}
