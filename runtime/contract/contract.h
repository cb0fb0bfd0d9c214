/*
 * contract.h - the four relations of DESIGN.md section 6, as host bookkeeping.
 *
 *   invocation key + tape slot pool   which microbatch owns retained work, and how long
 *   effect token                      when a stateful (FP8 scaling) transition happens
 *   epoch e_W + weight cache e_C      whether the FP8 weight cache is current; when the
 *                                     optimizer may commit and a checkpoint may be taken
 *   gradient arena                    every matrix gradient written exactly once per microbatch
 *                                     (accumulating: in ascending microbatch order)
 *
 * This module never allocates device memory and never runs a kernel.  Every
 * relation is used in two phases: a *check* that changes nothing and says
 * whether a physical action may run, then, once the caller (model/executor)
 * has performed that action successfully, a *commit* that records it.  A
 * failed check leaves every state exactly as it was, so the caller can report
 * the violation and continue (no violation aborts the process).
 *
 * Violations return one code per family (runtime/core/status.h):
 *   QE_ESTALE_REF, QE_EDUP_CONSUMER, QE_EKEY_SLOT, QE_EORDER, QE_ESTALE_CACHE,
 *   QE_EARENA, QE_EPREMATURE;
 * and leave a message (qe_last_error()) naming the relation, the key, the slot
 * and the generation.  QE_EINVAL means a programming error (NULL handle,
 * index out of range); QE_EBUSY a full pool; QE_ESHAPE a destination of the
 * wrong shape, dtype or device.
 *
 * Nothing here is thread-safe: one executor thread drives a rank's contracts.
 * Nothing here is persisted: checkpoints store e_W only (DESIGN.md section 8);
 * tape generations, tokens and arena addresses are rebuilt on restart.
 */
#ifndef QE_CONTRACT_H
#define QE_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/action.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

/* ===================================================================== keys */

/*
 * The invocation key K = (e, s, m, u, i): optimizer epoch, global stage,
 * microbatch, sub-layer block (attention / MLP / head), intra-module counter.
 * Logical, never an address: the same K names the same work on every backend
 * and under every rank mapping.
 */
typedef struct qe_key {
	int64_t e;
	int32_t s, m, u, i;
} qe_key;

/* A reference to a live tape: the key it was allocated for, its slot, and the
 * slot's generation at allocation.  A plain value; copying it is how
 * consumers (dI, dW) are handed their tape. */
typedef struct qe_tape_ref {
	qe_key key;
	int32_t slot;
	uint64_t gen;
} qe_tape_ref;

/* Enough for any qe_key_format() output. */
#define QE_KEY_FMT_LEN 96

static inline qe_key qe_key_make(int64_t e, int32_t s, int32_t m, int32_t u, int32_t i)
{
	qe_key k = { e, s, m, u, i };
	return k;
}
/* 1 when the five fields agree. */
int qe_key_equal(const qe_key *a, const qe_key *b);
/* Write "K=(e=3,s=1,m=2,u=0,i=0)" into buf (len >= QE_KEY_FMT_LEN is always enough); returns buf. */
char *qe_key_format(const qe_key *k, char *buf, size_t len);
/* Write "K=(...) slot 1 gen 7" into buf (len >= 2*QE_KEY_FMT_LEN is enough); returns buf. */
char *qe_tape_ref_format(const qe_tape_ref *r, char *buf, size_t len);

/* ================================================================ tape pool */

/*
 * A bounded pool of tape slots with fixed storage.  Allocating for K takes a
 * free slot p, increments its generation g_p (generations only grow) and
 * returns TapeRef(K, p, g_p).  The live map K -> p is injective, and an
 * occupied slot is never pre-empted.  Each live tape has a consumer mask;
 * once both dI and dW have been committed the slot is released: the payload
 * is considered evicted, the slot is free, its generation is kept, so every
 * older reference to it is stale from then on (this is what catches ABA).
 */
typedef struct qe_tape_pool qe_tape_pool;

/* Consumer bits.  QE_CONSUMER_FULL is a full backward B consuming both at once. */
enum { QE_CONSUMER_DI = 1, QE_CONSUMER_DW = 2, QE_CONSUMER_FULL = 3 };

/* Returns "dI", "dW", "B" or "?" for a consumer mask. Static string. */
const char *qe_consumer_name(int consumer);

/*
 * Create a pool of nslots (1..4096) slots.  payloads, when not NULL, holds
 * nslots pointers to the fixed storage of each slot (not owned; must outlive
 * the pool); qe_tape_pool_check() hands them back.  *out is freed with
 * qe_tape_pool_free().  Returns QE_OK, QE_EINVAL, QE_ENOMEM.
 */
int qe_tape_pool_create(int nslots, void *const *payloads, qe_tape_pool **out);
/* Free the pool (NULL is fine).  Does not touch the payload storage. */
void qe_tape_pool_free(qe_tape_pool *pool);

/*
 * Allocate a tape for key k.  slot_hint -1 takes the lowest free slot,
 * otherwise exactly that slot.  On success *out is the new reference.
 * Returns QE_OK;
 *   QE_EKEY_SLOT  k is already live (message: "K is live in slot p gen g");
 *   QE_EBUSY      the hinted slot is occupied (never pre-empted), or no slot is free;
 *   QE_EINVAL     slot_hint out of range.
 * On failure nothing changes.
 */
int qe_tape_pool_alloc(qe_tape_pool *pool, qe_key k, int slot_hint, qe_tape_ref *out);

/*
 * The check before a physical action consumes the tape r as `consumer`
 * (QE_CONSUMER_DI, _DW or _FULL; 0 checks only that r is live).  Changes
 * nothing.  On success *payload_out (may be NULL) is the slot's storage.
 * Returns QE_OK;
 *   QE_EKEY_SLOT      r names a slot outside the pool, or a live slot holding another key;
 *   QE_ESTALE_REF     r's generation is not the slot's (the slot was reused), or the tape
 *                     was aborted/purged;
 *   QE_EDUP_CONSUMER  the consumer already ran on this tape (also after the release that
 *                     followed both consumers);
 *   QE_EINVAL         consumer not a valid mask.
 */
int qe_tape_pool_check(const qe_tape_pool *pool, const qe_tape_ref *r, int consumer, void **payload_out);
/*
 * After the consumer's action succeeded: re-checks (same codes, nothing
 * changes on failure), sets the consumer bits, and releases the slot when
 * both dI and dW are set.
 */
int qe_tape_pool_commit(qe_tape_pool *pool, const qe_tape_ref *r, int consumer);
/* Abort one live reference (an exception in its producer or consumer): the slot is
 * freed, its generation kept.  Returns QE_OK or the codes of qe_tape_pool_check(r, 0). */
int qe_tape_pool_abort(qe_tape_pool *pool, const qe_tape_ref *r);
/* Abort every live tape of epoch e (aborting a step).  Returns how many (>= 0). */
int qe_tape_pool_purge_epoch(qe_tape_pool *pool, int64_t e);

/* Epoch wildcard for qe_tape_pool_live_refs(). */
#define QE_EPOCH_ANY INT64_MIN
/*
 * Number of live tapes of epoch e (QE_EPOCH_ANY: of any epoch).  When refs
 * is not NULL, the first min(count, max) of them (lowest slot first) are
 * written there.
 */
int qe_tape_pool_live_refs(const qe_tape_pool *pool, int64_t e, qe_tape_ref *refs, int max);

/* What one slot holds now (for snapshots, diagnostics and tests). */
typedef struct qe_tape_slot_info {
	int live;        /* 1 while a tape occupies the slot */
	int mask;        /* consumer bits of the current (or last) tape */
	uint64_t gen;    /* the slot's generation: number of allocations so far */
	qe_key key;      /* the current (or last) tape's key; zeros before the first */
} qe_tape_slot_info;
int qe_tape_pool_slot_info(const qe_tape_pool *pool, int slot, qe_tape_slot_info *out);

/*
 * Counters.  A *delayed dW* follows the one rule of runtime/core/action.h
 * (qe_dw_rule) over this pool's consumer commits: a dW-only commit that is
 * not the very next consumer commit on this pool after the dI commit of its
 * own tape: any dI, dW or B committed on another tape in between (or no dI
 * before it) makes it delayed.  dI immediately followed by its dW, and a full
 * B, are not delayed.  This counts exactly the dW that ZB-V defers into bubbles.
 */
typedef struct qe_tape_pool_stats {
	int nslots;
	int live;           /* tapes live now */
	int peak_live;      /* most tapes live at once since creation */
	uint64_t allocs;    /* successful qe_tape_pool_alloc() */
	uint64_t releases;  /* slots released after both consumers */
	uint64_t aborts;    /* tapes freed by qe_tape_pool_abort() or purge */
	uint64_t consumes;  /* consumer commits (dI, dW or B each count one) */
	uint64_t delayed_dw;
} qe_tape_pool_stats;
void qe_tape_pool_get_stats(const qe_tape_pool *pool, qe_tape_pool_stats *out);

/* ============================================================= effect token */

/*
 * Per-stage effect token.  A stateful action (F, dI, B: they update delayed-
 * scaling state) presents token t, which must equal `next`; once the action
 * succeeded the commit advances to t+1 and hands that back as the token for
 * the next stateful action.  The token carries no data: it orders state
 * transitions and nothing else.  A restart begins at 0 again.
 */
typedef struct qe_effect_state {
	uint64_t next;        /* the token the next stateful action must present */
	int32_t stage;        /* global stage, for messages */
	uint64_t transitions; /* committed transitions since init (not reset by restart) */
} qe_effect_state;

void qe_effect_init(qe_effect_state *st, int32_t stage);
/* QE_OK when token == st->next; else QE_EORDER ("token 4 presented, expected 6 (stage s)"). */
int qe_effect_check(const qe_effect_state *st, uint64_t token);
/* Re-check, then advance: *next_token (may be NULL) = token + 1. Nothing changes on failure. */
int qe_effect_commit(qe_effect_state *st, uint64_t token, uint64_t *next_token);
/* Restart: tokens start at 0 again. */
void qe_effect_reset(qe_effect_state *st);

/* ================================================================== epochs */

/*
 * e_W counts optimizer commits.  One qe_epoch_state holds a rank's e_W; it
 * is shared by the rank's stages and is the only epoch a checkpoint keeps.
 */
typedef struct qe_epoch_state {
	int64_t e_W;
} qe_epoch_state;

/* e_W as given. */
void qe_epoch_init(qe_epoch_state *ep, int64_t e_W);

/*
 * One FP8 weight cache (each stage has its own): e_C is the epoch of the
 * weights it was cast from, meaningful only while valid.  It starts invalid,
 * and a restart makes it invalid again even when e_C happens to equal the
 * restored e_W: the first F of a step refreshes it.
 */
typedef struct qe_weight_cache {
	int64_t e_C;
	int valid;
} qe_weight_cache;

/* Invalid, e_C = -1 (also what a restart does). */
void qe_weight_cache_init(qe_weight_cache *wc);
/*
 * Check a forward under the rank's e_W.  first_of_step (microbatch 0 of a
 * chunk) must refresh the cache: *refresh_out = 1.  Any other F needs
 * valid && e_C == e_W (*refresh_out = 0), else QE_ESTALE_CACHE naming e_C,
 * e_W and k (k may be NULL); *refresh_out is then left as it was.
 * Changes nothing.
 */
int qe_weight_cache_check(const qe_weight_cache *wc, int64_t e_W, const qe_key *k, int first_of_step,
			  int *refresh_out);
/* After the forward succeeded: when it refreshed, e_C = e_W and the cache is valid. */
void qe_weight_cache_commit(qe_weight_cache *wc, int64_t e_W, int refreshed);
/* e_C while valid, -1 when invalid (what traces fingerprint). */
int64_t qe_weight_cache_epoch(const qe_weight_cache *wc);

typedef struct qe_arena qe_arena;

/*
 * Optimizer-commit preconditions: zero live tapes of epoch e_W in pool, the
 * arena complete (every view written exactly once this step), no reduction
 * in flight.  pool or arena may be NULL (not checked).  Else QE_EPREMATURE
 * naming every pending item ("premature commit: 2 live tapes of epoch 4
 * (K=..., slot 1 gen 7), arena view FC1.W mb 3 not written").  Changes nothing.
 */
int qe_epoch_check_commit(const qe_epoch_state *ep, const qe_tape_pool *pool, const qe_arena *arena,
			  int reductions_in_flight);
/* The optimizer step committed: e_W advances; every weight cache is now stale (e_C < e_W). */
void qe_epoch_commit_optimizer(qe_epoch_state *ep);
/* Restart from a checkpoint at epoch e_W (the stages' caches are invalidated by
 * qe_stage_contract_restart(); the first F refreshes each). */
void qe_epoch_restart(qe_epoch_state *ep, int64_t e_W);

/*
 * The checkpoint gate (DESIGN.md section 8): a quiescent optimizer boundary.
 * No live tape of any epoch, no arena view written and not yet reduced
 * (incomplete or complete: the step's gradients would be lost), no reduction
 * in flight, device work complete (device_busy == 0, a flag the caller
 * computes).  Else QE_EPREMATURE ("premature checkpoint: ...") naming every
 * pending item.  ep may be NULL; pool/arena may be NULL.  Changes nothing.
 */
int qe_quiescence_check(const qe_epoch_state *ep, const qe_tape_pool *pool, const qe_arena *arena,
			int reductions_in_flight, int device_busy);

/* ========================================================== gradient arena */

/* One local matrix parameter whose gradient goes through the arena (f32 only). */
typedef struct qe_arena_param {
	const char *name;   /* copied by qe_arena_create() */
	int64_t rows, cols;
	qe_dtype dtype;     /* must be QE_F32 */
	qe_device device;   /* must equal the arena's device */
} qe_arena_param;

/* How dW reaches its view: written in place (direct placement), or written to a
 * scratch buffer then copied or added into the view (copy, the conservative path). */
typedef enum qe_arena_mode { QE_ARENA_DIRECT = 0, QE_ARENA_COPY = 1 } qe_arena_mode;

/*
 * How many views a parameter has.  PER_MB: one per microbatch, reduced by the
 * optimizer in microbatch order (capacity M x matrix bytes).  ACCUMULATE: one
 * per parameter; the write of microbatch 0 initializes it (GEMM beta = 0, or a
 * copy of scratch), every later write adds into it (beta = 1, or an add of
 * scratch), one fp32 rounding per add, so the sum is ((g0 + g1) + g2) + ...,
 * the per-mb reduction's order and bits.  The writes of a parameter must then
 * come in ascending microbatch order (else "out-of-order arena write").
 */
typedef enum qe_arena_layout { QE_ARENA_PER_MB = 0, QE_ARENA_ACCUMULATE = 1 } qe_arena_layout;
/* "per-mb" / "accumulate" ("?" when out of range); parse: QE_OK or QE_EINVAL. */
const char *qe_arena_layout_name(qe_arena_layout l);
int qe_arena_layout_parse(const char *s, qe_arena_layout *out);

/* Every view starts at a multiple of this from the (equally aligned) base. */
#define QE_ARENA_ALIGN 256

/*
 * Bytes of base storage the arena needs: sum over params of its views (M for
 * PER_MB, 1 for ACCUMULATE), each rounded up to QE_ARENA_ALIGN.  0 when the
 * description is invalid.
 */
size_t qe_arena_bytes(const qe_arena_param *params, int nparams, int M, qe_arena_layout layout);

/*
 * Lay out the views (per (param p, microbatch m), or one per param) at fixed
 * offsets in base (caller-owned, QE_ARENA_ALIGN-aligned, at least
 * qe_arena_bytes() long, on device dev; never touched here, only addressed).
 * Views of one parameter are consecutive in microbatch order.  *out is freed
 * with qe_arena_free(); base stays the caller's.  Returns QE_OK, QE_EINVAL
 * (bad description, layout or mode, misaligned or short base),
 * QE_EUNSUPPORTED (dtype not f32), QE_ENOMEM.
 */
int qe_arena_create(const qe_arena_param *params, int nparams, int M, qe_arena_layout layout, qe_arena_mode mode,
		    void *base, size_t bytes, qe_device dev, qe_arena **out);
void qe_arena_free(qe_arena *arena);

int qe_arena_nparams(const qe_arena *arena);
int qe_arena_microbatches(const qe_arena *arena);
qe_arena_mode qe_arena_get_mode(const qe_arena *arena);
qe_arena_layout qe_arena_get_layout(const qe_arena *arena);
/* Views per parameter: M (PER_MB) or 1 (ACCUMULATE); 0 for NULL. */
int qe_arena_nviews(const qe_arena *arena);
/*
 * 1 when the write of microbatch m adds into its view (ACCUMULATE, m > 0: the
 * dW GEMM runs with beta = 1, a copy-mode write adds its scratch), 0 when it
 * initializes it (m == 0, or PER_MB), -1 when m is out of range.  A captured
 * dW graph of microbatch m is built with this, once.
 */
int qe_arena_accumulates(const qe_arena *arena, int m);
/* The parameter's name (owned by the arena) or "?" when p is out of range. */
const char *qe_arena_param_name(const qe_arena *arena, int p);

/* The view microbatch m of param p writes (ACCUMULATE: the param's one view),
 * as a 2-D f32 tensor descriptor.  QE_OK or QE_EINVAL. */
int qe_arena_view(const qe_arena *arena, int p, int m, qe_tensor *out);
/*
 * Check a bound destination for (p, m): dtype, device and shape equal to the
 * view (else QE_ESHAPE), data address equal to the view's (else QE_EARENA;
 * an address overlapping another view is reported as an aliased write).
 * A (p, m) with no view is QE_EARENA too (a write to nothing); NULL is QE_EINVAL.
 * Messages name the param, the microbatch, expected and got.  Changes nothing.
 */
int qe_arena_bind_check(const qe_arena *arena, int p, int m, const qe_tensor *dest);
/*
 * bind check + (p, m) not yet written this step (else QE_EARENA "duplicate
 * arena write") + (ACCUMULATE) every mb < m of p written and none above (else
 * QE_EARENA "out-of-order arena write" naming the param, m and the next mb
 * expected).  Changes nothing.
 */
int qe_arena_write_check(const qe_arena *arena, int p, int m, const qe_tensor *dest);
/* After the write succeeded: mark (p, m) written.  QE_EARENA (duplicate or
 * out of order, as above) and nothing marked otherwise. */
int qe_arena_write_commit(qe_arena *arena, int p, int m);
/* 1 when (p, m) was written this step, 0 when not, -1 when out of range. */
int qe_arena_is_written(const qe_arena *arena, int p, int m);
/* QE_OK when every (p, m) was written this step, else QE_EARENA naming each missing (param, mb). */
int qe_arena_check_complete(const qe_arena *arena);
/*
 * views[0..*nviews-1] = the f32 data of the views of p in microbatch order:
 * the order the optimizer reduces them in, whatever order dW ran in (PER_MB,
 * *nviews = M), or the one accumulated view (ACCUMULATE, *nviews = 1).
 * views must hold M pointers.  nviews may be NULL.
 */
int qe_arena_views_for(const qe_arena *arena, int p, const float **views, int *nviews);
/* The optimizer consumed the views: every view becomes unwritten for the next step. */
void qe_arena_step_reset(qe_arena *arena);

typedef struct qe_arena_stats {
	int nparams, M;
	uint64_t writes_this_step;
	uint64_t total_writes;
	uint64_t steps;           /* qe_arena_step_reset() calls */
	size_t capacity_bytes;    /* qe_arena_bytes() of the layout */
	size_t view_bytes;        /* sum of views x unpadded param bytes */
} qe_arena_stats;
void qe_arena_get_stats(const qe_arena *arena, qe_arena_stats *out);

/* ========================================================= stage actions */

/*
 * The wrappers the executor calls around each physical stage action.  Each
 * action is used as
 *
 *     qe_action_ticket t;
 *     rc = qe_action_f_begin(sc, token, m, &t);   every check; on failure nothing changed
 *     ... the physical action, using t.ref / t.payload / t.refresh_cache ...
 *     rc = ok ? qe_action_end(sc, &t, &token)     commit (token, epoch, consumers, arena)
 *             : qe_action_fail(sc, &t);           abort the tape, commit nothing
 *
 * F(m): checks the token and the weight cache (the first F of a step, m == 0,
 *   refreshes it), allocates the tape K = (e_W, s, m, 0, 0) in slot
 *   slot_base + m % slot_count (QE_EBUSY when that slot is still live).
 * dI(ref): checks the token, the ref (consumer dI), that ref is this stage's
 *   and of epoch e_W.
 * dW(ref, m): checks the ref (consumer dW, after its dI, else QE_EORDER), that
 *   the explicit microbatch m of the deferred task names the ref's key (else
 *   QE_EKEY_SLOT), and one arena write per matrix param of the stage.
 *   dW takes no token: it never updates scaling state.
 * B(ref): full backward, dI and dW together.
 *
 * Only one action per stage is between begin and end at a time (else
 * QE_EORDER).  *_fail aborts the action's tape reference (DESIGN.md: an
 * exception aborts the reference); the executor usually then aborts the step
 * with qe_tape_pool_purge_epoch().
 */
/* The kinds are qe_action_kind's compute kinds QE_ACT_F, _DI, _DW, _B (runtime/core/action.h);
 * QE_ACT_NONE: nothing in flight.  qe_action_name() spells them in messages. */

typedef struct qe_stage_contract {
	int32_t s;               /* global stage */
	int M;                   /* configured microbatches per step */
	qe_effect_state effect;  /* this stage's scaling-state order */
	qe_epoch_state *ep;      /* the rank's e_W (shared by its stages; not owned) */
	qe_weight_cache cache;   /* this stage's FP8 weight cache */
	qe_tape_pool *pool;      /* not owned; may be shared by the rank's stages */
	qe_arena *arena;         /* not owned; NULL when the stage has no matrix params */
	int p_begin, p_end;      /* arena params [p_begin, p_end) belong to this stage */
	int slot_base, slot_count; /* F(m) takes pool slot slot_base + m % slot_count */
	int nm_accumulate;       /* the stage sums its non-matrix gradients over microbatches in dI */
	int nm_next;             /* then: the microbatch whose dI (or B) comes next this step */
	qe_action_kind in_flight;
	qe_tape_ref in_flight_ref;
} qe_stage_contract;

/* The result of a successful *_begin, consumed by qe_action_end()/_fail(). */
typedef struct qe_action_ticket {
	qe_action_kind kind;
	int32_t s, m;
	uint64_t token;      /* the token presented (F, dI, B) */
	qe_tape_ref ref;     /* F: the new tape; dI/dW/B: the tape consumed */
	void *payload;       /* the tape slot's fixed storage (may be NULL) */
	int refresh_cache;   /* F: 1 when the action must recast the FP8 weight cache */
} qe_action_ticket;

/*
 * Initialize a stage contract (tokens at 0, cache invalid, nothing in
 * flight).  p_begin..p_end must lie within the arena's params (empty range
 * and NULL arena allowed).  QE_OK or QE_EINVAL.
 */
int qe_stage_contract_init(qe_stage_contract *sc, int32_t s, int M, qe_epoch_state *ep, qe_tape_pool *pool,
			   qe_arena *arena, int p_begin, int p_end);
/*
 * Give the stage its own slots [slot_base, slot_base + slot_count) of the
 * pool, so that several stages of a rank can share one pool without their
 * hinted slots colliding.  Default after init: the whole pool.  QE_OK or QE_EINVAL.
 */
int qe_stage_contract_set_slots(qe_stage_contract *sc, int slot_base, int slot_count);
/* Process restart: tokens start at 0, the stage's cache is invalid, nothing in flight. */
void qe_stage_contract_restart(qe_stage_contract *sc);
/*
 * The stage accumulates its non-matrix gradients in dI (qe_stage_create's
 * accumulate_nonmatrix): from now on a dI or B of microbatch m is refused
 * with QE_EORDER unless m is the next in ascending order this step, so the
 * sum keeps the per-microbatch order and its bits.  step_reset starts the
 * next step at microbatch 0 (after the optimizer consumed the sum).
 */
void qe_stage_contract_accumulate_nonmatrix(qe_stage_contract *sc);
void qe_stage_contract_step_reset(qe_stage_contract *sc);

int qe_action_f_begin(qe_stage_contract *sc, uint64_t token, int m, qe_action_ticket *out);
int qe_action_di_begin(qe_stage_contract *sc, uint64_t token, const qe_tape_ref *ref, qe_action_ticket *out);
/* dests[k] is the bound destination of param p_begin + k (p_end - p_begin of them). */
int qe_action_dw_begin(qe_stage_contract *sc, const qe_tape_ref *ref, int m_explicit, const qe_tensor *dests,
		       qe_action_ticket *out);
int qe_action_b_begin(qe_stage_contract *sc, uint64_t token, const qe_tape_ref *ref, const qe_tensor *dests,
		      qe_action_ticket *out);
/*
 * The physical action succeeded: commit it.  *next_token (may be NULL)
 * receives the token for the next stateful action (unchanged for dW).
 * Every commit is re-checked first; on failure nothing changes.
 */
int qe_action_end(qe_stage_contract *sc, const qe_action_ticket *t, uint64_t *next_token);
/* The physical action failed: abort its tape reference, commit nothing. */
int qe_action_fail(qe_stage_contract *sc, const qe_action_ticket *t);

/* ======================================================= fault injection */

/*
 * Scripted violations (used by `qeffect selftest inject` and the tests): each
 * runs valid operations on a fresh rank, then one invalid operation, and
 * checks that it was rejected exactly there with the expected code, that the
 * contract state (pool slots, generations, masks, counters, tokens, epochs,
 * arena bitmap) is unchanged by it, and that valid operations still succeed.
 */
typedef struct qe_inject_result {
	const char *name;        /* static */
	int expected;            /* the family's code */
	int got;                 /* the first non-OK status (QE_OK when none) */
	int invalid_index;       /* index of the injected operation in the script */
	int first_fail_index;    /* index of the first non-OK operation (-1 when none) */
	char invalid_op[96];     /* short text of the injected operation */
	int rejected;            /* first failure exactly at invalid_index, with `expected` */
	int preserved;           /* snapshot equal before/after the invalid operation */
	int followup_ok;         /* the follow-up valid operations succeeded */
	char message[512];       /* qe_last_error() of the rejection */
} qe_inject_result;

/* Number of scenarios. */
int qe_inject_count(void);
/* Run every scenario into out[0..max-1]; returns how many ran, or QE_ENOMEM/QE_EINVAL. */
int qe_inject_run_all(qe_inject_result *out, int max);
/* 1 when the row passed (rejected && preserved && followup_ok). */
int qe_inject_passed(const qe_inject_result *r);

#endif
