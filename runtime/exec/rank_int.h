/*
 * rank_int.h - the inside of a qe_rank, shared by rank.c (setup),
 * rank_step.c (actions, graphs, optimizer), rank_eval.c, links.c (messages
 * and sums between ranks), profile.c (QE_PROFILE), slots.c, replicas.c,
 * grad_norm.c, tie.c (tied embeddings) and pstate.c.  The files depend one way: rank.c and rank_step.c call links.c,
 * profile.c and slots.c, never each other.
 */
#ifndef QE_RANK_INT_H
#define QE_RANK_INT_H

#include <time.h>

#include "runtime/exec/rank.h"

#include <signal.h>

#define QE_RANK_MAX_CHUNKS 8
#define QE_RANK_MAX_MICRO 256

/* Graphs are captured for QE_ACT_F, QE_ACT_DI and QE_ACT_DW (B replays DI then DW). */
#define RANK_GRAPH_KINDS (QE_ACT_DW + 1)

typedef struct rank_chunk {
	int chunk, stage;
	qe_stage *st;
	qe_adamw *opt;
	qe_tape_pool *pool;
	qe_stage_contract sc;
	uint64_t token;                      /* the effect token the next stateful action presents */
	qe_tape_ref refs[QE_RANK_MAX_MICRO]; /* the live tape of each microbatch */
	int p_begin, nmat;                   /* arena params of this chunk */
	qe_tensor *views;                    /* [m * nmat + j]: arena views (the bound destinations) */
	qe_tensor *scratch;                  /* [j]: copy mode's dW destinations */
	void *scratch_mem;
	qe_graph *graphs[RANK_GRAPH_KINDS][QE_RANK_MAX_MICRO];
	qe_rank_chunk_stats last;            /* resource counts of the last step */
	int nslots;                          /* tape slots: microbatch m uses slot m % nslots (slots.c) */
	int64_t param_base;                  /* global index of the stage's first parameter (grad_norm.c) */
	float *replica_grads;                /* DP: every parameter's replica sum, at its offset (backend memory) */
	int replica_ready;                   /* DP: replica_grads hold this step's sums (the clip pass made them) */
} rank_chunk;

/* The tape slot of microbatch m on chunk ch. */
static inline int rank_slot(const rank_chunk *ch, int m) { return m % ch->nslots; }

typedef struct rank_links rank_links; /* links.c */

/* Tied embeddings (tie.c): where the two copies are and the buffer of their one gradient. */
typedef struct rank_tie {
	int on;
	int pr_wte, pr_head; /* the pipeline ranks holding stage 0 (wte) and the last stage (the head) */
	int wte, head;       /* their parameter index in the local stage, -1 when not held here */
	float *sum;          /* backend memory: the tied gradient both local copies read */
	float *scratch;      /* backend memory: the head's sum when this rank holds both copies */
	float *host;         /* staging of the exchange when the backend is not host memory */
	int64_t n;           /* floats of the matrix (padded vocabulary x hidden) */
} rank_tie;

/* QE_PROFILE=1: wall ms per action kind (each action waited for), summed over steps. */
#define RANK_PROF_ROWS 16
enum { RANK_PROF_OTHER = 13, RANK_PROF_LOSS = 14, RANK_PROF_OPTIM = 15 }; /* rows past the action kinds */
typedef struct rank_profile {
	int on;
	double ms[RANK_PROF_ROWS];
	int64_t n[RANK_PROF_ROWS];
	int64_t steps;       /* steps summed (the first two, warmup and capture, are left out) */
} rank_profile;

struct qe_rank {
	qe_train_config cfg;
	qe_backend *b;
	qe_comm *comm;
	qe_sched *sched;
	int rank, world, pr, dr, P, D, V, M, S;
	qe_stream *caller, *gstream;
	qe_event *ev_in, *ev_tail;
	rank_chunk chunks[QE_RANK_MAX_CHUNKS];
	qe_epoch_state ep;
	qe_arena *arena;
	void *arena_mem;
	float *host_buf;     /* staging for messages and reductions when the backend is not host memory */
	size_t host_bytes;
	int64_t steps;       /* steps done (the data position) */
	int64_t steps_here;  /* steps run by this process (graph warmup) */
	int graphs_ready;
	rank_profile prof;   /* QE_PROFILE=1 (profile.c) */
	rank_links *links;   /* device links to the pipeline peers; NULL: messages go through host memory */
	qe_rank_counters ctr;
	int peak_live_step;
	qe_dw_rule dw;       /* the delayed-dW rule over this step's compute actions: (chunk, mb) */
	uint64_t rng_record[2]; /* persisted: sampler seed and position */
	uint8_t cache_record;   /* persisted: cache validity on restore (always 0) */
	const float **commit_views; /* optimizer commit: commit_cap matrices x M view pointers */
	float *loss_mb;             /* last stage: each microbatch's loss, copied out of its slot after F (backend memory) */
	int nslots;                 /* tape slots per local chunk (slots.c) */
	int commit_cap;
	float *norm_sq;             /* grad_norm.c: each parameter's squared gradient norm, by global index */
	int64_t norm_params;        /* the model's parameter count (norm_sq's length) */
	double grad_norm;           /* the last step's global gradient norm before clipping; NaN: not measured */
	const volatile sig_atomic_t *stop_source; /* non-zero: this rank asks to stop (qe_rank_set_stop_source) */
	int stop_agreed;            /* the last step's agreement: some rank asked to stop after it */
	rank_tie tie;               /* tie.c */
};

/* Message tags: kind, producing stage, microbatch. */
enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_EVAL = 3, TAG_LOSS = 4 };
static inline uint32_t rank_tag(int kind, int stage, int mb)
{
	return ((uint32_t)kind << 24) | ((uint32_t)(stage & 0xff) << 16) | (uint32_t)(mb & 0xffff);
}

/* Local chunk holding global stage s, or NULL. */
static inline rank_chunk *qe__rank_chunk_of_stage(qe_rank *r, int s)
{
	for (int c = 0; c < r->V; c++)
		if (r->chunks[c].stage == s)
			return &r->chunks[c];
	return NULL;
}

/* Whether the backend's memory is host memory (messages need no staging). */
static inline int qe__rank_host_mem(const qe_rank *r) { return r->b->ops->device == QE_DEV_CPU; }

/* The monotonic clock in ms (profile, capture time, link deadlines). */
static inline double qe__rank_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Destroy every captured graph (rank.c); they are captured again after the next warmup step. */
void qe__rank_drop_graphs(qe_rank *r);
/* The tape slots each local chunk needs (slots.c): M, or fewer where the action list proves it. */
int qe__rank_plan_slots(const qe_rank *r, int *out);

/*
 * The profile (profile.c).  init: reads QE_PROFILE.  step_begin: at the third
 * step here, clears what warmup and capture added.  start: the clock to pass
 * to note (0 unless profiling).  note: waits for the caller stream's work
 * and charges the wall time since t0 to row kind (an action kind or
 * RANK_PROF_*).  step_end: one more step summed.  report: logs the table;
 * nothing unless profiling.
 */
void qe__rank_profile_init(qe_rank *r);
void qe__rank_profile_step_begin(qe_rank *r);
double qe__rank_profile_start(const qe_rank *r);
int qe__rank_profile_note(qe_rank *r, int kind, double t0);
void qe__rank_profile_step_end(qe_rank *r);
void qe__rank_profile_report(const qe_rank *r);

/*
 * Messages between ranks (links.c).  send/recv: device (or host) memory
 * to/from global rank peer, over the device links when open, else through
 * the host comm (staged in host_buf when the backend is not host memory).
 * allreduce: sum a float vector over a group of ranks in place (backend
 * memory); the replica group's sum goes over the links when they carry it.
 */
int qe__rank_send(qe_rank *r, int peer, uint32_t tag, const void *src, size_t bytes);
int qe__rank_recv(qe_rank *r, int peer, uint32_t tag, void *dst, size_t bytes);
int qe__rank_allreduce(qe_rank *r, float *buf, size_t n, const int *group, int group_size);

/* grad_norm.c: the global parameter index of each local stage, and norm_sq (at rank creation). */
int qe__rank_grad_norm_init(qe_rank *r);
/*
 * The global gradient norm from each local chunk's opt->sumsq (filled by
 * qe_adamw_grad_sumsq or qe_adamw_param_sumsq on r->caller): copied back,
 * summed over the pipeline ranks of this replica, added in global index
 * order.  A collective over those ranks: each calls it at the same step.
 */
int qe__rank_grad_norm_collect(qe_rank *r, double *norm);

/*
 * Tied embeddings (tie.c).  init: after the chunks are made (a no-op unless
 * the model ties them); free: its buffers.  grads: the tied gradient of this
 * step into tie.sum, which the local copies' optimizers read; a collective
 * of the replica's wte and head ranks, called by both at the same step.
 */
int qe__rank_tie_init(qe_rank *r);
void qe__rank_tie_free(qe_rank *r);
int qe__rank_tie_grads(qe_rank *r);

/*
 * Device links (links.c).  open: a no-op unless the backend has links, the
 * job has pipeline peers or replicas, and QE_P2P allows it (cuda: unless
 * "host"; cpu: only "device"); collective over all ranks.  max_message: the
 * largest pipeline message; max_reduce_floats: the largest replica sum.
 * send/recv: the device path behind qe__rank_send/recv.  allreduce: the
 * replica sum, bitwise the host path's (reduce_ready says whether the links
 * carry it).  sync: wait for a stream, failing (and aborting the links)
 * instead of hanging when a peer dies.  quiesce: every send of this rank
 * completed.  counters: whether links are in use, messages and bytes sent.
 */
int qe__rank_links_open(qe_rank *r, size_t max_message, size_t max_reduce_floats);
int qe__rank_links_reduce_ready(const qe_rank *r);
int qe__rank_link_allreduce(qe_rank *r, float *buf, size_t n, const int *group, int gsize);
void qe__rank_links_counters(const qe_rank *r, int *on, int64_t *sends, int64_t *bytes);
void qe__rank_links_close(qe_rank *r);
int qe__rank_link_send(qe_rank *r, int peer, const void *src, size_t bytes);
int qe__rank_link_recv(qe_rank *r, int peer, void *dst, size_t bytes);
int qe__rank_sync(qe_rank *r, qe_stream *s);
int qe__rank_links_quiesce(qe_rank *r);

#endif
