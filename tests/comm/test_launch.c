/*
 * test_launch.c - the local launcher on its own: variables handed to each
 * rank (function and exec variants), per-rank exit status and signals, the
 * first failure named in the message, and the rest stopped (SIGTERM, then
 * SIGKILL after QE_LAUNCH_GRACE_MS for a rank that ignores SIGTERM) quickly.
 */
#include <signal.h>

#include "comm_test_util.h"

static int env_main(void *arg)
{
	qe_dist_env e;
	int rc = qe_dist_env_from_environ(&e);
	const char *rid = qe_launch_var("QE_RUN_ID");
	tu_child_begin();
	CHECK(rc == 0, "child: env -> %s: %s", qe_errname(rc), qe_last_error());
	CHECK(e.world_size == 3 && e.local_rank == e.rank && strcmp(e.master_addr, "127.0.0.1") == 0 &&
		      e.master_port == *(int *)arg,
	      "child: rank %d world %d local %d addr %s port %d", e.rank, e.world_size, e.local_rank, e.master_addr,
	      e.master_port);
	CHECK(rid && strncmp(rid, "launch-", 7) == 0, "child: run id %s", rid ? rid : "(unset)");
	CHECK(qe_launch_var("LOCAL_WORLD_SIZE") && strcmp(qe_launch_var("LOCAL_WORLD_SIZE"), "3") == 0, "child: LOCAL_WORLD_SIZE");
	return tu_child_end();
}

static int ok_main(void *arg)
{
	return 0;
}

/* Rank 1 fails with 5; the others would sleep for a minute. */
static int fail_main(void *arg)
{
	int rank = atoi(qe_launch_var("RANK"));
	if (rank == 1) {
		tu_sleep_ms(50);
		return 5;
	}
	if (arg)
		signal(SIGTERM, SIG_IGN); /* stubborn: needs SIGKILL */
	tu_sleep_ms(60000);
	return 0;
}

static int signal_main(void *arg)
{
	if (atoi(qe_launch_var("RANK")) == 2)
		raise(SIGKILL);
	tu_sleep_ms(60000);
	return 0;
}

static int negative_main(void *arg)
{
	return -10; /* a QE_E* code returned by mistake: reported as status 1 */
}

int main(void)
{
	qe_launch_result res;
	int rc, port = 0;
	int64_t t0, dt;
	alarm(120);
	tu_setenv("QE_RUN_ID", NULL);
	tu_setenv("QE_LAUNCH_GRACE_MS", NULL);

	/* The variables each rank sees (the children check them). */
	CHECK_OK(qe_comm_free_port("127.0.0.1", &port));
	rc = qe_launch_local(3, env_main, &port, NULL, port, &res);
	CHECK(rc == 0 && res.nproc == 3, "env: %s: %s", qe_errname(rc), qe_last_error());

	rc = qe_launch_local(4, ok_main, NULL, NULL, 0, &res);
	CHECK(rc == 0 && res.first_failed == -1, "ok: %s: %s", qe_errname(rc), qe_last_error());
	for (int r = 0; r < 4; r++)
		CHECK(res.ranks[r].pid > 0 && res.ranks[r].exit_code == 0 && res.ranks[r].signal == 0 &&
			      !res.ranks[r].terminated,
		      "ok: rank %d pid %d exit %d signal %d", r, (int)res.ranks[r].pid, res.ranks[r].exit_code,
		      res.ranks[r].signal);

	/* First failure stops the rest by SIGTERM, promptly. */
	t0 = tu_now_ms();
	rc = qe_launch_local(3, fail_main, NULL, NULL, 0, &res);
	dt = tu_now_ms() - t0;
	CHECK(rc == QE_ECOMM && res.first_failed == 1, "fail: %s first %d", qe_errname(rc), res.first_failed);
	CHECK(strstr(qe_last_error(), "rank 1 (pid") && strstr(qe_last_error(), "exited with status 5") &&
		      strstr(qe_last_error(), "stopped the other ranks"),
	      "fail: message %s", qe_last_error());
	CHECK(res.ranks[0].signal == SIGTERM && res.ranks[0].terminated && res.ranks[2].signal == SIGTERM,
	      "fail: rank 0 signal %d terminated %d, rank 2 signal %d", res.ranks[0].signal, res.ranks[0].terminated,
	      res.ranks[2].signal);
	CHECK(dt < 3000, "fail: took %lld ms", (long long)dt);
	printf("fail (%lld ms): %s\n", (long long)dt, qe_last_error());

	/* A rank that ignores SIGTERM is killed after the grace period. */
	tu_setenv("QE_LAUNCH_GRACE_MS", "300");
	t0 = tu_now_ms();
	rc = qe_launch_local(3, fail_main, "stubborn", NULL, 0, &res);
	dt = tu_now_ms() - t0;
	tu_setenv("QE_LAUNCH_GRACE_MS", NULL);
	CHECK(rc == QE_ECOMM && res.ranks[0].signal == SIGKILL && res.ranks[2].signal == SIGKILL,
	      "stubborn: %s, signals %d %d", qe_errname(rc), res.ranks[0].signal, res.ranks[2].signal);
	CHECK(dt >= 300 && dt < 3000, "stubborn: took %lld ms, want ~350", (long long)dt);

	rc = qe_launch_local(3, signal_main, NULL, NULL, 0, &res);
	CHECK(rc == QE_ECOMM && res.first_failed == 2 && res.ranks[2].signal == SIGKILL && !res.ranks[2].terminated,
	      "signal: %s first %d signal %d", qe_errname(rc), res.first_failed, res.ranks[2].signal);
	CHECK(strstr(qe_last_error(), "rank 2 (pid") && strstr(qe_last_error(), "killed by signal 9"),
	      "signal: message %s", qe_last_error());
	printf("signal: %s\n", qe_last_error());

	rc = qe_launch_local(1, negative_main, NULL, NULL, 0, &res);
	CHECK(rc == QE_ECOMM && res.ranks[0].exit_code == 1, "negative: exit %d", res.ranks[0].exit_code);

	/* Exec variant: the shell checks its variables; rank 2 fails with 4. */
	{
		char *const ok_argv[] = { "/bin/sh", "-c",
					  "test \"$WORLD_SIZE\" = 3 && test \"$LOCAL_RANK\" = \"$RANK\" && "
					  "test -n \"$MASTER_PORT\" && test \"$MASTER_ADDR\" = 127.0.0.1 && "
					  "test -n \"$QE_RUN_ID\" && test \"$QE_TEST_KEEP\" = kept",
					  NULL };
		char *const fail_argv[] = { "/bin/sh", "-c", "if [ \"$RANK\" = 2 ]; then exit 4; fi; exec sleep 30", NULL };
		char *const missing_argv[] = { "/nonexistent/qeffect-binary", NULL };
		tu_setenv("QE_TEST_KEEP", "kept");
		tu_setenv("RANK", "77"); /* the parent's own value must not leak into the children */
		rc = qe_launch_exec(3, ok_argv, NULL, 0, &res);
		CHECK(rc == 0, "exec ok: %s: %s", qe_errname(rc), qe_last_error());
		tu_setenv("RANK", NULL);
		t0 = tu_now_ms();
		rc = qe_launch_exec(3, fail_argv, "127.0.0.1", 0, &res);
		dt = tu_now_ms() - t0;
		CHECK(rc == QE_ECOMM && res.first_failed == 2 && res.ranks[2].exit_code == 4 &&
			      res.ranks[0].signal == SIGTERM && res.ranks[1].signal == SIGTERM,
		      "exec fail: %s first %d exit %d signals %d %d", qe_errname(rc), res.first_failed,
		      res.ranks[2].exit_code, res.ranks[0].signal, res.ranks[1].signal);
		CHECK(dt < 3000, "exec fail: took %lld ms", (long long)dt);
		printf("exec fail: %s\n", qe_last_error());
		rc = qe_launch_exec(2, missing_argv, NULL, 0, &res);
		CHECK(rc == QE_ECOMM && (res.ranks[0].exit_code == 127 || res.ranks[1].exit_code == 127),
		      "exec missing: %s exits %d %d", qe_errname(rc), res.ranks[0].exit_code, res.ranks[1].exit_code);
	}
	CHECK(qe_launch_local(0, ok_main, NULL, NULL, 0, &res) == QE_EINVAL, "0 ranks accepted");
	CHECK(qe_launch_local(2, ok_main, NULL, NULL, 70000, &res) == QE_EINVAL, "port 70000 accepted");
	return qe_test_done("comm_test_launch");
}
