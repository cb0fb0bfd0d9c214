/*
 * remote.h - a small client for S3-compatible object storage (AWS S3, MinIO,
 * s3rver, ...), used to replicate checkpoints beyond one machine (DESIGN.md
 * section 8).  It speaks path-style HTTP(S) through libcurl and signs every
 * request with AWS Signature Version 4 (libcurl's CURLOPT_AWS_SIGV4).
 *
 * What it adds to libcurl:
 *  - the x-amz-content-sha256 header (SHA-256 of the body; libcurl 7.88 does
 *    not add it and S3 refuses requests without it), and the session token
 *    header x-amz-security-token when AWS_SESSION_TOKEN is set;
 *  - bodies are always handed to libcurl in memory, so the payload hash that
 *    libcurl signs and the header we send are of the same bytes;
 *  - query strings built already sorted and percent-encoded, so the
 *    signature's canonical query is the one the server computes;
 *  - multipart upload above a threshold (parts of at least 5 MiB), aborted
 *    on any failure;
 *  - bounded retries with exponential backoff and jitter on connection
 *    errors, time-outs, HTTP 5xx and throttling (429, SlowDown);
 *  - errors that say what failed: QE_EIO for the network (curl's text),
 *    QE_ESTORE for a refusal by the server (HTTP status, the S3 error code and
 *    message from the XML body, the bucket and key; an unknown access key is
 *    "s3: access denied for key id 'X' (InvalidAccessKeyId) ..."),
 *    QE_ENOTFOUND for a missing bucket or key, QE_EINVAL for bad arguments
 *    and missing credentials.  Messages are read with qe_last_error().
 *
 * Keys passed to the calls are relative to the handle's prefix: with the URL
 * s3://BUCKET/a/b, key "chunks/x" is the object "a/b/chunks/x".
 *
 * Configuration comes from the options, else the environment:
 *   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional),
 *   AWS_ENDPOINT_URL (else https://s3.REGION.amazonaws.com),
 *   AWS_REGION or AWS_DEFAULT_REGION (else us-east-1),
 *   QE_S3_RETRIES (4), QE_S3_BACKOFF_MS (200), QE_S3_CONNECT_TIMEOUT_S (10),
 *   QE_S3_MULTIPART_BYTES (64 MiB), QE_S3_PART_BYTES (16 MiB, at least 5 MiB),
 * and how long one request may take (each attempt; a time-out is retried):
 *   QE_S3_LOW_SPEED_BPS (65536) and QE_S3_LOW_SPEED_S (30): a request moving
 *     fewer bytes per second than that for that many seconds fails
 *     ("GET s3://b/k: slower than 65536 B/s for 30 s");
 *   QE_S3_TIMEOUT_S (60) and QE_S3_MIN_RATE (65536 B/s): the deadline of a
 *     request is QE_S3_TIMEOUT_S + bytes / QE_S3_MIN_RATE, where bytes are
 *     the body sent plus the answer's Content-Length (or what has arrived),
 *     so a 16 MiB part may take 60 + 256 s and a listing about 60 s
 *     ("PUT s3://b/k: over its deadline of 316 s (60 s + 16777216 B at
 *     65536 B/s)").  Before this deadline existed QE_S3_TIMEOUT_S was the
 *     stall time (no progress at all for that long), which the low-speed
 *     pair now covers; a server trickling a few bytes per second used to
 *     hold a request forever.
 *
 * Answers are read strictly: a 2xx answer the client parses (a listing, the
 * start and the completion of a multipart upload) counts only when its body
 * is one complete, well-formed XML document with the root element S3
 * defines for it (ListBucketResult, InitiateMultipartUploadResult with an
 * UploadId, CompleteMultipartUploadResult), and a listing only when its
 * pagination ends cleanly (IsTruncated false, or true with a continuation
 * token that is then followed).  Anything else - an HTML page from a proxy,
 * an empty or truncated body - is QE_ESTORE naming the request and what was
 * wrong ("s3: GET s3://b/p/?list-type=2: answer is not a ListBucketResult
 * (HTML page?)"), never an empty result.
 *
 * Threads: a handle is for one thread at a time (it owns one curl handle);
 * use one handle per thread.  Handles of one process may be open at once.
 */
#ifndef QE_STORE_REMOTE_H
#define QE_STORE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_REMOTE_MIN_PART ((size_t)5 << 20)

typedef struct store_remote store_remote;

typedef struct store_remote_opts {
	const char *endpoint;      /* "http://127.0.0.1:4568"; NULL: the defaults' (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL) or AWS */
	const char *region;        /* NULL: AWS_REGION, AWS_DEFAULT_REGION, "us-east-1" */
	const char *access_key;    /* NULL: AWS_ACCESS_KEY_ID */
	const char *secret_key;    /* NULL: AWS_SECRET_ACCESS_KEY */
	const char *session_token; /* NULL: AWS_SESSION_TOKEN (may be unset) */
	int retries;               /* extra attempts after a transient failure; <0: QE_S3_RETRIES or 4 */
	int backoff_ms;            /* first wait between attempts (doubles each time); 0: QE_S3_BACKOFF_MS or 200 */
	int connect_timeout_s;     /* 0: QE_S3_CONNECT_TIMEOUT_S or 10 */
	int stall_timeout_s;       /* the low-speed window in s; 0: QE_S3_LOW_SPEED_S or 30 */
	long low_speed_bps;        /* slower than this (B/s) for the window fails; 0: QE_S3_LOW_SPEED_BPS or 65536 */
	int timeout_s;             /* the deadline's floor in s; 0: QE_S3_TIMEOUT_S or 60 */
	long min_rate_bps;         /* the deadline grows by bytes / this; 0: QE_S3_MIN_RATE or 65536 */
	size_t multipart_bytes;    /* objects larger than this go multipart; 0: QE_S3_MULTIPART_BYTES or 64 MiB */
	size_t part_bytes;         /* 0: QE_S3_PART_BYTES or 16 MiB; at least STORE_REMOTE_MIN_PART */
	int list_page;             /* keys per LIST request (1..1000); 0: 1000 */
} store_remote_opts;

/*
 * What store_remote_open falls back on for a field store_remote_opts leaves
 * unset: the text of the variables users set, "" when unset (issue 36 item
 * 2: the library reads none; cli/storage_options.c reads them once and hands
 * them here).  Numbers are parsed and checked at each open, whose errors
 * name the variable, as when the open read the variable itself.  Before any
 * set every field is "": the built-in defaults, no credentials.
 */
typedef struct store_remote_defaults {
	char region[64];            /* AWS_REGION, else AWS_DEFAULT_REGION */
	char endpoint[1024];        /* AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL */
	char access_key[256];       /* AWS_ACCESS_KEY_ID */
	char secret_key[256];       /* AWS_SECRET_ACCESS_KEY */
	char session_token[8192];   /* AWS_SESSION_TOKEN */
	char retries[32];           /* QE_S3_RETRIES */
	char backoff_ms[32];        /* QE_S3_BACKOFF_MS */
	char retry_budget_s[32];    /* QE_S3_RETRY_BUDGET_S */
	char connect_timeout_s[32]; /* QE_S3_CONNECT_TIMEOUT_S */
	char low_speed_s[32];       /* QE_S3_LOW_SPEED_S */
	char low_speed_bps[32];     /* QE_S3_LOW_SPEED_BPS */
	char timeout_s[32];         /* QE_S3_TIMEOUT_S */
	char min_rate[32];          /* QE_S3_MIN_RATE */
	char multipart_bytes[32];   /* QE_S3_MULTIPART_BYTES */
	char part_bytes[32];        /* QE_S3_PART_BYTES */
} store_remote_defaults;

/*
 * Copy d into the process's fallbacks (one set per process; ranks forked
 * later inherit it).  Not thread-safe against a concurrent open: set before
 * the first.
 */
void store_remote_set_defaults(const store_remote_defaults *d);

/* What a handle has done (for the push/pull reports and the tests). */
typedef struct store_remote_stats {
	uint64_t requests;  /* HTTP requests sent, retries included */
	uint64_t retries;   /* attempts repeated after a transient failure */
	uint64_t bytes_up;  /* body bytes of successful uploads */
	uint64_t bytes_down;
	uint64_t multipart; /* objects uploaded in parts */
	uint64_t parts;
	uint64_t aborts;    /* multipart uploads aborted (or whose abort failed) */
} store_remote_stats;

/*
 * Split "s3://BUCKET[/PREFIX]" into its bucket (3..63 of a-z 0-9 . -) and
 * prefix (leading and trailing '/' dropped; may be empty).  QE_EINVAL naming
 * the URL when it is not of that form.
 */
int store_remote_parse_url(const char *url, char *bucket, size_t bucket_len, char *prefix, size_t prefix_len);

/*
 * A handle on s3://BUCKET/PREFIX.  No request is sent (see
 * store_remote_check).  opts may be NULL.  QE_EINVAL when the URL, the
 * endpoint or an option is malformed, or the credentials are missing.
 * OUT *out: closed with store_remote_close(); NULL on failure.
 */
int store_remote_open(const char *url, const store_remote_opts *opts, store_remote **out);
/* Close (NULL is a no-op). */
void store_remote_close(store_remote *r);
/* "s3://BUCKET/PREFIX" as given, and the endpoint in use; valid while open. */
const char *store_remote_url(const store_remote *r);
const char *store_remote_endpoint(const store_remote *r);
void store_remote_get_stats(const store_remote *r, store_remote_stats *out);

/*
 * One cheap signed request (a LIST of at most one key under the prefix) so
 * that wrong credentials, a missing bucket or an unreachable endpoint are
 * reported before any work starts.
 */
int store_remote_check(store_remote *r);
/* Create the bucket (tests and first use); one that exists and is ours is fine. */
int store_remote_create_bucket(store_remote *r);

/*
 * Upload data[0..size) as object key, in one PUT or, above the multipart
 * threshold, in parts (any failure aborts the upload, so no partial object
 * becomes visible).  data is only read during the call.
 */
int store_remote_put(store_remote *r, const char *key, const void *data, size_t size);
/*
 * Download object key into memory.  max_size (0: no limit) bounds what is
 * accepted: a larger object is QE_ECORRUPT.  QE_ENOTFOUND when absent.
 * OUT *data (malloc'd, caller frees; one extra NUL byte follows the data),
 * *size.  NULL/0 on failure.
 */
int store_remote_get(store_remote *r, const char *key, size_t max_size, void **data, size_t *size);
/* Download object key into file path (written as path.tmp, fsynced, renamed). OUT *size (may be NULL). */
int store_remote_get_file(store_remote *r, const char *key, const char *path, uint64_t *size);
/* OUT *exists: 1 when key is there; *size (may be NULL): its length. */
int store_remote_head(store_remote *r, const char *key, int *exists, uint64_t *size);
/* Delete object key; an absent key is fine. */
int store_remote_delete(store_remote *r, const char *key);

/*
 * List the objects whose key starts with sub (relative to the handle's
 * prefix; "" lists everything under it), in key order, following
 * continuation tokens.  cb gets each key relative to the prefix and its size;
 * a non-zero return stops the listing and is returned.  Every page must be a
 * complete ListBucketResult (see above) for the bucket and prefix asked,
 * with IsTruncated, each Contents with a Key and a numeric Size; otherwise
 * QE_ESTORE (after cb may have seen the keys of earlier pages), so an empty
 * listing always means that the server said "no objects".
 */
typedef int (*store_remote_list_cb)(void *ctx, const char *key, uint64_t size);
int store_remote_list(store_remote *r, const char *sub, store_remote_list_cb cb, void *ctx);

/* One listed object; key is valid only during the callback. */
typedef struct store_remote_obj {
	const char *key; /* relative to the handle's prefix */
	uint64_t size;
	int64_t mtime;   /* LastModified as unix seconds (the server's clock); -1 when absent or unreadable */
} store_remote_obj;

/*
 * store_remote_list with each object's LastModified too (remote gc needs the
 * age of a chunk to spare one a push in progress has just written).
 */
typedef int (*store_remote_list_obj_cb)(void *ctx, const store_remote_obj *obj);
int store_remote_list_objs(store_remote *r, const char *sub, store_remote_list_obj_cb cb, void *ctx);

/* SHA-256 of data as 64 lowercase hex digits and a NUL. */
void store_remote_sha256_hex(const void *data, size_t size, char out[65]);

#endif
