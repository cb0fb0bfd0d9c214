/*
 * ckpt.h - checkpoints of a training run (DESIGN.md section 8).
 *
 * A checkpoint is taken only at a quiescent optimizer boundary (the gate:
 * qe_pstate_quiescent).  Every rank writes the persistent items of its stages
 * (runtime/exec/pstate.h) as chunks into its own LMDB store, STORES/rank-R
 * on its own host's disk (ckpt/session/rundir.h), and syncs it once; then it sends
 * its rows (tensor, stage, dtype, shape, chunk hashes and sizes, store id)
 * to rank 0.  Only rank 0 opens the catalog: it writes every rank's rows and
 * marks the checkpoint committed in one durable SQLite transaction - the
 * single commit point.  A crash at any moment leaves the last committed
 * checkpoint loadable; orphan chunks are collected by gc.  Restore runs in
 * fresh processes before any graph is built: rank 0 sends every rank the
 * checkpoint's rows, learns which stores each rank sees on its disk, and
 * plans who reads which tensor: a rank reads its own, and a tensor held in
 * another rank's store is read there and sent over the comm, re-hashed at
 * both ends.  Items are found by (global stage, name), so another pipeline
 * mapping restores too; process-local objects are rebuilt.
 *
 * Every call here is collective over the rank's communicator when the world
 * has more than one rank.  Nothing here exits the process.
 *
 * Layout in the catalog: one tensor row per persistent item, keyed by
 * (global stage, item name), kind = qe_pstate_kind_name, dtype =
 * qe_dtype_name, shape "[a,b,...]".  Run-wide records (pstate stage -1, held
 * by global rank 0) are stored at stage 0 under the name "run/NAME", because
 * the catalog's stage column is non-negative.  Data-parallel replicas hold
 * bitwise identical parameters and moments, so only replica 0 writes those
 * and every replica restores them from the same rows; FP8 meta (amax
 * histories of inputs and gradients are per replica) and the small records
 * are written by every replica, replica R > 0 under "dpR/NAME" (identical
 * chunks are stored once).  A replica with no "dpR/" row of its own (the
 * checkpoint had fewer replicas) starts from replica 0's.
 *
 * Environment:
 *  - QE_CKPT_CHUNK_BYTES: store chunk size in bytes (default 64 MiB; 64 ..
 *    STORE_MAX_CHUNK).  Identical chunks are stored once, so the size only
 *    changes how tensors are cut, never what is restored.
 *  - QE_CKPT_KILL=PHASE:RANK:COUNT[,...]: an explicit fault-injection hook for
 *    the crash tests.  The process raises SIGKILL the COUNT-th time (1-based,
 *    counted over the process's life) global rank RANK ('*' or -1: any rank)
 *    reaches PHASE.  Save phases, in order: gate (after the quiescence check),
 *    begin (rank 0, after the pending row), chunk (after each tensor's chunks
 *    were put), sync (before the store flush), synced (after it), rows
 *    (after the rank handed its rows to rank 0: rows in flight), row (rank 0,
 *    after each tensor row inside the commit transaction), commit (rank 0,
 *    just before the commit transaction), committed (rank 0, just after it,
 *    before telling the others).  Replication phases (--ckpt-replicas, between
 *    synced and rows): replsend (a source sent a tensor to a target),
 *    replrecv (a target received one), replwrite (a target put its chunks),
 *    replsync (a target, before flushing the copies), replsynced (after it),
 *    replack (a source heard every target), memgc (a memory-tier target
 *    that learned of a commit, before it drops the replaced copy: after a
 *    synchronous save, or at the next boundary of async ones).  Restore
 *    phases: read (after each
 *    tensor was read and checked), serve (after a rank sent a tensor to the
 *    rank that loads it).
 *  - QE_CKPT_REPLICAS=R (--ckpt-replicas, default 0): each rank's chunks are
 *    also written into the stores of R ranks on other hosts before its rows
 *    reach rank 0, and the commit records every copy (ckpt_replica.c).
 *    Every rank must be given the same R; R above the number of other hosts
 *    is refused at the first save (or ckpt_replicas_prepare).  A restore
 *    reads a tensor from any copy a rank of the job sees, a memory-tier copy
 *    first.
 *  - QE_CKPT_MEMORY_DIR=MEM (--ckpt-memory): the memory tier; replica
 *    targets keep the latest committed checkpoint's copies in MEM too
 *    (ckpt_memtier.c).  Every command that reads stores (restore, verify,
 *    the jobs) also looks there.
 *  - QE_CKPT_REMOTE_ENDPOINT (resume --endpoint; else AWS_ENDPOINT_URL): the
 *    S3 server a restore fetches from when no rank reaches a tensor in any
 *    store or replica and the catalog records a pushed copy of the
 *    checkpoint (ckpt_restore_s3.c).  The persistent tier and retention
 *    while training are ckpt_persist.h's.
 */
#ifndef QE_CKPT_H
#define QE_CKPT_H

#include <stdint.h>

#include "catalog/catalog.h"
#include "runtime/exec/pstate.h"

typedef struct ckpt_session ckpt_session;

/*
 * Per-process checkpoint context: opens the rank's store on first use (so
 * after fork - never share a session across processes).  catalog is the
 * process's open catalog of the run on rank 0 (not owned; must outlive the
 * session) and NULL on every other rank.  Reads
 * QE_CKPT_CHUNK_BYTES and QE_CKPT_KILL (QE_EINVAL naming a malformed one).
 * *out is closed with ckpt_session_close (NULL is a no-op).
 */
int ckpt_session_open(const char *run_dir, const char *run_id, cat *catalog, ckpt_session **out);
void ckpt_session_close(ckpt_session *s);

typedef struct ckpt_result {
	int64_t id;
	int64_t step;
	int64_t e_w;
	uint64_t bytes;               /* all tensors of the checkpoint */
	uint64_t runtime_state_bytes; /* everything but parameters and moments */
	double ms;                    /* wall time of the call on this rank */
	/* A restore: the bytes this rank read from stores on its own host, by tier (the rest came over the
	 * comm or from S3).  Memory: the memory tier's stores (--ckpt-memory); disk: every other store. */
	uint64_t read_disk_bytes, read_memory_bytes;
} ckpt_result;

/*
 * Agree on replica targets now (collective over every rank): the ranks
 * exchange their hosts and --ckpt-replicas, so a bad replica count fails at
 * startup, naming the hosts, instead of at the first save.  Optional: the
 * first save does it otherwise.  Returns 0, QE_EINVAL, QE_ECOMM.
 */
int ckpt_replicas_prepare(ckpt_session *s, qe_rank *r);

/*
 * Take a checkpoint of the rank's current state (after step qe_pstate_steps_done).
 * Refused with QE_EPREMATURE naming what is pending on which rank when a rank
 * is not quiescent; nothing is written then.  Protocol: every rank checks the
 * gate and rank 0 gathers the answers; rank 0 adds a 'pending' row and sends
 * its id; every writing rank puts its items' chunks, syncs the store, then
 * adds its tensor rows in one catalog transaction and reports; rank 0 commits
 * (the single commit point) when every rank succeeded, else marks the
 * checkpoint aborted; every rank returns the same outcome.  A re-save at the
 * same step supersedes the earlier committed one (cat_ckpt_commit).
 * OUT *out (may be NULL): id, step, e_W, sizes (all ranks' totals) and this
 * rank's wall time.
 */
int ckpt_save(ckpt_session *s, qe_rank *r, ckpt_result *out);

/*
 * Restore the committed checkpoint at `step` (-1: the latest committed) into
 * the rank, then rebuild process-local state (qe_rank_pstate_loaded).  Every
 * rank reads and checks all of its items into host memory first (dtype,
 * shape and size against the rank's own: QE_EMISMATCH naming the tensor and
 * both shapes; every chunk re-hashed: QE_ECORRUPT naming tensor, stage and
 * chunk); only when every rank succeeded does any rank copy into its state,
 * so a failed restore leaves every rank as it was.  After a successful
 * restore rank 0 marks attempts left 'pending' by a crashed writer aborted.
 * OUT *out (may be NULL): the checkpoint restored.
 */
int ckpt_restore(ckpt_session *s, qe_rank *r, int64_t step, ckpt_result *out);

/*
 * Record a finished step in rank 0's catalog (collective): every rank hands
 * the trace's rows of the step as they are (runtime/exec/pstate.h; n may be
 * 0), rank 0 also the step's loss (may be NULL; other ranks' is ignored);
 * rank 0 receives every rank's rows on the comm's service lane and writes
 * them all as cat_trace rows in one transaction.  Data-parallel replicas hold
 * identical state, so replica 0 speaks for them: a rank of replica R > 0
 * sends no rows (still a message, so rank 0's wait is the same).  Other
 * ranks never wait.  The rows are not kept after the call.
 */
int ckpt_record_step(ckpt_session *s, qe_rank *r, const qe_trace_row *rows, size_t n, const cat_loss *loss);

/*
 * For a run that starts over (`qeffect train` again on a run directory that
 * never committed a checkpoint; rank 0 dropped the catalog's rows with
 * cat_run_restart under the writer lock): delete every chunk of this rank's
 * own store, STORES/rank-R on its own disk, where nothing is referenced any
 * more.  Each rank clears its own store: no rank assumes it sees another's.
 * A rank that never created its store has nothing to delete.  Not
 * collective.  OUT *chunks, *bytes (may be NULL): what was deleted.
 */
int ckpt_store_clear(ckpt_session *s, qe_rank *r, uint64_t *chunks, uint64_t *bytes);

/*
 * The rank's store, where one exists, belongs to this session's run; else
 * QE_EMISMATCH naming the rank, host, store and both runs.  A run calls it
 * when it opens, so a directory holding another run's stores (its catalog
 * deleted, or a --local-dir two runs share) fails before step 1, not at the
 * first checkpoint.
 */
int ckpt_store_check_owner(ckpt_session *s, qe_rank *r);

/*
 * Find the committed checkpoint of run_id a restore would load: the one at
 * `step`, or the latest committed when step < 0.  Not collective (the resume
 * command checks before it starts ranks; restore calls it on rank 0).
 * Fails with QE_ENOTFOUND listing the committed steps when there is none at
 * `step`, and QE_EMISMATCH when run_dir's store was written by another run
 * (a catalog copied from elsewhere).  Nothing is written.
 * OUT *out: released with cat_ckpt_release().
 */
int ckpt_find(const char *run_dir, cat *catalog, const char *run_id, int64_t step, cat_ckpt *out);

#endif
