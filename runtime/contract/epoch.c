/*
 * epoch.c - optimizer epoch e_W and the weight cache (its epoch e_C): *is the
 * FP8 weight cache current*, and *may the optimizer commit / may a checkpoint
 * be taken*.
 *
 * The FP8 copy of each weight is cast once per step (first F) and reused by
 * the later microbatches; after an optimizer commit it is stale until the next
 * first F refreshes it.  e_W is one per rank; each stage owns one
 * qe_weight_cache, which action.c checks and commits around every F.  The commit itself is only sound once nothing of the
 * epoch is still retained (live tapes would later produce gradients of old
 * weights), every gradient view is written, and no reduction is running.  The
 * checkpoint gate asks for the same plus quiescence: nothing retained from any
 * epoch, no written-but-unreduced gradients, device idle.  Both checks build
 * one message naming every pending item, so an operator sees the whole cause.
 */
#include "runtime/contract/contract.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void qe_epoch_init(qe_epoch_state *ep, int64_t e_W)
{
	ep->e_W = e_W;
}

void qe_epoch_commit_optimizer(qe_epoch_state *ep)
{
	ep->e_W++;
}

void qe_epoch_restart(qe_epoch_state *ep, int64_t e_W)
{
	ep->e_W = e_W;
}

/* ------------------------------------------------------------ weight cache */

void qe_weight_cache_init(qe_weight_cache *wc)
{
	wc->e_C = -1;
	wc->valid = 0;
}

int qe_weight_cache_check(const qe_weight_cache *wc, int64_t e_W, const qe_key *k, int first_of_step,
			  int *refresh_out)
{
	char kb[QE_KEY_FMT_LEN] = "F";
	if (!wc || !refresh_out)
		return qe_fail(QE_EINVAL, "weight cache check: NULL argument");
	if (first_of_step) {
		*refresh_out = 1;
		return QE_OK;
	}
	if (k)
		qe_key_format(k, kb, sizeof(kb));
	if (!wc->valid)
		return qe_fail(QE_ESTALE_CACHE,
			       "stale cache: %s: FP8 weight cache is invalid (not refreshed since restart), e_W=%lld; "
			       "only the first F of a step (mb 0) may refresh it",
			       kb, (long long)e_W);
	if (wc->e_C != e_W)
		return qe_fail(QE_ESTALE_CACHE,
			       "stale cache: %s: FP8 weight cache has e_C=%lld but e_W=%lld; "
			       "only the first F of a step (mb 0) may refresh it",
			       kb, (long long)wc->e_C, (long long)e_W);
	*refresh_out = 0;
	return QE_OK;
}

void qe_weight_cache_commit(qe_weight_cache *wc, int64_t e_W, int refreshed)
{
	if (refreshed) {
		wc->e_C = e_W;
		wc->valid = 1;
	}
}

int64_t qe_weight_cache_epoch(const qe_weight_cache *wc)
{
	return wc->valid ? wc->e_C : -1;
}

/* ------------------------------------------------------ commit and checkpoint gates */

/* A growing "pending" list in a fixed buffer; overflow is marked, never overrun. */
struct pending {
	char buf[900];
	size_t len;
	int n;
};

static void add_pending(struct pending *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_pending(struct pending *p, const char *fmt, ...)
{
	if (p->len + 1 >= sizeof(p->buf))
		return;
	if (p->n++) {
		p->buf[p->len++] = ',';
		p->buf[p->len++] = ' ';
	}
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(p->buf + p->len, sizeof(p->buf) - p->len, fmt, ap);
	va_end(ap);
	if (w < 0)
		w = 0;
	p->len += (size_t)w;
	if (p->len >= sizeof(p->buf) - 1) {
		p->len = sizeof(p->buf) - 1;
		memcpy(p->buf + p->len - 3, "...", 3);
	}
	p->buf[p->len] = '\0';
}

#define SHOW_REFS 4

static void pending_tapes(struct pending *p, const qe_tape_pool *pool, int64_t e)
{
	qe_tape_ref refs[SHOW_REFS];
	char rb[2 * QE_KEY_FMT_LEN];
	int n = qe_tape_pool_live_refs(pool, e, refs, SHOW_REFS);
	if (n == 0)
		return;
	char list[4 * SHOW_REFS * QE_KEY_FMT_LEN];
	size_t len = 0;
	list[0] = '\0';
	for (int i = 0; i < n && i < SHOW_REFS; i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? "; " : "",
					qe_tape_ref_format(&refs[i], rb, sizeof(rb)));
	if (e == QE_EPOCH_ANY)
		add_pending(p, "%d live tape%s (%s%s)", n, n == 1 ? "" : "s", list, n > SHOW_REFS ? "; ..." : "");
	else
		add_pending(p, "%d live tape%s of epoch %lld (%s%s)", n, n == 1 ? "" : "s", (long long)e, list,
			    n > SHOW_REFS ? "; ..." : "");
}

#define SHOW_VIEWS 6

static void pending_views(struct pending *p, const qe_arena *arena)
{
	int np = qe_arena_nparams(arena), M = qe_arena_microbatches(arena), missing = 0;
	for (int q = 0; q < np; q++)
		for (int m = 0; m < M; m++)
			if (!qe_arena_is_written(arena, q, m) && missing++ < SHOW_VIEWS)
				add_pending(p, "arena view %s mb %d not written", qe_arena_param_name(arena, q), m);
	if (missing > SHOW_VIEWS)
		add_pending(p, "%d more arena views not written", missing - SHOW_VIEWS);
}

int qe_epoch_check_commit(const qe_epoch_state *ep, const qe_tape_pool *pool, const qe_arena *arena,
			  int reductions_in_flight)
{
	struct pending p = { .len = 0, .n = 0 };
	p.buf[0] = '\0';
	if (!ep)
		return qe_fail(QE_EINVAL, "optimizer commit check: NULL epoch state");
	if (pool)
		pending_tapes(&p, pool, ep->e_W);
	if (arena)
		pending_views(&p, arena);
	if (reductions_in_flight > 0)
		add_pending(&p, "%d reduction%s in flight", reductions_in_flight, reductions_in_flight == 1 ? "" : "s");
	if (p.n)
		return qe_fail(QE_EPREMATURE, "premature commit of epoch %lld: %s", (long long)ep->e_W, p.buf);
	return QE_OK;
}

int qe_quiescence_check(const qe_epoch_state *ep, const qe_tape_pool *pool, const qe_arena *arena,
			int reductions_in_flight, int device_busy)
{
	struct pending p = { .len = 0, .n = 0 };
	p.buf[0] = '\0';
	if (pool)
		pending_tapes(&p, pool, QE_EPOCH_ANY);
	if (arena) {
		qe_arena_stats st;
		qe_arena_get_stats(arena, &st);
		if (st.writes_this_step > 0) {
			add_pending(&p, "%llu arena view%s written but not reduced",
				    (unsigned long long)st.writes_this_step, st.writes_this_step == 1 ? "" : "s");
			pending_views(&p, arena);
		}
	}
	if (reductions_in_flight > 0)
		add_pending(&p, "%d reduction%s in flight", reductions_in_flight, reductions_in_flight == 1 ? "" : "s");
	if (device_busy)
		add_pending(&p, "device work not complete");
	if (p.n) {
		if (ep)
			return qe_fail(QE_EPREMATURE, "premature checkpoint at epoch %lld: %s", (long long)ep->e_W,
				       p.buf);
		return qe_fail(QE_EPREMATURE, "premature checkpoint: %s", p.buf);
	}
	return QE_OK;
}
