/*
 * cpu_stream.c - cpu streams, events and graphs: the sticky failure of a
 * stream, the one path every op takes (qe__cpu_submit), and capture/replay.
 *
 * Every op goes through one path: refuse it on a failed stream, check it,
 * then either execute it (eager) or append a copy to the stream's capture
 * (graph).  Capture stores pointers, never data, and copies the pointer
 * arrays (AdamW gradient views, summed views, the items of fp8_update_many)
 * so the caller may reuse its array; replay runs the recorded ops in order on
 * the launching stream.  This is what CUDA stream capture does, and it lets
 * graph-mode code paths be tested without a GPU: an op that reads a buffer
 * before it is written, or memory allocated during capture, misbehaves here
 * as it would on a GPU.  What each op is, checks and runs lives in cpu_ops.c;
 * this file sees an op only as a record of the op list (cpu_ops.h).
 *
 * cpu work is synchronous, so events and waits are bookkeeping: an event
 * holds the count of ops its stream had completed when it was recorded.
 * After any failure a stream stays failed and every later call on it returns
 * the first error (STYLE.md 4) until it is destroyed.
 *
 * A NULL stream is the default stream (backend.h): the op runs at once on a
 * throw-away stream state, with no sticky failure.  Like CUDA's legacy stream
 * under global capture mode, it is refused while any cpu stream in the
 * process captures.
 */
#include "runtime/backend/cpu/cpu_stream.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

struct qe_graph {
	qe_cpu_backend *be;
	qe_cpu_op *ops;
	int n, cap;
};

struct qe_stream {
	qe_cpu_backend *be;
	qe_graph *capture; /* non-NULL while capturing */
	int failed;        /* first error, sticky */
	char failmsg[512];
	uint64_t done;     /* ops executed on this stream */
	uint64_t waits;    /* stream_wait calls on recorded events */
	qe_cpu_scratch scratch;
};

struct qe_event {
	qe_cpu_backend *be;
	int recorded;
	uint64_t seq;
};

/* Streams capturing in this process, over all cpu backends (default-stream rule). */
static atomic_int g_capturing;

/* ---- stream state -------------------------------------------------------- */

int qe__cpu_stream_fail(qe_stream *s, int rc)
{
	if (s && !s->failed) {
		s->failed = rc;
		snprintf(s->failmsg, sizeof(s->failmsg), "%s", qe_last_error());
	}
	return rc;
}

int qe__cpu_stream_check(qe_stream *s, const char *what)
{
	if (!s) {
		int n = atomic_load(&g_capturing);
		if (n > 0)
			return qe_fail(QE_ECAPTURE, "%s on the default (NULL) stream while %d cpu stream(s) capture", what, n);
		return QE_OK;
	}
	if (s->failed)
		return qe_fail(s->failed, "%s: cpu stream failed earlier (%s): %s", what, qe_errname(s->failed),
			       s->failmsg);
	return QE_OK;
}

int qe__cpu_stream_enter(qe_stream *s, const char *op)
{
	if (!s)
		return qe_fail(QE_EINVAL, "%s on the default (NULL) stream: it would block every other op", op);
	int rc = qe__cpu_stream_check(s, op);
	if (rc)
		return rc;
	if (s->capture)
		return qe_fail(QE_ECAPTURE, "%s while the stream captures: links run outside graphs", op);
	return QE_OK;
}

/* ---- graphs ------------------------------------------------------------------ */

/* Append a copy of op, duplicating its pointer array so the caller's may change. */
static int graph_append(qe_graph *g, const qe_cpu_op *op)
{
	if (g->n == g->cap) {
		int nc = g->cap ? 2 * g->cap : 32;
		qe_cpu_op *p = realloc(g->ops, (size_t)nc * sizeof(*p));
		if (!p)
			return qe_fail(QE_ENOMEM, "capture: growing the op list to %d ops", nc);
		g->ops = p;
		g->cap = nc;
	}
	qe_cpu_op c = *op;
	int rc = qe__cpu_op_own(&c);
	if (rc)
		return rc;
	g->ops[g->n++] = c;
	return QE_OK;
}

static void graph_free(qe_graph *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++)
		qe__cpu_op_release(&g->ops[i]);
	free(g->ops);
	free(g);
}

/* ---- execution ------------------------------------------------------------ */

/* Run one checked op on s: the stream ops here, the work ops in cpu_ops.c. */
static int exec_op(qe_stream *s, const qe_cpu_op *op)
{
	switch (op->kind) {
	case QE_CPU_OP_EVENT_RECORD:
		op->u.event_record.ev->recorded = 1;
		op->u.event_record.ev->seq = s->done;
		return QE_OK; /* bookkeeping, not work: done is not advanced */
	case QE_CPU_OP_STREAM_WAIT:
		if (op->u.stream_wait.ev->recorded)
			s->waits++;
		return QE_OK;
	default:
		break;
	}
	int rc = qe__cpu_op_exec(&s->scratch, op);
	if (rc == QE_OK)
		s->done++;
	return rc;
}

/* Run op on the default stream: a fresh state whose scratch lives for this call only. */
static int exec_default(const qe_cpu_op *op)
{
	qe_stream tmp;
	memset(&tmp, 0, sizeof(tmp));
	int rc = exec_op(&tmp, op);
	qe_cpu_scratch_release(&tmp.scratch);
	return rc;
}

int qe__cpu_submit(qe_stream *s, const qe_cpu_op *op)
{
	int rc = qe__cpu_stream_check(s, qe__cpu_op_name(op->kind));
	if (rc)
		return rc;
	rc = qe__cpu_op_check(op);
	if (!s)
		return rc ? rc : exec_default(op);
	if (!rc)
		rc = s->capture ? graph_append(s->capture, op) : exec_op(s, op);
	return rc ? qe__cpu_stream_fail(s, rc) : QE_OK;
}

/* ---- streams ------------------------------------------------------------------ */

int qe__cpu_stream_create(qe_backend *b, qe_stream **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "stream_create: NULL out pointer");
	qe_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "stream_create");
	s->be = (qe_cpu_backend *)b;
	atomic_fetch_add(&s->be->live_streams, 1);
	*out = s;
	return QE_OK;
}

void qe__cpu_stream_destroy(qe_stream *s)
{
	if (!s)
		return;
	if (s->capture) {
		graph_free(s->capture);
		atomic_fetch_sub(&s->be->capturing, 1);
		atomic_fetch_sub(&g_capturing, 1);
	}
	qe_cpu_scratch_release(&s->scratch);
	atomic_fetch_sub(&s->be->live_streams, 1);
	free(s);
}

int qe__cpu_stream_sync(qe_stream *s)
{
	int rc = qe__cpu_stream_check(s, "stream_sync");
	if (rc)
		return rc;
	/* CUDA invalidates a capture that synchronizes; so do we, so the bug shows on cpu. */
	if (s && s->capture)
		return qe__cpu_stream_fail(s, qe_fail(QE_ECAPTURE, "stream_sync on a capturing stream invalidates the capture"));
	return QE_OK;
}

/* cpu streams run every op when it is enqueued: nothing is ever pending. */
int qe__cpu_stream_query(qe_stream *s)
{
	return qe__cpu_stream_check(s, "stream_query");
}

/* ---- events ------------------------------------------------------------------- */

int qe__cpu_event_create(qe_backend *b, qe_event **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "event_create: NULL out pointer");
	qe_event *e = calloc(1, sizeof(*e));
	if (!e)
		return qe_fail(QE_ENOMEM, "event_create");
	e->be = (qe_cpu_backend *)b;
	atomic_fetch_add(&e->be->live_events, 1);
	*out = e;
	return QE_OK;
}

void qe__cpu_event_destroy(qe_event *e)
{
	if (!e)
		return;
	atomic_fetch_sub(&e->be->live_events, 1);
	free(e);
}

/* The stream ops' checks, then submit: event_record and stream_wait differ only in what they run. */
static int event_op(qe_stream *s, qe_event *e, qe_cpu_op_kind kind)
{
	const char *nm = qe__cpu_op_name(kind);
	int rc = qe__cpu_stream_check(s, nm);
	if (rc)
		return rc;
	if (!e)
		return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "%s: NULL event", nm));
	if (s && e->be != s->be)
		return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "%s: event and stream belong to different backends", nm));
	qe_cpu_op op = { .kind = kind };
	if (kind == QE_CPU_OP_EVENT_RECORD)
		op.u.event_record.ev = e;
	else
		op.u.stream_wait.ev = e;
	return qe__cpu_submit(s, &op);
}

int qe__cpu_enqueue_event_record(qe_event *e, qe_stream *s)
{
	return event_op(s, e, QE_CPU_OP_EVENT_RECORD);
}

/* Waiting on an event never recorded is a no-op, as in CUDA. */
int qe__cpu_enqueue_stream_wait(qe_stream *s, qe_event *e)
{
	return event_op(s, e, QE_CPU_OP_STREAM_WAIT);
}

/* ---- capture and replay ------------------------------------------------------- */

int qe__cpu_capture_begin(qe_stream *s)
{
	if (!s)
		return qe_fail(QE_EINVAL, "capture_begin: the default (NULL) stream cannot capture");
	int rc = qe__cpu_stream_check(s, "capture_begin");
	if (rc)
		return rc;
	if (s->capture)
		return qe__cpu_stream_fail(s, qe_fail(QE_ECAPTURE, "capture_begin: the stream is already capturing"));
	qe_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return qe_fail(QE_ENOMEM, "capture_begin");
	g->be = s->be;
	s->capture = g;
	atomic_fetch_add(&s->be->capturing, 1);
	atomic_fetch_add(&g_capturing, 1);
	return QE_OK;
}

int qe__cpu_capture_end(qe_stream *s, qe_graph **out)
{
	if (!s || !out)
		return qe_fail(QE_EINVAL, "capture_end: NULL %s", s ? "out pointer" : "stream");
	*out = NULL;
	if (!s->capture) {
		int rc = qe__cpu_stream_check(s, "capture_end");
		return rc ? rc : qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "capture_end: the stream is not capturing"));
	}
	qe_graph *g = s->capture;
	s->capture = NULL;
	atomic_fetch_sub(&s->be->capturing, 1);
	atomic_fetch_sub(&g_capturing, 1);
	int rc = qe__cpu_stream_check(s, "capture_end (capture invalidated)");
	if (rc) {
		graph_free(g);
		return rc;
	}
	atomic_fetch_add(&s->be->live_graphs, 1);
	*out = g;
	return QE_OK;
}

int qe__cpu_graph_launch(qe_graph *g, qe_stream *s)
{
	int rc = qe__cpu_stream_check(s, "graph_launch");
	if (rc)
		return rc;
	if (!g)
		return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: NULL graph"));
	if (s && g->be != s->be)
		return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: graph and stream belong to different backends"));
	qe_stream tmp;
	if (!s) {
		memset(&tmp, 0, sizeof(tmp));
		s = &tmp;
	}
	if (s->capture) {
		/* launching into a capture inlines the graph's ops (a child graph in CUDA) */
		if (s->capture == g)
			return qe__cpu_stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: a graph cannot launch into its own capture"));
		for (int i = 0; i < g->n; i++) {
			rc = graph_append(s->capture, &g->ops[i]);
			if (rc)
				return qe__cpu_stream_fail(s, rc);
		}
		return QE_OK;
	}
	for (int i = 0; i < g->n && !rc; i++) {
		rc = exec_op(s, &g->ops[i]);
		if (rc)
			rc = qe_fail_ctx(rc, "graph_launch: op %d of %d (%s)", i, g->n, qe__cpu_op_name(g->ops[i].kind));
	}
	if (s == &tmp) {
		qe_cpu_scratch_release(&tmp.scratch);
		return rc;
	}
	return rc ? qe__cpu_stream_fail(s, rc) : QE_OK;
}

void qe__cpu_graph_destroy(qe_graph *g)
{
	if (!g)
		return;
	atomic_fetch_sub(&g->be->live_graphs, 1);
	graph_free(g);
}

int qe__cpu_graph_op_count(const qe_graph *g)
{
	return g ? g->n : 0;
}
