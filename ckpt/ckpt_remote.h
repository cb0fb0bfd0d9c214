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

#endif
