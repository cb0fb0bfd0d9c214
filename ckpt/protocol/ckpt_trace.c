/*
 * ckpt_trace.c - per-step traces and losses reach the catalog through rank
 * 0, the only rank that opens it.
 *
 * After each step every rank sends its fingerprint rows (possibly none: a
 * data-parallel replica other than 0 speaks through replica 0) to rank 0 on
 * the comm's service lane; rank 0 takes every rank's rows for the step, in
 * rank order, and writes them with its own and the loss in one catalog
 * transaction.  The trace's rows (qe_trace_row, runtime/exec/pstate.h) become
 * catalog rows here and nowhere else.  The sends are buffered, so no rank but 0 waits; rank 0 waits
 * only for ranks that finished the same step.
 */
#include "ckpt/session/ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

/* Wire form of one row: step i64, stage i32, fingerprint u64, category (NUL-padded). */
#define TRACE_CAT_MAX 40
typedef struct trace_wire {
	int64_t step;
	int64_t stage;
	uint64_t fp;
	char category[TRACE_CAT_MAX];
} trace_wire;

static int write_rows(ckpt_session *s, const cat_trace *rows, size_t n, const cat_loss *loss)
{
	int rc = cat_begin(s->cat);
	if (rc)
		return rc;
	if (n)
		rc = cat_trace_put(s->cat, s->run_id, rows, n);
	if (!rc && loss)
		rc = cat_loss_put(s->cat, s->run_id, loss, 1);
	if (rc) {
		cat_rollback(s->cat);
		return rc;
	}
	return cat_commit(s->cat);
}

int ckpt_record_step(ckpt_session *s, qe_rank *r, const qe_trace_row *rows, size_t n, const cat_loss *loss)
{
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm), rank = qe_pstate_rank(r), rc;
	if (qe_pstate_replica(r) != 0)
		n = 0;
	if (rank != 0) {
		trace_wire *w = qe_calloc(n + 1, sizeof(*w));
		if (!w)
			return qe_fail(QE_ENOMEM, "trace: out of memory");
		for (size_t i = 0; i < n; i++) {
			w[i].step = rows[i].step;
			w[i].stage = rows[i].stage;
			w[i].fp = rows[i].fp;
			snprintf(w[i].category, sizeof(w[i].category), "%s", rows[i].category);
		}
		rc = qe_pstate_svc_send(comm, 0, CKPT_SVC_TRACE, w, n * sizeof(*w));
		free(w);
		return rc ? qe_fail_ctx(rc, "trace: sending rank %d's rows to rank 0", rank) : QE_OK;
	}
	if (!s->cat)
		return qe_fail(QE_EINVAL, "trace: rank 0 has no catalog open");
	size_t total = n, cap = n + 16;
	cat_trace *all = qe_calloc(cap, sizeof(*all));
	void **bufs = qe_calloc((size_t)world + 1, sizeof(void *));
	if (!all || !bufs) {
		free(all);
		free(bufs);
		return qe_fail(QE_ENOMEM, "trace: out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		all[i].step = rows[i].step;
		all[i].stage = rows[i].stage;
		all[i].category = rows[i].category;
		all[i].fingerprint = rows[i].fp;
	}
	rc = QE_OK;
	for (int q = 1; q < world && !rc; q++) {
		size_t len = 0;
		if ((rc = qe_pstate_svc_recv(comm, q, CKPT_SVC_TRACE, &bufs[q], &len))) {
			rc = qe_fail_ctx(rc, "trace: waiting for rank %d's rows", q);
			break;
		}
		if (len % sizeof(trace_wire)) {
			rc = qe_fail(QE_ECOMM, "trace: rank %d sent %zu bytes, not whole rows", q, len);
			break;
		}
		size_t m = len / sizeof(trace_wire);
		if (total + m > cap) {
			cap = 2 * (total + m);
			cat_trace *p = qe_realloc(all, cap * sizeof(*all));
			if (!p) {
				rc = qe_fail(QE_ENOMEM, "trace: out of memory");
				break;
			}
			all = p;
		}
		trace_wire *w = bufs[q];
		for (size_t i = 0; i < m; i++) {
			w[i].category[TRACE_CAT_MAX - 1] = 0;
			all[total].step = w[i].step;
			all[total].stage = (int)w[i].stage;
			all[total].fingerprint = w[i].fp;
			all[total].category = w[i].category;
			total++;
		}
	}
	if (!rc)
		rc = write_rows(s, all, total, loss);
	for (int q = 0; q < world; q++)
		free(bufs[q]);
	free(bufs);
	free(all);
	return rc;
}
