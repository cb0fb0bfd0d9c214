/*
 * test_stream.c - a tensor put in pieces (store_stream_*) gives exactly what
 * a whole put gives: the same chunk list (sizes and hashes) and the same
 * stored bytes, for piece sizes of one chunk, several chunks and the whole
 * tensor, at sizes around the chunk boundary; a tiny map and small
 * transactions make the stream grow the map and commit early between
 * pieces; pieces that split a chunk, overrun the tensor or stop short are
 * refused and leave the handle usable.
 */
#include "runtime/core/status.h"
#include "store/store.h"
#include "store_testutil.h"
#include "testlib.h"

#define CHUNK 4096
#define SEED 0x5eed0016ull

/* Put src in pieces of `piece` bytes; OUT *l. */
static int put_pieces(store *s, const unsigned char *src, size_t bytes, size_t piece, store_chunk_list *l)
{
	store_stream *w;
	int rc = store_stream_begin(s, bytes, CHUNK, &w);
	if (rc)
		return rc;
	size_t nchunks = 0;
	for (size_t off = 0; off < bytes; off += piece) {
		size_t len = bytes - off < piece ? bytes - off : piece;
		store_chunk_list p;
		if ((rc = store_stream_put(w, src + off, len, &p))) {
			store_stream_abort(w);
			return rc;
		}
		CHECK(p.n == (len + CHUNK - 1) / CHUNK, "piece at %zu: %zu chunks", off, p.n);
		nchunks += p.n;
	}
	rc = store_stream_end(w, l);
	if (!rc)
		CHECK(l->n == nchunks, "end gave %zu chunks, the pieces %zu", l->n, nchunks);
	return rc;
}

static void same_as_whole(store *whole, store *streamed, size_t bytes, size_t piece, uint64_t seed)
{
	unsigned char *src = malloc(bytes + 1), *a = malloc(bytes + 1), *b = malloc(bytes + 1);
	tu_fill(src, bytes, seed);
	store_chunk_list lw, ls;
	CHECK_OK(store_put_tensor(whole, src, bytes, CHUNK, &lw));
	CHECK_OK(put_pieces(streamed, src, bytes, piece, &ls));
	CHECK(lw.n == ls.n && (!lw.n || memcmp(lw.chunks, ls.chunks, lw.n * sizeof(store_chunk)) == 0),
	      "size %zu piece %zu: the chunk lists differ (%zu and %zu chunks)", bytes, piece, lw.n, ls.n);
	memset(a, 1, bytes + 1);
	memset(b, 2, bytes + 1);
	CHECK_OK(store_get_tensor(whole, &lw, a, bytes));
	CHECK_OK(store_get_tensor(streamed, &ls, b, bytes));
	CHECK(memcmp(a, src, bytes) == 0 && memcmp(b, src, bytes) == 0, "size %zu piece %zu: bytes differ", bytes,
	      piece);
	store_chunk_list_free(&lw);
	store_chunk_list_free(&ls);
	free(src);
	free(a);
	free(b);
}

int main(void)
{
	const char *dir = tu_tmpdir("store_stream");
	char pw[512], ps[512];
	snprintf(pw, sizeof(pw), "%s/whole", dir);
	snprintf(ps, sizeof(ps), "%s/streamed", dir);
	printf("seed 0x%llx, stores %s and %s\n", (unsigned long long)SEED, pw, ps);
	/* a 1 MiB map and 64 KiB transactions: the stream must grow the map and commit between pieces */
	store_opts o = { .create = 1, .initial_map_size = 1 << 20, .txn_bytes = 64 << 10 };
	store *w = NULL, *s = NULL;
	CHECK_OK(store_open(pw, &o, &w));
	CHECK_OK(store_open(ps, &o, &s));
	if (!w || !s)
		return qe_test_done("store_test_stream");

	size_t sizes[] = { 0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 7 * CHUNK + 13, 300 * CHUNK + 5 };
	size_t pieces[] = { CHUNK, 3 * CHUNK, 64 * CHUNK };
	uint64_t seed = SEED;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++)
			same_as_whole(w, s, sizes[i], pieces[k], seed++);
	/* 8 MiB through 1 MiB pieces: several grows of the map */
	same_as_whole(w, s, (size_t)8 << 20, (size_t)1 << 20, seed++);
	store_stats st;
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.grows > 0, "the streamed store never grew its 1 MiB map");
	printf("streamed store: %llu chunks, %llu grows\n", (unsigned long long)st.chunks, (unsigned long long)st.grows);

	/* dedup inside a stream: 16 zero chunks are one */
	unsigned char *z = calloc(16, CHUNK);
	store_stats s0, s1;
	CHECK_OK(store_stats_get(s, &s0));
	store_chunk_list lz;
	CHECK_OK(put_pieces(s, z, 16 * CHUNK, 2 * CHUNK, &lz));
	CHECK_OK(store_stats_get(s, &s1));
	CHECK(s1.chunks == s0.chunks + 1, "16 zero chunks added %llu chunks", (unsigned long long)(s1.chunks - s0.chunks));
	store_chunk_list_free(&lz);

	/* bad pieces: refused, nothing left open (the next put works) */
	unsigned char *buf = malloc(4 * CHUNK);
	tu_fill(buf, 4 * CHUNK, seed++);
	store_stream *x;
	store_chunk_list l;
	CHECK_OK(store_stream_begin(s, 4 * CHUNK, CHUNK, &x));
	int rc = store_stream_put(x, buf, CHUNK + 1, NULL);
	CHECK(rc == QE_EINVAL, "a piece that splits a chunk gave %s", qe_errname(rc));
	rc = store_stream_end(x, &l);
	CHECK(rc == QE_EINVAL && l.n == 0, "end after a failed piece gave %s", qe_errname(rc));
	CHECK_OK(store_stream_begin(s, 2 * CHUNK, CHUNK, &x));
	rc = store_stream_put(x, buf, 3 * CHUNK, NULL);
	CHECK(rc == QE_EINVAL, "a piece past the end gave %s", qe_errname(rc));
	store_stream_abort(x);
	CHECK_OK(store_stream_begin(s, 4 * CHUNK, CHUNK, &x));
	CHECK_OK(store_stream_put(x, buf, 2 * CHUNK, NULL));
	rc = store_stream_end(x, &l);
	CHECK(rc == QE_EINVAL, "an end after half the tensor gave %s", qe_errname(rc));
	/* an abort in the middle, with a transaction open, releases the handle */
	CHECK_OK(store_stream_begin(s, 4 * CHUNK, CHUNK, &x));
	CHECK_OK(store_stream_put(x, buf, CHUNK, NULL));
	store_stream_abort(x);
	CHECK_OK(put_pieces(s, buf, 4 * CHUNK, CHUNK, &l));
	unsigned char *back = malloc(4 * CHUNK);
	CHECK_OK(store_get_tensor(s, &l, back, 4 * CHUNK));
	CHECK(memcmp(back, buf, 4 * CHUNK) == 0, "bytes differ after the aborted streams");
	/* ranges of a list: the same bytes as the slice of the whole, the chunk index in range */
	unsigned char *part = malloc(4 * CHUNK);
	CHECK_OK(store_get_chunks(s, &l, 1, 2, part, 2 * CHUNK));
	CHECK(memcmp(part, buf + CHUNK, 2 * CHUNK) == 0, "chunks 1..3 differ from the slice");
	CHECK_OK(store_get_chunks(s, &l, 3, 1, part, CHUNK));
	CHECK(memcmp(part, buf + 3 * CHUNK, CHUNK) == 0, "the last chunk differs from the slice");
	rc = store_get_chunks(s, &l, 3, 2, part, 2 * CHUNK);
	CHECK(rc == QE_EINVAL, "a range past the list gave %s", qe_errname(rc));
	rc = store_get_chunks(s, &l, 1, 2, part, CHUNK);
	CHECK(rc == QE_EINVAL, "a range with the wrong byte count gave %s", qe_errname(rc));
	/* read and check split: the same bytes; a changed byte is caught by the check, naming the chunk */
	memset(part, 0, 4 * CHUNK);
	CHECK_OK(store_read_chunks(s, &l, 1, 2, part, 2 * CHUNK));
	CHECK(memcmp(part, buf + CHUNK, 2 * CHUNK) == 0, "read chunks 1..3 differ from the slice");
	CHECK_OK(store_check_chunks(s, &l, 1, 2, part, 2 * CHUNK));
	part[CHUNK + 7] ^= 1;
	rc = store_check_chunks(s, &l, 1, 2, part, 2 * CHUNK);
	CHECK(rc == QE_ECORRUPT && strstr(qe_last_error(), "chunk 2 of 4"), "a changed byte in chunk 2 gave %s: %s",
	      qe_errname(rc), qe_last_error());
	rc = store_check_chunks(s, &l, 1, 2, part, CHUNK);
	CHECK(rc == QE_EINVAL, "a check with too few bytes gave %s", qe_errname(rc));
	rc = store_read_chunks(s, &l, 3, 2, part, 2 * CHUNK);
	CHECK(rc == QE_EINVAL, "a read range past the list gave %s", qe_errname(rc));
	free(part);
	store_chunk_list_free(&l);
	/* a read-only handle refuses a stream */
	store_close(s);
	store_opts ro = { .read_only = 1 };
	CHECK_OK(store_open(ps, &ro, &s));
	rc = store_stream_begin(s, CHUNK, CHUNK, &x);
	CHECK(rc == QE_EINVAL, "a stream on a read-only handle gave %s", qe_errname(rc));

	free(back);
	free(buf);
	free(z);
	store_close(s);
	store_close(w);
	return qe_test_done("store_test_stream");
}
