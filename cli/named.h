/*
 * named.h - a checkpoint's tensors by their GPT-2 names (runtime/model/names.h),
 * read through the store: what `inspect --tensor NAME` and `export` share.
 *
 * The naming table is built from the run's stored configuration and the
 * number of stages the checkpoint has (a resume may change pp and chunks, not
 * their product), and every stage array it points into is checked against
 * the checkpoint's rows (present, f32, the size the table expects) before
 * anything is read.  So old runs need nothing new on disk: the names are a
 * view of the arrays they always stored.
 */
#ifndef CLI_NAMED_H
#define CLI_NAMED_H

#include <stdint.h>

#include "ckpt/query/ckpt_query.h"
#include "runtime/job/config.h"
#include "runtime/model/names.h"

typedef struct cli_named {
	ckpt_run *run;               /* not owned */
	const cat_tensor_rows *rows; /* not owned: the checkpoint's rows */
	qe_train_config cfg;         /* the run's configuration */
	qe_names names;
	/* One stage array per source held at a time (export reads stage by stage). */
	float *held[QE_NAME_SOURCES];
	int held_stage[QE_NAME_SOURCES];
} cli_named;

/*
 * Build the table of checkpoint rows tr of run r.  QE_EINVAL when the
 * configuration cannot be read or the model cannot be named; QE_ECORRUPT
 * naming the stage and array when a row is missing or has another size than
 * the table says.  OUT *out: released with cli_named_release() (also after a
 * failure).  r and tr must outlive it.
 */
int cli_named_open(ckpt_run *r, const cat_tensor_rows *tr, cli_named *out);
void cli_named_release(cli_named *nm);

/*
 * What export, eval and sample start from: open run directory dir (stores
 * too), select checkpoint step (-1: the latest), refuse one that is not
 * committed ("only a committed checkpoint is <verb>"), read its rows and
 * name them.  what (whatlen bytes) says where a failure lies: dir, then
 * "dir: checkpoint step S".  OUT: *r, *ck, *tr, *nm, which the caller
 * releases as it would have (ckpt_run_close, cat_ckpt_release,
 * cat_tensor_rows_free, cli_named_release), after a failure too.
 */
int cli_named_checkpoint(const char *dir, long step, const char *verb, ckpt_run **r, cat_ckpt *ck,
			 cat_tensor_rows *tr, cli_named *nm, char *what, size_t whatlen);

/*
 * Read named tensor e's floats (qe_named_floats(e) of them, row-major in its
 * shape; a vocabulary's padding rows left out) into dst.  Every chunk read is
 * re-hashed (ckpt_q_read).  QE_E* naming the tensor on failure.
 */
int cli_named_read(cli_named *nm, const qe_named *e, float *dst);
/* The same with the padding rows too (stored_rows x shape[1] floats): llm.c's padded wte. */
int cli_named_read_stored(cli_named *nm, const qe_named *e, float *dst);

/* Hex digests of bytes: xxh3-128 as the store names chunks (33 chars), and sha256 (65 chars). */
void cli_named_hashes(const void *data, size_t bytes, char xxh[33], char sha[65]);

#endif
