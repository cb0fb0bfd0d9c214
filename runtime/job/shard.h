/*
 * shard.h - writing llm.c token shards: a 256 x int32 little-endian header
 * (header[0] = 20240520 magic, header[1] = 1 version, header[2] = token
 * count, the rest 0), then the tokens as little-endian uint16.
 * runtime/job/data.c reads them.
 *
 * A shard is written the durable way, in two steps so that a command writing
 * several can make all of them complete before showing any: tokens stream into
 * PATH.tmp.PID; qe_shard_finish writes the header and fsyncs; qe_shard_publish
 * renames the temp file onto PATH and fsyncs the folder.  Until publish, PATH
 * is untouched; qe_shard_abort removes the temp file.  A crash leaves at most
 * a stray PATH.tmp.PID, never a half shard at PATH.
 */
#ifndef QE_SHARD_H
#define QE_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define QE_SHARD_MAGIC 20240520
#define QE_SHARD_VERSION 1
#define QE_SHARD_HEADER_INTS 256

typedef struct qe_shard_writer {
	FILE *f;          /* the temp file while open; NULL after finish or abort */
	char path[4096];  /* where publish puts it */
	char tmp[4200];   /* the temp file; "" once published or removed */
	int64_t ntokens;  /* appended so far */
	int max_token;    /* largest appended, -1 when none */
} qe_shard_writer;

/*
 * Start a shard for path: create the temp file beside it.  Codes: QE_EIO
 * (the message names the temp path), QE_EINVAL (path too long).  On failure
 * nothing exists and w needs no abort (abort is harmless).
 */
int qe_shard_create(qe_shard_writer *w, const char *path);
/*
 * Append n tokens.  Codes: QE_EINVAL (a token outside 0..65535, or the count
 * past the header's int32: the message names the token), QE_EIO.  After a
 * failure call qe_shard_abort.
 */
int qe_shard_append(qe_shard_writer *w, const int32_t *tok, size_t n);
/* Write the header, flush, fsync and close the temp file.  Codes: QE_EIO.  After a failure call abort. */
int qe_shard_finish(qe_shard_writer *w);
/* Rename the finished temp file onto path and fsync the folder.  Codes: QE_EIO (temp removed). */
int qe_shard_publish(qe_shard_writer *w);
/* Close and remove the temp file if there is one.  Safe on a zeroed, published or aborted writer. */
void qe_shard_abort(qe_shard_writer *w);

#endif
