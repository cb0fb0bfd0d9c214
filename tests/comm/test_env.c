/*
 * test_env.c - the job variables and the single-process comm.
 *
 * Malformed RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT/
 * QE_COMM_TIMEOUT_MS/QE_RUN_ID must fail with QE_EINVAL and a message naming
 * the variable and its value; unset ones take the defaults.  A world of one
 * needs no sockets; every call still works.  Rendezvous timeouts (no rank 0,
 * no other rank) fail in about the time given, naming what was missing.
 */
#include "comm_test_util.h"

/* (and the other launchers' ranks, so that a test run under srun or mpirun sees none: test_launchers.c) */
static const char *const vars[] = { "RANK",      "WORLD_SIZE",         "LOCAL_RANK", "MASTER_ADDR",
				     "MASTER_PORT", "QE_COMM_TIMEOUT_MS", "QE_RUN_ID",  "SLURM_PROCID",
				     "OMPI_COMM_WORLD_RANK" };

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		tu_setenv(vars[i], NULL);
}

/* Set name=value (plus an optional second pair) and expect EINVAL naming want. */
static void bad(const char *name, const char *value, const char *name2, const char *value2, const char *want)
{
	qe_dist_env e;
	int rc;
	clear_env();
	tu_setenv(name, value);
	if (name2)
		tu_setenv(name2, value2);
	rc = qe_dist_env_from_environ(&e);
	CHECK(rc == QE_EINVAL, "%s='%s' -> %s", name, value, qe_errname(rc));
	CHECK(strstr(qe_last_error(), want) != NULL, "%s='%s': message '%s' lacks '%s'", name, value, qe_last_error(),
	      want);
	CHECK(e.world_size == 1 && e.rank == 0, "%s='%s': env not reset to defaults", name, value);
}

static void env_cases(void)
{
	qe_dist_env e;
	clear_env();
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.rank == 0 && e.world_size == 1 && e.local_rank == 0 && e.master_port == 29500 &&
		      strcmp(e.master_addr, "127.0.0.1") == 0 && e.timeout_ms == 600000 && strcmp(e.run_id, "qeffect") == 0,
	      "defaults: rank %d world %d local %d addr %s port %d timeout %d run %s", e.rank, e.world_size,
	      e.local_rank, e.master_addr, e.master_port, e.timeout_ms, e.run_id);

	tu_setenv("RANK", "3");
	tu_setenv("WORLD_SIZE", "8");
	tu_setenv("LOCAL_RANK", "1");
	tu_setenv("MASTER_ADDR", "node17.cluster");
	tu_setenv("MASTER_PORT", "12345");
	tu_setenv("QE_COMM_TIMEOUT_MS", "2500");
	tu_setenv("QE_RUN_ID", "run-42");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.rank == 3 && e.world_size == 8 && e.local_rank == 1 && e.master_port == 12345 &&
		      strcmp(e.master_addr, "node17.cluster") == 0 && e.timeout_ms == 2500 && strcmp(e.run_id, "run-42") == 0,
	      "parsed: rank %d world %d local %d addr %s port %d timeout %d run %s", e.rank, e.world_size, e.local_rank,
	      e.master_addr, e.master_port, e.timeout_ms, e.run_id);

	bad("RANK", "abc", NULL, NULL, "RANK='abc' is not a decimal integer");
	bad("RANK", "1x", "WORLD_SIZE", "4", "RANK='1x' is not a decimal integer");
	bad("RANK", " 1", "WORLD_SIZE", "4", "RANK=' 1' is not a decimal integer");
	bad("RANK", "", NULL, NULL, "RANK='' is not a decimal integer");
	bad("RANK", "-1", "WORLD_SIZE", "4", "RANK=-1 is out of range");
	bad("RANK", "4", "WORLD_SIZE", "4", "RANK=4 is not below WORLD_SIZE=4");
	bad("RANK", "1", NULL, NULL, "RANK=1 is not below WORLD_SIZE=1 (WORLD_SIZE unset)");
	bad("WORLD_SIZE", "0", NULL, NULL, "WORLD_SIZE=0 is out of range");
	bad("WORLD_SIZE", "99999999999999999999", NULL, NULL, "WORLD_SIZE=99999999999999999999 is out of range");
	bad("LOCAL_RANK", "two", NULL, NULL, "LOCAL_RANK='two' is not a decimal integer");
	bad("MASTER_PORT", "70000", NULL, NULL, "MASTER_PORT=70000 is out of range [1, 65535]");
	bad("MASTER_PORT", "0", NULL, NULL, "MASTER_PORT=0 is out of range");
	bad("MASTER_PORT", "29500.5", NULL, NULL, "MASTER_PORT='29500.5' is not a decimal integer");
	bad("MASTER_ADDR", "", NULL, NULL, "MASTER_ADDR is set but empty");
	bad("MASTER_ADDR", "a b", NULL, NULL, "MASTER_ADDR='a b' contains a space");
	bad("QE_COMM_TIMEOUT_MS", "-5", NULL, NULL, "QE_COMM_TIMEOUT_MS=-5 is out of range");
	bad("QE_RUN_ID", "0123456789012345678901234567890123456789012345678901234567890123456789", NULL, NULL,
	    "QE_RUN_ID='");
	clear_env();
}

static void single_rank(void)
{
	qe_dist_env e;
	qe_comm *c = NULL;
	float x[3] = { 1.5f, -2.0f, 3.25f };
	char msg[] = "hello", got[sizeof(msg)];
	void *blob = NULL;
	size_t bn = 0;
	qe_comm_blob *all = NULL;
	qe_dist_env_default(&e);
	e.master_port = 1; /* never used: a world of one opens no socket */
	CHECK_OK(qe_comm_open(&e, 1000, &c));
	if (!c)
		return;
	CHECK(qe_comm_rank(c) == 0 && qe_comm_world_size(c) == 1, "single: rank %d world %d", qe_comm_rank(c),
	      qe_comm_world_size(c));
	CHECK_OK(qe_comm_send(c, 0, 1, msg, sizeof(msg)));
	CHECK_OK(qe_comm_recv(c, 0, 1, got, sizeof(got)));
	CHECK(memcmp(msg, got, sizeof(msg)) == 0, "single: self message differs");
	CHECK_OK(qe_comm_barrier(c));
	CHECK_OK(qe_comm_allreduce_sum_f32(c, x, 3, NULL, 0));
	CHECK(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.25f, "single: allreduce changed the data");
	CHECK_OK(qe_comm_bcast(c, 0, msg, sizeof(msg)));
	CHECK_OK(qe_comm_bcast_blob(c, "id", 2, &blob, &bn));
	CHECK(blob && bn == 2 && memcmp(blob, "id", 2) == 0, "single: blob");
	free(blob);
	CHECK_OK(qe_comm_gather_blobs(c, "r0", 2, &all));
	CHECK(all && all[0].size == 2 && memcmp(all[0].data, "r0", 2) == 0, "single: gather");
	qe_comm_blobs_free(all, 1);
	CHECK(qe_comm_send(c, 1, 1, msg, 1) == QE_EINVAL, "single: send to rank 1 of 1 accepted");
	CHECK(strstr(qe_last_error(), "no such rank") != NULL, "single: message %s", qe_last_error());
	CHECK_OK(qe_comm_flush(c));
	qe_comm_close(c);
	qe_comm_close(NULL);
}

/* Rendezvous that cannot complete must fail in about the given time. */
static void rendezvous_timeouts(void)
{
	qe_dist_env e;
	qe_comm *c = (qe_comm *)&e;
	int port, rc;
	int64_t t0, dt;
	CHECK_OK(qe_comm_free_port("127.0.0.1", &port));
	qe_dist_env_default(&e);
	e.world_size = 2;
	e.master_port = port;

	e.rank = 1; /* nobody listens */
	t0 = tu_now_ms();
	rc = qe_comm_open(&e, 400, &c);
	dt = tu_now_ms() - t0;
	CHECK(rc == QE_ECOMM && c == NULL, "no rank 0: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "rank 1: could not connect to rank 0 at 127.0.0.1:") != NULL, "no rank 0: %s",
	      qe_last_error());
	CHECK(dt >= 350 && dt < 3000, "no rank 0: gave up after %lld ms, want ~400", (long long)dt);
	printf("no rank 0 (%lld ms): %s\n", (long long)dt, qe_last_error());

	e.rank = 0; /* nobody joins */
	t0 = tu_now_ms();
	rc = qe_comm_open(&e, 400, &c);
	dt = tu_now_ms() - t0;
	CHECK(rc == QE_ECOMM && c == NULL, "no rank 1: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "rank 0: rendezvous timed out: 0 of 1 ranks joined (missing: 1)") != NULL,
	      "no rank 1: %s", qe_last_error());
	CHECK(dt >= 350 && dt < 3000, "no rank 1: gave up after %lld ms, want ~400", (long long)dt);
	printf("no rank 1 (%lld ms): %s\n", (long long)dt, qe_last_error());

	e.rank = 2;
	CHECK(qe_comm_open(&e, 400, &c) == QE_EINVAL, "rank 2 of 2 accepted");
}

int main(void)
{
	alarm(120);
	env_cases();
	single_rank();
	rendezvous_timeouts();
	return qe_test_done("comm_test_env");
}
