/*
 * ckpt_remote_int.h - what push (ckpt_remote.c), pull (ckpt_remote_pull.c)
 * and the manifest code (ckpt_remote_manifest.c) share.  Not public.
 */
#ifndef QE_CKPT_REMOTE_INT_H
#define QE_CKPT_REMOTE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/remote/ckpt_remote.h"
#include "store/store.h"

/* A checkpoint as a manifest describes it.  Strings and rows are owned (ckpt__manifest_release). */
typedef struct ckpt_manifest {
	char *run_id;
	int64_t step;
	int64_t e_w;
	char *created;
	char *committed_at;
	char *topology;
	char *schedule;
	char *recipe;
	uint64_t bytes;
	uint64_t runtime_state_bytes;
	char *config_json; /* the run's configuration, compact JSON */
	cat_shard_rows shards;
	cat_tensor_rows tensors; /* freed with cat_tensor_rows_free */
} ckpt_manifest;

/*
 * The manifest of a committed checkpoint as JSON text (keys sorted, so the
 * same checkpoint always gives the same bytes and the same manifest hash).
 * OUT *text: malloc'd, caller frees.
 */
int ckpt__manifest_build(const cat_ckpt *ck, const char *config_json, const cat_shard_rows *shards,
			 const cat_tensor_rows *tensors, char **text);
/*
 * Parse and check a manifest (format, version, every field's type, chunk
 * sizes adding up to each tensor's bytes).  where names it in messages.
 * QE_ECORRUPT naming what is wrong; QE_EUNSUPPORTED for a newer version.
 */
int ckpt__manifest_parse(const char *text, size_t len, const char *where, ckpt_manifest *out);
void ckpt__manifest_release(ckpt_manifest *m);

/* "checkpoints/RUN/STEP/manifest.json" */
int ckpt__manifest_key(const char *run_id, int64_t step, char *buf, size_t len);
/* "chunks/<32 hex>" */
void ckpt__chunk_key(const unsigned char hash[16], char *buf, size_t len);

/*
 * Uploading chunks (ckpt_remote_upload.c): rem is the caller's open remote;
 * buf grows to the largest chunk read and is freed by ckpt__uploader_release;
 * the counters add up what each ckpt__upload_chunk did.
 */
typedef struct ckpt__uploader {
	store_remote *rem;
	unsigned char *buf;
	size_t cap;
	uint64_t uploaded, present, bytes;
} ckpt__uploader;

/* Reads chunk h (re-hashed) into dst: store_get_chunk and ckpt_storeset_get_chunk fit this. */
typedef int (*ckpt__chunk_read_fn)(void *ctx, const store_hash *h, void *dst, size_t cap, uint64_t *size);

/*
 * The chunk of `hash` and `size` to the remote unless an object of that key
 * and size is there (counted as present); else read through read(ctx),
 * checked against size and PUT (counted as uploaded).  `where` names the
 * store in errors.  Errors: the remote's, read's (with the chunk and where),
 * QE_ECORRUPT for a size that differs from the catalog's, QE_ENOMEM.
 */
int ckpt__upload_chunk(ckpt__uploader *u, const unsigned char hash[16], uint64_t size, ckpt__chunk_read_fn read,
		       void *ctx, const char *where);
void ckpt__uploader_release(ckpt__uploader *u);
/* "s3://BUCKET/PREFIX/" + key */
void ckpt__remote_object_url(const char *url, const char *key, char *buf, size_t len);
/* XXH3-128 of the bytes as 32 hex digits. */
void ckpt__manifest_hash(const void *data, size_t len, char out[33]);
/*
 * The remote commit: the manifest PUT (whose answer must carry the MD5 of its
 * bytes as ETag: store_remote_put), then read back and compared byte for
 * byte, so a server that answers 200 without storing it makes the push
 * fail before the catalog records a remote copy that does not exist.
 */
int ckpt__manifest_put(store_remote *rem, const char *key, const char *text, size_t len);

/* A run id we accept in object keys and file names: 1..63 of [A-Za-z0-9._-]. */
int ckpt__valid_run_id(const char *id);

/* Distinct chunks (hash order) of a tensor list.  OUT *out (malloc'd), *n. */
int ckpt__distinct_chunks(const cat_tensor_rows *t, cat_chunk **out, size_t *n);

double ckpt__remote_now_ms(void);

/*
 * For the distributed pull (ckpt_job_pull.c), from ckpt_remote_pull.c: find
 * (want_run "" or NULL: the only run under url; step < 0: its latest), fetch
 * and check a manifest (OUT *m, released with ckpt__manifest_release; its URL
 * and hash); open or create the run directory's catalog for m's run; whether
 * the same checkpoint from the same manifest is already committed there.
 */
int ckpt__pull_manifest(store_remote *rem, const char *url, const char *want_run, int64_t step, ckpt_manifest *m,
			char *manifest_url, size_t url_len, char hash[33]);
int ckpt__pull_open_local(const char *run_dir, const ckpt_manifest *m, cat **c, int *created);
int ckpt__pull_already_here(cat *c, const ckpt_manifest *m, const char *url, const char *hash, int64_t *id);

#endif
