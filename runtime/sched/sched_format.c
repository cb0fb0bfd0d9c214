/*
 * sched_format.c - schedules as text people read: one compact token per
 * action (F0.3 = forward of local chunk 0, microbatch 3), one line per rank,
 * and the long form used in validator messages.  JSON is left to the CLI so
 * this library needs no JSON dependency.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

void qe_sbuf_printf(qe_sbuf *b, const char *fmt, ...)
{
	va_list ap;
	if (b->failed)
		return;
	for (;;) {
		size_t room = b->cap - b->n;
		va_start(ap, fmt);
		int w = b->p ? vsnprintf(b->p + b->n, room, fmt, ap) : -1;
		va_end(ap);
		if (w >= 0 && (size_t)w < room) {
			b->n += (size_t)w;
			return;
		}
		size_t need = b->n + (w > 0 ? (size_t)w : 0) + 1;
		size_t cap = b->cap ? 2 * b->cap : 256;
		while (cap < need)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

int qe_sbuf_finish(qe_sbuf *b, char **out)
{
	*out = NULL;
	if (b->failed || !b->p) {
		free(b->p);
		b->p = NULL;
		if (!b->failed) { /* nothing printed: an empty string */
			*out = calloc(1, 1);
			return *out ? 0 : qe_fail(QE_ENOMEM, "empty string");
		}
		return qe_fail(QE_ENOMEM, "schedule text (%zu bytes so far)", b->n);
	}
	*out = b->p;
	b->p = NULL;
	return 0;
}

int qe_sched_action_token(const qe_sched_action *a, char *buf, size_t len)
{
	switch (a->kind) {
	case QE_ACT_F: return snprintf(buf, len, "F%d.%d", a->chunk, a->mb);
	case QE_ACT_DI: return snprintf(buf, len, "I%d.%d", a->chunk, a->mb);
	case QE_ACT_DW: return snprintf(buf, len, "W%d.%d", a->chunk, a->mb);
	case QE_ACT_B: return snprintf(buf, len, "B%d.%d", a->chunk, a->mb);
	case QE_ACT_SEND_ACT: return snprintf(buf, len, "Sa%d.%d>%d", a->chunk, a->mb, a->peer);
	case QE_ACT_RECV_ACT: return snprintf(buf, len, "Ra%d.%d<%d", a->chunk, a->mb, a->peer);
	case QE_ACT_SEND_GRAD: return snprintf(buf, len, "Sg%d.%d>%d", a->chunk, a->mb, a->peer);
	case QE_ACT_RECV_GRAD: return snprintf(buf, len, "Rg%d.%d<%d", a->chunk, a->mb, a->peer);
	default: return snprintf(buf, len, "?%d", (int)a->kind);
	}
}

int qe_sched_action_describe(const qe_sched_action *a, char *buf, size_t len)
{
	const char *name = qe_sched_action_name(a->kind);
	switch (a->kind) {
	case QE_ACT_SEND_ACT:
	case QE_ACT_SEND_GRAD:
		return snprintf(buf, len, "%s(stage %d, mb %d, to rank %d)", name, a->stage, a->mb, a->peer);
	case QE_ACT_RECV_ACT:
	case QE_ACT_RECV_GRAD:
		return snprintf(buf, len, "%s(stage %d, mb %d, from rank %d)", name, a->stage, a->mb, a->peer);
	default:
		return snprintf(buf, len, "%s(stage %d, mb %d)", name, a->stage, a->mb);
	}
}

const char *qe_sched_legend(void)
{
	return "legend: Fc.m forward, Ic.m input gradient (DI), Wc.m weight gradient (DW), Bc.m full backward\n"
	       "        of local chunk c, microbatch m; Sac.m>r / Rac.m<r send / receive activation,\n"
	       "        Sgc.m>r / Rgc.m<r send / receive gradient, to / from rank r\n";
}

static void format_rank(qe_sbuf *b, const qe_sched *s, int r, unsigned flags)
{
	char tok[64];
	qe_sbuf_printf(b, "rank %d:", r);
	for (int i = 0; i < s->ranks[r].n; i++) {
		const qe_sched_action *a = &s->ranks[r].actions[i];
		if ((flags & QE_SCHED_FMT_COMPUTE_ONLY) && a->kind > QE_ACT_B)
			continue;
		qe_sched_action_token(a, tok, sizeof(tok));
		qe_sbuf_printf(b, " %s", tok);
	}
	qe_sbuf_printf(b, "\n");
}

int qe_sched_format_rank(const qe_sched *s, int rank, unsigned flags, char **out)
{
	qe_sbuf b = { 0 };
	*out = NULL;
	if (rank < 0 || rank >= s->P)
		return qe_fail(QE_EINVAL, "format rank %d of a %d-rank schedule", rank, s->P);
	format_rank(&b, s, rank, flags);
	return qe_sbuf_finish(&b, out);
}

int qe_sched_format(const qe_sched *s, unsigned flags, char **out)
{
	qe_sbuf b = { 0 };
	qe_sbuf_printf(&b, "schedule %s: %d ranks, %d chunks per rank, %d stages, %d microbatches, backward %s\n",
		       qe_sched_kind_name(s->kind), s->P, s->V, s->S, s->M, qe_sched_backward_name(s->backward));
	for (int r = 0; r < s->P; r++) {
		qe_sbuf_printf(&b, "  chunks of rank %d:", r);
		for (int c = 0; c < s->V; c++)
			qe_sbuf_printf(&b, " %d=stage %d", c, qe_sched_stage_of(s, r, c));
		qe_sbuf_printf(&b, "\n");
	}
	for (int r = 0; r < s->P; r++)
		format_rank(&b, s, r, flags);
	return qe_sbuf_finish(&b, out);
}

int qe_sched_stats_format(const qe_sched *s, const qe_sched_rank_stats *st, char **out)
{
	qe_sbuf b = { 0 };
	qe_sbuf_printf(&b, "%-6s %4s %4s %4s %4s %5s %5s %10s %10s %11s %5s %6s %6s\n", "rank", "F", "DI", "DW", "B",
		       "sends", "recvs", "peak_tapes", "delayed_dw", "pending_dw", "busy", "finish", "bubble");
	for (int r = 0; r < s->P; r++) {
		const qe_sched_rank_stats *x = &st[r];
		qe_sbuf_printf(&b, "%-6d %4d %4d %4d %4d %5d %5d %10d %10d %11d %5ld %6ld %5.1f%%\n", r,
			       x->count[QE_ACT_F], x->count[QE_ACT_DI], x->count[QE_ACT_DW], x->count[QE_ACT_B],
			       x->count[QE_ACT_SEND_ACT] + x->count[QE_ACT_SEND_GRAD],
			       x->count[QE_ACT_RECV_ACT] + x->count[QE_ACT_RECV_GRAD], x->peak_live_tapes,
			       x->delayed_dw, x->max_pending_dw, x->busy, x->finish, 100.0 * x->bubble);
	}
	if (s->P > 0)
		qe_sbuf_printf(&b, "makespan %ld time units (F, DI, DW = 1, B = 2, messages free)\n", st[0].makespan);
	return qe_sbuf_finish(&b, out);
}
