/*
 * ckpt_remote_upload.c - one content-addressed chunk to object storage unless
 * the remote already holds it: the step `qeffect push` (one host), push as a
 * job over the ranks (ckpt_job_push.c) and the background push of tiered
 * checkpoints (ckpt_persist.c) all take for every chunk.
 *
 * HEAD first: an object of the chunk's key and size is taken as present
 * (keys are content hashes, so equal size means equal bytes unless the
 * remote was tampered with - verify after pull re-hashes).  An object of
 * another size is uploaded again, with a warning.  Otherwise the chunk is
 * read from the caller's store through `read` (which re-hashes it), checked
 * against the size the catalog lists, and PUT.  The buffer grows to the
 * largest chunk and is kept for the next call.
 */
#include "ckpt/remote/ckpt_remote_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/fault.h"
#include "runtime/core/status.h"

int ckpt__upload_chunk(ckpt__uploader *u, const unsigned char hash[16], uint64_t size, ckpt__chunk_read_fn read,
		       void *ctx, const char *where)
{
	char key[64];
	int exists = 0, rc;
	uint64_t have = 0;
	ckpt__chunk_key(hash, key, sizeof(key));
	if ((rc = store_remote_head(u->rem, key, &exists, &have)))
		return rc;
	if (exists && have == size) {
		u->present++;
		return QE_OK;
	}
	if (exists)
		qe_log(QE_LOG_WARN, "upload: remote %s has %llu bytes, expected %llu: uploading it again", key,
		       (unsigned long long)have, (unsigned long long)size);
	if (size > u->cap || !u->buf) {
		unsigned char *nb = qe_realloc(u->buf, size ? size : 1);
		if (!nb)
			return qe_fail(QE_ENOMEM, "upload: out of memory for a %llu-byte chunk", (unsigned long long)size);
		u->buf = nb;
		u->cap = size ? size : 1;
	}
	store_hash h;
	uint64_t got = 0;
	memcpy(h.b, hash, 16);
	if ((rc = read(ctx, &h, u->buf, u->cap, &got)))
		return qe_fail_ctx(rc, "reading chunk %s from %s", key + 7, where);
	if (got != size)
		return qe_fail(QE_ECORRUPT, "chunk %s in %s has %llu bytes, the catalog says %llu", key + 7, where,
			       (unsigned long long)got, (unsigned long long)size);
	if ((rc = store_remote_put(u->rem, key, u->buf, (size_t)got)))
		return rc;
	u->uploaded++;
	u->bytes += got;
	return QE_OK;
}

void ckpt__uploader_release(ckpt__uploader *u)
{
	free(u->buf);
	u->buf = NULL;
	u->cap = 0;
}
