/*
 * store_job.c - starting verify, gc, push and pull as jobs over the ranks
 * that hold a run's stores (store_job.h).  The rank body is the command's;
 * this file joins the comm around it, as cli_rank_main does for training.
 */
#include "cli/store_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run.h"
#include "runtime/core/env.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

typedef struct job_arg {
	const char *cmd;
	int (*body)(qe_comm *comm, void *arg);
	void *arg;
} job_arg;

static int forked; /* set in the parent before the fork: the ranks see it */

int cli_store_job_forked(void)
{
	return forked;
}

int cli_store_job_locks(int as_job)
{
	return !as_job || !cli_launched(NULL);
}

int cli_store_job_wanted(int nproc)
{
	qe_dist_env env;
	if (cli_launched(NULL))
		return qe_dist_env_from_environ(&env) || env.world_size > 1;
	return nproc > 1;
}

cli_flag cli_store_job_nproc_flag(int *nproc)
{
	return (cli_flag){ "nproc", 0, CLI_FLAG_INT, nproc, .lo = 1, .hi = QE_LAUNCH_MAX_PROCS };
}

static int rank_main(void *varg)
{
	job_arg *a = varg;
	qe_dist_env env;
	qe_comm *comm = NULL;
	int rc = qe_dist_env_from_environ(&env);
	if (!rc && env.world_size > 1)
		rc = qe_comm_open(&env, 0, &comm);
	if (rc) {
		fprintf(stderr, "qeffect %s: rank %d cannot join the job: %s (%s)\n", a->cmd, env.rank, qe_last_error(),
			qe_errname(rc));
		return 1;
	}
	qe_log_set_rank(env.world_size > 1 ? env.rank : -1);
	int st = a->body(comm, a->arg);
	qe_comm_close(comm);
	fflush(stdout);
	return st;
}

int cli_store_job_run(const char *cmd, int nproc, int (*body)(qe_comm *comm, void *arg), void *arg)
{
	job_arg a = { cmd, body, arg };
	if (cli_launched(NULL))
		return rank_main(&a); /* started by an external launcher */
	if (nproc <= 1)
		return body(NULL, arg);
	fflush(stdout);
	fflush(stderr);
	forked = 1;
	qe_launch_result res;
	int rc = qe_launch_local(nproc, rank_main, &a, NULL, 0, &res);
	if (!rc)
		return 0;
	/* rank 0 made the report and chose its status; the launcher then stopped the others */
	if (res.first_failed == 0 && res.ranks[0].exit_code > 0)
		return res.ranks[0].exit_code;
	fprintf(stderr, "qeffect %s: %s\n", cmd, qe_last_error());
	return 1;
}
