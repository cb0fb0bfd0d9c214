/*
 * tier_flags.h - the checkpoint tier flags of `qeffect train` and `qeffect
 * resume`: --ckpt-replicas R (copies of every rank's chunks in the stores of
 * R ranks on other hosts, ckpt/tiers/ckpt_replica.c), --ckpt-keep N,
 * --ckpt-persist-every K2, --ckpt-persist-keep N2, --remote URL and
 * --endpoint URL.  Parsed with the other train flags (train_flags.c) from
 * the table cli_tier_flags (storage_options.h) into the process's storage
 * settings, which forked ranks inherit; an external launcher gives every
 * host the same command line.  Here: their help and the checks across them.
 */
#ifndef CLI_TIER_FLAGS_H
#define CLI_TIER_FLAGS_H

#include <stdint.h>
#include <stdio.h>

/* The flags' lines for --help. */
void cli_tier_flags_help(FILE *f);
/* train's --remote and --endpoint lines (resume has its own, resume_remote.h). */
void cli_tier_remote_help(FILE *f);

/*
 * The tier settings as train and resume see them; --ckpt-memory DIR (the
 * memory tier's folder, ckpt/tiers/ckpt_memtier.c) is a storage flag every
 * command takes (cli/main.c); it is checked here for train and resume.
 */
typedef struct cli_tiers {
	int keep;               /* 0: keep every local checkpoint */
	int64_t persist_every;  /* 0: no persistent tier */
	int persist_keep;       /* 0: keep every pushed checkpoint */
	const char *remote;     /* from the environment; NULL when unset */
	const char *endpoint;
	const char *memory;     /* --ckpt-memory: the memory tier's folder; NULL when unset */
	uint64_t keep_grace_s;    /* QE_CKPT_KEEP_GRACE_S (600) */
	uint64_t persist_grace_s; /* QE_CKPT_PERSIST_GRACE_S (600) */
} cli_tiers;
void cli_tiers_get(cli_tiers *t);
/*
 * After the configuration is known: --ckpt-persist-every must be a multiple
 * of --ckpt-every and come with --remote; --ckpt-memory must name a folder
 * in memory (tmpfs, ramfs) here, and for train come with --ckpt-replicas.
 * Returns 0 or 2 after printing a usage error naming the flags.
 */
int cli_tier_flags_check(const char *cmd, int64_t ckpt_every);

#endif
