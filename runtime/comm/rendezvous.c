/*
 * rendezvous.c - how rank processes find each other: the job variables and
 * the TCP handshake that ends in a full mesh of connections.
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
 * Every handshake carries a magic, a protocol version and the run id, so a
 * process of another job that reaches one of our ports is turned away with a
 * clear message instead of corrupting this one.
 */
#define _GNU_SOURCE
#include "runtime/comm/comm_int.h"

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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define RDV_MAGIC 0x56524551u /* "QERV" */
#define RDV_VERSION 1u
#define RDV_HOST 64
#define HELLO_SIZE (20 + QE_DIST_RUN_ID_MAX + RDV_HOST)
#define VERDICT_TEXT 200
#define VERDICT_SIZE (8 + VERDICT_TEXT)
#define ENTRY_SIZE (RDV_HOST + 4)
/* A connection that does not say hello within this time is dropped. */
#define HELLO_WAIT_MS 5000

int64_t qe_comm_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- job variables --------------------------------------------------------- */

void qe_dist_env_default(qe_dist_env *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = 0;
	out->world_size = 1;
	out->local_rank = 0;
	snprintf(out->master_addr, sizeof(out->master_addr), "127.0.0.1");
	out->master_port = QE_COMM_DEFAULT_PORT;
	snprintf(out->run_id, sizeof(out->run_id), "qeffect");
	out->timeout_ms = QE_COMM_DEFAULT_TIMEOUT_MS;
}

static int env_int(const char *name, int def, long lo, long hi, int *out)
{
	const char *s = getenv(name);
	char *end;
	long v;
	if (!s) {
		*out = def;
		return 0;
	}
	if (!(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end != '\0')
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	if (errno == ERANGE || v < lo || v > hi)
		return qe_fail(QE_EINVAL, "environment variable %s=%s is out of range [%ld, %ld]", name, s, lo, hi);
	*out = (int)v;
	return 0;
}

static int env_str(const char *name, const char *def, char *dst, size_t cap)
{
	const char *s = getenv(name);
	size_t i;
	if (!s)
		s = def;
	if (s[0] == '\0')
		return qe_fail(QE_EINVAL, "environment variable %s is set but empty", name);
	if (strlen(s) >= cap)
		return qe_fail(QE_EINVAL, "environment variable %s='%.40s...' is longer than %zu characters", name, s,
			       cap - 1);
	for (i = 0; s[i]; i++)
		if (iscntrl((unsigned char)s[i]) || s[i] == ' ')
			return qe_fail(QE_EINVAL, "environment variable %s='%s' contains a space or control character",
				       name, s);
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

int qe_dist_env_from_environ(qe_dist_env *out)
{
	qe_dist_env e;
	int rc;
	qe_dist_env_default(&e);
	qe_dist_env_default(out);
	if ((rc = env_int("WORLD_SIZE", 1, 1, 65536, &e.world_size)) ||
	    (rc = env_int("RANK", 0, 0, 65535, &e.rank)) ||
	    (rc = env_int("LOCAL_RANK", 0, 0, 65535, &e.local_rank)) ||
	    (rc = env_int("MASTER_PORT", QE_COMM_DEFAULT_PORT, 1, 65535, &e.master_port)) ||
	    (rc = env_int("QE_COMM_TIMEOUT_MS", QE_COMM_DEFAULT_TIMEOUT_MS, 1, INT_MAX, &e.timeout_ms)) ||
	    (rc = env_str("MASTER_ADDR", "127.0.0.1", e.master_addr, sizeof(e.master_addr))) ||
	    (rc = env_str("QE_RUN_ID", "qeffect", e.run_id, sizeof(e.run_id))))
		return rc;
	if (e.rank >= e.world_size)
		return qe_fail(QE_EINVAL, "environment variable RANK=%d is not below WORLD_SIZE=%d%s", e.rank,
			       e.world_size, getenv("WORLD_SIZE") ? "" : " (WORLD_SIZE unset)");
	*out = e;
	return 0;
}

/* ---- socket helpers -------------------------------------------------------- */

enum { IO_OK = 0, IO_TIMEOUT, IO_EOF, IO_ERR };

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
static int xfer(int fd, void *buf, size_t n, int writing, int64_t deadline)
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

static void put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Copy a fixed-width NUL-padded wire string into a C string. */
static void get_str(char *dst, const unsigned char *p, size_t width)
{
	memcpy(dst, p, width);
	dst[width - 1] = '\0';
}

static void addr_text(const struct sockaddr *sa, socklen_t len, char *host, size_t hostlen, int *port)
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

typedef struct hello {
	uint32_t magic, version, world, rank, port;
	char run_id[QE_DIST_RUN_ID_MAX];
	char host[RDV_HOST];
} hello;

static void hello_pack(const hello *h, unsigned char *b)
{
	memset(b, 0, HELLO_SIZE);
	put_u32(b, h->magic);
	put_u32(b + 4, h->version);
	put_u32(b + 8, h->world);
	put_u32(b + 12, h->rank);
	put_u32(b + 16, h->port);
	memcpy(b + 20, h->run_id, strnlen(h->run_id, QE_DIST_RUN_ID_MAX - 1));
	memcpy(b + 20 + QE_DIST_RUN_ID_MAX, h->host, strnlen(h->host, RDV_HOST - 1));
}

static void hello_unpack(hello *h, const unsigned char *b)
{
	h->magic = get_u32(b);
	h->version = get_u32(b + 4);
	h->world = get_u32(b + 8);
	h->rank = get_u32(b + 12);
	h->port = get_u32(b + 16);
	get_str(h->run_id, b + 20, QE_DIST_RUN_ID_MAX);
	get_str(h->host, b + 20 + QE_DIST_RUN_ID_MAX, RDV_HOST);
}

static int send_verdict(int fd, int ok, const char *text, int64_t deadline)
{
	unsigned char b[VERDICT_SIZE] = { 0 };
	put_u32(b, RDV_MAGIC);
	put_u32(b + 4, (uint32_t)ok);
	snprintf((char *)b + 8, VERDICT_TEXT, "%s", text);
	return xfer(fd, b, sizeof(b), 1, deadline);
}

/*
 * Read a hello on a fresh connection and judge it.  Returns 1 admitted (rank
 * in *rank), 0 turned away (connection closed, reason logged).  lo..hi are the
 * ranks expected here; taken[] marks those already connected.
 */
static int admit(const qe_dist_env *env, int fd, int lo, int hi, const int *taken, int64_t deadline, hello *h)
{
	unsigned char b[HELLO_SIZE];
	char why[VERDICT_TEXT] = "";
	int64_t dl = qe_comm_now_ms() + HELLO_WAIT_MS;
	int io = xfer(fd, b, sizeof(b), 0, dl < deadline ? dl : deadline);
	if (io != IO_OK) {
		qe_log(QE_LOG_WARN, "rank %d: dropped a connection that sent no hello: %s", env->rank, io_text(io));
		return 0;
	}
	hello_unpack(h, b);
	if (h->magic != RDV_MAGIC) {
		qe_log(QE_LOG_WARN, "rank %d: dropped a connection that is not a qeffect rank (bad magic 0x%08x)",
		       env->rank, h->magic);
		return 0;
	}
	if (h->version != RDV_VERSION)
		snprintf(why, sizeof(why), "protocol version %u, rank %d speaks %u", h->version, env->rank, RDV_VERSION);
	else if (strcmp(h->run_id, env->run_id) != 0)
		snprintf(why, sizeof(why), "run id '%s' does not match rank %d's run id '%s' (QE_RUN_ID)", h->run_id,
			 env->rank, env->run_id);
	else if ((int)h->world != env->world_size)
		snprintf(why, sizeof(why), "WORLD_SIZE=%u does not match rank %d's WORLD_SIZE=%d", h->world, env->rank,
			 env->world_size);
	else if ((int)h->rank < lo || (int)h->rank > hi)
		snprintf(why, sizeof(why), "rank %u is not expected here (rank %d accepts ranks %d..%d)", h->rank,
			 env->rank, lo, hi);
	else if (taken[h->rank])
		snprintf(why, sizeof(why), "rank %u has already joined", h->rank);
	else if (lo > 0 && env->rank == 0 && (h->port == 0 || h->port > 65535))
		snprintf(why, sizeof(why), "rank %u announced an invalid port %u", h->rank, h->port);
	if (why[0]) {
		qe_log(QE_LOG_WARN, "rank %d: refused a connection from rank %u: %s", env->rank, h->rank, why);
		send_verdict(fd, 0, why, qe_comm_now_ms() + 1000);
		return 0;
	}
	return 1;
}

/* Read the answer to our hello. */
static int read_verdict(int self, int fd, const char *what, const char *host, int port, int64_t deadline)
{
	unsigned char b[VERDICT_SIZE];
	char text[VERDICT_TEXT];
	int io = xfer(fd, b, sizeof(b), 0, deadline);
	if (io != IO_OK)
		return qe_fail(QE_ECOMM, "rank %d: waiting for %s at %s:%d to admit it: %s", self, what, host, port,
			       io_text(io));
	if (get_u32(b) != RDV_MAGIC)
		return qe_fail(QE_ECOMM, "rank %d: the listener at %s:%d is not a qeffect rank (bad magic)", self, host,
			       port);
	get_str(text, b + 8, VERDICT_TEXT);
	if (get_u32(b + 4) != 1)
		return qe_fail(QE_ECOMM, "rank %d: %s at %s:%d refused it: %s", self, what, host, port, text);
	return 0;
}

static int make_listener(int self, const struct sockaddr *sa, socklen_t len, int backlog, int64_t deadline,
			 int retry_busy, int *out)
{
	int64_t backoff = 10;
	for (;;) {
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, zero = 0;
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
		addr_text(sa, len, host, sizeof(host), &port);
		if (!(retry_busy && errno == EADDRINUSE) || qe_comm_now_ms() >= deadline) {
			int e = errno;
			close(fd);
			return qe_fail(QE_ECOMM, "rank %d: cannot listen on %s:%d: %s", self, host, port, strerror(e));
		}
		close(fd);
		sleep_ms(backoff);
		backoff = backoff * 2 > 250 ? 250 : backoff * 2;
	}
}

static void set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Accept ranks lo..hi on lfd; fds[r] gets each connection. */
static int accept_ranks(const qe_dist_env *env, int lfd, int lo, int hi, int64_t deadline, int *fds,
			char (*hosts)[RDV_HOST], int *ports)
{
	int want = hi - lo + 1, got = 0, *taken = calloc((size_t)env->world_size, sizeof(int));
	if (!taken)
		return qe_fail(QE_ENOMEM, "rank %d: rendezvous table", env->rank);
	while (got < want) {
		hello h;
		int cfd, w = wait_fd(lfd, POLLIN, deadline);
		if (w <= 0) {
			char missing[256] = "";
			size_t used = 0;
			for (int r = lo; r <= hi && used + 16 < sizeof(missing); r++)
				if (!taken[r])
					used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
								 used ? ", " : "", r);
			free(taken);
			return qe_fail(QE_ECOMM, "rank %d: rendezvous %s: %d of %d ranks joined (missing: %s)", env->rank,
				       w == 0 ? "timed out" : strerror(errno), got, want, missing);
		}
		cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			continue; /* EAGAIN, ECONNABORTED, EINTR: look again */
		if (!admit(env, cfd, lo, hi, taken, deadline, &h)) {
			close(cfd);
			continue;
		}
		/* Mesh links are admitted at once; rank 0 answers when it has the table. */
		if (!hosts && send_verdict(cfd, 1, "ok", deadline) != IO_OK) {
			qe_log(QE_LOG_WARN, "rank %d: rank %u left while being admitted", env->rank, h.rank);
			close(cfd);
			continue;
		}
		taken[h.rank] = 1;
		fds[h.rank] = cfd;
		if (hosts)
			memcpy(hosts[h.rank], h.host, RDV_HOST);
		if (ports)
			ports[h.rank] = (int)h.port;
		got++;
	}
	free(taken);
	return 0;
}

static int rendezvous_root(const qe_dist_env *env, int64_t deadline, int *fds)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct sockaddr_storage ss;
	socklen_t sl;
	char (*hosts)[RDV_HOST] = NULL;
	int *ports = NULL, lfd = -1, rc, gai, world = env->world_size;
	unsigned char *table = NULL;

	/* Listen on every interface of MASTER_ADDR's family, as torchrun's store does. */
	gai = getaddrinfo(env->master_addr, NULL, &hints, &ai);
	if (gai)
		return qe_fail(QE_ECOMM, "rank 0: cannot resolve MASTER_ADDR '%s': %s", env->master_addr,
			       gai_strerror(gai));
	memset(&ss, 0, sizeof(ss));
	if (ai->ai_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_any;
		s6->sin6_port = htons((uint16_t)env->master_port);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_ANY);
		s4->sin_port = htons((uint16_t)env->master_port);
		sl = sizeof(*s4);
	}
	freeaddrinfo(ai);
	rc = make_listener(0, (struct sockaddr *)&ss, sl, world + 16, deadline, 1, &lfd);
	if (rc)
		return rc;
	hosts = calloc((size_t)world, RDV_HOST);
	ports = calloc((size_t)world, sizeof(int));
	table = calloc((size_t)world, ENTRY_SIZE);
	if (!hosts || !ports || !table) {
		rc = qe_fail(QE_ENOMEM, "rank 0: rendezvous table for %d ranks", world);
		goto out;
	}
	qe_log(QE_LOG_DEBUG, "rank 0: waiting for %d ranks on port %d", world - 1, env->master_port);
	rc = accept_ranks(env, lfd, 1, world - 1, deadline, fds, hosts, ports);
	if (rc)
		goto out;
	for (int r = 1; r < world; r++) {
		memcpy(table + (size_t)r * ENTRY_SIZE, hosts[r], RDV_HOST);
		put_u32(table + (size_t)r * ENTRY_SIZE + RDV_HOST, (uint32_t)ports[r]);
	}
	for (int r = 1; r < world; r++) {
		int io = send_verdict(fds[r], 1, "ok", deadline);
		if (io == IO_OK)
			io = xfer(fds[r], table, (size_t)world * ENTRY_SIZE, 1, deadline);
		if (io != IO_OK) {
			rc = qe_fail(QE_ECOMM, "rank 0: sending the rank table to rank %d failed: %s", r, io_text(io));
			goto out;
		}
	}
out:
	close(lfd);
	free(hosts);
	free(ports);
	free(table);
	return rc;
}

static int rendezvous_rank(const qe_dist_env *env, int64_t deadline, int *fds)
{
	int self = env->rank, world = env->world_size, fd0 = -1, lfd = -1, rc, io, lport;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	unsigned char hb[HELLO_SIZE], *table = NULL;
	hello h = { .magic = RDV_MAGIC, .version = RDV_VERSION, .world = (uint32_t)world, .rank = (uint32_t)self };
	char lhost[RDV_HOST];

	rc = connect_retry(self, "rank 0", env->master_addr, env->master_port, deadline, &fd0);
	if (rc)
		return rc;
	fds[0] = fd0;
	/* Listen where we reached rank 0 from: that address routes back to us. */
	if (getsockname(fd0, (struct sockaddr *)&ss, &sl) < 0)
		return qe_fail(QE_ECOMM, "rank %d: getsockname: %s", self, strerror(errno));
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)&ss)->sin_port = 0;
	rc = make_listener(self, (struct sockaddr *)&ss, sl, world + 16, deadline, 0, &lfd);
	if (rc)
		return rc;
	sl = sizeof(ss);
	getsockname(lfd, (struct sockaddr *)&ss, &sl);
	addr_text((struct sockaddr *)&ss, sl, lhost, sizeof(lhost), &lport);

	snprintf(h.run_id, sizeof(h.run_id), "%s", env->run_id);
	snprintf(h.host, sizeof(h.host), "%s", lhost);
	h.port = (uint32_t)lport;
	hello_pack(&h, hb);
	io = xfer(fd0, hb, sizeof(hb), 1, deadline);
	if (io != IO_OK) {
		rc = qe_fail(QE_ECOMM, "rank %d: saying hello to rank 0 at %s:%d: %s", self, env->master_addr,
			     env->master_port, io_text(io));
		goto out;
	}
	rc = read_verdict(self, fd0, "rank 0", env->master_addr, env->master_port, deadline);
	if (rc)
		goto out;
	table = malloc((size_t)world * ENTRY_SIZE);
	if (!table) {
		rc = qe_fail(QE_ENOMEM, "rank %d: rendezvous table for %d ranks", self, world);
		goto out;
	}
	io = xfer(fd0, table, (size_t)world * ENTRY_SIZE, 0, deadline);
	if (io != IO_OK) {
		rc = qe_fail(QE_ECOMM, "rank %d: reading the rank table from rank 0: %s", self, io_text(io));
		goto out;
	}

	h.port = 0;
	h.host[0] = '\0';
	hello_pack(&h, hb);
	for (int j = 1; j < self; j++) {
		char host[RDV_HOST], what[32];
		int port = (int)get_u32(table + (size_t)j * ENTRY_SIZE + RDV_HOST);
		get_str(host, table + (size_t)j * ENTRY_SIZE, RDV_HOST);
		snprintf(what, sizeof(what), "rank %d", j);
		rc = connect_retry(self, what, host, port, deadline, &fds[j]);
		if (rc)
			goto out;
		io = xfer(fds[j], hb, sizeof(hb), 1, deadline);
		if (io != IO_OK) {
			rc = qe_fail(QE_ECOMM, "rank %d: saying hello to rank %d at %s:%d: %s", self, j, host, port,
				     io_text(io));
			goto out;
		}
		rc = read_verdict(self, fds[j], what, host, port, deadline);
		if (rc)
			goto out;
	}
	if (self + 1 < world) {
		rc = accept_ranks(env, lfd, self + 1, world - 1, deadline, fds, NULL, NULL);
		if (rc)
			goto out;
	}
out:
	close(lfd);
	free(table);
	return rc;
}

int qe_comm_rendezvous(const qe_dist_env *env, int timeout_ms, int *fds)
{
	int64_t deadline = qe_comm_now_ms() + timeout_ms;
	int rc;
	for (int r = 0; r < env->world_size; r++)
		fds[r] = -1;
	rc = env->rank == 0 ? rendezvous_root(env, deadline, fds) : rendezvous_rank(env, deadline, fds);
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
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)ai->ai_family;
	sl = ai->ai_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	freeaddrinfo(ai);
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return qe_fail(QE_ECOMM, "picking a free port: socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		int e = errno;
		close(fd);
		return qe_fail(QE_ECOMM, "picking a free port: %s", strerror(e));
	}
	close(fd);
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	return 0;
}
