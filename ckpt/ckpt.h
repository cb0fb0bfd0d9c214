/*
 * ckpt.h - checkpoints of a training run (DESIGN.md section 8).
 *
 * A checkpoint is taken only at a quiescent optimizer boundary (the gate:
 * qe_rank_quiescent).  Every rank writes the persistent items of its stages
 * (runtime/exec/pstate.h) as chunks into the run's LMDB store and syncs it;
 * after every rank reported success, rank 0 marks the checkpoint committed in
 * one SQLite transaction - the single commit point.  A crash at any moment
 * leaves the last committed checkpoint loadable; orphan chunks are collected
 * by gc.  Restore runs in fresh processes before any graph is built: items are
 * found by (global stage, name), so another pipeline mapping restores too;
 * every chunk is re-hashed on read; process-local objects are rebuilt.
 *
 * Every call here is collective over the rank's communicator when the world
 * has more than one rank.  Nothing here exits the process.
 */
#ifndef QE_CKPT_H
#define QE_CKPT_H

#include <stdint.h>

#include "catalog/catalog.h"
#include "runtime/exec/rank.h"

typedef struct ckpt_session ckpt_session;

/*
 * Per-process checkpoint context: opens RUN/store (after fork - never share
 * it across processes).  catalog is the process's open catalog of the run
 * (not owned).  *out is closed with ckpt_session_close.
 */
int ckpt_session_open(const char *run_dir, const char *run_id, cat *catalog, ckpt_session **out);
void ckpt_session_close(ckpt_session *s);

typedef struct ckpt_result {
	int64_t id;
	int64_t step;
	int64_t e_w;
	uint64_t bytes;               /* all tensors of the checkpoint */
	uint64_t runtime_state_bytes; /* everything but parameters and moments */
	double ms;                    /* wall time of the call on this rank */
} ckpt_result;

/*
 * Take a checkpoint of the rank's current state (after step qe_rank_steps_done).
 * Refused with QE_EPREMATURE naming what is pending when a rank is not
 * quiescent; nothing is committed then.
 */
int ckpt_save(ckpt_session *s, qe_rank *r, ckpt_result *out);

/*
 * Restore the committed checkpoint at `step` (-1: the latest committed) into
 * the rank, then rebuild process-local state (qe_rank_pstate_loaded).
 * Fails with a clear error (missing checkpoint, corrupt chunk naming the
 * tensor, model mismatch) before changing the rank's state when it can.
 */
int ckpt_restore(ckpt_session *s, qe_rank *r, int64_t step, ckpt_result *out);

#endif
