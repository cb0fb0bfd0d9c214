/*
 * bench_step_report.c - what `qeffect bench step` makes of its runs: the
 * medians of each cell (a row's configuration in one series), step.json
 * (rewritten after every run, so a killed bench leaves what it measured),
 * the table printed last (the extended one, with precision, batch and
 * tokens/s, when any of the --pp 1 era flags was given) and a gnuplot chart
 * per row.  The runs themselves are bench_step.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/bench/bench_step.h"

static int chunks_per_rank(const step_args *a)
{
	return a->pp == 1 ? 1 : 2;
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
	double fl = p->floor_ms[bench_step_cfgs[c].zbv];
	json_t *trials = json_array();
	for (int t = 0; t < p->nruns[se][c]; t++)
		json_array_append_new(trials, bench_real(p->runs[se][c][t].ok ? p->runs[se][c][t].step_ms : NAN));
	char flags[200] = "";
	for (int i = 0; bench_step_cfgs[c].flags[i]; i++)
		snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s", i ? " " : "",
			 bench_step_cfgs[c].flags[i]);
	int have_ref = a->use[0] && ref.n > 0;
	json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:o,s:o,s:o,s:o}", "config", bench_step_cfgs[c].name, "flags", flags,
			      "runs", p->nruns[se][c], "trials", s->n, "step_ms", bench_real(s->step_ms), "step_ms_trials",
			      trials, "step_ms_min", bench_real(s->step_min), "step_ms_max", bench_real(s->step_max));
	json_object_set_new(o, "speedup", bench_real(have_ref ? ref.step_ms / s->step_ms : NAN));
	json_object_set_new(o, "setup_ms", bench_real(s->setup_ms));
	json_object_set_new(o, "setup_wall_ms", bench_real(s->setup_wall_ms));
	json_object_set_new(o, "break_even_steps", bench_real(have_ref && c != 0 ? break_even(&ref, s) : NAN));
	json_object_set_new(o, "graphs", json_integer((json_int_t)s->graphs));
	/* F, dI and dW of every microbatch on every local chunk */
	json_object_set_new(o, "expected_graphs",
			    json_integer(bench_step_cfgs[c].captured ? 3 * p->micro * chunks_per_rank(a) : 0));
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
	json_object_set_new(o, "floor_placement", json_string(bench_step_cfgs[c].zbv ? "zbv" : "interleaved"));
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

json_t *bench_step_report(const step_args *a, preset_state *ps, int np, int truncated, const char *why, double wall_s)
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
					json_object_set_new(r, "series", json_string(bench_step_series[se]));
					json_object_set_new(r, "trial", json_integer(t + 1));
					json_object_set_new(r, "config", json_string(bench_step_cfgs[c].name));
					if (a->extended) {
						json_object_set_new(r, "precision", json_string(p->prec));
						json_object_set_new(r, "batch", json_integer(p->batch));
					}
					json_array_append_new(runs, r);
				}
			}
			json_object_set_new(series, bench_step_series[se], arr);
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
				json_object_set_new(shape, bench_step_shape_flags[k] + 2, json_integer(atoi(a->shape[k])));
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
					       p->name, p->prec, p->batch, p->seq, p->micro, bench_step_series[se],
					       bench_step_cfgs[c].name, 0);
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
				       p->prec, p->batch, p->seq, p->micro, bench_step_series[se], bench_step_cfgs[c].name, s.n, s.step_ms,
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

void bench_step_print_table(const step_args *a, preset_state *ps, int np)
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
					       bench_step_series[se], bench_step_cfgs[c].name, 0);
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
				       bench_step_series[se], bench_step_cfgs[c].name, s.n, s.step_ms, ssp, s.setup_ms, sbe, spr,
				       sgr, s.graphs, s.handoffs, sar, sxf);
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
				printf("%-7s captured direct (%s) / floor = %.2f\n", p->name, bench_step_series[se],
				       s.step_ms / p->floor_ms[0]);
		}
	}
	printf("growth: bytes through ops->alloc held after the last step minus after step 2 (largest rank and trial);"
	       "\n        the memory probe's growth is in step.json (mem_growth_bytes)\n");
}

/* DIR/step-PRESET.{dat,gp,png}: clustered bars, main and replication, and the floor. */
void bench_step_chart(const step_args *a, preset_state *p)
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
		fprintf(f, "\"%s\"", bench_step_cfgs[c].label);
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
