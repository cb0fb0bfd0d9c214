/*
 * ckpt_query.h - reading and maintaining the checkpoints of a run directory:
 * the library side of `qeffect list`, `inspect`, `verify` and `gc`.
 *
 * These calls return data; the commands in cli/ print it.  A run directory is
 * RUN/catalog.db (checkpoints, tensors and their chunk lists) and RUN/store/
 * (the LMDB chunk store); see DESIGN.md section 8.  Nothing here needs the
 * runtime: a checkpoint is read through the catalog and the store only, so
 * these calls work on a run made on another machine or with another mapping.
 *
 * What a checkpoint holds (written by ckpt_save through runtime/exec/pstate.h):
 * per global stage "params", "adam_m", "adam_v" (f32), "fp8_meta" (f32, shape
 * [linear, role, history L + scale + scale_inv]) and "adam_step" (u8 record);
 * run-wide records (stage -1) "steps_done", "e_W", "rng",
 * "cache_valid_on_restore".
 *
 * Errors are QE_E* codes with a message naming the run directory, the
 * checkpoint step and the tensor (read it with qe_last_error()).  Nothing here
 * prints or exits.
 *
 * Ownership: every struct a call fills is released with its _free/_release
 * function; strings inside are owned by it.  Inputs are only read.
 */
#ifndef QE_CKPT_QUERY_H
#define QE_CKPT_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/session/rundir.h"
#include "store/store.h"

/* --- list ---------------------------------------------------------------------- */

/* OUT *out: every checkpoint of the run (all statuses) by step then id;
 * freed with cat_ckpt_rows_free(). */
int ckpt_q_list(ckpt_run *r, cat_ckpt_rows *out);

/*
 * The checkpoint `inspect` shows: step -1 is the latest committed one; else
 * the committed one at step, or when none is committed there, the newest
 * attempt at step (pending or aborted; read out->status).  QE_ENOTFOUND names
 * the step and lists what exists.  OUT *out: released with cat_ckpt_release().
 */
int ckpt_q_select(ckpt_run *r, int64_t step, cat_ckpt *out);
/*
 * How many stores, on how many hosts, hold every tensor of checkpoint id
 * (the fewest over its tensors): on disk (the rank's own store and its
 * replicas, --ckpt-replicas) and in the memory tier (--ckpt-memory).
 */
typedef struct ckpt_redundancy {
	int copies, hosts;               /* disk */
	int memory_copies, memory_hosts; /* memory tier; 0 when some tensor has no copy in memory */
} ckpt_redundancy;
int ckpt_q_redundancy(ckpt_run *r, int64_t id, ckpt_redundancy *out);

/*
 * Run-wide records (pstate stage -1) sit in the catalog at stage 0 under
 * "run/NAME", because the catalog's stage column is >= 0.  ckpt_q_stage_of()
 * gives a row's logical stage (-1 for those), ckpt_q_base_name() its name
 * without the prefix, and ckpt_q_find() finds a row by logical stage and base
 * name (either spelling of a run-wide record).  NULL when absent.
 */
#define CKPT_RUN_PREFIX "run/"
int ckpt_q_stage_of(const cat_tensor *t);
const char *ckpt_q_base_name(const cat_tensor *t);
const cat_tensor *ckpt_q_find(const cat_tensor_rows *tr, int stage, const char *name);

/* Bytes of a tensor row that count as runtime state: everything but parameters
 * and AdamW moments (the definition of cat_ckpt.runtime_state_bytes). */
int ckpt_q_is_runtime_state(const cat_tensor *t);

/* --- reading tensors ----------------------------------------------------------- */

/*
 * Read tensor t of a checkpoint from the store, re-hashing every chunk.
 * OUT *data: t->bytes bytes, malloc'd, the caller frees (NULL on failure).
 * QE_ECORRUPT / QE_ENOTFOUND name the tensor (stage, name) and the chunk.
 */
int ckpt_q_read(ckpt_run *r, const cat_tensor *t, void **data);
/*
 * QE_ENOTFOUND naming the store, its rank, this host and its recorded folder
 * when the catalog says store_id was made on this host but the run's opened
 * stores lack it (deleted, or looked for in the wrong folder); QE_OK when it
 * is open here or lives on another host.
 */
int ckpt_q_store_gone(ckpt_run *r, const char *store_id);

/* Parse shape text "[a,b,c]" (or "[]" for a scalar).  OUT dims[0..*ndim);
 * QE_EINVAL for malformed text or more than max dims. */
int ckpt_q_parse_shape(const char *text, int64_t *dims, int max, int *ndim);

/* One FP8 role of one linear of one stage, decoded from an fp8_meta tensor. */
typedef struct ckpt_fp8_role {
	int stage;
	int linear;              /* 0 qkv, 1 proj, 2 fc1, 3 fc2, 4 head */
	char linear_name[16];    /* "qkv" ... "head", or "b<k>.qkv" in a stage of several blocks */
	int role;                /* 0 input, 1 weight, 2 grad_output */
	const char *role_name;   /* static */
	int history_len;
	const float *history;    /* history_len values, into the decoded copy */
	float scale;
	float scale_inv;
} ckpt_fp8_role;

typedef struct ckpt_fp8_meta {
	size_t n;
	ckpt_fp8_role *rows; /* by linear then role */
	float *values;       /* owned copy the rows point into */
} ckpt_fp8_meta;

/*
 * Decode fp8_meta tensor t whose bytes are data: shape [linear, 3, L + 2] of
 * f32, per role history[L], scale, scale_inv.  QE_ECORRUPT when the shape,
 * dtype or byte count disagree.  OUT *out: freed with ckpt_fp8_meta_free().
 */
int ckpt_q_fp8_meta(const cat_tensor *t, const void *data, ckpt_fp8_meta *out);
void ckpt_fp8_meta_free(ckpt_fp8_meta *m);

#define CKPT_SUMMARY_FIRST 8
/* A value summary of one tensor.  f32 tensors are summarized as floats; u8
 * records whose size is a multiple of 8 as 64-bit integers (steps, epochs,
 * seeds); other u8 tensors as bytes. */
typedef struct ckpt_summary {
	const char *as; /* "f32", "i64" or "u8" (static) */
	uint64_t count;
	uint64_t nonfinite; /* NaN or infinite (f32 only) */
	double min, max, mean, rms; /* over the finite values; 0 when none */
	int nfirst;
	double first[CKPT_SUMMARY_FIRST];
} ckpt_summary;
int ckpt_q_summarize(const cat_tensor *t, const void *data, ckpt_summary *out);

/* --- verify -------------------------------------------------------------------- */

typedef enum ckpt_fault_kind {
	CKPT_FAULT_MISSING = 0, /* the chunk is not in the store */
	CKPT_FAULT_SIZE,        /* stored with another size than the catalog lists */
	CKPT_FAULT_CORRUPT,     /* its bytes no longer match its hash */
	CKPT_FAULT_CATALOG,     /* the catalog contradicts itself (tensor bytes vs chunk sizes) */
} ckpt_fault_kind;
const char *ckpt_fault_name(ckpt_fault_kind k); /* "missing", "size", "corrupt", "catalog" */

typedef struct ckpt_fault {
	ckpt_fault_kind kind;
	int64_t ckpt_id;
	int64_t step;
	int stage;
	char name[64];              /* the tensor */
	int64_t chunk;              /* index in the tensor's chunk list; -1: the tensor as a whole */
	char hash[STORE_HASH_HEX];  /* "" for a tensor-level fault */
	char why[256];
	/* Where: the store's owner rank and host (-1 and "" when no store is named), and the
	 * rank of a verify job that checked it (-1: this process, or no rank could). */
	int rank;
	char host[64];
	int checked_by;
} ckpt_fault;

typedef struct ckpt_verify_report {
	uint64_t checkpoints;       /* committed checkpoints checked */
	uint64_t skipped;           /* pending or aborted checkpoints not checked */
	uint64_t memory_unchecked;  /* memory-tier copies not checked: no memory folder named here
	                             * (--ckpt-memory, QE_CKPT_MEMORY_DIR) */
	uint64_t tensors;           /* tensor rows checked */
	uint64_t chunk_refs;        /* chunk references checked (a shared chunk counts per reference) */
	uint64_t chunks;            /* distinct chunks re-hashed */
	uint64_t bytes;             /* their bytes */
	uint64_t ref_bytes;         /* bytes of all references (the checkpoints' logical size) */
	uint64_t bad_tensors;       /* tensors with at least one fault */
	uint64_t store_chunks;      /* chunks in the store */
	uint64_t orphans;           /* stored chunks no checkpoint lists (information: gc collects them) */
	uint64_t orphan_bytes;
	size_t n_faults;
	ckpt_fault *faults;
} ckpt_verify_report;

/*
 * Re-hash every chunk of every committed checkpoint (each distinct chunk once),
 * check that every chunk the catalog lists is stored with the listed size and
 * that each tensor's chunk sizes add up to its bytes, and count orphan chunks.
 * Returns 0 when the walk completed, whatever it found: read out->n_faults.
 * Opens with CKPT_RUN_STORE required.  OUT *out: freed with ckpt_verify_report_free().
 */
int ckpt_q_verify(ckpt_run *r, ckpt_verify_report *out);
void ckpt_verify_report_free(ckpt_verify_report *v);

/* --- gc ------------------------------------------------------------------------ */

typedef struct ckpt_gc_policy {
	int keep_last;          /* keep the N latest committed checkpoints; must be >= 1 */
	int64_t keep_every;     /* also keep committed steps that are multiples of K; 0: none */
	const int64_t *pins;    /* also keep these steps (any status) */
	size_t n_pins;
	/*
	 * Seconds that protect work in progress: a pending checkpoint is dropped
	 * only when it is older than this AND its step is below the newest
	 * committed step; store chunks put within this time are not deleted
	 * (a checkpoint being written stores its chunks before the catalog lists
	 * them).
	 */
	uint64_t grace_s;
	int dry_run;            /* decide and count, change nothing */
	int64_t now;            /* unix time for the age test; 0: time(NULL) */
	/* then rewrite every store with store_compact, under its lock, so the freed pages go back
	 * to the disk (not with dry_run) */
	int compact;
} ckpt_gc_policy;

typedef struct ckpt_gc_item {
	int64_t id;
	int64_t step;
	cat_status status;
	uint64_t bytes;
	int drop;      /* 1: dropped (or would be, for a dry run) */
	char why[96];  /* why kept or dropped */
} ckpt_gc_item;

typedef struct ckpt_gc_report {
	size_t n;
	ckpt_gc_item *items;        /* every checkpoint, by step then id */
	uint64_t dropped;           /* checkpoints dropped */
	uint64_t dropped_bytes;     /* their logical bytes */
	uint64_t kept;
	size_t n_missing_pins;
	int64_t *missing_pins;      /* pinned steps with no checkpoint */
	uint64_t keep_chunks;       /* distinct chunks still referenced */
	store_gc_result store;      /* chunks deleted, bytes reclaimed (reusable inside the stores), young ones left */
	int compacted;              /* stores compacted (policy.compact) */
	store_compact_result compact; /* their disk and length totals, before and after */
} ckpt_gc_report;

/*
 * Drop the checkpoints the policy does not keep, then the chunks no remaining
 * checkpoint references.  Kept: the keep_last latest committed, committed steps
 * that are multiples of keep_every, pinned steps, pending checkpoints that may
 * still be in progress (see grace_s).  Dropped: other committed ones, every
 * aborted one (it can never become loadable), stale pending ones.
 *
 * Crash safety: the catalog rows go first, in one transaction, so no committed
 * checkpoint ever lists a missing chunk; the chunks go after (store_gc with
 * the catalog's referenced set read after the delete).  A crash between the
 * two leaves orphan chunks that the next gc collects.
 * Needs CKPT_RUN_STORE|CKPT_RUN_WRITE unless dry_run.  QE_EINVAL for a bad policy.
 * OUT *out: freed with ckpt_gc_report_free(); filled as far as it got on failure.
 */
int ckpt_q_gc(ckpt_run *r, const ckpt_gc_policy *p, ckpt_gc_report *out);
void ckpt_gc_report_free(ckpt_gc_report *g);
/*
 * With p->compact, ckpt_q_gc ends by compacting every store of r: the run's
 * stores are closed first (a store must be open in no process while it is
 * rewritten; r keeps its catalog), then each is compacted under its lock
 * (STORE/lock: a training rank that holds it makes compaction fail with
 * QE_EBUSY, as does any process that has the store open).  The first
 * failure stops; the stores compacted before it stay compacted, the one
 * that failed is as it was.
 */

#endif
