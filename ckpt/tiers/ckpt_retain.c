/*
 * ckpt_retain.c - retention of local checkpoints while training runs
 * (`--ckpt-keep N`, ckpt_persist.h): the decision of `qeffect gc`
 * (ckq_gc_plan) taken by rank 0 at a checkpoint boundary, and every rank
 * collecting its own store.
 *
 * Order, as in gc and for the same reason: the catalog rows go first, in one
 * durable transaction, so no committed checkpoint ever lists a deleted chunk;
 * the list of chunks to keep is read after that delete and broadcast; each
 * rank then deletes from its own store (the only one it can reach: stores
 * are on the ranks' own disks) what the list lacks and what is older than
 * the grace period.  A crash between the two leaves orphan chunks, which the
 * next boundary or `qeffect gc` collects.  Replica copies live in the peers'
 * stores under the same hashes, so the one list serves every store.
 *
 * The caller pins the checkpoint being pushed (ckpt_persist_inflight): its
 * rows, and so its chunks, stay until the push is done.  The call must come
 * with no checkpoint write in flight on any rank (after the async drain):
 * chunks of a write in progress are in a store before the catalog lists
 * them, and only the grace period would protect them.
 */
#include "ckpt/tiers/ckpt_persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/query/ckpt_query_int.h"
#include "ckpt/session/ckpt_int.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

typedef struct keep_list {
	store_hash *v;
	size_t n, cap;
} keep_list;

static int keep_add(void *ctx, const unsigned char hash[16], uint64_t size)
{
	(void)size;
	keep_list *k = ctx;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 256;
		store_hash *nv = qe_realloc(k->v, cap * sizeof(*nv));
		if (!nv)
			return qe_fail(QE_ENOMEM, "retention: out of memory");
		k->v = nv;
		k->cap = cap;
	}
	memcpy(k->v[k->n++].b, hash, STORE_HASH_BYTES);
	return 0;
}

/* Rank 0: drop what the policy does not keep (one durable transaction), then list what stays. */
static int drop_rows(ckpt_session *s, int keep, const int64_t *pins, size_t npins, keep_list *kl,
		     ckpt_retain_result *res)
{
	cat_ckpt_rows l = { 0 };
	ckpt_gc_report g;
	memset(&g, 0, sizeof(g));
	ckpt_gc_policy p = { .keep_last = keep, .pins = pins, .n_pins = npins, .grace_s = 600 };
	int rc = cat_ckpt_list(s->cat, s->run_id, &l);
	if (!rc)
		rc = ckq_gc_plan(&l, &p, &g);
	if (!rc && g.dropped) {
		if (!(rc = cat_begin_durable(s->cat))) {
			for (size_t i = 0; i < g.n && !rc; i++)
				if (g.items[i].drop)
					rc = cat_ckpt_delete(s->cat, g.items[i].id);
			if (rc) {
				int keep_rc = rc;
				cat_rollback(s->cat);
				rc = keep_rc;
			} else {
				rc = cat_commit(s->cat);
			}
		}
		if (rc)
			rc = qe_fail_ctx(rc, "retention: dropping old checkpoints from the catalog (nothing was dropped)");
	}
	if (!rc) {
		res->dropped = g.dropped;
		res->kept = g.kept;
		for (size_t i = 0; i < g.n; i++)
			if (g.items[i].drop)
				qe_log(QE_LOG_INFO, "retention: dropped checkpoint step %lld (%s)", (long long)g.items[i].step,
				       g.items[i].why);
		rc = cat_referenced_chunks(s->cat, keep_add, kl);
	}
	ckpt_gc_report_free(&g);
	cat_ckpt_rows_free(&l);
	return rc;
}

int ckpt_retain_local(ckpt_session *s, qe_rank *r, int keep, const int64_t *pins, size_t npins, uint64_t grace_s,
		      ckpt_retain_result *out)
{
	ckpt_retain_result res;
	memset(&res, 0, sizeof(res));
	if (out)
		*out = res;
	if (keep < 1)
		return qe_fail(QE_EINVAL, "retention: keeps at least the latest checkpoint, got %d", keep);
	int rank = qe_pstate_rank(r), rc;
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm);
	keep_list kl = { 0 };
	/* rank 0's answer: a word, then the hashes to keep */
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	unsigned char *blob = NULL;
	size_t blen = 0;
	if (rank == 0) {
		rc = s->cat ? drop_rows(s, keep, pins, npins, &kl, &res) : qe_fail(QE_EINVAL, "retention: rank 0 has no catalog");
		ckpt__word_set(&w, rc, NULL);
		w.bytes = rc ? 0 : kl.n;
		blen = sizeof(w) + (size_t)w.bytes * sizeof(store_hash);
		if (!(blob = qe_malloc(blen))) {
			free(kl.v);
			return qe_fail(QE_ENOMEM, "retention: out of memory");
		}
		memcpy(blob, &w, sizeof(w));
		if (w.bytes)
			memcpy(blob + sizeof(w), kl.v, (size_t)w.bytes * sizeof(store_hash));
	}
	free(kl.v);
	void *got = blob;
	size_t glen = blen;
	if (world > 1) {
		rc = qe_pstate_bcast_blob(comm, blob, blen, &got, &glen);
		free(blob);
		if (rc)
			return qe_fail_ctx(rc, "retention: hearing rank 0's list of chunks to keep");
	}
	if (glen < sizeof(w)) {
		free(got);
		return qe_fail(QE_ECOMM, "retention: rank 0's answer is %zu bytes", glen);
	}
	memcpy(&w, got, sizeof(w));
	w.msg[sizeof(w.msg) - 1] = 0;
	if (w.rc || glen != sizeof(w) + (size_t)w.bytes * sizeof(store_hash)) {
		free(got);
		/* Nothing was dropped; every rank sees the same failure, which does not stop training. */
		return w.rc ? qe_fail((int)w.rc, "retention: %s", w.msg)
			    : qe_fail(QE_ECOMM, "retention: rank 0's list is garbled (%zu bytes)", glen);
	}
	rc = QE_OK;
	if (s->st) {
		store_gc_result g;
		memset(&g, 0, sizeof(g));
		rc = store_gc(s->st, (const store_hash *)((unsigned char *)got + sizeof(w)), (size_t)w.bytes, grace_s, 0, &g);
		if (rc) {
			rc = qe_fail_ctx(rc, "retention: deleting unreferenced chunks of rank %d's store on host '%s' (the "
					     "catalog is already updated: they are collected later)",
					 rank, s->host);
		} else {
			res.chunks_deleted = g.deleted;
			res.bytes_reclaimed = g.bytes_reclaimed;
			res.chunks_young = g.young;
		}
	}
	free(got);
	if (out)
		*out = res;
	return rc;
}
