/*
 * remote_int.h - the inside of the S3 client, shared by remote.c (handle,
 * signing headers, one request with retries, error texts), remote_ops.c
 * (objects and listing), remote_multipart.c and remote_xml.c (the few XML
 * elements S3 answers with).  Not part of the public API.
 */
#ifndef QE_STORE_REMOTE_INT_H
#define QE_STORE_REMOTE_INT_H

#include <stdio.h>

#include <curl/curl.h>

#include "store/remote.h"

struct store_remote {
	char url[1100];
	char bucket[64];
	char prefix[1024]; /* no leading or trailing '/'; may be empty */
	char endpoint[512];
	char region[64];
	char sigv4[128];
	char *access_key;
	char *secret_key;
	char *session_token; /* NULL when none */
	int retries;
	int backoff_ms;
	int retry_budget_s;   /* a request and its retries end within this (another attempt must fit) */
	int connect_timeout_s;
	int stall_timeout_s;  /* the low-speed window (s) */
	long low_speed_bps;   /* slower than this over the window fails */
	int deadline_floor_s; /* every request's deadline: floor + bytes / min_rate_bps */
	long min_rate_bps;
	int list_page;
	size_t multipart_bytes;
	size_t part_bytes;
	CURL *curl;
	unsigned rng;
	store_remote_stats stats;
	char errbuf[CURL_ERROR_SIZE];
};

/* A growing response body. */
typedef struct remote_buf {
	char *p;
	size_t n;
	size_t cap;
	size_t max;   /* 0: no limit */
	int overflow; /* the server sent more than max */
} remote_buf;

/* One request.  key is relative to the prefix; NULL addresses the bucket. */
typedef struct remote_req {
	const char *method; /* GET PUT POST HEAD DELETE */
	const char *key;
	const char *query;  /* already sorted and percent-encoded; NULL: none */
	const void *body;   /* sent as is; NULL with body_len 0: no body */
	size_t body_len;
	int has_body;       /* PUT/POST: send body (possibly empty) */
	FILE *sink;         /* GET into a file instead of memory */
	size_t max_size;    /* GET into memory: largest accepted body; 0: none */
	const char *xml_root; /* a 2xx answer must be this XML document (checked by remote__do); NULL: any body */
	const char *shown;  /* what messages call the target ("s3://b/p/?list-type=2"); NULL: bucket/key?query */
} remote_req;

typedef struct remote_resp {
	long status;
	remote_buf body;
	char etag[160];
	uint64_t length; /* Content-Length of the response, when has_length */
	int has_length;
	char code[64];   /* S3 error code from the body ("" when none) */
} remote_resp;

void remote__resp_free(remote_resp *p);

/*
 * Send q with retries.  Every attempt has a deadline of
 * r->deadline_floor_s + (bytes sent + bytes announced or received) /
 * r->min_rate_bps and fails when slower than r->low_speed_bps for
 * r->stall_timeout_s; both are transient (retried) and reported as such.
 * With q->xml_root set, a 2xx answer counts only when its body is one
 * complete, well-formed XML document of that root element (remote__xml_check);
 * an <Error> document in a 2xx answer is the server's error; anything else
 * is QE_ESTORE naming the request and what was wrong.  Error answers
 * (non-2xx) give their Code and Message only when the body is a well-formed
 * <Error> document.  Returns 0 for an HTTP 2xx answer; otherwise a QE code
 * with the message set (and p->status / p->code filled when the server
 * answered), so callers may treat e.g. a 404 as an answer.  what names the
 * operation in messages ("PUT", "upload part 3 of").
 */
int remote__do(store_remote *r, const remote_req *q, remote_resp *p);

/* The full object key (prefix + "/" + key) into buf. */
int remote__full_key(const store_remote *r, const char *key, char *buf, size_t len);
/* Percent-encode s (RFC 3986 unreserved kept; '/' kept when keep_slash) into buf. */
int remote__encode(const char *s, int keep_slash, char *buf, size_t len);

/*
 * 0 when xml[0..n) is one complete, well-formed XML document whose root
 * element is named root; otherwise -1 and why (a phrase such as "answer is
 * not a ListBucketResult (HTML page?)" or "answer is truncated: <Contents>
 * is not closed ...") in why[0..why_len).  The lookups below assume a body
 * that passed.
 */
int remote__xml_check(const char *xml, size_t n, const char *root, char *why, size_t why_len);
/* "METHOD s3://bucket/key?query" (or q->shown) for messages. */
void remote__req_text(const store_remote *r, const remote_req *q, char *buf, size_t len);

/*
 * The text of the first <tag>...</tag> in xml[0..n) after *pos (XML entities
 * decoded) into out; *pos (may be NULL) moves past it.  1 when found, 0 when
 * not, -1 when out is too small.
 */
int remote__xml_text(const char *xml, size_t n, const char *tag, size_t *pos, char *out, size_t len);
/* The span of the next <tag>...</tag> element's content: 1 found, 0 not. */
int remote__xml_span(const char *xml, size_t n, const char *tag, size_t *pos, size_t *b, size_t *e);

/* Multipart upload of data (size > part size). */
int remote__put_multipart(store_remote *r, const char *key, const void *data, size_t size);

#endif
