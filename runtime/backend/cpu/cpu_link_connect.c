/*
 * cpu_link_connect.c - how the two ends of a cpu device link (cpu_link.c)
 * meet: the ids, the listening sockets behind them, and the handshake that
 * lets in only the job's own receiver.
 *
 * The sending rank's link_id opens the listener and keeps it in a
 * process-wide table; the sender's link_open takes it from there and accepts
 * the receiver, whose link_open connects to it.
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
#include "runtime/backend/cpu/cpu_link_int.h"

#include <errno.h>
#include <fcntl.h>
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
#include "runtime/comm/launch_vars.h"
#include "runtime/core/log.h"
#include "runtime/core/rt_options.h"
#include "runtime/core/status.h"

#define ID_MAGIC "QECPULK1"
#define NONCE QE_AUTH_NONCE_BYTES
#define MAC QE_AUTH_MAC_BYTES
/* One connection's whole handshake must end within this; then it is dropped. */
#define HANDSHAKE_MS 5000
/* Handshakes under way at once on one listener; a new one beyond drops the oldest. */
#define PENDING_MAX 16
/* A receiver that finds no listener retries this long: the sender made it before handing out the id. */
#define CONNECT_RETRY_MS 5000

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

static void nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sa)
{
	size_t n = strlen(name);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* ---- ids ------------------------------------------------------------------ */

int qe__cpu_link_id_name(const void *id, char *name, const char *op)
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
		rnd = (uint64_t)(qe__cpu_link_now_ms() * 1e3) ^ (uint64_t)(uintptr_t)ls;
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

/* ---- the handshake: same uid, and proof of the job secret ------------------ */

/* The proof of one side: HMAC(secret, label || run id || link name || nonce_r || nonce_s). */
static int link_mac(const qe_auth_key *key, int sender, const char *name, const unsigned char *nr,
		    const unsigned char *ns, unsigned char *out)
{
	unsigned char ctx[64 + NAME_MAX_LEN + 1 + 2 * NONCE] = { 0 };
	const char *rid = qe_launch_var("QE_RUN_ID");
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
	qe__cpu_link_get_hdr(p->buf, &magic, &seq, &len);
	if (p->stage == 0) {
		unsigned char c[HDR_BYTES + NONCE + MAC];
		if (magic != HELLO_MAGIC || len != n + NONCE || memcmp(p->buf + HDR_BYTES, l->name, n) != 0)
			return hs_refuse(l, p, "it did not introduce itself as this link's receiver");
		memcpy(p->nr, p->buf + HDR_BYTES + n, NONCE);
		if (qe_auth_nonce(p->ns) || link_mac(key, 1, l->name, p->nr, p->ns, c + HDR_BYTES + NONCE))
			return hs_refuse(l, p, qe_last_error());
		qe__cpu_link_put_hdr(c, CHAL_MAGIC, 0, NONCE + MAC);
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
		qe__cpu_link_put_hdr(h, ACK_MAGIC, 0, 0);
		if (send(p->fd, h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(h))
			return hs_refuse(l, p, "it left before it was admitted");
	}
	return HS_DONE;
}

/*
 * Sender: take the listener made by link_id, and accept connections on it
 * until one proves it is this link's receiver; every other one is dropped.
 */
int qe__cpu_link_accept_receiver(qe_link *l)
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
	double deadline = qe__cpu_link_now_ms() + l->timeout_ms;
	while (l->fd < 0) {
		double now = qe__cpu_link_now_ms(), wake = deadline;
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
			p->until = qe__cpu_link_now_ms() + HANDSHAKE_MS;
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
	int d = atoi(qe_rt_options_get()->link_test_connect_delay_ms);
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
	qe__cpu_link_put_hdr(h, HELLO_MAGIC, 0, n + NONCE);
	memcpy(h + HDR_BYTES, l->name, n);
	memcpy(h + HDR_BYTES + n, nr, NONCE);
	io = qe__cpu_link_write_full(NULL, l->fd, h, HDR_BYTES + n + NONCE, deadline, &e);
	if (!io)
		io = qe__cpu_link_read_full(NULL, l->fd, h, HDR_BYTES, deadline, &e);
	if (io == IO_EOF)
		return qe_fail(QE_ECOMM,
			       "link_open: the sender of link '%s' (pid %d) refused this receiver (does it have the same "
			       "job secret?)",
			       l->name, pid);
	if (io)
		return qe_fail(QE_ECOMM, "link_open: handshake with the sender of link '%s': %s", l->name,
			       qe__cpu_link_io_what(io, e));
	qe__cpu_link_get_hdr(h, &magic, &seq, &len);
	if (magic != CHAL_MAGIC || len != sizeof(c))
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' answered with a bad handshake", l->name);
	if ((io = qe__cpu_link_read_full(NULL, l->fd, c, sizeof(c), deadline, &e)))
		return qe_fail(QE_ECOMM, "link_open: reading the challenge of link '%s': %s", l->name,
			       qe__cpu_link_io_what(io, e));
	if ((rc = link_mac(key, 1, l->name, nr, c, mac)))
		return rc;
	if (!qe_auth_equal(mac, c + NONCE))
		return qe_fail(QE_ECOMM,
			       "link_open: the listener of link '%s' (pid %d) does not prove that it is the sending rank "
			       "of this job (QE_JOB_SECRET / QE_JOB_SECRET_FILE differ?)",
			       l->name, pid);
	qe__cpu_link_put_hdr(h, PROOF_MAGIC, 0, MAC);
	if ((rc = link_mac(key, 0, l->name, nr, c, h + HDR_BYTES)))
		return rc;
	io = qe__cpu_link_write_full(NULL, l->fd, h, HDR_BYTES + MAC, deadline, &e);
	if (!io)
		io = qe__cpu_link_read_full(NULL, l->fd, h, HDR_BYTES, deadline, &e);
	if (io == IO_EOF)
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' (pid %d) refused our proof of the job secret",
			       l->name, pid);
	if (io)
		return qe_fail(QE_ECOMM, "link_open: handshake with the sender of link '%s': %s", l->name,
			       qe__cpu_link_io_what(io, e));
	qe__cpu_link_get_hdr(h, &magic, &seq, &len);
	if (magic != ACK_MAGIC)
		return qe_fail(QE_ECOMM, "link_open: the sender of link '%s' answered with a bad handshake", l->name);
	return QE_OK;
}

/* Receiver: connect to the sender's listener (it exists before the id is handed out), then the handshake. */
int qe__cpu_link_connect_sender(qe_link *l)
{
	struct sockaddr_un sa;
	socklen_t alen = abstract_addr(l->name, &sa);
	int delay = test_connect_delay_ms();
	if (delay)
		nap_ms(delay);
	int retry = l->timeout_ms < CONNECT_RETRY_MS ? l->timeout_ms : CONNECT_RETRY_MS;
	double until = qe__cpu_link_now_ms() + retry, deadline = qe__cpu_link_now_ms() + l->timeout_ms;
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
		if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) || qe__cpu_link_now_ms() > until) {
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
