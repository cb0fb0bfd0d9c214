/*
 * test_p2p.c - point-to-point messages between 2 and 4 launched ranks:
 * ping-pong from 1 byte to 8 MiB, in-order delivery of many messages, big
 * sends posted before any recv (buffered semantics: must not deadlock),
 * self-sends, and messages sent just before close still delivered.
 * Payloads are deterministic (splitmix64 of seed 0x5eed + size + rank) and
 * compared byte for byte.
 */
#include <signal.h>

#include "comm_test_util.h"

#define SEED 0x5eedull

static const size_t sizes[] = { 1, 7, 4096, 65539, 1u << 20, 8u << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void ping_pong(qe_comm *c, int rank, int world)
{
	int peer = rank ^ 1;
	unsigned char *a = malloc(8u << 20), *b = malloc(8u << 20), *e = malloc(8u << 20);
	if (peer >= world)
		goto out;
	for (size_t s = 0; s < NSIZES; s++) {
		size_t n = sizes[s];
		uint32_t tag = 0x100 + (uint32_t)s;
		int64_t t0 = tu_now_ms();
		if (rank % 2 == 0) {
			tu_fill(a, n, SEED + n + (uint64_t)rank);
			CHECK_OK(qe_comm_send(c, peer, tag, a, n));
			CHECK_OK(qe_comm_recv(c, peer, tag + 0x1000, b, n));
			for (size_t i = 0; i < n; i++)
				e[i] = a[i] ^ 0x5a;
			CHECK(tu_diff(b, e, n) < 0, "rank %d: ping-pong %zu bytes: echo differs at byte %ld", rank, n,
			      tu_diff(b, e, n));
			printf("rank %d: ping-pong %zu bytes with rank %d: %lld ms\n", rank, n, peer,
			       (long long)(tu_now_ms() - t0));
		} else {
			tu_fill(e, n, SEED + n + (uint64_t)peer);
			CHECK_OK(qe_comm_recv(c, peer, tag, b, n));
			CHECK(tu_diff(b, e, n) < 0, "rank %d: ping %zu bytes differs at byte %ld", rank, n, tu_diff(b, e, n));
			for (size_t i = 0; i < n; i++)
				b[i] ^= 0x5a;
			CHECK_OK(qe_comm_send(c, peer, tag + 0x1000, b, n));
		}
	}
out:
	free(a);
	free(b);
	free(e);
}

/* Every rank sends 2000 messages of varying size to every other rank, then receives. */
static void ordering(qe_comm *c, int rank, int world)
{
	enum { N = 2000 };
	unsigned char buf[600], want[600];
	for (int p = 0; p < world; p++) {
		if (p == rank)
			continue;
		for (int i = 0; i < N; i++) {
			size_t n = (size_t)(i * 37 % 600);
			tu_fill(buf, n, SEED * 3 + (uint64_t)(rank * 100000 + p * 10000 + i));
			CHECK_OK(qe_comm_send(c, p, (uint32_t)i, buf, n));
		}
	}
	for (int p = 0; p < world; p++) {
		int bad = 0;
		if (p == rank)
			continue;
		for (int i = 0; i < N && !bad; i++) {
			size_t n = (size_t)(i * 37 % 600);
			int rc = qe_comm_recv(c, p, (uint32_t)i, buf, n);
			tu_fill(want, n, SEED * 3 + (uint64_t)(p * 100000 + rank * 10000 + i));
			CHECK(rc == 0, "rank %d: ordered message %d from rank %d: %s", rank, i, p, qe_last_error());
			CHECK(rc != 0 || tu_diff(buf, want, n) < 0, "rank %d: message %d from rank %d differs", rank, i, p);
			bad = rc != 0 || tu_diff(buf, want, n) >= 0;
		}
	}
}

/* All ranks send 8 MiB to every other rank before anyone receives. */
static void send_before_recv(qe_comm *c, int rank, int world)
{
	size_t n = 8u << 20;
	unsigned char *a = malloc(n), *b = malloc(n), *e = malloc(n);
	int64_t t0 = tu_now_ms();
	for (int p = 0; p < world; p++) {
		if (p == rank)
			continue;
		tu_fill(a, n, SEED * 7 + (uint64_t)(rank * 64 + p));
		CHECK_OK(qe_comm_send(c, p, 0xb16, a, n));
	}
	for (int p = 0; p < world; p++) {
		if (p == rank)
			continue;
		CHECK_OK(qe_comm_recv(c, p, 0xb16, b, n));
		tu_fill(e, n, SEED * 7 + (uint64_t)(p * 64 + rank));
		CHECK(tu_diff(b, e, n) < 0, "rank %d: 8 MiB from rank %d differs at %ld", rank, p, tu_diff(b, e, n));
	}
	printf("rank %d: exchanged 8 MiB with %d peers (send before recv) in %lld ms\n", rank, world - 1,
	       (long long)(tu_now_ms() - t0));
	free(a);
	free(b);
	free(e);
}

static void self_send(qe_comm *c, int rank)
{
	char msg[32], got[32];
	snprintf(msg, sizeof(msg), "note to self from %d", rank);
	CHECK_OK(qe_comm_send(c, rank, 5, msg, sizeof(msg)));
	CHECK_OK(qe_comm_recv(c, rank, 5, got, sizeof(got)));
	CHECK(memcmp(msg, got, sizeof(msg)) == 0, "rank %d: self-send differs", rank);
}

static int rank_main(void *arg)
{
	int world = *(int *)arg, rank;
	qe_comm *c;
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	rank = qe_comm_rank(c);
	CHECK(qe_comm_world_size(c) == world, "rank %d: world size %d, want %d", rank, qe_comm_world_size(c), world);
	ping_pong(c, rank, world);
	ordering(c, rank, world);
	send_before_recv(c, rank, world);
	self_send(c, rank);
	CHECK_OK(qe_comm_barrier(c));
	CHECK(!qe_comm_failed(c), "rank %d: comm failed", rank);
	qe_comm_close(c);
	return tu_child_end();
}

/*
 * Rank 0 sends 300 messages and closes at once; rank 1 starts receiving only
 * later: everything sent before close must arrive, then a further recv fails
 * naming the clean close.
 */
static int close_main(void *arg)
{
	qe_comm *c;
	unsigned char buf[1000], want[1000];
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	if (qe_comm_rank(c) == 0) {
		for (int i = 0; i < 300; i++) {
			tu_fill(buf, sizeof(buf), SEED + 11 + (uint64_t)i);
			CHECK_OK(qe_comm_send(c, 1, (uint32_t)i, buf, sizeof(buf)));
		}
		qe_comm_close(c);
		return tu_child_end();
	}
	tu_sleep_ms(300);
	for (int i = 0; i < 300; i++) {
		CHECK_OK(qe_comm_recv(c, 0, (uint32_t)i, buf, sizeof(buf)));
		tu_fill(want, sizeof(want), SEED + 11 + (uint64_t)i);
		CHECK(memcmp(buf, want, sizeof(buf)) == 0, "rank 1: message %d after close differs", i);
	}
	{
		int64_t t0 = tu_now_ms();
		int rc = qe_comm_recv(c, 0, 999, buf, 4);
		CHECK(rc == QE_ECOMM, "rank 1: recv after rank 0 closed -> %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "rank 0 closed its comm") != NULL, "rank 1: message: %s", qe_last_error());
		CHECK(tu_now_ms() - t0 < 5000, "rank 1: noticed the close only after %lld ms",
		      (long long)(tu_now_ms() - t0));
		printf("rank 1: %s\n", qe_last_error());
	}
	qe_comm_close(c);
	return tu_child_end();
}

/*
 * Ranks leave at different times: rank 0 closes first (short linger), rank 1
 * sends 1 MiB to rank 2 well after rank 0 is gone, then closes.  Rank 0's
 * departure is clean, so nothing may fail on ranks 1 and 2.
 */
static int staggered_main(void *arg)
{
	size_t n = 1u << 20;
	unsigned char *b = malloc(n), *e = malloc(n);
	qe_comm *c;
	int rank;
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	rank = qe_comm_rank(c);
	CHECK_OK(qe_comm_barrier(c));
	tu_fill(e, n, SEED + 21);
	if (rank == 0) {
		qe_comm_set_timeout(c, 200); /* linger at most 200 ms */
	} else if (rank == 1) {
		tu_sleep_ms(600);
		CHECK_OK(qe_comm_send(c, 2, 3, e, n));
	} else {
		CHECK_OK(qe_comm_recv(c, 1, 3, b, n));
		CHECK(memcmp(b, e, n) == 0, "rank 2: staggered message differs");
	}
	CHECK(!qe_comm_failed(c), "rank %d: comm failed: %s", rank, qe_comm_failure(c, (char *)b, 200));
	qe_comm_close(c);
	free(b);
	free(e);
	return tu_child_end();
}

int main(void)
{
	static const int worlds[] = { 2, 4 };
	qe_launch_result res;
	alarm(300); /* never hang: the children die with us (PR_SET_PDEATHSIG) */
	printf("seed 0x%llx\n", (unsigned long long)SEED);
	for (size_t w = 0; w < 2; w++) {
		int world = worlds[w];
		int64_t t0 = tu_now_ms();
		int rc = qe_launch_local(world, rank_main, &world, NULL, 0, &res);
		CHECK(rc == 0, "p2p with %d ranks: %s: %s", world, qe_errname(rc), qe_last_error());
		for (int r = 0; r < world; r++)
			CHECK(res.ranks[r].exit_code == 0 && res.ranks[r].signal == 0, "world %d rank %d: exit %d signal %d",
			      world, r, res.ranks[r].exit_code, res.ranks[r].signal);
		printf("p2p with %d ranks: %lld ms\n", world, (long long)(tu_now_ms() - t0));
	}
	{
		int rc = qe_launch_local(2, close_main, NULL, "127.0.0.1", 0, &res);
		CHECK(rc == 0, "close test: %s: %s", qe_errname(rc), qe_last_error());
		rc = qe_launch_local(3, staggered_main, NULL, "127.0.0.1", 0, &res);
		CHECK(rc == 0, "staggered close: %s: %s", qe_errname(rc), qe_last_error());
	}
	return qe_test_done("comm_test_p2p");
}
