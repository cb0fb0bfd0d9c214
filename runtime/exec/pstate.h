/*
 * pstate.h - the persistent state of a rank, as one small interface the
 * checkpoint service uses without reaching into runtime internals
 * (DESIGN.md section 2 and 8).
 *
 * A rank enumerates named items, each a typed array (parameters, AdamW
 * moments, FP8 meta) or a small record (AdamW step, e_W, data position, RNG,
 * cache semantics).  Items are keyed by *global stage* (or -1 for run-wide
 * records written by rank 0), never by rank, so a checkpoint taken under one
 * pipeline mapping restores under another.  Everything else - graphs,
 * streams, events, tape generations, arena addresses, effect tokens, FP8
 * cache contents - is rebuilt, never persisted.
 *
 * The checkpoint service moves an item's bytes only through this interface
 * (qe_pstate_read/write and the host staging below), so it never calls a
 * backend op itself.
 *
 * It is also the only header of the runtime that ckpt includes, besides
 * runtime/core (issue 36 item 4; tests/build/include_order.py checks): the
 * rank's place (its index, replica, steps done, e_W, seed), the checkpoint
 * gate, the comm calls of the agreement between ranks, and the strings a
 * checkpoint records of the run come through here too.  The rank, the comm,
 * a gather's blobs and the backend are opaque to ckpt, so this header pulls
 * in nothing of runtime/exec/rank.h or runtime/comm/comm.h; the functions
 * below forward to theirs (pstate_rank.c) and keep their semantics.
 */
#ifndef QE_PSTATE_H
#define QE_PSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/tensor.h"

/* Opaque here: runtime/exec/rank.h, runtime/comm/comm.h and runtime/backend/backend.h define them. */
typedef struct qe_rank qe_rank;
typedef struct qe_comm qe_comm;
typedef struct qe_comm_blob qe_comm_blob;
typedef struct qe_backend qe_backend;

typedef enum qe_pstate_kind {
	QE_PSTATE_PARAM = 0,  /* fp32 master parameters */
	QE_PSTATE_ADAM_M,
	QE_PSTATE_ADAM_V,
	QE_PSTATE_FP8_META,   /* amax histories, scales, scale_inv of every role */
	QE_PSTATE_RUNTIME,    /* small records: step counts, epochs, data position, rng */
} qe_pstate_kind;

const char *qe_pstate_kind_name(qe_pstate_kind k);

typedef struct qe_pstate_item {
	char name[48];       /* unique within a stage: "params", "adam_m", "fp8_meta", "adam_step", "e_W", ... */
	int stage;           /* global stage; -1 for run-wide records */
	qe_pstate_kind kind;
	qe_dtype dtype;
	int ndim;
	int64_t shape[QE_MAX_DIMS];
	size_t bytes;
	void *data;          /* not owned; backend memory when on_device, else host memory of the rank */
	int on_device;
} qe_pstate_item;

/*
 * The rank's items: for each local stage its parameters, moments, FP8 meta
 * and AdamW step; on global rank 0 also the run-wide records.  OUT: *items
 * (malloc'ed array, caller frees with free()), *n.  The data pointers stay
 * valid while the rank lives.
 */
int qe_rank_pstate(qe_rank *r, qe_pstate_item **items, int *n);

/*
 * After every item was loaded into its data pointer: apply the run-wide
 * records (steps done, e_W) and rebuild the process-local objects
 * (qe_rank_restart: tokens 0, caches invalid, graphs dropped).
 */
int qe_rank_pstate_loaded(qe_rank *r);

/*
 * An item's bytes to and from host memory.  read: all it->bytes of the item
 * into host memory dst; write: it->bytes of host memory src into the item.
 * For an item on the device, a synchronous copy through the rank's backend
 * (the default stream), failing with QE_EIO when QE_FAULT asks for a copy
 * fault (runtime/core/fault.h); for an item in host memory, a memcpy.  The
 * caller names the item in its message.
 */
int qe_pstate_read(qe_rank *r, const qe_pstate_item *it, void *dst);
int qe_pstate_write(qe_rank *r, const qe_pstate_item *it, const void *src);

/*
 * Bytes [off, off + len) of an item into host memory dst: a save copies a
 * large item off the device in pieces.  Same copy and fault hook as
 * qe_pstate_read; QE_EINVAL when the range leaves the item.
 */
int qe_pstate_read_at(qe_rank *r, const qe_pstate_item *it, size_t off, size_t len, void *dst);
/*
 * len bytes of host memory src into bytes [off, off + len) of an item: a
 * restore loads a large host item in pieces on several threads.  For a host
 * item a memcpy, safe to call from several threads on disjoint ranges; for a
 * device item the copy and fault hook of qe_pstate_write.
 */
int qe_pstate_write_at(qe_rank *r, const qe_pstate_item *it, size_t off, size_t len, const void *src);

/*
 * Device staging of a restore: memory like the item's (the rank's device),
 * apart from it, that a restore fills while it reads and checks, and copies
 * into the item only once every rank agreed.  qe_pstate_has_device: 1 when
 * device items live in device memory of their own (not the cpu backend,
 * whose "device" is host memory: staging there is plain host memory).
 * stage_alloc: bytes of device memory (zeroed, as every device allocation);
 * stage_put: len bytes of host memory src to stage + off; stage_load: the
 * staging (it->bytes) into a device item (on cpu, any item), a copy on the
 * device; stage_free
 * (NULL is a no-op).  The copies are synchronous, through the default
 * stream, with the QE_FAULT=copy hook.
 */
int qe_pstate_has_device(qe_rank *r);
int qe_pstate_stage_alloc(qe_rank *r, size_t bytes, void **out);
int qe_pstate_stage_put(qe_rank *r, void *stage, size_t off, const void *src, size_t len);
int qe_pstate_stage_load(qe_rank *r, const qe_pstate_item *it, const void *stage);
void qe_pstate_stage_free(qe_rank *r, void *stage);

/*
 * Host memory that item copies run fastest through (the backend's
 * host_alloc: page-locked on cuda, plain on cpu), for staging that is
 * reused, such as an async checkpoint's snapshot pool.  Not zeroed.  It
 * belongs to the backend, not the rank (which may be gone when it is freed):
 * free it with qe_pstate_host_free on the same backend, qe_rank_backend(r).
 */
int qe_pstate_host_alloc(qe_backend *b, size_t bytes, void **out);
void qe_pstate_host_free(qe_backend *b, void *p);

/*
 * The rank's place.  qe_pstate_rank: the global rank (qe_rank_index);
 * qe_pstate_replica: its data-parallel replica, 0 for the first, whose
 * ranks write what the replicas share; qe_pstate_steps_done: optimizer
 * steps done (qe_rank_steps_done); qe_pstate_e_w: its e_W, the optimizer
 * commits counted (qe_rank_epochs); qe_pstate_seed: the run's data and
 * initialization seed, which a restore checks against the checkpoint's
 * "rng" record.  qe_pstate_backend: the rank's backend, to be passed to
 * qe_pstate_host_alloc/free (not owned; it outlives the rank).
 */
int qe_pstate_rank(const qe_rank *r);
int qe_pstate_replica(const qe_rank *r);
int64_t qe_pstate_steps_done(const qe_rank *r);
int64_t qe_pstate_e_w(const qe_rank *r);
uint64_t qe_pstate_seed(const qe_rank *r);
qe_backend *qe_pstate_backend(qe_rank *r);

/*
 * The checkpoint gate (qe_rank_quiescent): QE_OK at a quiescent optimizer
 * boundary, else QE_EPREMATURE naming what is pending (live tapes, arena
 * writes, reductions, device work).
 */
int qe_pstate_quiescent(qe_rank *r);

/*
 * The agreement: the comm calls the checkpoint service makes between ranks,
 * each forwarding to runtime/comm/comm.h's function of the same suffix, whose
 * comment is the full contract (every blocking call bounded by the comm's
 * time-out; any failure leaves the comm failed, later calls QE_ECOMM).
 *
 * qe_pstate_comm: the rank's comm (not owned; NULL in a world of one).  The
 * jobs over the stores get theirs from cli, with no rank.
 * qe_pstate_comm_rank, _world: this rank and the number of ranks.
 * qe_pstate_comm_timeout_ms: the time-out of every blocking call as the
 * comm was opened with it (QE_COMM_TIMEOUT_MS), the default (600 s) when
 * that was unset.
 * qe_pstate_comm_failed: 1 once the comm failed; qe_pstate_comm_failure
 * copies the first cause (or "") into buf (len bytes) and returns buf.
 * qe_pstate_svc_send/recv: the service lane, messages matched by tag apart
 * from training's; send copies buf; recv OUT *out (malloc'd, caller frees)
 * and *n.  qe_pstate_flush: wait until every queued send reached the kernel.
 * qe_pstate_bcast: n bytes of root's buf into buf on every rank.
 * qe_pstate_bcast_blob: rank 0's blob (any size) to every rank, OUT *out
 * (malloc'd, never NULL, caller frees) and *out_n on every rank.
 * qe_pstate_gather: every rank's blob to rank 0; OUT *out on rank 0 one blob
 * per rank, indexed by rank, read with qe_pstate_blob_data and _size and
 * freed with qe_pstate_blobs_free(*out, world); NULL on the other ranks.
 * qe_pstate_blob_data, _size: rank q's blob of a gather (never NULL, valid
 * until qe_pstate_blobs_free) and its bytes.  Returns 0 or a QE_* code
 * (QE_EINVAL, QE_ENOMEM, QE_ECOMM) where comm.h's function does.
 */
qe_comm *qe_pstate_comm(qe_rank *r);
int qe_pstate_comm_rank(const qe_comm *c);
int qe_pstate_comm_world(const qe_comm *c);
int qe_pstate_comm_timeout_ms(const qe_comm *c);
int qe_pstate_comm_failed(qe_comm *c);
const char *qe_pstate_comm_failure(qe_comm *c, char *buf, size_t len);
int qe_pstate_svc_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n);
int qe_pstate_svc_recv(qe_comm *c, int peer, uint32_t tag, void **out, size_t *n);
int qe_pstate_flush(qe_comm *c);
int qe_pstate_bcast(qe_comm *c, int root, void *buf, size_t n);
int qe_pstate_bcast_blob(qe_comm *c, const void *blob, size_t n, void **out, size_t *out_n);
int qe_pstate_gather(qe_comm *c, const void *blob, size_t n, qe_comm_blob **out);
const void *qe_pstate_blob_data(const qe_comm_blob *blobs, int q);
size_t qe_pstate_blob_size(const qe_comm_blob *blobs, int q);
void qe_pstate_blobs_free(qe_comm_blob *blobs, int count);

/*
 * What a checkpoint records of the run beside its items (the catalog's
 * topology, schedule and recipe columns): "pp=P dp=D chunks=V"; "SCHEDULE/
 * BACKWARD EXEC GRAD"; "model=PRESET fp8=FORMAT history=L margin=M algo=A
 * head=H", "model=PRESET precision=bf16" or "model=PRESET fp8=off".
 */
void qe_pstate_describe(const qe_rank *r, char *topo, size_t tl, char *sched, size_t sl, char *recipe, size_t rl);

/*
 * The layout of an "fp8_meta" item, for readers that label its rows
 * (inspect): [linear, role, history + 2] floats, qe_pstate_fp8_roles() roles
 * per linear, role k named qe_pstate_fp8_role_name(k) ("input", "weight",
 * "grad_output"), linear j of a stage of n linears labelled by
 * qe_pstate_fp8_linear_label ("qkv" ... "head", "b<k>.qkv" in a stage of
 * several blocks).
 */
int qe_pstate_fp8_roles(void);
const char *qe_pstate_fp8_role_name(int role);
void qe_pstate_fp8_linear_label(int lin, int nlinear, char *buf, size_t len);

/*
 * One fingerprint of a step (runtime/train/trace.h computes them): the row
 * the checkpoint service records in the catalog after the step
 * (ckpt_record_step), defined here so that ckpt takes the trace's own rows
 * through its one bridge into the runtime instead of a copy made field by
 * field.
 */
#define QE_TRACE_CATEGORY_MAX 24

typedef struct qe_trace_row {
	int64_t step;   /* steps done after this step (1-based) */
	int stage;
	char category[QE_TRACE_CATEGORY_MAX];
	uint64_t fp;
} qe_trace_row;

#endif
