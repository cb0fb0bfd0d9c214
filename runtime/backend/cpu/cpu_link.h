/*
 * cpu_link.h - private interface between the cpu op table (cpu_backend.c)
 * and the cpu device links (cpu_link.c; the ids and the handshake in
 * cpu_link_connect.c).
 *
 * The link ops are the table's entries (backend.h says what they promise).
 * cpu_link.c applies the cpu streams' rules (sticky failure, refusal while
 * capturing) through the helpers of cpu_stream.h.
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

#endif
