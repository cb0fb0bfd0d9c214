/*
 * cpu_link.c - device links for the cpu backend: one local stream socket per
 * link, so the executor's device-link path (runtime/exec/links.c, NCCL on
 * cuda) runs, and is tested, on machines without a GPU.
 *
 * The sending rank's link_id opens a listening Unix socket under a random
 * name in Linux's abstract namespace (nothing on disk to clean up, gone with
 * the process) and puts the name, nothing secret, in the id; its link_open
 * accepts the one receiver and takes the listener out of a process-wide
 * table.  Both ranks must therefore share a host; QE_P2P=host is the path
 * for everything else.
 *
 * cpu ops run when enqueued, yet a send must not wait for its receiver (on
 * cuda it runs on a stream of its own; the schedules rely on that).  So
 * link_send copies the payload into a queue that a per-link writer thread
 * drains into the socket, like a pipe with an unbounded buffer, and
 * link_recv blocks the caller until its whole message is in.  Messages are
 * framed (magic, sequence number, length) so a receive of the wrong size or
 * out of order is an error instead of a silent misread.  Every wait has a
 * deadline (QE_COMM_TIMEOUT_MS, default 600 s) and watches for link_abort,
 * which shuts the socket down so nothing stays blocked; sends never raise
 * SIGPIPE.  A failed link stays failed (STYLE.md 4): link_check reports it.
 *
 * Like NCCL, which connects a pair lazily at its first operation and may
 * hold the host there until the peer makes the matching call, a link's first
 * send waits until the receiver has called its first receive (the receiver
 * says so with a CONNECT frame); later sends never wait.  Code that would
 * hang on NCCL because both sides of two links send first (the replica sum
 * did, on the GPU machine) therefore hangs here too, and fails at the
 * deadline, in CI instead of on the GPU.
 *
 * Unlike NCCL, closing is not collective: either side may close first.  The
 * sender's close waits (bounded) for its queue to drain.
 *
 * Only the job's own receiver gets in (issue 23).  An abstract socket has no
 * file permissions: any process on the host may connect to it.  So the
 * sender accepts a connection only from a process of our own uid
 * (SO_PEERCRED; the receiver checks the sender's the same way) that proves,
 * by HMAC-SHA256 over both sides' nonces, the link name and the run id, that
 * it knows the job secret (runtime/comm/auth.h; the secret never travels):
 *
 *   receiver -> HELLO (name, nonce_r)
 *   sender   -> CHALLENGE (nonce_s, sender proof)
 *   receiver -> PROOF (receiver proof)
 *   sender   -> ACK
 *
 * The sender handles every connection to its listener at once, each with its
 * own time limit (HANDSHAKE_MS), so a process that connects and stalls or
 * proves nothing is dropped and logged (pid and uid) while the real receiver
 * gets in; it is never taken for the receiver.  Test hook:
 * QE_LINK_TEST_CONNECT_DELAY_MS makes a receiver wait that long before it
 * connects, so a test's rogue can reach a listener first.
 */
#define _GNU_SOURCE
#include "runtime/backend/cpu/cpu_link.h"
#include "runtime/backend/cpu/cpu_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/auth.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define ID_MAGIC "QECPULK1"
#define NAME_MAX_LEN 96
#define MSG_MAGIC 0x4b4c4551u   /* "QELK": a message */
#define HELLO_MAGIC 0x484c4551u /* "QELH": the receiver introduces itself */
#define ACK_MAGIC 0x414c4551u   /* "QELA": the sender accepted it */
#define CONNECT_MAGIC 0x434c4551u /* "QELC": the receiver made its first receive */
#define CHAL_MAGIC 0x58434c51u  /* "QLCX": the sender's nonce and proof */
#define PROOF_MAGIC 0x50434c51u /* "QLCP": the receiver's proof */
#define NONCE QE_AUTH_NONCE_BYTES
#define MAC QE_AUTH_MAC_BYTES
/* One connection's whole handshake must end within this; then it is dropped. */
#define HANDSHAKE_MS 5000
/* Handshakes under way at once on one listener; a new one beyond drops the oldest. */
#define PENDING_MAX 16
#define HDR_BYTES 16            /* u32 magic, u32 sequence, u64 length (host order: one host) */
#define DEFAULT_TIMEOUT_MS 600000
/* A receiver that finds no listener retries this long: the sender made it before handing out the id. */
#define CONNECT_RETRY_MS 5000
/* How long a sender's close waits for its queue to drain before dropping it. */
#define CLOSE_FLUSH_MS 10000
/* Longest sleep between looks at the abort flag while waiting on a socket. */
#define SLICE_MS 100

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

/* Listening sockets of ids made here and not yet taken by the sender's link_open. */
typedef struct listener {
	struct listener *next;
	qe_backend *b;
	int fd;
	char name[NAME_MAX_LEN + 1];
} listener;

static pthread_mutex_t g_listen_mu = PTHREAD_MUTEX_INITIALIZER;
static listener *g_listeners;
static atomic_uint g_link_seq;

enum { IO_OK = 0, IO_TIMEOUT, IO_EOF, IO_ABORT, IO_ERR };

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int env_timeout_ms(void)
{
	const char *v = getenv("QE_COMM_TIMEOUT_MS");
	if (v && *v) {
		char *end;
		errno = 0;
		long t = strtol(v, &end, 10);
		if (!errno && !*end && t > 0 && t <= INT_MAX)
			return (int)t;
	}
	return DEFAULT_TIMEOUT_MS;
}

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sa)
{
	size_t n = strlen(name);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int is_aborted(qe_link *l)
{
	return l && atomic_load(&l->aborted);
}

/* 1 when fd is ready (or in error: the next I/O call says which), 0 past the deadline, -1 aborted. */
static int wait_fd(qe_link *l, int fd, short events, double deadline)
{
	for (;;) {
		if (is_aborted(l))
			return -1;
		int slice = SLICE_MS;
		if (deadline >= 0) {
			double left = deadline - now_ms();
			if (left <= 0)
				return 0;
			if (left < slice)
				slice = (int)left + 1;
		}
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, slice);
		if (n > 0 || (n < 0 && errno != EINTR))
			return 1;
	}
}

/* Read exactly n bytes before deadline (< 0: none); *err gets errno on IO_ERR. */
static int read_full(qe_link *l, int fd, void *buf, size_t n, double deadline, int *err)
{
	char *p = buf;
	size_t done = 0;
	while (done < n) {
		ssize_t k = recv(fd, p + done, n - done, MSG_DONTWAIT);
		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		/* a peer that closes with our CONNECT frame unread resets the socket: that is a close too */
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return is_aborted(l) ? IO_ABORT : IO_EOF;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			*err = errno;
			return is_aborted(l) ? IO_ABORT : IO_ERR;
		}
		int w = wait_fd(l, fd, POLLIN, deadline);
		if (w < 0)
			return IO_ABORT;
		if (w == 0)
			return IO_TIMEOUT;
	}
	return IO_OK;
}

static int write_full(qe_link *l, int fd, const void *buf, size_t n, double deadline, int *err)
{
	const char *p = buf;
	size_t done = 0;
	while (done < n) {
		ssize_t k = send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k >= 0) {
			done += (size_t)k;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			*err = errno;
			return is_aborted(l) ? IO_ABORT : IO_ERR;
		}
		int w = wait_fd(l, fd, POLLOUT, deadline);
		if (w < 0)
			return IO_ABORT;
		if (w == 0)
			return IO_TIMEOUT;
	}
	return IO_OK;
}

static void put_hdr(unsigned char *h, uint32_t magic, uint32_t seq, uint64_t len)
{
	memcpy(h, &magic, 4);
	memcpy(h + 4, &seq, 4);
	memcpy(h + 8, &len, 8);
}

static void get_hdr(const unsigned char *h, uint32_t *magic, uint32_t *seq, uint64_t *len)
{
	memcpy(magic, h, 4);
	memcpy(seq, h + 4, 4);
	memcpy(len, h + 8, 8);
}

/* Record the first failure of l (message already formatted); returns rc. */
static int set_err_locked(qe_link *l, int rc, const char *msg)
{
	if (!l->err) {
		l->err = rc;
		snprintf(l->errmsg, sizeof(l->errmsg), "%s", msg);
	}
	pthread_cond_broadcast(&l->cv);
	return rc;
}

static int set_err(qe_link *l, int rc)
{
	pthread_mutex_lock(&l->mu);
	set_err_locked(l, rc, qe_last_error());
	pthread_mutex_unlock(&l->mu);
	return rc;
}

/* ---- ids and opening ------------------------------------------------------- */

static int id_name(const void *id, char *name, const char *op)
{
	const unsigned char *p = id;
	size_t n = p[8];
	if (memcmp(p, ID_MAGIC, 8) != 0 || n == 0 || n > NAME_MAX_LEN || memchr(p + 9, 0, n))
		return qe_fail(QE_EINVAL, "%s: the id was not made by the cpu backend's link_id", op);
	memcpy(name, p + 9, n);
	name[n] = 0;
	return QE_OK;
}

int qe__cpu_link_id(qe_backend *b, void *id)
{
	if (!b || !id)
		return qe_fail(QE_EINVAL, "link_id: NULL backend or id");
	listener *ls = calloc(1, sizeof(*ls));
	if (!ls)
		return qe_fail(QE_ENOMEM, "link_id: out of host memory");
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = (uint64_t)(now_ms() * 1e3) ^ (uint64_t)(uintptr_t)ls;
	snprintf(ls->name, sizeof(ls->name), "qeffect-link.%d.%u.%016llx", (int)getpid(),
		 atomic_fetch_add(&g_link_seq, 1), (unsigned long long)rnd);
	struct sockaddr_un sa;
	socklen_t alen = abstract_addr(ls->name, &sa);
	ls->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls->fd < 0 || bind(ls->fd, (struct sockaddr *)&sa, alen) != 0 || listen(ls->fd, 4) != 0) {
		int e = errno;
		if (ls->fd >= 0)
			close(ls->fd);
		free(ls);
		return qe_fail(QE_ECOMM, "link_id: listening on a local socket for a new link: %s", strerror(e));
	}
	ls->b = b;
	unsigned char *p = id;
	memset(p, 0, QE_LINK_ID_BYTES);
	memcpy(p, ID_MAGIC, 8);
	p[8] = (unsigned char)strlen(ls->name);
	memcpy(p + 9, ls->name, p[8]);
	pthread_mutex_lock(&g_listen_mu);
	ls->next = g_listeners;
	g_listeners = ls;
	pthread_mutex_unlock(&g_listen_mu);
	return QE_OK;
}

void qe__cpu_link_forget(qe_backend *b)
{
	pthread_mutex_lock(&g_listen_mu);
	for (listener **pp = &g_listeners; *pp;) {
		listener *ls = *pp;
		if (ls->b == b) {
			*pp = ls->next;
			close(ls->fd);
			free(ls);
		} else {
			pp = &ls->next;
		}
	}
	pthread_mutex_unlock(&g_listen_mu);
}

static listener *take_listener(const char *name)
{
	listener *found = NULL;
	pthread_mutex_lock(&g_listen_mu);
	for (listener **pp = &g_listeners; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->name, name) == 0) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&g_listen_mu);
	return found;
}

static const char *io_what(int io, int err)
{
	switch (io) {
	case IO_TIMEOUT:
		return "timed out (QE_COMM_TIMEOUT_MS)";
	case IO_EOF:
		return "the other side closed the connection";
	case IO_ABORT:
		return "aborted";
	default:
		return strerror(err);
	}
}

/* ---- the handshake: same uid, and proof of the job secret ------------------ */

/* The proof of one side: HMAC(secret, label || run id || link name || nonce_r || nonce_s). */
static int link_mac(const qe_auth_key *key, int sender, const char *name, const unsigned char *nr,
		    const unsigned char *ns, unsigned char *out)
{
	unsigned char ctx[64 + NAME_MAX_LEN + 1 + 2 * NONCE] = { 0 };
	const char *rid = getenv("QE_RUN_ID");
	if (!rid || !rid[0])
		rid = "qeffect";
	memcpy(ctx, rid, strnlen(rid, 63));
	memcpy(ctx + 64, name, strnlen(name, NAME_MAX_LEN));
	memcpy(ctx + 64 + NAME_MAX_LEN + 1, nr, NONCE);
	memcpy(ctx + 64 + NAME_MAX_LEN + 1 + NONCE, ns, NONCE);
	return qe_auth_mac(key, sender ? "qeffect cpu link v1 sender" : "qeffect cpu link v1 receiver", ctx,
			   sizeof(ctx), out);
}

/* The peer's pid and uid; -1 when the kernel does not say. */
static void peer_cred(int fd, int *pid, int *uid)
{
	struct ucred cr;
	socklen_t n = sizeof(cr);
	*pid = *uid = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &n) == 0 && n == sizeof(cr)) {
		*pid = (int)cr.pid;
		*uid = (int)cr.uid;
	}
}

/* A connection to the sender's listener whose handshake is under way. */
typedef struct link_pending {
	int fd, pid, uid;
	int stage; /* 0: reading the hello, 1: reading the proof */
	size_t got;
	double until;
	unsigned char nr[NONCE], ns[NONCE];
	unsigned char buf[HDR_BYTES + NAME_MAX_LEN + NONCE];
} link_pending;

enum { HS_MORE = 0, HS_DONE = 1, HS_DROP = -1 };

static int hs_refuse(const qe_link *l, const link_pending *p, const char *why)
{
	qe_log(QE_LOG_WARN, "link '%s': refused a connection from pid %d (uid %d): %s", l->name, p->pid, p->uid, why);
	return HS_DROP;
}

/* Move p's handshake on as far as the bytes that arrived allow. */
static int hs_step(qe_link *l, const qe_auth_key *key, link_pending *p)
{
	size_t n = strlen(l->name), want = p->stage == 0 ? HDR_BYTES + n + NONCE : HDR_BYTES + MAC;
	uint32_t magic, seq;
	uint64_t len;
	while (p->got < want) {
		ssize_t k = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
		if (k > 0) {
			p->got += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return HS_MORE;
		return hs_refuse(l, p, k == 0 ? "it closed the connection during the handshake" : strerror(errno));
	}
	get_hdr(p->buf, &magic, &seq, &len);
	if (p->stage == 0) {
		unsigned char c[HDR_BYTES + NONCE + MAC];
		if (magic != HELLO_MAGIC || len != n + NONCE || memcmp(p->buf + HDR_BYTES, l->name, n) != 0)
			return hs_refuse(l, p, "it did not introduce itself as this link's receiver");
		memcpy(p->nr, p->buf + HDR_BYTES + n, NONCE);
		if (qe_auth_nonce(p->ns) || link_mac(key, 1, l->name, p->nr, p->ns, c + HDR_BYTES + NONCE))
			return hs_refuse(l, p, qe_last_error());
		put_hdr(c, CHAL_MAGIC, 0, NONCE + MAC);
		memcpy(c + HDR_BYTES, p->ns, NONCE);
		/* A fresh socket's buffer takes these bytes at once: a peer that reads nothing cannot stall us. */
		if (send(p->fd, c, sizeof(c), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(c))
			return hs_refuse(l, p, "it does not take our challenge");
		p->stage = 1;
		p->got = 0;
		return HS_MORE;
	}
	{
		unsigned char mac[MAC], h[HDR_BYTES];
		if (magic != PROOF_MAGIC || len != MAC)
			return hs_refuse(l, p, "its handshake has no proof where one belongs");
		if (link_mac(key, 0, l->name, p->nr, p->ns, mac))
			return hs_refuse(l, p, qe_last_error());
		if (!qe_auth_equal(mac, p->buf + HDR_BYTES))
			return hs_refuse(l, p,
					 "it does not prove that it knows the job secret (QE_JOB_SECRET / QE_JOB_SECRET_FILE "
					 "differ, or it is not a rank of this job)");
		put_hdr(h, ACK_MAGIC, 0, 0);
		if (send(p->fd, h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(h))
			return hs_refuse(l, p, "it left before it was admitted");
	}
	return HS_DONE;
}

/*
 * Sender: take the listener made by link_id, and accept connections on it
 * until one proves it is this link's receiver; every other one is dropped.
 */
static int accept_receiver(qe_link *l)
{
	listener *ls = take_listener(l->name);
	qe_auth_key key;
	link_pending pend[PENDING_MAX];
	struct pollfd pf[PENDING_MAX + 1];
	int np = 0, rc = QE_OK;
	if (!ls)
		return qe_fail(QE_EINVAL,
			       "link_open: no listening socket for link '%s' in this process (the sending rank makes "
			       "the id with link_id and opens it as sender)",
			       l->name);
	if ((rc = qe_auth_load(&key))) {
		close(ls->fd);
		free(ls);
		return rc;
	}
	fcntl(ls->fd, F_SETFL, fcntl(ls->fd, F_GETFL) | O_NONBLOCK);
	double deadline = now_ms() + l->timeout_ms;
	while (l->fd < 0) {
		double now = now_ms(), wake = deadline;
		for (int i = np - 1; i >= 0; i--) {
			if (now >= pend[i].until) {
				hs_refuse(l, &pend[i], "no complete handshake within the time limit");
				close(pend[i].fd);
				pend[i] = pend[--np];
			} else if (pend[i].until < wake) {
				wake = pend[i].until;
			}
		}
		if (now >= deadline) {
			rc = qe_fail(QE_ECOMM,
				     "link_open: no receiving rank connected to link '%s' within %d ms (QE_COMM_TIMEOUT_MS)",
				     l->name, l->timeout_ms);
			break;
		}
		pf[0] = (struct pollfd){ .fd = ls->fd, .events = POLLIN };
		for (int i = 0; i < np; i++)
			pf[1 + i] = (struct pollfd){ .fd = pend[i].fd, .events = POLLIN };
		int r = poll(pf, (nfds_t)(1 + np), (int)(wake - now) + 1);
		if (r < 0 && errno != EINTR) {
			rc = qe_fail(QE_ECOMM, "link_open: waiting for the receiver of link '%s': %s", l->name, strerror(errno));
			break;
		}
		if (r <= 0)
			continue;
		for (int i = np - 1; i >= 0 && l->fd < 0; i--) {
			if (!pf[1 + i].revents)
				continue;
			int st = hs_step(l, &key, &pend[i]);
			if (st == HS_MORE)
				continue;
			if (st == HS_DONE)
				l->fd = pend[i].fd;
			else
				close(pend[i].fd);
			pend[i] = pend[--np];
		}
		if (l->fd >= 0 || !(pf[0].revents & POLLIN))
			continue;
		for (;;) {
			int fd = accept4(ls->fd, NULL, NULL, SOCK_CLOEXEC), oldest = 0;
			if (fd < 0)
				break;
			if (np == PENDING_MAX) {
				for (int i = 1; i < np; i++)
					if (pend[i].until < pend[oldest].until)
						oldest = i;
				hs_refuse(l, &pend[oldest], "too many handshakes under way");
				close(pend[oldest].fd);
				pend[oldest] = pend[--np];
			}
			link_pending *p = &pend[np];
			memset(p, 0, sizeof(*p));
			p->fd = fd;
			p->until = now_ms() + HANDSHAKE_MS;
			peer_cred(fd, &p->pid, &p->uid);
			if (p->uid != (int)geteuid()) {
				hs_refuse(l, p, "it runs as another user");
				close(fd);
				continue;
			}
			np++;
		}
	}
	for (int i = 0; i < np; i++)
		close(pend[i].fd);
	close(ls->fd);
	free(ls);
	qe_auth_key_clear(&key);
	return rc;
}

static int test_connect_delay_ms(void)
{
	const char *v = getenv("QE_LINK_TEST_CONNECT_DELAY_MS");
	int d = v ? atoi(v) : 0;
	return d > 0 && d < 600000 ? d : 0;
}

/* Receiver's half after a connect: the sender must be of our uid and prove the job secret. */
static int receiver_handshake(qe_link *l, const qe_auth_key *key, double deadline)
{
	size_t n = strlen(l->name);
	unsigned char h[HDR_BYTES + NAME_MAX_LEN + NONCE], nr[NONCE], c[NONCE + MAC], mac[MAC];
	uint32_t magic, seq;
	uint64_t len;
	int e = 0, io, pid, uid, rc;
	peer_cred(l->fd, &pid, &uid);
	if (uid != (int)geteuid())
		return qe_fail(QE_ECOMM, "link_open: the listener of link '%s' belongs to pid %d of uid %d, not to our uid %d",
			       l->name, pid, uid, (int)geteuid());
	if ((rc = qe_auth_nonce(nr)))
		return rc;
	put_hdr(h, HELLO_MAGIC, 0, n + NONCE);
	memcpy(h + HDR_BYTES, l->name, n);
	memcpy(h + HDR_BYTES + n, nr, NONCE);
	io = write_full(NULL, l->fd, h, HDR_BYTES + n + NONCE, deadline, &e);
	if (!io)
		io = read_full(NULL, l->fd, h, HDR_BYTES, deadline, &e);
	if (io == IO_EOF)
		return qe_fail(QE_ECOMM,
			       "link_open: the sender of link '%s' (pid %d) refused this receiver (does it have the same "
			       "job secret?)",
			       l->name, pid);
	if (io)
		return qe_fail(QE_ECOMM, "link_open: handshake with the sender of link '%s': %s", l->name, io_what(io, e));
	get_hdr(h, &magic, &seq, &len);
	if (magic != CHAL_MAGIC || len != sizeof(c))
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' answered with a bad handshake", l->name);
	if ((io = read_full(NULL, l->fd, c, sizeof(c), deadline, &e)))
		return qe_fail(QE_ECOMM, "link_open: reading the challenge of link '%s': %s", l->name, io_what(io, e));
	if ((rc = link_mac(key, 1, l->name, nr, c, mac)))
		return rc;
	if (!qe_auth_equal(mac, c + NONCE))
		return qe_fail(QE_ECOMM,
			       "link_open: the listener of link '%s' (pid %d) does not prove that it is the sending rank "
			       "of this job (QE_JOB_SECRET / QE_JOB_SECRET_FILE differ?)",
			       l->name, pid);
	put_hdr(h, PROOF_MAGIC, 0, MAC);
	if ((rc = link_mac(key, 0, l->name, nr, c, h + HDR_BYTES)))
		return rc;
	io = write_full(NULL, l->fd, h, HDR_BYTES + MAC, deadline, &e);
	if (!io)
		io = read_full(NULL, l->fd, h, HDR_BYTES, deadline, &e);
	if (io == IO_EOF)
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' (pid %d) refused our proof of the job secret",
			       l->name, pid);
	if (io)
		return qe_fail(QE_ECOMM, "link_open: handshake with the sender of link '%s': %s", l->name, io_what(io, e));
	get_hdr(h, &magic, &seq, &len);
	if (magic != ACK_MAGIC)
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' answered with a bad handshake", l->name);
	return QE_OK;
}

/* Receiver: connect to the sender's listener (it exists before the id is handed out), then the handshake. */
static int connect_sender(qe_link *l)
{
	struct sockaddr_un sa;
	socklen_t alen = abstract_addr(l->name, &sa);
	int delay = test_connect_delay_ms();
	if (delay)
		nap_ms(delay);
	int retry = l->timeout_ms < CONNECT_RETRY_MS ? l->timeout_ms : CONNECT_RETRY_MS;
	double until = now_ms() + retry, deadline = now_ms() + l->timeout_ms;
	qe_auth_key key;
	int e = 0, rc = qe_auth_load(&key);
	if (rc)
		return rc;
	for (;;) {
		l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (l->fd < 0) {
			qe_auth_key_clear(&key);
			return qe_fail(QE_ECOMM, "link_open: socket for link '%s': %s", l->name, strerror(errno));
		}
		if (connect(l->fd, (struct sockaddr *)&sa, alen) == 0)
			break;
		e = errno;
		close(l->fd);
		l->fd = -1;
		if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) || now_ms() > until) {
			qe_auth_key_clear(&key);
			return qe_fail(QE_ECOMM,
				       "link_open: connecting to link '%s': %s (cpu device links are local sockets: the "
				       "sending rank must run on this host and be alive)",
				       l->name, strerror(e));
		}
		nap_ms(10);
	}
	rc = receiver_handshake(l, &key, deadline);
	qe_auth_key_clear(&key);
	return rc;
}

static void *writer_main(void *arg);

static void link_free(qe_link *l)
{
	for (link_msg *m = l->head, *nx; m; m = nx) {
		nx = m->next;
		free(m);
	}
	if (l->fd >= 0)
		close(l->fd);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int qe__cpu_link_open(qe_backend *b, const void *id, int is_sender, qe_link **out)
{
	if (!b || !id || !out)
		return qe_fail(QE_EINVAL, "link_open: NULL argument");
	*out = NULL;
	qe_link *l = calloc(1, sizeof(*l));
	if (!l)
		return qe_fail(QE_ENOMEM, "link_open: out of host memory");
	l->b = b;
	l->fd = -1;
	l->is_sender = is_sender != 0;
	l->timeout_ms = env_timeout_ms();
	atomic_init(&l->aborted, 0);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = id_name(id, l->name, "link_open");
	if (!rc)
		rc = l->is_sender ? accept_receiver(l) : connect_sender(l);
	if (!rc && l->is_sender) {
		int e = pthread_create(&l->writer, NULL, writer_main, l);
		if (e)
			rc = qe_fail(QE_ENOMEM, "link_open: starting the writer thread of link '%s': %s", l->name, strerror(e));
		else
			l->has_writer = 1;
	}
	if (rc) {
		link_free(l);
		return rc;
	}
	*out = l;
	return QE_OK;
}

/* ---- transfers ------------------------------------------------------------- */

/* Drains the queue into the socket in order; the first failure fails the link and ends the thread. */
static void *writer_main(void *arg)
{
	qe_link *l = arg;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!l->head && !l->stop && !l->err && !is_aborted(l))
			pthread_cond_wait(&l->cv, &l->mu);
		if (l->err || is_aborted(l) || !l->head)
			break;
		link_msg *m = l->head;
		l->head = m->next;
		if (!l->head)
			l->tail = NULL;
		l->busy = 1;
		pthread_mutex_unlock(&l->mu);
		int e = 0, io = write_full(l, l->fd, m->data, m->len, -1, &e);
		uint32_t magic, seq;
		uint64_t len;
		get_hdr(m->data, &magic, &seq, &len);
		free(m);
		pthread_mutex_lock(&l->mu);
		l->busy = 0;
		if (io) {
			char msg[400];
			if (io == IO_ABORT)
				snprintf(msg, sizeof(msg), "link_send: link '%s' was aborted while message %u (%llu bytes) was sent",
					 l->name, seq, (unsigned long long)len);
			else if (e == EPIPE || e == ECONNRESET)
				snprintf(msg, sizeof(msg),
					 "link_send: link '%s': the receiving rank closed the link or died before message %u "
					 "(%llu bytes) was delivered",
					 l->name, seq, (unsigned long long)len);
			else
				snprintf(msg, sizeof(msg), "link_send: link '%s': writing message %u (%llu bytes): %s", l->name,
					 seq, (unsigned long long)len, strerror(e));
			set_err_locked(l, QE_ECOMM, msg);
			break;
		}
		pthread_cond_broadcast(&l->cv);
	}
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* Shared checks of send and receive: a live link, the right side, a stream that may run it. */
static int link_ready(qe_link *l, qe_stream *s, const void *buf, size_t bytes, int sending, const char *op)
{
	if (!l)
		return qe_fail(QE_EINVAL, "%s: NULL link", op);
	int rc = qe__cpu_stream_enter(s, op);
	if (rc)
		return rc;
	if (!buf && bytes)
		return qe_fail(QE_EINVAL, "%s: NULL buffer for %zu bytes on link '%s'", op, bytes, l->name);
	if (l->is_sender != sending)
		return qe_fail(QE_EINVAL, "%s on the %s side of one-way link '%s'", op, l->is_sender ? "sending" : "receiving",
			       l->name);
	if (is_aborted(l))
		return qe_fail(QE_ECOMM, "%s: link '%s' was aborted (a peer failed)", op, l->name);
	pthread_mutex_lock(&l->mu);
	if (l->err)
		rc = qe_fail(l->err, "%s: link '%s' failed earlier: %s", op, l->name, l->errmsg);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

/* The sender's half of the first-operation handshake: wait for the receiver's CONNECT frame. */
static int await_connect(qe_link *l)
{
	unsigned char h[HDR_BYTES];
	int e = 0, io = read_full(l, l->fd, h, sizeof(h), now_ms() + l->timeout_ms, &e);
	uint32_t magic = 0, seq;
	uint64_t len;
	if (io == IO_OK)
		get_hdr(h, &magic, &seq, &len);
	int rc = QE_OK;
	if (io == IO_TIMEOUT)
		rc = qe_fail(QE_ECOMM,
			     "link_send: link '%s': the receiving rank made no receive within %d ms of the first send "
			     "(QE_COMM_TIMEOUT_MS); do both ranks send first on a pair of links?",
			     l->name, l->timeout_ms);
	else if (io != IO_OK)
		rc = qe_fail(QE_ECOMM, "link_send: link '%s': %s while waiting for the receiver's first receive", l->name,
			     io_what(io, e));
	else if (magic != CONNECT_MAGIC)
		rc = qe_fail(QE_ECOMM, "link_send: link '%s': expected the receiver's connect frame, got magic 0x%08x",
			     l->name, magic);
	if (rc)
		return set_err(l, rc);
	l->connected = 1;
	return QE_OK;
}

int qe__cpu_link_send(qe_link *l, qe_stream *s, const void *buf, size_t bytes)
{
	int rc = link_ready(l, s, buf, bytes, 1, "link_send");
	if (rc)
		return qe__cpu_stream_fail(s, rc);
	if (!l->connected && (rc = await_connect(l)))
		return qe__cpu_stream_fail(s, rc);
	if (bytes > SIZE_MAX - sizeof(link_msg) - HDR_BYTES)
		return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "link_send: %zu bytes on link '%s'", bytes, l->name));
	link_msg *m = malloc(sizeof(*m) + HDR_BYTES + bytes);
	if (!m)
		return qe__cpu_stream_fail(
			s, qe_fail(QE_ENOMEM, "link_send: out of host memory queueing %zu bytes on link '%s'", bytes, l->name));
	m->next = NULL;
	m->len = HDR_BYTES + bytes;
	if (bytes)
		memcpy(m->data + HDR_BYTES, buf, bytes);
	pthread_mutex_lock(&l->mu);
	if (l->err) {
		rc = qe_fail(l->err, "link_send: link '%s' failed earlier: %s", l->name, l->errmsg);
		pthread_mutex_unlock(&l->mu);
		free(m);
		return qe__cpu_stream_fail(s, rc);
	}
	put_hdr(m->data, MSG_MAGIC, (uint32_t)l->nsent, bytes);
	l->nsent++;
	if (l->tail)
		l->tail->next = m;
	else
		l->head = m;
	l->tail = m;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	return QE_OK;
}

/* The failure of a receive: the link loses its framing, so it fails for good, and so does s. */
static int recv_fail(qe_link *l, qe_stream *s, int io, int e, size_t bytes)
{
	int rc;
	unsigned long long k = (unsigned long long)l->nrecv;
	switch (io) {
	case IO_EOF:
		rc = qe_fail(QE_ECOMM,
			     "link_recv: link '%s' was closed by the sending rank (it closed the link or died) while "
			     "message %llu (%zu bytes) was awaited",
			     l->name, k, bytes);
		break;
	case IO_TIMEOUT:
		rc = qe_fail(QE_ECOMM, "link_recv: link '%s': message %llu (%zu bytes) did not arrive within %d ms (QE_COMM_TIMEOUT_MS)",
			     l->name, k, bytes, l->timeout_ms);
		break;
	case IO_ABORT:
		rc = qe_fail(QE_ECOMM, "link_recv: link '%s' was aborted (a peer failed) while message %llu (%zu bytes) was awaited",
			     l->name, k, bytes);
		break;
	default:
		rc = qe_fail(QE_ECOMM, "link_recv: link '%s': reading message %llu (%zu bytes): %s", l->name, k, bytes,
			     strerror(e));
		break;
	}
	set_err(l, rc);
	return qe__cpu_stream_fail(s, rc);
}

int qe__cpu_link_recv(qe_link *l, qe_stream *s, void *buf, size_t bytes)
{
	int rc = link_ready(l, s, buf, bytes, 0, "link_recv");
	if (rc)
		return qe__cpu_stream_fail(s, rc);
	double deadline = now_ms() + l->timeout_ms;
	unsigned char h[HDR_BYTES];
	int e = 0, io;
	if (!l->connected) {
		put_hdr(h, CONNECT_MAGIC, 0, 0);
		if ((io = write_full(l, l->fd, h, sizeof(h), deadline, &e)))
			return recv_fail(l, s, io, e, bytes);
		l->connected = 1;
	}
	io = read_full(l, l->fd, h, sizeof(h), deadline, &e);
	if (io)
		return recv_fail(l, s, io, e, bytes);
	uint32_t magic, seq;
	uint64_t len;
	get_hdr(h, &magic, &seq, &len);
	if (magic != MSG_MAGIC || seq != (uint32_t)l->nrecv)
		rc = qe_fail(QE_ECOMM, "link_recv: link '%s': expected message %llu, got a header with magic 0x%08x, number %u",
			     l->name, (unsigned long long)l->nrecv, magic, seq);
	else if (len != bytes)
		rc = qe_fail(QE_ECOMM, "link_recv: link '%s': message %llu has %llu bytes, the receive expects %zu", l->name,
			     (unsigned long long)l->nrecv, (unsigned long long)len, bytes);
	if (rc) {
		set_err(l, rc);
		return qe__cpu_stream_fail(s, rc);
	}
	io = read_full(l, l->fd, buf, bytes, deadline, &e);
	if (io)
		return recv_fail(l, s, io, e, bytes);
	l->nrecv++;
	return QE_OK;
}

/* ---- health, abort, close ------------------------------------------------- */

int qe__cpu_link_check(qe_link *l)
{
	if (!l)
		return qe_fail(QE_EINVAL, "link_check: NULL link");
	if (is_aborted(l))
		return qe_fail(QE_ECOMM, "link_check: link '%s' was aborted (a peer failed)", l->name);
	int rc = QE_OK;
	pthread_mutex_lock(&l->mu);
	if (l->err)
		rc = qe_fail(l->err, "link_check: %s", l->errmsg);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

void qe__cpu_link_abort(qe_link *l)
{
	if (!l || atomic_exchange(&l->aborted, 1))
		return;
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR); /* wakes a blocked read or write here, and the peer's */
	pthread_mutex_lock(&l->mu);
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

void qe__cpu_link_close(qe_link *l)
{
	if (!l)
		return;
	if (l->has_writer) {
		int flush = l->timeout_ms < CLOSE_FLUSH_MS ? l->timeout_ms : CLOSE_FLUSH_MS;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += flush / 1000;
		until.tv_nsec += (long)(flush % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_broadcast(&l->cv);
		int timed_out = 0;
		while ((l->head || l->busy) && !l->err && !is_aborted(l) && !timed_out)
			timed_out = pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT;
		int unsent = 0;
		for (link_msg *m = l->head; m; m = m->next)
			unsent++;
		unsent += l->busy;
		int failed = l->err || is_aborted(l);
		pthread_mutex_unlock(&l->mu);
		if (unsent && !failed)
			qe_log(QE_LOG_WARN, "closing link '%s': %d message(s) still unsent after %d ms are dropped", l->name,
			       unsent, flush);
		if (unsent)
			qe__cpu_link_abort(l); /* the writer may be waiting on a receiver that stopped reading */
		pthread_join(l->writer, NULL);
	}
	link_free(l);
}
