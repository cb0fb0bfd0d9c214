/*
 * action.c - the stage actions F, dI, dW and B as the executor sees them:
 * each composes the four relations into one two-phase check/commit.
 *
 * *_begin performs every check of every relation the action touches and only
 * then takes the one resource the action needs up front (F allocates its
 * tape slot, since the forward writes the tape).  A failed begin therefore
 * changes nothing.  qe_action_end() re-checks and commits all relations
 * together once the physical action succeeded; qe_action_fail() aborts the
 * action's tape reference and commits nothing, so a failed action never
 * advances a token, an epoch or the arena.
 *
 * Every message is prefixed with the stage and action ("stage 1 dW(m=2): ")
 * and carries the relation's own text with the key, slot and generation.
 */
#include "runtime/contract/contract.h"

#include <string.h>

int qe_stage_contract_init(qe_stage_contract *sc, int32_t s, int M, qe_epoch_state *ep, qe_tape_pool *pool,
			   qe_arena *arena, int p_begin, int p_end)
{
	if (!sc || !ep || !pool)
		return qe_fail(QE_EINVAL, "stage contract %d: NULL epoch state or pool", (int)s);
	if (s < 0 || M < 1)
		return qe_fail(QE_EINVAL, "stage contract %d: bad stage or %d microbatches", (int)s, M);
	int np = qe_arena_nparams(arena);
	if (p_begin < 0 || p_end < p_begin || p_end > np)
		return qe_fail(QE_EINVAL, "stage contract %d: params [%d,%d) outside the arena's %d", (int)s, p_begin,
			       p_end, np);
	if (arena && qe_arena_microbatches(arena) != M)
		return qe_fail(QE_EINVAL, "stage contract %d: %d microbatches, the arena has %d", (int)s, M,
			       qe_arena_microbatches(arena));
	memset(sc, 0, sizeof(*sc));
	sc->s = s;
	sc->M = M;
	qe_effect_init(&sc->effect, s);
	sc->ep = ep;
	qe_weight_cache_init(&sc->cache);
	sc->pool = pool;
	sc->arena = arena;
	sc->p_begin = p_begin;
	sc->p_end = p_end;
	qe_tape_pool_stats ps;
	qe_tape_pool_get_stats(pool, &ps);
	sc->slot_base = 0;
	sc->slot_count = ps.nslots;
	sc->in_flight = QE_ACT_NONE;
	return QE_OK;
}

int qe_stage_contract_set_slots(qe_stage_contract *sc, int slot_base, int slot_count)
{
	if (!sc || !sc->pool)
		return qe_fail(QE_EINVAL, "stage contract: not initialized");
	qe_tape_pool_stats ps;
	qe_tape_pool_get_stats(sc->pool, &ps);
	if (slot_base < 0 || slot_count < 1 || slot_base + slot_count > ps.nslots)
		return qe_fail(QE_EINVAL, "stage contract %d: slots [%d,%d) outside the pool's %d", (int)sc->s,
			       slot_base, slot_base + slot_count, ps.nslots);
	sc->slot_base = slot_base;
	sc->slot_count = slot_count;
	return QE_OK;
}

void qe_stage_contract_restart(qe_stage_contract *sc)
{
	qe_effect_reset(&sc->effect);
	qe_weight_cache_init(&sc->cache);
	sc->in_flight = QE_ACT_NONE;
	memset(&sc->in_flight_ref, 0, sizeof(sc->in_flight_ref));
	sc->nm_next = 0;
}

void qe_stage_contract_accumulate_nonmatrix(qe_stage_contract *sc)
{
	sc->nm_accumulate = 1;
	sc->nm_next = 0;
}

void qe_stage_contract_step_reset(qe_stage_contract *sc) { sc->nm_next = 0; }

/* dI and B add microbatch m's non-matrix gradients into the stage's sum: ascending order only. */
static int check_nonmatrix_order(const qe_stage_contract *sc, int m)
{
	if (!sc->nm_accumulate || m == sc->nm_next)
		return QE_OK;
	return qe_fail(QE_EORDER,
		       "out-of-order state transition: the non-matrix gradients of mb %d (the next must be mb %d): "
		       "a stage's dI runs in ascending microbatch order when its gradients accumulate",
		       m, sc->nm_next);
}

/* The prefix every action message carries. */
static int ctx(const qe_stage_contract *sc, qe_action_kind k, int m, int rc)
{
	return qe_fail_ctx(rc, "stage %d %s(m=%d)", (int)sc->s, qe_action_name(k), m);
}

static int begin_common(const qe_stage_contract *sc, qe_action_kind k, int m, const void *out)
{
	if (!sc || !sc->ep || !sc->pool || !out)
		return qe_fail(QE_EINVAL, "%s: NULL stage contract or ticket", qe_action_name(k));
	if (sc->in_flight != QE_ACT_NONE) {
		char rb[2 * QE_KEY_FMT_LEN];
		return qe_fail(QE_EORDER,
			       "out-of-order state transition: stage %d %s(m=%d) begun while %s of %s is in flight",
			       (int)sc->s, qe_action_name(k), m, qe_action_name(sc->in_flight),
			       qe_tape_ref_format(&sc->in_flight_ref, rb, sizeof(rb)));
	}
	return QE_OK;
}

/* The consumed ref: valid in the pool, this stage's, of the current epoch. */
static int check_consumed_ref(const qe_stage_contract *sc, const qe_tape_ref *ref, int consumer, void **payload)
{
	char rb[2 * QE_KEY_FMT_LEN];
	int rc = qe_tape_pool_check(sc->pool, ref, consumer, payload);
	if (rc)
		return rc;
	if (ref->key.s != sc->s)
		return qe_fail(QE_EKEY_SLOT, "key/slot mismatch: %s belongs to stage %d, not stage %d",
			       qe_tape_ref_format(ref, rb, sizeof(rb)), (int)ref->key.s, (int)sc->s);
	if (ref->key.e != sc->ep->e_W)
		return qe_fail(QE_ESTALE_REF, "stale reference: %s is of epoch %lld, the current epoch is e_W=%lld",
			       qe_tape_ref_format(ref, rb, sizeof(rb)), (long long)ref->key.e,
			       (long long)sc->ep->e_W);
	if (ref->key.m < 0 || ref->key.m >= sc->M)
		return qe_fail(QE_EKEY_SLOT, "key/slot mismatch: %s names microbatch %d outside 0..%d",
			       qe_tape_ref_format(ref, rb, sizeof(rb)), (int)ref->key.m, sc->M - 1);
	return QE_OK;
}

/*
 * One write check per matrix parameter of the stage, for the microbatch of
 * ref (the arena relation: bound address, exactly once, and with an
 * accumulating arena ascending microbatch order).  A failure names the tape
 * whose dW would have written: key, slot and generation.
 */
static int check_writes(const qe_stage_contract *sc, const qe_tape_ref *ref, const qe_tensor *dests)
{
	if (sc->p_end == sc->p_begin)
		return QE_OK;
	if (!dests)
		return qe_fail(QE_EINVAL, "no destinations given for %d matrix gradients", sc->p_end - sc->p_begin);
	for (int p = sc->p_begin; p < sc->p_end; p++) {
		int rc = qe_arena_write_check(sc->arena, p, ref->key.m, &dests[p - sc->p_begin]);
		if (rc) {
			char rb[2 * QE_KEY_FMT_LEN];
			return qe_fail_ctx(rc, "gradient arena, write of %s", qe_tape_ref_format(ref, rb, sizeof(rb)));
		}
	}
	return QE_OK;
}

/* At commit time the destinations were already checked: only the written bits can have changed. */
static int recheck_unwritten(const qe_stage_contract *sc, int m)
{
	for (int p = sc->p_begin; p < sc->p_end; p++)
		if (qe_arena_is_written(sc->arena, p, m))
			return qe_fail(QE_EARENA, "duplicate arena write: %s mb %d was written since the check",
				       qe_arena_param_name(sc->arena, p), m);
	return QE_OK;
}

static void commit_writes(qe_stage_contract *sc, int m)
{
	for (int p = sc->p_begin; p < sc->p_end; p++)
		qe_arena_write_commit(sc->arena, p, m);
}

static void start(qe_stage_contract *sc, qe_action_ticket *t, qe_action_kind k, uint64_t token,
		  const qe_tape_ref *ref, void *payload)
{
	memset(t, 0, sizeof(*t));
	t->kind = k;
	t->s = sc->s;
	t->m = ref->key.m;
	t->token = token;
	t->ref = *ref;
	t->payload = payload;
	sc->in_flight = k;
	sc->in_flight_ref = *ref;
}

int qe_action_f_begin(qe_stage_contract *sc, uint64_t token, int m, qe_action_ticket *out)
{
	int rc = begin_common(sc, QE_ACT_F, m, out);
	if (rc)
		return rc;
	if (m < 0 || m >= sc->M)
		return ctx(sc, QE_ACT_F, m, qe_fail(QE_EINVAL, "microbatch outside 0..%d", sc->M - 1));
	rc = qe_effect_check(&sc->effect, token);
	if (rc)
		return ctx(sc, QE_ACT_F, m, rc);
	qe_key k = qe_key_make(sc->ep->e_W, sc->s, m, 0, 0);
	int refresh = 0;
	rc = qe_weight_cache_check(&sc->cache, sc->ep->e_W, &k, m == 0, &refresh);
	if (rc)
		return ctx(sc, QE_ACT_F, m, rc);
	qe_tape_ref ref;
	rc = qe_tape_pool_alloc(sc->pool, k, sc->slot_base + m % sc->slot_count, &ref);
	if (rc)
		return ctx(sc, QE_ACT_F, m, rc);
	void *payload = NULL;
	qe_tape_pool_check(sc->pool, &ref, 0, &payload);
	start(sc, out, QE_ACT_F, token, &ref, payload);
	out->refresh_cache = refresh;
	return QE_OK;
}

int qe_action_di_begin(qe_stage_contract *sc, uint64_t token, const qe_tape_ref *ref, qe_action_ticket *out)
{
	int m = ref ? ref->key.m : -1;
	int rc = begin_common(sc, QE_ACT_DI, m, out);
	if (rc)
		return rc;
	if (!ref)
		return ctx(sc, QE_ACT_DI, m, qe_fail(QE_EINVAL, "no tape reference"));
	rc = qe_effect_check(&sc->effect, token);
	if (rc)
		return ctx(sc, QE_ACT_DI, m, rc);
	void *payload = NULL;
	rc = check_consumed_ref(sc, ref, QE_CONSUMER_DI, &payload);
	if (!rc)
		rc = check_nonmatrix_order(sc, m);
	if (rc)
		return ctx(sc, QE_ACT_DI, m, rc);
	start(sc, out, QE_ACT_DI, token, ref, payload);
	return QE_OK;
}

int qe_action_dw_begin(qe_stage_contract *sc, const qe_tape_ref *ref, int m_explicit, const qe_tensor *dests,
		       qe_action_ticket *out)
{
	char rb[2 * QE_KEY_FMT_LEN];
	int rc = begin_common(sc, QE_ACT_DW, m_explicit, out);
	if (rc)
		return rc;
	if (!ref)
		return ctx(sc, QE_ACT_DW, m_explicit, qe_fail(QE_EINVAL, "no tape reference"));
	void *payload = NULL;
	rc = check_consumed_ref(sc, ref, QE_CONSUMER_DW, &payload);
	if (rc)
		return ctx(sc, QE_ACT_DW, m_explicit, rc);
	if (m_explicit != ref->key.m)
		return ctx(sc, QE_ACT_DW, m_explicit,
			   qe_fail(QE_EKEY_SLOT,
				   "key/slot mismatch: the deferred dW task names microbatch %d but its tape is %s",
				   m_explicit, qe_tape_ref_format(ref, rb, sizeof(rb))));
	qe_tape_slot_info info;
	qe_tape_pool_slot_info(sc->pool, ref->slot, &info);
	if (!(info.mask & QE_CONSUMER_DI))
		return ctx(sc, QE_ACT_DW, m_explicit,
			   qe_fail(QE_EORDER, "out-of-order state transition: dW of %s before its dI",
				   qe_tape_ref_format(ref, rb, sizeof(rb))));
	rc = check_writes(sc, ref, dests);
	if (rc)
		return ctx(sc, QE_ACT_DW, m_explicit, rc);
	start(sc, out, QE_ACT_DW, sc->effect.next, ref, payload);
	return QE_OK;
}

int qe_action_b_begin(qe_stage_contract *sc, uint64_t token, const qe_tape_ref *ref, const qe_tensor *dests,
		      qe_action_ticket *out)
{
	int m = ref ? ref->key.m : -1;
	int rc = begin_common(sc, QE_ACT_B, m, out);
	if (rc)
		return rc;
	if (!ref)
		return ctx(sc, QE_ACT_B, m, qe_fail(QE_EINVAL, "no tape reference"));
	rc = qe_effect_check(&sc->effect, token);
	if (rc)
		return ctx(sc, QE_ACT_B, m, rc);
	void *payload = NULL;
	rc = check_consumed_ref(sc, ref, QE_CONSUMER_FULL, &payload);
	if (!rc)
		rc = check_nonmatrix_order(sc, m);
	if (rc)
		return ctx(sc, QE_ACT_B, m, rc);
	rc = check_writes(sc, ref, dests);
	if (rc)
		return ctx(sc, QE_ACT_B, m, rc);
	start(sc, out, QE_ACT_B, token, ref, payload);
	return QE_OK;
}

/* The ticket is the action now in flight on this stage. */
static int check_ticket(const qe_stage_contract *sc, const qe_action_ticket *t, const char *what)
{
	if (!sc || !t)
		return qe_fail(QE_EINVAL, "action %s: NULL stage contract or ticket", what);
	if (t->kind == QE_ACT_NONE || sc->in_flight != t->kind || sc->in_flight_ref.slot != t->ref.slot ||
	    sc->in_flight_ref.gen != t->ref.gen || !qe_key_equal(&sc->in_flight_ref.key, &t->ref.key)) {
		char rb[2 * QE_KEY_FMT_LEN];
		return qe_fail(QE_EINVAL, "action %s: stage %d has no %s of %s in flight (in flight: %s)", what,
			       (int)sc->s, qe_action_name(t->kind), qe_tape_ref_format(&t->ref, rb, sizeof(rb)),
			       qe_action_name(sc->in_flight));
	}
	return QE_OK;
}

static int consumer_of(qe_action_kind k)
{
	return k == QE_ACT_DI ? QE_CONSUMER_DI : k == QE_ACT_DW ? QE_CONSUMER_DW : k == QE_ACT_B ? QE_CONSUMER_FULL : 0;
}

int qe_action_end(qe_stage_contract *sc, const qe_action_ticket *t, uint64_t *next_token)
{
	int rc = check_ticket(sc, t, "end");
	if (rc)
		return rc;
	int stateful = t->kind != QE_ACT_DW, writes = t->kind == QE_ACT_DW || t->kind == QE_ACT_B;
	/* Re-check all, then commit all: a failed end changes nothing either. */
	if (stateful && (rc = qe_effect_check(&sc->effect, t->token)))
		return ctx(sc, t->kind, t->m, rc);
	if ((rc = qe_tape_pool_check(sc->pool, &t->ref, consumer_of(t->kind), NULL)))
		return ctx(sc, t->kind, t->m, rc);
	if (writes && (rc = recheck_unwritten(sc, t->m)))
		return ctx(sc, t->kind, t->m, rc);

	if (stateful)
		qe_effect_commit(&sc->effect, t->token, NULL);
	if (t->kind == QE_ACT_F)
		qe_weight_cache_commit(&sc->cache, sc->ep->e_W, t->refresh_cache);
	if (writes)
		commit_writes(sc, t->m);
	if (t->kind != QE_ACT_F)
		qe_tape_pool_commit(sc->pool, &t->ref, consumer_of(t->kind));
	if (t->kind == QE_ACT_DI || t->kind == QE_ACT_B)
		sc->nm_next = t->m + 1;
	sc->in_flight = QE_ACT_NONE;
	if (next_token)
		*next_token = sc->effect.next;
	return QE_OK;
}

int qe_action_fail(qe_stage_contract *sc, const qe_action_ticket *t)
{
	int rc = check_ticket(sc, t, "fail");
	if (rc)
		return rc;
	sc->in_flight = QE_ACT_NONE;
	rc = qe_tape_pool_abort(sc->pool, &t->ref);
	return rc ? ctx(sc, t->kind, t->m, rc) : QE_OK;
}
