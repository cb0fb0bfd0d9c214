/*
 * tier_flags.h - the checkpoint tier flags of `qeffect train` and `qeffect
 * resume`: --ckpt-replicas R (copies of every rank's chunks in the stores of
 * R ranks on other hosts, ckpt/ckpt_replica.c).  Taken out of argv before
 * the shared train flag parser runs and turned into the variable the
 * checkpoint layer reads (QE_CKPT_REPLICAS), so forked and exec'd ranks see
 * it too; an external launcher gives every host the same command line.
 */
#ifndef CLI_TIER_FLAGS_H
#define CLI_TIER_FLAGS_H

#include <stdio.h>

/*
 * Remove --ckpt-replicas R (or =R) from argv (updating *argc) and set
 * QE_CKPT_REPLICAS.  Returns 0, or 2 after printing a usage error naming
 * the value.
 */
int cli_tier_flags_extract(const char *cmd, int *argc, char **argv);
/* The flags' lines for --help. */
void cli_tier_flags_help(FILE *f);

#endif
