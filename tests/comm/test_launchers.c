/*
 * test_launchers.c - SLURM's host lists and the three launchers' variables
 * (issue 38, item 3).
 *
 * The host list expander must give every host of SLURM's compressed forms
 * in order, zero padding kept, and refuse malformed lists with a message
 * quoting the list.  qe_dist_env_from_environ must place a process from
 * SLURM's variables (an srun task) or Open MPI's exactly as from torchrun's,
 * with torchrun's > SLURM's > Open MPI's, MASTER_ADDR/MASTER_PORT winning,
 * a batch script (no SLURM_STEP_ID) and a world of one being no job, and
 * Open MPI without MASTER_ADDR refused with a message saying how to set it.
 */
#include "comm_test_util.h"

/* Every variable a launcher sets; each case starts from none. */
static const char *const vars[] = { "RANK",
				     "WORLD_SIZE",
				     "LOCAL_RANK",
				     "LOCAL_WORLD_SIZE",
				     "MASTER_ADDR",
				     "MASTER_PORT",
				     "QE_RUN_ID",
				     "QE_COMM_TIMEOUT_MS",
				     "SLURM_PROCID",
				     "SLURM_STEP_ID",
				     "SLURM_NTASKS",
				     "SLURM_LOCALID",
				     "SLURM_STEP_NODELIST",
				     "SLURM_JOB_NODELIST",
				     "SLURM_LAUNCH_NODE_IPADDR",
				     "SLURM_JOB_ID",
				     "OMPI_COMM_WORLD_RANK",
				     "OMPI_COMM_WORLD_SIZE",
				     "OMPI_COMM_WORLD_LOCAL_RANK",
				     "OMPI_COMM_WORLD_LOCAL_SIZE" };

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		tu_setenv(vars[i], NULL);
}

/* list must expand to the space-separated hosts of want. */
static void expands(const char *list, const char *want)
{
	char got[4096] = "", host[128];
	long n = -1, m = -1;
	int rc = qe_hostlist_host(list, -1, NULL, 0, &n);
	CHECK(rc == 0, "'%s': counting failed: %s", list, qe_last_error());
	for (long i = 0; rc == 0 && i < n; i++) {
		rc = qe_hostlist_host(list, i, host, sizeof(host), &m);
		CHECK(rc == 0 && m == n, "'%s': host %ld: %s (count %ld, then %ld)", list, i, rc ? qe_last_error() : "",
		      n, m);
		if (rc == 0 && strlen(got) + strlen(host) + 2 < sizeof(got)) {
			strcat(got, i ? " " : "");
			strcat(got, host);
		}
	}
	CHECK(strcmp(got, want) == 0, "'%s' expands to '%s', want '%s'", list, got, want);
	rc = qe_hostlist_host(list, n, host, sizeof(host), NULL);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "no host"), "'%s': host %ld past the end -> %s: %s", list, n,
	      qe_errname(rc), qe_last_error());
}

/* list must be refused naming the list and why. */
static void refused(const char *list, const char *why)
{
	char host[64];
	long n = 7;
	int rc = qe_hostlist_host(list, 0, host, sizeof(host), &n);
	CHECK(rc == QE_EINVAL, "'%s' accepted as %s (%ld hosts)", list, host, n);
	CHECK(strstr(qe_last_error(), why) != NULL, "'%s': message '%s' lacks '%s'", list, qe_last_error(), why);
	CHECK(strstr(qe_last_error(), "host list") != NULL, "'%s': message '%s' does not say what it read", list,
	      qe_last_error());
}

static void hostlists(void)
{
	long n;
	char host[64];
	expands("node01", "node01");
	expands("node[01-04,07]", "node01 node02 node03 node04 node07");
	expands("a1,b[2-3]", "a1 b2 b3");
	expands("gpu[8-11]", "gpu8 gpu9 gpu10 gpu11");
	expands("n[098-101]", "n098 n099 n100 n101");
	expands("x[007]", "x007");
	expands("c[1-2]-[01-02].ib", "c1-01.ib c1-02.ib c2-01.ib c2-02.ib");
	expands("rack[1-2]-gpu[1,3],login-1,z[0-1]", "rack1-gpu1 rack1-gpu3 rack2-gpu1 rack2-gpu3 login-1 z0 z1");
	expands("10.0.0.[1-3]", "10.0.0.1 10.0.0.2 10.0.0.3");
	/* a long range is counted, not enumerated */
	CHECK(qe_hostlist_host("node[0000001-1000000]", 999999, host, sizeof(host), &n) == 0 && n == 1000000 &&
		      strcmp(host, "node1000000") == 0,
	      "long range: host '%s' of %ld: %s", host, n, qe_last_error());
	refused("", "empty");
	refused("node[01-04", "without its ']'");
	refused("node01-04]", "']' without its '['");
	refused("node[]", "empty bracket group");
	refused("node[04-01]", "end is below its start");
	refused("node[1-a]", "expected a number");
	refused("node[1,]", "empty range");
	refused("node[,1]", "expected a number");
	refused("a,,b", "empty host name");
	refused("a,", "empty host name");
	refused("node[1[2]]", "inside brackets");
	refused("node 1", "not part of a host name");
	refused("node[1-2-3]", "expected ','");
	refused("n[1-999999999]", "more hosts than qeffect reads");
	refused("n[1-9999999],m[1-9999999]", "more hosts than qeffect reads");
	refused("a[1-9999]b[1-9999]", "more hosts than qeffect reads");
	refused("n[1234567890123456789]", "longer than 18 digits");
	CHECK(qe_hostlist_host("averyveryverylongname[1-2]", 0, host, 8, NULL) == QE_EINVAL &&
		      strstr(qe_last_error(), "too long"),
	      "a name longer than the buffer: %s", qe_last_error());
}

static void slurm_case(void)
{
	qe_dist_env e;
	clear_env();
	tu_setenv("SLURM_PROCID", "5");
	tu_setenv("SLURM_STEP_ID", "0");
	tu_setenv("SLURM_NTASKS", "8");
	tu_setenv("SLURM_LOCALID", "1");
	tu_setenv("SLURM_JOB_ID", "123456");
	tu_setenv("SLURM_JOB_NODELIST", "gpu[07-10]");
	tu_setenv("SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_SLURM && e.rank == 5 && e.world_size == 8 && e.local_rank == 1 &&
		      strcmp(e.master_addr, "gpu07") == 0 && e.master_port == 20000 + 123456 % 12000 && e.multi_host == 1 &&
		      strcmp(e.run_id, "slurm-123456.0") == 0,
	      "slurm: source %d rank %d world %d local %d master %s:%d multi %d run %s", (int)e.source, e.rank,
	      e.world_size, e.local_rank, e.master_addr, e.master_port, e.multi_host, e.run_id);
	CHECK(strstr(e.master_from, "SLURM_JOB_NODELIST") != NULL, "slurm: master from '%s'", e.master_from);
	/* the step's nodes win over the job's */
	tu_setenv("SLURM_STEP_NODELIST", "gpu[09-10]");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(strcmp(e.master_addr, "gpu09") == 0 && strstr(e.master_from, "SLURM_STEP_NODELIST"),
	      "slurm step nodes: master %s from %s", e.master_addr, e.master_from);
	tu_setenv("SLURM_STEP_NODELIST", "node1");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.multi_host == 0, "slurm one node: multi %d", e.multi_host);
	/* the launch node only without node lists */
	tu_setenv("SLURM_STEP_NODELIST", NULL);
	tu_setenv("SLURM_JOB_NODELIST", NULL);
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(strcmp(e.master_addr, "10.1.1.1") == 0 && e.multi_host == -1, "slurm launch node: master %s multi %d",
	      e.master_addr, e.multi_host);
	/* MASTER_ADDR / MASTER_PORT / QE_RUN_ID win */
	tu_setenv("MASTER_ADDR", "head");
	tu_setenv("MASTER_PORT", "31000");
	tu_setenv("QE_RUN_ID", "mine");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(strcmp(e.master_addr, "head") == 0 && e.master_port == 31000 && strcmp(e.run_id, "mine") == 0 &&
		      strcmp(e.master_from, "MASTER_ADDR") == 0,
	      "slurm + MASTER_*: %s:%d run %s from %s", e.master_addr, e.master_port, e.run_id, e.master_from);
	/* torchrun's variables win over SLURM's */
	tu_setenv("RANK", "2");
	tu_setenv("WORLD_SIZE", "4");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_TORCHRUN && e.rank == 2 && e.world_size == 4 && e.local_rank == 0,
	      "torchrun over slurm: source %d rank %d world %d local %d", (int)e.source, e.rank, e.world_size,
	      e.local_rank);
	/* a bad node list is named */
	clear_env();
	tu_setenv("SLURM_PROCID", "0");
	tu_setenv("SLURM_STEP_ID", "3");
	tu_setenv("SLURM_NTASKS", "2");
	tu_setenv("SLURM_JOB_NODELIST", "node[2-1]");
	CHECK(qe_dist_env_from_environ(&e) == QE_EINVAL && strstr(qe_last_error(), "SLURM_JOB_NODELIST") &&
		      strstr(qe_last_error(), "node[2-1]"),
	      "bad node list: %s", qe_last_error());
	CHECK(e.world_size == 1 && e.rank == 0, "bad node list: env not reset");
	tu_setenv("MASTER_ADDR", "head"); /* names the master: the list is not needed */
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_SLURM && strcmp(e.master_addr, "head") == 0 && e.multi_host == -1,
	      "bad node list with MASTER_ADDR: source %d master %s multi %d", (int)e.source, e.master_addr, e.multi_host);
	tu_setenv("MASTER_ADDR", NULL);
	tu_setenv("SLURM_JOB_NODELIST", "node1");
	tu_setenv("SLURM_PROCID", "2");
	CHECK(qe_dist_env_from_environ(&e) == QE_EINVAL && strstr(qe_last_error(), "SLURM_PROCID=2 is not below SLURM_NTASKS=2"),
	      "procid past ntasks: %s", qe_last_error());
	tu_setenv("SLURM_PROCID", "x");
	CHECK(qe_dist_env_from_environ(&e) == QE_EINVAL && strstr(qe_last_error(), "SLURM_PROCID='x'"),
	      "bad procid: %s", qe_last_error());
	/* a batch script (no step) and a step of one task are no job */
	clear_env();
	tu_setenv("SLURM_PROCID", "0");
	tu_setenv("SLURM_NTASKS", "4");
	tu_setenv("SLURM_JOB_NODELIST", "n[1-4]");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_NONE && e.world_size == 1, "batch script: source %d world %d", (int)e.source,
	      e.world_size);
	tu_setenv("SLURM_STEP_ID", "0");
	tu_setenv("SLURM_NTASKS", "1");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_NONE && e.world_size == 1 && strcmp(e.master_addr, "127.0.0.1") == 0,
	      "one task: source %d world %d master %s", (int)e.source, e.world_size, e.master_addr);
	clear_env();
}

static void ompi_case(void)
{
	qe_dist_env e;
	clear_env();
	tu_setenv("OMPI_COMM_WORLD_RANK", "3");
	tu_setenv("OMPI_COMM_WORLD_SIZE", "4");
	tu_setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1");
	tu_setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
	int rc = qe_dist_env_from_environ(&e);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "Open MPI") && strstr(qe_last_error(), "MASTER_ADDR") &&
		      strstr(qe_last_error(), "mpirun -x MASTER_ADDR="),
	      "ompi without MASTER_ADDR -> %s: %s", qe_errname(rc), qe_last_error());
	tu_setenv("MASTER_ADDR", "node7");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_OMPI && e.rank == 3 && e.world_size == 4 && e.local_rank == 1 &&
		      strcmp(e.master_addr, "node7") == 0 && e.master_port == 29500 && e.multi_host == 1,
	      "ompi: source %d rank %d world %d local %d master %s:%d multi %d", (int)e.source, e.rank, e.world_size,
	      e.local_rank, e.master_addr, e.master_port, e.multi_host);
	/* SLURM's win over Open MPI's (mpirun inside an srun step is mpirun's business, not ours) */
	tu_setenv("SLURM_PROCID", "0");
	tu_setenv("SLURM_STEP_ID", "0");
	tu_setenv("SLURM_NTASKS", "2");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_SLURM && e.rank == 0 && e.world_size == 2, "slurm over ompi: source %d rank %d world %d",
	      (int)e.source, e.rank, e.world_size);
	/* a world of one needs no master */
	clear_env();
	tu_setenv("OMPI_COMM_WORLD_RANK", "0");
	tu_setenv("OMPI_COMM_WORLD_SIZE", "1");
	CHECK_OK(qe_dist_env_from_environ(&e));
	CHECK(e.source == QE_DIST_NONE && e.world_size == 1, "ompi of one: source %d", (int)e.source);
	clear_env();
}

int main(void)
{
	hostlists();
	slurm_case();
	ompi_case();
	return qe_test_done("comm_test_launchers");
}
