/*
 * launch_vars.c - the launcher's variables as cli handed them (launch_vars.h).
 * Built into qe_auth, the module below both the backend and comm, since the
 * cpu links and the cuda backend read them too.
 */
#include "runtime/comm/launch_vars.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* The names the runtime looks up: the launchers', the job's secret and the rendezvous' knobs. */
const char *const qe_launch_var_names[] = {
	"RANK",          "WORLD_SIZE",         "LOCAL_RANK",           "LOCAL_WORLD_SIZE",
	"MASTER_ADDR",   "MASTER_PORT",        "QE_RUN_ID",            "SLURM_PROCID",
	"SLURM_STEP_ID", "SLURM_NTASKS",       "SLURM_LOCALID",        "SLURM_STEP_NODELIST",
	"SLURM_JOB_NODELIST", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK",
	"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "QE_JOB_SECRET",
	"QE_JOB_SECRET_FILE", "QE_REQUIRE_SECRET", "QE_LISTEN_ADDR", "QE_COMM_TIMEOUT_MS",
	"QE_LAUNCH_GRACE_MS",
};
#define NVARS ((int)(sizeof(qe_launch_var_names) / sizeof(qe_launch_var_names[0])))
const int qe_launch_nvars = NVARS;

static char *values[NVARS];

static int find(const char *name)
{
	for (int i = 0; name && i < NVARS; i++)
		if (!strcmp(qe_launch_var_names[i], name))
			return i;
	return -1;
}

int qe_launch_var_set(const char *name, const char *value)
{
	int i = find(name);
	if (i < 0)
		return qe_fail(QE_EINVAL, "launch variable '%s' is not in runtime/comm/launch_vars.c's list",
			       name ? name : "(null)");
	char *copy = NULL;
	if (value && !(copy = strdup(value)))
		return qe_fail(QE_ENOMEM, "out of memory for launch variable %s", name);
	free(values[i]);
	values[i] = copy;
	return 0;
}

const char *qe_launch_var(const char *name)
{
	int i = find(name);
	if (i < 0) {
		qe_log(QE_LOG_ERROR, "launch variable '%s' is looked up but not in runtime/comm/launch_vars.c's list",
		       name ? name : "(null)");
		return NULL;
	}
	return values[i];
}
