/*
 * run.h - a run directory as the commands see it (its layout is ckpt/session/rundir.h's:
 * RUN/catalog.db on rank 0's host, a store per rank on each rank's own disk),
 * and the per-rank glue that runs the training loop with traces and
 * checkpoints going there.
 */
#ifndef CLI_RUN_H
#define CLI_RUN_H

#include "catalog/catalog.h"
#include "ckpt/session/rundir.h"
#include "runtime/job/config.h"
#include "runtime/train/train.h"

/*
 * Take the writer lock of RUN (creating the folder first when create), held
 * until ckpt_unlock: every command that writes a run holds it for the life
 * of the job; a second writer is refused at once (QE_EBUSY naming the holder).
 */
int cli_run_lock(const char *dir, const char *cmd, int create, ckpt_lock **out);
/*
 * Create RUN, its catalog, and the run row with cfg as JSON; call with RUN's
 * writer lock held.  A RUN that already holds a run with a committed
 * checkpoint is refused (QE_EEXIST: continue it with resume).  One whose run
 * never committed a checkpoint (a crash, or a failure before the first one)
 * starts over: same run id, its pending and aborted attempts, traces and
 * losses dropped (cat_run_restart), its configuration replaced; every rank
 * then clears its own store (job.restart, ckpt_store_clear).  OUT: run_id
 * (len >= 64), *dropped: -1 for a new run, else the attempts dropped.
 * Returns 0 or a QE_E* code with a message.
 */
int cli_run_create(const char *dir, const qe_train_config *cfg, char *run_id, int64_t *dropped);
/*
 * Open RUN through the one opener of a run directory (ckpt_run_open: its
 * catalog, read-write when writable, else read-only where the disk is, so
 * compare reads a run on a read-only disk; no stores) and read the run's
 * config into *cfg (when not NULL).  OUT *out: closed with ckpt_run_close();
 * NULL on failure.
 */
int cli_run_open(const char *dir, int writable, ckpt_run **out, qe_train_config *cfg);
/*
 * Without --local-dir (QE_LOCAL_DIR unset): the stores' folder the run in dir
 * recorded when it was trained with --local-dir, set for this process and the
 * ranks it starts, with a line saying so.  Nothing when the run recorded
 * none, or its catalog cannot be read (the command reports that itself).
 */
void cli_recall_local_dir(const char *dir);

/* What a rank process needs to run training. */
typedef struct cli_rank_job {
	qe_train_config cfg;
	char run_id[64];
	int quiet;
	int json;           /* each rank prints one JSON line of counters at the end */
	int log_json;       /* --log-format json: the progress and summary lines as JSON lines */
	int ckpt_on_signal; /* 1 (default): SIGTERM/SIGINT stop every rank after the step, with a checkpoint (preempt.h) */
	int no_trace;       /* no per-step fingerprints */
	int resume;         /* 1: restore from a checkpoint before the first step */
	int64_t from_step;  /* -1: the latest committed */
	int64_t until;      /* train until this many steps are done */
	int ckpt_async;     /* ckpt_async_mode: 0 synchronous checkpoints (ckpt/protocol/ckpt_async.h) */
	int restart;        /* 1: the run starts over: every rank clears its own store first (rank 0's word counts) */
	long sample_every;  /* --sample-every K: rank 0 prints a sample after every K-th step (train_sample.h); 0: never */
	long sample_tokens; /* tokens per sample */
	/* The training data, loaded (and so checked) by the command before anything went to disk;
	 * not owned, outlives the job.  NULL: each rank loads cfg.data itself. */
	const qe_data *data;
} cli_rank_job;

/* A job from the parsed train/resume flags: configuration, output switches, async mode;
 * resume, from_step (-1) and until (cfg.steps) for the caller to adjust. */
struct cli_train_args;
void cli_rank_job_init(cli_rank_job *job, const struct cli_train_args *a, int ckpt_async);

/*
 * The body of one rank process: communicator, backend, data, rank, optional
 * restore, training loop with traces/losses into the catalog and checkpoints
 * every cfg.ckpt_every steps.  Returns a process exit status (0 ok).
 */
int cli_rank_main(void *job);

/*
 * Whether a launcher placed this process as one rank of a job: torchrun's
 * RANK and WORLD_SIZE (as qeffect's own launcher sets them for its ranks),
 * a task of an srun step, or mpirun's (qe_dist_env_from_environ has the
 * order).  Such a process runs its own rank and forks none.  OUT: *rank
 * (may be NULL): its rank, or -1 when a variable is malformed, which still
 * counts as launched so that the rank's start reports the variable.
 */
int cli_launched(int *rank);

/*
 * The launch's own check, for a command to make before it writes anything:
 * --nproc (0: P x D) must be P x D unless an external launcher started this
 * process.  Returns 0, or 2 after printing a usage error naming the flags.
 */
int cli_run_nproc_check(const char *cmd, const qe_train_config *cfg, int nproc);

/*
 * Launch the job: in this process when the world is one rank or an external
 * launcher set RANK/WORLD_SIZE, else nproc forked local ranks.  Returns a
 * process exit status.
 */
int cli_run_job(const char *cmd, cli_rank_job *job, int nproc);

#endif
