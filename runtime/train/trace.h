/*
 * trace.h - per-step fingerprints: for every stage a rank holds and every
 * category (loss, F/dI/dW outputs, gradients, parameters, AdamW moments, FP8
 * amax/scale/scale_inv per role, epochs, resource counts, data position), a
 * 64-bit XXH3 hash of the bytes.  Two runs that should agree bit for bit
 * agree in every fingerprint; `qeffect compare` counts where they do not.
 */
#ifndef QE_TRACE_H
#define QE_TRACE_H

#include <stdint.h>

#include "runtime/exec/pstate.h" /* qe_trace_row: the row ckpt records, defined where ckpt reads it */
#include "runtime/exec/rank.h"

typedef struct qe_trace_category {
	const char *name;
	/*
	 * 1: legitimately differs between configurations (split vs full backward,
	 * schedules): compared only at steps whose "mapping" fingerprints agree.
	 * 2: the "mapping" marker itself (schedule, backward, pp, dp, micro, chunks
	 * of the step), which describes the configuration and is never a mismatch.
	 */
	int config_dependent;
	const char *what;
} qe_trace_category;

/* The category table (static). */
const qe_trace_category *qe_trace_categories(int *n);
/* The table entry of a name, or NULL. */
const qe_trace_category *qe_trace_category_find(const char *name);

/*
 * Fingerprint every category of every local stage after step `step`
 * (qe_rank_step returned; the step's loss given).  OUT: *rows (malloc'ed,
 * caller frees) and *n.
 */
int qe_trace_rank(qe_rank *r, int64_t step, float loss, qe_trace_row **rows, int *n);

#endif
