/*
 * cpu_link.h - private interface between the cpu op table (cpu_backend.c)
 * and the cpu device links (cpu_link.c).
 *
 * The link ops are the table's entries (backend.h says what they promise).
 * The two stream helpers let cpu_link.c apply the cpu streams' rules (sticky
 * failure, refusal while capturing) without seeing the stream's layout.
 */
#ifndef QE_CPU_LINK_H
#define QE_CPU_LINK_H

#include "runtime/backend/backend.h"

int qe__cpu_link_id(qe_backend *b, void *id);
int qe__cpu_link_open(qe_backend *b, const void *id, int is_sender, qe_link **out);
int qe__cpu_link_send(qe_link *l, qe_stream *s, const void *buf, size_t bytes);
int qe__cpu_link_recv(qe_link *l, qe_stream *s, void *buf, size_t bytes);
int qe__cpu_link_check(qe_link *l);
void qe__cpu_link_abort(qe_link *l);
void qe__cpu_link_close(qe_link *l);

/* Close the listening sockets of ids b made that no link_open took (backend teardown). */
void qe__cpu_link_forget(qe_backend *b);

/*
 * Whether an op that runs outside the op list may run on s now: QE_OK, or the
 * stream's earlier failure, QE_EINVAL for the default (NULL) stream, or
 * QE_ECAPTURE while s captures; each with a message naming op.
 */
int qe__cpu_stream_enter(qe_stream *s, const char *op);
/* Make s fail with rc (sticky, as after any failed op); returns rc. */
int qe__cpu_stream_fail(qe_stream *s, int rc);

#endif
