/*
 * sched_int.h - what the schedule files share and nobody else needs: the
 * generators (each fills an empty schedule with split-backward compute
 * actions, no messages) and a small growable string used by the formatters.
 */
#ifndef QE_SCHED_INT_H
#define QE_SCHED_INT_H

#include <stddef.h>

#include "runtime/sched/sched.h"

int qe_sched_gen_interleaved(qe_sched *s);
int qe_sched_gen_zbv(qe_sched *s);

/* Compute action shorthand for the generators. */
int qe_sched_push(qe_sched *s, int rank, qe_action_kind kind, int chunk, int mb);

typedef struct qe_sbuf {
	char *p;
	size_t n, cap;
	int failed; /* an allocation failed; p holds what fitted */
} qe_sbuf;

void qe_sbuf_printf(qe_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the string over (OUT: *out, caller frees) or fail with QE_ENOMEM, freeing it. */
int qe_sbuf_finish(qe_sbuf *b, char **out);

#endif
