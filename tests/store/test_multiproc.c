/*
 * test_multiproc.c - several processes write one store at once, as rank
 * processes do.  Each child opens the store after fork, starting from a
 * 1 MiB map, and writes its own tensors plus one tensor every child writes
 * (deduplicated across processes) in many small transactions, reading each
 * back as it goes.  The maps grow in every process and each must adopt the
 * others' growth (MDB_MAP_RESIZED).  The parent then reads everything back
 * and checks that the shared tensor is stored once.
 */
#include "runtime/core/status.h"
#include "store/store.h"
#include "store_testutil.h"
#include "testlib.h"

#include <sys/wait.h>

#define SEED 0x5eed0004ull
#define NPROC 3
#define NT 6
#define TBYTES ((size_t)(2 << 20) + 77)
#define CHUNK ((size_t)16 << 10)
#define SHARED_SEED (SEED + 1000)

static uint64_t tensor_seed(int proc, int t)
{
	return SEED + (uint64_t)proc * 100 + (uint64_t)t;
}

/* The chunk list a put of data would return, computed without the store. */
static void expected_list(const unsigned char *data, size_t bytes, store_chunk_list *l)
{
	l->n = (bytes + CHUNK - 1) / CHUNK;
	l->chunks = calloc(l->n, sizeof(*l->chunks));
	for (size_t i = 0; i < l->n; i++) {
		size_t sz = i + 1 < l->n ? CHUNK : bytes - i * CHUNK;
		l->chunks[i].size = sz;
		store_hash_of(data + i * CHUNK, sz, &l->chunks[i].hash);
	}
}

static int child(const char *path, int proc)
{
	store_opts o = { .initial_map_size = 1 << 20, .txn_bytes = 256 << 10, .sync_mode = STORE_SYNC_NONE,
			 .grow_on_full_only = proc == 1 };
	store *s = NULL;
	unsigned char *buf = malloc(TBYTES), *out = malloc(TBYTES);
	CHECK_OK(store_open(path, &o, &s));
	if (!s)
		return 1;
	for (int t = 0; t <= NT; t++) {
		store_chunk_list l;
		/* the shared tensor goes in the middle, so the processes overlap on it */
		tu_fill(buf, TBYTES, t == NT / 2 ? SHARED_SEED : tensor_seed(proc, t));
		CHECK_OK(store_put_tensor(s, buf, TBYTES, CHUNK, &l));
		CHECK_OK(store_get_tensor(s, &l, out, TBYTES));
		CHECK(memcmp(buf, out, TBYTES) == 0, "proc %d tensor %d differs on read-back", proc, t);
		store_chunk_list_free(&l);
	}
	store_stats st;
	CHECK_OK(store_stats_get(s, &st));
	printf("proc %d: map %llu bytes, %llu grows, %llu adopted\n", proc, (unsigned long long)st.map_size,
	       (unsigned long long)st.grows, (unsigned long long)st.adopts);
	CHECK_OK(store_sync(s));
	store_close(s);
	free(buf);
	free(out);
	return qe_test_failures ? 1 : 0;
}

int main(void)
{
	const char *dir = tu_tmpdir("store_mp");
	char path[512];
	snprintf(path, sizeof(path), "%s/store", dir);
	printf("seed 0x%llx, store %s, %d processes\n", (unsigned long long)SEED, path, NPROC);

	/* create it, then close: children must not inherit an open environment */
	store_opts o = { .create = 1, .initial_map_size = 1 << 20 };
	store *s = NULL;
	CHECK_OK(store_open(path, &o, &s));
	store_close(s);

	fflush(NULL);
	pid_t pids[NPROC];
	for (int p = 0; p < NPROC; p++) {
		pids[p] = fork();
		if (pids[p] == 0) {
			int rc = child(path, p);
			fflush(NULL);
			_exit(rc);
		}
		CHECK(pids[p] > 0, "fork failed");
	}
	for (int p = 0; p < NPROC; p++) {
		int status = 0;
		if (pids[p] > 0)
			waitpid(pids[p], &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status 0x%x)", p, status);
	}

	/* everything every child wrote reads back; the shared tensor is stored once */
	s = NULL;
	CHECK_OK(store_open(path, NULL, &s));
	if (!s)
		return qe_test_done("store_test_multiproc");
	unsigned char *buf = malloc(TBYTES), *out = malloc(TBYTES);
	int tensors = 0;
	for (int p = 0; p < NPROC; p++) {
		for (int t = 0; t <= NT; t++) {
			if (t == NT / 2 && p > 0)
				continue;
			store_chunk_list l;
			tu_fill(buf, TBYTES, t == NT / 2 ? SHARED_SEED : tensor_seed(p, t));
			expected_list(buf, TBYTES, &l);
			memset(out, 0, TBYTES);
			CHECK_OK(store_get_tensor(s, &l, out, TBYTES));
			CHECK(memcmp(buf, out, TBYTES) == 0, "proc %d tensor %d differs in the parent", p, t);
			store_chunk_list_free(&l);
			tensors++;
		}
	}
	store_stats st;
	CHECK_OK(store_stats_get(s, &st));
	uint64_t per = (TBYTES + CHUNK - 1) / CHUNK;
	CHECK(st.chunks == (uint64_t)tensors * per, "%llu chunks stored, want %llu (%d distinct tensors)",
	      (unsigned long long)st.chunks, (unsigned long long)tensors * per, tensors);
	CHECK(st.bytes == (uint64_t)tensors * TBYTES, "%llu bytes stored, want %llu", (unsigned long long)st.bytes,
	      (unsigned long long)tensors * TBYTES);
	store_verify_result vr;
	CHECK_OK(store_verify_all(s, NULL, NULL, &vr));
	CHECK(vr.checked == st.chunks && vr.bad == 0, "verify: %llu checked, %llu bad", (unsigned long long)vr.checked,
	      (unsigned long long)vr.bad);
	store_close(s);
	free(buf);
	free(out);
	return qe_test_done("store_test_multiproc");
}
