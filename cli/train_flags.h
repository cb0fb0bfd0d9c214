/*
 * train_flags.h - the flags of `qeffect train` (and the subset `resume`
 * accepts), parsed in one table (flags.h) into a qe_train_config with a
 * record of which were given, so resume can refuse a model or recipe flag
 * that conflicts with the run.  The same parse takes --ckpt-async
 * (async_flag.h), the tier flags into the storage settings (tier_flags.h),
 * train's --init-from and resume's --remote-run-id.
 */
#ifndef CLI_TRAIN_FLAGS_H
#define CLI_TRAIN_FLAGS_H

#include "runtime/job/config.h"

enum {
	CLI_F_PRESET = 1 << 0, CLI_F_PP = 1 << 1, CLI_F_DP = 1 << 2, CLI_F_MICRO = 1 << 3, CLI_F_CHUNKS = 1 << 4,
	CLI_F_SCHEDULE = 1 << 5, CLI_F_BACKWARD = 1 << 6, CLI_F_EXEC = 1 << 7, CLI_F_GRAD = 1 << 8,
	CLI_F_STEPS = 1 << 9, CLI_F_SEED = 1 << 10, CLI_F_LR = 1 << 11, CLI_F_HISTORY = 1 << 12,
	CLI_F_MARGIN = 1 << 13, CLI_F_ALGO = 1 << 14, CLI_F_FORMAT = 1 << 15, CLI_F_FP8 = 1 << 16,
	CLI_F_HEAD = 1 << 17, CLI_F_DATA = 1 << 18, CLI_F_RUNDIR = 1 << 19, CLI_F_EVAL = 1 << 20,
	CLI_F_CKPT = 1 << 21, CLI_F_BACKEND = 1 << 22, CLI_F_NPROC = 1 << 23, CLI_F_LOG = 1 << 24,
	CLI_F_EVAL_MICRO = 1 << 25, CLI_F_FROM = 1 << 26, CLI_F_ARENA = 1 << 27,
	CLI_F_SHAPE = 1 << 28, /* any of --layers --hidden --heads --ffn --seq --vocab --batch --attention --tie-embeddings */
};

/* The optimizer flags beside --lr (cli_train_args.optim_given): a resume refuses any that differs. */
enum {
	CLI_O_SCHEDULE = 1 << 0, CLI_O_WARMUP = 1 << 1, CLI_O_LR_MIN = 1 << 2, CLI_O_DECAY = 1 << 3,
	CLI_O_WD = 1 << 4, CLI_O_BETA1 = 1 << 5, CLI_O_BETA2 = 1 << 6, CLI_O_EPS = 1 << 7, CLI_O_CLIP = 1 << 8,
};

/* The shape flags in the order of cli_train_args.shape. */
extern const char *const cli_shape_flags[7];
int *cli_shape_field(qe_model_config *m, int i);

typedef struct cli_train_args {
	qe_train_config cfg;
	unsigned given;   /* CLI_F_* of the flags on the command line */
	unsigned optim_given; /* CLI_O_* */
	int nproc;        /* 0: pp * dp */
	int quiet;
	int log_json; /* --log-format json */
	int ckpt_on_signal; /* --ckpt-on-signal on (default) | off */
	int json;
	int no_trace;     /* --trace off: no per-step fingerprints (big models on a GPU) */
	long from_step;   /* resume --from; -1: latest committed */
	long sample_every;  /* --sample-every K: a sample after every K-th step; 0: never (not recorded) */
	long sample_tokens; /* --sample-tokens N (default 32) */
	int shape[7];     /* --layers --hidden --heads --ffn --seq --vocab --batch as given; 0: not given */
	int attn;         /* --attention as given: qe_attn_mode + 1; 0: not given */
	int tie;          /* --tie-embeddings as given: 1 off, 2 on; 0: not given (the preset's) */
	char prec_flag[16], prec_value[16]; /* the precision flag as given: "--fp8" "off", "--precision" "bf16" */
	int async;                 /* --ckpt-async: a ckpt_async_mode */
	const char *init_from;     /* train --init-from PATH (points into argv); NULL: random weights */
	const char *remote_run_id; /* resume --remote-run-id ID (points into argv); NULL when absent */
} cli_train_args;

/* Print the flag reference (shared by train and resume). */
void cli_train_flags_help(FILE *f, int for_resume);
/*
 * Parse argv (argv[0] is the command name), the tier flags into the storage
 * settings (committed).  Returns 0, or 2 after printing an error naming the
 * flag (bad usage), or -1 when --help was asked for.
 */
int cli_train_flags_parse(const char *cmd, int argc, char **argv, cli_train_args *out, int for_resume);
/*
 * Fill derived fields: chunks from the schedule and pp when --chunks was not
 * given.  stages > 0 (a resume) keeps that many virtual stages (stages / pp
 * chunks per rank); else one layer per chunk, or the largest divisor of
 * layers/pp up to 8 when that is more than 8.
 */
void cli_train_config_finish(qe_train_config *cfg, unsigned given, int stages);

#endif
