/*
 * ckpt_policy.c - the checkpoint policy of a training run (ckpt_policy.h):
 * which steps are boundaries, and at each the save (synchronous or async),
 * the drain that retention needs, the persist point and retention, in the
 * order the tiers need them.
 *
 * The plan is a pure function of the options and the step, so it is tested
 * on its own (tests/ckpt/test_policy.c); the handle only carries it out and
 * tells the caller what happened, event by event, so the command's lines
 * keep the order of the work.
 */
#include "ckpt/protocol/ckpt_policy.h"

#include <stdlib.h>

#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

struct ckpt_policy {
	ckpt_policy_opts o;
	ckpt_session *s;
	ckpt_async *async;     /* not owned */
	ckpt_persist *persist; /* owned; NULL without the persistent tier */
	ckpt_policy_event_cb on_event;
	void *ctx;
	int64_t last;          /* the step of the last checkpoint this process took; -1: none */
	int64_t steps_while_pushing;
};

unsigned ckpt_policy_plan(const ckpt_policy_opts *o, int64_t last, int64_t step, int stop)
{
	int due = stop ? last != step : o->every > 0 && step % o->every == 0;
	if (!due)
		return 0;
	unsigned plan = CKPT_DO_SAVE;
	if (o->persist.every > 0)
		plan |= CKPT_DO_PERSIST;
	if (o->async != CKPT_ASYNC_OFF) {
		plan |= CKPT_DO_ASYNC;
		if (o->keep > 0)
			plan |= CKPT_DO_DRAIN | CKPT_DO_RETAIN_BEFORE;
	} else if (o->keep > 0) {
		plan |= CKPT_DO_RETAIN_AFTER;
	}
	return plan;
}

static void emit(ckpt_policy *p, const ckpt_policy_event *ev)
{
	if (p->on_event)
		p->on_event(p->ctx, ev);
}

int ckpt_policy_open(ckpt_session *s, ckpt_async *async, const ckpt_policy_opts *o, ckpt_policy_event_cb on_event,
		     void *ctx, ckpt_policy **out)
{
	*out = NULL;
	if ((o->async != CKPT_ASYNC_OFF) != (async != NULL))
		return qe_fail(QE_EINVAL, "checkpoint policy: async mode %s without its handle, or a handle without it",
			       ckpt_async_mode_name(o->async));
	ckpt_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return qe_fail(QE_ENOMEM, "checkpoint policy: out of memory");
	p->o = *o;
	p->s = s;
	p->async = async;
	p->on_event = on_event;
	p->ctx = ctx;
	p->last = -1;
	if (o->persist.every > 0) {
		int rc = ckpt_persist_open(s, &o->persist, &p->persist);
		if (rc) {
			free(p);
			return qe_fail_ctx(rc, "--ckpt-persist-every");
		}
	}
	*out = p;
	return QE_OK;
}

/* Local retention; its failure is an event, and an error only when the ranks can no longer agree. */
static int retain(ckpt_policy *p, qe_rank *r, int64_t step)
{
	/* Never collected here: the checkpoint being pushed, and the one the next point would push. */
	int64_t pins[2];
	size_t npins = 0;
	if (qe_pstate_rank(r) == 0 && p->persist) {
		int64_t a = ckpt_persist_inflight(p->persist), b = ckpt_persist_due(p->persist);
		if (a >= 0)
			pins[npins++] = a;
		if (b >= 0 && b != a)
			pins[npins++] = b;
	}
	ckpt_retain_result res = { 0 };
	int rc = ckpt_retain_local(p->s, r, p->o.keep, pins, npins, p->o.keep_grace_s, &res);
	if (rc) {
		qe_comm *c = qe_pstate_comm(r);
		if (c && qe_pstate_comm_failed(c))
			return rc;
	}
	ckpt_policy_event ev = { .what = CKPT_POLICY_RETAINED, .step = step, .rc = rc, .retain = &res };
	emit(p, &ev);
	return QE_OK;
}

static int persist_point(ckpt_policy *p, qe_rank *r, int64_t step)
{
	ckpt_persist_event pe;
	int rc = ckpt_persist_point(p->persist, r, &pe);
	if (rc)
		return rc;
	ckpt_policy_event ev = { .what = CKPT_POLICY_PERSIST, .step = step, .persist = &pe };
	emit(p, &ev);
	return QE_OK;
}

static int boundary(ckpt_policy *p, qe_rank *r, int64_t step, unsigned plan)
{
	int rc;
	p->last = step;
	if (plan & CKPT_DO_DRAIN) {
		ckpt_async_result done;
		if ((rc = ckpt_async_drain(p->async, &done)))
			return qe_fail_ctx(rc, "checkpoint at step %lld", (long long)step);
		ckpt_policy_event ev = { .what = CKPT_POLICY_DRAINED, .step = step, .async = &done };
		emit(p, &ev);
	}
	if ((plan & CKPT_DO_RETAIN_BEFORE) && (rc = retain(p, r, step)))
		return rc;
	if (plan & CKPT_DO_ASYNC) {
		ckpt_async_result res;
		if ((rc = ckpt_async_save(p->async, r, &res)))
			return qe_fail_ctx(rc, "checkpoint at step %lld", (long long)step);
		ckpt_policy_event ev = { .what = CKPT_POLICY_SNAPSHOT, .step = step, .async = &res };
		emit(p, &ev);
	} else if (plan & CKPT_DO_SAVE) {
		ckpt_result res;
		if ((rc = ckpt_save(p->s, r, &res)))
			return qe_fail_ctx(rc, "checkpoint at step %lld", (long long)step);
		ckpt_policy_event ev = { .what = CKPT_POLICY_SAVED, .step = step, .saved = &res };
		emit(p, &ev);
	}
	if ((plan & CKPT_DO_PERSIST) && (rc = persist_point(p, r, step)))
		return rc;
	if ((plan & CKPT_DO_RETAIN_AFTER) && (rc = retain(p, r, step)))
		return rc;
	return QE_OK;
}

int ckpt_policy_step(ckpt_policy *p, qe_rank *r, int64_t step)
{
	if (p->persist && ckpt_persist_busy(p->persist))
		p->steps_while_pushing++;
	unsigned plan = ckpt_policy_plan(&p->o, p->last, step, 0);
	return plan ? boundary(p, r, step, plan) : QE_OK;
}

int ckpt_policy_stop(ckpt_policy *p, qe_rank *r, int64_t step)
{
	unsigned plan = ckpt_policy_plan(&p->o, p->last, step, 1);
	return plan ? boundary(p, r, step, plan) : QE_OK;
}

/* Every point's event in the final wait. */
static void end_event(void *ctx, const ckpt_persist_event *pe)
{
	ckpt_policy *p = ctx;
	ckpt_policy_event ev = { .what = CKPT_POLICY_PERSIST, .step = pe->step, .at_end = 1, .persist = pe };
	emit(p, &ev);
}

int ckpt_policy_end(ckpt_policy *p, qe_rank *r, ckpt_persist_progress_cb cb, void *cb_ctx)
{
	if (!p->persist && p->o.keep <= 0)
		return QE_OK;
	if (p->persist) {
		if (ckpt_persist_busy(p->persist)) {
			ckpt_policy_event ev = { .what = CKPT_POLICY_END_WAIT,
						 .step = ckpt_persist_inflight(p->persist) };
			emit(p, &ev);
		}
		int rc = ckpt_persist_finish(p->persist, r, cb, cb_ctx, end_event, p);
		if (rc)
			return rc;
	}
	return p->o.keep > 0 ? retain(p, r, p->last) : QE_OK;
}

int64_t ckpt_policy_steps_while_pushing(const ckpt_policy *p)
{
	return p ? p->steps_while_pushing : 0;
}

void ckpt_policy_close(ckpt_policy *p)
{
	if (!p)
		return;
	ckpt_persist_close(p->persist);
	free(p);
}
