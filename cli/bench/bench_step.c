/*
 * bench_step.c - `qeffect bench step`: step time of the five execution
 * configurations of issue 7, --pp 2 with two local chunks per rank, each
 * trial a fresh set of processes (bench_train.c), a main series and an
 * independent replication series reported separately, against the per-rank
 * floor of `qeffect bench floor` measured in its own process first.
 *
 * --pp 1 is the one-GPU mode of issue 20 (GPT-2 against llm.c and PyTorch):
 * one rank holding every layer in one chunk (--chunks 1), where the
 * configurations that mean something are the execution modes, not the
 * schedules: reference eager (full backward, eager), qeffect eager,
 * captured copy and captured direct (zbv needs two chunks per rank and is
 * refused).  Precision is a second axis, --precision fp8,bf16 (the default
 * under --pp 1): every preset item is run once per precision, so a row is
 * (preset, M, batch, precision) and its cells are the configurations, and
 * "speedup" stays the ratio to reference eager of the same row.  That keeps
 * one code path for both modes (a row is what a preset was) instead of a
 * second table of configurations that would repeat the flags.  Tokens per
 * step are micro x batch x seq; tokens/s per trial is that over the trial's
 * median step time, and a cell's tokens/s is the median over trials.
 *
 * Compatibility: with none of the new flags (--pp 1, --precision, --batch,
 * PRESET:M:B, the shape flags, --attention) the children's command lines,
 * logs, table and step.json are exactly what they were; with any of them the
 * report is "extended": rows carry precision, batch, seq and tokens, cells
 * carry tokens/s, and the table has those columns.  The floor models --pp 2
 * placements of the unmodified preset at batch 1, so it is off by default
 * under --pp 1, --batch or shape flags, and asking for it there is refused.
 *
 * Runs go trial by trial (every preset and configuration of trial 1, then of
 * trial 2, ...), main series first, so that a --budget-s cut leaves whole
 * rounds; the report is rewritten after every run, so a killed bench leaves
 * what it measured.
 *
 * This file is the command: its flags, the floor, and the runs; what is
 * made of the runs (step.json, the table, the charts) is bench_step_report.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/bench/bench_step.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"

#define MAX_PRESETS 8 /* --presets items */
#define MAX_PRECS 3   /* fp8, bf16, f32 */
#define MAX_ROWS 24   /* items x precisions */

const cfg_def bench_step_cfgs[NCFG] = {
	{ "reference_eager", "reference eager", { "--schedule", "interleaved", "--backward", "full", "--exec", "eager", NULL }, 0, 0 },
	{ "qeffect_eager", "qeffect eager", { "--schedule", "interleaved", "--backward", "split", "--exec", "eager", NULL }, 0, 0 },
	{ "captured_copy", "captured copy",
	  { "--schedule", "interleaved", "--backward", "split", "--exec", "graph", "--grad", "copy", NULL }, 1, 0 },
	{ "captured_direct", "captured direct",
	  { "--schedule", "interleaved", "--backward", "split", "--exec", "graph", "--grad", "direct", NULL }, 1, 0 },
	{ "captured_zbv_direct", "captured zbv direct",
	  { "--schedule", "zbv", "--backward", "split", "--exec", "graph", "--grad", "direct", NULL }, 1, 1 },
};
const char *const bench_step_series[2] = { "main", "repl" };
const char *const bench_step_shape_flags[NSHAPE] = { "--layers", "--hidden", "--heads", "--ffn", "--seq", "--vocab" };

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect bench step [--backend cpu|cuda] [--presets h2048:4,h4096:8] [--trials 3] [--repl 2]\n"
		"                          [--steps 12] [--warmup 3] [--data FILE] [--out DIR] [--json]\n"
		"       qeffect bench step --pp 1 --presets gpt2:1:16,gpt2-xl:1:8 [--precision fp8,bf16] [--batch B]\n"
		"                          [--layers N --hidden N --heads N --ffn N --seq N --vocab N] [...]\n\n"
		"Step time of five configurations, --pp 2 with two local chunks per rank, each trial a fresh set\n"
		"of processes (qeffect train --json --trace off):\n"
		"  reference_eager      interleaved, --backward full, --exec eager (the baseline)\n"
		"  qeffect_eager        interleaved, split dI/dW, eager\n"
		"  captured_copy        interleaved, split, --exec graph --grad copy\n"
		"  captured_direct      interleaved, split, --exec graph --grad direct\n"
		"  captured_zbv_direct  zbv, split, --exec graph --grad direct\n"
		"A trial's step time is the median over steps warmup+1..N of the slowest rank's step (per step\n"
		"the largest of the ranks' times; every step ends with the loss all-reduce, which no rank leaves\n"
		"before the slowest arrives; the progress line's ms/step is rank 0's view of the same).  A\n"
		"configuration's value is the median over its trials; the main series (--trials) and the\n"
		"replication series (--repl) are reported separately.  Per configuration: speedup over\n"
		"reference eager, setup (fork to the end of the first step + capture host time), break-even\n"
		"steps (setup difference / per-step saving against reference eager), graphs, handoffs per\n"
		"replaying step, arena bytes, peak allocation (ops->alloc bytes, largest rank) and its ratio to\n"
		"reference eager, persistent growth (bytes held after the last step minus after the second,\n"
		"by the allocator count and by the memory probe: cuda device used bytes, or RSS on cpu).  The\n"
		"floor per rank comes from 'qeffect bench floor' run first in its own process.\n"
		"Writes DIR/step.json (rewritten after every run), DIR/step-PRESET.png (gnuplot; the .gp and\n"
		".dat stay beside it) and DIR/logs/.\n\n"
		"--pp 1 (one GPU): one rank holds every layer in one chunk (--chunks 1); the configurations are\n"
		"the execution modes above without zbv (default reference_eager,captured_direct), each run at\n"
		"every --precision (default fp8,bf16), so a row is preset x M x batch x precision.  Any of --pp 1,\n"
		"--precision, --batch, PRESET:M:B, the shape flags or --attention makes the report extended:\n"
		"rows carry precision, batch, seq and tokens per step (M x batch x seq), cells tokens/s (per\n"
		"trial tokens per step / the trial's step time; a cell's value is the median over trials), the\n"
		"table shows them, and files are named PRESET-mM-bB-PREC.  Without them the output is what it\n"
		"always was.\n\n"
		"flags:\n"
		"  --backend cpu|cuda   (default cpu)\n"
		"  --presets LIST       PRESET:M[:B],... (default h2048:4,h4096:8); B: sequences per microbatch\n"
		"  --configs LIST       a subset of the five names above (default all)\n"
		"  --trials N           main series trials (default 3)\n"
		"  --repl N             replication series trials (default 2; 0: none)\n"
		"  --steps N            steps per run (default 12)\n"
		"  --warmup N           leading steps left out of the step time (default 3; at least 2, as\n"
		"                       step 1 is eager and step 2 captures)\n"
		"  --data FILE          training data (default: train's default)\n"
		"  --floor on|off       measure the floor first (default on)\n"
		"  --budget-s S         start no run that would end past S seconds (estimated from earlier\n"
		"                       runs); the report says it was cut short (default 0: no budget)\n"
		"  --timeout-s S        time limit of one run (default 600)\n"
		"  --out DIR            report folder (default bench-out)\n"
		"  --json               print the report as JSON instead of the table\n"
		"  --pp 1|2             pipeline ranks (default 2: two chunks per rank; 1: one chunk, one process)\n"
		"  --precision LIST     fp8,bf16,f32: one row per precision (default: fp8,bf16 with --pp 1;\n"
		"                       train's default, fp8, otherwise)\n"
		"  --batch B            sequences per microbatch for every item without its own :B (default:\n"
		"                       the preset's, 1); --presets PRESET:M:B sets it per item\n"
		"  --layers N --hidden N --heads N --ffn N --seq N --vocab N --attention auto|flash|probs\n"
		"                       passed to every run (overrides of every preset; tokens use --seq)\n"
		"  --floor on|off       under --pp 1, --batch or shape flags the floor is off (it models the\n"
		"                       --pp 2 placements of the unmodified preset at batch 1)\n"
		"Exit status: 0 when every run that started succeeded, 1 otherwise, 2 bad usage.\n");
}

static double elapsed_s(double t0)
{
	return (bench_now_ms() - t0) / 1e3;
}

/* What the next run of (p, c) will likely take: the longest run of c on p so far, else of p. */
static double estimate_s(const preset_state *p, int c)
{
	double est = 0, any = 0;
	for (int s = 0; s < 2; s++)
		for (int k = 0; k < NCFG; k++)
			for (int t = 0; t < p->nruns[s][k]; t++) {
				double w = p->runs[s][k][t].wall_ms / 1e3;
				if (k == c && w > est)
					est = w;
				if (w > any)
					any = w;
			}
	return est > 0 ? est : any;
}

static int run_floor(const char *exe, const step_args *a, preset_state *p, const char *logs)
{
	char sm[16], path[4400];
	snprintf(sm, sizeof(sm), "%d", p->micro);
	snprintf(path, sizeof(path), "%s/floor-%.15s.log", logs, p->name);
	char *argv[] = { (char *)exe, "bench", "floor", "--backend", (char *)a->backend, "--preset", p->name, "--micro",
			 sm, "--pp", "2", "--json", NULL };
	bench_child ch;
	p->floor_ms[0] = p->floor_ms[1] = NAN;
	if (bench_run_child(argv, path, a->timeout_s, &ch))
		return -1;
	json_t *lines = bench_json_lines(ch.out);
	if (ch.exit_code == 0 && json_array_size(lines) == 1) {
		p->floor = json_incref(json_array_get(lines, 0));
		json_t *pl = json_object_get(p->floor, "placements");
		p->floor_ms[0] = json_number_value(json_object_get(json_object_get(pl, "interleaved"), "floor_ms"));
		p->floor_ms[1] = json_number_value(json_object_get(json_object_get(pl, "zbv"), "floor_ms"));
	} else {
		fprintf(stderr, "qeffect bench step: floor of %s failed (exit %d); log %s:\n%s\n", p->name, ch.exit_code, path,
			ch.out ? ch.out : "");
	}
	json_decref(lines);
	bench_child_release(&ch);
	return p->floor ? 0 : -1;
}

/* The train flags of one run: the configuration's, then the row's and the shape overrides; NULL-terminated. */
static void run_flags(const step_args *a, const preset_state *p, int c, const char **out)
{
	int n = 0;
	for (int i = 0; bench_step_cfgs[c].flags[i]; i++)
		out[n++] = bench_step_cfgs[c].flags[i];
	if (a->pp == 1) {
		out[n++] = "--chunks";
		out[n++] = "1";
	}
	if (p->prec[0]) {
		out[n++] = "--precision";
		out[n++] = p->prec;
	}
	if (p->batch_s[0]) {
		out[n++] = "--batch";
		out[n++] = p->batch_s;
	}
	for (int k = 0; k < NSHAPE; k++)
		if (a->shape[k]) {
			out[n++] = bench_step_shape_flags[k];
			out[n++] = a->shape[k];
		}
	if (a->attention) {
		out[n++] = "--attention";
		out[n++] = a->attention;
	}
	out[n] = NULL;
}

/* "PRESET:M" or "PRESET:M:B" -> preset, M and B (0 when absent); 0 or -1. */
static int parse_item(const char *s, char *preset, size_t len, int *micro, int *batch)
{
	char buf[32];
	size_t sl = strlen(s);
	if (sl >= sizeof(buf))
		return -1;
	memcpy(buf, s, sl + 1);
	*batch = 0;
	char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
	if (c2) {
		char *end;
		long b = strtol(c2 + 1, &end, 10);
		if (*end || end == c2 + 1 || b < 1 || b > 4096)
			return -1;
		*batch = (int)b;
		*c2 = 0;
	}
	return bench_preset_micro(buf, preset, len, micro);
}

/* A shape flag (--layers ...): 1..2^20, passed through to train as given. */
static int shape_flag(const char *cmd, const char *flag, const char *value, void *dst)
{
	long v;
	if (cli_parse_long(cmd, flag, value, &v))
		return 2;
	if (v < 1 || v > (1 << 20)) {
		fprintf(stderr, "qeffect %s: %s %ld is out of range (1..%d)\n", cmd, flag, v, 1 << 20);
		return 2;
	}
	*(const char **)dst = value;
	return 0;
}

static int parse_args(int argc, char **argv, step_args *a, preset_state *ps, int *np)
{
	const char *presets = "h2048:4,h4096:8", *configs = NULL, *precisions = NULL;
	memset(a, 0, sizeof(*a));
	a->backend = "cpu";
	a->out = "bench-out";
	a->trials = 3;
	a->repl = 2;
	a->steps = 12;
	a->warmup = 3;
	a->floor = -1; /* not asked: on where it models the runs */
	a->timeout_s = 600;
	a->pp = 2;
	int batch = 0;
	int floor_i = -1, attention = -1; /* indexes into cli_on_off and attentions; -1: not given */
	static const char *const attentions[] = { "auto", "flash", "probs", NULL };
#define BENCH_INT(name, field) { name, 0, CLI_FLAG_INT, field, .lo = -1000000, .hi = 1000000 }
#define BENCH_SHAPE(k) { bench_step_shape_flags[k] + 2, 0, CLI_FLAG_FN, &a->shape[k], .fn = shape_flag }
	const cli_flag table[] = {
		{ "backend", 0, CLI_FLAG_STRING, .dst = &a->backend },
		{ "presets", 0, CLI_FLAG_STRING, .dst = &presets },
		{ "configs", 0, CLI_FLAG_STRING, .dst = &configs },
		BENCH_INT("trials", &a->trials),
		BENCH_INT("repl", &a->repl),
		BENCH_INT("steps", &a->steps),
		BENCH_INT("warmup", &a->warmup),
		BENCH_INT("pp", &a->pp),
		BENCH_INT("batch", &batch),
		{ "data", 0, CLI_FLAG_STRING, .dst = &a->data },
		{ "floor", 0, CLI_FLAG_CHOICE, &floor_i, .words = cli_on_off },
		{ "budget-s", 0, CLI_FLAG_DOUBLE, &a->budget_s, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "timeout-s", 0, CLI_FLAG_DOUBLE, &a->timeout_s, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "out", 0, CLI_FLAG_STRING, .dst = &a->out },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &a->json },
		{ "precision", 0, CLI_FLAG_STRING, .dst = &precisions },
		{ "attention", 0, CLI_FLAG_CHOICE, &attention, .words = attentions },
		BENCH_SHAPE(0), BENCH_SHAPE(1), BENCH_SHAPE(2), BENCH_SHAPE(3), BENCH_SHAPE(4), BENCH_SHAPE(5),
		{ 0 },
	};
#undef BENCH_INT
#undef BENCH_SHAPE
	int rc = cli_flags_parse("bench step", table, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return -1;
	}
	if (rc)
		return rc;
	if (floor_i >= 0)
		a->floor = floor_i == 0;
	if (attention >= 0)
		a->attention = attentions[attention];
	if (a->trials < 0 || a->trials > MAX_TRIALS || a->repl < 0 || a->repl > MAX_TRIALS || a->trials + a->repl < 1) {
		fprintf(stderr, "qeffect bench step: --trials and --repl must be in 0..%d, not both 0\n", MAX_TRIALS);
		return 2;
	}
	if (a->warmup < 2 || a->steps < a->warmup + 1 || a->steps > 100000) {
		fprintf(stderr, "qeffect bench step: need --warmup >= 2 (step 1 is eager, step 2 captures) and --steps > "
				"--warmup\n");
		return 2;
	}
	if (a->pp != 1 && a->pp != 2) {
		fprintf(stderr, "qeffect bench step: --pp is 1 (one chunk, one process) or 2 (two chunks per rank), not %d\n",
			a->pp);
		return 2;
	}
	if (batch < 0 || batch > 4096) {
		fprintf(stderr, "qeffect bench step: --batch %d is out of range (1..4096)\n", batch);
		return 2;
	}
	char precs[MAX_PRECS][32];
	int nprec = 1;
	precs[0][0] = 0;
	if (precisions || a->pp == 1) {
		nprec = bench_split_list(precisions ? precisions : "fp8,bf16", precs, MAX_PRECS);
		for (int k = 0; k < nprec; k++) {
			int dup = 0;
			for (int j = 0; j < k; j++)
				dup |= strcmp(precs[j], precs[k]) == 0;
			if (dup || (strcmp(precs[k], "fp8") && strcmp(precs[k], "bf16") && strcmp(precs[k], "f32")))
				nprec = -1;
		}
		if (nprec < 0) {
			fprintf(stderr, "qeffect bench step: --precision takes distinct names from fp8, bf16, f32 (got '%s')\n",
				precisions ? precisions : "fp8,bf16");
			return 2;
		}
	}
	char items[MAX_PRESETS][32];
	int n = bench_split_list(presets, items, MAX_PRESETS);
	if (n < 0) {
		fprintf(stderr, "qeffect bench step: --presets needs PRESET:M[:B][,PRESET:M[:B]...] (at most %d), got '%s'\n",
			MAX_PRESETS, presets);
		return 2;
	}
	int any_item_batch = 0, nrows = 0;
	for (int i = 0; i < n; i++) {
		qe_model_config mc;
		char name[16];
		int micro, ib;
		if (parse_item(items[i], name, sizeof(name), &micro, &ib) || qe_model_preset(name, &mc) || micro % a->pp) {
			fprintf(stderr, "qeffect bench step: bad --presets item '%s' (PRESET:M or PRESET:M:B with a known preset, "
					"M a multiple of --pp %d, B in 1..4096)\n", items[i], a->pp);
			return 2;
		}
		any_item_batch |= ib > 0;
		for (int k = 0; k < nprec; k++) {
			preset_state *p = &ps[nrows++];
			snprintf(p->name, sizeof(p->name), "%s", name);
			snprintf(p->prec, sizeof(p->prec), "%.7s", precs[k]);
			p->micro = micro;
			p->seq = a->shape[4] ? atoi(a->shape[4]) : mc.seq;
			p->batch = ib ? ib : batch ? batch : mc.batch;
			if (ib || batch)
				snprintf(p->batch_s, sizeof(p->batch_s), "%d", p->batch);
			p->tokens = (double)p->micro * p->batch * p->seq;
			p->floor_ms[0] = p->floor_ms[1] = NAN;
		}
	}
	int shaped = batch || any_item_batch || a->attention;
	for (int k = 0; k < NSHAPE; k++)
		shaped |= a->shape[k] != NULL;
	a->extended = a->pp == 1 || precisions || shaped;
	for (int i = 0; i < nrows; i++) {
		preset_state *p = &ps[i];
		if (a->extended)
			snprintf(p->tag, sizeof(p->tag), "%s-m%d-b%d-%s", p->name, p->micro, p->batch,
				 p->prec[0] ? p->prec : "fp8");
		else
			snprintf(p->tag, sizeof(p->tag), "%s", p->name);
		if (a->extended && !p->prec[0])
			snprintf(p->prec, sizeof(p->prec), "fp8"); /* train's default, now passed explicitly */
	}
	/* the floor models the --pp 2 placements of the unmodified preset at batch 1 */
	const char *nofloor = a->pp == 1 ? "--pp 1" : shaped ? "--batch, PRESET:M:B, shape flags or --attention" : NULL;
	if (a->floor == 1 && nofloor) {
		fprintf(stderr, "qeffect bench step: --floor on cannot be used with %s (bench floor models the --pp 2 "
				"placements of the unmodified preset at batch 1); use --floor off\n", nofloor);
		return 2;
	}
	if (a->floor < 0)
		a->floor = !nofloor;
	*np = nrows;
	for (int k = 0; k < NCFG; k++)
		a->use[k] = configs == NULL && (a->pp == 2 || k == 0 || k == 3);
	if (configs) {
		char cs[NCFG][32];
		int nc = bench_split_list(configs, cs, NCFG);
		for (int i = 0; i < nc; i++) {
			int found = 0;
			for (int k = 0; k < NCFG; k++)
				if (strcmp(cs[i], bench_step_cfgs[k].name) == 0)
					a->use[k] = found = 1;
			if (!found)
				nc = -1;
		}
		if (nc < 0) {
			fprintf(stderr, "qeffect bench step: --configs takes names from: reference_eager, qeffect_eager, "
					"captured_copy, captured_direct, captured_zbv_direct\n");
			return 2;
		}
	}
	if (a->pp == 1 && a->use[4]) {
		fprintf(stderr, "qeffect bench step: captured_zbv_direct needs two chunks per rank (--pp 2); --pp 1 runs "
				"one chunk\n");
		return 2;
	}
	return 0;
}

int bench_step_main(int argc, char **argv)
{
	static preset_state ps[MAX_ROWS];
	memset(ps, 0, sizeof(ps));
	step_args a;
	int np = 0;
	int rc = parse_args(argc, argv, &a, ps, &np);
	if (rc)
		return rc < 0 ? 0 : rc;
	char exe[4096], logs[4200], path[4400], jpath[4400];
	if (bench_self_exe(exe, sizeof(exe))) {
		fprintf(stderr, "qeffect bench step: cannot find this executable (/proc/self/exe)\n");
		return 1;
	}
	snprintf(logs, sizeof(logs), "%s/logs", a.out);
	snprintf(jpath, sizeof(jpath), "%s/step.json", a.out);
	if (bench_mkdirs(logs))
		return 1;
	double t0 = bench_now_ms();
	int failed = 0, truncated = 0;
	char why[300] = "";
	FILE *prog = a.json ? stderr : stdout;
	if (a.floor)
		for (int i = 0; i < np; i++) {
			int same = -1; /* rows of one item at several precisions share its floor */
			for (int j = 0; j < i && same < 0; j++)
				if (ps[j].floor && strcmp(ps[j].name, ps[i].name) == 0 && ps[j].micro == ps[i].micro)
					same = j;
			if (same >= 0) {
				ps[i].floor = json_incref(ps[same].floor);
				ps[i].floor_ms[0] = ps[same].floor_ms[0];
				ps[i].floor_ms[1] = ps[same].floor_ms[1];
				continue;
			}
			if (run_floor(exe, &a, &ps[i], logs))
				failed = 1;
			else
				fprintf(prog, "floor %s M=%d: interleaved %.3f ms, zbv %.3f ms per step (heavier rank)\n",
					ps[i].name, ps[i].micro, ps[i].floor_ms[0], ps[i].floor_ms[1]);
			fflush(prog);
		}
	for (int se = 0; se < 2 && !truncated; se++) {
		int n = se ? a.repl : a.trials;
		for (int t = 0; t < n && !truncated; t++)
			for (int i = 0; i < np && !truncated; i++)
				for (int c = 0; c < NCFG && !truncated; c++) {
					if (!a.use[c])
						continue;
					preset_state *p = &ps[i];
					double est = estimate_s(p, c);
					if (a.budget_s > 0 && elapsed_s(t0) + est > a.budget_s) {
						truncated = 1;
						snprintf(why, sizeof(why), "--budget-s %.0f: stopped before %s %s trial %d of %.40s "
							 "(%.0f s spent, that run takes about %.0f s)", a.budget_s,
							 bench_step_series[se], bench_step_cfgs[c].name, t + 1, p->tag, elapsed_s(t0),
							 est);
						break;
					}
					snprintf(path, sizeof(path), "%s/%s-%s-%d-%s.log", logs, p->tag, bench_step_series[se], t + 1,
						 bench_step_cfgs[c].name);
					const char *flags[48];
					run_flags(&a, p, c, flags);
					bench_train_spec spec = { exe, a.backend, p->name, a.data, a.pp, p->micro, a.steps,
								  a.warmup, flags, path, a.timeout_s };
					bench_train_run *r = &p->runs[se][c][p->nruns[se][c]++];
					if (bench_train(&spec, r)) {
						failed = 1;
						fprintf(stderr, "qeffect bench step: %s %s %s trial %d failed: %s (log %s)\n",
							p->tag, bench_step_cfgs[c].name, bench_step_series[se], t + 1, r->err,
							path);
					} else if (a.extended) {
						fprintf(prog, "%s %-20s %s %d/%d: %8.2f ms/step, %10.0f tok/s, setup %6.0f ms, %ld "
							"graphs\n", p->tag, bench_step_cfgs[c].name, bench_step_series[se], t + 1, n,
							r->step_ms, p->tokens / (r->step_ms / 1e3), r->setup_ms, r->graphs_max);
					} else {
						fprintf(prog, "%s %-20s %s %d/%d: %8.2f ms/step, setup %6.0f ms, %ld graphs\n",
							p->name, bench_step_cfgs[c].name, bench_step_series[se], t + 1, n, r->step_ms,
							r->setup_ms, r->graphs_max);
					}
					fflush(prog);
					json_t *doc = bench_step_report(&a, ps, np, 0, NULL, elapsed_s(t0));
					bench_write_json(jpath, doc);
					json_decref(doc);
				}
	}
	if (truncated)
		fprintf(stderr, "qeffect bench step: cut short: %s\n", why);
	for (int i = 0; i < np; i++)
		bench_step_chart(&a, &ps[i]);
	json_t *doc = bench_step_report(&a, ps, np, truncated, why, elapsed_s(t0));
	int werr = bench_write_json(jpath, doc);
	if (a.json) {
		char *txt = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
		printf("%s\n", txt ? txt : "{}");
		free(txt);
	} else {
		bench_step_print_table(&a, ps, np);
		printf("report: %s%s\n", jpath, truncated ? " (cut short by --budget-s)" : "");
	}
	json_decref(doc);
	for (int i = 0; i < np; i++) {
		for (int se = 0; se < 2; se++)
			for (int c = 0; c < NCFG; c++)
				for (int t = 0; t < ps[i].nruns[se][c]; t++)
					bench_train_release(&ps[i].runs[se][c][t]);
		json_decref(ps[i].floor);
		json_decref(ps[i].chart);
	}
	return failed || werr ? 1 : 0;
}
