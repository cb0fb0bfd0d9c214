/*
 * test_collectives.c - barrier, deterministic all-reduce, broadcasts and
 * gather with 2 and 4 launched ranks.
 *
 * The all-reduce inputs span many magnitudes, so float addition order shows
 * in the bits; the test first proves that (rank order and reverse order give
 * different sums somewhere), then checks that every member's result is
 * bitwise the serial sum in group order, and that all members agree (rank 0
 * gathers everyone's result bytes).  Seed 0xa11 + rank.
 */
#include <math.h>
#include <sys/stat.h>

#include "comm_test_util.h"

#define SEED 0xa11ull
#define N 10007

typedef struct args {
	int world;
	char dir[256];
} args;

static void input(float *x, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = tu_mix(SEED + (uint64_t)rank * 1000003u + i);
		double mant = (double)(v & 0xffffff) / 16777216.0 - 0.5;
		int e = (int)((v >> 24) % 40) - 20;
		x[i] = (float)ldexp(mant, e);
	}
}

static void serial_sum(float *acc, size_t n, const int *group, int g)
{
	float *tmp = malloc(n * sizeof(float));
	input(acc, n, group[0]);
	for (int k = 1; k < g; k++) {
		input(tmp, n, group[k]);
		for (size_t i = 0; i < n; i++)
			acc[i] += tmp[i];
	}
	free(tmp);
}

/* Everyone's result must match rank 0's byte for byte; rank 0 checks the gather. */
static void agree(qe_comm *c, const float *x, size_t n, const char *what)
{
	qe_comm_blob *all = NULL;
	int rank = qe_comm_rank(c);
	CHECK_OK(qe_comm_gather_blobs(c, x, n * sizeof(float), &all));
	if (rank == 0 && all) {
		for (int r = 0; r < qe_comm_world_size(c); r++)
			CHECK(all[r].size == n * sizeof(float) && memcmp(all[r].data, x, all[r].size) == 0,
			      "%s: rank %d's result differs from rank 0's", what, r);
	}
	qe_comm_blobs_free(all, qe_comm_world_size(c));
}

static void allreduce(qe_comm *c, int rank, int world)
{
	float *x = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float)), *rev = malloc(N * sizeof(float));
	int order[4], reverse[4], perm[4] = { 3, 1, 0, 2 };
	size_t ndiff = 0;
	for (int r = 0; r < world; r++)
		order[r] = r, reverse[r] = world - 1 - r;

	/*
	 * The data is order-sensitive, or this test could not fail.  (Two
	 * addends commute exactly, so this needs three or more ranks.)
	 */
	serial_sum(want, N, order, world);
	serial_sum(rev, N, reverse, world);
	for (size_t i = 0; i < N; i++)
		ndiff += memcmp(&want[i], &rev[i], sizeof(float)) != 0;
	CHECK(world < 3 || ndiff > 0, "rank %d: inputs are not order-sensitive", rank);
	if (rank == 0)
		printf("world %d: %zu of %d sums differ between rank order and reverse order\n", world, ndiff, N);

	input(x, N, rank);
	CHECK_OK(qe_comm_allreduce_sum_f32(c, x, N, NULL, 0));
	CHECK(tu_diff(x, want, N * sizeof(float)) < 0, "rank %d: allreduce(all) differs from the serial sum at byte %ld",
	      rank, tu_diff(x, want, N * sizeof(float)));
	agree(c, x, N, "allreduce(all)");

	if (world == 4) {
		/* A permuted full group sums in its own order. */
		serial_sum(want, N, perm, 4);
		input(x, N, rank);
		CHECK_OK(qe_comm_allreduce_sum_f32(c, x, N, perm, 4));
		CHECK(tu_diff(x, want, N * sizeof(float)) < 0, "rank %d: allreduce(3,1,0,2) differs at byte %ld", rank,
		      tu_diff(x, want, N * sizeof(float)));
		agree(c, x, N, "allreduce(3,1,0,2)");
		/* Two disjoint groups at once, as data-parallel replicas of two stages. */
		{
			int ga[2] = { 2, 0 }, gb[2] = { 1, 3 };
			const int *g = (rank == 0 || rank == 2) ? ga : gb;
			serial_sum(want, N, g, 2);
			input(x, N, rank);
			CHECK_OK(qe_comm_allreduce_sum_f32(c, x, N, g, 2));
			CHECK(tu_diff(x, want, N * sizeof(float)) < 0, "rank %d: allreduce(%d,%d) differs at byte %ld", rank,
			      g[0], g[1], tu_diff(x, want, N * sizeof(float)));
		}
	}
	/* A group of one leaves the data alone; a group without the caller is refused. */
	{
		int me = rank, other = (rank + 1) % world;
		input(x, N, rank);
		input(want, N, rank);
		CHECK_OK(qe_comm_allreduce_sum_f32(c, x, N, &me, 1));
		CHECK(memcmp(x, want, N * sizeof(float)) == 0, "rank %d: group of one changed the data", rank);
		CHECK(qe_comm_allreduce_sum_f32(c, x, N, &other, 1) == QE_EINVAL, "rank %d: foreign group accepted", rank);
	}
	free(x);
	free(want);
	free(rev);
}

static void broadcasts(qe_comm *c, int rank, int world)
{
	size_t n = 100000;
	unsigned char *b = malloc(n), *e = malloc(n);
	unsigned char id[128];
	void *blob = NULL;
	size_t bn = 0;
	int root = world - 1;
	tu_fill(e, n, SEED + 99);
	if (rank == root)
		memcpy(b, e, n);
	else
		memset(b, 0, n);
	CHECK_OK(qe_comm_bcast(c, root, b, n));
	CHECK(memcmp(b, e, n) == 0, "rank %d: bcast from rank %d differs", rank, root);

	/* The NCCL unique id path: 128 opaque bytes from rank 0. */
	tu_fill(id, sizeof(id), SEED + 7);
	CHECK_OK(qe_comm_bcast_blob(c, rank == 0 ? id : NULL, rank == 0 ? sizeof(id) : 0, &blob, &bn));
	CHECK(blob && bn == sizeof(id) && memcmp(blob, id, bn) == 0, "rank %d: blob of %zu bytes differs", rank, bn);
	free(blob);
	blob = NULL;
	CHECK_OK(qe_comm_bcast_blob(c, "", 0, &blob, &bn));
	CHECK(blob != NULL && bn == 0, "rank %d: empty blob came back as %zu bytes", rank, bn);
	free(blob);
	free(b);
	free(e);
}

/* Every rank reports a different-length record; rank 0 sees them all in rank order. */
static void gather(qe_comm *c, int rank, int world)
{
	char rec[64];
	qe_comm_blob *all = NULL;
	int len = snprintf(rec, sizeof(rec), "rank %d wrote %d chunks", rank, rank * 1111);
	CHECK_OK(qe_comm_gather_blobs(c, rec, (size_t)len, &all));
	if (rank != 0) {
		CHECK(all == NULL, "rank %d: gather result on a non-root rank", rank);
		return;
	}
	for (int r = 0; all && r < world; r++) {
		char want[64];
		int wl = snprintf(want, sizeof(want), "rank %d wrote %d chunks", r, r * 1111);
		CHECK(all[r].size == (size_t)wl && memcmp(all[r].data, want, (size_t)wl) == 0,
		      "gather: rank %d's record is '%.*s'", r, (int)all[r].size, (char *)all[r].data);
	}
	qe_comm_blobs_free(all, world);
}

/* Each rank drops a file, sleeps by rank, barriers; after it every file must exist. */
static void barrier(qe_comm *c, const args *a, int rank, int world)
{
	char path[300];
	for (int round = 0; round < 3; round++) {
		snprintf(path, sizeof(path), "%s/arrived-%d-%d", a->dir, round, rank);
		FILE *f = fopen(path, "w");
		CHECK(f != NULL, "rank %d: create %s", rank, path);
		if (f)
			fclose(f);
		tu_sleep_ms(30 * ((rank + round) % world));
		CHECK_OK(qe_comm_barrier(c));
		for (int r = 0; r < world; r++) {
			snprintf(path, sizeof(path), "%s/arrived-%d-%d", a->dir, round, r);
			CHECK(access(path, F_OK) == 0, "rank %d: passed barrier %d before rank %d arrived", rank, round, r);
		}
	}
}

/* A user message still queued must not confuse a collective (separate lanes). */
static void lanes(qe_comm *c, int rank)
{
	int v = 1234 + rank, got = 0;
	if (rank == 1)
		CHECK_OK(qe_comm_send(c, 0, 77, &v, sizeof(v)));
	CHECK_OK(qe_comm_barrier(c));
	if (rank == 0) {
		CHECK_OK(qe_comm_recv(c, 1, 77, &got, sizeof(got)));
		CHECK(got == 1235, "rank 0: user message across a barrier: %d", got);
	}
}

static int rank_main(void *arg)
{
	const args *a = arg;
	qe_comm *c;
	int rank;
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	rank = qe_comm_rank(c);
	allreduce(c, rank, a->world);
	broadcasts(c, rank, a->world);
	gather(c, rank, a->world);
	barrier(c, a, rank, a->world);
	lanes(c, rank);
	CHECK(!qe_comm_failed(c), "rank %d: comm failed", rank);
	qe_comm_close(c);
	return tu_child_end();
}

int main(void)
{
	static const int worlds[] = { 2, 4 };
	alarm(300);
	printf("seed 0x%llx\n", (unsigned long long)SEED);
	for (size_t w = 0; w < 2; w++) {
		args a = { .world = worlds[w] };
		qe_launch_result res;
		int64_t t0 = tu_now_ms();
		int rc;
		snprintf(a.dir, sizeof(a.dir), "/tmp/qe-comm-coll-XXXXXX");
		CHECK(mkdtemp(a.dir) != NULL, "mkdtemp");
		rc = qe_launch_local(a.world, rank_main, &a, NULL, 0, &res);
		CHECK(rc == 0, "collectives with %d ranks: %s: %s", a.world, qe_errname(rc), qe_last_error());
		printf("collectives with %d ranks: %lld ms\n", a.world, (long long)(tu_now_ms() - t0));
		{
			char cmd[300];
			snprintf(cmd, sizeof(cmd), "rm -rf %s", a.dir);
			CHECK(system(cmd) == 0, "cleanup %s", a.dir);
		}
	}
	return qe_test_done("comm_test_collectives");
}
