/*
 * ckpt_query_int.h - internals shared by ckpt_query*.c: the run handle and a
 * set of chunk hashes (verify and gc both need "is this chunk referenced").
 * Not part of the public API.
 */
#ifndef QE_CKPT_QUERY_INT_H
#define QE_CKPT_QUERY_INT_H

#include "ckpt/ckpt_query.h"
#include "ckpt/rundir.h"

struct ckpt_run {
	char *dir;
	char *run_id;
	char *config_json;
	char *created;
	cat *cat;
	ckpt_storeset *stores; /* every store of the run on this host (CKPT_RUN_STORE) */
	int flags;
};

/* Open addressing over the (already uniformly distributed) hash bytes. */
typedef struct ckq_entry {
	store_hash h;
	uint64_t size;
	int state; /* caller's use; 0 for a fresh entry */
	int used;
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

#endif
