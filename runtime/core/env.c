/*
 * env.c - the table of environment variables and the only getenv and setenv
 * of the program (env.h).
 */
#define _GNU_SOURCE
#include "runtime/core/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"

/* clang-format off */
const qe_env_var qe_env_vars[] = {
	/* launchers (torchrun's names; set by qeffect's own launcher for its ranks) */
	{ "RANK", "this process's rank (an external launcher's; --nproc sets it for its ranks)" },
	{ "WORLD_SIZE", "the number of ranks" },
	{ "LOCAL_RANK", "the rank's index on its host (picks the GPU)" },
	{ "LOCAL_WORLD_SIZE", "ranks on this host (set for qeffect's own ranks)" },
	{ "MASTER_ADDR", "rank 0's address for the rendezvous (default 127.0.0.1; wins over SLURM's)" },
	{ "MASTER_PORT", "rank 0's rendezvous port (default 29500; wins over SLURM's)" },
	{ "QE_RUN_ID", "the job's id, handed from the launcher to its ranks" },
	/* SLURM (srun's tasks) and Open MPI (mpirun), read when RANK and WORLD_SIZE are unset (README, "Launchers") */
	{ "SLURM_PROCID", "srun: this task's rank (read when RANK is unset)" },
	{ "SLURM_STEP_ID", "srun: the step; only a task of a step is a rank (a batch script's SLURM_PROCID is not)" },
	{ "SLURM_NTASKS", "srun: the number of ranks" },
	{ "SLURM_LOCALID", "srun: the rank's index on its node" },
	{ "SLURM_STEP_NODELIST", "srun: the step's nodes; rank 0's host is the first (node[01-04,07] expanded)" },
	{ "SLURM_JOB_NODELIST", "the job's nodes, when SLURM_STEP_NODELIST is unset" },
	{ "SLURM_LAUNCH_NODE_IPADDR", "the host srun ran on: rank 0's address only when no node list is set" },
	{ "SLURM_JOB_ID", "the job: the rendezvous port is 20000 + SLURM_JOB_ID mod 12000 unless MASTER_PORT is set" },
	{ "OMPI_COMM_WORLD_RANK", "mpirun: this process's rank (read when RANK and SLURM_PROCID are unset)" },
	{ "OMPI_COMM_WORLD_SIZE", "mpirun: the number of ranks (MASTER_ADDR must name rank 0's host)" },
	{ "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun: the rank's index on its host" },
	{ "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun: ranks on this host" },

	{ "QE_JOB_SECRET", "the job's shared secret: every rank authenticates its peers with it" },
	{ "QE_JOB_SECRET_FILE", "a file holding the job's secret (instead of QE_JOB_SECRET)" },
	{ "QE_REQUIRE_SECRET", "1: refuse to run a job without a secret" },
	{ "QE_LISTEN_ADDR", "the address rank 0 listens on (default: MASTER_ADDR's; 0.0.0.0 for every interface)" },
	{ "QE_COMM_TIMEOUT_MS", "how long any wait on a peer may last" },
	{ "QE_LAUNCH_GRACE_MS", "how long the launcher waits for the other ranks after one failed before it stops them" },
	{ "QE_P2P", "host|device: the path of pipeline messages (cpu: host unless device is asked for)" },
	{ "NCCL_NVLS_ENABLE", "NCCL's NVLink multicast; qeffect sets 0 unless the user set it (GPU.md)" },
	/* runs */
	{ "QE_LOCAL_DIR", "node-local folder of the stores (the default of --local-dir)" },
	{ "QE_CKPT_MEMORY_DIR", "tmpfs folder of the memory tier (the default of --ckpt-memory)" },
	{ "QE_ALLOW_NETWORK_FS", "1: accept stores and catalogs on network filesystems (--allow-network-fs)" },
	{ "QE_CKPT_REPLICAS", "peer copies of every checkpoint tensor (the default of --ckpt-replicas)" },
	{ "QE_CKPT_KEEP", "local checkpoints kept (the default of --ckpt-keep)" },
	{ "QE_CKPT_KEEP_GRACE_S", "local retention leaves unreferenced chunks younger than this (default 600)" },
	{ "QE_CKPT_PERSIST_EVERY", "push every Nth step's checkpoint to S3 (the default of --ckpt-persist-every)" },
	{ "QE_CKPT_PERSIST_KEEP", "pushed checkpoints kept on S3 (the default of --ckpt-persist-keep)" },
	{ "QE_CKPT_PERSIST_GRACE_S", "remote retention leaves chunks younger than this (default 600)" },
	{ "QE_CKPT_REMOTE", "s3://BUCKET/PREFIX of the persistent tier (the default of --remote)" },
	{ "QE_CKPT_REMOTE_ENDPOINT", "the S3 endpoint URL (the default of --endpoint)" },
	{ "QE_CKPT_CHUNK_BYTES", "store chunk size in bytes" },
	{ "QE_CKPT_PIECE_BYTES", "bytes a checkpoint moves off the device at a time (the pipeline's piece)" },
	{ "QE_CKPT_STAGING", "device: restore and save pass through device staging buffers" },
	{ "QE_CKPT_LOAD_THREADS", "threads that read a restore's pieces" },
	{ "QE_CKPT_LOAD_PIECE_BYTES", "bytes a restore reads at a time" },
	{ "QE_CKPT_READ_AHEAD_MIB", "how far a restore reads ahead of the loads (MiB)" },
	{ "QE_PROFILE", "1: each rank logs the wall time of each action kind at exit" },
	{ "QE_FLASH_ROWS", "128: the TF32 flash kernels' blocks of 128 rows (default 64)" },
	{ "QE_SHARED_DIR", "the shared data folder (default: the build's)" },
	{ "QE_GPT2_ENCODER_DIR", "GPT-2's encoder folder for tokenize (encoder.json, vocab.bpe)" },
	{ "QE_GNUPLOT", "the gnuplot program plot uses" },
	{ "PATH", "where plot looks for gnuplot" },
	{ "TMPDIR", "where plot writes its temporary files" },
	/* S3 */
	{ "AWS_ACCESS_KEY_ID", "S3 access key id" },
	{ "AWS_SECRET_ACCESS_KEY", "S3 secret key" },
	{ "AWS_SESSION_TOKEN", "S3 session token (temporary credentials)" },
	{ "AWS_REGION", "S3 region (default us-east-1)" },
	{ "AWS_DEFAULT_REGION", "S3 region when AWS_REGION is unset" },
	{ "AWS_ENDPOINT_URL_S3", "S3 endpoint when --endpoint is not given" },
	{ "AWS_ENDPOINT_URL", "S3 endpoint when neither --endpoint nor AWS_ENDPOINT_URL_S3 is given" },
	{ "QE_S3_RETRIES", "retries of a transient S3 failure (default 4)" },
	{ "QE_S3_BACKOFF_MS", "first retry's wait, doubling (default 200)" },
	{ "QE_S3_RETRY_BUDGET_S", "a request and its retries end within this (default 150)" },
	{ "QE_S3_CONNECT_TIMEOUT_S", "connection time-out (default 10)" },
	{ "QE_S3_LOW_SPEED_S", "a request slower than QE_S3_LOW_SPEED_BPS for this long fails (default 30)" },
	{ "QE_S3_LOW_SPEED_BPS", "the low-speed limit in bytes/s (default 65536)" },
	{ "QE_S3_TIMEOUT_S", "every request's deadline: this plus its bytes at QE_S3_MIN_RATE (default 60)" },
	{ "QE_S3_MIN_RATE", "the deadline's rate in bytes/s (default 65536)" },
	{ "QE_S3_MULTIPART_BYTES", "objects larger than this upload in parts (default 64 MiB)" },
	{ "QE_S3_PART_BYTES", "a multipart upload's part size (default 16 MiB)" },
	/* test hooks */
	{ "QE_FAULT", "test hook: KIND:N,... fail the Nth call of a kind (fault.h)" },
	{ "QE_FAULT_COUNT", "test hook: 1 prints each process's calls per fault kind at exit" },
	{ "QE_CKPT_KILL", "test hook: PHASE:RANK:COUNT, a rank dies at a checkpoint phase (ckpt.h)" },
	{ "QE_JOB_KILL", "test hook: OP:RANK, a store job's rank dies on receiving task OP (ckpt_job.h)" },
	{ "QE_CKPT_ASYNC_TEST_DELAY_MS", "test hook: an async checkpoint's write waits this long" },
	{ "QE_CKPT_PERSIST_SLOW_MS", "test hook: N[:RANK], a background push sleeps before each chunk" },
	{ "QE_CKPT_PERSIST_PAUSE", "test hook: STEP:FILE, a background push waits for FILE to go before its manifest" },
	{ "QE_REMOTE_PAUSE", "test hook: a push or pull waits at a named point (ckpt_remote.c)" },
	{ "QE_LINK_TEST_CONNECT_DELAY_MS", "test hook: the cpu device links wait before connecting" },
};
/* clang-format on */
const int qe_env_nvars = (int)(sizeof(qe_env_vars) / sizeof(qe_env_vars[0]));

static int listed(const char *name)
{
	for (int i = 0; name && i < qe_env_nvars; i++)
		if (!strcmp(qe_env_vars[i].name, name))
			return 1;
	return 0;
}

const char *qe_env(const char *name)
{
	if (!listed(name)) {
		qe_log(QE_LOG_ERROR, "environment variable '%s' is read but not listed in runtime/core/env.c",
		       name ? name : "(null)");
		return NULL;
	}
	return getenv(name);
}

int qe_env_set(const char *name, const char *value, int overwrite)
{
	if (!listed(name)) {
		qe_log(QE_LOG_ERROR, "environment variable '%s' is set but not listed in runtime/core/env.c",
		       name ? name : "(null)");
		errno = EINVAL;
		return -1;
	}
	return setenv(name, value, overwrite);
}
