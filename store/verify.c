/*
 * verify.c - walking the store: list every chunk, re-hash one or all.
 *
 * The walk copies the key list out of a read transaction before calling the
 * caller back.  A read transaction held across callbacks would pin old pages
 * (the file could not reuse them) and would deadlock a callback that writes
 * through the same handle; a list of 32 bytes per chunk costs little.
 */
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

#include <stdlib.h>
#include <string.h>

struct chunk_entry {
	store_hash hash;
	uint64_t size;
	uint64_t touched;
};

/* OUT *entries (malloc'd, caller frees) and *n: every chunk, in key order. */
static int list_chunks(store *s, struct chunk_entry **entries, size_t *n)
{
	*entries = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	struct chunk_entry *e = NULL;
	size_t len = 0, cap = 0;
	int rc = store_read_begin(s, &txn);
	if (rc)
		goto out_unlock;
	int mrc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
	if (mrc) {
		rc = store_mdb_fail(s, mrc, "open a chunk cursor");
		goto out_txn;
	}
	MDB_val k, v;
	for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != STORE_HASH_BYTES) {
			rc = qe_fail(QE_ECORRUPT, "store '%s': a chunk key has %zu bytes, not %d", s->path, k.mv_size,
				     STORE_HASH_BYTES);
			goto out_cursor;
		}
		if (len == cap) {
			size_t ncap = cap ? 2 * cap : 1024;
			struct chunk_entry *ne = qe_realloc(e, ncap * sizeof(*e));
			if (!ne) {
				rc = qe_fail(QE_ENOMEM, "store '%s': list of %zu chunks", s->path, ncap);
				goto out_cursor;
			}
			e = ne;
			cap = ncap;
		}
		struct chunk_entry *x = &e[len++];
		memcpy(x->hash.b, k.mv_data, STORE_HASH_BYTES);
		x->size = v.mv_size >= STORE_VAL_HDR ? v.mv_size - STORE_VAL_HDR : 0;
		x->touched = 0;
		MDB_val tv;
		if (mdb_get(txn, s->dbi_touch, &k, &tv) == 0 && tv.mv_size == 8)
			x->touched = store_get_u64(tv.mv_data);
	}
	if (mrc != MDB_NOTFOUND)
		rc = store_mdb_fail(s, mrc, "walk the chunks");
out_cursor:
	mdb_cursor_close(cur);
out_txn:
	mdb_txn_abort(txn);
out_unlock:
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		free(e);
		return rc;
	}
	*entries = e;
	*n = len;
	return 0;
}

int store_iterate_chunks(store *s, store_chunk_cb cb, void *ctx)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!cb)
		return qe_fail(QE_EINVAL, "store '%s': iterate: NULL callback", s->path);
	struct chunk_entry *e;
	size_t n;
	if ((rc = list_chunks(s, &e, &n)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++)
		rc = cb(ctx, &e[i].hash, e[i].size, e[i].touched);
	free(e);
	return rc;
}

/* Re-hash chunk h where it lies in the map.  OUT *size: payload length. */
static int verify_one(store *s, const store_hash *h, uint64_t *size)
{
	char hex[STORE_HASH_HEX], got_hex[STORE_HASH_HEX];
	*size = 0;
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	int rc = store_read_begin(s, &txn);
	if (rc)
		goto out_unlock;
	MDB_val k = { STORE_HASH_BYTES, (void *)h->b }, v;
	int mrc = mdb_get(txn, s->dbi_chunks, &k, &v);
	if (mrc == MDB_NOTFOUND) {
		rc = qe_fail(QE_ENOTFOUND, "store '%s': chunk %s is missing", s->path, store_hash_hex(h, hex));
	} else if (mrc) {
		rc = store_mdb_fail(s, mrc, "read a chunk");
	} else {
		const unsigned char *p = v.mv_data;
		uint64_t len = v.mv_size >= STORE_VAL_HDR ? store_get_u64(p + 8) : UINT64_MAX;
		uint32_t magic = v.mv_size >= 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
							  (uint32_t)p[3] << 24
						: 0;
		*size = v.mv_size >= STORE_VAL_HDR ? v.mv_size - STORE_VAL_HDR : 0;
		if (magic != STORE_VAL_MAGIC || len != v.mv_size - STORE_VAL_HDR) {
			rc = qe_fail(QE_ECORRUPT, "store '%s': chunk %s is corrupt: damaged value header", s->path,
				     store_hash_hex(h, hex));
		} else {
			store_hash got;
			store_hash_of(p + STORE_VAL_HDR, (size_t)len, &got);
			if (store_hash_cmp(&got, h) != 0)
				rc = qe_fail(QE_ECORRUPT, "store '%s': chunk %s is corrupt: its %llu bytes hash to %s",
					     s->path, store_hash_hex(h, hex), (unsigned long long)len,
					     store_hash_hex(&got, got_hex));
		}
	}
	mdb_txn_abort(txn);
out_unlock:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int store_chunk_verify(store *s, const store_hash *h)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!h)
		return qe_fail(QE_EINVAL, "store '%s': verify: NULL hash", s->path);
	uint64_t size;
	return verify_one(s, h, &size);
}

int store_verify_all(store *s, int (*on_bad)(void *ctx, const store_hash *h, const char *why), void *ctx,
		     store_verify_result *out)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!out)
		return qe_fail(QE_EINVAL, "store '%s': verify: NULL result", s->path);
	memset(out, 0, sizeof(*out));
	struct chunk_entry *e;
	size_t n;
	if ((rc = list_chunks(s, &e, &n)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		uint64_t size;
		int vrc = verify_one(s, &e[i].hash, &size);
		if (vrc == QE_ENOTFOUND)
			continue; /* deleted since the listing */
		out->checked++;
		if (vrc == QE_ECORRUPT) {
			out->bad++;
			out->bad_bytes += size;
			if (on_bad && (rc = on_bad(ctx, &e[i].hash, qe_last_error())))
				break;
		} else if (vrc) {
			rc = vrc;
			break;
		}
	}
	free(e);
	return rc;
}
