/*
 * comm_int.h - what the files of runtime/comm share and nobody else sees:
 * the comm struct, the wire header, the socket helpers of the rendezvous, and
 * the two lanes (user messages, collectives) of the transport.
 */
#ifndef QE_COMM_INT_H
#define QE_COMM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/comm.h"

/* Every message on a mesh link starts with this 24-byte little-endian header. */
#define QE_MSG_MAGIC 0x474d4551u /* "QEMG" */
#define QE_MSG_HDR 24
/*
 * BYE: a clean qe_comm_close follows.  ABORT: the sender's comm failed; the
 * payload is its cause, so every rank reports the root cause, not just
 * "rank 1 closed its connection".
 */
enum { QE_KIND_USER = 1, QE_KIND_COLL = 2, QE_KIND_BYE = 3, QE_KIND_ABORT = 4, QE_KIND_SVC = 5 };
/*
 * Lanes: a recv only ever looks at its own lane.  The service lane (the
 * checkpoint service's rows, traces and chunk transfers) is matched by tag,
 * not in arrival order, so a background thread and the training thread can
 * each wait for their own tag from the same peer.
 */
enum { QE_LANE_USER = 0, QE_LANE_COLL = 1, QE_LANE_SVC = 2, QE_NLANES = 3 };
/* Largest payload we accept on the wire; larger lengths mean a garbled stream. */
#define QE_MSG_MAX_LEN (1ull << 40)

/* Collective steps, carried as the tag of QE_KIND_COLL messages. */
enum {
	QE_COLL_BARRIER_IN = 1,
	QE_COLL_BARRIER_OUT,
	QE_COLL_ALLREDUCE_IN,
	QE_COLL_ALLREDUCE_OUT,
	QE_COLL_BCAST,
	QE_COLL_BLOB,
	QE_COLL_GATHER,
};

typedef struct qe_comm_msg {
	struct qe_comm_msg *next;
	uint32_t kind, tag;
	uint64_t len;         /* payload bytes */
	unsigned char *buf;   /* send: header + payload; received: payload (may be NULL when len 0) */
} qe_comm_msg;

typedef struct qe_comm_queue {
	qe_comm_msg *head, *tail;
} qe_comm_queue;

typedef struct qe_comm_peer {
	int fd;                             /* -1 for self */
	/* guarded by qe_comm.lock */
	qe_comm_queue sendq;
	qe_comm_queue lanes[QE_NLANES];
	int wr_shut;  /* our goodbye went out and the write side is shut */
	int bye_seen; /* the peer said goodbye */
	int eof;      /* the peer's side is closed (after its goodbye) */
	int writing;  /* the progress thread holds a message of this peer */
	/* owned by the progress thread */
	qe_comm_msg *out;
	size_t out_off, out_total;
	unsigned char hdr[QE_MSG_HDR];
	size_t hdr_got;
	qe_comm_msg *in;
	size_t in_got;
} qe_comm_peer;

struct qe_comm {
	qe_dist_env env;
	int rank, world;
	int timeout_ms;
	qe_comm_peer *peers;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC; signalled on every queue/state change */
	pthread_t thread;
	int thread_started;
	int wake_fd; /* eventfd that wakes the progress thread */
	int stop;
	int failed;
	char cause[768];
};

/* Monotonic milliseconds. */
int64_t qe_comm_now_ms(void);

/*
 * Rendezvous (rendezvous.c): fill fds[world] with one connected, non-blocking
 * TCP socket per peer (fds[rank] = -1).  On failure every socket is closed
 * and the message is set.
 */
int qe_comm_rendezvous(const qe_dist_env *env, int timeout_ms, int *fds);

/* Transport (socket_transport.c). */
int qe_comm_transport_start(qe_comm *c);
void qe_comm_transport_stop(qe_comm *c);
/* Queue a message (copying buf) for peer; self is delivered to our own lane. */
int qe_comm_post(qe_comm *c, int peer, uint32_t kind, uint32_t tag, const void *buf, size_t n);
/*
 * Wait for the next message of lane from peer.  It must have `tag` and, when
 * n != SIZE_MAX, n bytes.  With dst, the payload is copied there; with owned,
 * the caller takes the malloc'd payload (never NULL) and its size in *got.
 */
int qe_comm_take(qe_comm *c, int peer, int lane, uint32_t tag, size_t n, void *dst, void **owned,
		 size_t *got);
/* Human name of a message ("tag 0x7", "barrier release"), for errors. */
const char *qe_comm_msg_name(int lane, uint32_t tag, char *buf, size_t len);

#endif
