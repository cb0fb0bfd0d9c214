/*
 * chunk.c - tensors as content-addressed chunks: split, hash, store once,
 * read back and re-hash.
 *
 * A chunk's key is its XXH3-128 hash, so a put first looks the key up and
 * writes nothing when it is present (dedup).  Hashing runs outside the
 * handle's mutex; copies into and out of the map run inside it, because the
 * map may move when it grows.  A read re-hashes the caller's copy rather than
 * the mapped bytes: what is checked is exactly what the caller gets.
 *
 * Speed: a tensor of several chunks is hashed on a helper thread that runs
 * ahead of the writes, so hashing overlaps the copy and the disk.  Payloads
 * go into the file with pwrite at the place LMDB reserved for them (store.c:
 * WRITEMAP), their writeback started piece by piece.  A read looks every
 * chunk up first, asks the kernel to read the next chunk ahead
 * (POSIX_FADV_WILLNEED) and preads the current one straight into the
 * caller's buffer, then hashes it there while the disk reads on.
 */
#define _GNU_SOURCE
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* Values at least this long are read and written through the file
 * descriptor; smaller ones are copied through the map. */
#define FILE_IO_MIN ((size_t)1 << 20)

void store_hash_of(const void *data, size_t size, store_hash *out)
{
	XXH128_hash_t h = XXH3_128bits(data, size);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(out->b, c.digest, STORE_HASH_BYTES);
}

char *store_hash_hex(const store_hash *h, char out[STORE_HASH_HEX])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < STORE_HASH_BYTES; i++) {
		out[2 * i] = digits[h->b[i] >> 4];
		out[2 * i + 1] = digits[h->b[i] & 15];
	}
	out[2 * STORE_HASH_BYTES] = '\0';
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int store_hash_parse(const char *hex, store_hash *out)
{
	if (!hex || strlen(hex) != 2 * STORE_HASH_BYTES)
		return qe_fail(QE_EINVAL, "store: '%s' is not a chunk hash (32 hex digits)", hex ? hex : "(null)");
	for (int i = 0; i < STORE_HASH_BYTES; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return qe_fail(QE_EINVAL, "store: '%s' is not a chunk hash (32 hex digits)", hex);
		out->b[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

int store_hash_cmp(const store_hash *a, const store_hash *b)
{
	return memcmp(a->b, b->b, STORE_HASH_BYTES);
}

void store_chunk_list_free(store_chunk_list *l)
{
	if (!l)
		return;
	free(l->chunks);
	l->chunks = NULL;
	l->n = 0;
}

/* Payload length of a stored value, or -1 when its header is damaged. */
static int64_t value_length(const MDB_val *v)
{
	if (v->mv_size < STORE_VAL_HDR)
		return -1;
	const unsigned char *p = v->mv_data;
	uint32_t magic = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	uint64_t len = store_get_u64(p + 8);
	if (magic != STORE_VAL_MAGIC || len != v->mv_size - STORE_VAL_HDR)
		return -1;
	return (int64_t)len;
}

/* Add delta to the payload byte counter in the meta database. */
static int add_bytes(store *s, MDB_txn *txn, int64_t delta, int *mdb_rc)
{
	if (delta == 0)
		return 0;
	MDB_val k = { 5, "bytes" }, v;
	uint64_t cur = 0;
	int rc = mdb_get(txn, s->dbi_meta, &k, &v);
	if (rc == 0 && v.mv_size == 8)
		cur = store_get_u64(v.mv_data);
	else if (rc && rc != MDB_NOTFOUND)
		return *mdb_rc = rc, store_mdb_fail(s, rc, "read the byte counter");
	unsigned char buf[8];
	cur = (delta < 0 && (uint64_t)-delta > cur) ? 0 : cur + (uint64_t)delta;
	store_put_u64(buf, cur);
	v.mv_size = 8;
	v.mv_data = buf;
	rc = store__mdb_put(txn, s->dbi_meta, &k, &v, 0);
	return rc ? (*mdb_rc = rc, store_mdb_fail(s, rc, "update the byte counter")) : 0;
}

/* --- put -------------------------------------------------------------------------- */

int store__put_body(store *s, MDB_txn *txn, void *vctx, int *mdb_rc)
{
	struct store_put_ctx *c = vctx;
	int64_t delta = 0;
	char hex[STORE_HASH_HEX];
	unsigned char stamp[8];
	store_put_u64(stamp, c->now);
	c->written = 0;
	for (size_t i = c->first; i < c->end; i++) {
		const store_chunk *ch = &c->chunks[i];
		MDB_val k = { STORE_HASH_BYTES, (void *)ch->hash.b }, v;
		int rc = mdb_get(txn, s->dbi_chunks, &k, &v);
		if (rc && rc != MDB_NOTFOUND)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "look up a chunk");
		int write = rc == MDB_NOTFOUND;
		if (!write) {
			int64_t len = value_length(&v);
			if (len != (int64_t)ch->size) {
				/* Same hash, wrong length: the stored value is damaged (a
				 * real collision of XXH3-128 is not a practical concern).
				 * We have the right bytes in hand, so repair it. */
				qe_log(QE_LOG_WARN, "store '%s': chunk %s has a damaged header; rewriting it", s->path,
				       store_hash_hex(&ch->hash, hex));
				delta -= len > 0 ? len : 0;
				write = 1;
			}
		}
		if (write) {
			v.mv_size = STORE_VAL_HDR + ch->size;
			v.mv_data = NULL;
			rc = store__mdb_put(txn, s->dbi_chunks, &k, &v, MDB_RESERVE);
			if (rc)
				return *mdb_rc = rc, store_mdb_fail(s, rc, "write a chunk");
			unsigned char *p = v.mv_data;
			memset(p, 0, STORE_VAL_HDR);
			p[0] = (unsigned char)(STORE_VAL_MAGIC & 0xff);
			p[1] = (unsigned char)(STORE_VAL_MAGIC >> 8 & 0xff);
			p[2] = (unsigned char)(STORE_VAL_MAGIC >> 16 & 0xff);
			p[3] = (unsigned char)(STORE_VAL_MAGIC >> 24);
			store_put_u64(p + 8, ch->size);
			const unsigned char *src = c->data + i * c->chunk_size;
			uint64_t off;
			if (s->writemap && ch->size >= FILE_IO_MIN &&
			    store_value_offset(s, p, v.mv_size, &off) == 0) {
				int qrc = store_write_at(s, src, (size_t)ch->size, off + STORE_VAL_HDR);
				if (qrc)
					return qe_fail_ctx(qrc, "store '%s': write chunk %s", s->path,
							   store_hash_hex(&ch->hash, hex));
			} else if (ch->size) {
				memcpy(p + STORE_VAL_HDR, src, ch->size);
			}
			delta += (int64_t)ch->size;
			c->written++;
		}
		/* Found or written, the chunk was just put: gc's grace starts now. */
		MDB_val tv = { 8, stamp };
		rc = store__mdb_put(txn, s->dbi_touch, &k, &tv, 0);
		if (rc)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "record a chunk's put time");
	}
	return add_bytes(s, txn, delta, mdb_rc);
}

/* The hashing helper: chunks[0..n) hashed in order, done counts them. */
struct hasher {
	const unsigned char *data;
	store_chunk *chunks;
	size_t chunk_size, n;
	size_t done;  /* under mu */
	int stop;     /* under mu: the put gave up */
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void *hasher_main(void *arg)
{
	struct hasher *h = arg;
	for (size_t i = 0; i < h->n; i++) {
		pthread_mutex_lock(&h->mu);
		int stop = h->stop;
		pthread_mutex_unlock(&h->mu);
		if (stop)
			break;
		store_hash_of(h->data + i * h->chunk_size, (size_t)h->chunks[i].size, &h->chunks[i].hash);
		pthread_mutex_lock(&h->mu);
		h->done = i + 1;
		pthread_cond_signal(&h->cv);
		pthread_mutex_unlock(&h->mu);
	}
	return NULL;
}

static void hasher_wait(struct hasher *h, size_t upto)
{
	pthread_mutex_lock(&h->mu);
	while (h->done < upto)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

int store_put_tensor(store *s, const void *data, size_t bytes, size_t chunk_size, store_chunk_list *out)
{
	int rc;
	if (!out)
		return qe_fail(QE_EINVAL, "store_put_tensor: NULL out");
	out->n = 0;
	out->chunks = NULL;
	if ((rc = store_check(s)))
		return rc;
	if (!chunk_size)
		chunk_size = STORE_DEFAULT_CHUNK;
	if (chunk_size > STORE_MAX_CHUNK)
		return qe_fail(QE_EINVAL, "store '%s': chunk size %zu exceeds the limit %zu", s->path, chunk_size,
			       (size_t)STORE_MAX_CHUNK);
	if (bytes && !data)
		return qe_fail(QE_EINVAL, "store '%s': put of %zu bytes from NULL", s->path, bytes);
	if (!bytes)
		return 0;

	size_t n = (bytes + chunk_size - 1) / chunk_size;
	store_chunk *chunks = qe_calloc(n, sizeof(*chunks));
	if (!chunks)
		return qe_fail(QE_ENOMEM, "store '%s': chunk list of %zu entries", s->path, n);
	for (size_t i = 0; i < n; i++)
		chunks[i].size = i + 1 < n ? chunk_size : bytes - i * chunk_size;
	/* Several chunks: hash on a helper thread ahead of the writes.  Without
	 * the thread (one chunk, or it cannot start) hash inline. */
	struct hasher h = { .data = data, .chunks = chunks, .chunk_size = chunk_size, .n = n };
	pthread_t tid;
	int threaded = 0;
	if (n > 1) {
		pthread_mutex_init(&h.mu, NULL);
		pthread_cond_init(&h.cv, NULL);
		threaded = pthread_create(&tid, NULL, hasher_main, &h) == 0;
		if (!threaded) {
			pthread_cond_destroy(&h.cv);
			pthread_mutex_destroy(&h.mu);
		}
	}
	struct store_put_ctx c = { .data = data, .chunks = chunks, .chunk_size = chunk_size, .now = (uint64_t)time(NULL) };
	rc = 0;
	for (size_t first = 0; first < n;) {
		/* A transaction holds about txn_bytes of chunks, at least one. */
		size_t end = first, batch = 0, largest = 0;
		while (end < n && (end == first || batch + chunk_size <= s->txn_bytes)) {
			batch += (size_t)chunks[end].size;
			if ((size_t)chunks[end].size > largest)
				largest = (size_t)chunks[end].size;
			end++;
		}
		if (threaded)
			hasher_wait(&h, end);
		else
			for (size_t i = first; i < end; i++)
				store_hash_of((const unsigned char *)data + i * chunk_size, (size_t)chunks[i].size,
					      &chunks[i].hash);
		c.first = first;
		c.end = end;
		rc = store_write_txn(s, batch + (end - first) * 64, largest, store__put_body, &c, "put tensor");
		if (rc)
			break;
		first = end;
	}
	if (threaded) {
		pthread_mutex_lock(&h.mu);
		h.stop = 1;
		pthread_mutex_unlock(&h.mu);
		pthread_join(tid, NULL);
		pthread_cond_destroy(&h.cv);
		pthread_mutex_destroy(&h.mu);
	}
	if (rc) {
		free(chunks);
		return rc;
	}
	out->n = n;
	out->chunks = chunks;
	return 0;
}

int store_put_chunk(store *s, const void *data, size_t size, store_hash *hash)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (size > STORE_MAX_CHUNK || (size && !data))
		return qe_fail(QE_EINVAL, "store '%s': bad chunk of %zu bytes", s->path, size);
	store_chunk ch = { .size = size };
	store_hash_of(data, size, &ch.hash);
	struct store_put_ctx c = { .data = data, .chunks = &ch, .chunk_size = size, .first = 0, .end = 1,
			     .now = (uint64_t)time(NULL) };
	rc = store_write_txn(s, size + 64, size, store__put_body, &c, "put chunk");
	if (!rc && hash)
		*hash = ch.hash;
	return rc;
}

/* --- get -------------------------------------------------------------------------- */

/* Find chunk h (expected size, or UINT64_MAX for any) and check its header.
 * Call with s->mu held and txn open.  OUT *payload: its bytes in the map,
 * valid while txn is; *size: its length. */
static int locate_chunk(store *s, MDB_txn *txn, const store_hash *h, uint64_t expect, size_t idx, size_t count,
			const unsigned char **payload, uint64_t *size)
{
	char hex[STORE_HASH_HEX];
	MDB_val k = { STORE_HASH_BYTES, (void *)h->b }, v;
	int rc = mdb_get(txn, s->dbi_chunks, &k, &v);
	if (rc == MDB_NOTFOUND)
		return qe_fail(QE_ENOTFOUND, "store '%s': chunk %zu of %zu (%s) is missing", s->path, idx, count,
			       store_hash_hex(h, hex));
	if (rc)
		return store_mdb_fail(s, rc, "read a chunk");
	int64_t len = value_length(&v);
	if (len < 0)
		return qe_fail(QE_ECORRUPT, "store '%s': chunk %zu of %zu (%s) is corrupt: damaged value header", s->path,
			       idx, count, store_hash_hex(h, hex));
	*size = (uint64_t)len;
	if (expect != UINT64_MAX && (uint64_t)len != expect)
		return qe_fail(QE_ECORRUPT, "store '%s': chunk %zu of %zu (%s) is corrupt: %lld bytes stored, %llu expected",
			       s->path, idx, count, store_hash_hex(h, hex), (long long)len, (unsigned long long)expect);
	*payload = (const unsigned char *)v.mv_data + STORE_VAL_HDR;
	return 0;
}

/* Offset in data.mdb of a located chunk's payload: 0, or -1 (use the map). */
static int payload_offset(store *s, const unsigned char *payload, uint64_t len, uint64_t *off)
{
	if (len < FILE_IO_MIN || store_value_offset(s, payload - STORE_VAL_HDR, STORE_VAL_HDR + (size_t)len, off))
		return -1;
	*off += STORE_VAL_HDR;
	return 0;
}

/* Ask the kernel to start reading a located chunk (no wait). */
static void read_ahead(store *s, const unsigned char *payload, uint64_t len)
{
	uint64_t off;
	if (payload_offset(s, payload, len, &off) == 0)
		posix_fadvise(s->data_fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
}

/* Copy a located chunk into dst: large ones with pread (the kernel's
 * readahead, no page faults on the map), small ones from the map. */
static int copy_located(store *s, const unsigned char *payload, uint64_t len, void *dst)
{
	uint64_t off;
	if (payload_offset(s, payload, len, &off) == 0)
		return store_read_at(s, dst, (size_t)len, off);
	if (len)
		memcpy(dst, payload, (size_t)len);
	return 0;
}

/* Copy chunk h (expected size, or UINT64_MAX for any up to cap) out of the
 * store into dst.  Call with s->mu held and txn open.  OUT *size: its length. */
static int copy_chunk(store *s, MDB_txn *txn, const store_hash *h, uint64_t expect, void *dst, size_t cap,
		      size_t idx, size_t count, uint64_t *size)
{
	char hex[STORE_HASH_HEX];
	const unsigned char *payload;
	int rc = locate_chunk(s, txn, h, expect, idx, count, &payload, size);
	if (rc)
		return rc;
	if (*size > cap)
		return qe_fail(QE_EINVAL, "store '%s': chunk %s has %llu bytes, buffer only %zu", s->path,
			       store_hash_hex(h, hex), (unsigned long long)*size, cap);
	return copy_located(s, payload, *size, dst);
}

static int check_hash(store *s, const store_hash *h, const void *data, size_t size, size_t idx, size_t count)
{
	store_hash got;
	store_hash_of(data, size, &got);
	if (store_hash_cmp(&got, h) == 0)
		return 0;
	char want_hex[STORE_HASH_HEX], got_hex[STORE_HASH_HEX];
	return qe_fail(QE_ECORRUPT, "store '%s': chunk %zu of %zu (%s) is corrupt: its %zu bytes hash to %s", s->path,
		       idx, count, store_hash_hex(h, want_hex), size, store_hash_hex(&got, got_hex));
}

/* Read chunks [first, first + count) of list into dst; re-hash each there when `check`. */
static int get_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, void *dst, size_t bytes,
		      int check)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!list || (list->n && !list->chunks) || (bytes && !dst))
		return qe_fail(QE_EINVAL, "store '%s': get tensor: NULL list or destination", s->path);
	if (first > list->n || count > list->n - first)
		return qe_fail(QE_EINVAL, "store '%s': chunks %zu..%zu of a list of %zu", s->path, first, first + count,
			       list->n);
	uint64_t total = 0;
	for (size_t i = first; i < first + count; i++) {
		if (list->chunks[i].size > STORE_MAX_CHUNK)
			return qe_fail(QE_EINVAL, "store '%s': chunk %zu of the list has size %llu", s->path, i,
				       (unsigned long long)list->chunks[i].size);
		total += list->chunks[i].size;
	}
	if (total != bytes)
		return qe_fail(QE_EINVAL, "store '%s': the chunk list covers %llu bytes but the tensor has %zu", s->path,
			       (unsigned long long)total, bytes);
	/* the range and, to read ahead, the chunk after it */
	size_t span = count + (first + count < list->n ? 1 : 0);
	const unsigned char **where = qe_calloc(span + 1, sizeof(*where));
	if (!where)
		return qe_fail(QE_ENOMEM, "store '%s': get tensor: list of %zu chunks", s->path, list->n);
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	rc = store_read_begin(s, &txn);
	if (!rc) {
		/* Look every chunk up first (a missing one fails before any copy),
		 * then copy each while the kernel reads the next one ahead, and hash
		 * the copy: what is checked is exactly what the caller gets.  The
		 * chunk after the range is only read ahead (a caller reading a
		 * tensor range by range keeps the disk busy while it hashes). */
		uint64_t got;
		for (size_t k = 0; k < count && !rc; k++)
			rc = locate_chunk(s, txn, &list->chunks[first + k].hash, list->chunks[first + k].size, first + k,
					  list->n, &where[k], &got);
		if (!rc && span > count &&
		    locate_chunk(s, txn, &list->chunks[first + count].hash, list->chunks[first + count].size,
				 first + count, list->n, &where[count], &got))
			qe_clear_error(); /* a bad next chunk is the next call's failure */
		if (!rc && count)
			read_ahead(s, where[0], list->chunks[first].size);
		size_t off = 0;
		for (size_t k = 0; k < count && !rc; k++) {
			const store_chunk *ch = &list->chunks[first + k];
			unsigned char *to = (unsigned char *)dst + off;
			if (k + 1 < span && where[k + 1])
				read_ahead(s, where[k + 1], list->chunks[first + k + 1].size);
			rc = copy_located(s, where[k], ch->size, to);
			if (!rc && check)
				rc = check_hash(s, &ch->hash, to, (size_t)ch->size, first + k, list->n);
			off += (size_t)ch->size;
		}
		mdb_txn_abort(txn);
	}
	pthread_mutex_unlock(&s->mu);
	free(where);
	return rc;
}

int store_get_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, void *dst, size_t bytes)
{
	return get_chunks(s, list, first, count, dst, bytes, 1);
}

int store_read_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, void *dst, size_t bytes)
{
	return get_chunks(s, list, first, count, dst, bytes, 0);
}

int store_check_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, const void *buf,
		       size_t bytes)
{
	if (!list || (count && !list->chunks) || first > list->n || count > list->n - first || (bytes && !buf))
		return qe_fail(QE_EINVAL, "store '%s': check chunks: bad range or NULL buffer", s->path);
	size_t off = 0;
	for (size_t k = 0; k < count; k++) {
		const store_chunk *ch = &list->chunks[first + k];
		if (ch->size > bytes - off)
			return qe_fail(QE_EINVAL, "store '%s': check chunks: %zu bytes do not hold chunk %zu", s->path,
				       bytes, first + k);
		int rc = check_hash(s, &ch->hash, (const unsigned char *)buf + off, (size_t)ch->size, first + k, list->n);
		if (rc)
			return rc;
		off += (size_t)ch->size;
	}
	return QE_OK;
}

void store_prefetch_chunks(store *s, const store_chunk_list *list, size_t first, size_t count)
{
	if (store_check(s) || !list || !list->chunks || first > list->n || count > list->n - first || !count) {
		qe_clear_error();
		return;
	}
	/* pairs: offset, length (0: not on the file path).  Plain calloc: a hint
	 * thread must not take turns of the injected allocation faults. */
	uint64_t *off = calloc(count, 2 * sizeof(*off));
	if (!off)
		return;
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	if (store_read_begin(s, &txn) == 0) {
		for (size_t k = 0; k < count; k++) {
			const store_chunk *ch = &list->chunks[first + k];
			const unsigned char *payload;
			uint64_t len;
			if (locate_chunk(s, txn, &ch->hash, ch->size, first + k, list->n, &payload, &len) ||
			    payload_offset(s, payload, len, &off[2 * k]))
				continue;
			off[2 * k + 1] = len;
		}
		mdb_txn_abort(txn);
	}
	pthread_mutex_unlock(&s->mu);
	qe_clear_error();
	for (size_t k = 0; k < count; k++)
		if (off[2 * k + 1])
			posix_fadvise(s->data_fd, (off_t)off[2 * k], (off_t)off[2 * k + 1], POSIX_FADV_WILLNEED);
	free(off);
}

int store_get_tensor(store *s, const store_chunk_list *list, void *dst, size_t bytes)
{
	return store_get_chunks(s, list, 0, list ? list->n : 0, dst, bytes);
}

int store_get_chunk(store *s, const store_hash *h, void *dst, size_t cap, uint64_t *size)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!h || (cap && !dst))
		return qe_fail(QE_EINVAL, "store '%s': get chunk: NULL hash or destination", s->path);
	uint64_t got = 0;
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	rc = store_read_begin(s, &txn);
	if (!rc) {
		rc = copy_chunk(s, txn, h, UINT64_MAX, dst, cap, 0, 1, &got);
		mdb_txn_abort(txn);
	}
	pthread_mutex_unlock(&s->mu);
	if (size)
		*size = got;
	if (rc)
		return rc;
	return check_hash(s, h, dst, (size_t)got, 0, 1);
}

int store_has_chunk(store *s, const store_hash *h, int *present, uint64_t *size)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!h || !present)
		return qe_fail(QE_EINVAL, "store '%s': has chunk: NULL argument", s->path);
	*present = 0;
	if (size)
		*size = 0;
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	rc = store_read_begin(s, &txn);
	if (!rc) {
		MDB_val k = { STORE_HASH_BYTES, (void *)h->b }, v;
		int mrc = mdb_get(txn, s->dbi_chunks, &k, &v);
		if (mrc == 0) {
			*present = 1;
			if (size)
				*size = v.mv_size >= STORE_VAL_HDR ? v.mv_size - STORE_VAL_HDR : 0;
		} else if (mrc != MDB_NOTFOUND) {
			rc = store_mdb_fail(s, mrc, "look up a chunk");
		}
		mdb_txn_abort(txn);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* --- delete ------------------------------------------------------------------------ */

struct del_ctx {
	const store_hash *hashes;
	size_t first, end;
	uint64_t reclaimed;
};

static int del_body(store *s, MDB_txn *txn, void *vctx, int *mdb_rc)
{
	struct del_ctx *c = vctx;
	c->reclaimed = 0;
	for (size_t i = c->first; i < c->end; i++) {
		MDB_val k = { STORE_HASH_BYTES, (void *)c->hashes[i].b }, v;
		int rc = mdb_get(txn, s->dbi_chunks, &k, &v);
		if (rc == MDB_NOTFOUND)
			continue;
		if (rc)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "look up a chunk to delete");
		int64_t len = value_length(&v);
		rc = mdb_del(txn, s->dbi_chunks, &k, NULL);
		if (rc)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "delete a chunk");
		rc = mdb_del(txn, s->dbi_touch, &k, NULL);
		if (rc && rc != MDB_NOTFOUND)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "delete a chunk's put time");
		c->reclaimed += len > 0 ? (uint64_t)len : 0;
	}
	return add_bytes(s, txn, -(int64_t)c->reclaimed, mdb_rc);
}

int store_delete_chunks(store *s, const store_hash *hashes, size_t n, uint64_t *reclaimed)
{
	int rc = store_check(s);
	if (reclaimed)
		*reclaimed = 0;
	if (rc)
		return rc;
	if (n && !hashes)
		return qe_fail(QE_EINVAL, "store '%s': delete: NULL hash list", s->path);
	/* Bounded transactions: a freed overflow run costs free-list pages. */
	const size_t per_txn = 4096;
	for (size_t first = 0; first < n; first += per_txn) {
		struct del_ctx c = { .hashes = hashes, .first = first, .end = first + per_txn < n ? first + per_txn : n };
		if ((rc = store_write_txn(s, (c.end - c.first) * 64, 0, del_body, &c, "delete chunks")))
			return rc;
		if (reclaimed)
			*reclaimed += c.reclaimed;
	}
	return 0;
}
