/*
 * main.c - `qeffect`, the command users run: dispatch to a subcommand.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "cli/storage_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/status.h"

static const cli_command commands[] = {
	{ "fp8", cli_fp8_main, "FP8 conversions as the hardware does them (fp8 cast VALUE...)" },
	{ "schedule", cli_schedule_main, "Each pipeline rank's actions, validated (schedule --pp 2 --micro 4 --schedule zbv)" },
	{ "train", cli_train_main, "Train with a pipeline schedule on rank processes (train --pp 2 --micro 4 --steps 20)" },
	{ "resume", cli_resume_main, "Continue a run from a committed checkpoint in fresh processes (resume --run-dir DIR --steps 40)" },
	{ "compare", cli_compare_main, "Compare two runs' per-step fingerprints (compare RUN_A RUN_B)" },
	{ "list", cli_list_main, "The checkpoints of a run: step, e_W, status, bytes (list --run-dir DIR)" },
	{ "inspect", cli_inspect_main, "What a checkpoint holds: config, epochs, FP8 scales, tensors (inspect --run-dir DIR)" },
	{ "verify", cli_verify_main, "Re-hash every chunk of every committed checkpoint (verify --run-dir DIR)" },
	{ "export", cli_export_main, "A checkpoint's weights as HF GPT-2 safetensors or an llm.c file (export --run-dir DIR --format safetensors -o OUT/)" },
	{ "eval", cli_eval_main, "A checkpoint's loss on an llm.c token shard, whole model in one process (eval --run-dir DIR --data X.bin)" },
	{ "sample", cli_sample_main, "Text from a checkpoint, one token at a time with a KV cache, on the cpu (sample --run-dir DIR --prompt TEXT)" },
	{ "gc", cli_gc_main, "Drop old checkpoints, then unreferenced chunks (gc --run-dir DIR --keep-last 2)" },
	{ "plot", cli_plot_main, "Training and held-out loss curves with gnuplot (plot --run-dir DIR -o loss.png)" },
	{ "push", cli_push_main, "Copy committed checkpoints to S3-compatible storage (push --run-dir DIR --remote s3://B/P)" },
	{ "pull", cli_pull_main, "Fetch a pushed checkpoint into a run directory (pull --run-dir DIR --remote s3://B/P)" },
	{ "tokenize", cli_tokenize_main, "GPT-2 (or byte) tokens of .jsonl and .txt files or folders as llm.c shards (tokenize --in C --out PREFIX)" },
	{ "bench", cli_bench_main, "Benchmarks: handoff, step time vs the floor, microbatch scaling (bench step --help)" },
	{ "selftest", cli_selftest_main, "Inject contract violations and check each is rejected (selftest inject)" },
	{ "env", cli_env_main, "Every environment variable qeffect reads, whether it is set, and its meaning (env --json)" },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: qeffect COMMAND [ARGS]\n\n"
		   "qeffect trains GPT-style models with FP8 delayed scaling under pipeline schedules\n"
		   "and keeps checkpoints of them.  Commands:\n\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nFlags every command takes (they set the environment for the rank processes too):\n"
		   "  --local-dir DIR        the stores go to DIR/stores/rank-R on each host (node-local disk),\n"
		   "                         not RUN/stores (QE_LOCAL_DIR)\n"
		   "  --allow-network-fs     open stores and catalogs on a network filesystem anyway\n"
		   "                         (QE_ALLOW_NETWORK_FS=1; LMDB and SQLite need node-local storage)\n"
		   "  --ckpt-memory DIR      the memory tier's folder on each host (tmpfs; QE_CKPT_MEMORY_DIR):\n"
		   "                         train and resume keep and read replica copies there, the other\n"
		   "                         commands read the stores there too\n");
	fprintf(f, "\nRun 'qeffect COMMAND --help' for a command's flags.\n");
}

int cli_report(const char *cmd, int rc, const char *what)
{
	const char *detail = qe_last_error();
	if (detail && detail[0])
		fprintf(stderr, "qeffect %s: %s: %s (%s)\n", cmd, what, detail, qe_errname(rc));
	else
		fprintf(stderr, "qeffect %s: %s: %s (%s)\n", cmd, what, qe_strerror(rc), qe_errname(rc));
	return 1;
}

int cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return 1;
	return 0;
}

const char *cli_shared_dir(void)
{
	const char *d = cli_storage_get()->shared_dir;
	return d ? d : QE_SHARED_DIR;
}

int main(int argc, char **argv)
{
	/* The storage flags every command shares, into the process's settings, which the checkpoint layer is
	 * handed (storage_options.h); forked ranks inherit them, an external launcher's ranks parse the same
	 * command line. */
	if (cli_storage_init() || cli_flags_take(NULL, cli_storage_flags, &argc, argv))
		return 2;
	cli_storage_commit();
	if (qe_fault_init()) {
		fprintf(stderr, "qeffect: %s\n", qe_last_error());
		return 2;
	}
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].main(argc - 1, argv + 1);
	fprintf(stderr, "qeffect: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
