/*
 * cmd_bench.c - `qeffect bench`: the benchmarks of issue 7, written once for
 * the cpu backend (smoke tests, seconds) and the cuda backend (the GPU
 * machine, bench/gpu-bench/run.sh):
 *   handoff  stale reads across a captured graph and its caller, one-way vs two-way
 *   step     step time of the five execution configurations against the floor
 *   scale    captured ZB-V as the number of microbatches grows
 *   floor    the per-rank floor: measured FP8 GEMM rate and copy bandwidth
 * Each lives in cli/bench/bench_<name>.c; they share cli/bench/bench_util.c and
 * cli/bench/bench_train.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"

static const struct {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *summary;
} subs[] = {
	{ "handoff", bench_handoff_main, "stale reads across a captured graph and its caller: one-way vs two-way handoff" },
	{ "step", bench_step_main, "step time of five execution configurations (eager, captured copy/direct, zbv) vs the floor" },
	{ "scale", bench_scale_main, "captured zbv with direct placement for M = 2, 4, 8, 16" },
	{ "floor", bench_floor_main, "the per-rank floor: measured FP8 GEMM rate and copy bandwidth" },
	{ "attention", bench_attention_main, "flash attention forward and backward alone, TFLOP/s per shape" },
};
#define NSUBS (sizeof(subs) / sizeof(subs[0]))

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect bench SUBCOMMAND [FLAGS]\n\n"
		   "Benchmarks; every measurement runs in fresh processes (this binary re-executed), and each\n"
		   "subcommand writes a JSON report into --out DIR (default bench-out).  Subcommands:\n\n");
	for (size_t i = 0; i < NSUBS; i++)
		fprintf(f, "  %-9s %s\n", subs[i].name, subs[i].summary);
	fprintf(f, "\nRun 'qeffect bench SUBCOMMAND --help' for its flags.  On the GPU machine:\n"
		   "  bash bench/gpu-bench/run.sh build-gpu gpu-data\n");
}

int cli_bench_main(int argc, char **argv)
{
	if (argc < 2) {
		help(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		help(stdout);
		return 0;
	}
	for (size_t i = 0; i < NSUBS; i++)
		if (strcmp(argv[1], subs[i].name) == 0)
			return subs[i].main(argc - 1, argv + 1);
	fprintf(stderr, "qeffect bench: unknown subcommand '%s'\n\n", argv[1]);
	help(stderr);
	return 2;
}
