/*
 * cpu_backend.h - the reference backend: exact FP8 emulation, fixed-order
 * fp32 arithmetic and op-list capture/replay (DESIGN.md section 3).
 *
 * Callers normally reach it through qe_backend_open("cpu", ...); these entry
 * points exist so that backend.c can dispatch without knowing the internals.
 */
#ifndef QE_CPU_BACKEND_H
#define QE_CPU_BACKEND_H

#include "runtime/backend/backend.h"

/*
 * Create a cpu backend.  OUT: *out, destroyed with qe_cpu_backend_destroy
 * (or qe_backend_close).  Returns QE_OK or QE_ENOMEM.
 */
int qe_cpu_backend_create(qe_backend **out);

/*
 * Free the backend itself.  Streams, events, graphs and allocations must be
 * destroyed/freed by their owners first; any still alive are reported through
 * qe_log (warning) and leaked rather than freed under their owner's feet.
 * NULL is a no-op.
 */
void qe_cpu_backend_destroy(qe_backend *b);

#endif
