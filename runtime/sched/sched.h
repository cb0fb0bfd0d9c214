/*
 * sched.h - pipeline schedules: per-rank action lists built up front, a
 * validator that proves them runnable before anything executes, and cheap
 * statistics (DESIGN.md section 7).
 *
 * A schedule places S = P*V virtual stages on P ranks, V local chunks per
 * rank, and lists for every rank the actions it runs, in order, for one
 * optimizer step of M microbatches: compute actions (F, DI, DW, or B when the
 * backward is not split) and the messages between ranks (SEND_ACT/RECV_ACT
 * carry activations forward, SEND_GRAD/RECV_GRAD carry input gradients back).
 *
 * Message model (what the validator simulates; the cpu transport of
 * runtime/comm/comm.h behaves so): a send never blocks (it is buffered); a
 * recv blocks until a message is there.  All messages from one rank to
 * another, activations and gradients alike, travel in one FIFO channel, and a
 * recv takes the head of it, which must be the message it names (the
 * transport checks the tag).  So each rank receives a peer's messages in the
 * peer's send order; a RECV may therefore sit earlier than right before its
 * consumer, and the executor holds what it received until the consumer runs.
 *
 * Ownership: a qe_sched is owned by whoever created it (qe_sched_create,
 * qe_sched_build, qe_sched_clone) and freed with qe_sched_free.  Its fields are
 * readable by anyone (the executor walks ranks[r].actions); change the lists
 * only through the helpers below so the arrays stay consistent.
 */
#ifndef QE_SCHED_H
#define QE_SCHED_H

#include <stddef.h>

#include "runtime/core/action.h"

/* qe_action_kind (F, DI, DW, B, SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD) is runtime/core/action.h. */

/*
 * One action.  For compute actions, stage = stage_of(rank, chunk) and peer = -1.
 * For messages, stage names the PRODUCING stage (so a send and its recv carry
 * the same stage), chunk names the local chunk that produced (send) or will
 * consume (recv) the data, and peer is the other rank.
 */
typedef struct qe_sched_action {
	qe_action_kind kind;
	int chunk; /* local chunk 0..V-1 */
	int stage; /* global virtual stage 0..S-1 */
	int mb;    /* microbatch 0..M-1 */
	int peer;  /* other rank for messages, -1 otherwise */
} qe_sched_action;

typedef enum qe_sched_kind { QE_SCHED_INTERLEAVED = 0, QE_SCHED_ZBV } qe_sched_kind;
typedef enum qe_sched_backward { QE_BACKWARD_SPLIT = 0, QE_BACKWARD_FULL } qe_sched_backward;

/*
 * Where stages live.  INTERLEAVED: chunk c of rank r is stage c*P + r.
 * VSHAPE (V = 2): chunk 0 of rank r is stage r, chunk 1 is stage 2P-1-r, so the
 * first and the last stage (the loss) are both on rank 0.
 */
typedef enum qe_sched_placement { QE_PLACE_INTERLEAVED = 0, QE_PLACE_VSHAPE } qe_sched_placement;

typedef struct qe_sched_rank {
	qe_sched_action *actions; /* owned by the schedule */
	int n;                    /* number of actions */
	int cap;                  /* allocated entries */
} qe_sched_rank;

typedef struct qe_sched {
	qe_sched_kind kind; /* the generator that made it (informative for hand-made lists) */
	qe_sched_placement placement;
	qe_sched_backward backward;
	int P, V, M, S;       /* ranks, chunks per rank, microbatches, stages = P*V */
	qe_sched_rank *ranks; /* P entries, owned */
} qe_sched;

typedef struct qe_sched_config {
	qe_sched_kind kind;
	int P; /* ranks, >= 1 */
	int M; /* microbatches, >= 1; a multiple of P for interleaved with V > 1 */
	int V; /* chunks per rank, >= 1; zbv requires 2 */
	qe_sched_backward backward;
} qe_sched_config;

/* "F", "DI", "DW", "B", "SEND_ACT", ... ; "?" for bad kinds. Static string. */
const char *qe_sched_action_name(qe_action_kind k);
/* "interleaved" / "zbv", "split" / "full". Static strings. */
const char *qe_sched_kind_name(qe_sched_kind k);
const char *qe_sched_backward_name(qe_sched_backward b);
/* Parse the names above. Returns 0, or QE_EINVAL naming the bad word. */
int qe_sched_kind_parse(const char *s, qe_sched_kind *out);
int qe_sched_backward_parse(const char *s, qe_sched_backward *out);

/* Placement: stage of (rank, chunk), rank and local chunk of a stage; -1 when out of range. */
int qe_sched_stage_of(const qe_sched *s, int rank, int chunk);
int qe_sched_rank_of(const qe_sched *s, int stage);
int qe_sched_chunk_of(const qe_sched *s, int stage);

/*
 * An empty schedule (every rank's list empty).  kind is set to INTERLEAVED for
 * QE_PLACE_INTERLEAVED and ZBV for QE_PLACE_VSHAPE.
 * OUT: *out, freed by qe_sched_free.  Returns 0, QE_EINVAL (bad sizes, VSHAPE
 * with V != 2) or QE_ENOMEM; *out is NULL on failure.
 */
int qe_sched_create(qe_sched_placement pl, int P, int V, int M, qe_sched_backward bw, qe_sched **out);
/* Frees everything; NULL is fine. */
void qe_sched_free(qe_sched *s);
/* A deep copy. OUT: *out, freed by qe_sched_free. Returns 0 or QE_ENOMEM. */
int qe_sched_clone(const qe_sched *s, qe_sched **out);

/* List edits.  append/insert copy the action; pos is 0..n for insert, 0..n-1 for remove.
 * Return 0, QE_EINVAL (bad rank or position) or QE_ENOMEM. */
int qe_sched_append(qe_sched *s, int rank, qe_sched_action a);
int qe_sched_insert(qe_sched *s, int rank, int pos, qe_sched_action a);
int qe_sched_remove(qe_sched *s, int rank, int pos);

/*
 * Insert the messages into compute-only lists: a SEND right after each F
 * (DI/B) whose output goes to another rank, and a RECV right before each F
 * (DI/B) whose input (gradient) comes from another rank - unless the peer sent
 * other messages to this rank before that one: those are received first, just
 * before it, so recvs follow the channel's FIFO order (ZB-V needs this: its
 * neighbours exchange activations and gradients in interleaved order).
 * Hand-offs between stages of one rank need no message.  Returns 0, QE_EINVAL
 * when a list already holds messages, or QE_ENOMEM (the schedule is then
 * unchanged).
 */
int qe_sched_add_comm(qe_sched *s);

/*
 * Build the schedule of cfg, messages included.  With QE_BACKWARD_FULL every
 * DI of the split order becomes a B and the DW actions are dropped, so the F
 * and DI/B order is the same in both (the "reference" of DESIGN.md 7).
 * The result is not validated here; call qe_sched_validate.
 * OUT: *out, freed by qe_sched_free.  Returns 0, QE_EINVAL (bad config, with a
 * message saying which constraint) or QE_ENOMEM.
 */
int qe_sched_build(const qe_sched_config *cfg, qe_sched **out);

/*
 * Check that the schedule can run: every action is well formed and placed on
 * the rank that holds its stage; every (stage, mb) has exactly one F and one
 * DI and one DW (split) or one B (full); on each rank F follows its input
 * (previous stage's F here, or a RECV_ACT), DI/B follows its own F and the
 * gradient of the next stage (its DI/B here, or a RECV_GRAD), DW follows its
 * DI, each send follows what it sends; every send has a recv and every recv a
 * send; and a simulation of all ranks (buffered sends, blocking recvs, one
 * FIFO channel per ordered pair of ranks) finishes without deadlock and every
 * recv finds its own message at the head of its channel.
 * Returns 0 or QE_ESCHEDULE with a message naming rank, action position, the
 * action, and what is missing.
 */
int qe_sched_validate(const qe_sched *s);

/*
 * Per-rank statistics.  Time is a unit-cost proxy: F, DI and DW cost 1, B costs
 * 2, messages cost 0 and arrive when sent; each rank starts at 0 and a recv
 * waits for its send.  bubble = 1 - busy / makespan.
 */
typedef struct qe_sched_rank_stats {
	int count[QE_ACT_NKINDS]; /* actions by kind */
	int peak_live_tapes;      /* max tapes alive at once (F until both DI and DW ran, or B) */
	int delayed_dw;           /* DWs whose previous compute action is not their own DI */
	int max_pending_dw;       /* max DIs whose DW had not run yet, after any action */
	long busy;                /* compute time units */
	long finish;              /* time its last action ends */
	long makespan;            /* max finish over all ranks (same on every rank) */
	double bubble;            /* idle fraction of the makespan */
} qe_sched_rank_stats;

/*
 * Fill out[0..P-1].  The schedule is validated first (its error is returned).
 * Returns 0 or QE_ESCHEDULE.
 */
int qe_sched_stats(const qe_sched *s, qe_sched_rank_stats *out);

/* Compact token of an action: F0.3 I1.2 W1.2 B0.0 Sa0.3>1 Ra1.3<0 Sg1.2>0 Rg0.2<1.
 * Returns the length written (truncated to len-1 as snprintf does). */
int qe_sched_action_token(const qe_sched_action *a, char *buf, size_t len);
/* Long form for messages: "DI(stage 2, mb 3)", "RECV_ACT(stage 1, mb 0, from rank 0)". */
int qe_sched_action_describe(const qe_sched_action *a, char *buf, size_t len);
/* What the compact tokens mean, one line per kind. Static string. */
const char *qe_sched_legend(void);

#define QE_SCHED_FMT_COMPUTE_ONLY 1u /* leave messages out */

/* "rank R: tok tok ...\n" for one rank. OUT: *out, malloc'ed, caller frees. 0 or QE_ENOMEM/QE_EINVAL. */
int qe_sched_format_rank(const qe_sched *s, int rank, unsigned flags, char **out);
/* A header line plus every rank's line. OUT: *out, malloc'ed, caller frees. */
int qe_sched_format(const qe_sched *s, unsigned flags, char **out);
/* One line per rank of stats (as from qe_sched_stats). OUT: *out, malloc'ed, caller frees. */
int qe_sched_stats_format(const qe_sched *s, const qe_sched_rank_stats *st, char **out);

#endif
