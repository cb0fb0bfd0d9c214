/*
 * ckpt_restore_s3.c - the last source of a restore: the checkpoint's pushed
 * copy on S3 (`qeffect push`, or the background push of
 * --ckpt-persist-every), used when no rank of the job can reach a tensor in
 * any store or replica (a host lost with R = 0).
 *
 * Rank 0 first checks that the copy can serve (the server answers, the
 * manifest - the remote commit - is there), so an unreachable S3 refuses
 * the restore before any byte moves, with the tensors that are missing,
 * where their stores lived and what S3 said.  Then each loading rank fetches
 * its missing tensors' chunks itself (no rank has them to send), each chunk
 * re-hashed against its content-address before it is accepted; the bytes
 * join the others in host memory and, like them, load only after every rank
 * has read everything.
 */
#include "ckpt/protocol/ckpt_restore_s3_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/remote/ckpt_remote_int.h"
#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

static void remote_opts(store_remote_opts *ro)
{
	memset(ro, 0, sizeof(*ro));
	ro->retries = -1;
	const char *ep = ckpt_options_get()->remote_endpoint;
	ro->endpoint = ep[0] ? ep : NULL;
}

/* "s3://B/P/checkpoints/RUN/STEP/manifest.json" -> "s3://B/P" and "checkpoints/RUN/STEP/manifest.json". */
static int split_manifest_url(const char *url, char *base, size_t blen, const char **key)
{
	const char *at = NULL;
	for (const char *p = strstr(url, "/checkpoints/"); p; p = strstr(p + 1, "/checkpoints/"))
		at = p;
	if (!at || strncmp(url, "s3://", 5) || (size_t)(at - url) >= blen)
		return qe_fail(QE_ECORRUPT, "the catalog's remote copy '%s' is not a manifest URL", url);
	memcpy(base, url, (size_t)(at - url));
	base[at - url] = 0;
	*key = at + 1;
	return QE_OK;
}

int ckpt__s3_probe(const cat_remote_rows *remotes, char *base, size_t blen, char *err, size_t elen)
{
	int rc = QE_ENOTFOUND;
	size_t el = 0;
	err[0] = 0;
	for (size_t i = 0; i < remotes->n; i++) {
		const char *key = NULL;
		store_remote *rem = NULL;
		store_remote_opts ro;
		remote_opts(&ro);
		int exists = 0;
		rc = split_manifest_url(remotes->rows[i].url, base, blen, &key);
		if (!rc)
			rc = store_remote_open(base, &ro, &rem);
		if (!rc)
			rc = store_remote_head(rem, key, &exists, NULL);
		if (!rc && !exists)
			rc = qe_fail(QE_ENOTFOUND, "the manifest %s is gone (remote retention?)", remotes->rows[i].url);
		if (!rc)
			qe_log(QE_LOG_INFO, "restore: what no rank can reach comes from %s (endpoint %s)", base,
			       store_remote_endpoint(rem));
		else if (el < elen - 1)
			el += (size_t)snprintf(err + el, elen - el, "%s%s (endpoint %s)", el ? "; " : "", qe_last_error(),
					       rem ? store_remote_endpoint(rem) : (ro.endpoint ? ro.endpoint : "from AWS_ENDPOINT_URL"));
		store_remote_close(rem);
		if (!rc)
			return QE_OK;
	}
	return rc;
}

int ckpt__s3_read_row(ckpt_session *s, const char *base, store_remote **rem, const cat_tensor *t, void *dst,
		      int64_t step)
{
	int rc = QE_OK;
	if (!base || !base[0])
		return qe_fail(QE_ECOMM, "restore: the plan fetches '%s' of stage %d from S3 but names no URL", t->name,
			       t->stage);
	if (!*rem) {
		store_remote_opts ro;
		remote_opts(&ro);
		if ((rc = store_remote_open(base, &ro, rem)))
			return qe_fail_ctx(rc, "restore: rank %d on %s opening %s", s->rank, s->host, base);
	}
	size_t off = 0;
	for (size_t k = 0; k < t->n_chunks; k++) {
		char key[64];
		void *data = NULL;
		size_t size = 0;
		ckpt__chunk_key(t->chunks[k].hash, key, sizeof(key));
		if (off + t->chunks[k].size > t->bytes)
			return qe_fail(QE_ECORRUPT, "tensor '%s' of stage %d: its chunks add up to more than its %llu bytes",
				       t->name, t->stage, (unsigned long long)t->bytes);
		if ((rc = store_remote_get(*rem, key, (size_t)t->chunks[k].size, &data, &size)))
			return qe_fail_ctx(rc, "restore of step %lld: tensor '%s' of stage %d (store %s), chunk %zu of %zu from %s",
					   (long long)step, t->name, t->stage, t->store_id, k + 1, t->n_chunks, base);
		store_hash h;
		store_hash_of(data, size, &h);
		if (size != t->chunks[k].size || memcmp(h.b, t->chunks[k].hash, STORE_HASH_BYTES)) {
			free(data);
			return qe_fail(QE_ECORRUPT,
				       "restore of step %lld: %s/%s (tensor '%s' of stage %d) does not match its hash or size: "
				       "the remote copy is damaged",
				       (long long)step, base, key, t->name, t->stage);
		}
		memcpy((unsigned char *)dst + off, data, size);
		off += size;
		free(data);
	}
	if (off != t->bytes)
		return qe_fail(QE_ECORRUPT, "tensor '%s' of stage %d: %zu bytes from S3, the catalog says %llu", t->name,
			       t->stage, off, (unsigned long long)t->bytes);
	qe_log(QE_LOG_INFO, "restore: rank %d on %s fetched '%s' of stage %d (%zu chunks) from %s", s->rank, s->host,
	       t->name, t->stage, t->n_chunks, base);
	return QE_OK;
}
