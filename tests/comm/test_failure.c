/*
 * test_failure.c - what happens when things go wrong; every case must end in
 * seconds with QE_ECOMM and a message naming the peer, never hang.
 *
 *  - a rank _exits(3) while its peer waits on a recv: the peer fails within a
 *    few seconds (its own timeout is 20 s), the launcher reports rank and code;
 *  - with 4 ranks one death fails every blocked rank, even those waiting on
 *    a live peer;
 *  - tag mismatch and size mismatch, and the comm then stays failed;
 *  - a recv that times out names the peer and tag;
 *  - processes of another run (other QE_RUN_ID) or another world size that
 *    reach rank 0 are refused with a clear message; the real job proceeds.
 */
#include <signal.h>

#include "comm_test_util.h"

static char tmpdir[256];

/* Ignore SIGTERM so the launcher (which stops the rest after a failure) lets us report. */
static void survive_launcher(void)
{
	signal(SIGTERM, SIG_IGN);
}

static int early_exit_main(void *arg)
{
	qe_comm *c;
	char buf[16];
	tu_child_begin();
	survive_launcher();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	if (qe_comm_rank(c) == 1)
		_exit(3); /* dies before sending what rank 0 waits for */
	{
		int64_t t0 = tu_now_ms();
		int rc = qe_comm_recv(c, 1, 0x42, buf, sizeof(buf));
		int64_t dt = tu_now_ms() - t0;
		printf("rank 0: after %lld ms: %s\n", (long long)dt, qe_last_error());
		CHECK(rc == QE_ECOMM, "rank 0: recv from a dead rank -> %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "rank 1 closed its connection (process exited?) while rank 0 waited for "
					      "tag 0x42 (16 bytes) from rank 1") != NULL,
		      "rank 0: message: %s", qe_last_error());
		CHECK(dt < 5000, "rank 0: took %lld ms to notice the dead peer", (long long)dt);
		/* A failed comm stays failed. */
		rc = qe_comm_send(c, 1, 1, buf, 1);
		CHECK(rc == QE_ECOMM && strstr(qe_last_error(), "failed earlier"), "rank 0: send on a failed comm -> %s: %s",
		      qe_errname(rc), qe_last_error());
		CHECK(qe_comm_barrier(c) == QE_ECOMM, "rank 0: barrier on a failed comm");
	}
	qe_comm_close(c);
	return tu_child_end();
}

/* 4 ranks: rank 2 dies; 0 waits on 1, 1 waits on 2, 3 waits on 0 - all must fail. */
static int cascade_main(void *arg)
{
	static const int waits_on[4] = { 1, 2, -1, 0 };
	qe_comm *c;
	int rank, v;
	tu_child_begin();
	survive_launcher();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	rank = qe_comm_rank(c);
	if (rank == 2) {
		tu_sleep_ms(100);
		_exit(4);
	}
	{
		int64_t t0 = tu_now_ms();
		int rc = qe_comm_recv(c, waits_on[rank], 9, &v, sizeof(v));
		int64_t dt = tu_now_ms() - t0;
		CHECK(rc == QE_ECOMM, "rank %d: recv -> %s", rank, qe_errname(rc));
		CHECK(strstr(qe_last_error(), "rank 2 closed its connection") != NULL, "rank %d: message: %s", rank,
		      qe_last_error());
		CHECK(dt < 5000, "rank %d: took %lld ms", rank, (long long)dt);
		printf("rank %d: after %lld ms: %s\n", rank, (long long)dt, qe_last_error());
	}
	qe_comm_close(c);
	return tu_child_end();
}

/* mode 0: tag mismatch, mode 1: size mismatch. */
static int mismatch_main(void *arg)
{
	int mode = *(int *)arg;
	qe_comm *c;
	char buf[32] = "payload";
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	if (qe_comm_rank(c) == 0) {
		CHECK_OK(qe_comm_send(c, 1, 0x7, buf, 16));
	} else {
		int rc = mode == 0 ? qe_comm_recv(c, 0, 0x8, buf, 16) : qe_comm_recv(c, 0, 0x7, buf, 32);
		const char *want = mode == 0 ? "rank 1: expected tag 0x8 (16 bytes) from rank 0, got tag 0x7 (16 bytes)"
					     : "rank 1: expected tag 0x7 (32 bytes) from rank 0, got tag 0x7 (16 bytes)";
		CHECK(rc == QE_ECOMM, "rank 1: mismatched recv -> %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), want) != NULL, "rank 1: message: %s", qe_last_error());
		printf("rank 1: %s\n", qe_last_error());
		CHECK(qe_comm_failed(c), "rank 1: comm not failed after a mismatch");
		rc = qe_comm_recv(c, 0, 0x7, buf, 16);
		CHECK(rc == QE_ECOMM && strstr(qe_last_error(), "failed earlier") && strstr(qe_last_error(), want),
		      "rank 1: recv after the mismatch -> %s: %s", qe_errname(rc), qe_last_error());
	}
	qe_comm_close(c);
	return tu_child_end();
}

static int timeout_main(void *arg)
{
	qe_comm *c;
	int v;
	tu_child_begin();
	c = tu_open(TU_OP_MS);
	if (!c)
		return 1;
	if (qe_comm_rank(c) == 0) {
		tu_sleep_ms(1200); /* silent, alive */
	} else {
		int64_t t0 = tu_now_ms(), dt;
		int rc;
		qe_comm_set_timeout(c, 300);
		rc = qe_comm_recv(c, 0, 9, &v, sizeof(v));
		dt = tu_now_ms() - t0;
		CHECK(rc == QE_ECOMM, "rank 1: recv -> %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "rank 1 timed out after 300 ms waiting for tag 0x9 (4 bytes) from rank 0"),
		      "rank 1: message: %s", qe_last_error());
		CHECK(dt >= 290 && dt < 3000, "rank 1: timed out after %lld ms, want ~300", (long long)dt);
		printf("rank 1: after %lld ms: %s\n", (long long)dt, qe_last_error());
	}
	qe_comm_close(c);
	return tu_child_end();
}

static int wait_file(const char *path, int ms)
{
	for (int64_t end = tu_now_ms() + ms; tu_now_ms() < end; tu_sleep_ms(10))
		if (access(path, F_OK) == 0)
			return 1;
	return 0;
}

static void touch(const char *path)
{
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
}

/*
 * Launched as 4 processes, but the job has 2 ranks: launcher ranks 0 and 1
 * are the job; 2 is a stray of another run, 3 a stray with another world
 * size.  The real rank 1 joins only after both strays were turned away.
 */
static int stray_main(void *arg)
{
	int who = atoi(qe_launch_var("RANK"));
	char path[300];
	tu_child_begin();
	tu_setenv("WORLD_SIZE", "2");
	if (who >= 2) {
		qe_dist_env env;
		qe_comm *c = NULL;
		int rc;
		const char *want;
		tu_setenv("RANK", "1");
		if (who == 2) {
			tu_setenv("QE_RUN_ID", "someone-elses-run");
			want = "run id 'someone-elses-run' does not match rank 0's run id";
		} else {
			tu_setenv("WORLD_SIZE", "3");
			want = "WORLD_SIZE=3 does not match rank 0's WORLD_SIZE=2";
		}
		CHECK_OK(qe_dist_env_from_environ(&env));
		rc = qe_comm_open(&env, 5000, &c);
		CHECK(rc == QE_ECOMM && c == NULL, "stray %d: open -> %s", who, qe_errname(rc));
		CHECK(strstr(qe_last_error(), "rank 0 at 127.0.0.1:") && strstr(qe_last_error(), "refused it") &&
			      strstr(qe_last_error(), want),
		      "stray %d: message: %s", who, qe_last_error());
		printf("stray %d: %s\n", who, qe_last_error());
		snprintf(path, sizeof(path), "%s/stray-%d", tmpdir, who);
		touch(path);
		return tu_child_end();
	}
	if (who == 1) {
		snprintf(path, sizeof(path), "%s/stray-2", tmpdir);
		CHECK(wait_file(path, 10000), "rank 1: stray 2 never finished");
		snprintf(path, sizeof(path), "%s/stray-3", tmpdir);
		CHECK(wait_file(path, 10000), "rank 1: stray 3 never finished");
	}
	{
		qe_comm *c = tu_open(TU_OP_MS);
		int v = who;
		if (!c)
			return 1;
		CHECK_OK(qe_comm_allreduce_sum_f32(c, (float[]){ (float)v }, 1, NULL, 0));
		CHECK_OK(qe_comm_barrier(c));
		qe_comm_close(c);
	}
	return tu_child_end();
}

static int run(const char *name, int nproc, int (*fn)(void *), void *arg, qe_launch_result *res)
{
	int64_t t0 = tu_now_ms();
	int rc = qe_launch_local(nproc, fn, arg, "127.0.0.1", 0, res);
	printf("%s: %lld ms: %s\n", name, (long long)(tu_now_ms() - t0), rc ? qe_last_error() : "ok");
	return rc;
}

int main(void)
{
	qe_launch_result res;
	int rc;
	alarm(300);
	tu_setenv("QE_LAUNCH_GRACE_MS", "10000");
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/qe-comm-fail-XXXXXX");
	CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");

	rc = run("early exit", 2, early_exit_main, NULL, &res);
	CHECK(rc == QE_ECOMM, "early exit: launch -> %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "rank 1 (pid") && strstr(qe_last_error(), "exited with status 3"),
	      "early exit: launcher message: %s", qe_last_error());
	CHECK(res.first_failed == 1 && res.ranks[1].exit_code == 3, "early exit: first failed %d, rank 1 exit %d",
	      res.first_failed, res.ranks[1].exit_code);
	CHECK(res.ranks[0].exit_code == 0, "early exit: rank 0 (the checker) exit %d signal %d", res.ranks[0].exit_code,
	      res.ranks[0].signal);

	rc = run("cascade", 4, cascade_main, NULL, &res);
	CHECK(rc == QE_ECOMM && res.first_failed == 2 && res.ranks[2].exit_code == 4, "cascade: %s first %d",
	      qe_errname(rc), res.first_failed);
	for (int r = 0; r < 4; r++)
		CHECK(r == 2 || res.ranks[r].exit_code == 0, "cascade: rank %d exit %d signal %d", r, res.ranks[r].exit_code,
		      res.ranks[r].signal);

	for (int mode = 0; mode < 2; mode++) {
		rc = run(mode ? "size mismatch" : "tag mismatch", 2, mismatch_main, &mode, &res);
		CHECK(rc == 0, "mismatch %d: %s", mode, qe_last_error());
	}
	rc = run("timeout", 2, timeout_main, NULL, &res);
	CHECK(rc == 0, "timeout: %s", qe_last_error());
	rc = run("strays", 4, stray_main, NULL, &res);
	CHECK(rc == 0, "strays: %s", qe_last_error());

	{
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
		CHECK(system(cmd) == 0, "cleanup");
	}
	return qe_test_done("comm_test_failure");
}
