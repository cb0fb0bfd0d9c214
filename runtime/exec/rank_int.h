/*
 * rank_int.h - the inside of a qe_rank, shared by rank.c (setup),
 * rank_step.c (actions, graphs, optimizer) and rank_eval.c.
 */
#ifndef QE_RANK_INT_H
#define QE_RANK_INT_H

#include "runtime/exec/rank.h"

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
} rank_chunk;

/* The tape slot of microbatch m on chunk ch. */
static inline int rank_slot(const rank_chunk *ch, int m) { return m % ch->nslots; }

typedef struct rank_links rank_links; /* links.c */

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
	float *reduce_buf;   /* DP: one parameter's gradient, backend memory */
	float *host_buf;     /* staging for messages and reductions when the backend is not host memory */
	size_t host_bytes;
	int64_t steps;       /* steps done (the data position) */
	int64_t steps_here;  /* steps run by this process (graph warmup) */
	int graphs_ready;
	/* QE_PROFILE=1: wall ms per action kind (each action waited for), summed over steps */
	int profile;
	double prof_ms[16];
	int64_t prof_n[16];
	int64_t prof_steps;  /* steps summed (the first two, warmup and capture, are left out) */
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
};

/* Message tags: kind, producing stage, microbatch. */
enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_EVAL = 3, TAG_LOSS = 4 };
static inline uint32_t rank_tag(int kind, int stage, int mb)
{
	return ((uint32_t)kind << 24) | ((uint32_t)(stage & 0xff) << 16) | (uint32_t)(mb & 0xffff);
}

/* Local chunk holding global stage s, or NULL. */
rank_chunk *qe__rank_chunk_of_stage(qe_rank *r, int s);
/* Send/receive device (or host) memory to/from global rank peer. */
int qe__rank_send(qe_rank *r, int peer, uint32_t tag, const void *src, size_t bytes);
int qe__rank_recv(qe_rank *r, int peer, uint32_t tag, void *dst, size_t bytes);
/* Sum a float vector over a group of ranks in place (backend memory). */
int qe__rank_allreduce(qe_rank *r, float *buf, size_t n, const int *group, int group_size);
void qe__rank_drop_graphs(qe_rank *r);
/* The tape slots each local chunk needs (slots.c): M, or fewer where the action list proves it. */
int qe__rank_plan_slots(const qe_rank *r, int *out);

/* Log the QE_PROFILE table (rank_step.c); nothing unless profiling. */
void qe__rank_profile_report(const qe_rank *r);

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
