/*
 * cpu_stream.h - private interface of the cpu streams, events and graphs
 * (cpu_stream.c) to the rest of the cpu backend: the table and memory
 * (cpu_backend.c), the ops (cpu_ops.c) and the links (cpu_link.c).
 *
 * The stream, event and graph entries are the table's (backend.h says what
 * they promise).  qe__cpu_submit is the one path of every op: it refuses the
 * op on a failed stream, checks it, then runs it (eager) or records it into
 * the stream's capture (graph).  The other helpers let code outside
 * cpu_stream.c apply the streams' rules - sticky failure, refusal while
 * capturing - without seeing the stream's layout.
 */
#ifndef QE_CPU_STREAM_H
#define QE_CPU_STREAM_H

#include <stdatomic.h>
#include <stddef.h>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/cpu_ops.h"

/* The backend behind a qe_backend * of the cpu table; created in cpu_backend.c. */
typedef struct qe_cpu_backend {
	qe_backend pub;       /* first: a qe_backend * is a qe_cpu_backend * */
	atomic_int capturing; /* streams of this backend now capturing: alloc refuses while > 0 */
	atomic_long live_allocs, live_streams, live_events, live_graphs;
} qe_cpu_backend;

/*
 * Fail fast, check, then run or record op (a copy: the caller's record and
 * its pointer arrays may change afterwards).  Returns QE_OK or the status,
 * which also fails s (sticky) unless s is the default stream.
 */
int qe__cpu_submit(qe_stream *s, const qe_cpu_op *op);

/*
 * Whether s may take an op named what: QE_OK, s's earlier failure, or, for
 * the default (NULL) stream, QE_ECAPTURE while any cpu stream in the process
 * captures; each with a message naming what.  Does not fail s.
 */
int qe__cpu_stream_check(qe_stream *s, const char *what);

/*
 * Whether an op that runs outside the op list (a link transfer) may run on s
 * now: QE_OK, or the stream's earlier failure, QE_EINVAL for the default
 * (NULL) stream, or QE_ECAPTURE while s captures; each with a message naming
 * op.
 */
int qe__cpu_stream_enter(qe_stream *s, const char *op);
/* Make s fail with rc (sticky, as after any failed op; NULL s: nothing); returns rc. */
int qe__cpu_stream_fail(qe_stream *s, int rc);

/* The table's stream, event and graph entries. */
int qe__cpu_stream_create(qe_backend *b, qe_stream **out);
void qe__cpu_stream_destroy(qe_stream *s);
int qe__cpu_stream_sync(qe_stream *s);
int qe__cpu_stream_query(qe_stream *s);
int qe__cpu_event_create(qe_backend *b, qe_event **out);
void qe__cpu_event_destroy(qe_event *e);
int qe__cpu_enqueue_event_record(qe_event *e, qe_stream *s);
int qe__cpu_enqueue_stream_wait(qe_stream *s, qe_event *e);
int qe__cpu_capture_begin(qe_stream *s);
int qe__cpu_capture_end(qe_stream *s, qe_graph **out);
int qe__cpu_graph_launch(qe_graph *g, qe_stream *s);
void qe__cpu_graph_destroy(qe_graph *g);
int qe__cpu_graph_op_count(const qe_graph *g);

#endif
