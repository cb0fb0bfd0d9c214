/*
 * comm.h - rank processes talking over sockets: rendezvous, point-to-point
 * messages, deterministic host collectives, and the local launcher.
 *
 * Ranks are processes (DESIGN.md section 7).  They find each other through
 * the usual variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
 * so torchrun, srun or mpirun can start them as well as `qeffect --nproc N`.
 * Rank 0 listens on MASTER_ADDR:MASTER_PORT, gathers every rank's own
 * listening address, hands out the table, and the ranks build a full mesh of
 * TCP connections.  This is the cpu transport; on CUDA it also carries the
 * NCCL unique id (qe_comm_bcast_blob) and the checkpoint commit protocol.
 *
 * Semantics every caller relies on:
 *  - qe_comm_send is buffered: it copies the payload into a per-peer queue that
 *    a background thread writes out, so it never waits for the receiver to post
 *    the matching recv.  Messages from one rank to another arrive in order.
 *  - qe_comm_recv takes the next message from a peer and checks its tag and
 *    size; a mismatch is an error (the schedules must match exactly).
 *  - Collectives are deterministic: an all-reduce sums in group order on the
 *    group's first rank and broadcasts the bytes, so every member holds
 *    bitwise the same result.  Collectives travel in their own lane, so
 *    point-to-point messages still queued never confuse them.
 *  - A peer that dies (its process exits without qe_comm_close, or its
 *    connection is reset) fails every blocking call of every other rank with
 *    QE_ECOMM and a message naming the peer; every blocking call also has a
 *    timeout (qe_dist_env.timeout_ms, env QE_COMM_TIMEOUT_MS, default 600 s).
 *    Nothing ever hangs forever, and SIGPIPE is never raised.
 *  - Any failure (dead peer, timeout, tag or size mismatch) leaves the comm
 *    failed: every later call returns QE_ECOMM with the first cause.  The
 *    only thing left to do with it is qe_comm_close.  A failing rank also
 *    tells its peers why and closes its links, so one failure promptly fails
 *    every rank, each naming the root cause ("rank 1 failed: rank 2 closed
 *    its connection (process exited?)").
 *
 * A comm may be used from several threads (each call locks), but the order of
 * messages on a channel is then whatever order the threads made the calls in.
 *
 * Only the job's own ranks get in (rendezvous.c, auth.h):
 *  - rank 0 listens on MASTER_ADDR itself, or on QE_LISTEN_ADDR when set
 *    (QE_LISTEN_ADDR=0.0.0.0 asks for every interface); the other ranks on
 *    QE_LISTEN_ADDR or the address they reach rank 0 from.  A local job
 *    (MASTER_ADDR 127.0.0.1, as qe_launch_* sets) is on loopback only.
 *  - every connection proves, by HMAC-SHA256 challenge-response, that it
 *    knows the job secret (QE_JOB_SECRET, or the file QE_JOB_SECRET_FILE
 *    names); the secret never travels and never appears in a message.  A job
 *    without one warns once, or fails with QE_EINVAL under QE_REQUIRE_SECRET=1.
 *  - a connection that fails the check is dropped and logged with its
 *    address; it never takes a rank's place, and one that stalls holds only
 *    itself up (each handshake has its own time limit).
 */
#ifndef QE_COMM_H
#define QE_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define QE_DIST_ADDR_MAX 256
#define QE_DIST_RUN_ID_MAX 64
#define QE_COMM_DEFAULT_TIMEOUT_MS 600000
#define QE_COMM_DEFAULT_PORT 29500

/* Which launcher's variables placed this process (qe_dist_env.source). */
typedef enum qe_dist_source {
	QE_DIST_NONE = 0, /* none: a process of its own (qeffect may fork its ranks) */
	QE_DIST_TORCHRUN, /* RANK and WORLD_SIZE (torchrun, qeffect's own launcher, a script) */
	QE_DIST_SLURM,    /* a task of an srun step: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID */
	QE_DIST_OMPI,     /* mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK */
} qe_dist_source;

/* "none", "torchrun's RANK/WORLD_SIZE", "SLURM (SLURM_PROCID/SLURM_NTASKS)", ...: static text. */
const char *qe_dist_source_name(qe_dist_source s);

/* Where this process sits in the job.  Plain data; nothing to free. */
typedef struct qe_dist_env {
	int rank;                             /* RANK, default 0 */
	int world_size;                       /* WORLD_SIZE, default 1 */
	int local_rank;                       /* LOCAL_RANK, default 0 (picks the GPU) */
	char master_addr[QE_DIST_ADDR_MAX];   /* MASTER_ADDR, default 127.0.0.1 */
	int master_port;                      /* MASTER_PORT, default 29500 */
	/*
	 * QE_RUN_ID, default "qeffect": every handshake carries it, and rank 0
	 * refuses a process of another run that happens to reach its port.
	 * qe_launch_* gives each launch its own id.
	 */
	char run_id[QE_DIST_RUN_ID_MAX];
	int timeout_ms;                       /* QE_COMM_TIMEOUT_MS, default 600000 */
	qe_dist_source source;                /* whose variables these are */
	/* 1: the launcher says the ranks span several hosts, 0: one host, -1: it does not say */
	int multi_host;
	/* what master_addr and master_port came from, for messages ("MASTER_ADDR", "the first host of
	 * SLURM_JOB_NODELIST 'node[01-04]'", ...) */
	char master_from[QE_DIST_ADDR_MAX + 64];
} qe_dist_env;

/* The single-process job: rank 0 of 1 on 127.0.0.1:29500. */
void qe_dist_env_default(qe_dist_env *out);

/*
 * Fill OUT: *out from the launcher's variables as cli handed them
 * (launch_vars.h; the name keeps "environ" because that is where cli read
 * them).  The first launcher whose variables are present places the process (README, "Launchers"):
 *  1. torchrun's: RANK or WORLD_SIZE set (source QE_DIST_TORCHRUN when both
 *     are);
 *  2. SLURM's, for a task of an srun step (SLURM_PROCID and SLURM_STEP_ID
 *     set; a batch script's own SLURM_PROCID is not a rank): rank
 *     SLURM_PROCID, world SLURM_NTASKS, local rank SLURM_LOCALID; master the
 *     first host of SLURM_STEP_NODELIST, else of SLURM_JOB_NODELIST, else
 *     SLURM_LAUNCH_NODE_IPADDR; port 20000 + SLURM_JOB_ID mod 12000; run id
 *     "slurm-JOB.STEP".  A world of one is no job: source QE_DIST_NONE;
 *  3. Open MPI's: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK; Open MPI names
 *     no master, so a world above one needs MASTER_ADDR.  A world of one is
 *     no job, as for SLURM;
 * MASTER_ADDR and MASTER_PORT, when set, win over what SLURM gives.  Each
 * unset variable takes the default above.  Returns QE_EINVAL with a message
 * naming the variable and its value when one is malformed (not a decimal
 * integer, out of range, RANK not below WORLD_SIZE, empty or too long
 * strings, a host list qe_hostlist_host refuses while MASTER_ADDR is unset)
 * or when Open MPI placed the process without MASTER_ADDR; *out is then the
 * defaults.
 */
int qe_dist_env_from_environ(qe_dist_env *out);

/*
 * Host i (0-based) of a SLURM host list such as "node[01-04,07]",
 * "a1,b[2-3]" or "rack[1-2]-gpu[1-4]" (hostlist.c has the grammar; zero
 * padding is kept).  host (cap bytes) may be NULL when i < 0, which only
 * counts.  OUT: *count (may be NULL): the hosts the list names.  Returns 0,
 * or QE_EINVAL with a message quoting the list and the offset of what is
 * wrong (a malformed list, i past the end, a name longer than cap).
 */
int qe_hostlist_host(const char *list, long i, char *host, size_t cap, long *count);

typedef struct qe_comm qe_comm;

/*
 * Join the job described by env: rendezvous at env->master_addr:master_port,
 * then connect to every other rank.  Ranks other than 0 retry the connection
 * with backoff until rank 0 listens; rank 0 retries its bind if the port is
 * briefly taken (qe_launch picks a free port that could race).  The whole
 * rendezvous gives up after timeout_ms (<= 0: env->timeout_ms) and ends with
 * a barrier, so a successful open means every rank is connected.  A world of
 * one opens no sockets at all.
 *
 * OUT: *out, freed with qe_comm_close.  On failure *out is NULL and nothing
 * needs freeing.  Returns 0, QE_EINVAL (bad env, an unreadable or ambiguous
 * job secret, no secret under QE_REQUIRE_SECRET=1), QE_ENOMEM, QE_ECOMM
 * (refused by rank 0, a peer that does not prove the job secret, timed out,
 * a rank died, address not resolvable or not ours to listen on).
 */
int qe_comm_open(const qe_dist_env *env, int timeout_ms, qe_comm **out);

/*
 * Flush what was sent, tell the peers goodbye, wait briefly for theirs, stop
 * the background thread and close the sockets.  Safe on a failed comm (then
 * it does not wait) and on NULL.  A rank that exits without closing looks
 * dead to the others: their blocking calls fail.
 */
void qe_comm_close(qe_comm *c);

int qe_comm_rank(const qe_comm *c);
int qe_comm_world_size(const qe_comm *c);
/* The env the comm was opened with; valid until qe_comm_close. */
const qe_dist_env *qe_comm_env(const qe_comm *c);

/* Timeout of every later blocking call, in milliseconds (> 0). */
void qe_comm_set_timeout(qe_comm *c, int timeout_ms);

/* 1 when the comm has failed; its first cause is returned by qe_comm_failure. */
int qe_comm_failed(qe_comm *c);
/* Copy the first failure's cause (or "") into buf. Returns buf. */
const char *qe_comm_failure(qe_comm *c, char *buf, size_t len);

/*
 * Send n bytes of buf to peer with a caller-chosen tag.  The bytes are copied
 * before the call returns, so buf may be reused at once; the call never waits
 * for the receiver.  peer may be the caller's own rank (delivered locally).
 * Returns 0, QE_EINVAL (peer out of range), QE_ENOMEM, QE_ECOMM (failed comm).
 */
int qe_comm_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n);

/*
 * Wait for the next message from peer and copy it into buf.  It must carry
 * exactly `tag` and `n` bytes; otherwise QE_ECOMM with "rank R: expected tag
 * 0x.. (n bytes) from rank P, got tag 0x.. (m bytes)" and the comm fails.
 * Returns 0, QE_EINVAL, QE_ECOMM (mismatch, timeout, peer died or closed).
 */
int qe_comm_recv(qe_comm *c, int peer, uint32_t tag, void *buf, size_t n);

/*
 * The service lane: messages of the checkpoint service (rows and traces on
 * their way to rank 0, chunks of a restore), apart from training's
 * point-to-point messages and collectives.  A receive waits for the next
 * message from peer with exactly this tag and leaves messages of other tags
 * queued, so threads waiting for different tags never disturb each other.
 * Messages of one tag from one peer arrive in order.  Sends are buffered as
 * qe_comm_send's are.  OUT *out (malloc'd, never NULL on success, caller
 * frees) and *n.  Errors as qe_comm_send / qe_comm_recv.
 */
int qe_comm_svc_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n);
int qe_comm_svc_recv(qe_comm *c, int peer, uint32_t tag, void **out, size_t *n);

/* Wait until every queued send has been handed to the kernel. */
int qe_comm_flush(qe_comm *c);

/* Every rank waits until all ranks arrived. */
int qe_comm_barrier(qe_comm *c);

/*
 * In-place sum of n floats over the ranks in group[0..group_size) (NULL: all
 * ranks in rank order).  The result is (((x[g0] + x[g1]) + x[g2]) + ...)
 * computed on g0 and sent to every member, so it is bitwise identical on each
 * and equal to the serial sum in group order.  Every member calls it with
 * the same group and n; the caller must be a member.
 * Returns 0, QE_EINVAL (bad group), QE_ENOMEM, QE_ECOMM.
 */
int qe_comm_allreduce_sum_f32(qe_comm *c, float *buf, size_t n, const int *group, int group_size);

/* Copy n bytes of root's buf into buf on every rank (n must match everywhere). */
int qe_comm_bcast(qe_comm *c, int root, void *buf, size_t n);

/*
 * Rank 0 hands an opaque blob of any size to every rank (used for the NCCL
 * unique id).  blob/n are read on rank 0 and ignored elsewhere.
 * OUT: *out (malloc'd, never NULL even for n == 0, freed by the caller with
 * free()) and *out_n, on every rank including 0.
 */
int qe_comm_bcast_blob(qe_comm *c, const void *blob, size_t n, void **out, size_t *out_n);

/* One rank's contribution to a gather. */
typedef struct qe_comm_blob {
	void *data; /* malloc'd, never NULL */
	size_t size;
} qe_comm_blob;

/*
 * Every rank reports a small blob of any size; rank 0 receives them all (used
 * by the checkpoint commit: every rank reports, rank 0 decides).
 * OUT: *out on rank 0: an array of world_size blobs indexed by rank (its own
 * included), freed with qe_comm_blobs_free; NULL on other ranks.
 */
int qe_comm_gather_blobs(qe_comm *c, const void *blob, size_t n, qe_comm_blob **out);
void qe_comm_blobs_free(qe_comm_blob *blobs, int count);

/* ---- local launcher ---------------------------------------------------- */

#define QE_LAUNCH_MAX_PROCS 256

/*
 * A rank's exit status that means it stopped early on request (a signal; the
 * training ranks stop together at one step, cli/preempt.h), not that it
 * failed: the launcher does not stop the others for it.
 */
#define QE_LAUNCH_EXIT_STOPPED 75

typedef struct qe_launch_rank {
	pid_t pid;
	int exit_code;  /* exit status when it exited, else -1 */
	int signal;     /* signal that ended it, else 0 */
	int terminated; /* 1 when the launcher killed it after another rank failed */
} qe_launch_rank;

typedef struct qe_launch_result {
	int nproc;
	int first_failed; /* rank that failed first, -1 when all succeeded */
	qe_launch_rank ranks[QE_LAUNCH_MAX_PROCS];
} qe_launch_result;

/*
 * Fork nproc rank processes on this machine.  Each child gets RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (master_addr; NULL
 * means 127.0.0.1), MASTER_PORT (master_port_or_0, or a free port picked by
 * binding port 0 when 0), QE_RUN_ID (kept when set, else fresh per launch)
 * and QE_JOB_SECRET (unless QE_JOB_SECRET or QE_JOB_SECRET_FILE is set: then
 * the children inherit the caller's; else 64 random hex characters, fresh per
 * launch, never logged; the caller's own environment is not changed)
 * in its environment, runs rank_main(arg), flushes stdio and _exits with its
 * return value (0..255; anything else becomes 1).  Exiting in the child is the
 * launcher's business: the children are copies of the calling process; the
 * calling (parent) process itself never exits here.  Children die with the
 * parent (PR_SET_PDEATHSIG).  Call it before starting threads: the child of a
 * threaded process may only run async-signal-safe code.
 *
 * The parent waits for all children.  When one fails (a signal, or a status
 * other than 0 and QE_LAUNCH_EXIT_STOPPED), the others get SIGTERM, then
 * SIGKILL after a grace period (QE_LAUNCH_GRACE_MS, default 3000).  While it
 * waits, the first SIGTERM or SIGINT to the parent goes on to every running
 * child as SIGTERM, and a later one as SIGKILL; each child runs in its own
 * process group, so a terminal's Ctrl-C reaches the parent alone.  OUT: *out has every rank's status.
 * Returns 0 when all succeeded; QE_ECOMM naming the first failing rank and how
 * it ended; QE_EINVAL (nproc out of 1..QE_LAUNCH_MAX_PROCS); QE_EIO (fork).
 */
int qe_launch_local(int nproc, int (*rank_main)(void *arg), void *arg, const char *master_addr,
		    int master_port_or_0, qe_launch_result *out);

/*
 * Same, but each child execs argv (argv[0] searched in PATH; NULL-terminated)
 * with the rank variables added to its environment (for `qeffect train
 * --nproc N` re-running itself).  An exec failure ends the child with 127.
 */
int qe_launch_exec(int nproc, char *const argv[], const char *master_addr, int master_port_or_0,
		   qe_launch_result *out);

/*
 * OUT: *port, a TCP port free right now on master_addr's family (NULL:
 * 127.0.0.1), found by binding port 0.  Someone may take it before it is
 * used; rank 0 retries its bind for that reason.  Returns 0 or QE_ECOMM.
 */
int qe_comm_free_port(const char *master_addr, int *port);

#endif
