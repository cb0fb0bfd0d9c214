/*
 * stream.c - a tensor put in pieces: the caller hands the tensor's bytes a
 * piece at a time (from a small reused buffer: the checkpoint copies each
 * piece off the device while the previous one is hashed and written), and
 * the store splits them into exactly the chunks store_put_tensor would make
 * of the whole tensor - same boundaries, same hashes, same values.
 *
 * Pieces are whole multiples of the chunk size (only the last may end
 * short), so a chunk never straddles two pieces.  The write transaction
 * stays open across pieces until it holds about txn_bytes, as a whole-tensor
 * put's would, so a streamed tensor costs no more commits (data flushes)
 * than a whole one.  Such a transaction cannot be run again once its early
 * pieces are gone, so instead of growing the map after MDB_MAP_FULL the
 * stream grows it before each transaction (for what that transaction will
 * hold) and commits early when the next piece would not fit what is left:
 * the map never fills inside an open transaction.
 */
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)

struct store_stream {
	store *s;
	size_t chunk_size, bytes, given; /* tensor size, bytes handed in so far */
	store_chunk *chunks;
	size_t n, next;                  /* chunks of the tensor, the first not yet written */
	MDB_txn *txn;                    /* open: s->mu is held by this stream */
	size_t txn_bytes, room;          /* payload in txn; map room when it began */
	uint64_t now;
	int failed;
};

static void unlock_abort(store_stream *w)
{
	if (w->txn) {
		mdb_txn_abort(w->txn);
		w->txn = NULL;
		pthread_mutex_unlock(&w->s->mu);
	}
}

static int commit(store_stream *w)
{
	if (!w->txn)
		return 0;
	int mrc = store__txn_commit(w->txn); /* frees the transaction even when it fails */
	w->txn = NULL;
	pthread_mutex_unlock(&w->s->mu);
	return mrc ? store_mdb_fail(w->s, mrc, "commit") : 0;
}

int store_stream_begin(store *s, size_t bytes, size_t chunk_size, store_stream **out)
{
	int rc;
	if (!out)
		return qe_fail(QE_EINVAL, "store_stream_begin: NULL out");
	*out = NULL;
	if ((rc = store_check(s)))
		return rc;
	if (s->read_only)
		return qe_fail(QE_EINVAL, "store '%s': put: the store is open read-only", s->path);
	if (!chunk_size)
		chunk_size = STORE_DEFAULT_CHUNK;
	if (chunk_size > STORE_MAX_CHUNK)
		return qe_fail(QE_EINVAL, "store '%s': chunk size %zu exceeds the limit %zu", s->path, chunk_size,
			       (size_t)STORE_MAX_CHUNK);
	store_stream *w = qe_calloc(1, sizeof(*w));
	size_t n = (bytes + chunk_size - 1) / chunk_size;
	if (!w || !(w->chunks = qe_calloc(n + 1, sizeof(*w->chunks)))) {
		free(w);
		return qe_fail(QE_ENOMEM, "store '%s': streamed put of %zu bytes", s->path, bytes);
	}
	for (size_t i = 0; i < n; i++)
		w->chunks[i].size = i + 1 < n ? chunk_size : bytes - i * chunk_size;
	w->s = s;
	w->chunk_size = chunk_size;
	w->bytes = bytes;
	w->n = n;
	w->now = (uint64_t)time(NULL);
	*out = w;
	return 0;
}

int store_stream_put(store_stream *w, const void *data, size_t len, store_chunk_list *piece)
{
	if (piece) {
		piece->n = 0;
		piece->chunks = NULL;
	}
	if (!w)
		return qe_fail(QE_EINVAL, "store_stream_put: NULL stream");
	store *s = w->s;
	if (w->failed)
		return qe_fail(QE_EINVAL, "store '%s': streamed put used after a failure", s->path);
	if (!len)
		return 0;
	if (!data || len > w->bytes - w->given || (len % w->chunk_size && w->given + len != w->bytes)) {
		w->failed = 1;
		unlock_abort(w);
		return qe_fail(QE_EINVAL,
			       "store '%s': streamed put: a piece of %zu bytes at %zu of %zu is not a whole number of "
			       "%zu-byte chunks",
			       s->path, len, w->given, w->bytes, w->chunk_size);
	}
	size_t first = w->next, k = (len + w->chunk_size - 1) / w->chunk_size;
	const unsigned char *p = data;
	for (size_t i = 0; i < k; i++)
		store_hash_of(p + i * w->chunk_size, (size_t)w->chunks[first + i].size, &w->chunks[first + i].hash);
	int rc = 0;
	/* The open transaction ends before this piece when the piece would take it past
	 * txn_bytes, or past what the map had room for when it began. */
	size_t need = len + len / 8 + MIB;
	if (w->txn && (w->txn_bytes + len > s->txn_bytes ||
		       w->room < w->txn_bytes + w->txn_bytes / 8 + MIB + need))
		rc = commit(w);
	if (!rc && !w->txn) {
		size_t left = w->bytes - w->given, expect = left < s->txn_bytes ? left : s->txn_bytes;
		if (expect < len)
			expect = len;
		pthread_mutex_lock(&s->mu);
		rc = store__write_begin(s, expect + w->n * 64, w->chunk_size < w->bytes ? w->chunk_size : w->bytes,
					&w->txn);
		if (rc)
			pthread_mutex_unlock(&s->mu);
		else {
			w->room = store__map_room(s);
			w->txn_bytes = 0;
		}
	}
	if (!rc) {
		struct store_put_ctx c = { .data = p, .chunks = w->chunks + first, .chunk_size = w->chunk_size,
					   .first = 0, .end = k, .now = w->now };
		int mdb_rc = 0;
		rc = store__put_body(s, w->txn, &c, &mdb_rc);
		if (rc && mdb_rc == MDB_MAP_FULL)
			rc = qe_fail(QE_ESTORE, "store '%s': the map filled inside a streamed put (%zu bytes of room were "
						"made for it); the tensor was not stored",
				     s->path, w->room);
	}
	if (rc) {
		w->failed = 1;
		unlock_abort(w);
		return rc;
	}
	w->txn_bytes += len;
	w->given += len;
	w->next = first + k;
	if (piece) {
		piece->n = k;
		piece->chunks = w->chunks + first;
	}
	return 0;
}

int store_stream_end(store_stream *w, store_chunk_list *out)
{
	if (out) {
		out->n = 0;
		out->chunks = NULL;
	}
	if (!w)
		return qe_fail(QE_EINVAL, "store_stream_end: NULL stream");
	int rc = 0;
	if (w->failed)
		rc = qe_fail(QE_EINVAL, "store '%s': streamed put ended after a failure", w->s->path);
	else if (w->given != w->bytes)
		rc = qe_fail(QE_EINVAL, "store '%s': streamed put ended after %zu of %zu bytes", w->s->path, w->given,
			     w->bytes);
	if (rc)
		unlock_abort(w);
	else
		rc = commit(w);
	if (!rc && out) {
		out->n = w->n;
		out->chunks = w->chunks;
		w->chunks = NULL;
	}
	free(w->chunks);
	free(w);
	return rc;
}

void store_stream_abort(store_stream *w)
{
	if (!w)
		return;
	unlock_abort(w);
	free(w->chunks);
	free(w);
}
