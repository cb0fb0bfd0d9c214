/*
 * rendezvous.c - how rank processes find each other: the TCP handshake that
 * ends in a full mesh of connections (the job variables it starts from are
 * read in dist_env.c).
 *
 * Rank 0 listens on MASTER_ADDR:MASTER_PORT.  Every other rank connects
 * (retrying with backoff: it may start before rank 0), opens its own listener
 * on the local address it used to reach rank 0 (port 0: the kernel picks),
 * and announces rank, world size, run id and that address.  Rank 0 checks
 * each hello, refuses strays with a reason the stray prints, and once all
 * ranks joined sends every rank the table of listening addresses.  The
 * connection to rank 0 stays as the link to rank 0; rank i then connects to
 * every rank 0 < j < i and accepts from every j > i.  Connecting only
 * downwards and doing every connect before any accept cannot deadlock:
 * rank 1 only accepts, and each rank's connects need only lower ranks.
 *
 * Only the job's own ranks get in (issue 23).  Listeners sit where the job
 * is: rank 0 on MASTER_ADDR itself (or QE_LISTEN_ADDR), never on every
 * interface, so a local job on 127.0.0.1 cannot be reached from another
 * machine; the other ranks on the address that routes to rank 0.  And every
 * connection proves it knows the job secret (auth.h) without sending it:
 *
 *   connector -> hello (magic, version, world, rank, port, flags, run id,
 *                host, nonce_c)
 *   acceptor  -> challenge (nonce_a, HMAC acceptor-label(nonces, ranks, run id))
 *                or a refusal verdict when the hello is wrong
 *   connector -> proof (HMAC connector-label(the same))
 *   acceptor  -> verdict (at once on the mesh; rank 0 when all have joined)
 *
 * The accepting side (rendezvous_accept.c) handles many handshakes at
 * once, so a process that connects and stalls, or proves nothing, costs the
 * job nothing.  A rank is admitted only once its proof checks.
 *
 * Every handshake also carries a magic, a protocol version and the run id,
 * so a process of another job that reaches one of our ports is turned away
 * with a clear message instead of corrupting this one.
 */
#define _GNU_SOURCE
#include "runtime/comm/comm_int.h"
#include "runtime/comm/rendezvous_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/auth.h"
#include "runtime/comm/launch_vars.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define ENTRY_SIZE (RDV_HOST + 4)

int64_t qe_comm_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- socket helpers -------------------------------------------------------- */

/* 1 ready, 0 deadline passed, -1 error (errno). */
static int wait_fd(int fd, short ev, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - qe_comm_now_ms();
		struct pollfd p = { .fd = fd, .events = ev };
		int r;
		if (left <= 0)
			return 0;
		r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (r > 0)
			return 1;
		if (r == 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

/* Move exactly n bytes over a non-blocking socket before deadline. */
int qe__rdv_xfer(int fd, void *buf, size_t n, int writing, int64_t deadline)
{
	unsigned char *p = buf;
	while (n > 0) {
		ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0 && !writing)
			return IO_EOF;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(fd, writing ? POLLOUT : POLLIN, deadline);
			if (w == 0)
				return IO_TIMEOUT;
			if (w < 0)
				return IO_ERR;
			continue;
		}
		return IO_ERR;
	}
	return IO_OK;
}

static const char *io_text(int io)
{
	switch (io) {
	case IO_TIMEOUT:
		return "timed out";
	case IO_EOF:
		return "connection closed by the other side (process exited?)";
	default:
		return strerror(errno);
	}
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Copy a fixed-width NUL-padded wire string into a C string. */
static void get_str(char *dst, const unsigned char *p, size_t width)
{
	memcpy(dst, p, width);
	dst[width - 1] = '\0';
}

void qe__rdv_addr_text(const struct sockaddr *sa, socklen_t len, char *host, size_t hostlen, int *port)
{
	char serv[16];
	if (getnameinfo(sa, len, host, (socklen_t)hostlen, serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(host, hostlen, "?");
		*port = 0;
		return;
	}
	*port = atoi(serv);
}

/* A connect that landed on its own source port (TCP simultaneous open). */
static int self_connected(int fd)
{
	struct sockaddr_storage a, b;
	socklen_t la = sizeof(a), lb = sizeof(b);
	if (getsockname(fd, (struct sockaddr *)&a, &la) || getpeername(fd, (struct sockaddr *)&b, &lb))
		return 0;
	return la == lb && memcmp(&a, &b, la) == 0;
}

/*
 * Connect to host:port, retrying with backoff until deadline: the listener
 * may not exist yet.  what names the target in the message ("rank 0").
 */
static int connect_retry(int self, const char *what, const char *host, int port, int64_t deadline, int *out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *p;
	char ps[16];
	int64_t backoff = 10;
	int last_err = ETIMEDOUT, gai, attempts = 0;
	snprintf(ps, sizeof(ps), "%d", port);
	gai = getaddrinfo(host, ps, &hints, &ai);
	if (gai)
		return qe_fail(QE_ECOMM, "rank %d: cannot resolve the address '%s' of %s: %s", self, host, what,
			       gai_strerror(gai));
	for (;;) {
		for (p = ai; p; p = p->ai_next) {
			int fd = socket(p->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), r, err = 0, cut = 0;
			socklen_t el = sizeof(err);
			if (fd < 0) {
				last_err = errno;
				continue;
			}
			attempts++;
			r = connect(fd, p->ai_addr, p->ai_addrlen);
			if (r < 0 && errno == EINPROGRESS) {
				int w = wait_fd(fd, POLLOUT, deadline);
				if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0)
					r = err ? -1 : 0, errno = err;
				else
					r = -1, cut = w == 0, errno = w == 0 ? ETIMEDOUT : errno;
			}
			if (r == 0 && self_connected(fd))
				r = -1, errno = ECONNREFUSED;
			if (r == 0) {
				freeaddrinfo(ai);
				*out = fd;
				return 0;
			}
			/* Our own deadline cutting an attempt short says less than the error before it. */
			if (!cut || attempts == 1)
				last_err = errno;
			close(fd);
		}
		if (qe_comm_now_ms() >= deadline)
			break;
		sleep_ms(backoff < deadline - qe_comm_now_ms() ? backoff : deadline - qe_comm_now_ms());
		backoff = backoff * 2 > 250 ? 250 : backoff * 2;
	}
	freeaddrinfo(ai);
	return qe_fail(QE_ECOMM, "rank %d: could not connect to %s at %s:%d before the rendezvous timeout (%d attempts): %s",
		       self, what, host, port, attempts, strerror(last_err));
}

static void hello_pack(const rdv_hello *h, unsigned char *b)
{
	memset(b, 0, HELLO_SIZE);
	qe__rdv_put_u32(b, h->magic);
	qe__rdv_put_u32(b + 4, h->version);
	qe__rdv_put_u32(b + 8, h->world);
	qe__rdv_put_u32(b + 12, h->rank);
	qe__rdv_put_u32(b + 16, h->port);
	qe__rdv_put_u32(b + 20, h->flags);
	memcpy(b + 24, h->run_id, strnlen(h->run_id, QE_DIST_RUN_ID_MAX - 1));
	memcpy(b + 24 + QE_DIST_RUN_ID_MAX, h->host, strnlen(h->host, RDV_HOST - 1));
	memcpy(b + 24 + QE_DIST_RUN_ID_MAX + RDV_HOST, h->nonce, QE_AUTH_NONCE_BYTES);
}

void qe__rdv_hello_unpack(rdv_hello *h, const unsigned char *b)
{
	h->magic = qe__rdv_get_u32(b);
	h->version = qe__rdv_get_u32(b + 4);
	h->world = qe__rdv_get_u32(b + 8);
	h->rank = qe__rdv_get_u32(b + 12);
	h->port = qe__rdv_get_u32(b + 16);
	h->flags = qe__rdv_get_u32(b + 20);
	get_str(h->run_id, b + 24, QE_DIST_RUN_ID_MAX);
	get_str(h->host, b + 24 + QE_DIST_RUN_ID_MAX, RDV_HOST);
	memcpy(h->nonce, b + 24 + QE_DIST_RUN_ID_MAX + RDV_HOST, QE_AUTH_NONCE_BYTES);
}

/*
 * The proof of one side of a handshake: HMAC(secret, label || run id ||
 * world || connecting rank || accepting rank || both nonces).  The label
 * names the side, so the acceptor's proof is never a valid connector proof.
 */
int qe__rdv_mac(const qe_auth_key *key, int acceptor, const char *run_id, int world, int conn_rank,
		int acc_rank, const unsigned char *nc, const unsigned char *na, unsigned char *out)
{
	unsigned char ctx[QE_DIST_RUN_ID_MAX + 12 + 2 * QE_AUTH_NONCE_BYTES] = { 0 };
	memcpy(ctx, run_id, strnlen(run_id, QE_DIST_RUN_ID_MAX - 1));
	qe__rdv_put_u32(ctx + QE_DIST_RUN_ID_MAX, (uint32_t)world);
	qe__rdv_put_u32(ctx + QE_DIST_RUN_ID_MAX + 4, (uint32_t)conn_rank);
	qe__rdv_put_u32(ctx + QE_DIST_RUN_ID_MAX + 8, (uint32_t)acc_rank);
	memcpy(ctx + QE_DIST_RUN_ID_MAX + 12, nc, QE_AUTH_NONCE_BYTES);
	memcpy(ctx + QE_DIST_RUN_ID_MAX + 12 + QE_AUTH_NONCE_BYTES, na, QE_AUTH_NONCE_BYTES);
	return qe_auth_mac(key, acceptor ? "qeffect rendezvous v2 acceptor" : "qeffect rendezvous v2 connector", ctx,
			   sizeof(ctx), out);
}

int qe__rdv_send_verdict(int fd, int ok, const char *text, int64_t deadline)
{
	unsigned char b[VERDICT_SIZE] = { 0 };
	qe__rdv_put_u32(b, RDV_MAGIC);
	qe__rdv_put_u32(b + 4, (uint32_t)ok);
	snprintf((char *)b + 8, VERDICT_TEXT, "%s", text);
	return qe__rdv_xfer(fd, b, sizeof(b), 1, deadline);
}

/* Read the answer to our hello. */
static int read_verdict(int self, int fd, const char *what, const char *host, int port, int64_t deadline)
{
	unsigned char b[VERDICT_SIZE];
	char text[VERDICT_TEXT];
	int io = qe__rdv_xfer(fd, b, sizeof(b), 0, deadline);
	if (io != IO_OK)
		return qe_fail(QE_ECOMM, "rank %d: waiting for %s at %s:%d to admit it: %s", self, what, host, port,
			       io_text(io));
	if (qe__rdv_get_u32(b) != RDV_MAGIC)
		return qe_fail(QE_ECOMM, "rank %d: the listener at %s:%d is not a qeffect rank (bad magic)", self, host,
			       port);
	get_str(text, b + 8, VERDICT_TEXT);
	if (qe__rdv_get_u32(b + 4) != 1)
		return qe_fail(QE_ECOMM, "rank %d: %s at %s:%d refused it: %s", self, what, host, port, text);
	return 0;
}

/*
 * The connecting side's handshake on a fresh connection to rank peer: hello
 * with our nonce, the acceptor's challenge (its nonce and its proof, which
 * we check: a listener that squats the port learns nothing and is not
 * believed), our proof.  The verdict comes after, from read_verdict.
 */
static int say_hello(const qe_dist_env *env, const qe_auth_key *key, int fd, int peer, const char *what,
		     const char *host, int port, rdv_hello *h, int64_t deadline)
{
	unsigned char hb[HELLO_SIZE], cb[VERDICT_SIZE > CHAL_SIZE ? VERDICT_SIZE : CHAL_SIZE], pb[PROOF_SIZE];
	unsigned char mac[QE_AUTH_MAC_BYTES];
	int self = env->rank, rc, io;
	if ((rc = qe_auth_nonce(h->nonce)))
		return rc;
	h->flags = key->set ? RDV_FLAG_SECRET : 0;
	hello_pack(h, hb);
	io = qe__rdv_xfer(fd, hb, sizeof(hb), 1, deadline);
	if (io == IO_OK)
		io = qe__rdv_xfer(fd, cb, 8, 0, deadline);
	if (io != IO_OK)
		return qe_fail(QE_ECOMM, "rank %d: saying hello to %s at %s:%d: %s", self, what, host, port, io_text(io));
	if (qe__rdv_get_u32(cb) == RDV_MAGIC) {
		char text[VERDICT_TEXT];
		io = qe__rdv_xfer(fd, cb + 8, VERDICT_SIZE - 8, 0, deadline);
		if (io != IO_OK)
			return qe_fail(QE_ECOMM, "rank %d: reading the answer of %s at %s:%d: %s", self, what, host, port,
				       io_text(io));
		get_str(text, cb + 8, VERDICT_TEXT);
		return qe_fail(QE_ECOMM, "rank %d: %s at %s:%d refused it: %s", self, what, host, port, text);
	}
	if (qe__rdv_get_u32(cb) != CHAL_MAGIC)
		return qe_fail(QE_ECOMM, "rank %d: the listener at %s:%d is not a qeffect rank (bad magic)", self, host,
			       port);
	io = qe__rdv_xfer(fd, cb + 8, CHAL_SIZE - 8, 0, deadline);
	if (io != IO_OK)
		return qe_fail(QE_ECOMM, "rank %d: reading the challenge of %s at %s:%d: %s", self, what, host, port,
			       io_text(io));
	if ((rc = qe__rdv_mac(key, 1, env->run_id, env->world_size, self, peer, h->nonce, cb + 8, mac)))
		return rc;
	if (!qe_auth_equal(mac, cb + 8 + QE_AUTH_NONCE_BYTES))
		return qe_fail(QE_ECOMM,
			       "rank %d: the listener at %s:%d does not prove that it is %s of this job: its job secret "
			       "differs from ours (QE_JOB_SECRET / QE_JOB_SECRET_FILE)",
			       self, host, port, what);
	qe__rdv_put_u32(pb, PROOF_MAGIC);
	if ((rc = qe__rdv_mac(key, 0, env->run_id, env->world_size, self, peer, h->nonce, cb + 8, pb + 4)))
		return rc;
	io = qe__rdv_xfer(fd, pb, sizeof(pb), 1, deadline);
	if (io != IO_OK)
		return qe_fail(QE_ECOMM, "rank %d: sending our proof to %s at %s:%d: %s", self, what, host, port,
			       io_text(io));
	return 0;
}

static int make_listener(int self, const struct sockaddr *sa, socklen_t len, int backlog, int64_t deadline,
			 int retry_busy, int *out)
{
	int64_t backoff = 10;
	for (;;) {
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, zero = 0, e;
		char host[RDV_HOST];
		int port;
		if (fd < 0)
			return qe_fail(QE_ECOMM, "rank %d: socket: %s", self, strerror(errno));
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (sa->sa_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, sa, len) == 0 && listen(fd, backlog) == 0) {
			*out = fd;
			return 0;
		}
		e = errno;
		close(fd);
		if (!(retry_busy && e == EADDRINUSE) || qe_comm_now_ms() >= deadline) {
			qe__rdv_addr_text(sa, len, host, sizeof(host), &port);
			errno = e;
			return qe_fail(QE_ECOMM, "rank %d: cannot listen on %s:%d: %s", self, host, port, strerror(e));
		}
		sleep_ms(backoff);
		backoff = backoff * 2 > 250 ? 250 : backoff * 2;
	}
}

static void set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- rank 0 and the others ------------------------------------------------- */

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

/*
 * MASTER_ADDR is a host name (not an address, not localhost) and the job
 * may span hosts (the launcher does not say it is on one).  Such a name may
 * resolve to loopback on its own host only: Debian's /etc/hosts maps the
 * machine's own name to 127.0.1.1, and SLURM's node names are such names,
 * while the other hosts resolve it to a real address.
 */
static int master_is_host_name(const qe_dist_env *env)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *num = NULL;
	const char *h = env->master_addr;
	if (env->world_size < 2 || env->multi_host == 0 || !strcasecmp(h, "localhost") ||
	    !strncasecmp(h, "localhost.", 10))
		return 0;
	if (getaddrinfo(h, NULL, &hints, &num) == 0) {
		freeaddrinfo(num);
		return 0; /* an address: the user chose it */
	}
	return 1;
}

/* Rank 0's case of master_is_host_name: the name resolves to loopback only, here. */
static int own_name_on_loopback(const qe_dist_env *env, const struct addrinfo *ai)
{
	if (!master_is_host_name(env))
		return 0;
	for (; ai; ai = ai->ai_next)
		if (!is_loopback(ai->ai_addr))
			return 0;
	return 1;
}

/*
 * Rank 0 listens on QE_LISTEN_ADDR when set, else on MASTER_ADDR itself:
 * the interface the other ranks reach, and only that one (a job on
 * 127.0.0.1 is reachable from this host only).  The exception is
 * own_name_on_loopback: rank 0 cannot know which of its addresses the
 * other hosts will use, so it listens on every interface (the wildcard of
 * the family), says so, and the job secret keeps strangers out as on any
 * multi-host job.  where gets "host:port".
 */
static int root_listener(const qe_dist_env *env, int64_t deadline, int *lfd, char *where, size_t wl)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV },
			*ai, *p;
	const char *la = qe_launch_var("QE_LISTEN_ADDR");
	const char *host = la && la[0] ? la : env->master_addr, *var = la && la[0] ? "QE_LISTEN_ADDR" : "MASTER_ADDR";
	char ps[16], last[512] = "", shown[INET6_ADDRSTRLEN + 8] = "";
	int gai, rc = QE_ECOMM;
	snprintf(ps, sizeof(ps), "%d", env->master_port);
	gai = getaddrinfo(host, ps, &hints, &ai);
	if (gai)
		return qe_fail(QE_ECOMM, "rank 0: cannot resolve %s '%s'%s%s: %s", var, host, la && la[0] ? "" : " from ",
			       la && la[0] ? "" : env->master_from, gai_strerror(gai));
	if (!(la && la[0]) && own_name_on_loopback(env, ai)) {
		int port;
		hints.ai_family = ai->ai_family;
		qe__rdv_addr_text(ai->ai_addr, ai->ai_addrlen, shown, sizeof(shown), &port);
		freeaddrinfo(ai);
		gai = getaddrinfo(NULL, ps, &hints, &ai);
		if (gai)
			return qe_fail(QE_ECOMM, "rank 0: cannot make the wildcard address of port %s: %s", ps,
				       gai_strerror(gai));
		qe_log(QE_LOG_WARN,
		       "rank 0: MASTER_ADDR '%s' (%s) resolves to the loopback address %s on this host (as Debian's "
		       "/etc/hosts does for the machine's own name), which other hosts cannot reach: listening on "
		       "every interface instead, port %d (set QE_LISTEN_ADDR to the address the other hosts use, or "
		       "MASTER_ADDR to that address, to listen on one)",
		       env->master_addr, env->master_from, shown, env->master_port);
		host = ai->ai_family == AF_INET6 ? "::" : "0.0.0.0";
	}
	for (p = ai; p; p = p->ai_next) {
		rc = make_listener(0, p->ai_addr, p->ai_addrlen, env->world_size + 16, deadline, 1, lfd);
		if (rc == 0)
			break;
		snprintf(last, sizeof(last), "%s", qe_last_error());
	}
	freeaddrinfo(ai);
	snprintf(where, wl, "%s:%d", host, env->master_port);
	if (rc)
		return qe_fail(QE_ECOMM, "%s (%s='%s'%s)", last, var, host,
			       la && la[0] ? ""
					   : "; when MASTER_ADDR is not an address of rank 0's host, set QE_LISTEN_ADDR to "
					     "the one rank 0 listens on");
	qe_log(QE_LOG_DEBUG, "rank 0: listening on %s", where);
	return 0;
}

static int rendezvous_root(const qe_dist_env *env, const qe_auth_key *key, int64_t deadline, int *fds)
{
	char (*hosts)[RDV_HOST] = NULL, where[QE_DIST_ADDR_MAX + 16];
	int *ports = NULL, lfd = -1, rc, world = env->world_size;
	unsigned char *table = NULL;

	rc = root_listener(env, deadline, &lfd, where, sizeof(where));
	if (rc)
		return rc;
	if ((rc = qe_auth_policy(key, 0, world, where)))
		goto close_listener;
	hosts = calloc((size_t)world, RDV_HOST);
	ports = calloc((size_t)world, sizeof(int));
	table = calloc((size_t)world, ENTRY_SIZE);
	if (!hosts || !ports || !table) {
		rc = qe_fail(QE_ENOMEM, "rank 0: rendezvous table for %d ranks", world);
		goto close_listener;
	}
	qe_log(QE_LOG_DEBUG, "rank 0: waiting for %d ranks on port %d", world - 1, env->master_port);
	rc = qe__rdv_accept_ranks(env, key, lfd, 1, world - 1, deadline, fds, hosts, ports);
	if (rc)
		goto close_listener;
	for (int r = 1; r < world; r++) {
		memcpy(table + (size_t)r * ENTRY_SIZE, hosts[r], RDV_HOST);
		qe__rdv_put_u32(table + (size_t)r * ENTRY_SIZE + RDV_HOST, (uint32_t)ports[r]);
	}
	for (int r = 1; r < world; r++) {
		int io = qe__rdv_send_verdict(fds[r], 1, "ok", deadline);
		if (io == IO_OK)
			io = qe__rdv_xfer(fds[r], table, (size_t)world * ENTRY_SIZE, 1, deadline);
		if (io != IO_OK) {
			rc = qe_fail(QE_ECOMM, "rank 0: sending the rank table to rank %d failed: %s", r, io_text(io));
			goto close_listener;
		}
	}
close_listener:
	close(lfd);
	free(hosts);
	free(ports);
	free(table);
	return rc;
}

static int is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
}

/*
 * A rank's own listener for the mesh: on QE_LISTEN_ADDR when set, else on
 * the local address it reached rank 0 from (that address routes back to us,
 * and for a job on 127.0.0.1 it is 127.0.0.1).  lhost/lport: what we
 * announce; a wildcard QE_LISTEN_ADDR announces the routed address.  A rank
 * on rank 0's host that reached it over loopback because the master's host
 * name resolves to loopback there (master_is_host_name) would announce an
 * address no other host can reach: it listens on every interface instead
 * and announces the master's name, which every host resolves to this one.
 */
static int rank_listener(const qe_dist_env *env, int fd0, int64_t deadline, int *lfd, char *lhost, size_t hl,
			 int *lport)
{
	struct sockaddr_storage route, ss;
	socklen_t rl = sizeof(route), sl;
	const char *la = qe_launch_var("QE_LISTEN_ADDR");
	int self = env->rank, rc, dummy, by_name = 0;
	if (getsockname(fd0, (struct sockaddr *)&route, &rl) < 0)
		return qe_fail(QE_ECOMM, "rank %d: getsockname: %s", self, strerror(errno));
	if (la && la[0]) {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					  .ai_flags = AI_PASSIVE | AI_NUMERICSERV },
				*ai, *p;
		char last[512] = "";
		int gai = getaddrinfo(la, "0", &hints, &ai);
		if (gai)
			return qe_fail(QE_ECOMM, "rank %d: cannot resolve QE_LISTEN_ADDR '%s': %s", self, la, gai_strerror(gai));
		rc = QE_ECOMM;
		for (p = ai; p; p = p->ai_next) {
			rc = make_listener(self, p->ai_addr, p->ai_addrlen, env->world_size + 16, deadline, 0, lfd);
			if (rc == 0)
				break;
			snprintf(last, sizeof(last), "%s", qe_last_error());
		}
		freeaddrinfo(ai);
		if (rc)
			return qe_fail(QE_ECOMM, "%s (QE_LISTEN_ADDR='%s')", last, la);
	} else {
		ss = route;
		if (ss.ss_family == AF_INET6)
			((struct sockaddr_in6 *)&ss)->sin6_port = 0;
		else
			((struct sockaddr_in *)&ss)->sin_port = 0;
		if (is_loopback((struct sockaddr *)&route) && master_is_host_name(env) &&
		    strlen(env->master_addr) < hl) {
			by_name = 1;
			if (ss.ss_family == AF_INET6)
				((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
			else
				((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
		}
		if ((rc = make_listener(self, (struct sockaddr *)&ss, rl, env->world_size + 16, deadline, 0, lfd)))
			return rc;
	}
	sl = sizeof(ss);
	if (getsockname(*lfd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = qe_fail(QE_ECOMM, "rank %d: getsockname of its listener: %s", self, strerror(errno));
		close(*lfd);
		*lfd = -1;
		return rc;
	}
	qe__rdv_addr_text((struct sockaddr *)&ss, sl, lhost, hl, lport);
	if (by_name) {
		snprintf(lhost, hl, "%s", env->master_addr);
		qe_log(QE_LOG_INFO,
		       "rank %d: MASTER_ADDR '%s' resolves to loopback on this host (rank 0's): listening on every "
		       "interface and announcing '%s' to the other ranks",
		       self, env->master_addr, lhost);
	} else if (is_wildcard(&ss)) {
		qe__rdv_addr_text((struct sockaddr *)&route, rl, lhost, hl, &dummy);
	}
	return 0;
}

static int rendezvous_rank(const qe_dist_env *env, const qe_auth_key *key, int64_t deadline, int *fds)
{
	int self = env->rank, world = env->world_size, fd0 = -1, lfd = -1, rc, io, lport = 0;
	unsigned char *table = NULL;
	rdv_hello h = { .magic = RDV_MAGIC, .version = RDV_VERSION, .world = (uint32_t)world, .rank = (uint32_t)self };
	char lhost[RDV_HOST], where[QE_DIST_ADDR_MAX + 16];

	snprintf(where, sizeof(where), "%s:%d", env->master_addr, env->master_port);
	if ((rc = qe_auth_policy(key, self, world, where)))
		return rc;
	rc = connect_retry(self, "rank 0", env->master_addr, env->master_port, deadline, &fd0);
	if (rc && env->master_from[0]) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", qe_last_error());
		return qe_fail(rc, "%s (rank 0's address is %s)", why, env->master_from);
	}
	if (rc)
		return rc;
	fds[0] = fd0;
	rc = rank_listener(env, fd0, deadline, &lfd, lhost, sizeof(lhost), &lport);
	if (rc)
		return rc;

	snprintf(h.run_id, sizeof(h.run_id), "%s", env->run_id);
	snprintf(h.host, sizeof(h.host), "%s", lhost);
	h.port = (uint32_t)lport;
	rc = say_hello(env, key, fd0, 0, "rank 0", env->master_addr, env->master_port, &h, deadline);
	if (!rc)
		rc = read_verdict(self, fd0, "rank 0", env->master_addr, env->master_port, deadline);
	if (rc)
		goto close_listener;
	table = malloc((size_t)world * ENTRY_SIZE);
	if (!table) {
		rc = qe_fail(QE_ENOMEM, "rank %d: rendezvous table for %d ranks", self, world);
		goto close_listener;
	}
	io = qe__rdv_xfer(fd0, table, (size_t)world * ENTRY_SIZE, 0, deadline);
	if (io != IO_OK) {
		rc = qe_fail(QE_ECOMM, "rank %d: reading the rank table from rank 0: %s", self, io_text(io));
		goto close_listener;
	}

	h.port = 0;
	h.host[0] = '\0';
	for (int j = 1; j < self; j++) {
		char host[RDV_HOST], what[32];
		int port = (int)qe__rdv_get_u32(table + (size_t)j * ENTRY_SIZE + RDV_HOST);
		get_str(host, table + (size_t)j * ENTRY_SIZE, RDV_HOST);
		snprintf(what, sizeof(what), "rank %d", j);
		rc = connect_retry(self, what, host, port, deadline, &fds[j]);
		if (rc)
			goto close_listener;
		rc = say_hello(env, key, fds[j], j, what, host, port, &h, deadline);
		if (!rc)
			rc = read_verdict(self, fds[j], what, host, port, deadline);
		if (rc)
			goto close_listener;
	}
	if (self + 1 < world) {
		rc = qe__rdv_accept_ranks(env, key, lfd, self + 1, world - 1, deadline, fds, NULL, NULL);
		if (rc)
			goto close_listener;
	}
close_listener:
	close(lfd);
	free(table);
	return rc;
}

int qe_comm_rendezvous(const qe_dist_env *env, int timeout_ms, int *fds)
{
	int64_t deadline = qe_comm_now_ms() + timeout_ms;
	qe_auth_key key;
	int rc;
	for (int r = 0; r < env->world_size; r++)
		fds[r] = -1;
	rc = qe_auth_load(&key);
	if (!rc)
		rc = env->rank == 0 ? rendezvous_root(env, &key, deadline, fds) : rendezvous_rank(env, &key, deadline, fds);
	qe_auth_key_clear(&key);
	for (int r = 0; r < env->world_size; r++) {
		if (fds[r] < 0)
			continue;
		if (rc) {
			close(fds[r]);
			fds[r] = -1;
		} else {
			set_nodelay(fds[r]);
		}
	}
	return rc;
}

int qe_comm_free_port(const char *master_addr, int *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, gai;
	*port = 0;
	gai = getaddrinfo(master_addr ? master_addr : "127.0.0.1", NULL, &hints, &ai);
	if (gai)
		return qe_fail(QE_ECOMM, "cannot resolve master address '%s': %s", master_addr, gai_strerror(gai));
	/* The address itself, port 0: a free port where rank 0 will listen. */
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	sl = ai->ai_addrlen;
	freeaddrinfo(ai);
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)&ss)->sin_port = 0;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return qe_fail(QE_ECOMM, "picking a free port: socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		int e = errno;
		close(fd);
		return qe_fail(QE_ECOMM, "picking a free port on '%s': %s", master_addr ? master_addr : "127.0.0.1",
			       strerror(e));
	}
	close(fd);
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	return 0;
}
