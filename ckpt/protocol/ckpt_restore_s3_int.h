/*
 * ckpt_restore_s3_int.h - restore from a pushed copy (ckpt_restore_s3.c, its
 * one owner): restore's last source, called by ckpt_restore.c.  Not public.
 */
#ifndef QE_CKPT_RESTORE_S3_INT_H
#define QE_CKPT_RESTORE_S3_INT_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/session/ckpt_int.h"
#include "store/remote.h"

/* A plan's source for a row that the loading rank fetches from S3 itself. */
#define CKPT_SRC_S3 (-2)

/*
 * Rank 0: whether the checkpoint's pushed copy (remotes: its catalog rows)
 * can serve a restore: the base URL s3://BUCKET/PREFIX of the first copy
 * whose manifest the server has (endpoint: QE_CKPT_REMOTE_ENDPOINT, else
 * AWS_ENDPOINT_URL).  OUT base; on failure err says what S3 answered.
 */
int ckpt__s3_probe(const cat_remote_rows *remotes, char *base, size_t blen, char *err, size_t elen);
/*
 * Read row t's chunks from base (opening *rem on first use; the caller
 * closes it), each re-hashed against its name, into dst (t->bytes).
 */
int ckpt__s3_read_row(ckpt_session *s, const char *base, store_remote **rem, const cat_tensor *t, void *dst,
		      int64_t step);

#endif
