/*
 * bench_train.c - one training run as a benchmark sees it: `qeffect train
 * --json --trace off` in a fresh set of processes, and what its ranks'
 * counter lines (cli/run.c print_counters) say.
 *
 * Step time: every rank reports the wall time of each of its steps.  Each
 * step ends with the loss all-reduce (runtime/exec/rank_step.c step_loss),
 * which no rank leaves before the slowest rank arrives, so per step the
 * largest of the ranks' times is the slowest rank's step; a run's step time is
 * the median of that over the steps after the warmup (the first step runs
 * eagerly, the second captures the graphs).  The progress line's ms/step is
 * rank 0's time of the same steps, so it is the slowest rank's up to rank 0's
 * own optimizer commit.
 *
 * Setup (initialization + capture + first step): from fork of the child to
 * the end of its first step on the latest rank (process start, backend,
 * data, parameters, NCCL or sockets, the first step, which always runs
 * eagerly), plus the capture host time (the largest rank's), which the
 * executor spends at the start of the second step.  setup_wall_ms is the
 * cruder whole child minus steps 2..N of the slowest rank: it includes the
 * teardown and leaves the capture inside step 2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"

int bench_preset_micro(const char *s, char *preset, size_t len, int *micro)
{
	const char *c = strchr(s, ':');
	if (!c || c == s || (size_t)(c - s) >= len)
		return -1;
	char *end;
	long m = strtol(c + 1, &end, 10);
	if (*end || end == c + 1 || m < 1 || m > 256)
		return -1;
	memcpy(preset, s, (size_t)(c - s));
	preset[c - s] = 0;
	*micro = (int)m;
	return 0;
}

static double num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

static int parse(const bench_train_spec *spec, const bench_child *ch, bench_train_run *out)
{
	out->ranks = bench_rank_lines(ch->out);
	size_t nr = json_array_size(out->ranks);
	if ((int)nr != spec->pp) {
		snprintf(out->err, sizeof(out->err), "%zu rank counter lines, expected %d", nr, spec->pp);
		return -1;
	}
	out->slowest = calloc((size_t)spec->steps, sizeof(double));
	if (!out->slowest) {
		snprintf(out->err, sizeof(out->err), "out of memory");
		return -1;
	}
	out->nsteps = spec->steps;
	double first_end = 0;
	out->graphs_min = -1;
	size_t i;
	json_t *r;
	json_array_foreach(out->ranks, i, r)
	{
		json_t *ms = json_object_get(r, "step_ms");
		if ((int)json_array_size(ms) != spec->steps) {
			snprintf(out->err, sizeof(out->err), "rank %zu reports %zu step times, expected %d (a binary "
				 "without per-step times in --json?)", i, json_array_size(ms), spec->steps);
			return -1;
		}
		for (int s = 0; s < spec->steps; s++) {
			double v = json_number_value(json_array_get(ms, (size_t)s));
			if (v > out->slowest[s])
				out->slowest[s] = v;
		}
		double fe = num(r, "first_step_end_unix_ms");
		if (fe > first_end)
			first_end = fe;
		long g = (long)json_integer_value(json_object_get(r, "graphs"));
		if (out->graphs_min < 0 || g < out->graphs_min)
			out->graphs_min = g;
		if (g > out->graphs_max)
			out->graphs_max = g;
		double steps = num(r, "steps");
		double replaying = g > 0 ? steps - 1 : steps;
		double hps = replaying > 0 ? num(r, "handoffs") / replaying : 0;
		if (hps > out->handoffs_per_step)
			out->handoffs_per_step = hps;
#define KEEP_MAX(field, key)                        \
	do {                                        \
		double v_ = num(r, key);            \
		if (i == 0 || v_ > out->field)      \
			out->field = v_;            \
	} while (0)
		KEEP_MAX(capture_ms, "capture_ms");
		KEEP_MAX(arena_bytes, "arena_bytes");
		KEEP_MAX(alloc_peak, "alloc_peak_bytes");
		KEEP_MAX(alloc_growth, "alloc_growth_bytes");
		KEEP_MAX(mem_peak, "mem_peak_bytes");
		KEEP_MAX(mem_growth, "mem_growth_bytes");
#undef KEEP_MAX
		const char *probe = json_string_value(json_object_get(r, "mem_probe"));
		snprintf(out->mem_probe, sizeof(out->mem_probe), "%s", probe ? probe : "none");
	}
	int w = spec->warmup < spec->steps ? spec->warmup : spec->steps - 1;
	double *tail = malloc(sizeof(double) * (size_t)spec->steps);
	if (!tail) {
		snprintf(out->err, sizeof(out->err), "out of memory");
		return -1;
	}
	int n = 0;
	for (int s = w; s < spec->steps; s++)
		tail[n++] = out->slowest[s];
	out->step_ms = bench_median(tail, n);
	free(tail);
	double later = 0;
	for (int s = 1; s < spec->steps; s++)
		later += out->slowest[s];
	out->setup_ms = first_end > 0 ? first_end - ch->start_unix_ms + out->capture_ms : NAN;
	out->setup_wall_ms = ch->wall_ms - later;
	return 0;
}

int bench_train(const bench_train_spec *spec, bench_train_run *out)
{
	memset(out, 0, sizeof(*out));
	char smicro[16], ssteps[16], spp[16];
	snprintf(smicro, sizeof(smicro), "%d", spec->micro);
	snprintf(ssteps, sizeof(ssteps), "%d", spec->steps);
	snprintf(spp, sizeof(spp), "%d", spec->pp);
	const char *argv[80];
	int n = 0;
	const char *fixed[] = { spec->exe, "train",  "--backend", spec->backend, "--preset", spec->preset, "--pp",
				spp,	   "--micro", smicro,	"--steps",     ssteps,	   "--lr",	 "3e-4",
				"--json",  "--trace", "off" };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		argv[n++] = fixed[i];
	if (spec->data) {
		argv[n++] = "--data";
		argv[n++] = spec->data;
	}
	for (int i = 0; spec->flags && spec->flags[i] && n < 78; i++)
		argv[n++] = spec->flags[i];
	argv[n] = NULL;
	bench_child ch;
	if (bench_run_child((char *const *)argv, spec->log_path, spec->timeout_s, &ch)) {
		snprintf(out->err, sizeof(out->err), "could not run the child (log %s)", spec->log_path);
		out->exit_code = -1;
		return -1;
	}
	out->exit_code = ch.exit_code;
	out->timed_out = ch.timed_out;
	out->wall_ms = ch.wall_ms;
	int rc = 0;
	if (ch.exit_code != 0) {
		/* why: the first rank's error line, else the last line of the log */
		const char *b = strstr(ch.out, "qeffect: rank "), *last;
		if (b && (b == ch.out || b[-1] == '\n')) {
			last = strchr(b, '\n');
			if (!last)
				last = b + strlen(b);
		} else {
			last = ch.out + ch.out_len;
			while (last > ch.out && last[-1] == '\n')
				last--;
			b = last;
			while (b > ch.out && b[-1] != '\n')
				b--;
		}
		snprintf(out->err, sizeof(out->err), "exit %d%s: %.*s", ch.exit_code,
			 ch.timed_out ? " (killed at the time limit)" : "", (int)(last - b > 300 ? 300 : last - b), b);
		rc = -1;
	} else if (parse(spec, &ch, out)) {
		rc = -1;
	}
	bench_child_release(&ch);
	out->ok = rc == 0;
	return rc;
}

void bench_train_release(bench_train_run *r)
{
	free(r->slowest);
	json_decref(r->ranks);
	memset(r, 0, sizeof(*r));
}

json_t *bench_train_json(const bench_train_run *r)
{
	json_t *o = json_pack("{s:b,s:i,s:b,s:o,s:o,s:o,s:o}", "ok", r->ok, "exit", r->exit_code, "timed_out",
			      r->timed_out, "wall_ms", bench_real(r->wall_ms), "setup_ms", bench_real(r->ok ? r->setup_ms : NAN),
			      "setup_wall_ms", bench_real(r->ok ? r->setup_wall_ms : NAN), "step_ms",
			      bench_real(r->ok ? r->step_ms : NAN));
	if (!r->ok) {
		json_object_set_new(o, "error", json_string(r->err));
		return o;
	}
	json_t *s = json_array();
	for (int i = 0; i < r->nsteps; i++)
		json_array_append_new(s, json_real(r->slowest[i]));
	json_object_set_new(o, "slowest_step_ms", s);
	json_object_set(o, "ranks", r->ranks);
	return o;
}
