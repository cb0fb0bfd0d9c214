/*
 * bench_step.h - what the two halves of `qeffect bench step` share: the
 * command (bench_step.c: flags, the floor, the runs trial by trial) and its
 * report (bench_step_report.c: step.json, the table, the charts).  The rows,
 * the configurations and the parsed flags are defined here once; the
 * configuration table itself lives in bench_step.c.  Internal to cli/bench/.
 */
#ifndef CLI_BENCH_STEP_H
#define CLI_BENCH_STEP_H

#include <jansson.h>

#include "cli/bench/bench.h"

#define NCFG 5
#define MAX_TRIALS 16
#define NSHAPE 6 /* --layers --hidden --heads --ffn --seq --vocab, passed through to train */

typedef struct cfg_def {
	const char *name;
	const char *label; /* for the chart */
	const char *flags[10];
	int captured, zbv;
} cfg_def;

/* The five configurations (bench_step.c), the two series' names, and the shape flags in step_args.shape order. */
extern const cfg_def bench_step_cfgs[NCFG];
extern const char *const bench_step_series[2];
extern const char *const bench_step_shape_flags[NSHAPE];

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
	json_t *chart;            /* set by bench_step_chart; the row's reference */
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

/*
 * step.json's document for the np rows of ps as measured so far; truncated
 * and why say whether (and why) --budget-s cut the runs short.  A new
 * reference, the caller's to json_decref.
 */
json_t *bench_step_report(const step_args *a, preset_state *ps, int np, int truncated, const char *why,
			  double wall_s);
/* The table on stdout: the extended one (precision, batch, tokens/s) when a->extended. */
void bench_step_print_table(const step_args *a, preset_state *ps, int np);
/*
 * a->out/step-TAG.{dat,gp,png} of one row: clustered bars, main and
 * replication, and the floor; p->chart says what was written (a missing
 * gnuplot is reported on stderr, not an error).
 */
void bench_step_chart(const step_args *a, preset_state *p);

#endif
