/*
 * ckpt_report_int.h - reports (ckpt_report.c, their one owner): what a rank
 * tells rank 0 about its part of a checkpoint, rank 0's single commit
 * transaction, and tensor rows as bytes.  Used by the saves (ckpt_save.c,
 * ckpt_async.c) and by restore (ckpt_restore.c sends the rows).  Not public.
 */
#ifndef QE_CKPT_REPORT_INT_H
#define QE_CKPT_REPORT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/session/ckpt_int.h"
#include "runtime/exec/pstate.h"
#include "store/store.h"

/* Persistent state other than parameters and AdamW moments (counted as a report's rt_bytes). */
int ckpt__is_runtime_state(qe_pstate_kind k);

/*
 * A rank's part of a checkpoint: its outcome, sizes, the store that holds
 * its chunks and its rows.  Travels as bytes (ckpt__report_encode) to rank 0
 * in the gather of a synchronous save, or on the service lane from an async
 * save's background thread.
 */
typedef struct ckpt_report {
	int64_t id; /* the checkpoint */
	int64_t rc;
	char msg[CKPT_MSG];
	uint64_t bytes, rt_bytes;
	int rank;
	ckpt_store_identity store;
	char store_path[CKPT_PATH_MAX];
	cat_tensor_rows rows; /* the catalog's row type; ids unused; freed with cat_tensor_rows_free */
	int nshards;
	cat_shard *shards;
	int ncopies;             /* peers' stores that hold a copy of every row (--ckpt-replicas) */
	ckpt_copy_store *copies; /* malloc'd, freed with the report */
} ckpt_report;

/*
 * Fill rep from this rank's items and the chunk lists its store returned
 * (already durable): a row per item (catalog keys of ckpt__catalog_key) and,
 * on replica 0, a shard row per pipeline stage.
 */
int ckpt__report_build(ckpt_session *s, int64_t id, int rank, int replica, const qe_pstate_item *items, int n,
		       const store_chunk_list *lists, ckpt_report *rep);
/* A report that only says rc (and the thread's last message). */
void ckpt__report_fail(ckpt_report *rep, int64_t id, int rank, int rc);
/* OUT *buf (malloc'd) and *len. */
int ckpt__report_encode(const ckpt_report *rep, void **buf, size_t *len);
/* QE_ECORRUPT naming `from` when the bytes are not a whole report. */
int ckpt__report_decode(const void *buf, size_t len, const char *from, ckpt_report *rep);
void ckpt__report_free(ckpt_report *rep);
/*
 * Rank 0, the single commit point: in one durable transaction of catalog c,
 * record every report's store and rows, the sizes, and flip checkpoint id
 * to committed.  Kill points "row" (after each tensor row), "commit" (before
 * the transaction), "committed" (after it).  On failure nothing of it is in
 * the catalog.
 */
int ckpt__commit_reports(ckpt_session *s, cat *c, int64_t id, const ckpt_report *reps, int n);

/*
 * Tensor rows as bytes (a report carries them; a restore sends the
 * checkpoint's whole table to every rank).  Decoding fills *rows, freed with
 * cat_tensor_rows_free; QE_ECORRUPT naming `from` for bytes that do not parse.
 */
int ckpt__rows_encode(const cat_tensor_rows *rows, void **buf, size_t *len);
int ckpt__rows_decode(const void *buf, size_t len, const char *from, cat_tensor_rows *rows);

#endif
