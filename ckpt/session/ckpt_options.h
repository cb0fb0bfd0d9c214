/*
 * ckpt_options.h - what the checkpoint layer is told instead of reading the
 * environment (issue 36 item 2): where the stores and the memory tier are,
 * whether network file systems are allowed, how many replicas each rank's
 * chunks get, and the S3 server a restore fetches through.
 *
 * One set per process.  cli fills it once from its flags and the variables
 * users set (cli/storage_options.c, the one place that reads them) before
 * any ckpt call, and sets it again where a command learns more (a run's
 * recorded --local-dir).  Ranks forked by --nproc inherit it with the rest
 * of their parent's memory; ranks started by an external launcher parse the
 * same command line.  Before any set, every field is its default (zero,
 * empty): stores in RUN/stores, no memory tier, local file systems only, no
 * replicas, the default S3 endpoint.
 */
#ifndef CKPT_OPTIONS_H
#define CKPT_OPTIONS_H

#include <stddef.h>

typedef struct ckpt_options {
	char local_dir[4096];       /* --local-dir: the stores are LOCAL/stores; "": RUN/stores */
	char memory_dir[4096];      /* --ckpt-memory: the memory tier's folder (tmpfs, ramfs); "": none */
	int allow_network_fs;       /* --allow-network-fs: stores and catalogs on NFS, Lustre, ... allowed */
	int replicas;               /* --ckpt-replicas: copies of each rank's chunks on other hosts (0..8) */
	char remote_endpoint[1024]; /* --endpoint: the S3 server a restore fetches through; "": the default */
	/*
	 * Tuning and test hooks, as the text of the variable that sets each (""
	 * when unset), parsed and checked where they are used, whose errors name
	 * the variable (README's table says what each does).
	 */
	char staging[64];               /* QE_CKPT_STAGING */
	char load_threads[32];          /* QE_CKPT_LOAD_THREADS */
	char load_piece_bytes[32];      /* QE_CKPT_LOAD_PIECE_BYTES */
	char read_ahead_mib[32];        /* QE_CKPT_READ_AHEAD_MIB */
	char piece_bytes[32];           /* QE_CKPT_PIECE_BYTES */
	char chunk_bytes[32];           /* QE_CKPT_CHUNK_BYTES */
	char async_test_delay_ms[64];   /* QE_CKPT_ASYNC_TEST_DELAY_MS */
	char job_kill[256];             /* QE_JOB_KILL */
	char kill[256];                 /* QE_CKPT_KILL */
	char remote_pause[4096];        /* QE_REMOTE_PAUSE */
	char persist_slow_ms[64];       /* QE_CKPT_PERSIST_SLOW_MS */
	char persist_pause[4096];       /* QE_CKPT_PERSIST_PAUSE */
} ckpt_options;

/* A text option, or NULL when it is empty (unset). */
static inline const char *ckpt_opt_text(const char *s)
{
	return s[0] ? s : NULL;
}

/* Copy o into the process's options. */
void ckpt_options_set(const ckpt_options *o);
/* The process's options (the defaults before any set). */
const ckpt_options *ckpt_options_get(void);

#endif
