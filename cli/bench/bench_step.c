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
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"

#define NCFG 5
#define MAX_PRESETS 8 /* --presets items */
#define MAX_PRECS 3   /* fp8, bf16, f32 */
#define MAX_ROWS 24   /* items x precisions */
#define MAX_TRIALS 16
#define NSHAPE 6      /* --layers --hidden --heads --ffn --seq --vocab, passed through to train */

typedef struct cfg_def {
	const char *name;
	const char *label; /* for the chart */
	const char *flags[10];
	int captured, zbv;
} cfg_def;

static const cfg_def cfgs[NCFG] = {
	{ "reference_eager", "reference eager", { "--schedule", "interleaved", "--backward", "full", "--exec", "eager", NULL }, 0, 0 },
	{ "qeffect_eager", "qeffect eager", { "--schedule", "interleaved", "--backward", "split", "--exec", "eager", NULL }, 0, 0 },
	{ "captured_copy", "captured copy",
	  { "--schedule", "interleaved", "--backward", "split", "--exec", "graph", "--grad", "copy", NULL }, 1, 0 },
	{ "captured_direct", "captured direct",
	  { "--schedule", "interleaved", "--backward", "split", "--exec", "graph", "--grad", "direct", NULL }, 1, 0 },
	{ "captured_zbv_direct", "captured zbv direct",
	  { "--schedule", "zbv", "--backward", "split", "--exec", "graph", "--grad", "direct", NULL }, 1, 1 },
};
static const char *series_names[2] = { "main", "repl" };

/* One row: a --presets item at one precision. */
typedef struct preset_state {
	char name[16];
	char tag[64];   /* file names and log names: the preset, or PRESET-mM-bB-PREC when extended */
	char prec[8];   /* --precision passed to train; "" when none is (the old mode) */
	char batch_s[16]; /* --batch passed to train; "" when none is */
	int micro, seq, batch;
	double tokens;  /* per step: micro x batch x seq */
	json_t *floor;            /* bench floor's report, or NULL */
	double floor_ms[2];       /* heavier rank: interleaved, zbv placement; NAN when unknown */
	bench_train_run runs[2][NCFG][MAX_TRIALS];
	int nruns[2][NCFG];
	json_t *chart;
} preset_state;

typedef struct step_args {
	const char *backend, *data, *out;
	int trials, repl, steps, warmup, floor, json;
	double budget_s, timeout_s;
	int use[NCFG];
	int pp;        /* 2 (two chunks per rank) or 1 (one chunk, every layer) */
	int extended;  /* a new flag was given: rows carry precision, batch and tokens/s */
	const char *shape[NSHAPE]; /* shape overrides as given, or NULL */
	const char *attention;     /* --attention passed through, or NULL */
} step_args;

static const char *const shape_flags[NSHAPE] = { "--layers", "--hidden", "--heads", "--ffn", "--seq", "--vocab" };

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

static int chunks_per_rank(const step_args *a)
{
	return a->pp == 1 ? 1 : 2;
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

typedef struct summary {
	int n;
	double step_ms, step_min, step_max, setup_ms, setup_wall_ms;
	double graphs, handoffs, arena, alloc_peak, alloc_growth, mem_peak, mem_growth, capture_ms;
	char mem_probe[16];
} summary;

/* Medians over the successful trials of a cell; growth is the largest seen. */
static void summarize(bench_train_run *runs, int n, summary *s)
{
	double step[MAX_TRIALS], setup[MAX_TRIALS], setupw[MAX_TRIALS];
	memset(s, 0, sizeof(*s));
	s->alloc_growth = s->mem_growth = -INFINITY;
	s->step_min = INFINITY;
	s->step_max = -INFINITY;
	for (int t = 0; t < n; t++) {
		bench_train_run *r = &runs[t];
		if (!r->ok)
			continue;
		step[s->n] = r->step_ms;
		setup[s->n] = r->setup_ms;
		setupw[s->n] = r->setup_wall_ms;
		s->step_min = fmin(s->step_min, r->step_ms);
		s->step_max = fmax(s->step_max, r->step_ms);
		s->graphs = (double)r->graphs_max;
		s->handoffs = r->handoffs_per_step;
		s->arena = r->arena_bytes;
		s->alloc_peak = fmax(s->alloc_peak, r->alloc_peak);
		s->mem_peak = fmax(s->mem_peak, r->mem_peak);
		s->alloc_growth = fmax(s->alloc_growth, r->alloc_growth);
		s->mem_growth = fmax(s->mem_growth, r->mem_growth);
		s->capture_ms = fmax(s->capture_ms, r->capture_ms);
		snprintf(s->mem_probe, sizeof(s->mem_probe), "%s", r->mem_probe);
		s->n++;
	}
	s->step_ms = bench_median(step, s->n);
	s->setup_ms = bench_median(setup, s->n);
	s->setup_wall_ms = bench_median(setupw, s->n);
	if (!s->n) {
		s->step_min = s->step_max = s->alloc_growth = s->mem_growth = NAN;
	}
}

/* Break-even steps against the reference: setup difference / per-step saving; NAN: never. */
static double break_even(const summary *ref, const summary *s)
{
	double saving = ref->step_ms - s->step_ms, extra = s->setup_ms - ref->setup_ms;
	if (!(saving > 0))
		return NAN;
	return extra <= 0 ? 0 : extra / saving;
}

static json_t *cell_json(const step_args *a, preset_state *p, int se, int c, summary *sum)
{
	summary ref;
	summarize(p->runs[se][0], p->nruns[se][0], &ref);
	summary *s = sum;
	summarize(p->runs[se][c], p->nruns[se][c], s);
	double fl = p->floor_ms[cfgs[c].zbv];
	json_t *trials = json_array();
	for (int t = 0; t < p->nruns[se][c]; t++)
		json_array_append_new(trials, bench_real(p->runs[se][c][t].ok ? p->runs[se][c][t].step_ms : NAN));
	char flags[200] = "";
	for (int i = 0; cfgs[c].flags[i]; i++)
		snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s", i ? " " : "", cfgs[c].flags[i]);
	int have_ref = a->use[0] && ref.n > 0;
	json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:o,s:o,s:o,s:o}", "config", cfgs[c].name, "flags", flags, "runs",
			      p->nruns[se][c], "trials", s->n, "step_ms", bench_real(s->step_ms), "step_ms_trials", trials,
			      "step_ms_min", bench_real(s->step_min), "step_ms_max", bench_real(s->step_max));
	json_object_set_new(o, "speedup", bench_real(have_ref ? ref.step_ms / s->step_ms : NAN));
	json_object_set_new(o, "setup_ms", bench_real(s->setup_ms));
	json_object_set_new(o, "setup_wall_ms", bench_real(s->setup_wall_ms));
	json_object_set_new(o, "break_even_steps", bench_real(have_ref && c != 0 ? break_even(&ref, s) : NAN));
	json_object_set_new(o, "graphs", json_integer((json_int_t)s->graphs));
	/* F, dI and dW of every microbatch on every local chunk */
	json_object_set_new(o, "expected_graphs", json_integer(cfgs[c].captured ? 3 * p->micro * chunks_per_rank(a) : 0));
	json_object_set_new(o, "handoffs_per_step", bench_real(s->n ? s->handoffs : NAN));
	json_object_set_new(o, "arena_bytes", json_integer((json_int_t)s->arena));
	json_object_set_new(o, "alloc_peak_bytes", json_integer((json_int_t)s->alloc_peak));
	json_object_set_new(o, "peak_over_reference", bench_real(have_ref ? s->alloc_peak / ref.alloc_peak : NAN));
	json_object_set_new(o, "alloc_growth_bytes", bench_real(s->alloc_growth));
	json_object_set_new(o, "mem_probe", json_string(s->mem_probe[0] ? s->mem_probe : "none"));
	json_object_set_new(o, "mem_peak_bytes", json_integer((json_int_t)s->mem_peak));
	json_object_set_new(o, "mem_peak_over_reference", bench_real(have_ref ? s->mem_peak / ref.mem_peak : NAN));
	json_object_set_new(o, "mem_growth_bytes", bench_real(s->mem_growth));
	json_object_set_new(o, "capture_ms", bench_real(s->capture_ms));
	json_object_set_new(o, "floor_placement", json_string(cfgs[c].zbv ? "zbv" : "interleaved"));
	json_object_set_new(o, "floor_ms", bench_real(fl));
	json_object_set_new(o, "over_floor", bench_real(s->step_ms / fl));
	if (a->extended) {
		double tps[MAX_TRIALS];
		int n = 0;
		json_t *tt = json_array();
		for (int t = 0; t < p->nruns[se][c]; t++) {
			const bench_train_run *r = &p->runs[se][c][t];
			double v = r->ok && r->step_ms > 0 ? p->tokens / (r->step_ms / 1e3) : NAN;
			json_array_append_new(tt, bench_real(v));
			if (isfinite(v))
				tps[n++] = v;
		}
		json_object_set_new(o, "tokens_per_s", bench_real(bench_median(tps, n)));
		json_object_set_new(o, "tokens_per_s_trials", tt);
	}
	return o;
}

/* The cell's tokens/s as cell_json computed it; NAN when none. */
static double cell_tps(json_t *o)
{
	json_t *v = json_object_get(o, "tokens_per_s");
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static json_t *report(const step_args *a, preset_state *ps, int np, int truncated, const char *why, double wall_s)
{
	json_t *presets = json_array(), *runs = json_array();
	for (int i = 0; i < np; i++) {
		preset_state *p = &ps[i];
		json_t *series = json_object();
		for (int se = 0; se < 2; se++) {
			json_t *arr = json_array();
			for (int c = 0; c < NCFG; c++) {
				if (!a->use[c] || p->nruns[se][c] == 0)
					continue;
				summary s;
				json_array_append_new(arr, cell_json(a, p, se, c, &s));
				for (int t = 0; t < p->nruns[se][c]; t++) {
					json_t *r = bench_train_json(&p->runs[se][c][t]);
					json_object_set_new(r, "preset", json_string(p->name));
					json_object_set_new(r, "micro", json_integer(p->micro));
					json_object_set_new(r, "series", json_string(series_names[se]));
					json_object_set_new(r, "trial", json_integer(t + 1));
					json_object_set_new(r, "config", json_string(cfgs[c].name));
					if (a->extended) {
						json_object_set_new(r, "precision", json_string(p->prec));
						json_object_set_new(r, "batch", json_integer(p->batch));
					}
					json_array_append_new(runs, r);
				}
			}
			json_object_set_new(series, series_names[se], arr);
		}
		json_t *po = json_pack("{s:s,s:i,s:i,s:o,s:o,s:o,s:o}", "preset", p->name, "micro", p->micro, "pp", a->pp,
				       "floor_ms_interleaved", bench_real(p->floor_ms[0]), "floor_ms_zbv",
				       bench_real(p->floor_ms[1]), "floor", p->floor ? json_incref(p->floor) : json_null(),
				       "series", series);
		if (p->chart)
			json_object_set(po, "chart", p->chart);
		if (a->extended) {
			json_object_set_new(po, "tag", json_string(p->tag));
			json_object_set_new(po, "precision", json_string(p->prec));
			json_object_set_new(po, "batch", json_integer(p->batch));
			json_object_set_new(po, "seq", json_integer(p->seq));
			json_object_set_new(po, "chunks_per_rank", json_integer(chunks_per_rank(a)));
			json_object_set_new(po, "tokens_per_step", json_integer((json_int_t)p->tokens));
		}
		json_array_append_new(presets, po);
	}
	json_t *doc = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:s,s:f,s:{s:s,s:s,s:s,s:s},s:o,s:o}", "bench", "step", "backend",
			 a->backend, "steps", a->steps, "warmup", a->warmup, "trials", a->trials, "repl", a->repl,
			 "truncated", truncated, "truncated_why", why ? why : "", "wall_s", wall_s, "definitions",
			 "step_ms",
			 "median over trials of (median over steps warmup+1..N of the per-step maximum over ranks of "
			 "each rank's qe_rank_step wall time); every step ends with the loss all-reduce, so that "
			 "maximum is the slowest rank's step",
			 "setup_ms",
			 "fork of the child to the end of the first (eager) step on the latest rank, plus the capture "
			 "host time (spent at the start of step 2); setup_wall_ms = whole child minus steps 2..N",
			 "memory",
			 "alloc_*: bytes through ops->alloc (stages, AdamW, arena, copy scratch), largest rank; "
			 "mem_*: memory probe (cuda: device used bytes by cudaMemGetInfo; cpu: RSS) sampled after "
			 "setup and after every step; growth = after the last step minus after the second step",
			 "floor",
			 "bench floor: heavier rank's GEMM FLOPs / FP8 GEMM rate + (gradient views written and read, "
			 "params/m/v read and written) / D2D copy bandwidth; per placement",
			 "presets", presets, "runs", runs);
	if (doc && a->extended) {
		json_t *shape = json_object();
		for (int k = 0; k < NSHAPE; k++)
			if (a->shape[k])
				json_object_set_new(shape, shape_flags[k] + 2, json_integer(atoi(a->shape[k])));
		if (a->attention)
			json_object_set_new(shape, "attention", json_string(a->attention));
		json_object_set_new(doc, "pp", json_integer(a->pp));
		json_object_set_new(doc, "shape_overrides", shape);
		json_object_set_new(json_object_get(doc, "definitions"), "tokens_per_s",
				    json_string("tokens_per_step (micro x batch x seq) / the trial's step_ms, per trial; a "
						"cell's value is the median over its successful trials"));
	}
	return doc;
}

/* The extended table: a row's precision, batch, seq and tokens/s; no break-even, handoffs or arena (in step.json). */
static void print_table_ext(const step_args *a, preset_state *ps, int np)
{
	char b2[32];
	printf("\n%-12s %-4s %5s %5s %3s %-4s %-20s %3s %9s %10s %7s %9s %8s %8s %6s %7s\n", "preset", "prec", "batch",
	       "seq", "M", "ser", "config", "n", "median ms", "tok/s", "speedup", "setup ms", "peak/ref", "growth", "graphs",
	       "x floor");
	for (int i = 0; i < np; i++) {
		preset_state *p = &ps[i];
		for (int se = 0; se < 2; se++)
			for (int c = 0; c < NCFG; c++) {
				if (!a->use[c] || p->nruns[se][c] == 0)
					continue;
				summary s;
				json_t *o = cell_json(a, p, se, c, &s);
				if (!s.n) {
					printf("%-12s %-4s %5d %5d %3d %-4s %-20s %3d  no successful run (step.json: runs[].error)\n",
					       p->name, p->prec, p->batch, p->seq, p->micro, series_names[se], cfgs[c].name, 0);
					json_decref(o);
					continue;
				}
				char ssp[16] = "-", spr[16] = "-", sxf[16] = "-", sgr[16];
				json_t *v;
				if (json_is_number(v = json_object_get(o, "speedup")))
					snprintf(ssp, sizeof(ssp), "%.2f", json_number_value(v));
				if (json_is_number(v = json_object_get(o, "peak_over_reference")))
					snprintf(spr, sizeof(spr), "%.2f", json_number_value(v));
				if (json_is_number(v = json_object_get(o, "over_floor")))
					snprintf(sxf, sizeof(sxf), "%.2f", json_number_value(v));
				snprintf(sgr, sizeof(sgr), "%s", isnan(s.alloc_growth) ? "?" : bench_bytes(s.alloc_growth, b2, sizeof(b2)));
				printf("%-12s %-4s %5d %5d %3d %-4s %-20s %3d %9.2f %10.0f %7s %9.0f %8s %8s %6.0f %7s\n", p->name,
				       p->prec, p->batch, p->seq, p->micro, series_names[se], cfgs[c].name, s.n, s.step_ms,
				       cell_tps(o), ssp, s.setup_ms, spr, sgr, s.graphs, sxf);
				json_decref(o);
			}
		if (isfinite(p->floor_ms[0]))
			printf("%-12s floor per rank (heavier rank): interleaved placement %.3f ms, zbv placement %.3f ms\n",
			       p->name, p->floor_ms[0], p->floor_ms[1]);
	}
	printf("--pp %d, %s per rank; tokens per step = M x batch x seq; tok/s = median over trials of tokens per step /\n"
	       "the trial's step time (median over steps warmup+1..N); speedup against reference_eager of the same row;\n"
	       "growth: bytes through ops->alloc held after the last step minus after step 2 (largest rank and trial)\n",
	       a->pp, a->pp == 1 ? "one chunk" : "two chunks");
}

static void print_table(const step_args *a, preset_state *ps, int np)
{
	char b2[32];
	if (a->extended) {
		print_table_ext(a, ps, np);
		return;
	}
	printf("\n%-7s %-4s %-20s %3s %9s %7s %9s %9s %8s %8s %6s %7s %9s %7s\n", "preset", "ser", "config", "n",
	       "median ms", "speedup", "setup ms", "breakeven", "peak/ref", "growth", "graphs", "hoff/st", "arena",
	       "x floor");
	for (int i = 0; i < np; i++) {
		preset_state *p = &ps[i];
		for (int se = 0; se < 2; se++)
			for (int c = 0; c < NCFG; c++) {
				if (!a->use[c] || p->nruns[se][c] == 0)
					continue;
				summary s;
				json_t *o = cell_json(a, p, se, c, &s);
				if (!s.n) {
					printf("%-7s %-4s %-20s %3d  no successful run (step.json: runs[].error)\n", p->name,
					       series_names[se], cfgs[c].name, 0);
					json_decref(o);
					continue;
				}
				double sp = json_number_value(json_object_get(o, "speedup"));
				double be = json_number_value(json_object_get(o, "break_even_steps"));
				double pr = json_number_value(json_object_get(o, "peak_over_reference"));
				double xf = json_number_value(json_object_get(o, "over_floor"));
				int nul_sp = json_is_null(json_object_get(o, "speedup"));
				int nul_be = json_is_null(json_object_get(o, "break_even_steps"));
				int nul_pr = json_is_null(json_object_get(o, "peak_over_reference"));
				int nul_xf = json_is_null(json_object_get(o, "over_floor"));
				char sbe[16], sgr[16];
				if (c == 0)
					snprintf(sbe, sizeof(sbe), "-");
				else if (nul_be)
					snprintf(sbe, sizeof(sbe), "never");
				else
					snprintf(sbe, sizeof(sbe), "%.0f", be);
				snprintf(sgr, sizeof(sgr), "%s", isnan(s.alloc_growth) ? "?" : bench_bytes(s.alloc_growth, b2, sizeof(b2)));
				char ssp[16] = "-", spr[16] = "-", sxf[16] = "-", sar[32];
				if (!nul_sp)
					snprintf(ssp, sizeof(ssp), "%.2f", sp);
				if (!nul_pr)
					snprintf(spr, sizeof(spr), "%.2f", pr);
				if (!nul_xf)
					snprintf(sxf, sizeof(sxf), "%.2f", xf);
				bench_bytes(s.arena, sar, sizeof(sar));
				printf("%-7s %-4s %-20s %3d %9.2f %7s %9.0f %9s %8s %8s %6.0f %7.1f %9s %7s\n", p->name,
				       series_names[se], cfgs[c].name, s.n, s.step_ms, ssp, s.setup_ms, sbe, spr, sgr, s.graphs,
				       s.handoffs, sar, sxf);
				json_decref(o);
			}
		if (isfinite(p->floor_ms[0]))
			printf("%-7s floor per rank (heavier rank): interleaved placement %.3f ms, zbv placement %.3f ms\n",
			       p->name, p->floor_ms[0], p->floor_ms[1]);
		else
			printf("%-7s floor not measured (--floor off, or bench floor failed: logs/floor-%s.log)\n", p->name,
			       p->name);
		for (int se = 0; se < 2; se++) {
			summary s;
			summarize(p->runs[se][3], p->nruns[se][3], &s);
			if (a->use[3] && s.n && isfinite(p->floor_ms[0]))
				printf("%-7s captured direct (%s) / floor = %.2f\n", p->name, series_names[se],
				       s.step_ms / p->floor_ms[0]);
		}
	}
	printf("growth: bytes through ops->alloc held after the last step minus after step 2 (largest rank and trial);"
	       "\n        the memory probe's growth is in step.json (mem_growth_bytes)\n");
}

/* DIR/step-PRESET.{dat,gp,png}: clustered bars, main and replication, and the floor. */
static void chart(const step_args *a, preset_state *p)
{
	char path[4400], name[96];
	int have[2] = { 0, 0 }, nmin[2] = { 1 << 30, 1 << 30 }, nmax[2] = { 0, 0 };
	snprintf(path, sizeof(path), "%s/step-%s.dat", a->out, p->tag);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "# config main_ms repl_ms (median slowest-rank step time)\n");
	for (int c = 0; c < NCFG; c++) {
		if (!a->use[c])
			continue;
		fprintf(f, "\"%s\"", cfgs[c].label);
		for (int se = 0; se < 2; se++) {
			summary s;
			summarize(p->runs[se][c], p->nruns[se][c], &s);
			if (s.n) {
				fprintf(f, " %.4f", s.step_ms);
				have[se] = 1;
				nmin[se] = s.n < nmin[se] ? s.n : nmin[se];
				nmax[se] = s.n > nmax[se] ? s.n : nmax[se];
			} else {
				fprintf(f, " NaN");
			}
		}
		fprintf(f, "\n");
	}
	fclose(f);
	snprintf(name, sizeof(name), "step-%s.gp", p->tag);
	snprintf(path, sizeof(path), "%s/%s", a->out, name);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "set terminal pngcairo size 1000,600\nset output 'step-%s.png'\n", p->tag);
	if (a->extended)
		fprintf(f, "set title '%s, M=%d, batch %d, seq %d, %s, --pp %d, %s per rank, %s backend: median "
			   "slowest-rank step time' noenhanced\n", p->name, p->micro, p->batch, p->seq, p->prec, a->pp,
			a->pp == 1 ? "one chunk" : "two chunks", a->backend);
	else
		fprintf(f, "set title '%s, M=%d, --pp 2, two chunks per rank, %s backend: median slowest-rank step time' "
			   "noenhanced\n", p->name, p->micro, a->backend);
	fprintf(f, "set datafile missing 'NaN'\nset style data histograms\nset style histogram clustered gap 1\n"
		   "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset ylabel 'ms per step'\nset yrange [0:*]\n"
		   "set grid ytics\nset key below noenhanced\nset xtics noenhanced\n");
	fprintf(f, "plot ");
	int n = 0;
	for (int se = 0; se < 2; se++) {
		if (!have[se])
			continue;
		/* the trials that succeeded (a budget or a failure can leave fewer than asked) */
		char trials[48];
		if (nmin[se] == nmax[se])
			snprintf(trials, sizeof(trials), "%d trial%s", nmax[se], nmax[se] == 1 ? "" : "s");
		else
			snprintf(trials, sizeof(trials), "%d-%d trials", nmin[se], nmax[se]);
		fprintf(f, "%s'step-%s.dat' using %d%s title '%s (%s)'", n ? ", " : "", p->tag, 2 + se,
			n ? "" : ":xtic(1)", se ? "replication" : "main", trials);
		n++;
	}
	if (!n)
		fprintf(f, "'step-%s.dat' using 2:xtic(1) title 'no successful run'", p->tag);
	if (isfinite(p->floor_ms[0]))
		fprintf(f, ", %.6f with lines dt 2 lw 2 lc rgb 'black' title 'floor, interleaved placement (%.2f ms)'",
			p->floor_ms[0], p->floor_ms[0]);
	if (isfinite(p->floor_ms[1]))
		fprintf(f, ", %.6f with lines dt 3 lw 2 lc rgb 'red' title 'floor, zbv placement (%.2f ms)'", p->floor_ms[1],
			p->floor_ms[1]);
	fprintf(f, "\n");
	fclose(f);
	char err[1024], png[96];
	snprintf(png, sizeof(png), "step-%s.png", p->tag);
	int rc = bench_gnuplot(a->out, name, err, sizeof(err));
	p->chart = json_pack("{s:o,s:s,s:s}", "png", rc == 0 ? json_string(png) : json_null(), "script", name, "error",
			     rc == 0 ? "" : err);
	if (rc)
		fprintf(stderr, "qeffect bench step: no chart for %s (%s); the script %s/%s renders it where gnuplot is\n",
			p->tag, err, a->out, name);
}

/* The train flags of one run: the configuration's, then the row's and the shape overrides; NULL-terminated. */
static void run_flags(const step_args *a, const preset_state *p, int c, const char **out)
{
	int n = 0;
	for (int i = 0; cfgs[c].flags[i]; i++)
		out[n++] = cfgs[c].flags[i];
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
			out[n++] = shape_flags[k];
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
	enum { O_SHAPE = 1000, O_PP = 1100, O_PREC, O_BATCH, O_ATTN };
	static const struct option opts[] = {
		{ "backend", 1, 0, 'b' },  { "presets", 1, 0, 'p' },	 { "configs", 1, 0, 'C' },
		{ "trials", 1, 0, 't' },   { "repl", 1, 0, 'r' },	 { "steps", 1, 0, 's' },
		{ "warmup", 1, 0, 'w' },   { "data", 1, 0, 'd' },	 { "floor", 1, 0, 'f' },
		{ "budget-s", 1, 0, 'B' }, { "timeout-s", 1, 0, 'T' },	 { "out", 1, 0, 'o' },
		{ "json", 0, 0, 'j' },	   { "help", 0, 0, 'h' },	 { "pp", 1, 0, O_PP },
		{ "precision", 1, 0, O_PREC }, { "batch", 1, 0, O_BATCH }, { "attention", 1, 0, O_ATTN },
		{ "layers", 1, 0, O_SHAPE + 0 }, { "hidden", 1, 0, O_SHAPE + 1 }, { "heads", 1, 0, O_SHAPE + 2 },
		{ "ffn", 1, 0, O_SHAPE + 3 },	 { "seq", 1, 0, O_SHAPE + 4 },	  { "vocab", 1, 0, O_SHAPE + 5 },
		{ 0, 0, 0, 0 }
	};
	int c;
	long v;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int *iv = NULL;
		const char *flag = NULL;
		if (c >= O_SHAPE && c < O_SHAPE + NSHAPE) {
			if (cli_parse_long("bench step", shape_flags[c - O_SHAPE], optarg, &v))
				return 2;
			if (v < 1 || v > (1 << 20)) {
				fprintf(stderr, "qeffect bench step: %s %ld is out of range (1..%d)\n", shape_flags[c - O_SHAPE],
					v, 1 << 20);
				return 2;
			}
			a->shape[c - O_SHAPE] = optarg;
			continue;
		}
		switch (c) {
		case 'h':
			help(stdout);
			return -1;
		case 'b': a->backend = optarg; continue;
		case 'p': presets = optarg; continue;
		case 'C': configs = optarg; continue;
		case 'd': a->data = optarg; continue;
		case 'o': a->out = optarg; continue;
		case 'j': a->json = 1; continue;
		case O_PREC: precisions = optarg; continue;
		case O_ATTN:
			if (strcmp(optarg, "auto") && strcmp(optarg, "flash") && strcmp(optarg, "probs")) {
				fprintf(stderr, "qeffect bench step: --attention auto|flash|probs, not '%s'\n", optarg);
				return 2;
			}
			a->attention = optarg;
			continue;
		case 'f':
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect bench step: --floor on|off\n");
				return 2;
			}
			a->floor = strcmp(optarg, "on") == 0;
			continue;
		case 'B':
			if (cli_parse_double("bench step", "--budget-s", optarg, &a->budget_s))
				return 2;
			continue;
		case 'T':
			if (cli_parse_double("bench step", "--timeout-s", optarg, &a->timeout_s))
				return 2;
			continue;
		case 't': iv = &a->trials, flag = "--trials"; break;
		case 'r': iv = &a->repl, flag = "--repl"; break;
		case 's': iv = &a->steps, flag = "--steps"; break;
		case 'w': iv = &a->warmup, flag = "--warmup"; break;
		case O_PP: iv = &a->pp, flag = "--pp"; break;
		case O_BATCH: iv = &batch, flag = "--batch"; break;
		default:
			fprintf(stderr, "qeffect bench step: unknown flag or missing value '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
		if (cli_parse_long("bench step", flag, optarg, &v))
			return 2;
		if (v < -1000000 || v > 1000000) {
			fprintf(stderr, "qeffect bench step: %s %ld is out of range\n", flag, v);
			return 2;
		}
		*iv = (int)v;
	}
	if (optind < argc) {
		fprintf(stderr, "qeffect bench step: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
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
				if (strcmp(cs[i], cfgs[k].name) == 0)
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
							 series_names[se], cfgs[c].name, t + 1, p->tag, elapsed_s(t0), est);
						break;
					}
					snprintf(path, sizeof(path), "%s/%s-%s-%d-%s.log", logs, p->tag, series_names[se], t + 1,
						 cfgs[c].name);
					const char *flags[48];
					run_flags(&a, p, c, flags);
					bench_train_spec spec = { exe, a.backend, p->name, a.data, a.pp, p->micro, a.steps,
								  a.warmup, flags, path, a.timeout_s };
					bench_train_run *r = &p->runs[se][c][p->nruns[se][c]++];
					if (bench_train(&spec, r)) {
						failed = 1;
						fprintf(stderr, "qeffect bench step: %s %s %s trial %d failed: %s (log %s)\n",
							p->tag, cfgs[c].name, series_names[se], t + 1, r->err, path);
					} else if (a.extended) {
						fprintf(prog, "%s %-20s %s %d/%d: %8.2f ms/step, %10.0f tok/s, setup %6.0f ms, %ld "
							"graphs\n", p->tag, cfgs[c].name, series_names[se], t + 1, n, r->step_ms,
							p->tokens / (r->step_ms / 1e3), r->setup_ms, r->graphs_max);
					} else {
						fprintf(prog, "%s %-20s %s %d/%d: %8.2f ms/step, setup %6.0f ms, %ld graphs\n",
							p->name, cfgs[c].name, series_names[se], t + 1, n, r->step_ms, r->setup_ms,
							r->graphs_max);
					}
					fflush(prog);
					json_t *doc = report(&a, ps, np, 0, NULL, elapsed_s(t0));
					bench_write_json(jpath, doc);
					json_decref(doc);
				}
	}
	if (truncated)
		fprintf(stderr, "qeffect bench step: cut short: %s\n", why);
	for (int i = 0; i < np; i++)
		chart(&a, &ps[i]);
	json_t *doc = report(&a, ps, np, truncated, why, elapsed_s(t0));
	int werr = bench_write_json(jpath, doc);
	if (a.json) {
		char *txt = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
		printf("%s\n", txt ? txt : "{}");
		free(txt);
	} else {
		print_table(&a, ps, np);
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
