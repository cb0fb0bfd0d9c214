/*
 * cmd_compare.c - `qeffect compare RUN_A RUN_B`: over the steps both runs
 * traced, count fingerprint mismatches per category and stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/run.h"
#include "runtime/core/status.h"
#include "runtime/train/trace.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect compare RUN_A RUN_B [--json] [--steps FROM:TO]\n\n"
		   "Compare the per-step fingerprints of two runs: for every step both recorded (optionally\n"
		   "limited to FROM..TO), every stage and category.  Categories that legitimately depend on\n"
		   "the configuration (resource counts under split vs full backward, other schedules) are\n"
		   "compared only when both runs have the same schedule, backward mode, pp and micro; compare\n"
		   "lists what it skipped and why.  Exit status: 0 all compared fingerprints equal, 1 any\n"
		   "mismatch or nothing to compare, 2 bad usage.\n");
}

typedef struct run_traces {
	qe_train_config cfg;
	cat_trace_rows rows;
	char run_id[64];
} run_traces;

static int load(const char *dir, run_traces *t)
{
	ckpt_run *r;
	int rc = cli_run_open(dir, 0, &r, &t->cfg);
	if (rc)
		return rc;
	snprintf(t->run_id, sizeof(t->run_id), "%s", ckpt_run_id(r));
	rc = cat_trace_get(ckpt_run_catalog(r), t->run_id, &t->rows);
	ckpt_run_close(r);
	return rc;
}

/* The "mapping" rows of a run, in (step, stage) order. */
typedef struct mapping_rows {
	const cat_trace **rows;
	size_t n;
} mapping_rows;

static int collect_mappings(const cat_trace_rows *t, mapping_rows *out)
{
	out->n = 0;
	out->rows = calloc(t->n + 1, sizeof(*out->rows));
	if (!out->rows)
		return -1;
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->rows[i].category, "mapping") == 0)
			out->rows[out->n++] = &t->rows[i];
	return 0;
}

/* The mapping fingerprint of (step, stage), or 0 with *found = 0. */
static uint64_t mapping_of(const mapping_rows *m, int64_t step, int stage, int *found)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const cat_trace *r = m->rows[mid];
		if (r->step < step || (r->step == step && r->stage < stage))
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < m->n && m->rows[lo]->step == step && m->rows[lo]->stage == stage;
	return *found ? m->rows[lo]->fingerprint : 0;
}

static int cmp_row(const cat_trace *a, const cat_trace *b)
{
	if (a->step != b->step)
		return a->step < b->step ? -1 : 1;
	if (a->stage != b->stage)
		return a->stage < b->stage ? -1 : 1;
	return strcmp(a->category, b->category);
}

/* --steps FROM:TO into long[2]. */
static int steps_flag(const char *cmd, const char *flag, const char *value, void *dst)
{
	long *r = dst;
	if (sscanf(value, "%ld:%ld", &r[0], &r[1]) != 2 || r[0] < 0 || r[1] < r[0]) {
		fprintf(stderr, "qeffect %s: %s takes FROM:TO, got '%s'\n", cmd, flag, value);
		return 2;
	}
	return 0;
}

int cli_compare_main(int argc, char **argv)
{
	int json = 0;
	long range[2] = { 0, -1 }; /* --steps FROM:TO; TO -1: to the end */
	const cli_flag flags[] = {
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ "steps", 0, CLI_FLAG_FN, &range, .fn = steps_flag },
		{ 0 },
	};
	int nruns = 0;
	int rc = cli_flags_parse("compare", flags, argc, argv, &nruns);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (nruns != 2) {
		fprintf(stderr, "qeffect compare: needs two run directories (see --help)\n");
		return 2;
	}
	long lo = range[0], hi = range[1];
	const char *run_a = argv[1], *run_b = argv[2];
	run_traces A = { 0 }, B = { 0 };
	rc = load(run_a, &A);
	if (rc)
		return cli_report("compare", rc, run_a);
	if ((rc = load(run_b, &B))) {
		cat_trace_rows_free(&A.rows);
		return cli_report("compare", rc, run_b);
	}
	int same_cfg = A.cfg.schedule == B.cfg.schedule && A.cfg.backward == B.cfg.backward && A.cfg.pp == B.cfg.pp &&
		       A.cfg.micro == B.cfg.micro && A.cfg.dp == B.cfg.dp;
	int ncat;
	const qe_trace_category *cats = qe_trace_categories(&ncat);
	long mism[64] = { 0 }, compared[64] = { 0 }, skipped[64] = { 0 };
	mapping_rows MA, MB;
	if (collect_mappings(&A.rows, &MA) || collect_mappings(&B.rows, &MB)) {
		fprintf(stderr, "qeffect compare: out of memory\n");
		return 1;
	}
	long total_cmp = 0, total_mis = 0, only_a = 0, only_b = 0;
	int64_t first_step = -1, last_step = -1, first_bad_step = -1;
	char first_bad[160] = "";
	/* Rows come sorted by step, stage, category: a merge walk. */
	size_t i = 0, j = 0;
	while (i < A.rows.n || j < B.rows.n) {
		int d = i >= A.rows.n ? 1 : j >= B.rows.n ? -1 : cmp_row(&A.rows.rows[i], &B.rows.rows[j]);
		if (d < 0) {
			only_a++;
			i++;
			continue;
		}
		if (d > 0) {
			only_b++;
			j++;
			continue;
		}
		const cat_trace *ra = &A.rows.rows[i++], *rb = &B.rows.rows[j++];
		if (ra->step < lo || (hi >= 0 && ra->step > hi))
			continue;
		int k = 0;
		while (k < ncat && strcmp(cats[k].name, ra->category))
			k++;
		if (k == ncat || cats[k].config_dependent == 2)
			continue;
		if (cats[k].config_dependent) {
			/* Per step and stage: comparable when both ran under the same mapping then
			 * (a resumed run may have changed it); runs without mapping rows fall back
			 * to their configurations. */
			int fa, fb;
			uint64_t ma = mapping_of(&MA, ra->step, ra->stage, &fa), mb = mapping_of(&MB, rb->step, rb->stage, &fb);
			int same = fa && fb ? ma == mb : same_cfg;
			if (!same) {
				skipped[k]++;
				continue;
			}
		}
		if (first_step < 0 || ra->step < first_step)
			first_step = ra->step;
		if (ra->step > last_step)
			last_step = ra->step;
		compared[k]++;
		total_cmp++;
		if (ra->fingerprint != rb->fingerprint) {
			mism[k]++;
			total_mis++;
			if (first_bad_step < 0) {
				first_bad_step = ra->step;
				snprintf(first_bad, sizeof(first_bad), "step %lld stage %d %s", (long long)ra->step, ra->stage,
					 ra->category);
			}
		}
	}
	if (json) {
		json_t *o = json_object(), *cj = json_array(), *sk = json_array();
		for (int k = 0; k < ncat; k++) {
			if (cats[k].config_dependent == 2)
				continue;
			if (skipped[k])
				json_array_append_new(sk, json_pack("{s:s,s:I,s:s}", "category", cats[k].name, "rows",
								    (json_int_t)skipped[k], "why",
								    "depends on the configuration, and the runs differ there"));
			if (cats[k].config_dependent && !compared[k] && skipped[k])
				continue;
			json_array_append_new(cj, json_pack("{s:s,s:I,s:I}", "category", cats[k].name, "compared",
							    (json_int_t)compared[k], "mismatches", (json_int_t)mism[k]));
		}
		json_object_set_new(o, "run_a", json_string(run_a));
		json_object_set_new(o, "run_b", json_string(run_b));
		json_object_set_new(o, "first_step", json_integer(first_step));
		json_object_set_new(o, "last_step", json_integer(last_step));
		json_object_set_new(o, "compared", json_integer(total_cmp));
		json_object_set_new(o, "mismatches", json_integer(total_mis));
		json_object_set_new(o, "first_mismatch", json_string(first_bad));
		json_object_set_new(o, "categories", cj);
		json_object_set_new(o, "skipped", sk);
		char *s = json_dumps(o, JSON_INDENT(2));
		puts(s);
		free(s);
		json_decref(o);
	} else {
		printf("compare %s (%s/%s) vs %s (%s/%s)\n", run_a, qe_sched_kind_name(A.cfg.schedule),
		       qe_sched_backward_name(A.cfg.backward), run_b, qe_sched_kind_name(B.cfg.schedule),
		       qe_sched_backward_name(B.cfg.backward));
		if (total_cmp)
			printf("steps compared: %lld..%lld, %ld fingerprints\n", (long long)first_step, (long long)last_step,
			       total_cmp);
		printf("%-16s %10s %10s\n", "category", "compared", "mismatch");
		for (int k = 0; k < ncat; k++) {
			if (cats[k].config_dependent == 2)
				continue;
			if (skipped[k])
				printf("%-16s %10ld %10ld   skipped %ld rows: depends on the configuration, and the runs "
				       "differ there\n",
				       cats[k].name, compared[k], mism[k], skipped[k]);
			else
				printf("%-16s %10ld %10ld\n", cats[k].name, compared[k], mism[k]);
		}
		if (only_a || only_b)
			printf("rows only in A: %ld, only in B: %ld (steps or stages the other run did not record)\n", only_a,
			       only_b);
		if (total_mis)
			printf("MISMATCH: %ld fingerprints differ; first at %s\n", total_mis, first_bad);
		else if (total_cmp)
			printf("identical: all %ld fingerprints equal\n", total_cmp);
		else
			printf("nothing compared: the runs share no traced steps\n");
	}
	free(MA.rows);
	free(MB.rows);
	cat_trace_rows_free(&A.rows);
	cat_trace_rows_free(&B.rows);
	return total_mis || !total_cmp ? 1 : 0;
}
