/*
 * ckpt_int.h - the inside of a checkpoint session (ckpt.c: the session, the
 * rank's own store; ckpt_kill.c: the test kill hook; ckpt_words.c: the
 * rank-to-rank agreement words), shared by the protocol and the tiers.  It
 * still declares what the session holds of other files: the ring and the
 * pipe (ckpt/protocol/ckpt_pipe.c), the replicas and the memory tier
 * (ckpt/tiers/), and the row texts of ckpt/protocol/ckpt_save.c.  The protocol's own internals live in its room:
 * ckpt_report_int.h, ckpt_restore_read_int.h, ckpt_prefetch_int.h,
 * ckpt_restore_s3_int.h (ckpt/protocol/).
 */
#ifndef QE_CKPT_INT_H
#define QE_CKPT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/session/ckpt.h"
#include "ckpt/session/rundir.h"
#include "runtime/exec/pstate.h"
#include "store/remote.h"
#include "store/store.h"

#define CKPT_MAX_KILLS 8
/* Tags of the checkpoint service on the comm's service lane (qe_pstate_svc_send). */
enum {
	CKPT_SVC_XFER = 0x58430001u,
	CKPT_SVC_ASYNC_REPORT = 0x58430002u,
	CKPT_SVC_TRACE = 0x58430003u,
	CKPT_SVC_REPL = 0x58430004u,     /* a rank's chunks on their way to a replica (ckpt_replica.c) */
	CKPT_SVC_REPL_ACK = 0x58430005u, /* the replica's answer: durable in its store, or why not */
	CKPT_SVC_PERSIST_PLAN = 0x58430021u, /* rank 0's push thread: the chunks a rank uploads (ckpt_persist.c) */
	/* a rank's push thread: progress while it uploads (at least every timeout/4), then its one report */
	CKPT_SVC_PERSIST_REPORT = 0x58430022u,
	CKPT_SVC_PERSIST_WAIT = 0x58430023u, /* rank 0 in the final wait: "still pushing", then "done" */
};
#define CKPT_MAX_REPLICAS 8
#define CKPT_MSG 1536

typedef struct ckpt_kill {
	char phase[16];
	int rank;  /* -1: every rank */
	int count; /* die at the count-th time this rank reaches phase */
	int seen;
} ckpt_kill;

/* A store of this run on this host's disk, opened read-only on demand (restore serves from it). */
typedef struct ckpt_seen_store {
	ckpt_local_store where;
	store *st; /* NULL until opened; the session's own store is s->st, never opened twice */
} ckpt_seen_store;

/* --- the ring of reused host buffers and the hand-off between two threads (ckpt_pipe.c) --- */

#define CKPT_RING_SLOTS 3
/* Host buffers from the backend's host_alloc (page-locked on cuda), kept by the session. */
typedef struct ckpt_ring {
	qe_backend *b;
	void *slot[CKPT_RING_SLOTS];
	size_t slot_bytes;
} ckpt_ring;

/* One message through the pipe: bytes [off, off + len) of item `item` in its slot. */
typedef struct ckpt_piece {
	int item;
	size_t off, len;
	int last;    /* the item's last piece */
	int in_slot; /* the bytes are in the message's slot (else the filler wrote them in place) */
	size_t chunk, nchunks; /* restore: the item's chunks the slot holds, still to be re-hashed (0: none) */
} ckpt_piece;

typedef struct ckpt_pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t filled, drained;
	int closed, stop;
	int rc; /* the first failure of either side, with its message */
	char msg_text[CKPT_MSG];
	ckpt_piece msg[CKPT_RING_SLOTS];
} ckpt_pipe;

struct ckpt_session {
	char run_dir[1024];
	char run_id[64];
	cat *cat;          /* not owned; rank 0 only (NULL on the other ranks) */
	/* The rank's own store, STORES/rank-R, opened on first use in this process. */
	int rank;          /* -1 until the first save or restore names it */
	char store_dir[CKPT_PATH_MAX];
	store *st;
	ckpt_store_identity ident;
	ckpt_lock *store_lock;
	char host[CKPT_HOST_MAX];
	/* Every store of the run this host sees (restore); filled by ckpt__scan. */
	ckpt_seen_store *seen;
	int nseen;
	size_t chunk_bytes;
	pid_t pid;
	/* --ckpt-replicas (ckpt_replica.c): QE_CKPT_REPLICAS, and the map once the ranks agreed on it. */
	int replicas;
	struct ckpt_repl *repl;
	ckpt_kill kills[CKPT_MAX_KILLS];
	int nkill;
	ckpt_ring ring; /* save and restore move device bytes through it; freed with the session */
	/* The memory tier (ckpt_memtier.c): this rank's memory store, and what it keeps for checkpoint mem_id. */
	char mem_dir[CKPT_PATH_MAX];
	store *mem_st;
	ckpt_store_identity mem_ident;
	int64_t mem_id;       /* -1: no keep list */
	int mem_failed;       /* a chunk of mem_id did not reach memory: no memory copy of mem_id */
	store_hash *mem_keep; /* the chunks kept for mem_id */
	size_t mem_nkeep, mem_cap;
	/* The restore in progress: bytes read from this host's stores, [0] disk, [1] memory tier. */
	uint64_t read_bytes[2];
};

/*
 * What ranks tell each other at every collective step of a save, an async
 * save, a restore, a persist point or retention: the one word of the
 * agreement (ckpt__agree) and of rank 0's decisions (ckpt__bcast).  Fixed
 * size, so it travels by qe_pstate_bcast and qe_pstate_gather alike and
 * leads the larger messages (restore's request and plan, the replicas' host
 * table, retention's keep list).  rc is 0 or a QE_E* code, msg names what
 * failed (already prefixed with the rank when it comes from the combination
 * on rank 0).  Fields a step does not use stay 0.
 */
typedef struct ckpt_word {
	int64_t rc;
	int64_t id;
	int64_t step;
	int64_t e_w;
	int64_t busy; /* a write (async save) or push (persist point) still in flight */
	uint64_t bytes;
	uint64_t rt_bytes;
	char msg[CKPT_MSG];
} ckpt_word;

/* Little-endian 64-bit fields of the small messages ranks exchange (replicas, restore plans). */
static inline void ckpt__put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t ckpt__get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* --- the test kill hook (ckpt_kill.c) ------------------------------------------------ */

/* Arm s->kills from QE_CKPT_KILL's value spec (QE_EINVAL naming a malformed entry). */
int ckpt__kills_parse(ckpt_session *s, const char *spec);
/* SIGKILL this process when QE_CKPT_KILL names (phase, rank) for the count-th time. */
void ckpt__maybe_kill(ckpt_session *s, const char *phase, int rank);

/* --- the words between ranks (ckpt_words.c) ------------------------------------------ */

/*
 * The job's rank count (1 without a comm): every agreement among the ranks
 * starts from it.  ckpt__comm_world is the same for a thread that holds only
 * the comm (the background writes and pushes).
 */
int ckpt__world(qe_rank *r);
int ckpt__comm_world(qe_comm *c);

/* Fill w from rc and the thread's last message (fmt NULL), or from fmt. */
void ckpt__word_set(ckpt_word *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Add rank's outcome (rc, msg) to the combination *all, *len its msg's length
 * so far (0 to start): the first failing rank's code stays, every failing
 * rank's message is appended as "rank R: msg" ("; " between), the prefix left
 * out when msg already starts with "rank R ".  The one place the text naming
 * the rank at fault is written, for the agreement below and for the gathers
 * that carry more than a word (a save's rows, an async save's reports, a
 * restore's requests).
 */
void ckpt__word_add(ckpt_word *all, size_t *len, int rank, int64_t rc, const char *msg);

/*
 * The agreement: every rank hands its word, rank 0 combines them
 * (ckpt__word_add in rank order; busy if any rank is busy; bytes and
 * rt_bytes summed; id, step and e_w are rank 0's) and every rank gets the
 * combination back in *all, so all ranks return the same outcome.  A word of
 * the wrong size becomes the outcome QE_ECOMM naming its rank, heard by every
 * rank like any failure.  what starts the message of a comm failure
 * ("checkpoint", "async checkpoint").  Returns 0 (the outcome is all->rc) or
 * the comm failure, with its message; collective.
 */
int ckpt__agree(qe_rank *r, const char *what, const ckpt_word *mine, ckpt_word *all);
/* Rank 0's word to every rank (in place); what as for ckpt__agree.  Collective. */
int ckpt__bcast(qe_rank *r, const char *what, ckpt_word *w);

/* --- the ring and the pipe (ckpt/protocol/ckpt_pipe.c) -------------------------------- */

/*
 * 1 when item bytes take the device path (the ring's slots on a save, device
 * staging on a restore): device items, and with QE_CKPT_STAGING=device every
 * array of a stage too, so that tests on the cpu backend (whose items live
 * in host memory) run the path cuda takes.
 */
int ckpt__device_path(const qe_pstate_item *it);
/* Bytes per piece of a save or restore: QE_CKPT_PIECE_BYTES or 64 MiB, a whole number of chunks. */
size_t ckpt__piece_bytes(const ckpt_session *s);
/* s->ring with slots of at least slot_bytes from backend b (reallocated when smaller or another backend's). */
int ckpt__ring_get(ckpt_session *s, qe_backend *b, size_t slot_bytes);
void ckpt__ring_free(ckpt_ring *g);
void ckpt__pipe_init(ckpt_pipe *p);
void ckpt__pipe_destroy(ckpt_pipe *p);
/* Filling side: the next free message and its slot (NULL once stopped); post hands it over. */
ckpt_piece *ckpt__pipe_fill_wait(ckpt_pipe *p, int *slot);
void ckpt__pipe_fill_post(ckpt_pipe *p);
/* Filling side: no more messages. */
void ckpt__pipe_close(ckpt_pipe *p);
/* Draining side: the next filled message and its slot (NULL when closed and empty, or stopped). */
ckpt_piece *ckpt__pipe_drain_wait(ckpt_pipe *p, int *slot);
void ckpt__pipe_drain_done(ckpt_pipe *p);
/* Either side: stop with rc and the calling thread's last message (the first failure is kept). */
void ckpt__pipe_fail(ckpt_pipe *p, int rc);
/* The pipe's failure, re-raised on the calling thread (qe_fail), or 0. */
int ckpt__pipe_rc(ckpt_pipe *p);

/* --- the session (ckpt.c) ------------------------------------------------------------ */

/*
 * Open the rank's own store STORES/rank-R in this process (once), creating
 * it with its identity and taking its lock.  Checks that the folder is not
 * on a network filesystem.
 */
int ckpt__store(ckpt_session *s, int rank);
/* Find every store of the run on this host (once per restore); s->seen. */
int ckpt__scan(ckpt_session *s);
/* The store handle of seen store i, opened read-only on first use (the own store: s->st). */
int ckpt__seen_open(ckpt_session *s, int i, store **out);

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

/* --- replicas (ckpt_replica.c) ----------------------------------------------------- */

typedef struct ckpt_repl ckpt_repl;

/* A peer's store that acknowledged a durable copy of every chunk of a rank's report. */
typedef struct ckpt_copy_store {
	ckpt_store_identity id;
	char path[CKPT_PATH_MAX];
} ckpt_copy_store;

/* --- the memory tier (ckpt_memtier.c; see its header for the protocol) ------------- */

/* Open rank's memory store when QE_CKPT_MEMORY_DIR is set (refusing a folder not in memory). */
int ckpt__mem_open(ckpt_session *s, int rank);
int ckpt__mem_active(const ckpt_session *s);
/* Copies of checkpoint id begin to arrive: a new keep list (a no-op when it is id's already). */
void ckpt__mem_begin(ckpt_session *s, int64_t id);
/* Keep chunk h (size bytes at data) in memory too; a failure is a warning and drops id's memory copy. */
int ckpt__mem_put(ckpt_session *s, const void *data, size_t size, const store_hash *h);
/* 1 and OUT *out (the memory store) when every chunk of id is in memory and flushed; else 0. */
int ckpt__mem_finish(ckpt_session *s, int64_t id, ckpt_copy_store *out);
/* Checkpoint id is committed: drop every memory chunk not kept for it (kill phase memgc first). */
void ckpt__mem_committed(ckpt_session *s, int64_t id);
/* The last checkpoint's outcome is unknown or failed: keep everything. */
void ckpt__mem_forget(ckpt_session *s);
void ckpt__mem_close(ckpt_session *s);

/* Read QE_CKPT_REPLICAS into s->replicas (QE_EINVAL naming a malformed one). */
int ckpt__repl_config(ckpt_session *s);
void ckpt__repl_free(ckpt_session *s);
/*
 * Collective, on the training thread, once per session (later calls return
 * at once): the ranks agree on every rank's host and replica count, and each
 * learns its targets and sources.  Refuses R larger than the number of other
 * hosts, and ranks started with different R, naming them.
 */
int ckpt__repl_setup(ckpt_session *s, qe_rank *r);
/* 1 when this rank sends copies (R > 0 and the map is set up). */
int ckpt__repl_active(const ckpt_session *s);
/* Send one tensor (already put in the own store: list is its chunks, data its bytes) to every target. */
int ckpt__repl_send(ckpt_session *s, qe_comm *comm, int64_t id, const void *data, const store_chunk_list *list);
/*
 * After the own store's flush (own_rc: this rank's outcome so far, with its
 * message): end the streams to the targets, keep and flush every source's
 * copy and acknowledge it, then hear every target.  Every rank of the map
 * calls it for every checkpoint, failure or not.  OUT *copies (malloc'd,
 * free()) and *ncopies: the stores holding this rank's copy.  Returns
 * own_rc, or the first failure of a target or of keeping a copy.
 */
int ckpt__repl_finish(ckpt_session *s, qe_comm *comm, int64_t id, int own_rc, ckpt_copy_store **copies, int *ncopies);

#endif
