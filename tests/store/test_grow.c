/*
 * test_grow.c - the map grows instead of failing.  A store opened with a
 * 1 MiB map takes 50 MiB of tensors, both with the up-front grow and with
 * growth only on MDB_MAP_FULL (abort, enlarge, retry); everything reads back
 * bit for bit after a reopen.  A map limit gives a clean QE_ESTORE and leaves
 * the store usable.
 */
#include "runtime/core/status.h"
#include "store/store.h"
#include "store_testutil.h"
#include "testlib.h"

#define SEED 0x5eed0002ull
#define MIB ((size_t)1 << 20)
#define NT 10
#define TBYTES (5 * MIB + 333) /* 10 tensors: just over 50 MiB */
#define CHUNK ((size_t)64 << 10)

static void fill_and_check(const char *path, int full_only)
{
	store_opts o = { .create = 1, .initial_map_size = MIB, .txn_bytes = 4 * MIB, .sync_mode = STORE_SYNC_NONE,
			 .grow_on_full_only = full_only };
	store *s = NULL;
	store_chunk_list lists[NT];
	unsigned char *buf = malloc(TBYTES), *out = malloc(TBYTES);
	memset(lists, 0, sizeof(lists));
	CHECK_OK(store_open(path, &o, &s));
	if (!s)
		goto out;
	store_stats st;
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.map_size <= 2 * MIB, "initial map is %llu bytes", (unsigned long long)st.map_size);
	for (int t = 0; t < NT; t++) {
		tu_fill(buf, TBYTES, SEED + (uint64_t)t);
		CHECK_OK(store_put_tensor(s, buf, TBYTES, CHUNK, &lists[t]));
	}
	CHECK_OK(store_stats_get(s, &st));
	printf("%s: map %llu bytes after %llu grows, %llu chunks, %llu payload bytes, file %llu\n",
	       full_only ? "grow on full" : "grow ahead", (unsigned long long)st.map_size,
	       (unsigned long long)st.grows, (unsigned long long)st.chunks, (unsigned long long)st.bytes,
	       (unsigned long long)st.file_bytes);
	CHECK(st.grows > 0, "the map never grew");
	CHECK(st.map_size >= (uint64_t)NT * TBYTES, "map %llu is smaller than the data", (unsigned long long)st.map_size);
	CHECK(st.bytes == (uint64_t)NT * TBYTES, "payload bytes %llu, want %llu", (unsigned long long)st.bytes,
	      (unsigned long long)NT * TBYTES);
	CHECK_OK(store_sync(s));
	store_close(s);

	/* a reopen maps the grown size and reads everything back */
	s = NULL;
	store_opts o2 = { .initial_map_size = MIB };
	CHECK_OK(store_open(path, &o2, &s));
	if (!s)
		goto out;
	CHECK_OK(store_stats_get(s, &st));
	CHECK(st.map_size >= st.used_bytes, "reopened map %llu < used %llu", (unsigned long long)st.map_size,
	      (unsigned long long)st.used_bytes);
	for (int t = 0; t < NT; t++) {
		tu_fill(buf, TBYTES, SEED + (uint64_t)t);
		memset(out, 0, TBYTES);
		CHECK_OK(store_get_tensor(s, &lists[t], out, TBYTES));
		CHECK(memcmp(buf, out, TBYTES) == 0, "tensor %d differs after growth and reopen", t);
	}
	store_close(s);
out:
	for (int t = 0; t < NT; t++)
		store_chunk_list_free(&lists[t]);
	free(buf);
	free(out);
}

int main(void)
{
	const char *dir = tu_tmpdir("store_grow");
	char p1[512], p2[512], p3[512];
	snprintf(p1, sizeof(p1), "%s/ahead", dir);
	snprintf(p2, sizeof(p2), "%s/onfull", dir);
	snprintf(p3, sizeof(p3), "%s/limited", dir);
	printf("seed 0x%llx, folder %s\n", (unsigned long long)SEED, dir);

	fill_and_check(p1, 0);
	fill_and_check(p2, 1);

	/* a limit: 4 MiB of map cannot hold 8 MiB */
	store_opts o = { .create = 1, .initial_map_size = MIB, .max_map_size = 4 * MIB, .sync_mode = STORE_SYNC_NONE };
	store *s = NULL;
	CHECK_OK(store_open(p3, &o, &s));
	if (s) {
		size_t n = 8 * MIB;
		unsigned char *buf = malloc(n), *out = malloc(n);
		tu_fill(buf, n, SEED + 99);
		store_chunk_list small, big;
		CHECK_OK(store_put_tensor(s, buf, MIB, CHUNK, &small));
		int rc = store_put_tensor(s, buf + MIB, n - MIB, CHUNK, &big);
		CHECK(rc == QE_ESTORE, "put beyond the map limit gave %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "max_map_size") != NULL && strstr(qe_last_error(), p3) != NULL,
		      "limit message: %s", qe_last_error());
		CHECK(big.n == 0 && big.chunks == NULL, "failed put returned a list");
		/* still usable */
		CHECK_OK(store_get_tensor(s, &small, out, MIB));
		CHECK(memcmp(buf, out, MIB) == 0, "earlier tensor differs after a failed put");
		store_chunk_list more;
		CHECK_OK(store_put_tensor(s, buf + MIB, 256 << 10, CHUNK, &more));
		store_chunk_list_free(&more);
		store_chunk_list_free(&small);
		store_close(s);
		free(buf);
		free(out);
	}
	return qe_test_done("store_test_grow");
}
