/*
 * inject.c - scripted contract violations, one per family and then some.
 *
 * Each scenario builds a fresh one-stage rank (stage 1, M = 4 microbatches, a
 * 2-slot tape pool so slots are reused within a step, an arena of two matrix
 * gradients in host memory, accumulating unless the row says per-mb), runs a short sequence of valid stage actions,
 * then exactly one invalid operation, then valid follow-up operations.  A
 * scenario passes when the first failure of the script is the injected
 * operation with the expected code, the whole contract state (every slot's
 * key/generation/mask, pool counters, token, epochs, the stage's cache,
 * arena bitmap and counters) is bit-for-bit what it was before it, and the
 * follow-up operations succeed.  `qeffect selftest inject` prints these rows;
 * tests/contract runs them too.
 */
#include "runtime/contract/contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENV_S 1
#define ENV_M 4
#define ENV_SLOTS 2
#define ENV_NP 2

struct env {
	qe_epoch_state ep;
	qe_tape_pool *pool;
	qe_arena *arena;
	void *base;
	qe_stage_contract sc;
	uint64_t tok; /* the executor's copy of the stage's effect token */
	char payload[ENV_SLOTS][64];
};

static int env_init(struct env *e, qe_arena_layout layout)
{
	static const qe_arena_param params[ENV_NP] = {
		{ "FC1.W", 8, 4, QE_F32, QE_DEV_CPU },
		{ "FC2.W", 4, 8, QE_F32, QE_DEV_CPU },
	};
	memset(e, 0, sizeof(*e));
	void *payloads[ENV_SLOTS] = { e->payload[0], e->payload[1] };
	size_t bytes = qe_arena_bytes(params, ENV_NP, ENV_M, layout);
	int rc;
	qe_epoch_init(&e->ep, 0);
	e->base = aligned_alloc(QE_ARENA_ALIGN, bytes);
	if (!e->base)
		return qe_fail(QE_ENOMEM, "inject: no memory for the arena");
	memset(e->base, 0, bytes);
	if ((rc = qe_tape_pool_create(ENV_SLOTS, payloads, &e->pool)))
		goto fail_pool;
	if ((rc = qe_arena_create(params, ENV_NP, ENV_M, layout, QE_ARENA_DIRECT, e->base, bytes, QE_DEV_CPU, &e->arena)))
		goto fail_arena;
	if ((rc = qe_stage_contract_init(&e->sc, ENV_S, ENV_M, &e->ep, e->pool, e->arena, 0, ENV_NP)))
		goto fail_stage;
	return QE_OK;

fail_stage:
	qe_arena_free(e->arena);
fail_arena:
	qe_tape_pool_free(e->pool);
fail_pool:
	free(e->base);
	return rc;
}

static void env_free(struct env *e)
{
	qe_arena_free(e->arena);
	qe_tape_pool_free(e->pool);
	free(e->base);
}

/* ---- the operations a script is made of: each a whole begin/end pair ---- */

static void views(struct env *e, int m, qe_tensor *dests)
{
	for (int p = 0; p < ENV_NP; p++)
		qe_arena_view(e->arena, p, m, &dests[p]);
}

static int op_f(struct env *e, int m, qe_tape_ref *ref)
{
	qe_action_ticket t;
	int rc = qe_action_f_begin(&e->sc, e->tok, m, &t);
	if (rc)
		return rc;
	*ref = t.ref;
	return qe_action_end(&e->sc, &t, &e->tok);
}

static int op_di_tok(struct env *e, const qe_tape_ref *ref, uint64_t tok)
{
	qe_action_ticket t;
	int rc = qe_action_di_begin(&e->sc, tok, ref, &t);
	return rc ? rc : qe_action_end(&e->sc, &t, &e->tok);
}

static int op_di(struct env *e, const qe_tape_ref *ref)
{
	return op_di_tok(e, ref, e->tok);
}

static int op_dw_dests(struct env *e, const qe_tape_ref *ref, int m, const qe_tensor *dests)
{
	qe_action_ticket t;
	int rc = qe_action_dw_begin(&e->sc, ref, m, dests, &t);
	return rc ? rc : qe_action_end(&e->sc, &t, &e->tok);
}

static int op_dw(struct env *e, const qe_tape_ref *ref, int m)
{
	qe_tensor d[ENV_NP];
	views(e, m, d);
	return op_dw_dests(e, ref, m, d);
}

/* dW whose physical action fails: the tape is aborted, nothing is written. */
static int op_dw_device_fails(struct env *e, const qe_tape_ref *ref, int m)
{
	qe_tensor d[ENV_NP];
	qe_action_ticket t;
	views(e, m, d);
	int rc = qe_action_dw_begin(&e->sc, ref, m, d, &t);
	return rc ? rc : qe_action_fail(&e->sc, &t);
}

/* The optimizer step: check, reduce (nothing to do here), commit, reset the arena. */
static int op_commit(struct env *e)
{
	int rc = qe_epoch_check_commit(&e->ep, e->pool, e->arena, 0);
	if (rc)
		return rc;
	qe_epoch_commit_optimizer(&e->ep);
	qe_arena_step_reset(e->arena);
	return QE_OK;
}

static int op_checkpoint(struct env *e)
{
	return qe_quiescence_check(&e->ep, e->pool, e->arena, 0, 0);
}

/* ---- snapshots: every piece of contract state, flattened to integers ---- */

#define SNAP_MAX 128
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

static void take(struct snap *s, const struct env *e)
{
	s->n = 0;
	for (int i = 0; i < ENV_SLOTS; i++) {
		qe_tape_slot_info si;
		qe_tape_pool_slot_info(e->pool, i, &si);
		put(s, si.live), put(s, si.mask), put(s, (int64_t)si.gen);
		put(s, si.key.e), put(s, si.key.s), put(s, si.key.m), put(s, si.key.u), put(s, si.key.i);
	}
	qe_tape_pool_stats ps;
	qe_tape_pool_get_stats(e->pool, &ps);
	put(s, ps.live), put(s, ps.peak_live), put(s, (int64_t)ps.allocs), put(s, (int64_t)ps.releases);
	put(s, (int64_t)ps.aborts), put(s, (int64_t)ps.consumes), put(s, (int64_t)ps.delayed_dw);
	put(s, (int64_t)e->sc.effect.next), put(s, (int64_t)e->sc.effect.transitions), put(s, (int64_t)e->tok);
	put(s, e->ep.e_W);
	put(s, e->sc.cache.e_C), put(s, e->sc.cache.valid), put(s, e->sc.in_flight);
	for (int p = 0; p < ENV_NP; p++)
		for (int m = 0; m < ENV_M; m++)
			put(s, qe_arena_is_written(e->arena, p, m));
	qe_arena_stats as;
	qe_arena_get_stats(e->arena, &as);
	put(s, (int64_t)as.writes_this_step), put(s, (int64_t)as.total_writes), put(s, (int64_t)as.steps);
}

static int snap_equal(const struct snap *a, const struct snap *b)
{
	return a->n == b->n && a->n <= SNAP_MAX && memcmp(a->v, b->v, (size_t)a->n * sizeof(a->v[0])) == 0;
}

/* ---- the script runner ---- */

struct run {
	qe_inject_result *r;
	int idx;
	struct snap before;
};

static void run_init(struct run *run, qe_inject_result *r, const char *name, int expected)
{
	memset(r, 0, sizeof(*r));
	r->name = name;
	r->expected = expected;
	r->got = QE_OK;
	r->invalid_index = -1;
	r->first_fail_index = -1;
	r->followup_ok = 1;
	run->r = r;
	run->idx = 0;
	qe_clear_error();
}

/* One operation of the script (valid or the injected one). */
static void step(struct run *run, int rc)
{
	if (rc && run->r->first_fail_index < 0) {
		run->r->first_fail_index = run->idx;
		run->r->got = rc;
		snprintf(run->r->message, sizeof(run->r->message), "%s", qe_last_error());
	}
	run->idx++;
}

/* The next step is the injected one: remember where, and the state before it. */
static void inject(struct run *run, const struct env *e, const char *text)
{
	run->r->invalid_index = run->idx;
	snprintf(run->r->invalid_op, sizeof(run->r->invalid_op), "%s", text);
	take(&run->before, e);
}

/* Right after the injected step: was it rejected there, and did it change anything? */
static void settle(struct run *run, const struct env *e)
{
	struct snap after;
	take(&after, e);
	run->r->preserved = snap_equal(&run->before, &after);
	run->r->rejected = run->r->first_fail_index == run->r->invalid_index && run->r->got == run->r->expected;
}

/* A valid follow-up operation: it must still succeed. */
static void follow(struct run *run, int rc)
{
	if (rc && run->r->followup_ok) {
		run->r->followup_ok = 0;
		size_t n = strlen(run->r->message);
		snprintf(run->r->message + n, sizeof(run->r->message) - n, " | follow-up failed: %s", qe_last_error());
	}
	run->idx++;
}

/* A whole microbatch (F, dI, dW right after it) as three script steps. */
static void step_mb(struct run *run, struct env *e, int m, qe_tape_ref *ref)
{
	step(run, op_f(e, m, ref));
	step(run, op_di(e, ref));
	step(run, op_dw(e, ref, m));
}

static void follow_mb(struct run *run, struct env *e, int m, qe_tape_ref *ref)
{
	follow(run, op_f(e, m, ref));
	follow(run, op_di(e, ref));
	follow(run, op_dw(e, ref, m));
}

/* ---- the scenarios ---- */

static void sc_stale_aba(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, r2 = { 0 };
	step_mb(run, e, 0, &r0); /* slot 0 gen 1: F, dI, dW: released */
	step(run, op_f(e, 2, &r2));  /* slot 0 reused: gen 2 */
	inject(run, e, "dI with the old ref of mb 0 (slot 0 gen 1); slot 0 reused (gen 2)");
	step(run, op_di(e, &r0));
	settle(run, e);
	follow(run, op_di(e, &r2)); /* the live tape is intact and consumable */
	follow(run, op_dw(e, &r2, 2));
}

static void sc_dup_consumer(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	step(run, op_f(e, 0, &r0));
	step(run, op_di(e, &r0));
	inject(run, e, "second dI of mb 0");
	step(run, op_di(e, &r0));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
}

static void sc_dup_after_release(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, r1 = { 0 };
	step_mb(run, e, 0, &r0);
	inject(run, e, "second dW of mb 0 after its tape was released");
	step(run, op_dw(e, &r0, 0));
	settle(run, e);
	follow_mb(run, e, 1, &r1);
}

static void sc_key_slot(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	step(run, op_f(e, 0, &r0));
	step(run, op_di(e, &r0));
	inject(run, e, "deferred dW task for mb 1 handed the tape of mb 0");
	step(run, op_dw(e, &r0, 1));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
}

static void sc_token(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, r1 = { 0 };
	step(run, op_f(e, 0, &r0));    /* token 0 -> 1 */
	step(run, op_f(e, 1, &r1));    /* 1 -> 2 */
	step(run, op_di(e, &r1));      /* 2 -> 3 */
	step(run, op_dw(e, &r1, 1));   /* no token */
	inject(run, e, "dI of mb 0 presenting the old token 1 (expected 3)");
	step(run, op_di_tok(e, &r0, 1));
	settle(run, e);
	follow(run, op_di(e, &r0));
	follow(run, op_dw(e, &r0, 0));
}

static void sc_dw_before_di(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	step(run, op_f(e, 0, &r0));
	inject(run, e, "dW of mb 0 before its dI");
	step(run, op_dw(e, &r0, 0));
	settle(run, e);
	follow(run, op_di(e, &r0));
	follow(run, op_dw(e, &r0, 0));
}

static void sc_stale_cache(struct run *run, struct env *e)
{
	qe_tape_ref r[ENV_M], n0 = { 0 }, n1 = { 0 };
	memset(r, 0, sizeof(r));
	for (int m = 0; m < ENV_M; m++)
		step_mb(run, e, m, &r[m]);
	step(run, op_commit(e)); /* e_W 0 -> 1: the cache (e_C 0) is stale */
	inject(run, e, "F of mb 1 after the optimizer commit, without the refresh of mb 0");
	step(run, op_f(e, 1, &n1));
	settle(run, e);
	follow(run, op_f(e, 0, &n0)); /* the first F refreshes */
	follow(run, op_f(e, 1, &n1));
}

static void sc_missing_write(struct run *run, struct env *e)
{
	qe_tape_ref r[ENV_M];
	memset(r, 0, sizeof(r));
	for (int m = 0; m < 3; m++)
		step_mb(run, e, m, &r[m]);
	step(run, op_f(e, 3, &r[3]));
	step(run, op_di(e, &r[3]));
	step(run, op_dw_device_fails(e, &r[3], 3)); /* tape aborted, view of mb 3 never written */
	inject(run, e, "optimizer commit with the views of mb 3 not written");
	step(run, op_commit(e));
	settle(run, e);
	follow_mb(run, e, 3, &r[3]); /* redo mb 3, then the commit goes through */
	follow(run, op_commit(e));
}

static void sc_dup_write(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, again = { 0 }, r1 = { 0 };
	step_mb(run, e, 0, &r0);
	step(run, op_f(e, 0, &again)); /* mb 0 run a second time in the same step */
	step(run, op_di(e, &again));
	inject(run, e, "second dW write of the views of mb 0 in one step");
	step(run, op_dw(e, &again, 0));
	settle(run, e);
	follow(run, qe_tape_pool_abort(e->pool, &again)); /* the tape is still live */
	follow_mb(run, e, 1, &r1);
}

static void sc_aliased(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	qe_tensor d[ENV_NP];
	step(run, op_f(e, 0, &r0));
	step(run, op_di(e, &r0));
	views(e, 0, d);
	qe_arena_view(e->arena, 0, 1, &d[0]); /* a stale captured pointer: FC1.W of mb 1 */
	inject(run, e, "dW of mb 0 writing FC1.W into the view of mb 1");
	step(run, op_dw_dests(e, &r0, 0, d));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
}

/* Accumulating: one view per parameter, so the stale pointer is into another parameter's view. */
static void sc_aliased_param(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	qe_tensor d[ENV_NP], other;
	step(run, op_f(e, 0, &r0));
	step(run, op_di(e, &r0));
	views(e, 0, d);
	qe_arena_view(e->arena, 1, 0, &other);
	d[0] = qe_tensor_2d(other.data, QE_F32, QE_DEV_CPU, 8, 4); /* FC1.W's shape at FC2.W's view */
	inject(run, e, "dW of mb 0 writing FC1.W into the view of FC2.W");
	step(run, op_dw_dests(e, &r0, 0, d));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
}

/*
 * Accumulating: dW of mb 1 before dW of mb 0 would add into a view mb 0 has
 * not initialized (and change the fp32 sum order).  Refused; then mb 0 and
 * mb 1 in order go through.
 */
static void sc_dw_out_of_order(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, r1 = { 0 };
	step(run, op_f(e, 0, &r0));
	step(run, op_f(e, 1, &r1));
	step(run, op_di(e, &r1));
	step(run, op_di(e, &r0));
	inject(run, e, "dW of mb 1 before dW of mb 0 (accumulating arena)");
	step(run, op_dw(e, &r1, 1));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
	follow(run, op_dw(e, &r1, 1));
}

static void sc_wrong_shape(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 };
	qe_tensor d[ENV_NP];
	step(run, op_f(e, 0, &r0));
	step(run, op_di(e, &r0));
	views(e, 0, d);
	d[1] = qe_tensor_2d(d[1].data, QE_F32, QE_DEV_CPU, 8, 4); /* FC2.W is [4,8] */
	inject(run, e, "dW of mb 0 binding FC2.W as f32[8,4]");
	step(run, op_dw_dests(e, &r0, 0, d));
	settle(run, e);
	follow(run, op_dw(e, &r0, 0));
}

static void sc_premature_commit(struct run *run, struct env *e)
{
	qe_tape_ref r0 = { 0 }, r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
	step_mb(run, e, 0, &r0);
	step(run, op_f(e, 1, &r1));
	step(run, op_di(e, &r1)); /* dW of mb 1 deferred: its tape is live */
	inject(run, e, "optimizer commit while the tape of mb 1 is live");
	step(run, op_commit(e));
	settle(run, e);
	follow(run, op_dw(e, &r1, 1));
	follow_mb(run, e, 2, &r2);
	follow_mb(run, e, 3, &r3);
	follow(run, op_commit(e));
}

static void sc_premature_checkpoint(struct run *run, struct env *e)
{
	qe_tape_ref r[ENV_M];
	memset(r, 0, sizeof(r));
	step_mb(run, e, 0, &r[0]);
	step_mb(run, e, 1, &r[1]);
	inject(run, e, "checkpoint while the arena holds 2 of 4 microbatches");
	step(run, op_checkpoint(e));
	settle(run, e);
	follow_mb(run, e, 2, &r[2]);
	follow_mb(run, e, 3, &r[3]);
	follow(run, op_commit(e));
	follow(run, op_checkpoint(e));
}

/* PER_MB rows run dW out of microbatch order on purpose (the ABA slot reuse, the
 * token scenario) or need a view per microbatch (aliased write into mb 1's view). */
#define ACC QE_ARENA_ACCUMULATE
#define PMB QE_ARENA_PER_MB
static const struct scenario {
	const char *name;
	int expected;
	qe_arena_layout layout;
	void (*fn)(struct run *, struct env *);
} scenarios[] = {
	{ "stale reference (ABA)", QE_ESTALE_REF, PMB, sc_stale_aba },
	{ "duplicate consumer (dI)", QE_EDUP_CONSUMER, ACC, sc_dup_consumer },
	{ "duplicate consumer (dW after release)", QE_EDUP_CONSUMER, ACC, sc_dup_after_release },
	{ "key/slot mismatch (dW wrong mb)", QE_EKEY_SLOT, ACC, sc_key_slot },
	{ "out-of-order token", QE_EORDER, PMB, sc_token },
	{ "dW before its dI", QE_EORDER, ACC, sc_dw_before_di },
	{ "stale cache", QE_ESTALE_CACHE, ACC, sc_stale_cache },
	{ "missing arena write blocks commit", QE_EPREMATURE, ACC, sc_missing_write },
	{ "duplicate dW write", QE_EARENA, ACC, sc_dup_write },
	{ "out-of-order dW (accumulating arena)", QE_EARENA, ACC, sc_dw_out_of_order },
	{ "aliased write", QE_EARENA, PMB, sc_aliased },
	{ "aliased write (accumulating)", QE_EARENA, ACC, sc_aliased_param },
	{ "wrong-shape destination", QE_ESHAPE, ACC, sc_wrong_shape },
	{ "premature commit (live tape)", QE_EPREMATURE, ACC, sc_premature_commit },
	{ "premature checkpoint (arena incomplete)", QE_EPREMATURE, ACC, sc_premature_checkpoint },
};
#undef ACC
#undef PMB
#define NSCENARIOS ((int)(sizeof(scenarios) / sizeof(scenarios[0])))

int qe_inject_count(void)
{
	return NSCENARIOS;
}

int qe_inject_passed(const qe_inject_result *r)
{
	return r->rejected && r->preserved && r->followup_ok;
}

int qe_inject_run_all(qe_inject_result *out, int max)
{
	if (!out || max < 0)
		return qe_fail(QE_EINVAL, "inject: no result array");
	int n = 0;
	for (int i = 0; i < NSCENARIOS && n < max; i++, n++) {
		struct env e;
		struct run run;
		run_init(&run, &out[n], scenarios[i].name, scenarios[i].expected);
		int rc = env_init(&e, scenarios[i].layout);
		if (rc) {
			snprintf(out[n].message, sizeof(out[n].message), "setup failed: %s", qe_last_error());
			out[n].followup_ok = 0;
			continue;
		}
		scenarios[i].fn(&run, &e);
		env_free(&e);
	}
	qe_clear_error();
	return n;
}
