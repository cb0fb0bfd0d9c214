/*
 * test_gc.c - deleting chunks and collecting unreferenced ones.
 *  - delete_chunks reports the payload bytes it freed, skips absent chunks,
 *    and the freed pages are reused by later puts (the file does not grow).
 *  - gc keeps the referenced set, spares young chunks within the grace
 *    period, counts without deleting on a dry run, and deletes the rest; a
 *    tensor sharing chunks with a kept one stays readable where it overlaps.
 */
#include "runtime/core/status.h"
#include "store/store.h"
#include "store_testutil.h"
#include "testlib.h"

#define SEED 0x5eed0005ull
#define CHUNK 1024
#define NCH 32
#define TB (NCH * CHUNK)

static int count_cb(void *ctx, const store_hash *h, uint64_t size, uint64_t touched)
{
	uint64_t *c = ctx;
	(void)h;
	c[0]++;
	c[1] += size;
	if (touched == 0)
		c[2]++;
	return 0;
}

static int stop_cb(void *ctx, const store_hash *h, uint64_t size, uint64_t touched)
{
	(void)h;
	(void)size;
	(void)touched;
	return ++*(int *)ctx == 3 ? 77 : 0;
}

int main(void)
{
	const char *dir = tu_tmpdir("store_gc");
	char path[512];
	snprintf(path, sizeof(path), "%s/store", dir);
	printf("seed 0x%llx, store %s\n", (unsigned long long)SEED, path);
	store_opts o = { .create = 1, .sync_mode = STORE_SYNC_NONE };
	store *s = NULL;
	CHECK_OK(store_open(path, &o, &s));
	if (!s)
		return qe_test_done("store_test_gc");

	/* A; B = A with its second half changed (shares 16 chunks); C unrelated */
	static unsigned char a[TB], b[TB], c[TB], out[TB];
	tu_fill(a, TB, SEED);
	memcpy(b, a, TB);
	tu_fill(b + TB / 2, TB / 2, SEED + 1);
	tu_fill(c, TB, SEED + 2);
	store_chunk_list la, lb, lc;
	CHECK_OK(store_put_tensor(s, a, TB, CHUNK, &la));
	CHECK_OK(store_put_tensor(s, b, TB, CHUNK, &lb));
	CHECK_OK(store_put_tensor(s, c, TB, CHUNK, &lc));
	store_stats st;
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.chunks == 2 * NCH + NCH / 2 && st.bytes == (uint64_t)(2 * NCH + NCH / 2) * CHUNK,
	      "after puts: %llu chunks, %llu bytes", (unsigned long long)st.chunks, (unsigned long long)st.bytes);

	/* iterate sees every chunk with its size and put time; a callback can stop it */
	uint64_t cnt[3] = { 0, 0, 0 };
	CHECK_OK(store_iterate_chunks(s, count_cb, cnt));
	CHECK(cnt[0] == st.chunks && cnt[1] == st.bytes && cnt[2] == 0, "iterate: %llu chunks %llu bytes, %llu untimed",
	      (unsigned long long)cnt[0], (unsigned long long)cnt[1], (unsigned long long)cnt[2]);
	int seen = 0;
	CHECK(store_iterate_chunks(s, stop_cb, &seen) == 77 && seen == 3, "iterate did not stop on request");

	/* delete C: exact bytes back, C gone, A untouched; absent hashes are skipped */
	store_hash hc[NCH + 1];
	for (int i = 0; i < NCH; i++)
		hc[i] = lc.chunks[i].hash;
	memset(&hc[NCH], 0x77, sizeof(hc[NCH]));
	uint64_t rec = 0;
	CHECK_OK(store_delete_chunks(s, hc, NCH + 1, &rec));
	CHECK(rec == TB, "delete of C reclaimed %llu bytes, want %d", (unsigned long long)rec, TB);
	CHECK_OK(store_delete_chunks(s, hc, NCH, &rec));
	CHECK(rec == 0, "second delete reclaimed %llu", (unsigned long long)rec);
	int rc = store_get_tensor(s, &lc, out, TB);
	CHECK(rc == QE_ENOTFOUND, "get of deleted C gave %s", qe_errname(rc));
	CHECK_OK(store_get_tensor(s, &la, out, TB));
	CHECK(memcmp(out, a, TB) == 0, "A differs after deleting C");

	/* gc keeping A: B's own 16 chunks are unreferenced but young */
	store_hash keep[NCH * 2];
	for (int i = 0; i < NCH; i++)
		keep[i] = la.chunks[i].hash;
	for (int i = 0; i < NCH; i++)
		keep[NCH + i] = la.chunks[NCH - 1 - i].hash; /* duplicates and disorder are fine */
	store_gc_result gr;
	CHECK_OK(store_gc(s, keep, 2 * NCH, 3600, 0, &gr));
	CHECK(gr.examined == NCH + NCH / 2 && gr.kept == NCH && gr.young == NCH / 2 && gr.deleted == 0,
	      "gc with grace: examined %llu kept %llu young %llu deleted %llu", (unsigned long long)gr.examined,
	      (unsigned long long)gr.kept, (unsigned long long)gr.young, (unsigned long long)gr.deleted);
	CHECK_OK(store_gc(s, keep, NCH, 0, 1, &gr));
	CHECK(gr.deleted == NCH / 2 && gr.bytes_reclaimed == (uint64_t)NCH / 2 * CHUNK, "dry run: %llu, %llu bytes",
	      (unsigned long long)gr.deleted, (unsigned long long)gr.bytes_reclaimed);
	CHECK_OK(store_get_tensor(s, &lb, out, TB));
	CHECK(memcmp(out, b, TB) == 0, "B damaged by a dry run");
	CHECK_OK(store_gc(s, keep, NCH, 0, 0, &gr));
	CHECK(gr.deleted == NCH / 2 && gr.bytes_reclaimed == (uint64_t)NCH / 2 * CHUNK, "gc: %llu deleted, %llu bytes",
	      (unsigned long long)gr.deleted, (unsigned long long)gr.bytes_reclaimed);
	rc = store_get_tensor(s, &lb, out, TB);
	CHECK(rc == QE_ENOTFOUND && strstr(qe_last_error(), "chunk 16 of 32"), "B after gc gave %s: %s",
	      qe_errname(rc), qe_last_error());
	CHECK_OK(store_get_tensor(s, &la, out, TB));
	CHECK(memcmp(out, a, TB) == 0, "A differs after gc");
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.chunks == NCH && st.bytes == TB, "after gc: %llu chunks, %llu bytes", (unsigned long long)st.chunks,
	      (unsigned long long)st.bytes);
	/* gc with an empty keep set and no grace empties the store */
	CHECK_OK(store_gc(s, NULL, 0, 0, 0, &gr));
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.chunks == 0 && st.bytes == 0 && gr.deleted == NCH, "empty keep set left %llu chunks",
	      (unsigned long long)st.chunks);

	/* freed pages are reused: put, delete, put something else the same size */
	size_t nb = 4 << 20;
	unsigned char *x = malloc(nb);
	tu_fill(x, nb, SEED + 3);
	store_chunk_list lx, ly;
	CHECK_OK(store_put_tensor(s, x, nb, 64 << 10, &lx));
	store_stats s1, s2;
	CHECK_OK(store_stats_get(s, &s1));
	store_hash *hx = malloc(lx.n * sizeof(*hx));
	for (size_t i = 0; i < lx.n; i++)
		hx[i] = lx.chunks[i].hash;
	CHECK_OK(store_delete_chunks(s, hx, lx.n, &rec));
	CHECK(rec == nb, "deleting X reclaimed %llu", (unsigned long long)rec);
	/* LMDB reuses a page only once no snapshot may still need it: the
	 * transaction that freed it and the next one must have committed. */
	CHECK_OK(store_put_chunk(s, "spacer", 6, NULL));
	tu_fill(x, nb, SEED + 4);
	CHECK_OK(store_put_tensor(s, x, nb, 64 << 10, &ly));
	CHECK_OK(store_stats_get(s, &s2));
	printf("file %llu bytes after X, %llu after deleting X and putting Y\n", (unsigned long long)s1.file_bytes,
	       (unsigned long long)s2.file_bytes);
	/* used pages, not the file: the file is sparse and as long as the map, and
	 * blocks are allocated a transaction ahead (store.c) */
	CHECK(s2.used_bytes <= s1.used_bytes + s1.used_bytes / 4, "pages in use grew from %llu to %llu: freed pages not reused",
	      (unsigned long long)s1.used_bytes, (unsigned long long)s2.used_bytes);
	store_chunk_list_free(&lx);
	store_chunk_list_free(&ly);
	free(hx);
	free(x);

	store_chunk_list_free(&la);
	store_chunk_list_free(&lb);
	store_chunk_list_free(&lc);
	store_close(s);
	return qe_test_done("store_test_gc");
}
