/*
 * tier_flags.h - the checkpoint tier flags of `qeffect train` and `qeffect
 * resume`: --ckpt-replicas R (copies of every rank's chunks in the stores of
 * R ranks on other hosts, ckpt/tiers/ckpt_replica.c).  Taken out of argv before
 * the shared train flag parser runs and turned into the variable the
 * checkpoint layer reads (QE_CKPT_REPLICAS), so forked and exec'd ranks see
 * it too; an external launcher gives every host the same command line.
 */
#ifndef CLI_TIER_FLAGS_H
#define CLI_TIER_FLAGS_H

#include <stdint.h>
#include <stdio.h>

/*
 * Remove --ckpt-replicas R (or =R) from argv (updating *argc) and set
 * QE_CKPT_REPLICAS.  Returns 0, or 2 after printing a usage error naming
 * the value.
 */
int cli_tier_flags_extract(const char *cmd, int *argc, char **argv);
/* The flags' lines for --help. */
void cli_tier_flags_help(FILE *f);
/* train's --remote and --endpoint lines (resume has its own, resume_remote.h). */
void cli_tier_remote_help(FILE *f);

/*
 * The other tier flags go the same way, into variables every rank reads:
 * --ckpt-keep N (QE_CKPT_KEEP), --ckpt-persist-every K2
 * (QE_CKPT_PERSIST_EVERY), --ckpt-persist-keep N2 (QE_CKPT_PERSIST_KEEP), and
 * for train --remote URL (QE_CKPT_REMOTE) and --endpoint URL
 * (QE_CKPT_REMOTE_ENDPOINT); resume takes those two in resume_remote.c,
 * which sets the same variables.  --ckpt-memory DIR (QE_CKPT_MEMORY_DIR,
 * the memory tier's folder, ckpt/tiers/ckpt_memtier.c) is a storage flag every
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
