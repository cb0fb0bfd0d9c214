/*
 * tape_pool.c - the tape slot pool: which microbatch owns retained backward
 * work (tape T_m, deferred task Q_m), and for how long.
 *
 * The pool is a fixed array of slots; a slot's storage is the caller's and is
 * reused across microbatches and steps, as captured CUDA graphs require.  What
 * makes reuse safe is the generation: every allocation increments it, every
 * consumer presents the generation it was handed, and a slot keeps its
 * generation (and the key and consumer mask of its last tape) after release,
 * so a reference that outlived its tape is recognized as stale - even when
 * the slot has since been reused for another key (ABA) - and a second dI or dW
 * after the release is still recognized as a duplicate consumer.
 */
#include "runtime/contract/contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QE_TAPE_POOL_MAX 4096

enum slot_end { SLOT_NEVER = 0, SLOT_LIVE, SLOT_RELEASED, SLOT_ABORTED };

struct tape_slot {
	int live;
	int mask;
	uint64_t gen;
	qe_key key;
	enum slot_end state;
};

struct qe_tape_pool {
	int nslots;
	struct tape_slot *slots;
	void **payloads;
	qe_dw_rule dw;        /* the delayed-dW rule over this pool's consumer commits */
	qe_tape_pool_stats st;
};

const char *qe_consumer_name(int consumer)
{
	switch (consumer) {
	case QE_CONSUMER_DI:
		return qe_action_name(QE_ACT_DI);
	case QE_CONSUMER_DW:
		return qe_action_name(QE_ACT_DW);
	case QE_CONSUMER_FULL:
		return qe_action_name(QE_ACT_B);
	}
	return "?";
}

static const char *mask_text(int mask)
{
	static const char *const t[4] = { "none", "dI", "dW", "dI+dW" };
	return t[mask & 3];
}

int qe_tape_pool_create(int nslots, void *const *payloads, qe_tape_pool **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "tape pool: no output pointer");
	*out = NULL;
	if (nslots < 1 || nslots > QE_TAPE_POOL_MAX)
		return qe_fail(QE_EINVAL, "tape pool: %d slots requested (1..%d)", nslots, QE_TAPE_POOL_MAX);
	qe_tape_pool *p = calloc(1, sizeof(*p));
	if (!p)
		goto fail_pool;
	p->slots = calloc((size_t)nslots, sizeof(*p->slots));
	if (!p->slots)
		goto fail_slots;
	p->payloads = calloc((size_t)nslots, sizeof(*p->payloads));
	if (!p->payloads)
		goto fail_payloads;
	for (int i = 0; payloads && i < nslots; i++)
		p->payloads[i] = payloads[i];
	p->nslots = nslots;
	p->st.nslots = nslots;
	qe_dw_rule_reset(&p->dw);
	*out = p;
	return QE_OK;

fail_payloads:
	free(p->slots);
fail_slots:
	free(p);
fail_pool:
	return qe_fail(QE_ENOMEM, "tape pool: out of memory for %d slots", nslots);
}

void qe_tape_pool_free(qe_tape_pool *pool)
{
	if (!pool)
		return;
	free(pool->payloads);
	free(pool->slots);
	free(pool);
}

/* The slot holding live key k, or -1. */
static int find_live(const qe_tape_pool *pool, const qe_key *k)
{
	for (int i = 0; i < pool->nslots; i++)
		if (pool->slots[i].live && qe_key_equal(&pool->slots[i].key, k))
			return i;
	return -1;
}

int qe_tape_pool_alloc(qe_tape_pool *pool, qe_key k, int slot_hint, qe_tape_ref *out)
{
	char kb[QE_KEY_FMT_LEN], lb[QE_KEY_FMT_LEN];
	if (!pool || !out)
		return qe_fail(QE_EINVAL, "tape pool alloc: NULL argument");
	qe_key_format(&k, kb, sizeof(kb));
	if (slot_hint < -1 || slot_hint >= pool->nslots)
		return qe_fail(QE_EINVAL, "tape pool alloc %s: slot hint %d outside 0..%d", kb, slot_hint,
			       pool->nslots - 1);
	int held = find_live(pool, &k);
	if (held >= 0)
		return qe_fail(QE_EKEY_SLOT, "key/slot mismatch: cannot allocate %s: %s is live in slot %d gen %llu",
			       kb, kb, held, (unsigned long long)pool->slots[held].gen);
	int p = slot_hint;
	if (p >= 0 && pool->slots[p].live)
		return qe_fail(QE_EBUSY,
			       "tape pool: cannot allocate %s in slot %d: occupied by %s gen %llu (consumed: %s); "
			       "a live slot is never pre-empted",
			       kb, p, qe_key_format(&pool->slots[p].key, lb, sizeof(lb)),
			       (unsigned long long)pool->slots[p].gen, mask_text(pool->slots[p].mask));
	if (p < 0) {
		for (int i = 0; i < pool->nslots && p < 0; i++)
			if (!pool->slots[i].live)
				p = i;
		if (p < 0)
			return qe_fail(QE_EBUSY, "tape pool: cannot allocate %s: all %d slots are live", kb,
				       pool->nslots);
	}
	struct tape_slot *sl = &pool->slots[p];
	sl->gen++;
	sl->live = 1;
	sl->mask = 0;
	sl->key = k;
	sl->state = SLOT_LIVE;
	pool->st.allocs++;
	pool->st.live++;
	if (pool->st.live > pool->st.peak_live)
		pool->st.peak_live = pool->st.live;
	out->key = k;
	out->slot = p;
	out->gen = sl->gen;
	return QE_OK;
}

int qe_tape_pool_check(const qe_tape_pool *pool, const qe_tape_ref *r, int consumer, void **payload_out)
{
	char rb[2 * QE_KEY_FMT_LEN], lb[QE_KEY_FMT_LEN];
	if (!pool || !r)
		return qe_fail(QE_EINVAL, "tape pool check: NULL argument");
	if (consumer < 0 || consumer > QE_CONSUMER_FULL)
		return qe_fail(QE_EINVAL, "tape pool check: consumer mask %d is not dI, dW or B", consumer);
	qe_tape_ref_format(r, rb, sizeof(rb));
	const char *who = consumer ? qe_consumer_name(consumer) : "reference";
	if (r->slot < 0 || r->slot >= pool->nslots)
		return qe_fail(QE_EKEY_SLOT, "key/slot mismatch: %s of %s: the pool has no slot %d (%d slots)", who,
			       rb, (int)r->slot, pool->nslots);
	const struct tape_slot *sl = &pool->slots[r->slot];
	qe_key_format(&sl->key, lb, sizeof(lb));
	if (r->gen != sl->gen)
		return qe_fail(QE_ESTALE_REF,
			       "stale reference: %s presents ref gen %llu slot %d, live gen %llu, key %s (%s); "
			       "ref was %s; the live tape is untouched",
			       who, (unsigned long long)r->gen, (int)r->slot, (unsigned long long)sl->gen,
			       sl->gen ? lb : "none", sl->live ? "live" : "free", rb);
	if (!qe_key_equal(&r->key, &sl->key))
		return qe_fail(QE_EKEY_SLOT, "key/slot mismatch: %s of %s: slot %d gen %llu holds %s", who, rb,
			       (int)r->slot, (unsigned long long)sl->gen, lb);
	if (consumer & sl->mask)
		return qe_fail(QE_EDUP_CONSUMER, "duplicate consumer: %s of %s: already consumed by %s%s", who, rb,
			       mask_text(sl->mask), sl->live ? "" : " and released");
	if (!sl->live)
		return qe_fail(QE_ESTALE_REF, "stale reference: %s of %s: the tape was %s", who, rb,
			       sl->state == SLOT_ABORTED ? "aborted" : "released");
	if (payload_out)
		*payload_out = pool->payloads[r->slot];
	return QE_OK;
}

static void free_slot(qe_tape_pool *pool, struct tape_slot *sl, enum slot_end how)
{
	sl->live = 0;
	sl->state = how;
	pool->st.live--;
	if (how == SLOT_RELEASED)
		pool->st.releases++;
	else
		pool->st.aborts++;
}

int qe_tape_pool_commit(qe_tape_pool *pool, const qe_tape_ref *r, int consumer)
{
	if (consumer == 0)
		return qe_fail(QE_EINVAL, "tape pool commit: no consumer given");
	int rc = qe_tape_pool_check(pool, r, consumer, NULL);
	if (rc)
		return rc;
	struct tape_slot *sl = &pool->slots[r->slot];
	qe_action_kind k = consumer == QE_CONSUMER_DI ? QE_ACT_DI : consumer == QE_CONSUMER_DW ? QE_ACT_DW : QE_ACT_B;
	pool->st.consumes++;
	pool->st.delayed_dw += qe_dw_rule_note(&pool->dw, k, r->slot, (int64_t)sl->gen);
	sl->mask |= consumer;
	if (sl->mask == QE_CONSUMER_FULL)
		free_slot(pool, sl, SLOT_RELEASED);
	return QE_OK;
}

int qe_tape_pool_abort(qe_tape_pool *pool, const qe_tape_ref *r)
{
	int rc = qe_tape_pool_check(pool, r, 0, NULL);
	if (rc)
		return rc;
	free_slot(pool, &pool->slots[r->slot], SLOT_ABORTED);
	return QE_OK;
}

int qe_tape_pool_purge_epoch(qe_tape_pool *pool, int64_t e)
{
	int n = 0;
	if (!pool)
		return 0;
	for (int i = 0; i < pool->nslots; i++) {
		struct tape_slot *sl = &pool->slots[i];
		if (sl->live && sl->key.e == e) {
			free_slot(pool, sl, SLOT_ABORTED);
			n++;
		}
	}
	return n;
}

int qe_tape_pool_live_refs(const qe_tape_pool *pool, int64_t e, qe_tape_ref *refs, int max)
{
	int n = 0;
	if (!pool)
		return 0;
	for (int i = 0; i < pool->nslots; i++) {
		const struct tape_slot *sl = &pool->slots[i];
		if (!sl->live || (e != QE_EPOCH_ANY && sl->key.e != e))
			continue;
		if (refs && n < max) {
			refs[n].key = sl->key;
			refs[n].slot = i;
			refs[n].gen = sl->gen;
		}
		n++;
	}
	return n;
}

int qe_tape_pool_slot_info(const qe_tape_pool *pool, int slot, qe_tape_slot_info *out)
{
	if (!pool || !out || slot < 0 || slot >= pool->nslots)
		return qe_fail(QE_EINVAL, "tape pool: no slot %d", slot);
	const struct tape_slot *sl = &pool->slots[slot];
	out->live = sl->live;
	out->mask = sl->mask;
	out->gen = sl->gen;
	out->key = sl->key;
	return QE_OK;
}

void qe_tape_pool_get_stats(const qe_tape_pool *pool, qe_tape_pool_stats *out)
{
	if (pool)
		*out = pool->st;
	else
		memset(out, 0, sizeof(*out));
}
