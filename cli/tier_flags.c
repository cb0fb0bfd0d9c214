/*
 * tier_flags.c - parsing the checkpoint tier flags of train and resume
 * (tier_flags.h).
 */
#include "cli/tier_flags.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void cli_tier_flags_help(FILE *f)
{
	fprintf(f, "  --ckpt-replicas R      also write every rank's checkpoint chunks into the stores of R ranks\n"
		   "                         on R other hosts before the commit, which records every copy; a\n"
		   "                         restore on a host that lost its disk reads them over the comm\n"
		   "                         (default 0; needs ranks on at least R+1 hosts)\n");
}

/* "--flag VALUE" or "--flag=VALUE" at argv[i]: 1 and *val (NULL when missing), *used slots; else 0. */
static int flag_value(int argc, char **argv, int i, const char *flag, const char **val, int *used)
{
	size_t n = strlen(flag);
	if (strncmp(argv[i], flag, n) || (argv[i][n] && argv[i][n] != '='))
		return 0;
	if (argv[i][n] == '=') {
		*val = argv[i] + n + 1;
		*used = 1;
	} else {
		*val = i + 1 < argc ? argv[i + 1] : NULL;
		*used = i + 1 < argc ? 2 : 1;
	}
	return 1;
}

int cli_tier_flags_extract(const char *cmd, int *argc, char **argv)
{
	int out = 1;
	for (int i = 1; i < *argc;) {
		const char *v = NULL;
		int used = 0;
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if (!flag_value(*argc, argv, i, "--ckpt-replicas", &v, &used)) {
			argv[out++] = argv[i++];
			continue;
		}
		long n = -1;
		if (!v || cli_parse_long(cmd, "--ckpt-replicas", v, &n))
			n = -1;
		if (n < 0 || n > 8) {
			fprintf(stderr, "qeffect %s: --ckpt-replicas needs a count of copies in 0..8, got '%s'\n", cmd,
				v ? v : "");
			return 2;
		}
		char buf[16];
		snprintf(buf, sizeof(buf), "%ld", n);
		setenv("QE_CKPT_REPLICAS", buf, 1);
		i += used;
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}
