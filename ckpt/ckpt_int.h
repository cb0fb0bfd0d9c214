/*
 * ckpt_int.h - the inside of a checkpoint session, shared by ckpt.c (session,
 * store ownership, the test kill hook, the rank-to-rank agreement helpers),
 * ckpt_save.c (also the row writing that ckpt_async.c shares) and
 * ckpt_restore.c.
 */
#ifndef QE_CKPT_INT_H
#define QE_CKPT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"
#include "runtime/exec/pstate.h"
#include "store/store.h"

#define CKPT_MAX_KILLS 8
#define CKPT_MSG 1536

typedef struct ckpt_kill {
	char phase[16];
	int rank;  /* -1: every rank */
	int count; /* die at the count-th time this rank reaches phase */
	int seen;
} ckpt_kill;

struct ckpt_session {
	char run_dir[1024];
	char store_dir[1100];
	char run_id[64];
	cat *cat;          /* not owned */
	store *st;         /* opened on first use, in this process */
	size_t chunk_bytes;
	pid_t pid;
	ckpt_kill kills[CKPT_MAX_KILLS];
	int nkill;
};

/*
 * What ranks tell each other during a save or restore: fixed size, so it
 * travels by qe_comm_bcast and qe_comm_gather_blobs alike.  rc is 0 or a
 * QE_E* code, msg names what failed (already prefixed with the rank when it
 * comes from the combination on rank 0).
 */
typedef struct ckpt_word {
	int64_t rc;
	int64_t id;
	int64_t step;
	int64_t e_w;
	uint64_t bytes;
	uint64_t rt_bytes;
	char msg[CKPT_MSG];
} ckpt_word;

/* The test kill hook: SIGKILL this process when QE_CKPT_KILL names (phase, rank) for the count-th time. */
void ckpt__maybe_kill(ckpt_session *s, const char *phase, int rank);

/* Fill w from rc and the thread's last message. */
void ckpt__word_set(ckpt_word *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Every rank hands its word; rank 0 gets the combination (first failing
 * rank's code, every failing rank's message prefixed "rank R: ", bytes
 * summed) in *all.  Other ranks' *all is untouched.  Returns 0 or the comm
 * failure (with its message).
 */
int ckpt__gather(qe_rank *r, const ckpt_word *mine, ckpt_word *all);
/* Rank 0's word to every rank (in place). */
int ckpt__bcast(qe_rank *r, ckpt_word *w);

/* Open the run's store in this process (once); create it (and the ownership record) when asked. */
int ckpt__store(ckpt_session *s, int create);

/* "[64,256]" */
void ckpt__shape_text(const qe_pstate_item *it, char *buf, size_t len);
/*
 * The catalog (stage, name) of a persistent item held by data-parallel
 * replica `replica`: run-wide records (stage -1) live at stage 0 as
 * "run/NAME"; a replica other than 0 keeps its own copy of a per-replica item
 * as "dpR/NAME".
 */
void ckpt__catalog_key(const qe_pstate_item *it, int replica, int *stage, char *name, size_t len);
/* Items every replica holds bitwise the same (parameters and moments): only replica 0 writes them. */
int ckpt__shared_by_replicas(const qe_pstate_item *it);

double ckpt__now_ms(void);

/* Persistent state other than parameters and AdamW moments (counted as runtime_state_bytes). */
int ckpt__is_runtime_state(qe_pstate_kind k);
/* The checkpoint row's topology, schedule and recipe texts for the rank's configuration. */
void ckpt__describe(const qe_rank *r, char *topo, size_t tl, char *sched, size_t sl, char *recipe, size_t rl);
/*
 * One rank's rows of checkpoint id, in one transaction of catalog c: a tensor
 * row per item naming its chunks lists[i] (already durable in the store), then,
 * on replica 0, one shard row per pipeline stage.  Kill points "row" (after each
 * tensor row) and "rows" (after the commit).  On failure the transaction is
 * rolled back and the message names the item.  Returns 0 or a QE_E* code.
 */
int ckpt__write_rows(ckpt_session *s, cat *c, int64_t id, int rank, int replica, const qe_pstate_item *items, int n,
		     const store_chunk_list *lists);

#endif
