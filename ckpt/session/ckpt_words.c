/*
 * ckpt_words.c - the small fixed-size words ranks exchange during a save or
 * restore, so that every rank returns the same outcome: each rank's word
 * gathered on rank 0 and combined (first failure's code, every failing
 * rank's message), and rank 0's decision broadcast back.
 */
#include "ckpt/session/ckpt_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/core/fault.h"
#include "runtime/core/status.h"

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

int ckpt__world(qe_rank *r)
{
	qe_comm *c = qe_rank_comm(r);
	return c ? qe_comm_world_size(c) : 1;
}

int ckpt__gather(qe_rank *r, const ckpt_word *mine, ckpt_word *all)
{
	int world = ckpt__world(r);
	if (world == 1) {
		*all = *mine;
		return QE_OK;
	}
	qe_comm_blob *blobs = NULL;
	int rc = qe_comm_gather_blobs(qe_rank_comm(r), mine, sizeof(*mine), &blobs);
	if (rc)
		return qe_fail_ctx(rc, "checkpoint: gathering every rank's answer");
	if (qe_rank_index(r) != 0)
		return QE_OK;
	memset(all, 0, sizeof(*all));
	all->id = mine->id;
	all->step = mine->step;
	all->e_w = mine->e_w;
	size_t len = 0;
	for (int i = 0; i < world; i++) {
		ckpt_word w;
		if (blobs[i].size != sizeof(w)) {
			qe_comm_blobs_free(blobs, world);
			return qe_fail(QE_ECOMM, "checkpoint: rank %d answered %zu bytes, expected %zu", i, blobs[i].size,
				       sizeof(w));
		}
		memcpy(&w, blobs[i].data, sizeof(w));
		w.msg[sizeof(w.msg) - 1] = 0;
		all->bytes += w.bytes;
		all->rt_bytes += w.rt_bytes;
		if (!w.rc)
			continue;
		if (!all->rc)
			all->rc = w.rc;
		/* Name the rank unless its message already starts with it. */
		char who[32];
		int n = snprintf(who, sizeof(who), "rank %d ", i);
		if (strncmp(w.msg, who, (size_t)n) == 0)
			who[0] = 0;
		else
			snprintf(who, sizeof(who), "rank %d: ", i);
		if (len < sizeof(all->msg) - 1)
			len += (size_t)snprintf(all->msg + len, sizeof(all->msg) - len, "%s%s%s", len ? "; " : "", who,
						w.msg);
	}
	qe_comm_blobs_free(blobs, world);
	return QE_OK;
}

int ckpt__bcast(qe_rank *r, ckpt_word *w)
{
	if (ckpt__world(r) == 1)
		return QE_OK;
	int rc = qe_comm_bcast(qe_rank_comm(r), 0, w, sizeof(*w));
	if (rc)
		return qe_fail_ctx(rc, "checkpoint: hearing rank 0's decision");
	w->msg[sizeof(w->msg) - 1] = 0;
	return QE_OK;
}
