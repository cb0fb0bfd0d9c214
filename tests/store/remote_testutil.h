/*
 * remote_testutil.h - helpers for the S3 client tests: a tiny scripted HTTP
 * server in a thread (answers queued responses, records each request and
 * checks its AWS Signature V4 by the published algorithm - which s3rver does
 * not), and starting/stopping s3rver through scripts/s3-test-env.sh.
 * Header-only (static functions) so each test stays one file.
 */
#ifndef QE_REMOTE_TESTUTIL_H
#define QE_REMOTE_TESTUTIL_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store/remote.h"

/* ---- the scripted server ------------------------------------------------------- */

#define FS_MAX_RESP 64
#define FS_MAX_REQ 256

typedef enum fs_kind { FS_ANSWER = 0, FS_CLOSE, FS_HANG } fs_kind;

typedef struct fs_resp {
	fs_kind kind;
	int status;
	char headers[512]; /* extra header lines, each ending in \r\n */
	char body[4096];
	int hang_ms;
} fs_resp;

typedef struct fs_req {
	char method[16];
	char path[3072];  /* raw, as sent */
	char query[2048]; /* raw, as sent ("" when none) */
	char headers[8192];
	size_t body_len;
	int sig_ok;       /* 1: the signature matches the AWS algorithm */
	int hash_ok;      /* 1: x-amz-content-sha256 is the SHA-256 of the body */
	int x_amz_signed; /* 1: every x-amz-* header is signed */
	char why[8192];   /* what did not match */
} fs_req;

typedef struct fake_server {
	int fd;
	int port;
	pthread_t th;
	pthread_mutex_t mu;
	fs_resp resp[FS_MAX_RESP];
	int nresp, next;
	fs_req req[FS_MAX_REQ];
	int nreq;
	int stop;
	const char *secret; /* for signature checks */
} fake_server;

static void fs_sha256_hex(const void *d, size_t n, char out[65])
{
	store_remote_sha256_hex(d, n, out);
}

static void fs_hmac(const unsigned char *key, size_t kl, const char *msg, unsigned char out[32])
{
	unsigned int ol = 32;
	HMAC(EVP_sha256(), key, (int)kl, (const unsigned char *)msg, strlen(msg), out, &ol);
}

/* Header value (trimmed, runs of spaces collapsed) of name in hdrs; "" when absent. */
static int fs_header(const char *hdrs, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	const char *p = hdrs;
	out[0] = 0;
	while (*p) {
		const char *eol = strstr(p, "\r\n");
		if (!eol)
			eol = p + strlen(p);
		if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			size_t k = 0;
			int sp = 0;
			for (; v < eol && k + 1 < len; v++) {
				if (*v == ' ' || *v == '\t') {
					sp = 1;
					continue;
				}
				if (sp && k)
					out[k++] = ' ';
				sp = 0;
				out[k++] = *v;
			}
			out[k] = 0;
			return 1;
		}
		p = *eol ? eol + 2 : eol;
	}
	return 0;
}

static int fs_hexval(char c)
{
	return isdigit((unsigned char)c) ? c - '0' : (tolower((unsigned char)c) - 'a' + 10);
}

/* Decode %XX then encode per SigV4 (unreserved kept, uppercase hex). */
static void fs_canon_component(const char *s, size_t n, char *out, size_t len)
{
	char dec[2048];
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < sizeof(dec); i++) {
		if (s[i] == '%' && i + 2 < n + 0 + 1 && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
			dec[k++] = (char)(fs_hexval(s[i + 1]) * 16 + fs_hexval(s[i + 2]));
			i += 2;
		} else {
			dec[k++] = s[i];
		}
	}
	dec[k] = 0;
	static const char hx[] = "0123456789ABCDEF";
	size_t o = 0;
	for (size_t i = 0; i < k && o + 4 < len; i++) {
		unsigned char c = (unsigned char)dec[i];
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hx[c >> 4];
			out[o++] = hx[c & 15];
		}
	}
	out[o] = 0;
}

static int fs_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Canonical query: each k=v decoded and re-encoded, sorted. */
static void fs_canon_query(const char *q, char *out, size_t len)
{
	char *items[64];
	int n = 0;
	const char *p = q;
	while (*p && n < 64) {
		size_t l = strcspn(p, "&");
		const char *eq = memchr(p, '=', l);
		char k[2048], v[4096];
		if (eq) {
			fs_canon_component(p, (size_t)(eq - p), k, sizeof(k));
			fs_canon_component(eq + 1, l - (size_t)(eq - p) - 1, v, sizeof(v));
		} else {
			fs_canon_component(p, l, k, sizeof(k));
			v[0] = 0;
		}
		items[n] = malloc(strlen(k) + strlen(v) + 2);
		sprintf(items[n], "%s=%s", k, v);
		n++;
		p += l;
		if (*p == '&')
			p++;
	}
	qsort(items, (size_t)n, sizeof(items[0]), fs_cmp_str);
	size_t o = 0;
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "&" : "", items[i]);
		free(items[i]);
	}
}

/* Check rq's signature with the AWS Signature V4 algorithm for S3. */
static void fs_verify(fake_server *s, fs_req *rq, const char *body)
{
	char auth[1024], date[64], sha[128];
	rq->sig_ok = rq->hash_ok = rq->x_amz_signed = 0;
	if (!fs_header(rq->headers, "authorization", auth, sizeof(auth))) {
		snprintf(rq->why, sizeof(rq->why), "no Authorization header");
		return;
	}
	fs_header(rq->headers, "x-amz-date", date, sizeof(date));
	fs_header(rq->headers, "x-amz-content-sha256", sha, sizeof(sha));
	char bodyhash[65];
	fs_sha256_hex(body, rq->body_len, bodyhash);
	rq->hash_ok = strcmp(sha, bodyhash) == 0;
	char cred[256] = "", signed_h[512] = "", sig[128] = "";
	const char *c = strstr(auth, "Credential="), *sh = strstr(auth, "SignedHeaders="), *sg = strstr(auth, "Signature=");
	if (strncmp(auth, "AWS4-HMAC-SHA256 ", 17) || !c || !sh || !sg) {
		snprintf(rq->why, sizeof(rq->why), "malformed Authorization: %s", auth);
		return;
	}
	sscanf(c + 11, "%255[^,]", cred);
	sscanf(sh + 14, "%511[^,]", signed_h);
	sscanf(sg + 10, "%127[0-9a-f]", sig);
	/* cred = AK/DATE/REGION/s3/aws4_request */
	char ak[128], day[16], region[64], svc[16], term[32];
	if (sscanf(cred, "%127[^/]/%15[^/]/%63[^/]/%15[^/]/%31s", ak, day, region, svc, term) != 5 ||
	    strcmp(svc, "s3") || strcmp(term, "aws4_request")) {
		snprintf(rq->why, sizeof(rq->why), "malformed Credential: %s", cred);
		return;
	}
	/* Every x-amz-* header must be signed. */
	rq->x_amz_signed = 1;
	const char *p = rq->headers;
	while (*p) {
		const char *eol = strstr(p, "\r\n");
		if (!eol)
			break;
		if (strncasecmp(p, "x-amz-", 6) == 0) {
			char name[128];
			size_t nl = strcspn(p, ":");
			if (nl < sizeof(name)) {
				for (size_t i = 0; i < nl; i++)
					name[i] = (char)tolower((unsigned char)p[i]);
				name[nl] = 0;
				char padded[600], hay[600];
				snprintf(padded, sizeof(padded), ";%s;", name);
				snprintf(hay, sizeof(hay), ";%s;", signed_h);
				if (!strstr(hay, padded)) {
					rq->x_amz_signed = 0;
					snprintf(rq->why, sizeof(rq->why), "header %s is not signed (%s)", name, signed_h);
				}
			}
		}
		p = eol + 2;
	}
	/* Canonical request. */
	char canon[16384], cq[8192], ch[8192] = "";
	fs_canon_query(rq->query, cq, sizeof(cq));
	size_t o = 0;
	char hs[512];
	snprintf(hs, sizeof(hs), "%s", signed_h);
	for (char *save = NULL, *t = strtok_r(hs, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
		char v[4096];
		fs_header(rq->headers, t, v, sizeof(v));
		o += (size_t)snprintf(ch + o, sizeof(ch) - o, "%s:%s\n", t, v);
	}
	snprintf(canon, sizeof(canon), "%s\n%s\n%s\n%s\n%s\n%s", rq->method, rq->path, cq, ch, signed_h, sha);
	char canon_hash[65], sts[1024];
	fs_sha256_hex(canon, strlen(canon), canon_hash);
	snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s/%s/s3/aws4_request\n%s", date, day, region, canon_hash);
	unsigned char k1[32], k2[32], k3[32], k4[32], out[32];
	char k0[256];
	snprintf(k0, sizeof(k0), "AWS4%s", s->secret);
	fs_hmac((unsigned char *)k0, strlen(k0), day, k1);
	fs_hmac(k1, 32, region, k2);
	fs_hmac(k2, 32, "s3", k3);
	fs_hmac(k3, 32, "aws4_request", k4);
	fs_hmac(k4, 32, sts, out);
	char mine[65];
	for (int i = 0; i < 32; i++)
		sprintf(mine + 2 * i, "%02x", out[i]);
	rq->sig_ok = strcmp(mine, sig) == 0;
	if (!rq->sig_ok)
		snprintf(rq->why, sizeof(rq->why), "signature %s, expected %s; canonical request:\n%s", sig, mine, canon);
}

static void fs_serve_one(fake_server *s, int cfd)
{
	char buf[65536];
	size_t n = 0;
	char *hend = NULL;
	while (!hend && n < sizeof(buf) - 1) {
		ssize_t k = recv(cfd, buf + n, sizeof(buf) - 1 - n, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
		buf[n] = 0;
		hend = strstr(buf, "\r\n\r\n");
	}
	if (!hend)
		return;
	fs_req rq;
	memset(&rq, 0, sizeof(rq));
	char target[3072];
	sscanf(buf, "%15s %3071s", rq.method, target);
	char *qm = strchr(target, '?');
	if (qm) {
		*qm = 0;
		snprintf(rq.query, sizeof(rq.query), "%s", qm + 1);
	}
	snprintf(rq.path, sizeof(rq.path), "%s", target);
	char *h0 = strstr(buf, "\r\n") + 2;
	size_t hl = (size_t)(hend + 2 - h0);
	if (hl >= sizeof(rq.headers))
		hl = sizeof(rq.headers) - 1;
	memcpy(rq.headers, h0, hl);
	rq.headers[hl] = 0;
	char cl[32] = "0";
	fs_header(rq.headers, "content-length", cl, sizeof(cl));
	size_t want = strtoull(cl, NULL, 10);
	char expect[64];
	if (fs_header(rq.headers, "expect", expect, sizeof(expect)) && strcasecmp(expect, "100-continue") == 0)
		send(cfd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL);
	char *body = malloc(want + 1);
	size_t have = n - (size_t)(hend + 4 - buf);
	if (have > want)
		have = want;
	memcpy(body, hend + 4, have);
	while (have < want) {
		ssize_t k = recv(cfd, body + have, want - have, 0);
		if (k <= 0)
			break;
		have += (size_t)k;
	}
	rq.body_len = have;
	fs_verify(s, &rq, body);
	free(body);
	pthread_mutex_lock(&s->mu);
	if (s->nreq < FS_MAX_REQ)
		s->req[s->nreq++] = rq;
	fs_resp r = { 0 };
	r.status = 500;
	snprintf(r.body, sizeof(r.body), "<Error><Code>NoScript</Code><Message>no response queued</Message></Error>");
	if (s->next < s->nresp)
		r = s->resp[s->next++];
	pthread_mutex_unlock(&s->mu);
	if (r.kind == FS_CLOSE)
		return;
	if (r.kind == FS_HANG) {
		usleep((useconds_t)r.hang_ms * 1000);
		return;
	}
	char head[1024];
	int is_head = strcmp(rq.method, "HEAD") == 0;
	int hn = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nConnection: close\r\nContent-Length: %zu\r\n%s\r\n", r.status,
			  strlen(r.body), r.headers);
	if (send(cfd, head, (size_t)hn, MSG_NOSIGNAL) < 0)
		return;
	if (!is_head && r.body[0])
		send(cfd, r.body, strlen(r.body), MSG_NOSIGNAL);
}

static void *fs_main(void *arg)
{
	fake_server *s = arg;
	for (;;) {
		int cfd = accept(s->fd, NULL, NULL);
		if (cfd < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		pthread_mutex_lock(&s->mu);
		int stop = s->stop;
		pthread_mutex_unlock(&s->mu);
		if (stop) {
			close(cfd);
			return NULL;
		}
		fs_serve_one(s, cfd);
		shutdown(cfd, SHUT_RDWR);
		close(cfd);
	}
}

__attribute__((unused)) static int fs_start(fake_server *s, const char *secret)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->secret = secret;
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s->fd, (struct sockaddr *)&a, sizeof(a)) || listen(s->fd, 16))
		return -1;
	socklen_t al = sizeof(a);
	getsockname(s->fd, (struct sockaddr *)&a, &al);
	s->port = ntohs(a.sin_port);
	return pthread_create(&s->th, NULL, fs_main, s);
}

__attribute__((unused)) static void fs_stop(fake_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	/* Wake accept() with one last connection. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)s->port);
	connect(fd, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	pthread_join(s->th, NULL);
	close(s->fd);
}

/* Queue a response; body may be NULL. */
__attribute__((unused)) static void fs_push(fake_server *s, fs_kind kind, int status, const char *headers, const char *body)
{
	pthread_mutex_lock(&s->mu);
	fs_resp *r = &s->resp[s->nresp++];
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->status = status;
	r->hang_ms = 1500; /* longer than the 1 s stall time-out, short enough for the retry */
	snprintf(r->headers, sizeof(r->headers), "%s", headers ? headers : "");
	snprintf(r->body, sizeof(r->body), "%s", body ? body : "");
	pthread_mutex_unlock(&s->mu);
}

/* Forget queued responses and recorded requests. */
__attribute__((unused)) static void fs_reset(fake_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->nresp = s->next = s->nreq = 0;
	pthread_mutex_unlock(&s->mu);
}

/* ---- s3rver -------------------------------------------------------------------- */

/* The build tree's folder for s3rver (QE_BIN's folder), unless QE_S3RVER_PREFIX is set. */
__attribute__((unused)) static void s3_prefix_env(void)
{
	if (getenv("QE_S3RVER_PREFIX"))
		return;
	char d[1024];
	snprintf(d, sizeof(d), "%s", QE_BIN);
	char *sl = strrchr(d, '/');
	if (sl) {
		snprintf(sl, sizeof(d) - (size_t)(sl - d), "/s3rver");
		setenv("QE_S3RVER_PREFIX", d, 1);
	}
}

/*
 * Start s3rver storing in dir (port 0: a free one) with bucket "qe-test".
 * Returns 0 and the port and pid; 3 when s3rver cannot be installed or
 * started (why holds the reason); other values on other failures.
 */
__attribute__((unused)) static int s3_start(const char *dir, int port, int *out_port, int *out_pid, char *why, size_t why_len)
{
	s3_prefix_env();
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "bash '%s/scripts/s3-test-env.sh' start '%s' %d qe-test 2>&1", QE_SOURCE_DIR, dir, port);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(why, why_len, "popen failed: %s", strerror(errno));
		return 1;
	}
	char out[4096] = "";
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	int st = pclose(p);
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	if (code == 0 && sscanf(out, "%d %d", out_port, out_pid) == 2)
		return 0;
	snprintf(why, why_len, "%s", out);
	return code ? code : 1;
}

__attribute__((unused)) static void s3_stop(int pid)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "bash '%s/scripts/s3-test-env.sh' stop %d", QE_SOURCE_DIR, pid);
	if (system(cmd) != 0)
		fprintf(stderr, "could not stop s3rver %d\n", pid);
}

__attribute__((unused)) static double tu_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
