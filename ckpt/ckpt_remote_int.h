/*
 * ckpt_remote_int.h - what push (ckpt_remote.c), pull (ckpt_remote_pull.c)
 * and the manifest code (ckpt_remote_manifest.c) share.  Not public.
 */
#ifndef QE_CKPT_REMOTE_INT_H
#define QE_CKPT_REMOTE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/ckpt_remote.h"
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
/* "s3://BUCKET/PREFIX/" + key */
void ckpt__remote_object_url(const char *url, const char *key, char *buf, size_t len);
/* XXH3-128 of the bytes as 32 hex digits. */
void ckpt__manifest_hash(const void *data, size_t len, char out[33]);

/* A run id we accept in object keys and file names: 1..63 of [A-Za-z0-9._-]. */
int ckpt__valid_run_id(const char *id);

/* Distinct chunks (hash order) of a tensor list.  OUT *out (malloc'd), *n. */
int ckpt__distinct_chunks(const cat_tensor_rows *t, cat_chunk **out, size_t *n);

double ckpt__remote_now_ms(void);

#endif
