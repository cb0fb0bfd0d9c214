/*
 * slots.c - how many tape slots each local chunk needs.
 *
 * Microbatch m of a chunk uses slot m % K of that chunk's K slots (the stage
 * contract allocates the same slot: qe_stage_contract_set_slots).  K = M
 * always works; fewer slots save memory (a slot holds a microbatch's
 * activations, probabilities or log-sum-exp, FP8 copies for dW: at --pp 1 the
 * schedule never keeps more than one tape alive, yet every chunk used to own
 * M slots).  The smallest K is found by replaying this rank's action list:
 * microbatch m holds its slot on chunk c from the first write into it (F, or
 * the hand-off of the previous local stage's output at that stage's F) until
 * both its dI and dW ran (or its B), and a K fails when a write finds the slot
 * held by another microbatch.  Only ranks without pipeline peers plan below
 * M: a message into a slot (and a send still reading one) is not ordered with
 * the compute stream the replay models.  And only when the run does not ask
 * for every microbatch's outputs at the step's end (cfg.full_slots: traces).
 */
#include "runtime/exec/rank_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

/* 1 when slots m % K on every local chunk never meet two live microbatches. */
static int fits(const qe_rank *r, const qe_sched_rank *list, int K, int *owner, unsigned char *done)
{
	const int M = r->M, V = r->V;
	for (int i = 0; i < V * K; i++)
		owner[i] = -1;
	memset(done, 0, (size_t)V * M);
	for (int i = 0; i < list->n; i++) {
		const qe_sched_action *a = &list->actions[i];
		int c = a->chunk, m = a->mb, slot = m % K;
		switch (a->kind) {
		case QE_ACT_F: {
			if (owner[c * K + slot] != -1 && owner[c * K + slot] != m)
				return 0;
			owner[c * K + slot] = m;
			/* the output goes straight into the next local stage's input slot */
			int next = a->stage + 1 < r->S ? qe_sched_chunk_of(r->sched, a->stage + 1) : -1;
			if (next >= 0 && qe_sched_rank_of(r->sched, a->stage + 1) == r->pr) {
				if (owner[next * K + slot] != -1 && owner[next * K + slot] != m)
					return 0;
				owner[next * K + slot] = m;
			}
			break;
		}
		case QE_ACT_DI:
		case QE_ACT_DW:
		case QE_ACT_B:
			done[c * M + m] |= a->kind == QE_ACT_DI ? 1 : a->kind == QE_ACT_DW ? 2 : 3;
			if (done[c * M + m] == 3 && owner[c * K + slot] == m)
				owner[c * K + slot] = -1;
			break;
		default:
			break;
		}
	}
	return 1;
}

int qe__rank_plan_slots(const qe_rank *r, int *out)
{
	*out = r->M;
	if (r->P > 1 || r->cfg.full_slots)
		return QE_OK;
	const qe_sched_rank *list = &r->sched->ranks[r->pr];
	int *owner = malloc((size_t)r->V * r->M * sizeof(int));
	unsigned char *done = malloc((size_t)r->V * r->M);
	if (!owner || !done) {
		free(owner);
		free(done);
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory planning tape slots", r->rank);
	}
	for (int K = 1; K < r->M; K++)
		if (fits(r, list, K, owner, done)) {
			*out = K;
			break;
		}
	free(owner);
	free(done);
	return QE_OK;
}
