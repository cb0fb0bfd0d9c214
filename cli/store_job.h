/*
 * store_job.h - how `qeffect verify`, `gc`, `push` and `pull` start as jobs
 * over the ranks that hold a run's stores (ckpt/query/ckpt_job.h): with --nproc N
 * this process forks N local ranks (qe_launch_local, as train does); under
 * an external launcher (RANK and WORLD_SIZE set, as torchrun sets them) this
 * process is one rank.  Either way each rank joins the comm and runs the
 * command's body; only rank 0 prints the report.
 */
#ifndef CLI_STORE_JOB_H
#define CLI_STORE_JOB_H

#include "cli/flags.h"
#include "runtime/comm/comm.h"

/* 1 when the command runs as a job: --nproc N > 1, or RANK/WORLD_SIZE set with WORLD_SIZE > 1. */
int cli_store_job_wanted(int nproc);

/*
 * Run body(comm, arg) on every rank of the job (comm joined here) and return
 * the process exit status: rank 0's.  In the forking form the launcher's
 * report names the first rank that failed unless it was rank 0 having said
 * why itself.  body returns an exit status (0, 1).
 */
int cli_store_job_run(const char *cmd, int nproc, int (*body)(qe_comm *comm, void *arg), void *arg);

/*
 * The run's writer lock (RUN/lock, on rank 0's host): a forking job takes it
 * in the parent, before the fork (the ranks share it); under an external
 * launcher rank 0 takes it itself.  cli_store_job_locks(as_job): 1 when the
 * command takes it before starting; cli_store_job_forked(): 1 in a rank
 * forked by cli_store_job_run.
 */
int cli_store_job_locks(int as_job);
int cli_store_job_forked(void);

/* The --nproc N row of a command's flag table (flags.h): 1..QE_LAUNCH_MAX_PROCS into *nproc. */
cli_flag cli_store_job_nproc_flag(int *nproc);

#endif
