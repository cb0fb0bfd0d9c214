/*
 * bench.h - the pieces `qeffect bench` is made of (cli/cmd_bench.c and
 * cli/bench/bench_*.c): child processes under a time limit, JSON lines, medians,
 * flag lists, reports written atomically, gnuplot charts, and the per-rank
 * floor model.  Internal to cli/.
 *
 * Benchmarks measure in fresh processes: the parent never opens a backend
 * (so it holds no GPU context while children run); every measurement is a
 * child (`qeffect train ...` or a hidden `qeffect bench ... --child`),
 * started from /proc/self/exe.
 */
#ifndef CLI_BENCH_H
#define CLI_BENCH_H

#include <stddef.h>

#include <jansson.h>

/* A finished child process. */
typedef struct bench_child {
	int exit_code;        /* exit status; 128 + signal when killed; -1 when it could not start */
	int timed_out;        /* killed (with its process group) at the time limit */
	double start_unix_ms; /* CLOCK_REALTIME just before fork */
	double wall_ms;       /* fork to reaped, monotonic */
	char *out;            /* its stdout and stderr, NUL-terminated; freed by bench_child_release */
	size_t out_len;
} bench_child;

/* The absolute path of this executable (/proc/self/exe) into buf; 0 or -1. */
int bench_self_exe(char *buf, size_t len);
/*
 * Run argv (argv[0] an absolute path, NULL-terminated) in its own process
 * group with stdout and stderr going to log_path (created or truncated); wait
 * at most timeout_s seconds (<= 0: no limit), then kill the group.  The log
 * is read back into out->out.  Returns 0 when the child ran (whatever its
 * exit code), -1 when it could not start or its log cannot be read (a
 * message on stderr).
 */
int bench_run_child(char *const argv[], const char *log_path, double timeout_s, bench_child *out);
void bench_child_release(bench_child *c);

/* Every line of text that starts with '{' and parses as a JSON object; a new array. */
json_t *bench_json_lines(const char *text);
/* The lines of bench_json_lines that have integer member "rank", ordered by it. */
json_t *bench_rank_lines(const char *text);

double bench_now_ms(void);  /* monotonic */
double bench_unix_ms(void); /* CLOCK_REALTIME */
/* Median of v[0..n-1] (sorts v); NAN when n == 0. */
double bench_median(double *v, int n);
/* mkdir -p; 0 or -1 with a message on stderr. */
int bench_mkdirs(const char *path);
/* Write doc to path (indented) via a temporary file and rename; 0 or -1 with a message. */
int bench_write_json(const char *path, json_t *doc);
/* JSON number, or null when v is not finite. */
json_t *bench_real(double v);
/* "a,b,c" -> up to max items copied into items[i] (each < itemlen); count, or -1 when too many/empty. */
int bench_split_list(const char *s, char items[][32], int max);
/* Format bytes as "12.3 MiB" into buf. */
const char *bench_bytes(double bytes, char *buf, size_t len);

/*
 * Run gnuplot on script_name inside dir (so the script names its data files
 * relative to dir).  Returns 0 when it exited 0, 1 when it failed (its stderr
 * in err), -1 when no gnuplot is in PATH (or $QE_GNUPLOT).
 */
int bench_gnuplot(const char *dir, const char *script_name, char *err, size_t errlen);

/* The per-rank floor model of a preset (bench_floor.c). */
typedef struct bench_floor_rank {
	int stages[8], nstages;
	double gemm_flops;   /* per step: fwd + dgrad + wgrad, 2*T*in*out each, every linear, every microbatch */
	double bytes;        /* per step: grad_bytes + params/m/v read + written */
	double grad_bytes;   /* per step: gradient traffic (accumulating matrix arena + non-matrix sum) */
	double arena_bytes;  /* the accumulating arena's capacity: one f32 view per matrix (no M) */
	double params;       /* parameters (floats) on the rank */
	double grad_floats;  /* per microbatch: matrix + non-matrix gradient floats */
	double matrix_floats; /* matrix gradient floats (one arena view each) */
} bench_floor_rank;

/*
 * The model of one placement ("interleaved" or "zbv"), P ranks with two
 * chunks, M microbatches: per-rank FLOPs and bytes.  Returns 0 or a QE_E* code.
 */
int bench_floor_model(const char *preset, int P, int M, int zbv, bench_floor_rank *ranks);

/* One `qeffect train --json` child (bench_train.c). */
typedef struct bench_train_spec {
	const char *exe;      /* this binary */
	const char *backend, *preset, *data; /* data NULL: train's default */
	int pp, micro, steps, warmup;        /* warmup: leading steps left out of the step time */
	const char *const *flags;            /* NULL-terminated: schedule, backward, exec, grad, other train flags (at most 59) */
	const char *log_path;
	double timeout_s;
} bench_train_spec;

typedef struct bench_train_run {
	int ok;             /* ran, exit 0, one counter line per rank with a time for every step */
	char err[400];      /* why not */
	int exit_code, timed_out;
	double wall_ms;     /* the whole child: fork to exit */
	double setup_ms;    /* fork to the end of the first step (latest rank) + capture host time */
	double setup_wall_ms; /* wall_ms minus steps 2..N (slowest rank): includes teardown, not capture */
	double step_ms;     /* median over steps warmup+1..N of the slowest rank's step time */
	double *slowest;    /* [nsteps]: per step, the largest of the ranks' times */
	int nsteps;
	json_t *ranks;      /* the ranks' counter lines, by rank */
	/* over ranks */
	long graphs_min, graphs_max;
	double handoffs_per_step; /* handoffs / replaying steps (steps - 1 in graph mode), largest rank */
	double capture_ms, arena_bytes, alloc_peak, alloc_growth, mem_peak, mem_growth; /* largest rank */
	char mem_probe[16];
} bench_train_run;

/* Run and parse one training child.  Returns 0 when out->ok, else -1 (out->err says why). */
int bench_train(const bench_train_spec *spec, bench_train_run *out);
void bench_train_release(bench_train_run *r);
/* The run as a JSON record (raw per-step times and the ranks' lines included). */
json_t *bench_train_json(const bench_train_run *r);
/* "h2048:4" -> preset and M; 0 or -1. */
int bench_preset_micro(const char *s, char *preset, size_t len, int *micro);

/* Subcommands (argv[0] is the subcommand name). */
int bench_handoff_main(int argc, char **argv);
int bench_step_main(int argc, char **argv);
int bench_scale_main(int argc, char **argv);
int bench_floor_main(int argc, char **argv);
int bench_attention_main(int argc, char **argv);

#endif
