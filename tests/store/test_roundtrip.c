/*
 * test_roundtrip.c - tensors in and out of the store, bit for bit, at sizes
 * around the chunk boundary; dedup of repeated chunks and of a tensor put
 * twice (stats must not move); hash format; single-chunk calls; reopen.
 */
#include "runtime/core/status.h"
#include "store/store.h"
#include "store_testutil.h"
#include "testlib.h"

#define CHUNK 1024
#define SEED 0x5eed0001ull

static void roundtrip(store *s, size_t bytes, uint64_t seed)
{
	unsigned char *src = malloc(bytes + 1), *dst = malloc(bytes + 1);
	store_chunk_list l;
	tu_fill(src, bytes, seed);
	CHECK_OK(store_put_tensor(s, src, bytes, CHUNK, &l));
	size_t want_n = (bytes + CHUNK - 1) / CHUNK;
	CHECK(l.n == want_n, "size %zu: %zu chunks, want %zu", bytes, l.n, want_n);
	uint64_t total = 0;
	for (size_t i = 0; i < l.n; i++) {
		total += l.chunks[i].size;
		if (i + 1 < l.n)
			CHECK(l.chunks[i].size == CHUNK, "size %zu: chunk %zu has %llu bytes", bytes, i,
			      (unsigned long long)l.chunks[i].size);
		store_hash h;
		store_hash_of(src + i * CHUNK, (size_t)l.chunks[i].size, &h);
		CHECK(store_hash_cmp(&h, &l.chunks[i].hash) == 0, "size %zu: chunk %zu hash differs", bytes, i);
	}
	CHECK(total == bytes, "size %zu: chunks cover %llu bytes", bytes, (unsigned long long)total);
	memset(dst, 0xa5, bytes + 1);
	CHECK_OK(store_get_tensor(s, &l, dst, bytes));
	CHECK(memcmp(src, dst, bytes) == 0, "size %zu: bytes differ after roundtrip", bytes);
	CHECK(dst[bytes] == 0xa5, "size %zu: wrote past the end", bytes);
	/* a destination size that disagrees with the list is refused */
	int rc = store_get_tensor(s, &l, dst, bytes + 1);
	CHECK(rc == QE_EINVAL, "size %zu: wrong size gave %s", bytes, qe_errname(rc));
	store_chunk_list_free(&l);
	free(src);
	free(dst);
}

int main(void)
{
	const char *dir = tu_tmpdir("store_rt");
	char path[512];
	snprintf(path, sizeof(path), "%s/store", dir);
	printf("seed 0x%llx, store %s\n", (unsigned long long)SEED, path);

	store *s = NULL;
	int rc = store_open(path, NULL, &s);
	CHECK(rc == QE_ENOTFOUND && !s, "open of a missing store without create gave %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), path) != NULL, "message does not name the path: %s", qe_last_error());

	store_opts o = { .create = 1, .sync_mode = STORE_SYNC_NONE };
	CHECK_OK(store_open(path, &o, &s));
	if (!s)
		return qe_test_done("store_test_roundtrip");

	/* hash format: XXH3-128 of the empty input, canonical order */
	store_hash h;
	char hex[STORE_HASH_HEX];
	store_hash_of("", 0, &h);
	CHECK(strcmp(store_hash_hex(&h, hex), "99aa06d3014798d86001c324468d497f") == 0, "xxh3-128('') = %s", hex);
	store_hash back;
	CHECK_OK(store_hash_parse("99AA06D3014798D86001C324468D497F", &back));
	CHECK(store_hash_cmp(&h, &back) == 0, "hex parse does not round trip");
	CHECK(store_hash_parse("99aa06d3", &back) == QE_EINVAL, "short hex accepted");
	CHECK(store_hash_parse("zzaa06d3014798d86001c324468d497f", &back) == QE_EINVAL, "bad hex accepted");

	static const size_t sizes[] = { 0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 4 * CHUNK + 1, 100000,
					(1 << 20) + 1 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		roundtrip(s, sizes[i], SEED + i);

	/* default chunk size: one chunk for a small tensor */
	{
		unsigned char buf[5000];
		store_chunk_list l;
		tu_fill(buf, sizeof(buf), SEED + 100);
		CHECK_OK(store_put_tensor(s, buf, sizeof(buf), 0, &l));
		CHECK(l.n == 1 && l.chunks[0].size == sizeof(buf), "default chunking gave %zu chunks", l.n);
		store_chunk_list_free(&l);
	}

	/* dedup: the same tensor twice stores nothing new */
	store_stats st0, st1, st2;
	size_t big = 64 * CHUNK + 17;
	unsigned char *a = malloc(big), *out = malloc(big);
	tu_fill(a, big, SEED + 200);
	CHECK_OK(store_stats_get(s, &st0));
	store_chunk_list l1, l2;
	CHECK_OK(store_put_tensor(s, a, big, CHUNK, &l1));
	CHECK_OK(store_stats_get(s, &st1));
	CHECK(st1.chunks == st0.chunks + 65, "first put added %llu chunks, want 65",
	      (unsigned long long)(st1.chunks - st0.chunks));
	CHECK(st1.bytes == st0.bytes + big, "first put added %llu bytes, want %zu",
	      (unsigned long long)(st1.bytes - st0.bytes), big);
	CHECK_OK(store_put_tensor(s, a, big, CHUNK, &l2));
	CHECK_OK(store_stats_get(s, &st2));
	CHECK(st2.chunks == st1.chunks && st2.bytes == st1.bytes, "second put changed stats: %llu chunks %llu bytes",
	      (unsigned long long)(st2.chunks - st1.chunks), (unsigned long long)(st2.bytes - st1.bytes));
	CHECK(l1.n == l2.n && memcmp(l1.chunks, l2.chunks, l1.n * sizeof(store_chunk)) == 0,
	      "the same tensor gave different chunk lists");
	store_chunk_list_free(&l2);

	/* dedup within a tensor: 16 identical zero chunks are one chunk */
	unsigned char *z = calloc(16, CHUNK);
	CHECK_OK(store_put_tensor(s, z, 16 * CHUNK, CHUNK, &l2));
	store_stats st3;
	CHECK_OK(store_stats_get(s, &st3));
	CHECK(st3.chunks == st2.chunks + 1 && st3.bytes == st2.bytes + CHUNK,
	      "16 zero chunks added %llu chunks, %llu bytes", (unsigned long long)(st3.chunks - st2.chunks),
	      (unsigned long long)(st3.bytes - st2.bytes));
	memset(z, 1, 16 * CHUNK);
	CHECK_OK(store_get_tensor(s, &l2, z, 16 * CHUNK));
	for (size_t i = 0; i < 16 * CHUNK; i++)
		if (z[i]) {
			CHECK(0, "zero tensor byte %zu reads back as %d", i, z[i]);
			break;
		}
	store_chunk_list_free(&l2);
	free(z);

	/* single chunks, presence and verification */
	int present = 0;
	uint64_t size = 0;
	CHECK_OK(store_has_chunk(s, &l1.chunks[3].hash, &present, &size));
	CHECK(present == 1 && size == CHUNK, "has_chunk: present %d size %llu", present, (unsigned long long)size);
	CHECK_OK(store_chunk_verify(s, &l1.chunks[3].hash));
	store_hash missing;
	memset(&missing, 0x42, sizeof(missing));
	CHECK_OK(store_has_chunk(s, &missing, &present, NULL));
	CHECK(present == 0, "a missing chunk is present");
	rc = store_chunk_verify(s, &missing);
	CHECK(rc == QE_ENOTFOUND, "verify of a missing chunk gave %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "42424242424242424242424242424242") != NULL, "message lacks the hash: %s",
	      qe_last_error());
	rc = store_get_chunk(s, &l1.chunks[0].hash, out, 10, &size);
	CHECK(rc == QE_EINVAL && size == CHUNK, "get_chunk into a small buffer gave %s, size %llu", qe_errname(rc),
	      (unsigned long long)size);
	CHECK_OK(store_get_chunk(s, &l1.chunks[0].hash, out, big, &size));
	CHECK(size == CHUNK && memcmp(out, a, CHUNK) == 0, "get_chunk bytes differ");
	store_hash ph;
	CHECK_OK(store_put_chunk(s, "hello chunk", 11, &ph));
	CHECK_OK(store_get_chunk(s, &ph, out, big, &size));
	CHECK(size == 11 && memcmp(out, "hello chunk", 11) == 0, "put_chunk/get_chunk differ");

	/* a chunk list naming a chunk that is not stored */
	store_chunk_list bad = l1;
	store_chunk saved = l1.chunks[5];
	l1.chunks[5].hash = missing;
	rc = store_get_tensor(s, &bad, out, big);
	CHECK(rc == QE_ENOTFOUND, "missing chunk gave %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "chunk 5 of 65") != NULL, "message lacks the index: %s", qe_last_error());
	l1.chunks[5] = saved;

	CHECK_OK(store_sync(s));
	store_close(s);

	/* reopen without create: everything is still there */
	s = NULL;
	CHECK_OK(store_open(path, NULL, &s));
	if (s) {
		memset(out, 0, big);
		CHECK_OK(store_get_tensor(s, &l1, out, big));
		CHECK(memcmp(a, out, big) == 0, "bytes differ after reopen");
		store_stats st4;
		CHECK_OK(store_stats_get(s, &st4));
		CHECK(st4.chunks == st3.chunks + 1 && st4.bytes == st3.bytes + 11, "stats after reopen: %llu chunks",
		      (unsigned long long)st4.chunks);
		CHECK(st4.file_bytes > 0 && st4.map_size >= st4.used_bytes, "stats: file %llu map %llu used %llu",
		      (unsigned long long)st4.file_bytes, (unsigned long long)st4.map_size,
		      (unsigned long long)st4.used_bytes);
		store_close(s);
	}

	/* read-only: reads work, writes are refused */
	store_opts ro = { .read_only = 1 };
	s = NULL;
	CHECK_OK(store_open(path, &ro, &s));
	if (s) {
		CHECK_OK(store_get_tensor(s, &l1, out, big));
		store_chunk_list l3;
		rc = store_put_tensor(s, a, 10, CHUNK, &l3);
		CHECK(rc == QE_EINVAL, "put on a read-only store gave %s", qe_errname(rc));
		store_close(s);
	}
	store_chunk_list_free(&l1);
	free(a);
	free(out);
	return qe_test_done("store_test_roundtrip");
}
