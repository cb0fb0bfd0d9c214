/*
 * cmd_selftest.c - `qeffect selftest inject [--json]`: run the contract's
 * scripted violations (runtime/contract/inject.c) and print one row each:
 * which violation, its family, the injected operation, whether it was
 * rejected exactly there and whether the contract state survived it.  Pure
 * host bookkeeping: no backend, no device, no CUDA context.  Exit 1 when any
 * row fails, so CI and operators can use it as a smoke test of the contracts.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/flags.h"
#include "runtime/contract/contract.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: qeffect selftest inject [--json]\n\n"
		   "Run every scripted contract violation (stale reference, duplicate consumer, key/slot\n"
		   "mismatch, out-of-order token, stale cache, arena write, premature commit/checkpoint):\n"
		   "valid operations, then one invalid one.  A row passes when the invalid operation is\n"
		   "the first rejected, with its family's code, and changes no contract state.\n"
		   "Exit status 0 when every row passes, 1 otherwise.\n");
}

static const char *yes_no(int b)
{
	return b ? "yes" : "no";
}

static int print_json(const qe_inject_result *r, int n)
{
	json_t *arr = json_array();
	if (!arr)
		return -1;
	for (int i = 0; i < n; i++) {
		json_t *row = json_pack("{s:s, s:s, s:s, s:i, s:s, s:i, s:b, s:b, s:b, s:b, s:b, s:s}", "injection",
					r[i].name, "family", qe_errname(r[i].expected), "got", qe_errname(r[i].got),
					"invalid_index", r[i].invalid_index, "invalid_op", r[i].invalid_op,
					"first_fail_index", r[i].first_fail_index, "rejected", r[i].rejected,
					"preserved", r[i].preserved && r[i].followup_ok, "state_unchanged",
					r[i].preserved, "followup_ok", r[i].followup_ok, "passed",
					qe_inject_passed(&r[i]), "message", r[i].message);
		if (!row || json_array_append_new(arr, row)) {
			json_decref(arr);
			return -1;
		}
	}
	char *text = json_dumps(arr, JSON_INDENT(2));
	json_decref(arr);
	if (!text)
		return -1;
	printf("%s\n", text);
	free(text);
	return 0;
}

static void print_table(const qe_inject_result *r, int n)
{
	printf("%-40s %-17s %-70s %-8s %-9s\n", "injection", "family", "first invalid operation", "rejected",
	       "preserved");
	for (int i = 0; i < n; i++) {
		char op[128];
		snprintf(op, sizeof(op), "#%d %s", r[i].invalid_index, r[i].invalid_op);
		printf("%-40s %-17s %-70s %-8s %-9s\n", r[i].name, qe_errname(r[i].expected), op, yes_no(r[i].rejected),
		       yes_no(r[i].preserved && r[i].followup_ok));
		if (!qe_inject_passed(&r[i]))
			printf("    got %s at op #%d: %s\n", qe_errname(r[i].got), r[i].first_fail_index, r[i].message);
	}
}

int cli_selftest_main(int argc, char **argv)
{
	int json = 0, nops = 0;
	const cli_flag flags[] = { { "json", 0, CLI_FLAG_BOOL, .dst = &json }, { 0 } };
	int rc = cli_flags_parse("selftest", flags, argc, argv, &nops);
	if (rc < 0) {
		usage(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (nops != 1 || strcmp(argv[1], "inject") != 0) {
		usage(stderr);
		return 2;
	}
	int n = qe_inject_count();
	qe_inject_result *r = calloc((size_t)n, sizeof(*r));
	if (!r)
		return cli_report("selftest", QE_ENOMEM, "no memory for the results");
	int ran = qe_inject_run_all(r, n);
	if (ran < 0) {
		free(r);
		return cli_report("selftest", ran, "running the injections");
	}
	int failed = 0;
	for (int i = 0; i < ran; i++)
		failed += !qe_inject_passed(&r[i]);
	if (json) {
		if (print_json(r, ran)) {
			free(r);
			fprintf(stderr, "qeffect selftest: cannot build the JSON output\n");
			return 1;
		}
	} else {
		print_table(r, ran);
		printf("\n%d of %d injections rejected at the injected operation with state preserved\n", ran - failed,
		       ran);
	}
	free(r);
	if (failed)
		fprintf(stderr, "qeffect selftest: %d injection%s FAILED\n", failed, failed == 1 ? "" : "s");
	return failed ? 1 : 0;
}
