/*
 * encoder_dir.c - the GPT-2 encoder folder (see encoder_dir.h).
 */
#include "cli/encoder_dir.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/storage_options.h"

void cli_encoder_dir(const char *flag, char *out, size_t n, const char **from)
{
	if (flag) {
		snprintf(out, n, "%s", flag);
		*from = "--encoder-dir";
		return;
	}
	const char *env = cli_storage_get()->encoder_dir;
	if (env && env[0]) {
		snprintf(out, n, "%s", env);
		*from = "QE_GPT2_ENCODER_DIR";
		return;
	}
	char exe[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[k > 0 ? k : 0] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(out, n, "%s/%s", slash ? exe : ".", CLI_ENCODER_SUBDIR);
	*from = "the default beside the qeffect binary";
}
