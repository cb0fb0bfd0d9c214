/*
 * ckpt_query_int.h - internals shared by ckpt_query*.c: a set of chunk
 * hashes (verify and gc both need "is this chunk referenced"); the open run
 * they take is rundir_int.h's.  Not part of the public API.
 */
#ifndef QE_CKPT_QUERY_INT_H
#define QE_CKPT_QUERY_INT_H

#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "ckpt/session/rundir_int.h"

/* Open addressing over the (already uniformly distributed) hash bytes. */
typedef struct ckq_entry {
	store_hash h;
	uint64_t size;
	int state; /* caller's use; 0 for a fresh entry */
	int used;
	char *why; /* caller's use (malloc'd, freed by ckq_set_free); NULL for a fresh entry */
} ckq_entry;

typedef struct ckq_set {
	size_t n, cap;
	ckq_entry *e;
} ckq_set;

/* OUT *added (may be NULL): 1 when h was not there.  Returns the entry or NULL on out of memory. */
ckq_entry *ckq_set_add(ckq_set *s, const store_hash *h, uint64_t size, int *added);
ckq_entry *ckq_set_find(const ckq_set *s, const store_hash *h);
void ckq_set_free(ckq_set *s);
/* Add every chunk the catalog lists for any checkpoint (cat_referenced_chunks). */
int ckq_set_referenced(cat *c, ckq_set *s);

/*
 * The retention decision of gc, shared by the local (ckpt_query_gc.c) and the
 * remote (ckpt_remote_gc.c) side so both keep exactly the same checkpoints:
 * fills g->items (one per row of l, same order: by step then id),
 * g->dropped/kept/dropped_bytes and g->missing_pins.  Rows must come by step
 * then id with at most one committed per step; nothing is read or changed.
 * g starts zeroed; free it with ckpt_gc_report_free().
 */
int ckq_gc_plan(const cat_ckpt_rows *l, const ckpt_gc_policy *p, ckpt_gc_report *g);

/* "store ID of rank R on host 'H' (PATH)", from the catalog's stores table, for messages. */
void ckq_describe_store(ckpt_run *r, const char *store_id, char *buf, size_t len);

/* Unix time of an ISO 8601 UTC text "YYYY-MM-DDTHH:MM:SS[.fff]Z"; -1 when unparsable. */
int64_t ckq_parse_time(const char *iso);

/* --- the verify walk, local or over a job's ranks (ckpt_query_verify.c, ckpt_job_verify.c) --- */

/* A chunk's state once checked (ckq_entry.state). */
enum { CKQ_CHK_OK = 1, CKQ_CHK_MISSING, CKQ_CHK_SIZE, CKQ_CHK_CORRUPT };

/*
 * Check chunk e->h in st (NULL: missing): sets e->state, e->size (the stored
 * size), e->why (corrupt: the store's message); counts a re-hashed chunk in
 * *chunks and *bytes.  Only an I/O failure of the store is an error.
 */
int ckq_check_chunk(store *st, ckq_entry *e, uint64_t *chunks, uint64_t *bytes);

/* A store a verify walk judges chunks by. */
typedef struct ckq_vstore {
	char store_id[CKPT_STORE_ID_MAX];
	char host[CKPT_HOST_MAX];
	char path[CKPT_PATH_MAX];
	int owner;      /* the rank that created it */
	int checked_by; /* the job rank that checked it; -1 this process */
	store *st;      /* open here (checked during the walk), or NULL: seen holds what checked_by found */
	ckq_set seen;
} ckq_vstore;

/*
 * Walk every committed checkpoint's rows and replica copies, judging each
 * chunk by the vstore its row names (looked up by store id; a row whose store
 * is not among vs is missing, "not_here" saying why: "not on this host" or
 * "which no rank of this job sees").  Fills out's checkpoint, tensor,
 * chunk-reference and fault counts (and chunks/bytes for the stores checked
 * here); orphans are the caller's.
 */
int ckq_verify_walk(ckpt_run *r, ckq_vstore *vs, int nvs, const char *not_here, ckpt_verify_report *out);

/* Count st's chunks and those refs does not hold (orphans) into v's store_chunks, orphans, orphan_bytes. */
int ckq_count_orphans(store *st, const ckq_set *refs, ckpt_verify_report *v);

/*
 * The catalog half of gc (ckpt_q_gc's steps before the stores): check the
 * policy, plan, drop the rows in one transaction and flush the catalog, then
 * OUT *keep: the chunks to keep in every store (what the catalog still lists;
 * for a dry run what the kept checkpoints list).  ckpt_job_gc.c sends keep to
 * the ranks that hold the stores.
 */
int ckq_gc_catalog(ckpt_run *r, const ckpt_gc_policy *p, ckpt_gc_report *out, ckq_set *keep);
/*
 * store_compact of the store at path, holding STORE/lock unless the caller
 * does (held) or the store has none (store_id "": the schema-2 shared store,
 * which RUN/lock covers).  what names the command in the lock; failures name
 * the store's path.
 */
int ckq_compact_store(const char *path, const char *store_id, int held, const char *what, store_compact_result *out);

#endif
