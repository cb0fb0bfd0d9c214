/*
 * storage_options.h - a cli process's storage and tier settings (issue 36
 * item 2): the checkpoint layer's options (ckpt/ckpt_options.h: --local-dir,
 * --ckpt-memory, --allow-network-fs, --ckpt-replicas, --endpoint) and the
 * tiers cli runs itself (--ckpt-keep, --ckpt-persist-every,
 * --ckpt-persist-keep, --remote and the retention grace periods).
 *
 * cli_storage_init reads the variables users set (QE_LOCAL_DIR, ... the
 * table in runtime/core/env.c) once, as the settings' defaults, and keeps
 * the few paths cli itself looks up (QE_SHARED_DIR, QE_GPT2_ENCODER_DIR,
 * QE_GNUPLOT, PATH, TMPDIR): no other file reads a variable; flags then
 * change the settings in memory (the tables below) and cli_storage_commit hands ckpt its part, store the S3 fallbacks and
 * the runtime its knobs and test hooks (runtime/core/rt_options.h).  The
 * launcher's variables (RANK, SLURM_PROCID, QE_JOB_SECRET, ...) are handed
 * to runtime/comm/launch_vars.h by cli_storage_init itself.  No flag becomes a variable:
 * ranks forked by --nproc inherit the settings, ranks of an external
 * launcher parse the same command line.
 */
#ifndef CLI_STORAGE_OPTIONS_H
#define CLI_STORAGE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/session/ckpt_options.h"
#include "cli/flags.h"
#include "runtime/core/rt_options.h"
#include "store/remote.h"

typedef struct cli_storage {
	ckpt_options ckpt;
	int keep;                 /* --ckpt-keep (QE_CKPT_KEEP); 0: keep every local checkpoint */
	int64_t persist_every;    /* --ckpt-persist-every (QE_CKPT_PERSIST_EVERY); 0: no persistent tier */
	int persist_keep;         /* --ckpt-persist-keep (QE_CKPT_PERSIST_KEEP); 0: keep every pushed one */
	char remote[1024];        /* --remote (QE_CKPT_REMOTE): s3://BUCKET/PREFIX; "": none */
	uint64_t keep_grace_s;    /* QE_CKPT_KEEP_GRACE_S (600) */
	uint64_t persist_grace_s; /* QE_CKPT_PERSIST_GRACE_S (600) */
	store_remote_defaults s3; /* AWS_* and QE_S3_*: what an S3 handle uses where its options say nothing */
	qe_rt_options rt;         /* the runtime's knobs and test hooks (QE_P2P, QE_FAULT, ...) */
	/* cli's own paths, as the environment holds them (NULL: unset; they live as long as the process) */
	const char *shared_dir;  /* QE_SHARED_DIR: the shared data folder (cli_shared_dir) */
	const char *encoder_dir; /* QE_GPT2_ENCODER_DIR: GPT-2's encoder files (encoder_dir.h) */
	const char *gnuplot;     /* QE_GNUPLOT: the gnuplot program (gnuplot.h) */
	const char *path;        /* PATH: where gnuplot is looked for otherwise */
	const char *tmpdir;      /* TMPDIR: where plot writes its temporary files */
	unsigned given;          /* CLI_S_* of the flags on the command line (a variable alone sets none) */
} cli_storage;

/* Bits of cli_storage.given. */
enum { CLI_S_REMOTE = 1 << 0, CLI_S_ENDPOINT = 1 << 1, CLI_S_PERSIST_EVERY = 1 << 2 };

/*
 * The flags that change the settings, as tables for the flag parser
 * (flags.h); after a parse, cli_storage_commit.  Every command:
 * --local-dir DIR, --ckpt-memory DIR, --allow-network-fs (main.c takes them
 * out of argv before the command runs).  train and resume (train_flags.c):
 * --ckpt-replicas R, --ckpt-keep N, --ckpt-persist-every K2,
 * --ckpt-persist-keep N2, --remote URL, --endpoint URL (tier_flags.h checks
 * them together and prints their help).
 */
extern const cli_flag cli_storage_flags[];
extern const cli_flag cli_tier_flags[];

/*
 * The settings from the environment, handed to ckpt, store and the runtime
 * (and the launcher's variables to launch_vars.h).  0, or 2 after printing
 * an error naming the variable (a value too long for its setting, or a
 * replica count outside 0..8) or saying memory ran out.
 */
int cli_storage_init(void);
/* The process's settings, to read or change (cli_storage_commit after a change of .ckpt). */
cli_storage *cli_storage_get(void);
void cli_storage_commit(void);
/*
 * Copy a folder or URL into a setting of cap bytes: 0, or 2 after printing
 * "qeffect CMD: FLAG ... too long".
 */
int cli_storage_text(const char *cmd, const char *flag, const char *v, char *dst, size_t cap);

#endif
