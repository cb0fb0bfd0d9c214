/*
 * profile.c - QE_PROFILE=1: where a rank's step spends its wall time.
 *
 * Each action of the step is waited for (its device work synchronised)
 * and the time since it started is charged to its kind; the loss and the
 * optimizer commit get rows of their own.  Waiting changes the overlap the
 * run would otherwise have, so the table says what each action costs alone,
 * not how long a step takes.  The first two steps of a process (eager
 * warmup, then graph capture) are left out.  The table is logged when the
 * rank is freed.
 */
#include "runtime/exec/rank_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/rt_options.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

void qe__rank_profile_init(qe_rank *r)
{
	const char *prof = qe_rt_options_get()->profile;
	r->prof.on = *prof && strcmp(prof, "0") != 0;
}

void qe__rank_profile_step_begin(qe_rank *r)
{
	if (r->prof.on && r->steps_here == 2) {
		memset(r->prof.ms, 0, sizeof(r->prof.ms));
		memset(r->prof.n, 0, sizeof(r->prof.n));
		r->prof.steps = 0;
	}
}

double qe__rank_profile_start(const qe_rank *r)
{
	return r->prof.on ? qe__rank_now_ms() : 0;
}

int qe__rank_profile_note(qe_rank *r, int kind, double t0)
{
	if (!r->prof.on)
		return QE_OK;
	int rc = qe__rank_sync(r, r->caller);
	if (rc)
		return rc;
	if (kind < 0 || kind >= RANK_PROF_ROWS)
		kind = RANK_PROF_OTHER;
	r->prof.ms[kind] += qe__rank_now_ms() - t0;
	r->prof.n[kind]++;
	return QE_OK;
}

void qe__rank_profile_step_end(qe_rank *r)
{
	r->prof.steps++;
}

void qe__rank_profile_report(const qe_rank *r)
{
	const char *names[RANK_PROF_ROWS] = { [RANK_PROF_OTHER] = "other", [RANK_PROF_LOSS] = "loss",
					      [RANK_PROF_OPTIM] = "optimizer" };
	for (int k = 0; k < QE_ACT_NKINDS; k++)
		names[k] = qe_action_label((qe_action_kind)k);
	if (!r->prof.on || r->prof.steps < 1)
		return;
	double total = 0;
	for (int k = 0; k < RANK_PROF_ROWS; k++)
		total += r->prof.ms[k];
	qe_log(QE_LOG_INFO, "profile, rank %d, %lld steps, every action waited for (ms per step):", r->rank,
	       (long long)r->prof.steps);
	for (int k = 0; k < RANK_PROF_ROWS; k++)
		if (r->prof.n[k])
			qe_log(QE_LOG_INFO, "  %-10s %9.3f ms/step  %6.1f%%  (%lld calls, %.3f ms each)",
			       names[k] ? names[k] : "?", r->prof.ms[k] / (double)r->prof.steps,
			       100.0 * r->prof.ms[k] / total, (long long)r->prof.n[k],
			       r->prof.ms[k] / (double)r->prof.n[k]);
}
