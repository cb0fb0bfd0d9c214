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
 * Only the job's own receiver gets in (issue 23): cpu_link_connect.c makes
 * the ids and joins a link's two ends by a handshake that proves the job
 * secret.
 */
#define _GNU_SOURCE
#include "runtime/backend/cpu/cpu_link.h"
#include "runtime/backend/cpu/cpu_link_int.h"
#include "runtime/backend/cpu/cpu_stream.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/launch_vars.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define DEFAULT_TIMEOUT_MS 600000
/* How long a sender's close waits for its queue to drain before dropping it. */
#define CLOSE_FLUSH_MS 10000
/* Longest sleep between looks at the abort flag while waiting on a socket. */
#define SLICE_MS 100

static int env_timeout_ms(void)
{
	const char *v = qe_launch_var("QE_COMM_TIMEOUT_MS");
	if (v && *v) {
		char *end;
		errno = 0;
		long t = strtol(v, &end, 10);
		if (!errno && !*end && t > 0 && t <= INT_MAX)
			return (int)t;
	}
	return DEFAULT_TIMEOUT_MS;
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
			double left = deadline - qe__cpu_link_now_ms();
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
int qe__cpu_link_read_full(qe_link *l, int fd, void *buf, size_t n, double deadline, int *err)
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

int qe__cpu_link_write_full(qe_link *l, int fd, const void *buf, size_t n, double deadline, int *err)
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

const char *qe__cpu_link_io_what(int io, int err)
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

/* ---- opening --------------------------------------------------------------- */

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
	int rc = qe__cpu_link_id_name(id, l->name, "link_open");
	if (!rc)
		rc = l->is_sender ? qe__cpu_link_accept_receiver(l) : qe__cpu_link_connect_sender(l);
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
		int e = 0, io = qe__cpu_link_write_full(l, l->fd, m->data, m->len, -1, &e);
		uint32_t magic, seq;
		uint64_t len;
		qe__cpu_link_get_hdr(m->data, &magic, &seq, &len);
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
	int e = 0, io = qe__cpu_link_read_full(l, l->fd, h, sizeof(h), qe__cpu_link_now_ms() + l->timeout_ms, &e);
	uint32_t magic = 0, seq;
	uint64_t len;
	if (io == IO_OK)
		qe__cpu_link_get_hdr(h, &magic, &seq, &len);
	int rc = QE_OK;
	if (io == IO_TIMEOUT)
		rc = qe_fail(QE_ECOMM,
			     "link_send: link '%s': the receiving rank made no receive within %d ms of the first send "
			     "(QE_COMM_TIMEOUT_MS); do both ranks send first on a pair of links?",
			     l->name, l->timeout_ms);
	else if (io != IO_OK)
		rc = qe_fail(QE_ECOMM, "link_send: link '%s': %s while waiting for the receiver's first receive", l->name,
			     qe__cpu_link_io_what(io, e));
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
	qe__cpu_link_put_hdr(m->data, MSG_MAGIC, (uint32_t)l->nsent, bytes);
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
	double deadline = qe__cpu_link_now_ms() + l->timeout_ms;
	unsigned char h[HDR_BYTES];
	int e = 0, io;
	if (!l->connected) {
		qe__cpu_link_put_hdr(h, CONNECT_MAGIC, 0, 0);
		if ((io = qe__cpu_link_write_full(l, l->fd, h, sizeof(h), deadline, &e)))
			return recv_fail(l, s, io, e, bytes);
		l->connected = 1;
	}
	io = qe__cpu_link_read_full(l, l->fd, h, sizeof(h), deadline, &e);
	if (io)
		return recv_fail(l, s, io, e, bytes);
	uint32_t magic, seq;
	uint64_t len;
	qe__cpu_link_get_hdr(h, &magic, &seq, &len);
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
	io = qe__cpu_link_read_full(l, l->fd, buf, bytes, deadline, &e);
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
