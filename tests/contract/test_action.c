/*
 * test_action.c - the stage actions composed from the four relations, on a
 * ZB-V-like rank holding stages 0 and 3 that share one epoch state, one tape
 * pool (4 slots each) and one arena (2 matrix params each, M = 4):
 *   - exact counters after a known sequence (dI, then dW deferred out of LIFO
 *     order on stage 0; full B on stage 3);
 *   - every *_begin failure leaves every state unchanged (full snapshot);
 *   - end/fail semantics, the per-stage weight cache, and restart;
 *   - a stage that accumulates its non-matrix gradients takes dI and B in
 *     ascending microbatch order only, step after step, and names the
 *     microbatch it expected; a failed dI advances nothing.
 */
#include "runtime/contract/contract.h"
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NMB 4
#define NP 4

struct rank {
	qe_epoch_state ep;
	qe_tape_pool *pool;
	qe_arena *arena;
	void *base;
	size_t bytes;
	qe_stage_contract st[2]; /* stage 0: params 0,1; stage 3: params 2,3 */
	uint64_t tok[2];
	char payload[8][32];
};

static const qe_arena_param params[NP] = {
	{ "s0.FC1.W", 8, 4, QE_F32, QE_DEV_CPU },
	{ "s0.FC2.W", 4, 8, QE_F32, QE_DEV_CPU },
	{ "s3.FC1.W", 8, 4, QE_F32, QE_DEV_CPU },
	{ "s3.FC2.W", 4, 8, QE_F32, QE_DEV_CPU },
};

static void rank_init(struct rank *r)
{
	memset(r, 0, sizeof(*r));
	void *pl[8];
	for (int i = 0; i < 8; i++)
		pl[i] = r->payload[i];
	qe_epoch_init(&r->ep, 0);
	r->bytes = qe_arena_bytes(params, NP, NMB, QE_ARENA_PER_MB);
	r->base = aligned_alloc(QE_ARENA_ALIGN, r->bytes);
	CHECK_OK(qe_tape_pool_create(8, pl, &r->pool));
	CHECK_OK(qe_arena_create(params, NP, NMB, QE_ARENA_PER_MB, QE_ARENA_DIRECT, r->base, r->bytes, QE_DEV_CPU, &r->arena));
	CHECK_OK(qe_stage_contract_init(&r->st[0], 0, NMB, &r->ep, r->pool, r->arena, 0, 2));
	CHECK_OK(qe_stage_contract_init(&r->st[1], 3, NMB, &r->ep, r->pool, r->arena, 2, 4));
	CHECK_OK(qe_stage_contract_set_slots(&r->st[0], 0, 4));
	CHECK_OK(qe_stage_contract_set_slots(&r->st[1], 4, 4));
}

static void rank_free(struct rank *r)
{
	qe_arena_free(r->arena);
	qe_tape_pool_free(r->pool);
	free(r->base);
}

static void dests(struct rank *r, int stage, int m, qe_tensor *d)
{
	for (int k = 0; k < 2; k++)
		qe_arena_view(r->arena, 2 * stage + k, m, &d[k]);
}

static int f(struct rank *r, int i, int m, qe_tape_ref *ref, int *refresh)
{
	qe_action_ticket t;
	int rc = qe_action_f_begin(&r->st[i], r->tok[i], m, &t);
	if (rc)
		return rc;
	*ref = t.ref;
	if (refresh)
		*refresh = t.refresh_cache;
	CHECK(t.payload == r->payload[t.ref.slot], "F payload is the slot's storage");
	return qe_action_end(&r->st[i], &t, &r->tok[i]);
}

static int di(struct rank *r, int i, const qe_tape_ref *ref)
{
	qe_action_ticket t;
	int rc = qe_action_di_begin(&r->st[i], r->tok[i], ref, &t);
	return rc ? rc : qe_action_end(&r->st[i], &t, &r->tok[i]);
}

static int dw(struct rank *r, int i, const qe_tape_ref *ref, int m)
{
	qe_action_ticket t;
	qe_tensor d[2];
	dests(r, i, m, d);
	int rc = qe_action_dw_begin(&r->st[i], ref, m, d, &t);
	return rc ? rc : qe_action_end(&r->st[i], &t, &r->tok[i]);
}

static int bwd(struct rank *r, int i, const qe_tape_ref *ref)
{
	qe_action_ticket t;
	qe_tensor d[2];
	dests(r, i, ref->key.m, d);
	int rc = qe_action_b_begin(&r->st[i], r->tok[i], ref, d, &t);
	return rc ? rc : qe_action_end(&r->st[i], &t, &r->tok[i]);
}

/* ---- full-state snapshot ---- */
#define SNAP_MAX 256
struct snap {
	int n;
	int64_t v[SNAP_MAX];
};
static void put(struct snap *s, int64_t x)
{
	if (s->n < SNAP_MAX)
		s->v[s->n] = x;
	s->n++;
}
static void put_ref(struct snap *s, const qe_tape_ref *r)
{
	put(s, r->key.e), put(s, r->key.s), put(s, r->key.m), put(s, r->key.u), put(s, r->key.i);
	put(s, r->slot), put(s, (int64_t)r->gen);
}
static void take(struct snap *s, const struct rank *r)
{
	s->n = 0;
	for (int i = 0; i < 8; i++) {
		qe_tape_slot_info si;
		qe_tape_pool_slot_info(r->pool, i, &si);
		qe_tape_ref as_ref = { si.key, i, si.gen };
		put(s, si.live), put(s, si.mask), put_ref(s, &as_ref);
	}
	qe_tape_pool_stats ps;
	qe_tape_pool_get_stats(r->pool, &ps);
	put(s, ps.live), put(s, ps.peak_live), put(s, (int64_t)ps.allocs), put(s, (int64_t)ps.releases);
	put(s, (int64_t)ps.aborts), put(s, (int64_t)ps.consumes), put(s, (int64_t)ps.delayed_dw);
	put(s, r->ep.e_W);
	for (int i = 0; i < 2; i++) {
		const qe_stage_contract *sc = &r->st[i];
		put(s, sc->s), put(s, sc->M), put(s, (int64_t)sc->effect.next), put(s, (int64_t)sc->effect.transitions);
		put(s, sc->effect.stage), put(s, sc->cache.e_C), put(s, sc->cache.valid), put(s, sc->p_begin), put(s, sc->p_end);
		put(s, sc->slot_base), put(s, sc->slot_count), put(s, sc->in_flight), put_ref(s, &sc->in_flight_ref);
		put(s, (int64_t)r->tok[i]);
	}
	for (int p = 0; p < NP; p++)
		for (int m = 0; m < NMB; m++)
			put(s, qe_arena_is_written(r->arena, p, m));
	qe_arena_stats as;
	qe_arena_get_stats(r->arena, &as);
	put(s, (int64_t)as.writes_this_step), put(s, (int64_t)as.total_writes), put(s, (int64_t)as.steps);
}
static int same(const struct snap *a, const struct snap *b)
{
	return a->n == b->n && a->n <= SNAP_MAX && memcmp(a->v, b->v, (size_t)a->n * sizeof(int64_t)) == 0;
}

/* Expect `expr` to fail with `code` and change nothing. */
#define REFUSED(r, code, expr, what)                                                                          \
	do {                                                                                                  \
		struct snap b_, a_;                                                                           \
		take(&b_, (r));                                                                               \
		int rc2_ = (expr);                                                                            \
		take(&a_, (r));                                                                               \
		CHECK(rc2_ == (code), "%s: got %s, expected %s (%s)", (what), qe_errname(rc2_), qe_errname(code), \
		      qe_last_error());                                                                       \
		CHECK(same(&b_, &a_), "%s: refused call changed the state", (what));                          \
	} while (0)

static void test_counters(void)
{
	struct rank r;
	rank_init(&r);
	qe_tape_ref t0[NMB], t3[NMB];
	int refresh = -1;
	/* stage 0: all F, then dI in order with dW deferred out of LIFO order */
	for (int m = 0; m < NMB; m++) {
		CHECK_OK(f(&r, 0, m, &t0[m], &refresh));
		CHECK(refresh == (m == 0), "stage 0 F(%d) refresh %d", m, refresh);
		CHECK(t0[m].slot == m && t0[m].gen == 1 && t0[m].key.e == 0 && t0[m].key.s == 0 && t0[m].key.m == m,
		      "F(%d) ref", m);
	}
	CHECK_OK(di(&r, 0, &t0[0]));
	CHECK_OK(di(&r, 0, &t0[1]));
	CHECK_OK(dw(&r, 0, &t0[0], 0));
	CHECK_OK(di(&r, 0, &t0[2]));
	CHECK_OK(dw(&r, 0, &t0[2], 2));
	CHECK_OK(di(&r, 0, &t0[3]));
	CHECK_OK(dw(&r, 0, &t0[1], 1));
	CHECK_OK(dw(&r, 0, &t0[3], 3));
	/* stage 3: F then full B per microbatch, in its own slots */
	for (int m = 0; m < NMB; m++) {
		CHECK_OK(f(&r, 1, m, &t3[m], &refresh));
		CHECK(t3[m].slot == 4 + m && t3[m].key.s == 3, "stage 3 slot %d", t3[m].slot);
		CHECK_OK(bwd(&r, 1, &t3[m]));
	}
	qe_tape_pool_stats ps;
	qe_arena_stats as;
	qe_tape_pool_get_stats(r.pool, &ps);
	qe_arena_get_stats(r.arena, &as);
	CHECK(ps.peak_live == 4, "peak live %d, expected 4", ps.peak_live);
	CHECK(ps.delayed_dw == 3, "delayed dW %llu, expected 3", (unsigned long long)ps.delayed_dw);
	CHECK(ps.live == 0 && ps.allocs == 8 && ps.releases == 8 && ps.aborts == 0 && ps.consumes == 12,
	      "live %d allocs %llu releases %llu consumes %llu", ps.live, (unsigned long long)ps.allocs,
	      (unsigned long long)ps.releases, (unsigned long long)ps.consumes);
	CHECK(as.writes_this_step == 16 && as.total_writes == 16, "arena writes %llu", (unsigned long long)as.writes_this_step);
	/* every param is 8x4 f32 = 128 bytes, padded to 256, M = 4 views, 4 params */
	CHECK(as.capacity_bytes == 4u * 4u * 256u && as.view_bytes == 4u * 4u * 128u && r.bytes == as.capacity_bytes,
	      "arena bytes %zu / %zu", as.capacity_bytes, as.view_bytes);
	CHECK(r.tok[0] == 8 && r.st[0].effect.next == 8 && r.tok[1] == 8, "tokens %llu %llu",
	      (unsigned long long)r.tok[0], (unsigned long long)r.tok[1]);
	CHECK(r.st[0].cache.valid && r.st[0].cache.e_C == 0 && r.st[1].cache.valid, "caches valid at epoch 0");
	/* the optimizer step */
	CHECK_OK(qe_epoch_check_commit(&r.ep, r.pool, r.arena, 0));
	CHECK(qe_quiescence_check(&r.ep, r.pool, r.arena, 0, 0) == QE_EPREMATURE, "unreduced arena blocks checkpoint");
	qe_epoch_commit_optimizer(&r.ep);
	qe_arena_step_reset(r.arena);
	CHECK_OK(qe_quiescence_check(&r.ep, r.pool, r.arena, 0, 0));
	CHECK(r.ep.e_W == 1, "e_W 1");
	/* next step: stage 0 refreshes; stage 3's cache is its own and still stale */
	qe_tape_ref n;
	CHECK_OK(f(&r, 0, 0, &n, &refresh));
	CHECK(refresh == 1 && n.key.e == 1 && n.gen == 2, "step 2 F(0): refresh %d e %lld gen %llu", refresh,
	      (long long)n.key.e, (unsigned long long)n.gen);
	REFUSED(&r, QE_ESTALE_CACHE, f(&r, 1, 1, &n, NULL), "stage 3 F(1) with stage 0 refreshed only");
	CHECK(strstr(qe_last_error(), "stage 3 F(m=1): stale cache: K=(e=1,s=3,m=1,u=0,i=0)"), "msg %s", qe_last_error());
	rank_free(&r);
}

static void test_begin_failures(void)
{
	struct rank r;
	rank_init(&r);
	qe_action_ticket t;
	qe_tape_ref a, b, c;
	qe_tensor d[2];
	int refresh;

	/* F */
	REFUSED(&r, QE_EINVAL, qe_action_f_begin(&r.st[0], 0, NMB, &t), "F mb out of range");
	REFUSED(&r, QE_EINVAL, qe_action_f_begin(&r.st[0], 0, -1, &t), "F mb -1");
	REFUSED(&r, QE_EORDER, qe_action_f_begin(&r.st[0], 1, 0, &t), "F future token");
	REFUSED(&r, QE_ESTALE_CACHE, qe_action_f_begin(&r.st[0], 0, 1, &t), "F mb 1 on a cold cache");
	CHECK_OK(f(&r, 0, 0, &a, &refresh));
	REFUSED(&r, QE_EORDER, qe_action_f_begin(&r.st[0], 0, 1, &t), "F old token");
	REFUSED(&r, QE_EKEY_SLOT, qe_action_f_begin(&r.st[0], r.tok[0], 0, &t), "F of a live key");
	CHECK(strstr(qe_last_error(), "stage 0 F(m=0): key/slot mismatch") && strstr(qe_last_error(), "slot 0 gen 1"),
	      "msg %s", qe_last_error());
	/* slot reuse is never pre-emptive: shrink stage 0 to 1 slot, mb 1 lands on mb 0's live slot */
	CHECK_OK(qe_stage_contract_set_slots(&r.st[0], 0, 1));
	REFUSED(&r, QE_EBUSY, qe_action_f_begin(&r.st[0], r.tok[0], 1, &t), "F on an occupied slot");
	CHECK(qe_stage_contract_set_slots(&r.st[0], 6, 4) == QE_EINVAL, "slots outside the pool");
	CHECK_OK(qe_stage_contract_set_slots(&r.st[0], 0, 4));
	/* in flight: a second begin on the same stage is out of order, other stages are independent */
	CHECK_OK(qe_action_f_begin(&r.st[0], r.tok[0], 1, &t));
	qe_action_ticket t2;
	REFUSED(&r, QE_EORDER, qe_action_di_begin(&r.st[0], r.tok[0], &a, &t2), "begin while in flight");
	CHECK(strstr(qe_last_error(), "begun while F of K=(e=0,s=0,m=1,u=0,i=0) slot 1 gen 1 is in flight"), "msg %s",
	      qe_last_error());
	CHECK_OK(qe_action_end(&r.st[0], &t, &r.tok[0]));
	b = t.ref;
	REFUSED(&r, QE_EINVAL, qe_action_end(&r.st[0], &t, &r.tok[0]), "end twice");
	REFUSED(&r, QE_EINVAL, qe_action_fail(&r.st[0], &t), "fail after end");

	/* dI */
	REFUSED(&r, QE_EORDER, qe_action_di_begin(&r.st[0], r.tok[0] + 1, &a, &t), "dI wrong token");
	REFUSED(&r, QE_EKEY_SLOT, qe_action_di_begin(&r.st[1], r.tok[1], &a, &t), "dI of another stage's tape");
	CHECK(strstr(qe_last_error(), "belongs to stage 0, not stage 3"), "msg %s", qe_last_error());
	qe_tape_ref stale = a;
	stale.gen = 0;
	REFUSED(&r, QE_ESTALE_REF, qe_action_di_begin(&r.st[0], r.tok[0], &stale, &t), "dI stale gen");
	qe_tape_ref future;
	CHECK_OK(qe_tape_pool_alloc(r.pool, qe_key_make(1, 0, 2, 0, 0), 2, &future));
	REFUSED(&r, QE_ESTALE_REF, qe_action_di_begin(&r.st[0], r.tok[0], &future, &t), "dI of another epoch's tape");
	CHECK(strstr(qe_last_error(), "is of epoch 1, the current epoch is e_W=0"), "msg %s", qe_last_error());
	CHECK_OK(qe_tape_pool_abort(r.pool, &future));
	REFUSED(&r, QE_EINVAL, qe_action_di_begin(&r.st[0], r.tok[0], NULL, &t), "dI NULL ref");
	CHECK_OK(di(&r, 0, &a));
	REFUSED(&r, QE_EDUP_CONSUMER, qe_action_di_begin(&r.st[0], r.tok[0], &a, &t), "second dI");

	/* dW */
	dests(&r, 0, 0, d);
	REFUSED(&r, QE_EKEY_SLOT, qe_action_dw_begin(&r.st[0], &a, 1, d, &t), "dW explicit mb differs");
	REFUSED(&r, QE_EORDER, qe_action_dw_begin(&r.st[0], &b, 1, d, &t), "dW before dI");
	REFUSED(&r, QE_EINVAL, qe_action_dw_begin(&r.st[0], &a, 0, NULL, &t), "dW without destinations");
	qe_tensor bad[2] = { d[0], d[1] };
	qe_arena_view(r.arena, 0, 1, &bad[0]);
	REFUSED(&r, QE_EARENA, qe_action_dw_begin(&r.st[0], &a, 0, bad, &t), "dW aliased into mb 1");
	bad[0] = d[0];
	qe_arena_view(r.arena, 2, 0, &bad[1]); /* stage 3's view */
	bad[1] = qe_tensor_2d(bad[1].data, QE_F32, QE_DEV_CPU, 4, 8);
	REFUSED(&r, QE_EARENA, qe_action_dw_begin(&r.st[0], &a, 0, bad, &t), "dW into another stage's view");
	bad[1] = qe_tensor_2d(d[1].data, QE_F32, QE_DEV_CPU, 8, 4);
	REFUSED(&r, QE_ESHAPE, qe_action_dw_begin(&r.st[0], &a, 0, bad, &t), "dW wrong shape");
	CHECK(strstr(qe_last_error(), "stage 0 dW(m=0): gradient arena, write of K=(e=0,s=0,m=0,u=0,i=0) slot 0 gen 1: "
				      "arena bind s0.FC2.W mb 0: expected f32[4,8]@cpu, got f32[8,4]@cpu"),
	      "msg %s", qe_last_error());
	qe_arena_write_commit(r.arena, 1, 0); /* someone else wrote s0.FC2.W mb 0 */
	REFUSED(&r, QE_EARENA, qe_action_dw_begin(&r.st[0], &a, 0, d, &t), "dW duplicate write");
	/* the view written behind the contract's back: undo it by starting the step over */
	qe_arena_step_reset(r.arena);
	CHECK_OK(qe_action_dw_begin(&r.st[0], &a, 0, d, &t));
	CHECK(t.refresh_cache == 0 && t.token == r.tok[0], "dW carries no token");
	/* end re-checks: a write slipped in between begin and end: refused, nothing committed */
	qe_arena_write_commit(r.arena, 0, 0);
	REFUSED(&r, QE_EARENA, qe_action_end(&r.st[0], &t, &r.tok[0]), "end after a racing write");
	qe_arena_step_reset(r.arena);
	uint64_t tok_before = r.tok[0];
	CHECK_OK(qe_action_end(&r.st[0], &t, &r.tok[0]));
	CHECK(r.tok[0] == tok_before, "dW does not advance the token");
	REFUSED(&r, QE_EDUP_CONSUMER, qe_action_dw_begin(&r.st[0], &a, 0, d, &t), "dW after release");
	REFUSED(&r, QE_EDUP_CONSUMER, qe_action_di_begin(&r.st[0], r.tok[0], &a, &t), "dI after release");

	/* B */
	CHECK_OK(di(&r, 0, &b));
	dests(&r, 0, 1, d);
	REFUSED(&r, QE_EDUP_CONSUMER, qe_action_b_begin(&r.st[0], r.tok[0], &b, d, &t), "B after dI");
	CHECK_OK(f(&r, 0, 2, &c, NULL));
	dests(&r, 0, 2, d);
	REFUSED(&r, QE_EORDER, qe_action_b_begin(&r.st[0], r.tok[0] - 1, &c, d, &t), "B old token");
	qe_tensor wrong[2];
	dests(&r, 0, 3, wrong);
	REFUSED(&r, QE_EARENA, qe_action_b_begin(&r.st[0], r.tok[0], &c, wrong, &t), "B into mb 3's views");
	CHECK_OK(qe_action_b_begin(&r.st[0], r.tok[0], &c, d, &t));
	CHECK_OK(qe_action_end(&r.st[0], &t, &r.tok[0]));
	CHECK(qe_arena_is_written(r.arena, 0, 2) == 1 && qe_arena_is_written(r.arena, 1, 2) == 1, "B wrote mb 2");
	rank_free(&r);
}

static void test_fail_and_restart(void)
{
	struct rank r;
	rank_init(&r);
	qe_action_ticket t;
	qe_tape_ref a, b;
	qe_tensor d[2];
	/* F fails on the device: tape aborted, token and cache not committed */
	CHECK_OK(qe_action_f_begin(&r.st[0], r.tok[0], 0, &t));
	CHECK(t.refresh_cache == 1, "first F refreshes");
	CHECK_OK(qe_action_fail(&r.st[0], &t));
	CHECK(r.st[0].effect.next == 0 && !r.st[0].cache.valid && r.st[0].in_flight == QE_ACT_NONE, "nothing committed");
	CHECK(qe_tape_pool_check(r.pool, &t.ref, 0, NULL) == QE_ESTALE_REF, "tape aborted");
	/* retry succeeds: same slot, next generation */
	CHECK_OK(f(&r, 0, 0, &a, NULL));
	CHECK(a.slot == 0 && a.gen == 2, "retry gen %llu", (unsigned long long)a.gen);
	CHECK_OK(f(&r, 0, 1, &b, NULL));
	/* dI fails: tape aborted, token unchanged */
	uint64_t tok = r.tok[0];
	CHECK_OK(qe_action_di_begin(&r.st[0], r.tok[0], &a, &t));
	CHECK_OK(qe_action_fail(&r.st[0], &t));
	CHECK(r.st[0].effect.next == tok, "dI fail keeps the token");
	CHECK(qe_action_di_begin(&r.st[0], r.tok[0], &a, &t) == QE_ESTALE_REF, "aborted tape is gone");
	/* abort the step: purge epoch 0, restart the stage from a checkpoint at e_W = 0 */
	CHECK_OK(di(&r, 0, &b));
	dests(&r, 0, 1, d);
	CHECK_OK(qe_action_dw_begin(&r.st[0], &b, 1, d, &t));
	CHECK(qe_tape_pool_purge_epoch(r.pool, 0) == 1, "purge the in-flight tape");
	CHECK(qe_action_end(&r.st[0], &t, &r.tok[0]) == QE_ESTALE_REF, "end of a purged tape refused");
	CHECK(qe_arena_is_written(r.arena, 0, 1) == 0, "no write committed");
	CHECK(qe_action_fail(&r.st[0], &t) == QE_ESTALE_REF && r.st[0].in_flight == QE_ACT_NONE,
	      "fail of a purged tape clears in-flight");
	qe_arena_step_reset(r.arena);
	qe_epoch_restart(&r.ep, 0);
	qe_stage_contract_restart(&r.st[0]);
	r.tok[0] = 0;
	CHECK(r.st[0].effect.next == 0 && !r.st[0].cache.valid, "restart state");
	CHECK(qe_action_f_begin(&r.st[0], 0, 1, &t) == QE_ESTALE_CACHE, "after restart mb 1 may not run first");
	CHECK(qe_action_f_begin(&r.st[0], 5, 0, &t) == QE_EORDER, "pre-restart token refused");
	int refresh = 0;
	CHECK_OK(f(&r, 0, 0, &a, &refresh));
	CHECK(refresh == 1 && r.tok[0] == 1, "restart: first F refreshes, token 0 -> 1");
	CHECK_OK(f(&r, 0, 1, &b, &refresh));
	CHECK(refresh == 0, "then reuses");
	/* init validation */
	qe_stage_contract sc;
	CHECK(qe_stage_contract_init(&sc, 0, NMB, &r.ep, r.pool, r.arena, 3, 5) == QE_EINVAL, "params beyond arena");
	CHECK(qe_stage_contract_init(&sc, 0, NMB + 1, &r.ep, r.pool, r.arena, 0, 2) == QE_EINVAL, "NMB differs from arena");
	CHECK(qe_stage_contract_init(&sc, 0, NMB, NULL, r.pool, r.arena, 0, 2) == QE_EINVAL, "NULL ep");
	CHECK_OK(qe_stage_contract_init(&sc, 9, NMB, &r.ep, r.pool, NULL, 0, 0));
	CHECK(strcmp(qe_action_name(QE_ACT_DW), "dW") == 0 && strcmp(qe_consumer_name(QE_CONSUMER_FULL), "B") == 0,
	      "names");
	rank_free(&r);
}

static void test_nonmatrix_order(void)
{
	struct rank r;
	rank_init(&r);
	qe_stage_contract_accumulate_nonmatrix(&r.st[0]);
	qe_stage_contract_accumulate_nonmatrix(&r.st[1]);
	qe_tape_ref a[NMB], b[NMB];
	for (int step = 0; step < 2; step++) {
		for (int m = 0; m < NMB; m++) {
			CHECK_OK(f(&r, 0, m, &a[m], NULL));
			CHECK_OK(f(&r, 1, m, &b[m], NULL));
		}
		/* stage 0: mb 1 before mb 0 is refused, naming mb 0; nothing changes */
		struct snap before, after;
		take(&before, &r);
		CHECK(di(&r, 0, &a[1]) == QE_EORDER, "step %d: dI of mb 1 before mb 0 refused", step);
		CHECK(strstr(qe_last_error(), "mb 1") && strstr(qe_last_error(), "the next must be mb 0"),
		      "message names both microbatches: %s", qe_last_error());
		take(&after, &r);
		CHECK(same(&before, &after), "step %d: a refused dI changes nothing", step);
		/* a dI that fails on the device does not advance the order */
		qe_action_ticket t;
		CHECK_OK(qe_action_di_begin(&r.st[0], r.tok[0], &a[0], &t));
		CHECK_OK(qe_action_fail(&r.st[0], &t));
		CHECK(r.st[0].nm_next == 0, "step %d: a failed dI leaves mb 0 next", step);
		CHECK_OK(f(&r, 0, 0, &a[0], NULL)); /* the failed dI aborted mb 0's tape: F again */
		for (int m = 0; m < NMB; m++) {
			CHECK_OK(di(&r, 0, &a[m]));
			CHECK_OK(dw(&r, 0, &a[m], m));
		}
		/* stage 3, full backward: 0, 1, then 3 skips 2 */
		CHECK_OK(bwd(&r, 1, &b[0]));
		CHECK_OK(bwd(&r, 1, &b[1]));
		CHECK(bwd(&r, 1, &b[3]) == QE_EORDER, "step %d: B of mb 3 before mb 2 refused", step);
		CHECK_OK(bwd(&r, 1, &b[2]));
		CHECK_OK(bwd(&r, 1, &b[3]));
		/* the optimizer consumed the step: the next one starts at mb 0 again */
		qe_arena_step_reset(r.arena);
		qe_epoch_commit_optimizer(&r.ep);
		qe_stage_contract_step_reset(&r.st[0]);
		qe_stage_contract_step_reset(&r.st[1]);
	}
	rank_free(&r);
}

int main(void)
{
	test_counters();
	test_begin_failures();
	test_fail_and_restart();
	test_nonmatrix_order();
	return qe_test_done("test_action");
}
