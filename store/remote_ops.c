/*
 * remote_ops.c - the object operations of the S3 client: put (single or
 * multipart), get into memory or a file, head, delete, list (ListObjectsV2
 * with continuation), plus the bucket check and creation.  Each is one or a
 * few remote__do() calls; retries and error texts live there.
 *
 * A listing is believed only when every page is a complete ListBucketResult
 * for the bucket and prefix asked (remote__do checks the document, this
 * file its content): remote gc deletes what a listing does not show to be
 * referenced, so a page that is not clearly S3's answer must be an error.
 */
#include "store/remote_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

int store_remote_check(store_remote *r)
{
	char pfx[1100], enc[3400], query[3600];
	snprintf(pfx, sizeof(pfx), "%s%s", r->prefix, r->prefix[0] ? "/" : "");
	int rc = remote__encode(pfx, 0, enc, sizeof(enc));
	if (rc)
		return rc;
	snprintf(query, sizeof(query), "list-type=2&max-keys=1&prefix=%s", enc);
	char shown[1200];
	snprintf(shown, sizeof(shown), "s3://%s/%s?list-type=2", r->bucket, pfx);
	remote_req q = { .method = "GET", .key = NULL, .query = query, .max_size = (size_t)16 << 20,
			 .xml_root = "ListBucketResult", .shown = shown };
	remote_resp p;
	rc = remote__do(r, &q, &p);
	remote__resp_free(&p);
	if (rc)
		qe_fail_ctx(rc, "checking %s", r->url);
	return rc;
}

int store_remote_create_bucket(store_remote *r)
{
	remote_req q = { .method = "PUT", .key = NULL, .has_body = 1, .max_size = (size_t)1 << 20 };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (rc && (strcmp(p.code, "BucketAlreadyOwnedByYou") == 0 || strcmp(p.code, "BucketAlreadyExists") == 0))
		rc = QE_OK;
	remote__resp_free(&p);
	return rc;
}

/*
 * A single-part PUT's answer carries the object's ETag, the MD5 of its bytes
 * (quoted): a server that answers 200 without storing what was sent (a
 * proxy's page, a stub) has no such ETag, so the upload is not believed.
 */
static int check_etag(store_remote *r, const char *key, const char *etag, const void *data, size_t size)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char want[33];
	if (!EVP_Digest(size ? data : "", size, md, &mdlen, EVP_md5(), NULL) || mdlen != 16)
		return qe_fail(QE_EIO, "s3: cannot compute the MD5 of s3://%s/%s%s%s (OpenSSL without MD5?)", r->bucket,
			       r->prefix, r->prefix[0] ? "/" : "", key);
	for (int i = 0; i < 16; i++)
		snprintf(want + 2 * i, 3, "%02x", md[i]);
	size_t n = strlen(etag);
	const char *e = etag;
	if (n >= 2 && e[0] == '"' && e[n - 1] == '"')
		e++, n -= 2;
	if (n == 32 && !strncasecmp(e, want, 32))
		return QE_OK;
	return qe_fail(QE_ESTORE,
		       "s3: PUT s3://%s/%s%s%s at %s: the answer's ETag %s%s%s is not the MD5 %s of the %zu bytes sent: the "
		       "server did not store them (not believed)",
		       r->bucket, r->prefix, r->prefix[0] ? "/" : "", key, r->endpoint, etag[0] ? "'" : "", etag[0] ? etag : "(none)",
		       etag[0] ? "'" : "", want, size);
}

int store_remote_put(store_remote *r, const char *key, const void *data, size_t size)
{
	if (!key || !key[0] || (size && !data))
		return qe_fail(QE_EINVAL, "s3: put needs a key and data");
	if (size > r->multipart_bytes)
		return remote__put_multipart(r, key, data, size);
	remote_req q = { .method = "PUT", .key = key, .body = data, .body_len = size, .has_body = 1,
			 .max_size = (size_t)1 << 20 };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (!rc)
		rc = check_etag(r, key, p.etag, data, size);
	remote__resp_free(&p);
	return rc;
}

int store_remote_get(store_remote *r, const char *key, size_t max_size, void **data, size_t *size)
{
	*data = NULL;
	*size = 0;
	if (!key || !key[0])
		return qe_fail(QE_EINVAL, "s3: get needs a key");
	remote_req q = { .method = "GET", .key = key, .max_size = max_size };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (rc) {
		remote__resp_free(&p);
		return rc;
	}
	if (p.has_length && p.length != p.body.n) {
		remote__resp_free(&p);
		return qe_fail(QE_EIO, "s3: s3://%s/%s%s%s: got %zu bytes of %llu", r->bucket, r->prefix,
			       r->prefix[0] ? "/" : "", key, p.body.n, (unsigned long long)p.length);
	}
	if (!p.body.p) {
		/* An empty object: still hand out a NUL-terminated buffer. */
		p.body.p = qe_calloc(1, 1);
		if (!p.body.p)
			return qe_fail(QE_ENOMEM, "s3: out of memory");
	}
	*data = p.body.p;
	*size = p.body.n;
	return QE_OK;
}

int store_remote_get_file(store_remote *r, const char *key, const char *path, uint64_t *size)
{
	char tmp[4200];
	if (size)
		*size = 0;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return qe_fail(QE_EINVAL, "s3: download path too long: '%s'", path);
	FILE *f = fopen(tmp, "w+b");
	if (!f)
		return qe_fail(QE_EIO, "s3: cannot create '%s': %s", tmp, strerror(errno));
	remote_req q = { .method = "GET", .key = key, .sink = f };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	int has_length = p.has_length;
	uint64_t length = p.length;
	remote__resp_free(&p);
	long got = -1;
	if (!rc) {
		if (fflush(f) || qe_fsync(fileno(f)) || (got = ftell(f)) < 0)
			rc = qe_fail(QE_EIO, "s3: cannot write '%s': %s", tmp, strerror(errno));
		else if (has_length && (uint64_t)got != length)
			rc = qe_fail(QE_EIO, "s3: '%s': got %ld bytes of %llu", key, got, (unsigned long long)length);
	}
	if (fclose(f) && !rc)
		rc = qe_fail(QE_EIO, "s3: cannot close '%s': %s", tmp, strerror(errno));
	if (!rc && qe_rename(tmp, path))
		rc = qe_fail(QE_EIO, "s3: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
	if (rc) {
		unlink(tmp);
		return rc;
	}
	if (size)
		*size = (uint64_t)got;
	return QE_OK;
}

int store_remote_head(store_remote *r, const char *key, int *exists, uint64_t *size)
{
	*exists = 0;
	if (size)
		*size = 0;
	remote_req q = { .method = "HEAD", .key = key };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (rc == QE_ENOTFOUND && p.status == 404) {
		/* A HEAD answer has no body, so a missing bucket looks like a missing key
		 * here; store_remote_check() tells them apart. */
		qe_clear_error();
		rc = QE_OK;
	} else if (!rc) {
		*exists = 1;
		if (size)
			*size = p.has_length ? p.length : 0;
	}
	remote__resp_free(&p);
	return rc;
}

int store_remote_delete(store_remote *r, const char *key)
{
	remote_req q = { .method = "DELETE", .key = key, .max_size = (size_t)1 << 20 };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (rc == QE_ENOTFOUND && p.status == 404 && strcmp(p.code, "NoSuchBucket")) {
		qe_clear_error();
		rc = QE_OK;
	}
	remote__resp_free(&p);
	return rc;
}

/* "2024-05-01T12:34:56.000Z" (ISO 8601 UTC, as S3 writes LastModified) to unix seconds; -1 when not that. */
static int64_t parse_last_modified(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	int n = 0;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
		   &tm.tm_sec, &n) != 6 || n == 0)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31)
		return -1;
	time_t t = timegm(&tm);
	return t == (time_t)-1 ? -1 : (int64_t)t;
}

/* Adapts the older key-and-size callback to store_remote_list_objs. */
typedef struct list_shim {
	store_remote_list_cb cb;
	void *ctx;
} list_shim;

static int list_shim_cb(void *ctx, const store_remote_obj *o)
{
	list_shim *s = ctx;
	return s->cb(s->ctx, o->key, o->size);
}

int store_remote_list(store_remote *r, const char *sub, store_remote_list_cb cb, void *ctx)
{
	list_shim s = { cb, ctx };
	return store_remote_list_objs(r, sub, list_shim_cb, &s);
}

/* A listing page's element that must be present: its text into out, or QE_ESTORE naming the request. */
static int need_text(const char *x, size_t n, const char *tag, char *out, size_t len, const char *what)
{
	int got = remote__xml_text(x, n, tag, NULL, out, len);
	if (got == 1)
		return QE_OK;
	return qe_fail(QE_ESTORE, "s3: %s: the ListBucketResult has %s <%s>", what, got ? "an unreadable" : "no", tag);
}

/* A decimal byte count with nothing else; -1 when not one. */
static int parse_size(const char *s, uint64_t *out)
{
	if (!s[0] || strspn(s, "0123456789") != strlen(s) || strlen(s) > 19)
		return -1;
	*out = strtoull(s, NULL, 10);
	return 0;
}

int store_remote_list_objs(store_remote *r, const char *sub, store_remote_list_obj_cb cb, void *ctx)
{
	char pfx[2200], enc[6600], tok[2048], etok[6200], query[13000], what[2420];
	size_t skip = r->prefix[0] ? strlen(r->prefix) + 1 : 0;
	if ((size_t)snprintf(pfx, sizeof(pfx), "%s%s%s", r->prefix, r->prefix[0] ? "/" : "", sub ? sub : "") >=
	    sizeof(pfx))
		return qe_fail(QE_EINVAL, "s3: list prefix too long");
	int rc = remote__encode(pfx, 0, enc, sizeof(enc));
	if (rc)
		return rc;
	tok[0] = 0;
	for (int page = 1;; page++) {
		/* Parameters in byte order: the canonical query of the signature. */
		if (tok[0]) {
			if ((rc = remote__encode(tok, 0, etok, sizeof(etok))))
				return rc;
			snprintf(query, sizeof(query), "continuation-token=%s&list-type=2&max-keys=%d&prefix=%s", etok,
				 r->list_page, enc);
		} else {
			snprintf(query, sizeof(query), "list-type=2&max-keys=%d&prefix=%s", r->list_page, enc);
		}
		char shown[2400];
		snprintf(shown, sizeof(shown), "s3://%s/%s?list-type=2%s", r->bucket, pfx,
			 page > 1 ? " (a continuation page)" : "");
		snprintf(what, sizeof(what), "GET %s", shown);
		remote_req q = { .method = "GET", .key = NULL, .query = query, .max_size = (size_t)64 << 20,
				 .xml_root = "ListBucketResult", .shown = shown };
		remote_resp p;
		if ((rc = remote__do(r, &q, &p))) {
			remote__resp_free(&p);
			return qe_fail_ctx(rc, "listing s3://%s/%s", r->bucket, pfx);
		}
		/* The document is a complete ListBucketResult; now its content. */
		const char *x = p.body.p ? p.body.p : "";
		size_t n = p.body.n, pos = 0, b, e;
		char trunc[16], name[80], got_pfx[2200], num[32];
		if ((rc = need_text(x, n, "IsTruncated", trunc, sizeof(trunc), what)))
			goto page_out;
		if (strcmp(trunc, "true") && strcmp(trunc, "false")) {
			rc = qe_fail(QE_ESTORE, "s3: %s: IsTruncated is '%s', not true or false", what, trunc);
			goto page_out;
		}
		if (remote__xml_text(x, n, "Name", NULL, name, sizeof(name)) == 1 && strcmp(name, r->bucket)) {
			rc = qe_fail(QE_ESTORE, "s3: %s: the answer lists bucket '%s'", what, name);
			goto page_out;
		}
		/* Prefix comes before the first Contents in S3's answers; look only there. */
		size_t head_end = n;
		if (remote__xml_span(x, n, "Contents", NULL, &b, &e))
			head_end = b;
		if (remote__xml_text(x, head_end, "Prefix", NULL, got_pfx, sizeof(got_pfx)) == 1 && strcmp(got_pfx, pfx)) {
			rc = qe_fail(QE_ESTORE, "s3: %s: the answer is for prefix '%s'", what, got_pfx);
			goto page_out;
		}
		int nkeys = 0;
		while (!rc && remote__xml_span(x, n, "Contents", &pos, &b, &e)) {
			char key[2200], sz[32];
			uint64_t size;
			if (remote__xml_text(x + b, e - b, "Key", NULL, key, sizeof(key)) != 1 ||
			    remote__xml_text(x + b, e - b, "Size", NULL, sz, sizeof(sz)) != 1 || parse_size(sz, &size)) {
				rc = qe_fail(QE_ESTORE, "s3: %s: entry %d has no readable Key or Size", what, nkeys + 1);
				break;
			}
			nkeys++;
			if (strlen(key) < skip || strncmp(key, pfx, strlen(pfx)))
				continue; /* not ours: a server that ignored the prefix */
			char lm[64];
			store_remote_obj o = { key + skip, size, -1 };
			if (remote__xml_text(x + b, e - b, "LastModified", NULL, lm, sizeof(lm)) == 1)
				o.mtime = parse_last_modified(lm);
			rc = cb(ctx, &o);
		}
		if (rc)
			goto page_out;
		if (remote__xml_text(x, n, "KeyCount", NULL, num, sizeof(num)) == 1) {
			uint64_t kc;
			if (parse_size(num, &kc) || kc < (uint64_t)nkeys) {
				rc = qe_fail(QE_ESTORE, "s3: %s: KeyCount '%s' but %d entries", what, num, nkeys);
				goto page_out;
			}
		}
		int more = strcmp(trunc, "true") == 0;
		int got_tok = more ? remote__xml_text(x, n, "NextContinuationToken", NULL, tok, sizeof(tok)) : 0;
		remote__resp_free(&p);
		if (!more)
			return QE_OK;
		if (got_tok != 1 || !tok[0] || !nkeys)
			return qe_fail(QE_ESTORE, "s3: %s: truncated answer (IsTruncated true) without a usable "
						  "continuation token",
				       what);
		continue;
page_out:
		remote__resp_free(&p);
		return rc;
	}
}
