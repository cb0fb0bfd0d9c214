/*
 * socket_transport.c - the cpu transport: one background thread per comm
 * moves bytes between the per-peer queues and the mesh sockets.
 *
 * Why a thread: a send must never wait for the receiver to post its recv
 * (two ranks that both send 8 MiB before receiving would otherwise deadlock
 * on full kernel buffers).  The thread writes the send queues out and reads
 * every socket as soon as bytes arrive, parking whole messages in the
 * receiving peer's lane queue, so neither side's progress depends on the
 * other's call order.  Because it reads every link all the time, it also
 * sees at once when any peer's connection ends, and fails the comm; callers
 * blocked on a condition variable wake up with the cause.
 *
 * Wire format per message (little-endian): u32 magic "QEMG", u32 kind (user,
 * collective, goodbye), u32 tag, u32 reserved (0), u64 payload length, then
 * the payload.  A goodbye (sent by qe_comm_close after everything else) is
 * what tells a clean close from a dead process.
 *
 * When the comm fails (a dead peer, a timeout, a mismatch), the thread sends
 * every peer an abort carrying the cause and shuts its write side, then stops:
 * one failure ends the whole job promptly, and each rank's error names the
 * root cause instead of waiting for its own timeout.
 */
#define _GNU_SOURCE
#include "runtime/comm/comm_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* Bytes moved per socket per poll round, so one busy link cannot starve others. */
#define IO_BUDGET (16u << 20)
/* How long close waits for the peers' goodbyes once ours went out. */
#define LINGER_MS 2000

static void put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void q_push(qe_comm_queue *q, qe_comm_msg *m)
{
	m->next = NULL;
	if (q->tail)
		q->tail->next = m;
	else
		q->head = m;
	q->tail = m;
}

static qe_comm_msg *q_pop(qe_comm_queue *q)
{
	qe_comm_msg *m = q->head;
	if (m) {
		q->head = m->next;
		if (!q->head)
			q->tail = NULL;
	}
	return m;
}

/* Unlink the first message of q with tag (the service lane); NULL when there is none yet. */
static qe_comm_msg *q_take_tag(qe_comm_queue *q, uint32_t tag)
{
	qe_comm_msg *prev = NULL;
	for (qe_comm_msg *m = q->head; m; prev = m, m = m->next) {
		if (m->tag != tag)
			continue;
		if (prev)
			prev->next = m->next;
		else
			q->head = m->next;
		if (q->tail == m)
			q->tail = prev;
		m->next = NULL;
		return m;
	}
	return NULL;
}

static void msg_free(qe_comm_msg *m)
{
	if (m) {
		free(m->buf);
		free(m);
	}
}

static void q_clear(qe_comm_queue *q)
{
	qe_comm_msg *m;
	while ((m = q_pop(q)))
		msg_free(m);
}

static int lane_of(uint32_t kind)
{
	return kind == QE_KIND_USER ? QE_LANE_USER : kind == QE_KIND_SVC ? QE_LANE_SVC : QE_LANE_COLL;
}

const char *qe_comm_msg_name(int lane, uint32_t tag, char *buf, size_t len)
{
	static const char *coll[] = { "collective #0",    "barrier arrival",  "barrier release",
				      "allreduce contribution", "allreduce result", "broadcast",
				      "blob broadcast",   "gather contribution" };
	if (lane == QE_LANE_USER)
		snprintf(buf, len, "tag 0x%x", tag);
	else if (lane == QE_LANE_SVC)
		snprintf(buf, len, "service message 0x%x", tag);
	else if (tag < sizeof(coll) / sizeof(coll[0]))
		snprintf(buf, len, "%s", coll[tag]);
	else
		snprintf(buf, len, "collective #%u", tag);
	return buf;
}

static void wake(qe_comm *c)
{
	uint64_t one = 1;
	if (c->wake_fd >= 0 && write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, the thread will wake. */
	}
}

/* First failure wins; every waiter wakes up to see it. Caller holds the lock. */
static void fail_locked(qe_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_locked(qe_comm *c, const char *fmt, ...)
{
	if (!c->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->cause, sizeof(c->cause), fmt, ap);
		va_end(ap);
		c->failed = 1;
		qe_log(QE_LOG_DEBUG, "comm failed: %s", c->cause);
	}
	pthread_cond_broadcast(&c->cond);
	wake(c); /* the progress thread sends the aborts */
}

static void deadline_ts(int64_t deadline_ms, struct timespec *ts)
{
	ts->tv_sec = deadline_ms / 1000;
	ts->tv_nsec = (deadline_ms % 1000) * 1000000;
}

/* ---- progress thread ------------------------------------------------------- */

static void deliver(qe_comm *c, int p, qe_comm_msg *m)
{
	pthread_mutex_lock(&c->lock);
	if (m->kind == QE_KIND_ABORT) {
		fail_locked(c, "rank %d failed: %.*s", p, (int)m->len, m->buf ? (char *)m->buf : "");
		msg_free(m);
	} else {
		q_push(&c->peers[p].lanes[lane_of(m->kind)], m);
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Best effort: tell every peer why we failed, and end our side of each link. */
static void send_aborts(qe_comm *c, const char *cause)
{
	size_t n = strlen(cause);
	unsigned char msg[QE_MSG_HDR + sizeof(c->cause)];
	put_u32(msg, QE_MSG_MAGIC);
	put_u32(msg + 4, QE_KIND_ABORT);
	put_u32(msg + 8, 0);
	put_u32(msg + 12, 0);
	put_u64(msg + 16, n);
	memcpy(msg + QE_MSG_HDR, cause, n);
	for (int p = 0; p < c->world; p++) {
		qe_comm_peer *pe = &c->peers[p];
		if (pe->fd < 0 || pe->wr_shut)
			continue;
		/* Never inside a half-written message: the peer would misparse it. */
		if (!(pe->out && pe->out_off > 0) &&
		    send(pe->fd, msg, QE_MSG_HDR + n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* the peer may be gone already; its own side reports that */
		}
		shutdown(pe->fd, SHUT_WR);
	}
}

/* Read what is there; 0 to keep going, -1 when the comm failed. */
static int do_read(qe_comm *c, int p)
{
	qe_comm_peer *pe = &c->peers[p];
	size_t budget = IO_BUDGET;
	while (budget > 0) {
		ssize_t r;
		if (!pe->in) {
			r = recv(pe->fd, pe->hdr + pe->hdr_got, QE_MSG_HDR - pe->hdr_got, 0);
			if (r > 0) {
				uint32_t magic, kind, tag;
				uint64_t len;
				qe_comm_msg *m;
				budget = budget > (size_t)r ? budget - (size_t)r : 0;
				pe->hdr_got += (size_t)r;
				if (pe->hdr_got < QE_MSG_HDR)
					continue;
				pe->hdr_got = 0;
				magic = get_u32(pe->hdr);
				kind = get_u32(pe->hdr + 4);
				tag = get_u32(pe->hdr + 8);
				len = get_u64(pe->hdr + 16);
				if (magic != QE_MSG_MAGIC || kind < QE_KIND_USER || kind > QE_KIND_SVC ||
				    len > QE_MSG_MAX_LEN) {
					pthread_mutex_lock(&c->lock);
					fail_locked(c, "garbled message header from rank %d (magic 0x%08x, kind %u, length %llu)",
						    p, magic, kind, (unsigned long long)len);
					pthread_mutex_unlock(&c->lock);
					return -1;
				}
				if (kind == QE_KIND_BYE) {
					pthread_mutex_lock(&c->lock);
					pe->bye_seen = 1;
					pthread_cond_broadcast(&c->cond);
					pthread_mutex_unlock(&c->lock);
					continue;
				}
				m = calloc(1, sizeof(*m));
				if (m && len > 0 && !(m->buf = malloc((size_t)len))) {
					free(m);
					m = NULL;
				}
				if (!m) {
					pthread_mutex_lock(&c->lock);
					fail_locked(c, "out of memory for a %llu-byte message from rank %d",
						    (unsigned long long)len, p);
					pthread_mutex_unlock(&c->lock);
					return -1;
				}
				m->kind = kind;
				m->tag = tag;
				m->len = len;
				if (len == 0)
					deliver(c, p, m);
				else
					pe->in = m, pe->in_got = 0;
				continue;
			}
		} else {
			r = recv(pe->fd, pe->in->buf + pe->in_got, (size_t)pe->in->len - pe->in_got, 0);
			if (r > 0) {
				budget = budget > (size_t)r ? budget - (size_t)r : 0;
				pe->in_got += (size_t)r;
				if (pe->in_got == pe->in->len) {
					deliver(c, p, pe->in);
					pe->in = NULL;
				}
				continue;
			}
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		pthread_mutex_lock(&c->lock);
		/* After its goodbye a peer may close in any way, a reset included. */
		if ((r == 0 || errno == ECONNRESET) && !pe->in && !pe->hdr_got && pe->bye_seen) {
			pe->eof = 1;
			pthread_cond_broadcast(&c->cond);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (r == 0 && (pe->in || pe->hdr_got))
			fail_locked(c, "rank %d closed its connection in the middle of a message (process exited?)", p);
		else if (r == 0)
			fail_locked(c, "rank %d closed its connection (process exited?)", p);
		else if (errno == ECONNRESET)
			fail_locked(c, "the connection to rank %d was reset (process died?)", p);
		else
			fail_locked(c, "receiving from rank %d: %s", p, strerror(errno));
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	return 0;
}

/* Write what the socket takes; 0 to keep going, -1 when the comm failed. */
static int do_write(qe_comm *c, int p)
{
	qe_comm_peer *pe = &c->peers[p];
	size_t budget = IO_BUDGET;
	while (budget > 0) {
		ssize_t r;
		if (!pe->out) {
			pthread_mutex_lock(&c->lock);
			pe->out = q_pop(&pe->sendq);
			pe->writing = pe->out != NULL;
			pthread_mutex_unlock(&c->lock);
			if (!pe->out)
				return 0;
			pe->out_off = 0;
			pe->out_total = QE_MSG_HDR + (size_t)pe->out->len;
		}
		r = send(pe->fd, pe->out->buf + pe->out_off, pe->out_total - pe->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r > 0) {
			budget = budget > (size_t)r ? budget - (size_t)r : 0;
			pe->out_off += (size_t)r;
			if (pe->out_off == pe->out_total) {
				int bye = pe->out->kind == QE_KIND_BYE;
				msg_free(pe->out);
				pe->out = NULL;
				if (bye)
					shutdown(pe->fd, SHUT_WR);
				pthread_mutex_lock(&c->lock);
				pe->writing = 0;
				if (bye)
					pe->wr_shut = 1;
				pthread_cond_broadcast(&c->cond);
				pthread_mutex_unlock(&c->lock);
				if (bye)
					return 0;
			}
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		pthread_mutex_lock(&c->lock);
		if ((errno == EPIPE || errno == ECONNRESET) && pe->bye_seen && pe->out->kind == QE_KIND_BYE) {
			/* Both said goodbye and the peer is already gone: a clean end, not a failure. */
			msg_free(pe->out);
			pe->out = NULL;
			pe->writing = 0;
			pe->wr_shut = 1;
			pe->eof = 1;
			pthread_cond_broadcast(&c->cond);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (errno == EPIPE || errno == ECONNRESET) {
			if (pe->bye_seen)
				fail_locked(c, "rank %d closed its comm, but rank %d still had messages for it", p, c->rank);
			else
				fail_locked(c, "rank %d closed its connection (process exited?)", p);
		} else {
			fail_locked(c, "sending to rank %d: %s", p, strerror(errno));
		}
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	return 0;
}

static void *progress_main(void *arg)
{
	qe_comm *c = arg;
	int n = c->world;
	struct pollfd *pf = calloc((size_t)n + 1, sizeof(*pf));
	if (!pf) {
		pthread_mutex_lock(&c->lock);
		fail_locked(c, "rank %d: out of memory starting the transport thread", c->rank);
		pthread_mutex_unlock(&c->lock);
		return NULL;
	}
	for (;;) {
		int r;
		pthread_mutex_lock(&c->lock);
		if (c->failed) {
			char cause[sizeof(c->cause)];
			memcpy(cause, c->cause, sizeof(cause));
			pthread_mutex_unlock(&c->lock);
			send_aborts(c, cause);
			break;
		}
		if (c->stop) {
			pthread_mutex_unlock(&c->lock);
			break;
		}
		pf[0].fd = c->wake_fd;
		pf[0].events = POLLIN;
		pf[0].revents = 0;
		for (int p = 0; p < n; p++) {
			qe_comm_peer *pe = &c->peers[p];
			short ev = 0;
			if (pe->fd >= 0) {
				if (!pe->eof)
					ev |= POLLIN;
				if (!pe->wr_shut && (pe->out || pe->sendq.head))
					ev |= POLLOUT;
			}
			/* events 0 would still report POLLHUP and spin: leave the fd out. */
			pf[p + 1].fd = ev ? pe->fd : -1;
			pf[p + 1].events = ev;
			pf[p + 1].revents = 0;
		}
		pthread_mutex_unlock(&c->lock);
		r = poll(pf, (nfds_t)n + 1, -1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			pthread_mutex_lock(&c->lock);
			fail_locked(c, "rank %d: poll: %s", c->rank, strerror(errno));
			pthread_mutex_unlock(&c->lock);
			break;
		}
		if (pf[0].revents) {
			uint64_t v;
			if (read(c->wake_fd, &v, sizeof(v)) < 0) {
				/* EAGAIN: someone else drained it; nothing to do */
			}
		}
		for (int p = 0; p < n; p++) {
			short ev = pf[p + 1].events, rev = pf[p + 1].revents;
			if (!rev)
				continue;
			/* On failure the loop top sends the aborts and ends the thread. */
			if ((ev & POLLIN) && do_read(c, p))
				break;
			if ((ev & POLLOUT) && (rev & (POLLOUT | POLLERR | POLLHUP)) && do_write(c, p))
				break;
		}
	}
	free(pf);
	return NULL;
}

/* ---- queueing and waiting -------------------------------------------------- */

int qe_comm_post(qe_comm *c, int peer, uint32_t kind, uint32_t tag, const void *buf, size_t n)
{
	char name[64];
	qe_comm_msg *m;
	size_t off;
	if (peer < 0 || peer >= c->world)
		return qe_fail(QE_EINVAL, "rank %d: cannot send %s to rank %d: no such rank (world size %d)", c->rank,
			       qe_comm_msg_name(lane_of(kind), tag, name, sizeof(name)), peer, c->world);
	if (n > QE_MSG_MAX_LEN)
		return qe_fail(QE_EINVAL, "rank %d: message of %zu bytes to rank %d is too large", c->rank, n, peer);
	off = peer == c->rank ? 0 : QE_MSG_HDR;
	m = calloc(1, sizeof(*m));
	if (m && off + n > 0 && !(m->buf = malloc(off + n))) {
		free(m);
		m = NULL;
	}
	if (!m)
		return qe_fail(QE_ENOMEM, "rank %d: no memory to queue %zu bytes for rank %d", c->rank, n, peer);
	m->kind = kind;
	m->tag = tag;
	m->len = n;
	if (off) {
		put_u32(m->buf, QE_MSG_MAGIC);
		put_u32(m->buf + 4, kind);
		put_u32(m->buf + 8, tag);
		put_u32(m->buf + 12, 0);
		put_u64(m->buf + 16, n);
	}
	if (n)
		memcpy(m->buf + off, buf, n);

	pthread_mutex_lock(&c->lock);
	if (c->failed) {
		char cause[sizeof(c->cause)];
		memcpy(cause, c->cause, sizeof(cause));
		pthread_mutex_unlock(&c->lock);
		msg_free(m);
		return qe_fail(QE_ECOMM, "rank %d cannot send %s (%zu bytes) to rank %d: the comm failed earlier: %s",
			       c->rank, qe_comm_msg_name(lane_of(kind), tag, name, sizeof(name)), n, peer, cause);
	}
	if (peer == c->rank) {
		q_push(&c->peers[peer].lanes[lane_of(kind)], m);
		pthread_cond_broadcast(&c->cond);
	} else {
		q_push(&c->peers[peer].sendq, m);
	}
	pthread_mutex_unlock(&c->lock);
	if (peer != c->rank)
		wake(c);
	return 0;
}

int qe_comm_take(qe_comm *c, int peer, int lane, uint32_t tag, size_t n, void *dst, void **owned, size_t *got)
{
	char name[96], what[160], gotname[64];
	qe_comm_peer *pe;
	qe_comm_msg *m;
	int64_t deadline;
	if (peer < 0 || peer >= c->world)
		return qe_fail(QE_EINVAL, "rank %d: cannot receive %s from rank %d: no such rank (world size %d)", c->rank,
			       qe_comm_msg_name(lane, tag, name, sizeof(name)), peer, c->world);
	qe_comm_msg_name(lane, tag, name, sizeof(name));
	if (n != SIZE_MAX) {
		char plain[64];
		memcpy(plain, name, sizeof(plain));
		snprintf(name, sizeof(name), "%.40s (%zu bytes)", plain, n);
	}
	snprintf(what, sizeof(what), "%s from rank %d", name, peer);
	pe = &c->peers[peer];

	pthread_mutex_lock(&c->lock);
	if (c->failed)
		goto failed_before;
	deadline = qe_comm_now_ms() + c->timeout_ms;
	while (!(m = lane == QE_LANE_SVC ? q_take_tag(&pe->lanes[lane], tag) : pe->lanes[lane].head)) {
		struct timespec ts;
		if (c->failed)
			goto failed_while;
		if (pe->bye_seen) {
			/* The goodbye follows every message the peer sent: nothing more will come. */
			fail_locked(c, "rank %d closed its comm (qe_comm_close) while rank %d waited for %s", peer,
				    c->rank, what);
			goto failed_cause;
		}
		if (qe_comm_now_ms() >= deadline) {
			fail_locked(c, "rank %d timed out after %d ms waiting for %s (QE_COMM_TIMEOUT_MS)", c->rank,
				    c->timeout_ms, what);
			goto failed_cause;
		}
		deadline_ts(deadline, &ts);
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	if (lane != QE_LANE_SVC)
		q_pop(&pe->lanes[lane]);
	if (m->tag != tag || (n != SIZE_MAX && m->len != n)) {
		fail_locked(c, "rank %d: expected %s from rank %d, got %s (%llu bytes)", c->rank, name, peer,
			    qe_comm_msg_name(lane, m->tag, gotname, sizeof(gotname)), (unsigned long long)m->len);
		msg_free(m);
		goto failed_cause;
	}
	pthread_mutex_unlock(&c->lock);

	if (dst) {
		if (m->len)
			memcpy(dst, m->buf, (size_t)m->len);
	} else {
		if (!m->buf && !(m->buf = malloc(1))) {
			msg_free(m);
			return qe_fail(QE_ENOMEM, "rank %d: receiving %s", c->rank, what);
		}
		*owned = m->buf;
		m->buf = NULL;
	}
	if (got)
		*got = (size_t)m->len;
	msg_free(m);
	return 0;

failed_before: {
	char cause[sizeof(c->cause)];
	memcpy(cause, c->cause, sizeof(cause));
	pthread_mutex_unlock(&c->lock);
	return qe_fail(QE_ECOMM, "rank %d cannot receive %s: the comm failed earlier: %s", c->rank, what, cause);
}
failed_while: {
	char cause[sizeof(c->cause)];
	memcpy(cause, c->cause, sizeof(cause));
	pthread_mutex_unlock(&c->lock);
	return qe_fail(QE_ECOMM, "%s while rank %d waited for %s", cause, c->rank, what);
}
failed_cause: {
	char cause[sizeof(c->cause)];
	memcpy(cause, c->cause, sizeof(cause));
	pthread_mutex_unlock(&c->lock);
	return qe_fail(QE_ECOMM, "%s", cause);
}
}

/* ---- lifetime -------------------------------------------------------------- */

int qe_comm_transport_start(qe_comm *c)
{
	int rc;
	if (c->world == 1)
		return 0;
	rc = pthread_create(&c->thread, NULL, progress_main, c);
	if (rc)
		return qe_fail(QE_ECOMM, "rank %d: starting the transport thread: %s", c->rank, strerror(rc));
	c->thread_started = 1;
	return 0;
}

/* Wait (lock held) until done(c) or the comm failed or deadline; 1 when done. */
static int wait_until(qe_comm *c, int (*done)(qe_comm *), int64_t deadline)
{
	while (!c->failed && !done(c)) {
		struct timespec ts;
		if (qe_comm_now_ms() >= deadline)
			return 0;
		deadline_ts(deadline, &ts);
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	return !c->failed;
}

static int all_flushed(qe_comm *c)
{
	for (int p = 0; p < c->world; p++)
		if (c->peers[p].sendq.head || c->peers[p].writing)
			return 0;
	return 1;
}

static int all_shut(qe_comm *c)
{
	for (int p = 0; p < c->world; p++)
		if (c->peers[p].fd >= 0 && !c->peers[p].wr_shut)
			return 0;
	return 1;
}

static int all_eof(qe_comm *c)
{
	for (int p = 0; p < c->world; p++)
		if (c->peers[p].fd >= 0 && !c->peers[p].eof)
			return 0;
	return 1;
}

void qe_comm_transport_stop(qe_comm *c)
{
	if (!c->thread_started)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_mutex_unlock(&c->lock);
	wake(c);
	pthread_join(c->thread, NULL);
	c->thread_started = 0;
}

static void comm_free(qe_comm *c)
{
	if (c->peers) {
		for (int p = 0; p < c->world; p++) {
			qe_comm_peer *pe = &c->peers[p];
			if (pe->fd >= 0)
				close(pe->fd);
			q_clear(&pe->sendq);
			for (int l = 0; l < QE_NLANES; l++)
				q_clear(&pe->lanes[l]);
			msg_free(pe->out);
			msg_free(pe->in);
		}
		free(c->peers);
	}
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int qe_comm_open(const qe_dist_env *env, int timeout_ms, qe_comm **out)
{
	pthread_condattr_t ca;
	qe_comm *c;
	int *fds = NULL, rc;
	*out = NULL;
	if (!env || env->world_size < 1 || env->rank < 0 || env->rank >= env->world_size)
		return qe_fail(QE_EINVAL, "qe_comm_open: rank %d of world size %d is not a valid position",
			       env ? env->rank : -1, env ? env->world_size : -1);
	if (timeout_ms <= 0)
		timeout_ms = env->timeout_ms > 0 ? env->timeout_ms : QE_COMM_DEFAULT_TIMEOUT_MS;
	c = calloc(1, sizeof(*c));
	if (!c)
		return qe_fail(QE_ENOMEM, "qe_comm_open: comm handle");
	c->env = *env;
	c->rank = env->rank;
	c->world = env->world_size;
	c->timeout_ms = env->timeout_ms > 0 ? env->timeout_ms : QE_COMM_DEFAULT_TIMEOUT_MS;
	c->wake_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	c->peers = calloc((size_t)c->world, sizeof(*c->peers));
	if (!c->peers) {
		rc = qe_fail(QE_ENOMEM, "qe_comm_open: %d peers", c->world);
		goto stop_transport;
	}
	for (int p = 0; p < c->world; p++)
		c->peers[p].fd = -1;
	if (c->world == 1) {
		*out = c;
		return 0;
	}
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	fds = malloc((size_t)c->world * sizeof(int));
	if (c->wake_fd < 0 || !fds) {
		rc = qe_fail(QE_ENOMEM, "qe_comm_open: eventfd or socket table: %s", strerror(errno));
		goto stop_transport;
	}
	rc = qe_comm_rendezvous(env, timeout_ms, fds);
	if (rc)
		goto stop_transport;
	for (int p = 0; p < c->world; p++)
		c->peers[p].fd = fds[p];
	free(fds);
	fds = NULL;
	rc = qe_comm_transport_start(c);
	if (rc)
		goto stop_transport;
	/* Everyone connected everywhere before anyone returns. */
	{
		int keep = c->timeout_ms;
		c->timeout_ms = timeout_ms;
		rc = qe_comm_barrier(c);
		c->timeout_ms = keep;
		if (rc) {
			qe_fail_ctx(rc, "rank %d: rendezvous barrier", c->rank);
			goto stop_transport;
		}
	}
	qe_log(QE_LOG_DEBUG, "rank %d of %d: connected (run id '%s')", c->rank, c->world, env->run_id);
	*out = c;
	return 0;
stop_transport:
	free(fds);
	qe_comm_transport_stop(c);
	comm_free(c);
	return rc;
}

void qe_comm_close(qe_comm *c)
{
	if (!c)
		return;
	if (c->thread_started) {
		pthread_mutex_lock(&c->lock);
		if (!c->failed) {
			int ok = 1;
			for (int p = 0; p < c->world && ok; p++) {
				qe_comm_msg *m;
				if (c->peers[p].fd < 0)
					continue;
				m = calloc(1, sizeof(*m));
				if (m && !(m->buf = calloc(1, QE_MSG_HDR))) {
					free(m);
					m = NULL;
				}
				if (!m) {
					ok = 0; /* no goodbye: the peers will see us die, which is still safe */
					break;
				}
				m->kind = QE_KIND_BYE;
				put_u32(m->buf, QE_MSG_MAGIC);
				put_u32(m->buf + 4, QE_KIND_BYE);
				q_push(&c->peers[p].sendq, m);
			}
			wake(c);
			if (ok && wait_until(c, all_shut, qe_comm_now_ms() + c->timeout_ms))
				wait_until(c, all_eof, qe_comm_now_ms() + (c->timeout_ms < LINGER_MS ? c->timeout_ms : LINGER_MS));
		}
		pthread_mutex_unlock(&c->lock);
		qe_comm_transport_stop(c);
	}
	comm_free(c);
}

/* ---- small calls ----------------------------------------------------------- */

int qe_comm_rank(const qe_comm *c)
{
	return c->rank;
}

int qe_comm_world_size(const qe_comm *c)
{
	return c->world;
}

const qe_dist_env *qe_comm_env(const qe_comm *c)
{
	return &c->env;
}

void qe_comm_set_timeout(qe_comm *c, int timeout_ms)
{
	pthread_mutex_lock(&c->lock);
	if (timeout_ms > 0)
		c->timeout_ms = timeout_ms;
	pthread_mutex_unlock(&c->lock);
}

int qe_comm_failed(qe_comm *c)
{
	int f;
	pthread_mutex_lock(&c->lock);
	f = c->failed;
	pthread_mutex_unlock(&c->lock);
	return f;
}

const char *qe_comm_failure(qe_comm *c, char *buf, size_t len)
{
	pthread_mutex_lock(&c->lock);
	snprintf(buf, len, "%s", c->failed ? c->cause : "");
	pthread_mutex_unlock(&c->lock);
	return buf;
}

int qe_comm_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n)
{
	if (!c || (!buf && n))
		return qe_fail(QE_EINVAL, "qe_comm_send: NULL comm or buffer");
	return qe_comm_post(c, peer, QE_KIND_USER, tag, buf, n);
}

int qe_comm_recv(qe_comm *c, int peer, uint32_t tag, void *buf, size_t n)
{
	if (!c || (!buf && n) || n == SIZE_MAX)
		return qe_fail(QE_EINVAL, "qe_comm_recv: NULL comm or buffer");
	return qe_comm_take(c, peer, QE_LANE_USER, tag, n, buf ? buf : (void *)&n, NULL, NULL);
}

int qe_comm_svc_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n)
{
	if (!c || (!buf && n))
		return qe_fail(QE_EINVAL, "qe_comm_svc_send: NULL comm or buffer");
	return qe_comm_post(c, peer, QE_KIND_SVC, tag, buf, n);
}

int qe_comm_svc_recv(qe_comm *c, int peer, uint32_t tag, void **out, size_t *n)
{
	if (!c || !out || !n)
		return qe_fail(QE_EINVAL, "qe_comm_svc_recv: NULL argument");
	*out = NULL;
	*n = 0;
	return qe_comm_take(c, peer, QE_LANE_SVC, tag, SIZE_MAX, NULL, out, n);
}

int qe_comm_flush(qe_comm *c)
{
	int ok;
	char cause[sizeof(c->cause)];
	pthread_mutex_lock(&c->lock);
	ok = wait_until(c, all_flushed, qe_comm_now_ms() + c->timeout_ms);
	if (!ok && !c->failed)
		fail_locked(c, "rank %d timed out after %d ms flushing its sends (QE_COMM_TIMEOUT_MS)", c->rank,
			    c->timeout_ms);
	memcpy(cause, c->cause, sizeof(cause));
	pthread_mutex_unlock(&c->lock);
	return ok ? 0 : qe_fail(QE_ECOMM, "%s", cause);
}
