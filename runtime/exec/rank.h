/*
 * rank.h - one rank process of a pipeline: its local stages, their contracts,
 * the gradient arena, the schedule it runs, and the graph manager.
 *
 * A rank is pipeline rank pr = RANK % P of data-parallel replica
 * dr = RANK / P.  It holds V local chunks (virtual stages placed by the
 * schedule), each a qe_stage with its optimizer state, tape pool (one slot
 * per microbatch, the slot's storage is the stage's fixed tape storage) and
 * stage contract.  qe_rank_step runs the rank's action list for one
 * optimizer step - eagerly, or by replaying one captured graph per (action,
 * microbatch slot, local chunk) with the two-way stream handoff - then
 * commits the optimizer under the epoch relation.
 *
 * Every physical action is bracketed by its contract: the check first
 * (nothing runs when it fails), the commit after the action succeeded.
 */
#ifndef QE_RANK_H
#define QE_RANK_H

#include <signal.h>
#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/comm/comm.h"
#include "runtime/contract/contract.h"
#include "runtime/model/model.h"
#include "runtime/optim/adamw.h"
#include "runtime/sched/sched.h"
#include "runtime/job/config.h"
#include "runtime/job/data.h"

typedef struct qe_rank qe_rank;

/* Counters for traces and benchmarks (cumulative unless noted). */
typedef struct qe_rank_counters {
	int64_t steps;            /* optimizer steps committed by this process */
	int live_tapes;           /* now, over local stages */
	int tape_slots;           /* tape slots per local stage: M, or fewer (runtime/exec/slots.c) */
	int peak_live_tapes;      /* max over the last step, summed over local stages' peaks */
	uint64_t delayed_dw;      /* over the last step */
	uint64_t arena_writes;    /* over the last step */
	size_t arena_bytes;       /* capacity */
	int graphs;               /* captured graphs (3 * M * V in graph mode) */
	uint64_t replays;         /* graph launches */
	uint64_t handoffs;        /* two-way handoffs (one per replay) */
	double capture_ms;        /* host time spent capturing */
	size_t device_bytes;      /* bytes allocated from the backend at setup */
	int device_links;         /* 1: messages and replica sums go over device links (links.c) */
	int64_t link_sends;       /* messages sent over them */
	int64_t link_bytes;       /* bytes sent over them */
} qe_rank_counters;

/*
 * Build the rank: `pr`/`dr` from comm's rank, stages from the schedule.
 * Parameters are initialized from cfg->seed (a restore may overwrite them
 * before the first step).  comm may be NULL for a single-process world.
 * *out is freed with qe_rank_free.
 */
int qe_rank_create(const qe_train_config *cfg, qe_backend *b, qe_comm *comm, qe_rank **out);
void qe_rank_free(qe_rank *r);
/*
 * Call after a failure, before qe_rank_free: aborts the device links, so that
 * freeing the rank never waits for a peer (closing a healthy link is a
 * handshake with its other side, which a failed job may never make).
 */
void qe_rank_abandon(qe_rank *r);

/*
 * One optimizer step (step index = steps done so far, the data position):
 * every action of the rank's list, then the optimizer commit.  On success
 * *loss is the step's mean training loss (the same on every rank).
 */
int qe_rank_step(qe_rank *r, const qe_data *data, float *loss);
/* Held-out loss over cfg->eval_micro microbatches (forward only, no state change). */
int qe_rank_eval(qe_rank *r, const qe_data *data, float *loss);
/*
 * The loss of one given microbatch (tokens and targets, batch x seq each),
 * forward only through every stage with the same evaluation forward (no
 * amax recorded, no state changed): *loss is the mean over its targets.
 * Needs a single-rank world (QE_EINVAL otherwise): `qeffect eval`.
 */
int qe_rank_eval_tokens(qe_rank *r, const int32_t *tokens, const int32_t *targets, float *loss);

const qe_train_config *qe_rank_config(const qe_rank *r);
const qe_sched *qe_rank_sched(const qe_rank *r);
int qe_rank_index(const qe_rank *r);       /* global rank */
int qe_rank_pipeline_rank(const qe_rank *r);
int qe_rank_replica(const qe_rank *r);
int qe_rank_nchunks(const qe_rank *r);
qe_stage *qe_rank_stage(qe_rank *r, int chunk);
qe_adamw *qe_rank_optimizer(qe_rank *r, int chunk);
qe_backend *qe_rank_backend(qe_rank *r);
qe_comm *qe_rank_comm(qe_rank *r);
int64_t qe_rank_steps_done(const qe_rank *r);
/*
 * The global gradient norm of the last step, before clipping (the norm over
 * every parameter of every stage, the same on every rank); NaN when that
 * step did not measure it (it does under --grad-clip and on the steps the
 * progress line shows: every log_every-th and the last).
 */
double qe_rank_grad_norm(const qe_rank *r);
/*
 * Stopping early together (preemption): each step's loss all-reduce carries
 * every rank's vote, read from *flag (a signal handler's flag; NULL: never
 * votes).  After a step, qe_rank_stop_agreed says whether any rank voted,
 * the same answer on every rank, so all of them stop at the same quiescent
 * step.
 */
void qe_rank_set_stop_source(qe_rank *r, const volatile sig_atomic_t *flag);
int qe_rank_stop_agreed(const qe_rank *r);
const qe_epoch_state *qe_rank_epochs(const qe_rank *r);
void qe_rank_get_counters(const qe_rank *r, qe_rank_counters *out);

/* Per-stage resource counts of the last step (for traces). */
typedef struct qe_rank_chunk_stats {
	int live_tapes;      /* at the end of the step (0 when complete) */
	int peak_live_tapes; /* most live at once during the step */
	uint64_t delayed_dw; /* dW not right after its own dI */
	int arena_writes;    /* views of this stage written in the step */
} qe_rank_chunk_stats;
void qe_rank_chunk_get_stats(const qe_rank *r, int chunk, qe_rank_chunk_stats *out);
/* e_C of local chunk c's weight cache, -1 when invalid. */
int64_t qe_rank_chunk_cache_epoch(const qe_rank *r, int chunk);

/* The arena view local chunk c's matrix j is written through by microbatch m
 * (f32 tensor; with an accumulating arena the one view of every m). */
qe_tensor qe_rank_arena_view(const qe_rank *r, int chunk, int j, int m);
/* The arena's views per matrix: M (per-mb) or 1 (accumulate). */
int qe_rank_arena_nviews(const qe_rank *r);

/*
 * The checkpoint gate: QE_OK at a quiescent optimizer boundary, else
 * QE_EPREMATURE naming what is pending (live tapes, arena writes,
 * reductions, device work).
 */
int qe_rank_quiescent(qe_rank *r);

/*
 * Restart bookkeeping after a restore: steps done = step, e_W = e_W, every
 * weight cache invalid, tokens back to 0, graphs dropped (rebuilt after the
 * next warmup step) - process-local objects get new identities.
 */
int qe_rank_restart(qe_rank *r, int64_t step, int64_t e_W);

/*
 * Data parallelism: every replica of each pipeline rank holds byte-identical
 * parameters, and with tied embeddings each replica's wte and head copies
 * are the same bytes (collective; QE_EMISMATCH naming the stage, replica and
 * ranks when not).  qe_rank_step runs it after every commit when
 * cfg->check_replicas is set; with one replica and tied embeddings only
 * after the run's last step (a check copies both copies to the host and
 * hashes them: about a second for gpt2 on an H100, measured).
 */
int qe_rank_check_replicas(qe_rank *r);

/* Test hooks for fault injection in the gate tests: run only the forward half of a step. */
int qe_rank_forward_only_for_test(qe_rank *r, const qe_data *data);
/*
 * Test hook: F then full B of microbatch m through every stage (a
 * single-process pipeline): its tapes are released, its arena views written,
 * and the step is left incomplete - what the checkpoint gate must refuse.
 */
int qe_rank_microbatch_for_test(qe_rank *r, const qe_data *data, int m);

#endif
