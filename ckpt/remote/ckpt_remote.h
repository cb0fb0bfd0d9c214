/*
 * ckpt_remote.h - replication of committed checkpoints to S3-compatible
 * object storage and back (DESIGN.md section 8): `qeffect push`, `qeffect
 * pull` and `qeffect resume --remote` are thin wrappers over these calls.
 *
 * Layout under s3://BUCKET/PREFIX:
 *   chunks/<32 hex digits>                   one store chunk, named by its XXH3-128
 *                                            content hash (shared by every run and step
 *                                            pushed there: identical chunks go up once)
 *   checkpoints/<run id>/<step>/manifest.json
 *                                            what the checkpoint is: run id, step, e_W,
 *                                            the run's configuration, shards, and every
 *                                            tensor's catalog row with its chunk list
 *                                            and the store that held it
 *
 * The manifest is written last: its presence is the remote commit.  A push
 * that fails part way (server gone, credentials refused) leaves chunks but
 * no manifest, so nothing half-written is ever pulled; pushing again skips
 * the chunks already there (HEAD says present with the right size) and
 * finishes.  A pull re-hashes every chunk it downloads and refuses one that
 * does not match its name, so a damaged or foreign object never enters the
 * local store.
 *
 * Both directions record the copy in the catalog (cat_remote_add) with the
 * manifest's URL and the XXH3-128 of its bytes.
 *
 * Test hook (like QE_CKPT_KILL): QE_REMOTE_PAUSE=N:FILE makes a push stop
 * after its N-th chunk upload, create FILE and wait (up to 120 s) until FILE
 * is removed, so a test can stop the server at a known point.
 *
 * Nothing here exits or prints except through qe_log.  Errors: those of
 * store/remote.h (QE_EIO, QE_ESTORE, QE_ENOTFOUND), QE_ECORRUPT for a
 * manifest or chunk that does not check out, QE_EMISMATCH for a run
 * directory that holds another run, and the catalog's and store's codes.
 */
#ifndef QE_CKPT_REMOTE_H
#define QE_CKPT_REMOTE_H

#include <stdint.h>

#include "ckpt/query/ckpt_job.h"
#include "ckpt/query/ckpt_query.h"
#include "store/remote.h"

#define CKPT_MANIFEST_FORMAT "qeffect-checkpoint-manifest"
#define CKPT_MANIFEST_VERSION 1

/* Which checkpoints a push sends. */
#define CKPT_PUSH_LATEST (-1)
#define CKPT_PUSH_ALL (-2)

typedef struct ckpt_push_result {
	char run_id[64];
	int64_t step;
	int64_t ckpt_id;            /* in the local catalog */
	uint64_t bytes;             /* the checkpoint's tensor bytes */
	uint64_t chunks;            /* distinct chunks it references */
	uint64_t chunks_uploaded;
	uint64_t chunks_present;    /* already on the remote (skipped) */
	uint64_t bytes_uploaded;    /* chunk bytes sent */
	char manifest_url[1400];    /* s3://BUCKET/PREFIX/checkpoints/RUN/STEP/manifest.json */
	char manifest_hash[33];
	double ms;
} ckpt_push_result;

/* Called after each checkpoint is pushed (committed remotely); non-zero stops. */
typedef int (*ckpt_push_cb)(void *ctx, const ckpt_push_result *res);

/*
 * Push committed checkpoints of the run in run_dir to url (s3://BUCKET/PREFIX):
 * step >= 0 that one, CKPT_PUSH_LATEST the latest committed, CKPT_PUSH_ALL
 * every committed one (oldest first).  ro may be NULL (environment
 * defaults).  cb (may be NULL) hears each one pushed.  Fails before sending
 * anything when there is no such checkpoint or the remote refuses a first
 * cheap request; on a later failure the checkpoints already pushed stay
 * committed remotely and recorded locally.
 */
int ckpt_remote_push(const char *run_dir, const char *url, const store_remote_opts *ro, int64_t step,
		     ckpt_push_cb cb, void *ctx);

typedef struct ckpt_pull_result {
	char run_id[64];
	int64_t step;
	int64_t e_w;
	int64_t ckpt_id;          /* in the local catalog */
	int created;              /* 1: the run directory's catalog was created by this pull */
	int up_to_date;           /* 1: the same checkpoint was already committed here; nothing changed */
	uint64_t bytes;
	uint64_t chunks;
	uint64_t chunks_fetched;
	uint64_t chunks_present;  /* already in the local store */
	uint64_t bytes_fetched;
	char manifest_url[1400];
	char manifest_hash[33];
	double ms;
} ckpt_pull_result;

/*
 * Pull a checkpoint from url into run_dir: create the directory, its catalog
 * (with the run row from the manifest's configuration, run_dir rewritten)
 * and store when absent - or add to them when run_dir already holds the same
 * run - fetch only the chunks the local store lacks (each re-hashed), then
 * insert the checkpoint and commit it locally.  run_id NULL: the run of
 * run_dir when it has one, else the only run under the prefix (QE_EINVAL
 * listing them when there are several).  step < 0: the latest with a
 * manifest.  After a failure nothing is committed locally (fetched chunks
 * stay for a retry or gc).  OUT *out (may be NULL).
 */
int ckpt_remote_pull(const char *run_dir, const char *url, const store_remote_opts *ro, const char *run_id,
		     int64_t step, ckpt_pull_result *out);

/* --- retention on the remote (`qeffect gc --remote`, ckpt_remote_gc.c) --------------- */

typedef struct ckpt_remote_gc_item {
	char run_id[64];
	int64_t step;
	uint64_t bytes;          /* the checkpoint's tensor bytes (from its manifest) */
	uint64_t manifest_bytes; /* the manifest object's size */
	int drop;                /* 1: manifest deleted (or would be, for a dry run) */
	int catalog_rows;        /* rows of the local catalog recording this copy, dropped (or would be) */
	char why[96];            /* why kept or dropped */
} ckpt_remote_gc_item;

typedef struct ckpt_remote_gc_report {
	size_t n;
	ckpt_remote_gc_item *items;  /* every manifest found, by run id then step */
	uint64_t runs;               /* distinct runs under the prefix */
	uint64_t kept, dropped;      /* manifests */
	uint64_t dropped_bytes;      /* logical bytes of the dropped checkpoints */
	size_t n_missing_pins;
	int64_t *missing_pins;       /* pinned steps that no considered run has */
	uint64_t manifests_late;     /* manifests that appeared while gc ran (a push finished): kept */
	uint64_t chunks_listed;      /* objects chunks/<32 hex> */
	uint64_t chunks_referenced;  /* distinct chunks the remaining manifests list */
	uint64_t chunks_missing;     /* referenced but not listed: that checkpoint cannot be pulled */
	uint64_t chunks_deleted;     /* unreferenced and older than the grace (or would be) */
	uint64_t chunk_bytes_deleted;
	uint64_t chunks_young;       /* unreferenced but younger than the grace: left */
	uint64_t young_bytes;
	uint64_t manifest_bytes_deleted;
	uint64_t bytes_reclaimed;    /* chunk + manifest bytes deleted (or that would be) */
	uint64_t foreign;            /* other objects under the prefix: never touched */
	uint64_t catalog_rows;       /* local remote-copy rows dropped (or that would be) */
	uint64_t requests;           /* HTTP requests sent */
	double ms;
} ckpt_remote_gc_report;

/*
 * Retention on s3://BUCKET/PREFIX with the policy of local gc
 * (ckpt_gc_policy, decided by the same function): per run under the prefix
 * (or only run_id when not NULL), keep the keep_last latest manifests, steps
 * that are multiples of keep_every and pinned steps; delete the other
 * manifests.  Then delete every chunks/<hash> object that no remaining
 * manifest (of any run under the prefix) lists and whose LastModified is at
 * least grace_s seconds old: a push in progress uploads its chunks before its
 * manifest, and those are young.  p->now (0: time(NULL)) is compared with the
 * server's LastModified, so clocks must agree to within the grace.
 *
 * Order, for crash safety: every manifest is read and checked before anything
 * is deleted (an unreadable one stops gc: its chunks are unknown); dropped
 * manifests go first, so no remaining manifest ever points at a deleted
 * chunk; the keep set is then taken from a fresh listing of the manifests
 * (one committed by a push meanwhile keeps its chunks); chunks go last.  A
 * failure or crash part way leaves orphan chunks at worst, which the next gc
 * collects.  Limitation: a push that only re-uses chunks already on the
 * remote (no upload, so no young LastModified) racing with a gc that finds
 * those chunks unreferenced can lose them; do not gc a prefix while pushing
 * a checkpoint whose chunks a dropped one was the last to list.
 *
 * run_dir (may be NULL): a local run directory whose catalog forgets the
 * remote copies (cat_remote_delete) of the manifests dropped for its run.
 * p->dry_run: decide and count, delete nothing.  QE_EINVAL for a bad policy;
 * the client's errors; QE_ECORRUPT naming an unreadable manifest.
 * OUT *out: freed with ckpt_remote_gc_report_free(); filled as far as it got.
 */
int ckpt_remote_gc(const char *url, const store_remote_opts *ro, const char *run_dir, const char *run_id,
		   const ckpt_gc_policy *p, ckpt_remote_gc_report *out);
void ckpt_remote_gc_report_free(ckpt_remote_gc_report *g);

/* --- push and pull as jobs over the ranks that hold the stores (ckpt_job_push.c, ckpt_job_pull.c) --- */

/*
 * push: per checkpoint (as ckpt_remote_push chooses them), rank 0 gives every
 * distinct chunk to one rank whose store holds it; the ranks upload in
 * parallel (HEAD first; read through their store, so re-hashed); then rank 0
 * writes the manifest - the remote commit - and records the copy.  A chunk
 * no rank can read fails the push before its manifest, naming the store's
 * rank and host.  cb as ckpt_remote_push's (rank 0).
 */
int ckpt_job_push(qe_comm *comm, const char *run_dir, const char *url, const store_remote_opts *ro, int64_t step,
		  ckpt_push_cb cb, void *ctx, ckpt_job_report *where);

/*
 * pull: rank 0 fetches and checks the manifest and opens (or creates) the
 * catalog; every tensor goes to the rank that saved its stage (the manifest's
 * shards; modulo the job's size), which fetches into its own store
 * STORES/rank-R on its host what no store there holds, each chunk re-hashed,
 * and syncs; then rank 0 inserts the rows, naming those stores, and commits.
 * Arguments and *out as ckpt_remote_pull's (rank 0).
 */
int ckpt_job_pull(qe_comm *comm, const char *run_dir, const char *url, const store_remote_opts *ro,
		  const char *run_id, int64_t step, ckpt_pull_result *out, ckpt_job_report *where);

#endif
