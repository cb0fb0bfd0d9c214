/*
 * bench_scale.c - `qeffect bench scale`: captured ZB-V with direct
 * placement as the number of microbatches grows.  What grows with M (graphs,
 * arena capacity, peak allocation, peak live tapes, delayed dW, capture
 * time) beside what it buys (tokens per second).  One fresh set of processes
 * per run (bench_train.c), --pp 2 by default (--pp 1 for the one-GPU
 * arena comparison), two chunks per rank; --arena picks the gradient arena.
 */
#include <limits.h>
#include <math.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"

#define MAX_M 16
#define MAX_TRIALS 8

#define ZBV_FLAGS "--schedule", "zbv", "--backward", "split", "--exec", "graph", "--grad", "direct"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect bench scale [--backend cpu|cuda] [--preset h4096] [--micro 2,4,8,16] [--steps 12]\n"
		"                           [--pp 2] [--arena accumulate|per-mb] [--warmup 3] [--trials 1]\n"
		"                           [--out DIR] [--json]\n\n"
		"Captured ZB-V with direct placement (--schedule zbv --exec graph --grad direct), --pp P, two\n"
		"chunks per rank, for each M: the slowest rank's step time (median over steps warmup+1..N of the\n"
		"per-step maximum over ranks; median over trials), tokens/s (M x sequence length per step),\n"
		"graphs, arena capacity, peak allocation (bytes through ops->alloc; and the memory probe: cuda\n"
		"device used bytes, or RSS on cpu), peak live tapes and delayed dW per rank, capture host time.\n"
		"Writes DIR/scale.json (rewritten after every run) and DIR/logs/.\n\n"
		"flags:\n"
		"  --backend cpu|cuda   (default cpu)\n"
		"  --preset NAME        (default h4096)\n"
		"  --micro LIST         microbatch counts (default 2,4,8,16)\n"
		"  --pp P               pipeline ranks, 1..8 (default 2)\n"
		"  --arena KIND         gradient arena: accumulate (one view per parameter) or per-mb (one per\n"
		"                       parameter and microbatch); default: train's\n"
		"  --steps N            steps per run (default 12)\n"
		"  --warmup N           leading steps left out of the step time (default 3, at least 2)\n"
		"  --trials N           runs per M (default 1)\n"
		"  --data FILE          training data (default: train's default)\n"
		"  --budget-s S         start no run that would end past S seconds (default 0: no budget)\n"
		"  --timeout-s S        time limit of one run (default 600)\n"
		"  --out DIR            report folder (default bench-out)\n"
		"  --json               print the report as JSON instead of the table\n"
		"Exit status: 0 when every run that started succeeded, 1 otherwise, 2 bad usage.\n");
}

typedef struct row {
	int M;
	bench_train_run runs[MAX_TRIALS];
	int n;
} row;

static json_t *per_rank(const bench_train_run *r, const char *key)
{
	json_t *a = json_array();
	size_t i;
	json_t *l;
	json_array_foreach(r->ranks, i, l)
		json_array_append(a, json_object_get(l, key));
	return a;
}

static json_t *row_json(const row *w, int seq)
{
	double step[MAX_TRIALS];
	int n = 0;
	const bench_train_run *last = NULL;
	json_t *trials = json_array();
	for (int t = 0; t < w->n; t++) {
		json_array_append_new(trials, bench_real(w->runs[t].ok ? w->runs[t].step_ms : NAN));
		if (w->runs[t].ok) {
			step[n++] = w->runs[t].step_ms;
			last = &w->runs[t];
		}
	}
	double ms = bench_median(step, n);
	json_t *o = json_pack("{s:i,s:i,s:i,s:o,s:o,s:o}", "micro", w->M, "runs", w->n, "trials", n, "step_ms",
			      bench_real(ms), "step_ms_trials", trials, "tokens_per_s",
			      bench_real(n ? w->M * (double)seq / (ms / 1e3) : NAN));
	if (!last)
		return o;
	json_object_set_new(o, "graphs", json_integer(last->graphs_max));
	json_object_set_new(o, "expected_graphs", json_integer(3 * w->M * 2));
	json_object_set_new(o, "arena_bytes", json_integer((json_int_t)last->arena_bytes));
	json_object_set_new(o, "arena_bytes_per_rank", per_rank(last, "arena_bytes"));
	json_object_set_new(o, "alloc_peak_bytes", json_integer((json_int_t)last->alloc_peak));
	json_object_set_new(o, "alloc_growth_bytes", bench_real(last->alloc_growth));
	json_object_set_new(o, "mem_probe", json_string(last->mem_probe));
	json_object_set_new(o, "mem_peak_bytes", json_integer((json_int_t)last->mem_peak));
	json_object_set_new(o, "peak_live_tapes_per_rank", per_rank(last, "peak_live_tapes"));
	json_object_set_new(o, "delayed_dw_per_rank", per_rank(last, "delayed_dw"));
	json_object_set_new(o, "capture_ms", bench_real(last->capture_ms));
	json_object_set_new(o, "capture_ms_per_rank", per_rank(last, "capture_ms"));
	json_object_set_new(o, "setup_ms", bench_real(last->setup_ms));
	return o;
}

static json_t *report(const char *backend, const char *preset, int pp, const char *arena, int seq, int steps,
		      int warmup, row *rows, int nr, int truncated, const char *why)
{
	json_t *arr = json_array(), *runs = json_array();
	for (int i = 0; i < nr; i++) {
		if (!rows[i].n)
			continue;
		json_array_append_new(arr, row_json(&rows[i], seq));
		for (int t = 0; t < rows[i].n; t++) {
			json_t *r = bench_train_json(&rows[i].runs[t]);
			json_object_set_new(r, "micro", json_integer(rows[i].M));
			json_object_set_new(r, "trial", json_integer(t + 1));
			json_array_append_new(runs, r);
		}
	}
	char config[160];
	snprintf(config, sizeof(config), "zbv --exec graph --grad direct, --pp %d, two chunks per rank, arena %s", pp,
		 arena ? arena : "train's default");
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:s,s:o,s:o}", "bench", "scale", "backend", backend,
			 "preset", preset, "config", config, "arena", arena ? arena : "default", "seq", seq, "steps", steps,
			 "warmup", warmup, "pp", pp, "truncated", truncated, "truncated_why", why, "rows", arr, "runs",
			 runs);
}

int bench_scale_main(int argc, char **argv)
{
	const char *backend = "cpu", *preset = "h4096", *micro = "2,4,8,16", *data = NULL, *out = "bench-out";
	const char *arena = NULL;
	long steps = 12, warmup = 3, trials = 1, pp = 2;
	double budget_s = 0, timeout_s = 600;
	int json = 0;
	int arena_i = -1; /* index into arenas */
	static const char *const arenas[] = { "accumulate", "per-mb", NULL };
	const cli_flag table[] = {
		{ "backend", 0, CLI_FLAG_STRING, .dst = &backend },
		{ "preset", 0, CLI_FLAG_STRING, .dst = &preset },
		{ "micro", 0, CLI_FLAG_STRING, .dst = &micro },
		{ "steps", 0, CLI_FLAG_LONG, &steps, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "warmup", 0, CLI_FLAG_LONG, &warmup, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "trials", 0, CLI_FLAG_LONG, &trials, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "data", 0, CLI_FLAG_STRING, .dst = &data },
		{ "budget-s", 0, CLI_FLAG_DOUBLE, &budget_s, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "timeout-s", 0, CLI_FLAG_DOUBLE, &timeout_s, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "out", 0, CLI_FLAG_STRING, .dst = &out },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ "pp", 0, CLI_FLAG_LONG, &pp, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "arena", 0, CLI_FLAG_CHOICE, &arena_i, .words = arenas },
		{ 0 },
	};
	int rc = cli_flags_parse("bench scale", table, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (arena_i >= 0)
		arena = arenas[arena_i];
	if (warmup < 2 || steps <= warmup || steps > 100000 || trials < 1 || trials > MAX_TRIALS || pp < 1 || pp > 8) {
		fprintf(stderr, "qeffect bench scale: need --warmup >= 2, --steps > --warmup, --trials 1..%d, --pp 1..8\n",
			MAX_TRIALS);
		return 2;
	}
	const char *flags[] = { ZBV_FLAGS, arena ? "--arena" : NULL, arena, NULL };
	qe_model_config mc;
	if (qe_model_preset(preset, &mc)) {
		fprintf(stderr, "qeffect bench scale: %s\n", qe_last_error());
		return 2;
	}
	static row rows[MAX_M];
	memset(rows, 0, sizeof(rows));
	char items[MAX_M][32];
	int nr = bench_split_list(micro, items, MAX_M);
	for (int i = 0; i < nr; i++) {
		char *end;
		long m = strtol(items[i], &end, 10);
		if (*end || m < 1 || m > 256)
			nr = -1;
		else
			rows[i].M = (int)m;
	}
	if (nr < 0) {
		fprintf(stderr, "qeffect bench scale: --micro needs a list of microbatch counts like 2,4,8,16 (at most %d)\n",
			MAX_M);
		return 2;
	}
	char exe[4096], logs[4200], path[4400], jpath[4400], why[300] = "";
	if (bench_self_exe(exe, sizeof(exe))) {
		fprintf(stderr, "qeffect bench scale: cannot find this executable (/proc/self/exe)\n");
		return 1;
	}
	snprintf(logs, sizeof(logs), "%s/logs", out);
	snprintf(jpath, sizeof(jpath), "%s/scale.json", out);
	if (bench_mkdirs(logs))
		return 1;
	FILE *prog = json ? stderr : stdout;
	double t0 = bench_now_ms();
	int failed = 0, truncated = 0;
	for (int t = 0; t < trials && !truncated; t++)
		for (int i = 0; i < nr && !truncated; i++) {
			/* a larger M takes longer: scale the longest run so far by the ratio of microbatches */
			double est = 0;
			for (int j = 0; j < nr; j++)
				for (int k = 0; k < rows[j].n; k++)
					if (rows[j].runs[k].wall_ms / 1e3 * fmax(1.0, (double)rows[i].M / rows[j].M) > est)
						est = rows[j].runs[k].wall_ms / 1e3 * fmax(1.0, (double)rows[i].M / rows[j].M);
			double spent = (bench_now_ms() - t0) / 1e3;
			if (budget_s > 0 && spent + est > budget_s) {
				truncated = 1;
				snprintf(why, sizeof(why), "--budget-s %.0f: stopped before M=%d trial %ld (%.0f s spent, that "
					 "run takes about %.0f s)", budget_s, rows[i].M, (long)t + 1, spent, est);
				break;
			}
			snprintf(path, sizeof(path), "%s/scale-%s-M%d-%d.log", logs, preset, rows[i].M, t + 1);
			bench_train_spec spec = { exe, backend, preset, data, (int)pp, rows[i].M, (int)steps, (int)warmup,
						  flags, path, timeout_s };
			bench_train_run *r = &rows[i].runs[rows[i].n++];
			if (bench_train(&spec, r)) {
				failed = 1;
				fprintf(stderr, "qeffect bench scale: M=%d trial %d failed: %s (log %s)\n", rows[i].M, t + 1,
					r->err, path);
			} else {
				fprintf(prog, "%s zbv captured direct M=%d %d/%ld: %8.2f ms/step, %ld graphs\n", preset, rows[i].M,
					t + 1, trials, r->step_ms, r->graphs_max);
			}
			fflush(prog);
			json_t *doc = report(backend, preset, (int)pp, arena, mc.seq, (int)steps, (int)warmup, rows, nr, 0, "");
			bench_write_json(jpath, doc);
			json_decref(doc);
		}
	if (truncated)
		fprintf(stderr, "qeffect bench scale: cut short: %s\n", why);
	json_t *doc = report(backend, preset, (int)pp, arena, mc.seq, (int)steps, (int)warmup, rows, nr, truncated, why);
	int werr = bench_write_json(jpath, doc);
	if (json) {
		char *txt = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
		printf("%s\n", txt ? txt : "{}");
		free(txt);
	} else {
		char b1[32], b2[32], b3[32];
		printf("\n%s, zbv captured direct, --pp %ld, two chunks per rank, arena %s, %s backend\n", preset, pp,
		       arena ? arena : "train's default", backend);
		printf("%4s %3s %9s %11s %6s %10s %10s %10s %11s %11s %10s\n", "M", "n", "median ms", "tokens/s", "graphs",
		       "arena", "peak alloc", "mem peak", "peak tapes", "delayed dW", "capture ms");
		size_t i;
		json_t *o;
		json_array_foreach(json_object_get(doc, "rows"), i, o)
		{
			char tapes[64] = "", dw[64] = "";
			size_t k;
			json_t *v;
			json_array_foreach(json_object_get(o, "peak_live_tapes_per_rank"), k, v)
				snprintf(tapes + strlen(tapes), sizeof(tapes) - strlen(tapes), "%s%lld", k ? "/" : "",
					 (long long)json_integer_value(v));
			json_array_foreach(json_object_get(o, "delayed_dw_per_rank"), k, v)
				snprintf(dw + strlen(dw), sizeof(dw) - strlen(dw), "%s%lld", k ? "/" : "",
					 (long long)json_integer_value(v));
			printf("%4lld %3lld %9.2f %11.0f %6lld %10s %10s %10s %11s %11s %10.1f\n",
			       (long long)json_integer_value(json_object_get(o, "micro")),
			       (long long)json_integer_value(json_object_get(o, "trials")),
			       json_number_value(json_object_get(o, "step_ms")),
			       json_number_value(json_object_get(o, "tokens_per_s")),
			       (long long)json_integer_value(json_object_get(o, "graphs")),
			       bench_bytes(json_number_value(json_object_get(o, "arena_bytes")), b1, sizeof(b1)),
			       bench_bytes(json_number_value(json_object_get(o, "alloc_peak_bytes")), b2, sizeof(b2)),
			       bench_bytes(json_number_value(json_object_get(o, "mem_peak_bytes")), b3, sizeof(b3)), tapes, dw,
			       json_number_value(json_object_get(o, "capture_ms")));
		}
		printf("peak tapes and delayed dW per rank (rank0/rank1/...); arena and peak alloc: largest rank\n");
		printf("report: %s%s\n", jpath, truncated ? " (cut short by --budget-s)" : "");
	}
	json_decref(doc);
	for (int i = 0; i < (nr > 0 ? nr : 0); i++)
		for (int t = 0; t < rows[i].n; t++)
			bench_train_release(&rows[i].runs[t]);
	return failed || werr ? 1 : 0;
}
