/*
 * ckpt_words.c - the one agreement between ranks: the small fixed-size word
 * every collective step of a save, an async save, a restore, a persist point
 * or retention exchanges, so that every rank returns the same outcome: each
 * rank's word gathered on rank 0 and combined (first failure's code, every
 * failing rank's message naming it), the combination or rank 0's decision
 * broadcast back.  The synchronous save and the async save once had an
 * agreement each (ckpt__gather here, agree() in ckpt_async.c, with their
 * own word); they differed only by accident - the async one always put
 * "rank R: " before a message that already named rank R, and a word of the
 * wrong size failed rank 0 alone in the synchronous one (leaving the others
 * waiting for its broadcast) where the async one made it every rank's
 * outcome - and this file keeps the better half of each.
 */
#include "ckpt/session/ckpt_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

void ckpt__word_set(ckpt_word *w, int rc, const char *fmt, ...)
{
	w->rc = rc;
	w->msg[0] = 0;
	if (!rc)
		return;
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
		va_end(ap);
	} else {
		const char *e = qe_last_error();
		snprintf(w->msg, sizeof(w->msg), "%s", e && e[0] ? e : qe_strerror(rc));
	}
}

int ckpt__comm_world(qe_comm *c)
{
	return c ? qe_pstate_comm_world(c) : 1;
}

int ckpt__world(qe_rank *r)
{
	return ckpt__comm_world(qe_pstate_comm(r));
}

void ckpt__word_add(ckpt_word *all, size_t *len, int rank, int64_t rc, const char *msg)
{
	if (!rc)
		return;
	if (!all->rc)
		all->rc = rc;
	/* Name the rank unless its message already starts with it. */
	char who[32];
	int n = snprintf(who, sizeof(who), "rank %d ", rank);
	if (strncmp(msg, who, (size_t)n) == 0)
		who[0] = 0;
	else
		snprintf(who, sizeof(who), "rank %d: ", rank);
	if (*len < sizeof(all->msg) - 1)
		*len += (size_t)snprintf(all->msg + *len, sizeof(all->msg) - *len, "%s%s%s", *len ? "; " : "", who, msg);
}

int ckpt__agree(qe_rank *r, const char *what, const ckpt_word *mine, ckpt_word *all)
{
	int world = ckpt__world(r);
	if (world == 1) {
		*all = *mine;
		return QE_OK;
	}
	qe_comm_blob *blobs = NULL;
	int rc = qe_pstate_gather(qe_pstate_comm(r), mine, sizeof(*mine), &blobs);
	if (rc)
		return qe_fail_ctx(rc, "%s: gathering every rank's answer", what);
	memset(all, 0, sizeof(*all));
	if (qe_pstate_rank(r) == 0) {
		all->id = mine->id;
		all->step = mine->step;
		all->e_w = mine->e_w;
		size_t len = 0;
		for (int i = 0; i < world; i++) {
			ckpt_word w;
			if (qe_pstate_blob_size(blobs, i) != sizeof(w)) {
				all->rc = QE_ECOMM;
				snprintf(all->msg, sizeof(all->msg), "%s: rank %d answered %zu bytes, expected %zu", what, i,
					 qe_pstate_blob_size(blobs, i), sizeof(w));
				break;
			}
			memcpy(&w, qe_pstate_blob_data(blobs, i), sizeof(w));
			w.msg[sizeof(w.msg) - 1] = 0;
			all->busy |= w.busy;
			all->bytes += w.bytes;
			all->rt_bytes += w.rt_bytes;
			ckpt__word_add(all, &len, i, w.rc, w.msg);
		}
		qe_pstate_blobs_free(blobs, world);
	}
	return ckpt__bcast(r, what, all);
}

int ckpt__bcast(qe_rank *r, const char *what, ckpt_word *w)
{
	if (ckpt__world(r) == 1)
		return QE_OK;
	int rc = qe_pstate_bcast(qe_pstate_comm(r), 0, w, sizeof(*w));
	if (rc)
		return qe_fail_ctx(rc, "%s: hearing rank 0's decision", what);
	w->msg[sizeof(w->msg) - 1] = 0;
	return QE_OK;
}
