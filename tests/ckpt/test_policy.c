/*
 * test_policy.c - the checkpoint policy's plan (ckpt/protocol/ckpt_policy.h):
 * which steps are checkpoint boundaries and what each does, in which order,
 * for every combination of --ckpt-every, --ckpt-async, --ckpt-keep and
 * --ckpt-persist-every that train and resume run; and the early stop on a
 * signal, which checkpoints unless that step's was just taken.  Pure: no
 * rank, no store, no catalog.
 */
#include <stdio.h>

#include "ckpt/protocol/ckpt_policy.h"
#include "testlib.h"

static ckpt_policy_opts opts(int64_t every, ckpt_async_mode async, int keep, int64_t persist_every)
{
	ckpt_policy_opts o = { .every = every, .async = async, .keep = keep };
	o.persist.every = persist_every;
	return o;
}

static void expect(const char *what, const ckpt_policy_opts *o, int64_t last, int64_t step, int stop, unsigned want)
{
	unsigned got = ckpt_policy_plan(o, last, step, stop);
	CHECK(got == want, "%s: every %lld async %d keep %d persist %lld, last %lld step %lld stop %d: plan 0x%x, want 0x%x",
	      what, (long long)o->every, (int)o->async, o->keep, (long long)o->persist.every, (long long)last,
	      (long long)step, stop, got, want);
}

int main(void)
{
	/* Which steps: multiples of every, none without it. */
	ckpt_policy_opts plain = opts(3, CKPT_ASYNC_OFF, 0, 0);
	for (int64_t step = 1; step <= 12; step++)
		expect("every 3", &plain, -1, step, 0, step % 3 == 0 ? CKPT_DO_SAVE : 0);
	ckpt_policy_opts none = opts(0, CKPT_ASYNC_OFF, 0, 0);
	for (int64_t step = 1; step <= 5; step++)
		expect("no --ckpt-every", &none, -1, step, 0, 0);

	/* A stop on a signal: a checkpoint of that step unless just taken, with or without --ckpt-every. */
	expect("stop off a boundary", &plain, 3, 5, 1, CKPT_DO_SAVE);
	expect("stop on the boundary just taken", &plain, 6, 6, 1, 0);
	expect("stop, nothing taken yet", &plain, -1, 2, 1, CKPT_DO_SAVE);
	expect("stop without --ckpt-every", &none, -1, 4, 1, CKPT_DO_SAVE);
	ckpt_policy_opts none_async = opts(0, CKPT_ASYNC_WAIT, 0, 0);
	expect("stop without --ckpt-every, async", &none_async, -1, 4, 1, CKPT_DO_SAVE | CKPT_DO_ASYNC);

	/* Synchronous: save, then the persist point, then retention. */
	ckpt_policy_opts sync_all = opts(2, CKPT_ASYNC_OFF, 2, 4);
	expect("sync, keep, persist", &sync_all, -1, 4, 0, CKPT_DO_SAVE | CKPT_DO_PERSIST | CKPT_DO_RETAIN_AFTER);
	expect("sync, keep, persist, off step", &sync_all, -1, 3, 0, 0);
	ckpt_policy_opts sync_keep = opts(2, CKPT_ASYNC_OFF, 1, 0);
	expect("sync, keep", &sync_keep, -1, 2, 0, CKPT_DO_SAVE | CKPT_DO_RETAIN_AFTER);
	ckpt_policy_opts sync_persist = opts(2, CKPT_ASYNC_OFF, 0, 2);
	/* every boundary is a persist point: rank 0 decides there what is due (a multiple of K2) */
	expect("sync, persist", &sync_persist, -1, 2, 0, CKPT_DO_SAVE | CKPT_DO_PERSIST);

	/* Async: retention needs nothing in flight, so drain and retain come before the snapshot. */
	for (int mode = CKPT_ASYNC_WAIT; mode <= CKPT_ASYNC_SKIP; mode++) {
		ckpt_policy_opts a_all = opts(2, (ckpt_async_mode)mode, 3, 2);
		expect("async, keep, persist", &a_all, -1, 2, 0,
		       CKPT_DO_DRAIN | CKPT_DO_RETAIN_BEFORE | CKPT_DO_SAVE | CKPT_DO_ASYNC | CKPT_DO_PERSIST);
		ckpt_policy_opts a_plain = opts(2, (ckpt_async_mode)mode, 0, 0);
		expect("async, no tiers: no drain", &a_plain, -1, 2, 0, CKPT_DO_SAVE | CKPT_DO_ASYNC);
		ckpt_policy_opts a_persist = opts(2, (ckpt_async_mode)mode, 0, 4);
		expect("async, persist: no drain", &a_persist, -1, 6, 0, CKPT_DO_SAVE | CKPT_DO_ASYNC | CKPT_DO_PERSIST);
		expect("async, keep, stop", &a_all, 2, 3, 1,
		       CKPT_DO_DRAIN | CKPT_DO_RETAIN_BEFORE | CKPT_DO_SAVE | CKPT_DO_ASYNC | CKPT_DO_PERSIST);
	}

	/* The bits' order is the order of the work: drain < retain before < save < persist < retain after. */
	CHECK(CKPT_DO_DRAIN < CKPT_DO_RETAIN_BEFORE && CKPT_DO_RETAIN_BEFORE < CKPT_DO_SAVE &&
		      CKPT_DO_SAVE < CKPT_DO_PERSIST && CKPT_DO_PERSIST < CKPT_DO_RETAIN_AFTER,
	      "plan bits out of order");
	return qe_test_done("ckpt_policy");
}
