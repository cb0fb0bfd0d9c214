/*
 * sched_stats.c - what a schedule costs, before running it: per-rank action
 * counts, how many tapes it keeps alive (memory), how far it defers DW (the
 * point of zero bubble, and what the tape pool and the arena must survive),
 * and a unit-cost timing proxy for the pipeline bubble.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

/* Unit costs of the timing proxy; B is DI + DW. */
static long cost(qe_action_kind k)
{
	switch (k) {
	case QE_ACT_F:
	case QE_ACT_DI:
	case QE_ACT_DW: return 1;
	case QE_ACT_B: return 2;
	default: return 0;
	}
}

/* Memory-side numbers: one pass over one rank's list. */
static void rank_counts(const qe_sched *s, int r, qe_sched_rank_stats *st)
{
	const qe_sched_rank *l = &s->ranks[r];
	int live = 0, pending = 0;
	qe_dw_rule dw;
	qe_dw_rule_reset(&dw);
	for (int i = 0; i < l->n; i++) {
		const qe_sched_action *a = &l->actions[i];
		st->count[a->kind]++;
		switch (a->kind) {
		case QE_ACT_F:
			live++;
			break;
		case QE_ACT_DI:
			pending++;
			break;
		case QE_ACT_DW:
			pending--;
			live--;
			break;
		case QE_ACT_B:
			live--;
			break;
		default:
			break;
		}
		if (live > st->peak_live_tapes)
			st->peak_live_tapes = live;
		if (pending > st->max_pending_dw)
			st->max_pending_dw = pending;
		if (qe_action_is_compute(a->kind))
			st->delayed_dw += qe_dw_rule_note(&dw, a->kind, a->stage, a->mb);
	}
}

int qe_sched_stats(const qe_sched *s, qe_sched_rank_stats *out)
{
	int rc = qe_sched_validate(s);
	if (rc)
		return rc;
	const int P = s->P;
	memset(out, 0, (size_t)P * sizeof(*out));
	for (int r = 0; r < P; r++)
		rank_counts(s, r, &out[r]);

	/* Timing: the schedule is valid, so ranks can be advanced greedily and a
	 * recv only has to find its message's send time; FIFO order is already
	 * proven, so messages are looked up by (class, stage, mb). */
	const size_t cells = (size_t)s->S * s->M;
	long *sent = malloc(2 * cells * sizeof(long));
	int *pc = calloc((size_t)P, sizeof(int));
	long *clock = calloc((size_t)P, sizeof(long));
	if (!sent || !pc || !clock) {
		rc = qe_fail(QE_ENOMEM, "schedule timing of %d ranks", P);
		goto free_work;
	}
	for (size_t i = 0; i < 2 * cells; i++)
		sent[i] = -1;
	for (int progress = 1; progress;) {
		progress = 0;
		for (int r = 0; r < P; r++) {
			const qe_sched_rank *l = &s->ranks[r];
			while (pc[r] < l->n) {
				const qe_sched_action *a = &l->actions[pc[r]];
				size_t cell = (size_t)a->stage * s->M + a->mb;
				int grad = a->kind == QE_ACT_SEND_GRAD || a->kind == QE_ACT_RECV_GRAD;
				if (a->kind == QE_ACT_SEND_ACT || a->kind == QE_ACT_SEND_GRAD) {
					sent[grad * cells + cell] = clock[r];
				} else if (a->kind == QE_ACT_RECV_ACT || a->kind == QE_ACT_RECV_GRAD) {
					long t = sent[grad * cells + cell];
					if (t < 0)
						break;
					if (t > clock[r])
						clock[r] = t;
				} else {
					clock[r] += cost(a->kind);
					out[r].busy += cost(a->kind);
				}
				pc[r]++;
				progress = 1;
			}
		}
	}
	long makespan = 0;
	for (int r = 0; r < P; r++) {
		if (pc[r] != s->ranks[r].n) {
			rc = qe_fail(QE_ESCHEDULE, "schedule timing: rank %d stuck at action %d after validation", r, pc[r]);
			goto free_work;
		}
		out[r].finish = clock[r];
		if (clock[r] > makespan)
			makespan = clock[r];
	}
	for (int r = 0; r < P; r++) {
		out[r].makespan = makespan;
		out[r].bubble = makespan ? 1.0 - (double)out[r].busy / (double)makespan : 0.0;
	}
free_work:
	free(clock);
	free(pc);
	free(sent);
	return rc;
}
