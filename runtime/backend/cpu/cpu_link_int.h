/*
 * cpu_link_int.h - the inside of a cpu device link, shared by cpu_link.c
 * (opening, transfers, health, close, and the socket I/O under them) and
 * cpu_link_connect.c (the ids, their listeners, and the handshake that joins
 * a link's two ends).  cpu_link.h is what the op table sees; this is not.
 */
#ifndef QE_CPU_LINK_INT_H
#define QE_CPU_LINK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/backend.h"

/* Longest link name: the abstract socket's, carried in the id. */
#define NAME_MAX_LEN 96
/* The wire: what each frame is, and the header every frame starts with. */
#define MSG_MAGIC 0x4b4c4551u   /* "QELK": a message */
#define HELLO_MAGIC 0x484c4551u /* "QELH": the receiver introduces itself */
#define ACK_MAGIC 0x414c4551u   /* "QELA": the sender accepted it */
#define CONNECT_MAGIC 0x434c4551u /* "QELC": the receiver made its first receive */
#define CHAL_MAGIC 0x58434c51u  /* "QLCX": the sender's nonce and proof */
#define PROOF_MAGIC 0x50434c51u /* "QLCP": the receiver's proof */
#define HDR_BYTES 16            /* u32 magic, u32 sequence, u64 length (host order: one host) */

typedef struct link_msg {
	struct link_msg *next;
	size_t len; /* header + payload */
	unsigned char data[];
} link_msg;

struct qe_link {
	qe_backend *b;
	int fd;
	int is_sender;
	int timeout_ms;
	char name[NAME_MAX_LEN + 1];
	atomic_int aborted;
	pthread_mutex_t mu; /* guards everything below */
	pthread_cond_t cv;  /* the queue changed or the writer made progress */
	link_msg *head, *tail;
	int busy;           /* the writer holds a message it has not finished writing */
	int stop;           /* close: the writer exits once the queue is empty */
	int err;            /* first failure, sticky */
	char errmsg[480];
	uint64_t nsent;     /* messages enqueued (sender) */
	uint64_t nrecv;     /* messages received (receiver) */
	int connected;      /* the first send / first receive handshake is done */
	pthread_t writer;
	int has_writer;
};

enum { IO_OK = 0, IO_TIMEOUT, IO_EOF, IO_ABORT, IO_ERR };

/* Monotonic milliseconds. */
static inline double qe__cpu_link_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void qe__cpu_link_put_hdr(unsigned char *h, uint32_t magic, uint32_t seq, uint64_t len)
{
	memcpy(h, &magic, 4);
	memcpy(h + 4, &seq, 4);
	memcpy(h + 8, &len, 8);
}

static inline void qe__cpu_link_get_hdr(const unsigned char *h, uint32_t *magic, uint32_t *seq, uint64_t *len)
{
	memcpy(magic, h, 4);
	memcpy(seq, h + 4, 4);
	memcpy(len, h + 8, 8);
}

/*
 * Socket I/O (cpu_link.c).  Every wait ends at deadline (< 0: none) and,
 * with a link, when it is aborted; l may be NULL (the handshake, before the
 * link exists).  They return IO_*; *err gets errno on IO_ERR.
 */
int qe__cpu_link_read_full(qe_link *l, int fd, void *buf, size_t n, double deadline, int *err);
int qe__cpu_link_write_full(qe_link *l, int fd, const void *buf, size_t n, double deadline, int *err);
/* What an IO_* result (and errno) means, for messages. */
const char *qe__cpu_link_io_what(int io, int err);

/* Joining the two ends (cpu_link_connect.c). */
/* The link name in id (the id made by link_id); op names the caller in the message. */
int qe__cpu_link_id_name(const void *id, char *name, const char *op);
/* Sender: accept connections on the listener of l->name until the receiver proves itself; sets l->fd. */
int qe__cpu_link_accept_receiver(qe_link *l);
/* Receiver: connect to the sender's listener and prove ourselves; sets l->fd. */
int qe__cpu_link_connect_sender(qe_link *l);

#endif
