/*
 * cmd_env.c - `qeffect env`: every environment variable qeffect honours
 * (runtime/core/env.c's table), whether it is set here, and what it means.
 * Values are not printed: some are secrets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/core/env.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect env [--json]\n\n"
		   "Every environment variable qeffect reads: its name, whether it is set in this environment\n"
		   "(values are not shown: some are secrets), and what it means.  Most have a flag that sets\n"
		   "them (named in the meaning); the launchers' variables (RANK, WORLD_SIZE, ...) come from\n"
		   "torchrun or from qeffect's own --nproc launcher.\n"
		   "  --json   one JSON object: {\"variables\": [{\"name\", \"set\", \"meaning\"}, ...]}\n");
}

int cli_env_main(int argc, char **argv)
{
	int json = 0;
	const cli_flag flags[] = { { "json", 0, CLI_FLAG_BOOL, .dst = &json }, { 0 } };
	int rc = cli_flags_parse("env", flags, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (json) {
		json_t *a = json_array(), *o = json_object();
		for (int i = 0; a && i < qe_env_nvars; i++) {
			const char *v = qe_env(qe_env_vars[i].name);
			json_array_append_new(a, json_pack("{s:s,s:b,s:s}", "name", qe_env_vars[i].name, "set",
							   v != NULL, "meaning", qe_env_vars[i].meaning));
		}
		json_object_set_new(o, "variables", a);
		char *s = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		if (!s) {
			fprintf(stderr, "qeffect env: out of memory\n");
			return 1;
		}
		printf("%s\n", s);
		free(s);
		return 0;
	}
	printf("%-30s %-4s %s\n", "variable", "set", "meaning");
	for (int i = 0; i < qe_env_nvars; i++)
		printf("%-30s %-4s %s\n", qe_env_vars[i].name, qe_env(qe_env_vars[i].name) ? "yes" : "-",
		       qe_env_vars[i].meaning);
	return 0;
}
