/*
 * remote.c - the S3 client's handle and its one way of sending a request:
 * build the URL, add the headers libcurl's SigV4 signing does not add by
 * itself, send, classify the outcome, retry what is transient with backoff,
 * and turn everything else into a message a user can act on.
 *
 * How long a request may take: each attempt fails when it moves fewer than
 * low_speed_bps bytes per second for stall_timeout_s seconds (libcurl's
 * low-speed limit), and when it passes its deadline, deadline_floor_s +
 * bytes / min_rate_bps, checked in the progress callback so that the bytes
 * may include the answer's Content-Length once it is known.  A minimum
 * speed alone is not a bound: a server trickling just above it, or in
 * bursts, holds a request for as long as it likes.  Retries (transient
 * failures, with doubling backoff) stop when another attempt, held for a
 * whole low-speed window, could end past the request's budget
 * (QE_S3_RETRY_BUDGET_S, 150 s): a trickling server used to hold a push
 * for five windows and the backoffs, 154-155 s.
 *
 * Why a 2xx answer is checked before it counts: see remote_xml.c.
 *
 * Why bodies always go through CURLOPT_POSTFIELDS (with CUSTOMREQUEST PUT):
 * libcurl 7.88 signs the SHA-256 of the POSTFIELDS bytes (of "" otherwise),
 * and S3 compares the signed payload hash with the x-amz-content-sha256
 * header.  Handing the body in memory makes both the hash of the bytes sent;
 * an upload through a read callback would be signed as an empty body.
 */
#include "store/remote_int.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void store_remote_sha256_hex(const void *data, size_t size, char out[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[32];
	unsigned int mdlen = 0;
	if (!EVP_Digest(size ? data : "", size, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) {
		/* Only an OpenSSL without SHA-256 gets here; the server then refuses the hash. */
		memset(out, '0', 64);
		out[64] = 0;
		return;
	}
	for (int i = 0; i < 32; i++) {
		out[2 * i] = digits[md[i] >> 4];
		out[2 * i + 1] = digits[md[i] & 15];
	}
	out[64] = 0;
}

/* ---- names -------------------------------------------------------------------- */

int store_remote_parse_url(const char *url, char *bucket, size_t bucket_len, char *prefix, size_t prefix_len)
{
	if (!url || strncmp(url, "s3://", 5))
		return qe_fail(QE_EINVAL, "remote '%s' is not an s3://BUCKET/PREFIX URL", url ? url : "(null)");
	const char *b = url + 5;
	size_t bl = strcspn(b, "/");
	if (bl < 3 || bl > 63 || bl >= bucket_len)
		return qe_fail(QE_EINVAL, "remote '%s': the bucket name must be 3 to 63 characters", url);
	for (size_t i = 0; i < bl; i++) {
		char c = b[i];
		if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '.' || c == '-'))
			return qe_fail(QE_EINVAL, "remote '%s': the bucket name may hold only a-z, 0-9, '.' and '-'",
				       url);
	}
	memcpy(bucket, b, bl);
	bucket[bl] = 0;
	const char *p = b + bl;
	while (*p == '/')
		p++;
	size_t pl = strlen(p);
	while (pl && p[pl - 1] == '/')
		pl--;
	if (pl >= prefix_len)
		return qe_fail(QE_EINVAL, "remote '%s': the prefix is too long", url);
	for (size_t i = 0; i < pl; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c == 0x7f || (c == '/' && i + 1 < pl && p[i + 1] == '/'))
			return qe_fail(QE_EINVAL, "remote '%s': the prefix has a control character or an empty part",
				       url);
	}
	/* "." and ".." parts: curl folds them out of the request path, so the objects would land under
	 * another prefix than the one recorded, and a pull of the same URL would find nothing */
	for (size_t i = 0; i < pl;) {
		size_t n = 0;
		while (i + n < pl && p[i + n] != '/')
			n++;
		if ((n == 1 && p[i] == '.') || (n == 2 && p[i] == '.' && p[i + 1] == '.'))
			return qe_fail(QE_EINVAL, "remote '%s': the prefix has a '%.*s' part; name the prefix without it",
				       url, (int)n, p + i);
		i += n + 1;
	}
	memcpy(prefix, p, pl);
	prefix[pl] = 0;
	return QE_OK;
}

int remote__encode(const char *s, int keep_slash, char *buf, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
			if (n + 1 >= len)
				return qe_fail(QE_EINVAL, "s3: name too long to encode: '%.80s...'", s);
			buf[n++] = (char)c;
		} else {
			if (n + 3 >= len)
				return qe_fail(QE_EINVAL, "s3: name too long to encode: '%.80s...'", s);
			buf[n++] = '%';
			buf[n++] = hex[c >> 4];
			buf[n++] = hex[c & 15];
		}
	}
	buf[n] = 0;
	return QE_OK;
}

int remote__full_key(const store_remote *r, const char *key, char *buf, size_t len)
{
	int n = r->prefix[0] ? snprintf(buf, len, "%s/%s", r->prefix, key) : snprintf(buf, len, "%s", key);
	if (n < 0 || (size_t)n >= len)
		return qe_fail(QE_EINVAL, "s3: key too long: '%s'", key);
	return QE_OK;
}

/* ---- handle -------------------------------------------------------------------- */

static store_remote_defaults defaults;

void store_remote_set_defaults(const store_remote_defaults *d)
{
	defaults = *d;
}

/* A fallback's number (v "": def), checked as the variable name it came from. */
static int opt_int(const char *name, const char *v, int def, int lo, int hi, int *out)
{
	*out = def;
	if (!v[0])
		return QE_OK;
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return qe_fail(QE_EINVAL, "%s='%s' is not an integer in %d..%d", name, v, lo, hi);
	*out = (int)x;
	return QE_OK;
}

static int opt_long(const char *name, const char *v, long def, long lo, long hi, long *out)
{
	*out = def;
	if (!v[0])
		return QE_OK;
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return qe_fail(QE_EINVAL, "%s='%s' is not an integer in %ld..%ld", name, v, lo, hi);
	*out = x;
	return QE_OK;
}

static int opt_size(const char *name, const char *v, size_t def, size_t lo, size_t *out)
{
	*out = def;
	if (!v[0])
		return QE_OK;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || *end || x < lo)
		return qe_fail(QE_EINVAL, "%s='%s' is not a byte count >= %zu", name, v, lo);
	*out = (size_t)x;
	return QE_OK;
}

/* A text fallback, or NULL when unset. */
static const char *fallback(const char *v)
{
	return v[0] ? v : NULL;
}

int store_remote_open(const char *url, const store_remote_opts *opts, store_remote **out)
{
	store_remote_opts none = { 0 };
	none.retries = -1;
	const store_remote_opts *o = opts ? opts : &none;
	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return qe_fail(QE_EIO, "s3: libcurl failed to initialize: %s", curl_easy_strerror(curl_init_rc));
	store_remote *r = qe_calloc(1, sizeof(*r));
	if (!r)
		return qe_fail(QE_ENOMEM, "s3: out of memory");
	int rc = store_remote_parse_url(url, r->bucket, sizeof(r->bucket), r->prefix, sizeof(r->prefix));
	if (rc)
		goto fail;
	snprintf(r->url, sizeof(r->url), "%s", url);

	const char *region = o->region ? o->region : fallback(defaults.region);
	if (!region)
		region = "us-east-1";
	if (strlen(region) >= sizeof(r->region) || strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(region)) {
		rc = qe_fail(QE_EINVAL, "s3: region '%s' is not a region name", region);
		goto fail;
	}
	snprintf(r->region, sizeof(r->region), "%s", region);
	snprintf(r->sigv4, sizeof(r->sigv4), "aws:amz:%s:s3", r->region);

	const char *ep = o->endpoint ? o->endpoint : fallback(defaults.endpoint);
	if (ep) {
		if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)) {
			rc = qe_fail(QE_EINVAL, "s3: endpoint '%s' must start with http:// or https://", ep);
			goto fail;
		}
		if (strlen(ep) >= sizeof(r->endpoint)) {
			rc = qe_fail(QE_EINVAL, "s3: endpoint '%.80s...' is too long", ep);
			goto fail;
		}
		snprintf(r->endpoint, sizeof(r->endpoint), "%s", ep);
	} else {
		snprintf(r->endpoint, sizeof(r->endpoint), "https://s3.%s.amazonaws.com", r->region);
	}
	size_t el = strlen(r->endpoint);
	while (el > 8 && r->endpoint[el - 1] == '/')
		r->endpoint[--el] = 0;
	if (strchr(r->endpoint + 8, '?') || strchr(r->endpoint + 8, '#')) {
		rc = qe_fail(QE_EINVAL, "s3: endpoint '%s' must not hold a query", r->endpoint);
		goto fail;
	}

	const char *ak = o->access_key ? o->access_key : fallback(defaults.access_key);
	const char *sk = o->secret_key ? o->secret_key : fallback(defaults.secret_key);
	const char *tk = o->session_token ? o->session_token : fallback(defaults.session_token);
	if (!ak || !sk || !ak[0] || !sk[0]) {
		rc = qe_fail(QE_EINVAL, "s3: no credentials for %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", url);
		goto fail;
	}
	r->access_key = qe_strdup(ak);
	r->secret_key = qe_strdup(sk);
	r->session_token = tk && tk[0] ? qe_strdup(tk) : NULL;
	if (!r->access_key || !r->secret_key || (tk && tk[0] && !r->session_token)) {
		rc = qe_fail(QE_ENOMEM, "s3: out of memory");
		goto fail;
	}

	if (o->retries >= 0)
		r->retries = o->retries;
	else if ((rc = opt_int("QE_S3_RETRIES", defaults.retries, 4, 0, 100, &r->retries)))
		goto fail;
	r->backoff_ms = o->backoff_ms;
	if (!r->backoff_ms && (rc = opt_int("QE_S3_BACKOFF_MS", defaults.backoff_ms, 200, 1, 600000, &r->backoff_ms)))
		goto fail;
	if ((rc = opt_int("QE_S3_RETRY_BUDGET_S", defaults.retry_budget_s, 150, 1, 86400, &r->retry_budget_s)))
		goto fail;
	r->connect_timeout_s = o->connect_timeout_s;
	if (!r->connect_timeout_s && (rc = opt_int("QE_S3_CONNECT_TIMEOUT_S", defaults.connect_timeout_s, 10, 1, 3600, &r->connect_timeout_s)))
		goto fail;
	r->stall_timeout_s = o->stall_timeout_s;
	if (!r->stall_timeout_s && (rc = opt_int("QE_S3_LOW_SPEED_S", defaults.low_speed_s, 30, 1, 86400, &r->stall_timeout_s)))
		goto fail;
	r->low_speed_bps = o->low_speed_bps;
	if (!r->low_speed_bps && (rc = opt_long("QE_S3_LOW_SPEED_BPS", defaults.low_speed_bps, 65536, 1, 1L << 40, &r->low_speed_bps)))
		goto fail;
	r->deadline_floor_s = o->timeout_s;
	if (!r->deadline_floor_s && (rc = opt_int("QE_S3_TIMEOUT_S", defaults.timeout_s, 60, 1, 86400, &r->deadline_floor_s)))
		goto fail;
	r->min_rate_bps = o->min_rate_bps;
	if (!r->min_rate_bps && (rc = opt_long("QE_S3_MIN_RATE", defaults.min_rate, 65536, 1, 1L << 40, &r->min_rate_bps)))
		goto fail;
	if (r->stall_timeout_s < 1 || r->low_speed_bps < 1 || r->deadline_floor_s < 1 || r->min_rate_bps < 1) {
		rc = qe_fail(QE_EINVAL, "s3: time-outs and rates must be positive (low speed %ld B/s for %d s, deadline "
					"%d s + bytes at %ld B/s)",
			     r->low_speed_bps, r->stall_timeout_s, r->deadline_floor_s, r->min_rate_bps);
		goto fail;
	}
	r->multipart_bytes = o->multipart_bytes;
	if (!r->multipart_bytes &&
	    (rc = opt_size("QE_S3_MULTIPART_BYTES", defaults.multipart_bytes, (size_t)64 << 20, STORE_REMOTE_MIN_PART, &r->multipart_bytes)))
		goto fail;
	r->part_bytes = o->part_bytes;
	if (!r->part_bytes && (rc = opt_size("QE_S3_PART_BYTES", defaults.part_bytes, (size_t)16 << 20, STORE_REMOTE_MIN_PART, &r->part_bytes)))
		goto fail;
	if (r->part_bytes < STORE_REMOTE_MIN_PART) {
		rc = qe_fail(QE_EINVAL, "s3: part size %zu is below the S3 minimum of 5 MiB", r->part_bytes);
		goto fail;
	}
	if (r->multipart_bytes < r->part_bytes)
		r->multipart_bytes = r->part_bytes;
	r->list_page = o->list_page > 0 ? o->list_page : 1000;
	if (r->list_page > 1000)
		r->list_page = 1000;

	r->curl = curl_easy_init();
	if (!r->curl) {
		rc = qe_fail(QE_ENOMEM, "s3: curl_easy_init failed");
		goto fail;
	}
	r->rng = (unsigned)getpid() ^ (unsigned)time(NULL);
	*out = r;
	return QE_OK;
fail:
	store_remote_close(r);
	return rc;
}

void store_remote_close(store_remote *r)
{
	if (!r)
		return;
	if (r->curl)
		curl_easy_cleanup(r->curl);
	if (r->secret_key) {
		/* Do not leave the secret in freed memory. */
		volatile char *p = r->secret_key;
		while (*p)
			*p++ = 0;
	}
	free(r->access_key);
	free(r->secret_key);
	free(r->session_token);
	free(r);
}

const char *store_remote_url(const store_remote *r)
{
	return r->url;
}

const char *store_remote_endpoint(const store_remote *r)
{
	return r->endpoint;
}

void store_remote_get_stats(const store_remote *r, store_remote_stats *out)
{
	*out = r->stats;
}

/* ---- one request ------------------------------------------------------------------ */

void remote__resp_free(remote_resp *p)
{
	free(p->body.p);
	memset(p, 0, sizeof(*p));
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	remote_buf *b = ctx;
	size_t n = size * nmemb;
	if (b->max && b->n + n > b->max) {
		b->overflow = 1;
		return 0;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = qe_realloc(b->p, cap);
		if (!p)
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = 0;
	return n;
}

static size_t on_file(char *data, size_t size, size_t nmemb, void *ctx)
{
	return fwrite(data, size, nmemb, (FILE *)ctx);
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx)
{
	remote_resp *p = ctx;
	size_t n = size * nmemb;
	if (n > 5 && strncasecmp(data, "ETag:", 5) == 0) {
		const char *v = data + 5;
		size_t l = n - 5;
		while (l && (*v == ' ' || *v == '\t'))
			v++, l--;
		while (l && (v[l - 1] == '\r' || v[l - 1] == '\n' || v[l - 1] == ' '))
			l--;
		if (l < sizeof(p->etag)) {
			memcpy(p->etag, v, l);
			p->etag[l] = 0;
		}
	}
	return n;
}

/* One attempt's clock: the deadline grows with the bytes it moves. */
typedef struct xfer_clock {
	struct timespec start;
	double floor_s;
	double rate; /* B/s */
	double up;   /* body bytes to send */
	double bytes; /* what the deadline was computed for, when it passed */
	double limit_s;
	int over;    /* the callback stopped the transfer */
} xfer_clock;

static double since_s(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	xfer_clock *k = ctx;
	(void)ultotal;
	(void)ulnow;
	double down = (double)(dltotal > dlnow ? dltotal : dlnow);
	double bytes = k->up + down;
	double limit = k->floor_s + bytes / k->rate;
	if (since_s(&k->start) <= limit)
		return 0;
	k->bytes = bytes;
	k->limit_s = limit;
	k->over = 1;
	return 1;
}

static int transient_curl(CURLcode c)
{
	switch (c) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_ABORTED_BY_CALLBACK: /* only ours: the deadline */
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

static int transient_http(long status, const char *code)
{
	return status >= 500 || status == 429 || strcmp(code, "SlowDown") == 0 ||
	       strcmp(code, "RequestTimeout") == 0;
}

/* "s3://bucket/prefix/key" or "s3://bucket" (or q->shown) for messages. */
static void target_text(const store_remote *r, const remote_req *q, char *buf, size_t len)
{
	char full[1400];
	if (q->shown)
		snprintf(buf, len, "%s", q->shown);
	else if (!q->key || remote__full_key(r, q->key, full, sizeof(full)))
		snprintf(buf, len, "s3://%s", r->bucket);
	else
		snprintf(buf, len, "s3://%s/%s", r->bucket, full);
}

void remote__req_text(const store_remote *r, const remote_req *q, char *buf, size_t len)
{
	char target[1500];
	target_text(r, q, target, sizeof(target));
	if (q->shown || !q->query || !q->query[0])
		snprintf(buf, len, "%s %s", q->method, target);
	else
		snprintf(buf, len, "%s %s?%.200s", q->method, target, q->query);
}

/* The Code and Message of a body that is a well-formed <Error> document; 0 when it is not one. */
static int error_doc(const remote_buf *b, char *code, size_t code_len, char *msg, size_t msg_len)
{
	char why[256];
	code[0] = 0;
	if (msg)
		msg[0] = 0;
	if (!b->n || remote__xml_check(b->p, b->n, "Error", why, sizeof(why)))
		return 0;
	if (remote__xml_text(b->p, b->n, "Code", NULL, code, code_len) != 1)
		code[0] = 0;
	if (msg && remote__xml_text(b->p, b->n, "Message", NULL, msg, msg_len) != 1)
		msg[0] = 0;
	return 1;
}

static int http_fail(store_remote *r, const remote_req *q, remote_resp *p, int attempts)
{
	char target[1500], msg[512] = "", code_buf[64];
	target_text(r, q, target, sizeof(target));
	if (p->body.n && !error_doc(&p->body, code_buf, sizeof(code_buf), msg, sizeof(msg))) {
		/* Not S3 speaking: say what came instead of reading names out of it. */
		char why[256];
		remote__xml_check(p->body.p, p->body.n, "Error", why, sizeof(why));
		snprintf(msg, sizeof(msg), "the body is not an S3 error document: %s", why);
	}
	const char *code = p->code;
	char tries[48] = "";
	if (attempts > 1)
		snprintf(tries, sizeof(tries), " after %d attempts", attempts);
	if (strcmp(code, "InvalidAccessKeyId") == 0)
		return qe_fail(QE_ESTORE, "s3: access denied for key id '%s' (InvalidAccessKeyId): %s %s at %s: HTTP %ld: %s",
			       r->access_key, q->method, target, r->endpoint, p->status, msg);
	if (strcmp(code, "SignatureDoesNotMatch") == 0)
		return qe_fail(QE_ESTORE,
			       "s3: signature rejected for key id '%s' (SignatureDoesNotMatch: check "
			       "AWS_SECRET_ACCESS_KEY and the region '%s'): %s %s at %s: HTTP %ld: %s",
			       r->access_key, r->region, q->method, target, r->endpoint, p->status, msg);
	if (p->status == 403)
		return qe_fail(QE_ESTORE, "s3: access denied for key id '%s' (%s): %s %s at %s: HTTP 403%s%s",
			       r->access_key, code[0] ? code : "no details: a HEAD answer has no body", q->method,
			       target, r->endpoint, msg[0] ? ": " : "", msg);
	if (strcmp(code, "NoSuchBucket") == 0)
		return qe_fail(QE_ENOTFOUND, "s3: bucket '%s' does not exist at %s (NoSuchBucket): %s %s", r->bucket,
			       r->endpoint, q->method, target);
	if (p->status == 404)
		return qe_fail(QE_ENOTFOUND, "s3: no object %s at %s (%s)", target, r->endpoint,
			       code[0] ? code : "HTTP 404");
	return qe_fail(QE_ESTORE, "s3: %s %s at %s: HTTP %ld%s%s%s%s%s", q->method, target, r->endpoint, p->status,
		       code[0] ? " " : "", code, msg[0] ? ": " : "", msg, tries);
}

/*
 * A 2xx answer that must be the XML document q->xml_root: an <Error>
 * document is the server's failure (CompleteMultipartUpload may answer so),
 * anything else that is not that document is a malformed answer.
 */
static int check_answer(store_remote *r, const remote_req *q, remote_resp *p)
{
	char what[1800], why[256], code[64], msg[512];
	remote__req_text(r, q, what, sizeof(what));
	if (error_doc(&p->body, code, sizeof(code), msg, sizeof(msg))) {
		snprintf(p->code, sizeof(p->code), "%s", code);
		return qe_fail(QE_ESTORE, "s3: %s at %s: HTTP %ld with an error: %s%s%s", what, r->endpoint, p->status,
			       code[0] ? code : "(no Code)", msg[0] ? ": " : "", msg);
	}
	if (remote__xml_check(p->body.p, p->body.n, q->xml_root, why, sizeof(why)) == 0)
		return QE_OK;
	return qe_fail(QE_ESTORE, "s3: %s at %s: HTTP %ld: %s", what, r->endpoint, p->status, why);
}

/* Why an attempt failed in libcurl, in words; time-outs say which limit and by how much. */
static void curl_time_why(store_remote *r, CURLcode cc, const xfer_clock *k, char *buf, size_t len)
{
	if (cc == CURLE_ABORTED_BY_CALLBACK && k->over) {
		snprintf(buf, len, "over its deadline of %.0f s (%d s + %.0f B at %ld B/s)", k->limit_s, r->deadline_floor_s,
			 k->bytes, r->min_rate_bps);
		return;
	}
	if (cc == CURLE_OPERATION_TIMEDOUT) {
		curl_off_t conn = 0;
		curl_easy_getinfo(r->curl, CURLINFO_CONNECT_TIME_T, &conn);
		if (strstr(r->errbuf, "too slow") || conn > 0) {
			snprintf(buf, len, "slower than %ld B/s for %d s (%.1f s into the request)", r->low_speed_bps,
				 r->stall_timeout_s, since_s(&k->start));
			return;
		}
		snprintf(buf, len, "no connection within %d s (%s)", r->connect_timeout_s,
			 r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
		return;
	}
	snprintf(buf, len, "%s%s%s", curl_easy_strerror(cc), r->errbuf[0] ? ": " : "", r->errbuf);
}

/* The wait before retry `attempt` (0-based): doubling from backoff_ms, at most 20 s, plus up to half again of jitter. */
static long backoff_ms_of(store_remote *r, int attempt)
{
	long ms = (long)r->backoff_ms << (attempt < 16 ? attempt : 16);
	if (ms > 20000)
		ms = 20000;
	return ms + (long)(rand_r(&r->rng) % (unsigned)(ms / 2 + 1));
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Retry `attempt` when the retries allow it and it fits the budget: the
 * time since the first attempt began, the wait, and one more attempt held
 * for a whole low-speed window stay within retry_budget_s (150 s by
 * default), so a server that trickles ends a request in time instead of
 * just after.  Sleeps the wait and returns 1 to retry; 0 leaves why in why.
 */
static int retry_wait(store_remote *r, int attempt, const struct timespec *t0, char *why, size_t len)
{
	why[0] = 0;
	if (attempt >= r->retries)
		return 0;
	long ms = backoff_ms_of(r, attempt);
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	double spent = (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
	if (spent + (double)ms * 1e-3 + (double)r->stall_timeout_s > (double)r->retry_budget_s) {
		snprintf(why, len, "; no retry: another attempt could end past the request's %d s budget (%.0f s spent)",
			 r->retry_budget_s, spent);
		return 0;
	}
	sleep_ms(ms);
	return 1;
}

int remote__do(store_remote *r, const remote_req *q, remote_resp *p)
{
	char full[1400], enc[4300], url[5200];
	int rc;
	memset(p, 0, sizeof(*p));
	p->body.max = q->max_size;
	if (q->key) {
		if ((rc = remote__full_key(r, q->key, full, sizeof(full))) ||
		    (rc = remote__encode(full, 1, enc, sizeof(enc))))
			return rc;
	}
	int n = snprintf(url, sizeof(url), "%s/%s%s%s%s%s", r->endpoint, r->bucket, q->key ? "/" : "", q->key ? enc : "",
			 q->query && q->query[0] ? "?" : "", q->query ? q->query : "");
	if (n < 0 || (size_t)n >= sizeof(url))
		return qe_fail(QE_EINVAL, "s3: request URL too long for key '%s'", q->key ? q->key : "");

	char sha[65], hsha[96];
	if (q->has_body)
		store_remote_sha256_hex(q->body, q->body_len, sha);
	else
		snprintf(sha, sizeof(sha), "%s", SHA256_EMPTY);
	snprintf(hsha, sizeof(hsha), "x-amz-content-sha256: %s", sha);
	struct curl_slist *hdrs = NULL, *t;
	char *tok = NULL;
	if (!(t = curl_slist_append(hdrs, hsha)))
		goto oom;
	hdrs = t;
	if (r->session_token) {
		size_t tl = strlen(r->session_token) + 32;
		if (!(tok = qe_malloc(tl)))
			goto oom;
		snprintf(tok, tl, "x-amz-security-token: %s", r->session_token);
		if (!(t = curl_slist_append(hdrs, tok)))
			goto oom;
		hdrs = t;
	}
	/* No "Expect:" header to turn off 100-continue: libcurl 7.88 would sign the
	 * empty header it then does not send, which AWS refuses. */
	if (q->has_body) {
		if (!(t = curl_slist_append(hdrs, "Content-Type: application/octet-stream")))
			goto oom;
		hdrs = t;
	}

	int attempt = 0;
	xfer_clock clk;
	char why[512], budget[128] = "";
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		CURL *c = r->curl;
		curl_easy_reset(c);
		r->errbuf[0] = 0;
		p->status = 0;
		p->code[0] = 0;
		p->etag[0] = 0;
		p->has_length = 0;
		p->body.n = 0;
		p->body.overflow = 0;
		if (q->sink) {
			fflush(q->sink);
			if (ftruncate(fileno(q->sink), 0) || fseek(q->sink, 0, SEEK_SET)) {
				rc = qe_fail(QE_EIO, "s3: cannot rewind the download file: %s", strerror(errno));
				break;
			}
		}
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r->sigv4);
		curl_easy_setopt(c, CURLOPT_USERNAME, r->access_key);
		curl_easy_setopt(c, CURLOPT_PASSWORD, r->secret_key);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)r->connect_timeout_s);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, r->low_speed_bps);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)r->stall_timeout_s);
		memset(&clk, 0, sizeof(clk));
		clock_gettime(CLOCK_MONOTONIC, &clk.start);
		clk.floor_s = r->deadline_floor_s;
		clk.rate = (double)r->min_rate_bps;
		clk.up = q->has_body ? (double)q->body_len : 0;
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, &clk);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, p);
		if (q->sink && strcmp(q->method, "GET") == 0) {
			curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file);
			curl_easy_setopt(c, CURLOPT_WRITEDATA, q->sink);
		} else {
			curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
			curl_easy_setopt(c, CURLOPT_WRITEDATA, &p->body);
		}
		if (q->has_body) {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body_len ? (const char *)q->body : "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
		} else if (strcmp(q->method, "HEAD") == 0) {
			curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		} else if (strcmp(q->method, "GET")) {
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
		}
		r->stats.requests++;
		CURLcode cc = qe_fault_hit(QE_FAULT_S3) ? CURLE_SEND_ERROR : curl_easy_perform(c);
		if (cc == CURLE_OK) {
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &p->status);
			curl_off_t cl = -1;
			if (curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK && cl >= 0) {
				p->length = (uint64_t)cl;
				p->has_length = 1;
			}
			if (p->status >= 200 && p->status < 300) {
				rc = q->xml_root ? check_answer(r, q, p) : QE_OK;
				break;
			}
			error_doc(&p->body, p->code, sizeof(p->code), NULL, 0);
			if (transient_http(p->status, p->code) && attempt < r->retries) {
				qe_log(QE_LOG_WARN, "s3: %s %s: HTTP %ld %s; retry %d of %d", q->method,
				       q->key ? q->key : r->bucket, p->status, p->code, attempt + 1, r->retries);
				if (retry_wait(r, attempt, &t0, budget, sizeof(budget))) {
					attempt++;
					r->stats.retries++;
					continue;
				}
			}
			rc = http_fail(r, q, p, attempt + 1);
			if (budget[0]) {
				char m[1024];
				snprintf(m, sizeof(m), "%s", qe_last_error());
				rc = qe_fail(rc, "%s%s", m, budget);
			}
			break;
		}
		if (cc == CURLE_WRITE_ERROR && p->body.overflow) {
			char target[1500];
			target_text(r, q, target, sizeof(target));
			rc = qe_fail(QE_ECORRUPT, "s3: %s is larger than the %zu bytes expected", target, q->max_size);
			break;
		}
		if (transient_curl(cc) && attempt < r->retries) {
			curl_time_why(r, cc, &clk, why, sizeof(why));
			if (retry_wait(r, attempt, &t0, budget, sizeof(budget))) {
				qe_log(QE_LOG_WARN, "s3: %s %s: %s; retry %d of %d", q->method, q->key ? q->key : r->bucket,
				       why, attempt + 1, r->retries);
				attempt++;
				r->stats.retries++;
				continue;
			}
		}
		char target[1500], tries[48] = "";
		target_text(r, q, target, sizeof(target));
		if (attempt)
			snprintf(tries, sizeof(tries), " after %d attempts", attempt + 1);
		curl_time_why(r, cc, &clk, why, sizeof(why));
		rc = qe_fail(QE_EIO, "s3: %s %s at %s failed%s: %s%s", q->method, target, r->endpoint, tries, why, budget);
		break;
	}
	if (rc == QE_OK && q->has_body)
		r->stats.bytes_up += q->body_len;
	if (rc == QE_OK && strcmp(q->method, "GET") == 0) {
		curl_off_t dl = 0;
		if (curl_easy_getinfo(r->curl, CURLINFO_SIZE_DOWNLOAD_T, &dl) == CURLE_OK && dl > 0)
			r->stats.bytes_down += (uint64_t)dl;
	}
	/* The handle must not keep pointers to this call's header list or buffers. */
	curl_easy_reset(r->curl);
	curl_slist_free_all(hdrs);
	free(tok);
	return rc;
oom:
	curl_slist_free_all(hdrs);
	free(tok);
	return qe_fail(QE_ENOMEM, "s3: out of memory building a request");
}
