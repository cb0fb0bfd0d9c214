/*
 * ckpt_job.h - `qeffect verify`, `gc`, `push` and `pull` as jobs over the
 * ranks that hold a run's stores (DESIGN.md section 8).
 *
 * A run's stores live on the disks of the hosts its ranks ran on, and only
 * rank 0's host has the catalog.  So these commands run as jobs, started by
 * the launcher train uses (--nproc N, or torchrun's RANK / WORLD_SIZE /
 * MASTER_ADDR / MASTER_PORT): rank 0 reads the catalog and tells every rank
 * what to do with the stores on its own disk; the ranks work in parallel and
 * answer rank 0, which writes the catalog and makes the one report.  The
 * protocol is in ckpt/README.md ("Jobs over the stores").
 *
 * Every call is made by every rank of the job with the same arguments (comm
 * NULL: a job of one process, which sees the stores of its own host only).
 * The outputs are filled on rank 0 only; on the other ranks a call returns 0
 * once the job is over, whatever rank 0 found (rank 0 reports it) - or a
 * QE_E* code when this rank lost rank 0.  Errors on rank 0 name the rank and
 * host at fault ("rank 1 on host 'b7': ...").  Nothing here prints or exits.
 * Push and pull as jobs (ckpt_job_push, ckpt_job_pull) are declared in
 * ckpt/remote/ckpt_remote.h, beside the one-host push and pull, so this room
 * (ckpt/query) does not know the remote one.
 *
 * Test hook (like QE_CKPT_KILL): QE_JOB_KILL=OP:RANK makes rank RANK die by
 * SIGKILL when it receives task OP ("census", "verify", "gc", "push",
 * "pull"), so a test can check that rank 0 names the dead rank and its host.
 */
#ifndef QE_CKPT_JOB_H
#define QE_CKPT_JOB_H

#include <stdint.h>

#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "runtime/exec/pstate.h"

/* One store in a job: where it is, which rank worked on it, what it did. */
typedef struct ckpt_job_store {
	char store_id[CKPT_STORE_ID_MAX]; /* "" the schema-2 shared store */
	int owner;                        /* the rank that created it; -1 the shared store */
	int rank;                         /* the job rank that worked on it; -1 no rank of the job sees it */
	char host[CKPT_HOST_MAX];
	char path[CKPT_PATH_MAX];
	uint64_t chunks, bytes;  /* verify: re-hashed; push: uploaded; pull: fetched */
	uint64_t present;        /* push: already on the remote; pull: already in a store of that host */
	uint64_t store_chunks, orphans, orphan_bytes; /* verify */
	store_gc_result gc;      /* gc (what was, or for a dry run would be, deleted) */
	int compacted;           /* gc --compact: 1 when this store was rewritten */
	store_compact_result compact;
} ckpt_job_store;

typedef struct ckpt_job_report {
	int world;               /* ranks of the job */
	size_t n;
	ckpt_job_store *stores;  /* by store id; the stores of the catalog no rank sees have rank -1 */
} ckpt_job_report;
void ckpt_job_report_free(ckpt_job_report *j);

/*
 * verify: every rank re-hashes, in the stores it was given, the chunks of
 * committed checkpoints that name them, and counts their orphans; rank 0
 * judges every row (ckpt_q_verify's rules) and names, per fault, the store's
 * rank and host (ckpt_fault.rank/host/checked_by).  A store the catalog names
 * that no rank sees makes its chunks missing ("which no rank of this job
 * sees").  OUT (rank 0) *out: freed with ckpt_verify_report_free; *where.
 */
int ckpt_job_verify(qe_comm *comm, const char *run_dir, ckpt_verify_report *out, ckpt_job_report *where);

/*
 * gc: rank 0 decides and drops the catalog rows (ckpt_q_gc's order and
 * policy), then sends every rank the chunks to keep; each rank collects the
 * stores it was given (their locks held), with the grace period.  No rank
 * decides anything itself.  With p->compact each rank then compacts each of
 * those stores, closed, with its lock still held (ckq_compact_store).  OUT
 * (rank 0) *out (out->store, out->compact: the sums), *where.
 */
int ckpt_job_gc(qe_comm *comm, const char *run_dir, const ckpt_gc_policy *p, ckpt_gc_report *out,
		ckpt_job_report *where);

#endif
