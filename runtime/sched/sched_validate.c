/*
 * sched_validate.c - prove a schedule runnable before any rank starts.
 *
 * A bad schedule on real ranks shows up as a hang or as a tape consumed before
 * it exists; both are far easier to explain here, where we know the whole
 * plan.  The check has three passes:
 *   1. walk each rank's list in order: every action well formed, on the rank
 *      that holds its stage, not a duplicate, and after what it needs locally
 *      (its F, its DI, its input: an earlier local producer or an earlier recv);
 *      and each chunk's gradient writes (DW, or B) in ascending microbatch
 *      order: the accumulating gradient arena sums them in the order they run,
 *      and only that order gives the bits of the ordered reduction;
 *   2. completeness: every (stage, mb) has all its actions, every cross-rank
 *      hand-off has both a send and a recv;
 *   3. run all ranks as the cpu transport would (sends buffered into one FIFO
 *      per ordered pair of ranks, recvs block and take the head of the FIFO)
 *      and report a deadlock or a recv that finds a different message at the
 *      head of its channel (the transport's tag mismatch).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

/* Per (stage, mb) position tables, -1 when absent.  Each (stage, mb) of a
 * table lives on one rank only (placement is checked first), so the position
 * alone identifies the action. */
enum { T_F, T_DI, T_DW, T_B, T_SA, T_RA, T_SG, T_RG, T_N };

typedef struct vctx {
	const qe_sched *s;
	int *pos[T_N];
} vctx;

static int *at(vctx *v, int t, int stage, int mb)
{
	return &v->pos[t][(size_t)stage * v->s->M + mb];
}

static int table_of(qe_action_kind k)
{
	switch (k) {
	case QE_ACT_F: return T_F;
	case QE_ACT_DI: return T_DI;
	case QE_ACT_DW: return T_DW;
	case QE_ACT_B: return T_B;
	case QE_ACT_SEND_ACT: return T_SA;
	case QE_ACT_RECV_ACT: return T_RA;
	case QE_ACT_SEND_GRAD: return T_SG;
	case QE_ACT_RECV_GRAD: return T_RG;
	default: return -1;
	}
}

static int bad(int r, int i, const qe_sched_action *a, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(int r, int i, const qe_sched_action *a, const char *fmt, ...)
{
	char what[160], why[600];
	va_list ap;
	qe_sched_action_describe(a, what, sizeof(what));
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return qe_fail(QE_ESCHEDULE, "rank %d action %d %s: %s", r, i, what, why);
}

/* Is the action's shape consistent with the placement?  0 or QE_ESCHEDULE. */
static int check_fields(const qe_sched *s, int r, int i, const qe_sched_action *a)
{
	if ((int)a->kind < 0 || a->kind >= QE_ACT_NKINDS)
		return qe_fail(QE_ESCHEDULE, "rank %d action %d: unknown action kind %d", r, i, (int)a->kind);
	if (a->mb < 0 || a->mb >= s->M)
		return bad(r, i, a, "microbatch out of range 0..%d", s->M - 1);
	if (a->stage < 0 || a->stage >= s->S)
		return bad(r, i, a, "stage out of range 0..%d", s->S - 1);
	if (a->chunk < 0 || a->chunk >= s->V)
		return bad(r, i, a, "chunk %d out of range 0..%d", a->chunk, s->V - 1);
	const int local = qe_sched_stage_of(s, r, a->chunk);
	switch (a->kind) {
	case QE_ACT_F:
	case QE_ACT_DI:
	case QE_ACT_DW:
	case QE_ACT_B:
		if (a->stage != local)
			return bad(r, i, a, "chunk %d of rank %d is stage %d (stage %d lives on rank %d)", a->chunk, r,
				   local, a->stage, qe_sched_rank_of(s, a->stage));
		if (a->peer != -1)
			return bad(r, i, a, "compute action with peer %d (must be -1)", a->peer);
		if (s->backward == QE_BACKWARD_SPLIT && a->kind == QE_ACT_B)
			return bad(r, i, a, "full backward B in a split-backward schedule (expected DI and DW)");
		if (s->backward == QE_BACKWARD_FULL && (a->kind == QE_ACT_DI || a->kind == QE_ACT_DW))
			return bad(r, i, a, "split backward action in a full-backward schedule (expected B)");
		return 0;
	case QE_ACT_SEND_ACT:
	case QE_ACT_SEND_GRAD: {
		int fwd = a->kind == QE_ACT_SEND_ACT;
		int to = fwd ? a->stage + 1 : a->stage - 1;
		if (a->peer == r)
			return bad(r, i, a, "a message to its own rank");
		if (a->stage != local)
			return bad(r, i, a, "sends stage %d's output but chunk %d of rank %d is stage %d", a->stage,
				   a->chunk, r, local);
		if (to < 0 || to >= s->S)
			return bad(r, i, a, "no stage %d to send to", to);
		if (qe_sched_rank_of(s, to) == r)
			return bad(r, i, a, "stage %d is on this rank: the hand-off is local, no message", to);
		if (a->peer != qe_sched_rank_of(s, to))
			return bad(r, i, a, "stage %d is on rank %d, not rank %d", to, qe_sched_rank_of(s, to), a->peer);
		return 0;
	}
	case QE_ACT_RECV_ACT:
	case QE_ACT_RECV_GRAD: {
		int fwd = a->kind == QE_ACT_RECV_ACT;
		int to = fwd ? a->stage + 1 : a->stage - 1;
		if (a->peer == r)
			return bad(r, i, a, "a message from its own rank");
		if (to != local)
			return bad(r, i, a, "carries stage %d's output to stage %d, but chunk %d of rank %d is stage %d",
				   a->stage, to, a->chunk, r, local);
		if (qe_sched_rank_of(s, a->stage) == r)
			return bad(r, i, a, "stage %d is on this rank: the hand-off is local, no message", a->stage);
		if (a->peer != qe_sched_rank_of(s, a->stage))
			return bad(r, i, a, "stage %d is on rank %d, not rank %d", a->stage,
				   qe_sched_rank_of(s, a->stage), a->peer);
		return 0;
	}
	default:
		return qe_fail(QE_ESCHEDULE, "rank %d action %d: unknown action kind %d", r, i, (int)a->kind);
	}
}

/* Pass 1: one rank's list in order. */
static int check_rank(vctx *v, int r)
{
	const qe_sched *s = v->s;
	const qe_sched_rank *l = &s->ranks[r];
	for (int i = 0; i < l->n; i++) {
		const qe_sched_action *a = &l->actions[i];
		int rc = check_fields(s, r, i, a);
		if (rc)
			return rc;
		const int st = a->stage, mb = a->mb;
		int *self = at(v, table_of(a->kind), st, mb);
		if (*self >= 0)
			return bad(r, i, a, "duplicate of action %d", *self);
		if (a->kind == QE_ACT_DW || a->kind == QE_ACT_B) {
			/* the gradient writes of one chunk run in ascending microbatch order */
			for (int later = mb + 1; later < s->M; later++) {
				int w = *at(v, table_of(a->kind), st, later);
				if (w >= 0)
					return bad(r, i, a,
						   "%s of mb %d after %s of mb %d (action %d) of the same chunk: each "
						   "chunk's dW run in ascending microbatch order (the accumulating "
						   "gradient arena sums in run order)",
						   qe_action_name(a->kind), mb, qe_action_name(a->kind), later, w);
			}
		}
		switch (a->kind) {
		case QE_ACT_F:
			if (st > 0) {
				if (qe_sched_rank_of(s, st - 1) == r) {
					if (*at(v, T_F, st - 1, mb) < 0)
						return bad(r, i, a, "no F(stage %d, mb %d) before it", st - 1, mb);
				} else if (*at(v, T_RA, st - 1, mb) < 0) {
					return bad(r, i, a, "no RECV_ACT(stage %d, mb %d) from rank %d before it", st - 1,
						   mb, qe_sched_rank_of(s, st - 1));
				}
			}
			break;
		case QE_ACT_DI:
		case QE_ACT_B:
			if (*at(v, T_F, st, mb) < 0)
				return bad(r, i, a, "no F(stage %d, mb %d) before it", st, mb);
			if (st < s->S - 1) {
				if (qe_sched_rank_of(s, st + 1) == r) {
					if (*at(v, T_DI, st + 1, mb) < 0 && *at(v, T_B, st + 1, mb) < 0)
						return bad(r, i, a, "no %s(stage %d, mb %d) before it",
							   s->backward == QE_BACKWARD_FULL ? "B" : "DI", st + 1, mb);
				} else if (*at(v, T_RG, st + 1, mb) < 0) {
					return bad(r, i, a, "no RECV_GRAD(stage %d, mb %d) from rank %d before it", st + 1,
						   mb, qe_sched_rank_of(s, st + 1));
				}
			}
			break;
		case QE_ACT_DW:
			if (*at(v, T_DI, st, mb) < 0)
				return bad(r, i, a, "no DI(stage %d, mb %d) before it", st, mb);
			break;

		case QE_ACT_SEND_ACT:
			if (*at(v, T_F, st, mb) < 0)
				return bad(r, i, a, "no F(stage %d, mb %d) before it", st, mb);
			break;
		case QE_ACT_SEND_GRAD:
			if (*at(v, T_DI, st, mb) < 0 && *at(v, T_B, st, mb) < 0)
				return bad(r, i, a, "no %s(stage %d, mb %d) before it",
					   s->backward == QE_BACKWARD_FULL ? "B" : "DI", st, mb);
			break;
		default:
			break; /* a recv needs nothing local */
		}
		*self = i;
	}
	return 0;
}

/* Pass 2: nothing missing, every hand-off between ranks has both ends. */
static int check_complete(vctx *v)
{
	const qe_sched *s = v->s;
	const int split = s->backward == QE_BACKWARD_SPLIT;
	for (int st = 0; st < s->S; st++) {
		const int r = qe_sched_rank_of(s, st);
		for (int mb = 0; mb < s->M; mb++) {
			if (*at(v, T_F, st, mb) < 0)
				return qe_fail(QE_ESCHEDULE, "no F(stage %d, mb %d) in the schedule (it belongs on rank %d)",
					       st, mb, r);
			if (split && *at(v, T_DI, st, mb) < 0)
				return qe_fail(QE_ESCHEDULE,
					       "no DI(stage %d, mb %d) in the schedule (it belongs on rank %d, F is action %d)",
					       st, mb, r, *at(v, T_F, st, mb));
			if (split && *at(v, T_DW, st, mb) < 0)
				return qe_fail(QE_ESCHEDULE,
					       "no DW(stage %d, mb %d) in the schedule (it belongs on rank %d, DI is action %d)",
					       st, mb, r, *at(v, T_DI, st, mb));
			if (!split && *at(v, T_B, st, mb) < 0)
				return qe_fail(QE_ESCHEDULE,
					       "no B(stage %d, mb %d) in the schedule (it belongs on rank %d, F is action %d)",
					       st, mb, r, *at(v, T_F, st, mb));
			for (int fwd = 1; fwd >= 0; fwd--) {
				int to = fwd ? st + 1 : st - 1;
				if (to < 0 || to >= s->S || qe_sched_rank_of(s, to) == r)
					continue;
				int snd = *at(v, fwd ? T_SA : T_SG, st, mb), rcv = *at(v, fwd ? T_RA : T_RG, st, mb);
				const char *kind = fwd ? "ACT" : "GRAD";
				if (snd < 0 && rcv >= 0)
					return qe_fail(QE_ESCHEDULE,
						       "rank %d action %d RECV_%s(stage %d, mb %d, from rank %d): rank %d "
						       "never sends it (no SEND_%s)",
						       qe_sched_rank_of(s, to), rcv, kind, st, mb, r, r, kind);
				if (snd >= 0 && rcv < 0)
					return qe_fail(QE_ESCHEDULE,
						       "rank %d action %d SEND_%s(stage %d, mb %d, to rank %d): rank %d "
						       "never receives it (no RECV_%s)",
						       r, snd, kind, st, mb, qe_sched_rank_of(s, to), qe_sched_rank_of(s, to),
						       kind);
			}
		}
	}
	return 0;
}

/* Pass 3: the simulation.  Channel (src, dst) is a FIFO of send positions, as in
 * the cpu transport (runtime/comm/comm.h): activations and gradients share it. */
typedef struct chan {
	int *msg; /* positions (in the sender's list) of the sends, in send order */
	int head, tail;
} chan;

static int chan_of(const qe_sched *s, int src, int dst)
{
	return src * s->P + dst;
}

static int is_send(qe_action_kind k)
{
	return k == QE_ACT_SEND_ACT || k == QE_ACT_SEND_GRAD;
}

static int is_recv(qe_action_kind k)
{
	return k == QE_ACT_RECV_ACT || k == QE_ACT_RECV_GRAD;
}

static int simulate(const qe_sched *s)
{
	const int P = s->P;
	const size_t nch = (size_t)P * P;
	int rc = 0;
	chan *ch = calloc(nch, sizeof(*ch));
	int *pc = calloc((size_t)P, sizeof(int));
	int *store = NULL;
	size_t total = 0;
	if (!ch || !pc) {
		rc = qe_fail(QE_ENOMEM, "schedule simulation of %d ranks", P);
		goto free_work;
	}
	/* Size each channel by its sends, then carve one array. */
	for (int r = 0; r < P; r++)
		for (int i = 0; i < s->ranks[r].n; i++) {
			const qe_sched_action *a = &s->ranks[r].actions[i];
			if (is_send(a->kind)) {
				ch[chan_of(s, r, a->peer)].tail++;
				total++;
			}
		}
	store = malloc((total ? total : 1) * sizeof(int));
	if (!store) {
		rc = qe_fail(QE_ENOMEM, "schedule simulation: %zu messages", total);
		goto free_work;
	}
	for (size_t c = 0, off = 0; c < nch; c++) {
		ch[c].msg = store + off;
		off += (size_t)ch[c].tail;
		ch[c].tail = 0;
	}

	for (int progress = 1; progress;) {
		progress = 0;
		for (int r = 0; r < P; r++) {
			const qe_sched_rank *l = &s->ranks[r];
			while (pc[r] < l->n) {
				const qe_sched_action *a = &l->actions[pc[r]];
				if (is_send(a->kind)) {
					chan *c = &ch[chan_of(s, r, a->peer)];
					c->msg[c->tail++] = pc[r];
				} else if (is_recv(a->kind)) {
					chan *c = &ch[chan_of(s, a->peer, r)];
					if (c->head == c->tail)
						break; /* blocks */
					const qe_sched_action *m = &s->ranks[a->peer].actions[c->msg[c->head]];
					if (m->stage != a->stage || m->mb != a->mb) {
						char got[160];
						qe_sched_action_describe(m, got, sizeof(got));
						rc = bad(r, pc[r], a,
							 "messages out of order: the channel from rank %d holds %s "
							 "(rank %d action %d) first",
							 a->peer, got, a->peer, c->msg[c->head]);
						goto free_work;
					}
					c->head++;
				}
				pc[r]++;
				progress = 1;
			}
		}
	}

	char msg[900];
	int len = 0, blocked = 0;
	for (int r = 0; r < P; r++) {
		if (pc[r] == s->ranks[r].n)
			continue;
		char what[160];
		qe_sched_action_describe(&s->ranks[r].actions[pc[r]], what, sizeof(what));
		if (len < (int)sizeof(msg))
			len += snprintf(msg + len, sizeof(msg) - (size_t)len, "%srank %d action %d %s waits",
					blocked ? "; " : "", r, pc[r], what);
		blocked++;
	}
	if (blocked) {
		rc = qe_fail(QE_ESCHEDULE, "deadlock: %d of %d ranks blocked on a recv whose send never comes: %s",
			     blocked, P, msg);
		goto free_work;
	}
	for (size_t c = 0; c < nch; c++)
		if (ch[c].head != ch[c].tail) {
			int src = (int)c / P, dst = (int)c % P;
			char what[160];
			qe_sched_action_describe(&s->ranks[src].actions[ch[c].msg[ch[c].head]], what, sizeof(what));
			rc = qe_fail(QE_ESCHEDULE, "rank %d action %d %s: never received by rank %d", src,
				     ch[c].msg[ch[c].head], what, dst);
			goto free_work;
		}
free_work:
	free(store);
	free(pc);
	free(ch);
	return rc;
}

int qe_sched_validate(const qe_sched *s)
{
	vctx v = { .s = s };
	int rc = 0;
	if (!s || s->P < 1 || s->V < 1 || s->M < 1 || s->S != s->P * s->V || !s->ranks)
		return qe_fail(QE_ESCHEDULE, "schedule header is malformed");
	const size_t cells = (size_t)s->S * s->M;
	for (int t = 0; t < T_N; t++) {
		v.pos[t] = malloc(cells * sizeof(int));
		if (!v.pos[t]) {
			rc = qe_fail(QE_ENOMEM, "validation tables for %d stages x %d microbatches", s->S, s->M);
			goto free_positions;
		}
		memset(v.pos[t], 0xff, cells * sizeof(int)); /* all -1 */
	}
	for (int r = 0; r < s->P && !rc; r++)
		rc = check_rank(&v, r);
	if (!rc)
		rc = check_complete(&v);
	if (!rc)
		rc = simulate(s);
free_positions:
	for (int t = 0; t < T_N; t++)
		free(v.pos[t]);
	return rc;
}
