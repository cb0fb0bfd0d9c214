/*
 * sched.c - the schedule object: names, stage placement, the per-rank action
 * lists, message insertion, and qe_sched_build which runs a generator and then
 * derives the full-backward reference and the messages from its order.
 *
 * Generators only decide the order of compute actions; messages are added
 * afterwards by one rule (send right after the producer, recv right before the
 * consumer or earlier when the channel's FIFO order demands it) so every
 * schedule kind gets the same, validated, message pattern.
 */
#include "runtime/sched/sched.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

const char *qe_sched_action_name(qe_action_kind k)
{
	return qe_action_listing(k);
}

const char *qe_sched_kind_name(qe_sched_kind k)
{
	return k == QE_SCHED_ZBV ? "zbv" : k == QE_SCHED_INTERLEAVED ? "interleaved" : "?";
}

const char *qe_sched_backward_name(qe_sched_backward b)
{
	return b == QE_BACKWARD_FULL ? "full" : b == QE_BACKWARD_SPLIT ? "split" : "?";
}

int qe_sched_kind_parse(const char *s, qe_sched_kind *out)
{
	if (s && strcmp(s, "interleaved") == 0)
		*out = QE_SCHED_INTERLEAVED;
	else if (s && strcmp(s, "zbv") == 0)
		*out = QE_SCHED_ZBV;
	else
		return qe_fail(QE_EINVAL, "unknown schedule '%s' (expected interleaved or zbv)", s ? s : "");
	return 0;
}

int qe_sched_backward_parse(const char *s, qe_sched_backward *out)
{
	if (s && strcmp(s, "split") == 0)
		*out = QE_BACKWARD_SPLIT;
	else if (s && strcmp(s, "full") == 0)
		*out = QE_BACKWARD_FULL;
	else
		return qe_fail(QE_EINVAL, "unknown backward mode '%s' (expected split or full)", s ? s : "");
	return 0;
}

int qe_sched_stage_of(const qe_sched *s, int rank, int chunk)
{
	if (rank < 0 || rank >= s->P || chunk < 0 || chunk >= s->V)
		return -1;
	if (s->placement == QE_PLACE_VSHAPE)
		return chunk == 0 ? rank : 2 * s->P - 1 - rank;
	return chunk * s->P + rank;
}

int qe_sched_rank_of(const qe_sched *s, int stage)
{
	if (stage < 0 || stage >= s->S)
		return -1;
	if (s->placement == QE_PLACE_VSHAPE)
		return stage < s->P ? stage : 2 * s->P - 1 - stage;
	return stage % s->P;
}

int qe_sched_chunk_of(const qe_sched *s, int stage)
{
	if (stage < 0 || stage >= s->S)
		return -1;
	if (s->placement == QE_PLACE_VSHAPE)
		return stage < s->P ? 0 : 1;
	return stage / s->P;
}

int qe_sched_create(qe_sched_placement pl, int P, int V, int M, qe_sched_backward bw, qe_sched **out)
{
	*out = NULL;
	if (P < 1 || V < 1 || M < 1)
		return qe_fail(QE_EINVAL, "schedule sizes must be >= 1: ranks %d, chunks %d, microbatches %d", P, V, M);
	if (pl != QE_PLACE_INTERLEAVED && pl != QE_PLACE_VSHAPE)
		return qe_fail(QE_EINVAL, "unknown stage placement %d", (int)pl);
	if (pl == QE_PLACE_VSHAPE && V != 2)
		return qe_fail(QE_EINVAL, "V-shape placement needs exactly 2 chunks per rank, got %d", V);
	if (bw != QE_BACKWARD_SPLIT && bw != QE_BACKWARD_FULL)
		return qe_fail(QE_EINVAL, "unknown backward mode %d", (int)bw);
	if ((long)P * V > 1 << 20 || M > 1 << 20)
		return qe_fail(QE_EINVAL, "schedule too large: %d ranks x %d chunks, %d microbatches", P, V, M);
	qe_sched *s = calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "schedule of %d ranks", P);
	s->ranks = calloc((size_t)P, sizeof(*s->ranks));
	if (!s->ranks) {
		free(s);
		return qe_fail(QE_ENOMEM, "schedule of %d ranks", P);
	}
	s->kind = pl == QE_PLACE_VSHAPE ? QE_SCHED_ZBV : QE_SCHED_INTERLEAVED;
	s->placement = pl;
	s->backward = bw;
	s->P = P;
	s->V = V;
	s->M = M;
	s->S = P * V;
	*out = s;
	return 0;
}

void qe_sched_free(qe_sched *s)
{
	if (!s)
		return;
	for (int r = 0; r < s->P; r++)
		free(s->ranks[r].actions);
	free(s->ranks);
	free(s);
}

int qe_sched_clone(const qe_sched *s, qe_sched **out)
{
	qe_sched *c;
	int rc = qe_sched_create(s->placement, s->P, s->V, s->M, s->backward, &c);
	if (rc)
		return rc;
	c->kind = s->kind;
	for (int r = 0; r < s->P; r++) {
		const qe_sched_rank *src = &s->ranks[r];
		if (src->n == 0)
			continue;
		c->ranks[r].actions = malloc((size_t)src->n * sizeof(qe_sched_action));
		if (!c->ranks[r].actions) {
			qe_sched_free(c);
			*out = NULL;
			return qe_fail(QE_ENOMEM, "clone of rank %d's %d actions", r, src->n);
		}
		memcpy(c->ranks[r].actions, src->actions, (size_t)src->n * sizeof(qe_sched_action));
		c->ranks[r].n = c->ranks[r].cap = src->n;
	}
	*out = c;
	return 0;
}

static int grow(qe_sched_rank *l, int rank)
{
	if (l->n < l->cap)
		return 0;
	int cap = l->cap ? 2 * l->cap : 32;
	qe_sched_action *a = realloc(l->actions, (size_t)cap * sizeof(*a));
	if (!a)
		return qe_fail(QE_ENOMEM, "action list of rank %d (%d entries)", rank, cap);
	l->actions = a;
	l->cap = cap;
	return 0;
}

int qe_sched_insert(qe_sched *s, int rank, int pos, qe_sched_action a)
{
	if (rank < 0 || rank >= s->P)
		return qe_fail(QE_EINVAL, "insert into rank %d of a %d-rank schedule", rank, s->P);
	qe_sched_rank *l = &s->ranks[rank];
	if (pos < 0 || pos > l->n)
		return qe_fail(QE_EINVAL, "insert at position %d of rank %d's %d actions", pos, rank, l->n);
	int rc = grow(l, rank);
	if (rc)
		return rc;
	memmove(&l->actions[pos + 1], &l->actions[pos], (size_t)(l->n - pos) * sizeof(a));
	l->actions[pos] = a;
	l->n++;
	return 0;
}

int qe_sched_append(qe_sched *s, int rank, qe_sched_action a)
{
	if (rank < 0 || rank >= s->P)
		return qe_fail(QE_EINVAL, "append to rank %d of a %d-rank schedule", rank, s->P);
	return qe_sched_insert(s, rank, s->ranks[rank].n, a);
}

int qe_sched_remove(qe_sched *s, int rank, int pos)
{
	if (rank < 0 || rank >= s->P)
		return qe_fail(QE_EINVAL, "remove from rank %d of a %d-rank schedule", rank, s->P);
	qe_sched_rank *l = &s->ranks[rank];
	if (pos < 0 || pos >= l->n)
		return qe_fail(QE_EINVAL, "remove position %d of rank %d's %d actions", pos, rank, l->n);
	memmove(&l->actions[pos], &l->actions[pos + 1], (size_t)(l->n - pos - 1) * sizeof(qe_sched_action));
	l->n--;
	return 0;
}

int qe_sched_push(qe_sched *s, int rank, qe_action_kind kind, int chunk, int mb)
{
	qe_sched_action a = { kind, chunk, qe_sched_stage_of(s, rank, chunk), mb, -1 };
	return qe_sched_append(s, rank, a);
}

static int is_message(qe_action_kind k)
{
	return k == QE_ACT_SEND_ACT || k == QE_ACT_RECV_ACT || k == QE_ACT_SEND_GRAD || k == QE_ACT_RECV_GRAD;
}

static void free_lists(qe_sched_rank *l, int n)
{
	if (!l)
		return;
	for (int r = 0; r < n; r++)
		free(l[r].actions);
	free(l);
}

static int put(qe_sched_rank *l, int rank, qe_sched_action a)
{
	int rc = grow(l, rank);
	if (!rc)
		l->actions[l->n++] = a;
	return rc;
}

/* Where a compute action's remote input comes from: 1 and *msg filled when it
 * needs a message (an activation for F, a gradient for DI/B), else 0. */
static int remote_input(const qe_sched *s, int r, const qe_sched_action *a, qe_sched_action *msg)
{
	if (a->kind == QE_ACT_F && a->stage > 0 && qe_sched_rank_of(s, a->stage - 1) != r) {
		*msg = (qe_sched_action){ QE_ACT_RECV_ACT, a->chunk, a->stage - 1, a->mb, qe_sched_rank_of(s, a->stage - 1) };
		return 1;
	}
	if ((a->kind == QE_ACT_DI || a->kind == QE_ACT_B) && a->stage + 1 < s->S &&
	    qe_sched_rank_of(s, a->stage + 1) != r) {
		*msg = (qe_sched_action){ QE_ACT_RECV_GRAD, a->chunk, a->stage + 1, a->mb,
					  qe_sched_rank_of(s, a->stage + 1) };
		return 1;
	}
	return 0;
}

/*
 * Messages between two ranks share one FIFO (the transport's per-peer queue,
 * runtime/comm/comm.h), so each rank must receive a peer's messages in the
 * order the peer sent them.  A recv goes right before its consumer when that
 * order allows; when the peer sent other messages first (ZB-V interleaves
 * activations and gradients between neighbours), those are received just
 * before it and held until their own consumer runs.  They were sent before the
 * one the consumer waits for, so receiving them early never waits longer.
 */
int qe_sched_add_comm(qe_sched *s)
{
	const int P = s->P;
	const size_t cells = (size_t)s->S * s->M;
	qe_sched_rank *withsend = calloc((size_t)P, sizeof(*withsend));
	qe_sched_rank *out = calloc((size_t)P, sizeof(*out));
	qe_sched_rank *fifo = calloc((size_t)P * P, sizeof(*fifo)); /* [src * P + dst]: sends in order */
	int *head = calloc((size_t)P * P, sizeof(int));
	unsigned char *got = calloc(2 * cells, 1); /* [grad][stage][mb] received by its consumer rank */
	int rc = 0;
	if (!withsend || !out || !fifo || !head || !got) {
		rc = qe_fail(QE_ENOMEM, "message insertion for %d ranks", P);
		goto drop_lists;
	}
	/* 1. sends right after their producers; note each pair's send order. */
	for (int r = 0; r < P && !rc; r++) {
		const qe_sched_rank *l = &s->ranks[r];
		for (int i = 0; i < l->n && !rc; i++) {
			qe_sched_action a = l->actions[i];
			if (is_message(a.kind)) {
				rc = qe_fail(QE_EINVAL, "rank %d action %d is already a message (%s); messages are added once",
					     r, i, qe_sched_action_name(a.kind));
				break;
			}
			rc = put(&withsend[r], r, a);
			int to = -1;
			qe_action_kind k = QE_ACT_NKINDS;
			if (a.kind == QE_ACT_F && a.stage + 1 < s->S)
				to = qe_sched_rank_of(s, a.stage + 1), k = QE_ACT_SEND_ACT;
			else if ((a.kind == QE_ACT_DI || a.kind == QE_ACT_B) && a.stage > 0)
				to = qe_sched_rank_of(s, a.stage - 1), k = QE_ACT_SEND_GRAD;
			if (rc || to < 0 || to == r || a.stage < 0 || a.stage >= s->S)
				continue;
			qe_sched_action m = { k, a.chunk, a.stage, a.mb, to };
			rc = put(&withsend[r], r, m);
			if (!rc)
				rc = put(&fifo[r * P + to], r, m);
		}
	}
	/* 2. recvs: drain the peer's FIFO up to the message each consumer needs. */
	for (int r = 0; r < P && !rc; r++) {
		const qe_sched_rank *l = &withsend[r];
		for (int i = 0; i < l->n && !rc; i++) {
			const qe_sched_action *a = &l->actions[i];
			qe_sched_action need;
			if (a->mb >= 0 && a->mb < s->M && a->stage >= 0 && a->stage < s->S &&
			    remote_input(s, r, a, &need)) {
				int grad = need.kind == QE_ACT_RECV_GRAD;
				int q = need.peer * P + r;
				size_t cell = (size_t)grad * cells + (size_t)need.stage * s->M + need.mb;
				while (!got[cell] && head[q] < fifo[q].n && !rc) {
					const qe_sched_action *m = &fifo[q].actions[head[q]++];
					int mg = m->kind == QE_ACT_SEND_GRAD;
					int consumer = mg ? m->stage - 1 : m->stage + 1;
					qe_sched_action rv = { mg ? QE_ACT_RECV_GRAD : QE_ACT_RECV_ACT,
							       qe_sched_chunk_of(s, consumer), m->stage, m->mb, need.peer };
					rc = put(&out[r], r, rv);
					if (m->mb >= 0 && m->mb < s->M)
						got[(size_t)mg * cells + (size_t)m->stage * s->M + m->mb] = 1;
				}
				/* If the peer never sends it, leave the consumer without a recv: the validator names it. */
			}
			if (!rc)
				rc = put(&out[r], r, *a);
		}
	}
drop_lists:
	if (!rc) {
		for (int r = 0; r < P; r++) {
			free(s->ranks[r].actions);
			s->ranks[r] = out[r];
		}
		free(out);
		out = NULL;
	}
	free_lists(out, P);
	free_lists(withsend, P);
	free_lists(fifo, P * P);
	free(head);
	free(got);
	return rc;
}

/* The reference order: each DI becomes a B at the same position, DWs go away. */
static void to_full_backward(qe_sched *s)
{
	for (int r = 0; r < s->P; r++) {
		qe_sched_rank *l = &s->ranks[r];
		int n = 0;
		for (int i = 0; i < l->n; i++) {
			qe_sched_action a = l->actions[i];
			if (a.kind == QE_ACT_DW)
				continue;
			if (a.kind == QE_ACT_DI)
				a.kind = QE_ACT_B;
			l->actions[n++] = a;
		}
		l->n = n;
	}
	s->backward = QE_BACKWARD_FULL;
}

int qe_sched_build(const qe_sched_config *cfg, qe_sched **out)
{
	qe_sched *s = NULL;
	int rc;
	*out = NULL;
	if (cfg->P < 1 || cfg->M < 1 || cfg->V < 1)
		return qe_fail(QE_EINVAL, "schedule needs ranks, microbatches and chunks >= 1 (got P=%d, M=%d, V=%d)",
			       cfg->P, cfg->M, cfg->V);
	switch (cfg->kind) {
	case QE_SCHED_INTERLEAVED:
		if (cfg->V > 1 && cfg->M % cfg->P != 0)
			return qe_fail(QE_EINVAL,
				       "interleaved schedule with %d chunks needs microbatches (%d) to be a multiple "
				       "of the pipeline ranks (%d)",
				       cfg->V, cfg->M, cfg->P);
		rc = qe_sched_create(QE_PLACE_INTERLEAVED, cfg->P, cfg->V, cfg->M, QE_BACKWARD_SPLIT, &s);
		if (!rc)
			rc = qe_sched_gen_interleaved(s);
		break;
	case QE_SCHED_ZBV:
		if (cfg->V != 2)
			return qe_fail(QE_EINVAL, "zbv schedule needs exactly 2 chunks per rank (got %d)", cfg->V);
		rc = qe_sched_create(QE_PLACE_VSHAPE, cfg->P, 2, cfg->M, QE_BACKWARD_SPLIT, &s);
		if (!rc)
			rc = qe_sched_gen_zbv(s);
		break;
	default:
		return qe_fail(QE_EINVAL, "unknown schedule kind %d", (int)cfg->kind);
	}
	if (!rc && cfg->backward == QE_BACKWARD_FULL)
		to_full_backward(s);
	else if (!rc && cfg->backward != QE_BACKWARD_SPLIT)
		rc = qe_fail(QE_EINVAL, "unknown backward mode %d", (int)cfg->backward);
	if (!rc)
		rc = qe_sched_add_comm(s);
	if (rc) {
		qe_sched_free(s);
		return rc;
	}
	*out = s;
	return 0;
}
