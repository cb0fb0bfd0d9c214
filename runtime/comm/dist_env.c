/*
 * dist_env.c - the job variables a rank process starts from, read strictly:
 * a value that is not a whole decimal number in range, or a string that is
 * empty, too long or holds a space or control character, is refused with
 * the variable's name and value.
 *
 * Three launchers place processes, tried in this order (comm.h says what
 * each gives): torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT; qeffect's own launcher sets the same), SLURM's
 * for a task of an srun step, Open MPI's.  Explicit variables win because a
 * user who sets RANK under srun (or torchrun started by srun) means it.
 *
 * SLURM puts task 0 on the first node of the step under its block and
 * cyclic distributions, so the master is that node, read from
 * SLURM_STEP_NODELIST (the step's nodes; an srun may use only some of the
 * job's), else SLURM_JOB_NODELIST.  SLURM_LAUNCH_NODE_IPADDR is only the
 * last resort: it is the host srun ran on, which under salloc is the login
 * node, not a node of the job.  The port is derived from SLURM_JOB_ID
 * (20000 + id mod 12000, under Linux's ephemeral ports), so two jobs that
 * share a node do not collide; MASTER_PORT overrides it, which two steps of
 * one job running at once need.
 */
#include "runtime/comm/comm_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/launch_vars.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

void qe_dist_env_default(qe_dist_env *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = 0;
	out->world_size = 1;
	out->local_rank = 0;
	snprintf(out->master_addr, sizeof(out->master_addr), "127.0.0.1");
	out->master_port = QE_COMM_DEFAULT_PORT;
	snprintf(out->run_id, sizeof(out->run_id), "qeffect");
	out->timeout_ms = QE_COMM_DEFAULT_TIMEOUT_MS;
	out->source = QE_DIST_NONE;
	out->multi_host = -1;
}

static int env_int(const char *name, int def, long lo, long hi, int *out)
{
	const char *s = qe_launch_var(name);
	char *end;
	long v;
	if (!s) {
		*out = def;
		return 0;
	}
	if (!(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end != '\0')
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	if (errno == ERANGE || v < lo || v > hi)
		return qe_fail(QE_EINVAL, "environment variable %s=%s is out of range [%ld, %ld]", name, s, lo, hi);
	*out = (int)v;
	return 0;
}

static int env_str(const char *name, const char *def, char *dst, size_t cap)
{
	const char *s = qe_launch_var(name);
	size_t i;
	if (!s)
		s = def;
	if (s[0] == '\0')
		return qe_fail(QE_EINVAL, "environment variable %s is set but empty", name);
	if (strlen(s) >= cap)
		return qe_fail(QE_EINVAL, "environment variable %s='%.40s...' is longer than %zu characters", name, s,
			       cap - 1);
	for (i = 0; s[i]; i++)
		if (iscntrl((unsigned char)s[i]) || s[i] == ' ')
			return qe_fail(QE_EINVAL, "environment variable %s='%s' contains a space or control character",
				       name, s);
	memmove(dst, s, strlen(s) + 1); /* s may be dst: the default is the current value */
	return 0;
}

const char *qe_dist_source_name(qe_dist_source s)
{
	switch (s) {
	case QE_DIST_TORCHRUN:
		return "RANK/WORLD_SIZE";
	case QE_DIST_SLURM:
		return "SLURM (SLURM_PROCID/SLURM_NTASKS)";
	case QE_DIST_OMPI:
		return "Open MPI (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)";
	default:
		return "none";
	}
}

/* LOCAL_WORLD_SIZE-style hint: ranks on this host (name unset: -1). */
static int multi_host_hint(const char *local_size_var, int world, int *multi)
{
	int n;
	int rc = env_int(local_size_var, -1, 1, 65536, &n);
	*multi = rc || n < 0 ? -1 : n < world;
	return rc;
}

static int from_torchrun(qe_dist_env *e)
{
	int rc;
	if ((rc = env_int("WORLD_SIZE", 1, 1, 65536, &e->world_size)) || (rc = env_int("RANK", 0, 0, 65535, &e->rank)) ||
	    (rc = env_int("LOCAL_RANK", 0, 0, 65535, &e->local_rank)))
		return rc;
	if (e->rank >= e->world_size)
		return qe_fail(QE_EINVAL, "environment variable RANK=%d is not below WORLD_SIZE=%d%s", e->rank,
			       e->world_size, qe_launch_var("WORLD_SIZE") ? "" : " (WORLD_SIZE unset)");
	e->source = qe_launch_var("RANK") && qe_launch_var("WORLD_SIZE") ? QE_DIST_TORCHRUN : QE_DIST_NONE;
	return multi_host_hint("LOCAL_WORLD_SIZE", e->world_size, &e->multi_host);
}

/* The master from a SLURM host list variable: its first host, and whether it names more than one. */
static int slurm_master(qe_dist_env *e, const char *var)
{
	const char *list = qe_launch_var(var);
	long n;
	if (!list)
		return 1;
	if (qe_hostlist_host(list, 0, e->master_addr, sizeof(e->master_addr), &n)) {
		char why[600];
		snprintf(why, sizeof(why), "%s", qe_last_error());
		return qe_fail(QE_EINVAL, "environment variable %s: %s", var, why);
	}
	e->multi_host = n > 1;
	snprintf(e->master_from, sizeof(e->master_from), "the first host of %s='%.200s'", var, list);
	return 0;
}

static int from_slurm(qe_dist_env *e)
{
	int rc, job = -1, step = 0;
	if ((rc = env_int("SLURM_NTASKS", 1, 1, 65536, &e->world_size)) ||
	    (rc = env_int("SLURM_PROCID", 0, 0, 65535, &e->rank)) ||
	    (rc = env_int("SLURM_LOCALID", 0, 0, 65535, &e->local_rank)) ||
	    (rc = env_int("SLURM_JOB_ID", -1, 0, INT_MAX, &job)) || (rc = env_int("SLURM_STEP_ID", 0, 0, INT_MAX, &step)))
		return rc;
	if (e->rank >= e->world_size)
		return qe_fail(QE_EINVAL, "environment variable SLURM_PROCID=%d is not below SLURM_NTASKS=%d%s", e->rank,
			       e->world_size, qe_launch_var("SLURM_NTASKS") ? "" : " (SLURM_NTASKS unset)");
	e->source = e->world_size > 1 ? QE_DIST_SLURM : QE_DIST_NONE;
	rc = slurm_master(e, "SLURM_STEP_NODELIST");
	if (rc == 1)
		rc = slurm_master(e, "SLURM_JOB_NODELIST");
	if (rc < 0 && qe_launch_var("MASTER_ADDR")) {
		/* MASTER_ADDR names the master: a list we cannot read only costs the hosts' count */
		qe_log(QE_LOG_DEBUG, "ignoring the SLURM node list (MASTER_ADDR is set): %s", qe_last_error());
		qe_clear_error();
		e->multi_host = -1;
	} else if (rc < 0) {
		return rc;
	} else if (rc == 1) {
		if ((rc = env_str("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1", e->master_addr, sizeof(e->master_addr))))
			return rc;
		snprintf(e->master_from, sizeof(e->master_from), "%s",
			 qe_launch_var("SLURM_LAUNCH_NODE_IPADDR") ? "SLURM_LAUNCH_NODE_IPADDR" : "the default (no SLURM node list)");
	}
	if (job >= 0) {
		e->master_port = 20000 + job % 12000;
		snprintf(e->run_id, sizeof(e->run_id), "slurm-%d.%d", job, step);
	}
	return 0;
}

static int from_ompi(qe_dist_env *e)
{
	int rc;
	if ((rc = env_int("OMPI_COMM_WORLD_SIZE", 1, 1, 65536, &e->world_size)) ||
	    (rc = env_int("OMPI_COMM_WORLD_RANK", 0, 0, 65535, &e->rank)) ||
	    (rc = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, 65535, &e->local_rank)))
		return rc;
	if (e->rank >= e->world_size)
		return qe_fail(QE_EINVAL,
			       "environment variable OMPI_COMM_WORLD_RANK=%d is not below OMPI_COMM_WORLD_SIZE=%d%s", e->rank,
			       e->world_size, qe_launch_var("OMPI_COMM_WORLD_SIZE") ? "" : " (OMPI_COMM_WORLD_SIZE unset)");
	e->source = e->world_size > 1 ? QE_DIST_OMPI : QE_DIST_NONE;
	if (e->source == QE_DIST_OMPI && !qe_launch_var("MASTER_ADDR"))
		return qe_fail(QE_EINVAL,
			       "rank %d of %d was started by Open MPI (OMPI_COMM_WORLD_RANK=%d, OMPI_COMM_WORLD_SIZE=%d), "
			       "which does not say where rank 0 is: set MASTER_ADDR to rank 0's host for every rank "
			       "(mpirun -x MASTER_ADDR=HOST -x MASTER_PORT=PORT ...)",
			       e->rank, e->world_size, e->rank, e->world_size);
	return multi_host_hint("OMPI_COMM_WORLD_LOCAL_SIZE", e->world_size, &e->multi_host);
}

int qe_dist_env_from_environ(qe_dist_env *out)
{
	qe_dist_env e;
	int rc;
	qe_dist_env_default(&e);
	qe_dist_env_default(out);
	if (qe_launch_var("RANK") || qe_launch_var("WORLD_SIZE"))
		rc = from_torchrun(&e);
	else if (qe_launch_var("SLURM_PROCID") && qe_launch_var("SLURM_STEP_ID"))
		rc = from_slurm(&e);
	else if (qe_launch_var("OMPI_COMM_WORLD_RANK"))
		rc = from_ompi(&e);
	else
		rc = env_int("LOCAL_RANK", 0, 0, 65535, &e.local_rank); /* a process of its own may pick its GPU */
	if (rc)
		return rc;
	if (e.source == QE_DIST_NONE && (qe_launch_var("SLURM_PROCID") || qe_launch_var("OMPI_COMM_WORLD_RANK")) &&
	    !qe_launch_var("RANK") && !qe_launch_var("WORLD_SIZE")) {
		/* a world of one (or a batch script): qeffect's own launcher may fork the ranks */
		qe_dist_env_default(&e);
	}
	if ((rc = env_int("MASTER_PORT", e.master_port, 1, 65535, &e.master_port)) ||
	    (rc = env_int("QE_COMM_TIMEOUT_MS", QE_COMM_DEFAULT_TIMEOUT_MS, 1, INT_MAX, &e.timeout_ms)) ||
	    (rc = env_str("MASTER_ADDR", e.master_addr, e.master_addr, sizeof(e.master_addr))) ||
	    (rc = env_str("QE_RUN_ID", e.run_id, e.run_id, sizeof(e.run_id))))
		return rc;
	if (qe_launch_var("MASTER_ADDR") || !e.master_from[0])
		snprintf(e.master_from, sizeof(e.master_from), "%s",
			 qe_launch_var("MASTER_ADDR") ? "MASTER_ADDR" : "the default address (MASTER_ADDR unset)");
	*out = e;
	return 0;
}
