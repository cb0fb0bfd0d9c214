/*
 * remote_multipart.c - uploading one large object in parts:
 * CreateMultipartUpload, UploadPart for each part (each retried on its own),
 * CompleteMultipartUpload with every part's ETag, and AbortMultipartUpload
 * when anything fails, so that no half-written object ever appears and the
 * server can drop the parts.
 *
 * CompleteMultipartUpload may answer HTTP 200 and still fail (the error is
 * in the body, sent after a keep-alive pause), so its answer must be a
 * complete CompleteMultipartUploadResult; an <Error> document or anything
 * else (cut short, an HTML page) fails the upload, which is then aborted.
 * The start must be an InitiateMultipartUploadResult with an UploadId.
 *
 * An abort that itself fails (the server is gone, or does not implement it:
 * s3rver answers MethodNotAllowed) is logged, not returned: the upload's
 * original error is what the caller needs, and the parts stay invisible.
 */
#include "store/remote_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

static void abort_upload(store_remote *r, const char *key, const char *upload_enc)
{
	char query[1200];
	snprintf(query, sizeof(query), "uploadId=%s", upload_enc);
	remote_req q = { .method = "DELETE", .key = key, .query = query, .max_size = (size_t)1 << 20 };
	remote_resp p;
	/* Keep the caller's message: the abort's own failure is only logged. */
	char saved[2048];
	snprintf(saved, sizeof(saved), "%s", qe_last_error());
	int save_retries = r->retries;
	r->retries = r->retries > 1 ? 1 : r->retries;
	int rc = remote__do(r, &q, &p);
	r->retries = save_retries;
	r->stats.aborts++;
	if (rc && !(p.status == 404))
		qe_log(QE_LOG_WARN, "s3: aborting the multipart upload of '%s' failed (its parts may stay on the server "
				    "until a lifecycle rule removes them): %s",
		       key, qe_last_error());
	remote__resp_free(&p);
	qe_fail(QE_ESTORE, "%s", saved);
}

int remote__put_multipart(store_remote *r, const char *key, const void *data, size_t size)
{
	const unsigned char *bytes = data;
	size_t part = r->part_bytes;
	size_t nparts = (size + part - 1) / part;
	if (nparts > 10000) {
		/* S3 allows 10000 parts: grow the parts rather than fail. */
		part = (size + 9999) / 10000;
		nparts = (size + part - 1) / part;
	}
	char upload[1024], upload_enc[3100], query[3300];
	remote_req q = { .method = "POST", .key = key, .query = "uploads=", .has_body = 1, .max_size = (size_t)1 << 20,
			 .xml_root = "InitiateMultipartUploadResult" };
	remote_resp p;
	int rc = remote__do(r, &q, &p);
	if (rc) {
		remote__resp_free(&p);
		return qe_fail_ctx(rc, "starting the multipart upload of '%s'", key);
	}
	int got = p.body.n ? remote__xml_text(p.body.p, p.body.n, "UploadId", NULL, upload, sizeof(upload)) : 0;
	remote__resp_free(&p);
	if (got != 1 || !upload[0])
		return qe_fail(QE_ESTORE, "s3: POST %s?uploads: the InitiateMultipartUploadResult has no %sUploadId", key,
			       got ? "readable " : "");
	if ((rc = remote__encode(upload, 0, upload_enc, sizeof(upload_enc))))
		return rc;

	/* <Part><PartNumber>N</PartNumber><ETag>"..."</ETag></Part> per part. */
	size_t xml_cap = 128 + nparts * 256, xml_len = 0;
	char *xml = qe_malloc(xml_cap);
	if (!xml) {
		rc = qe_fail(QE_ENOMEM, "s3: out of memory for %zu parts", nparts);
		abort_upload(r, key, upload_enc);
		return rc;
	}
	xml_len += (size_t)snprintf(xml, xml_cap, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < nparts; i++) {
		size_t off = i * part, len = size - off < part ? size - off : part;
		snprintf(query, sizeof(query), "partNumber=%zu&uploadId=%s", i + 1, upload_enc);
		remote_req pq = { .method = "PUT", .key = key, .query = query, .body = bytes + off, .body_len = len,
				  .has_body = 1, .max_size = (size_t)1 << 20 };
		if ((rc = remote__do(r, &pq, &p))) {
			remote__resp_free(&p);
			qe_fail_ctx(rc, "uploading part %zu of %zu of '%s'", i + 1, nparts, key);
			goto abort;
		}
		if (!p.etag[0] || strchr(p.etag, '<') || strchr(p.etag, '&')) {
			remote__resp_free(&p);
			rc = qe_fail(QE_ESTORE, "s3: part %zu of '%s': the answer has no usable ETag", i + 1, key);
			goto abort;
		}
		xml_len += (size_t)snprintf(xml + xml_len, xml_cap - xml_len,
					    "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", i + 1, p.etag);
		remote__resp_free(&p);
		r->stats.parts++;
	}
	xml_len += (size_t)snprintf(xml + xml_len, xml_cap - xml_len, "</CompleteMultipartUpload>");

	snprintf(query, sizeof(query), "uploadId=%s", upload_enc);
	remote_req cq = { .method = "POST", .key = key, .query = query, .body = xml, .body_len = xml_len,
			  .has_body = 1, .max_size = (size_t)1 << 20, .xml_root = "CompleteMultipartUploadResult" };
	if ((rc = remote__do(r, &cq, &p))) {
		remote__resp_free(&p);
		qe_fail_ctx(rc, "completing the multipart upload of '%s'", key);
		goto abort;
	}
	remote__resp_free(&p);
	free(xml);
	r->stats.multipart++;
	return QE_OK;
abort:
	free(xml);
	abort_upload(r, key, upload_enc);
	return rc;
}
