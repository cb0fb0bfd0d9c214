/*
 * effect.c - the effect token: *when* a delayed-scaling state transition
 * happens.  FP8 delayed scaling reads and then updates per-stage scaling state
 * at the end of every F and dI, so the order of those actions is part of the
 * numerics.  The token is a sequence number threaded through the stateful
 * actions of one stage; presenting anything but the expected one means the
 * executor is about to apply a transition out of order (e.g. a replayed graph
 * or a reordered schedule), and it is refused before the state is touched.
 */
#include "runtime/contract/contract.h"

void qe_effect_init(qe_effect_state *st, int32_t stage)
{
	st->next = 0;
	st->stage = stage;
	st->transitions = 0;
}

int qe_effect_check(const qe_effect_state *st, uint64_t token)
{
	if (!st)
		return qe_fail(QE_EINVAL, "effect token: NULL state");
	if (token != st->next)
		return qe_fail(QE_EORDER, "out-of-order state transition: token %llu presented, expected %llu (stage %d)",
			       (unsigned long long)token, (unsigned long long)st->next, (int)st->stage);
	return QE_OK;
}

int qe_effect_commit(qe_effect_state *st, uint64_t token, uint64_t *next_token)
{
	int rc = qe_effect_check(st, token);
	if (rc)
		return rc;
	st->next = token + 1;
	st->transitions++;
	if (next_token)
		*next_token = st->next;
	return QE_OK;
}

void qe_effect_reset(qe_effect_state *st)
{
	st->next = 0;
}
