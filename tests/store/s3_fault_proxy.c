/*
 * s3_fault_proxy.c - a fault-injecting HTTP proxy for the S3 tests
 * (tests/cli/s3_faults.sh): it listens on 127.0.0.1, forwards each request
 * to s3rver and, per the mode it reads from a file before every request,
 * spoils the answer the way a broken proxy, portal or network would:
 *
 *   pass                  forward unchanged
 *   html-list [SUB]       a listing (GET ...?list-type=2) answers HTTP 200 with an HTML page
 *   truncate-list [SUB]   a listing's body is cut in half (Content-Length says the cut size,
 *                         so the client sees a complete HTTP answer)
 *   empty-list [SUB]      a listing answers HTTP 200 with an empty body
 *   flag-list [SUB]       a listing says IsTruncated true but has no continuation token
 *   trickle N MS          every answer (status line, headers and body) is sent N bytes at a
 *                         time every MS milliseconds
 *   lie                   only listings are forwarded: every other request answers HTTP 200
 *                         with a small XML body and no ETag (a stub that stores nothing and
 *                         says yes)
 *
 * SUB, when given, limits a listing mode to listings whose query holds SUB
 * ("checkpoints" spoils only the listing of the manifests: the dangerous
 * case for remote gc, which then sees chunks but no manifest).
 *
 *   s3_fault_proxy UPSTREAM_PORT MODE_FILE [LOG_FILE]
 *
 * prints the port it listens on (one line) and serves until killed; each
 * connection is one forked child (one request: the proxy adds
 * "Connection: close" both ways), and each request is logged as
 * "MODE METHOD TARGET -> STATUS BYTES" to LOG_FILE.  Request bodies of
 * "Expect: 100-continue" requests are taken by the proxy itself.  No
 * library beyond libc: the tests need nothing installed for it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct buf {
	char *p;
	size_t n, cap;
} buf;

static int buf_add(buf *b, const void *d, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 8192;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

static int buf_str(buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The value of header name in the header block h (lines ending in \r\n) into out; 1 when present. */
static int header(const char *h, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	for (const char *l = h; l && *l; l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : NULL) {
		if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
			const char *v = l + nl + 1;
			while (*v == ' ')
				v++;
			size_t vl = strcspn(v, "\r\n");
			if (vl >= len)
				vl = len - 1;
			memcpy(out, v, vl);
			out[vl] = 0;
			return 1;
		}
	}
	return 0;
}

/* Copy the header lines of h (after the first line) except those named in drop, into out. */
static int copy_headers(buf *out, const char *h, const char *const *drop)
{
	const char *l = strstr(h, "\r\n");
	if (!l)
		return -1;
	for (l += 2; *l && strncmp(l, "\r\n", 2); ) {
		const char *e = strstr(l, "\r\n");
		if (!e)
			return -1;
		int skip = 0;
		for (const char *const *d = drop; *d && !skip; d++)
			skip = strncasecmp(l, *d, strlen(*d)) == 0 && l[strlen(*d)] == ':';
		if (!skip && buf_add(out, l, (size_t)(e - l) + 2))
			return -1;
		l = e + 2;
	}
	return 0;
}

/* Read from fd until the end of the header block; 0 and *head_len, or -1. */
static int read_head(int fd, buf *b, size_t *head_len)
{
	char tmp[16384];
	for (;;) {
		char *e = b->p ? strstr(b->p, "\r\n\r\n") : NULL;
		if (e) {
			*head_len = (size_t)(e - b->p) + 4;
			return 0;
		}
		if (b->n > (1 << 20))
			return -1;
		ssize_t k = recv(fd, tmp, sizeof(tmp), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		if (buf_add(b, tmp, (size_t)k))
			return -1;
	}
}

static int read_to(int fd, buf *b, size_t want)
{
	char tmp[65536];
	while (b->n < want) {
		size_t m = want - b->n < sizeof(tmp) ? want - b->n : sizeof(tmp);
		ssize_t k = recv(fd, tmp, m, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		if (buf_add(b, tmp, (size_t)k))
			return -1;
	}
	return 0;
}

static int read_eof(int fd, buf *b)
{
	char tmp[65536];
	for (;;) {
		ssize_t k = recv(fd, tmp, sizeof(tmp), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			return 0;
		if (buf_add(b, tmp, (size_t)k))
			return -1;
	}
}

/* Decode a chunked body in[0..n) into out. */
static int dechunk(const char *in, size_t n, buf *out)
{
	size_t i = 0;
	while (i < n) {
		char *end;
		unsigned long len = strtoul(in + i, &end, 16);
		const char *crlf = strstr(in + i, "\r\n");
		if (!crlf || end == in + i)
			return -1;
		i = (size_t)(crlf - in) + 2;
		if (len == 0)
			return 0;
		if (i + len > n || buf_add(out, in + i, len))
			return -1;
		i += len + 2;
	}
	return -1;
}

typedef struct mode {
	char name[32];
	char sub[256];
	int trickle_n, trickle_ms;
} mode;

static void read_mode(const char *path, mode *m)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "pass");
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[512] = "";
	if (fgets(line, sizeof(line), f)) {
		char a[32] = "", b[256] = "", c[32] = "";
		int k = sscanf(line, "%31s %255s %31s", a, b, c);
		if (k >= 1)
			snprintf(m->name, sizeof(m->name), "%s", a);
		if (strcmp(m->name, "trickle") == 0) {
			m->trickle_n = k >= 2 ? atoi(b) : 2;
			m->trickle_ms = k >= 3 ? atoi(c) : 1000;
			if (m->trickle_n < 1)
				m->trickle_n = 1;
		} else if (k >= 2) {
			snprintf(m->sub, sizeof(m->sub), "%s", b);
		}
	}
	fclose(f);
}

static int connect_up(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void serve(int cfd, int up_port, const char *mode_file, const char *log_file)
{
	static const char *const req_drop[] = { "Connection", "Expect", "Keep-Alive", NULL };
	static const char *const resp_drop[] = { "Connection", "Content-Length", "Transfer-Encoding", "Keep-Alive", NULL };
	buf in = { 0 }, fwd = { 0 }, resp = { 0 }, body = { 0 }, out = { 0 };
	size_t hl;
	if (read_head(cfd, &in, &hl))
		return;
	char method[16] = "", target[8192] = "";
	if (sscanf(in.p, "%15s %8191s", method, target) != 2)
		return;
	char v[64];
	size_t want = header(in.p, "Content-Length", v, sizeof(v)) ? strtoull(v, NULL, 10) : 0;
	if (header(in.p, "Expect", v, sizeof(v)) && strcasecmp(v, "100-continue") == 0 &&
	    send_all(cfd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
		return;
	if (read_to(cfd, &in, hl + want))
		return;
	mode m;
	read_mode(mode_file, &m);
	if (strcmp(m.name, "lie") == 0 && !(strcmp(method, "GET") == 0 && strstr(target, "list-type=2"))) {
		static const char yes[] = "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 36\r\n"
					  "Connection: close\r\n\r\n<Result><Status>OK</Status></Result>";
		send_all(cfd, yes, sizeof(yes) - 1);
		if (log_file) {
			FILE *lf = fopen(log_file, "a");
			if (lf) {
				fprintf(lf, "lie* %s %.300s -> 200 36\n", method, target);
				fclose(lf);
			}
		}
		return;
	}

	/* Forward: the request line, its headers but Connection/Expect, then the body. */
	const char *eol = strstr(in.p, "\r\n");
	if (buf_add(&fwd, in.p, (size_t)(eol - in.p) + 2) || copy_headers(&fwd, in.p, req_drop) ||
	    buf_str(&fwd, "Connection: close\r\n\r\n") || buf_add(&fwd, in.p + hl, want))
		return;
	int ufd = connect_up(up_port);
	if (ufd < 0) {
		static const char bad[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
		send_all(cfd, bad, sizeof(bad) - 1);
		return;
	}
	if (send_all(ufd, fwd.p, fwd.n) || read_eof(ufd, &resp) || !resp.p) {
		close(ufd);
		return;
	}
	close(ufd);
	char *he = strstr(resp.p, "\r\n\r\n");
	if (!he)
		return;
	size_t rhl = (size_t)(he - resp.p) + 4;
	int status = 0;
	sscanf(resp.p, "HTTP/%*s %d", &status);
	int is_head = strcmp(method, "HEAD") == 0;
	if (!is_head) {
		if (header(resp.p, "Transfer-Encoding", v, sizeof(v)) && strcasestr(v, "chunked")) {
			if (dechunk(resp.p + rhl, resp.n - rhl, &body))
				return;
		} else if (buf_add(&body, resp.p + rhl, resp.n - rhl)) {
			return;
		}
	}

	/* The fault. */
	int listing = strcmp(method, "GET") == 0 && strstr(target, "list-type=2") != NULL &&
		      (!m.sub[0] || strstr(target, m.sub) != NULL);
	int spoiled = 0;
	if (listing && status == 200) {
		if (strcmp(m.name, "html-list") == 0) {
			body.n = 0;
			buf_str(&body, "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>"
				       "<body><h1>Proxy authentication required</h1><p>Please sign in.</p></body></html>\n");
			spoiled = 1;
		} else if (strcmp(m.name, "truncate-list") == 0) {
			body.n /= 2;
			spoiled = 1;
		} else if (strcmp(m.name, "empty-list") == 0) {
			body.n = 0;
			spoiled = 1;
		} else if (strcmp(m.name, "flag-list") == 0) {
			char *f = body.p ? strstr(body.p, "<IsTruncated>false</IsTruncated>") : NULL;
			if (f) {
				memcpy(f, "<IsTruncated>true</IsTruncated> ", 32);
				spoiled = 1;
			}
		}
	}

	/* The answer, rebuilt: status line, headers, our length, Connection: close. */
	const char *seol = strstr(resp.p, "\r\n");
	char len[64];
	buf_add(&out, resp.p, (size_t)(seol - resp.p) + 2);
	if (is_head) {
		static const char *const head_drop[] = { "Connection", "Transfer-Encoding", "Keep-Alive", NULL };
		copy_headers(&out, resp.p, head_drop);
	} else {
		copy_headers(&out, resp.p, resp_drop);
		snprintf(len, sizeof(len), "Content-Length: %zu\r\n", body.n);
		buf_str(&out, len);
	}
	buf_str(&out, "Connection: close\r\n\r\n");
	if (body.n)
		buf_add(&out, body.p, body.n);

	if (log_file) {
		FILE *lf = fopen(log_file, "a");
		if (lf) {
			fprintf(lf, "%s%s %s %.300s -> %d %zu\n", m.name, spoiled ? "*" : "", method, target, status, body.n);
			fclose(lf);
		}
	}
	if (strcmp(m.name, "trickle") == 0) {
		for (size_t i = 0; i < out.n; i += (size_t)m.trickle_n) {
			size_t k = out.n - i < (size_t)m.trickle_n ? out.n - i : (size_t)m.trickle_n;
			if (send_all(cfd, out.p + i, k))
				return;
			struct timespec ts = { m.trickle_ms / 1000, (long)(m.trickle_ms % 1000) * 1000000L };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
		}
		return;
	}
	send_all(cfd, out.p, out.n);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: s3_fault_proxy UPSTREAM_PORT MODE_FILE [LOG_FILE]\n");
		return 2;
	}
	int up = atoi(argv[1]);
	signal(SIGCHLD, SIG_IGN); /* children are reaped by the kernel */
	signal(SIGPIPE, SIG_IGN);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64)) {
		perror("s3_fault_proxy: listen");
		return 1;
	}
	socklen_t al = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &al);
	printf("%d\n", ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int cfd = accept(fd, NULL, NULL);
		if (cfd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			perror("s3_fault_proxy: accept");
			return 1;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(fd);
			alarm(300); /* a child never outlives a test */
			serve(cfd, up, argv[2], argc > 3 ? argv[3] : NULL);
			shutdown(cfd, SHUT_WR);
			close(cfd);
			_exit(0);
		}
		close(cfd);
	}
}
