/*
 * train.c - the per-rank training loop.
 */
#include "runtime/train/train.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/core/status.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int qe_train_run(qe_rank *r, const qe_data *data, int64_t until, const qe_train_hooks *hooks)
{
	const qe_train_config *cfg = qe_rank_config(r);
	double tokens = (double)cfg->micro * cfg->dp * (double)qe_model_tokens(&cfg->model);
	while (qe_rank_steps_done(r) < until) {
		qe_step_report rep = { 0 };
		double t0 = now_ms();
		int rc = qe_rank_step(r, data, &rep.loss);
		if (rc)
			return rc;
		rep.ms = now_ms() - t0;
		rep.tokens_per_s = rep.ms > 0 ? tokens / (rep.ms / 1e3) : 0;
		rep.step = qe_rank_steps_done(r);
		rep.grad_norm = qe_rank_grad_norm(r);
		rep.lr = qe_adamw_lr_at(&cfg->optim, rep.step - 1);
		rep.eval_loss = NAN;
		if (cfg->eval_every > 0 && (rep.step % cfg->eval_every == 0 || rep.step == until))
			if ((rc = qe_rank_eval(r, data, &rep.eval_loss)))
				return qe_fail_ctx(rc, "evaluation after step %lld", (long long)rep.step);
		if (!isfinite(rep.loss))
			return qe_fail(QE_ENUMERIC, "step %lld: training loss is %g", (long long)rep.step, (double)rep.loss);
		qe_trace_row *rows = NULL;
		if (hooks && hooks->want_trace && (rc = qe_trace_rank(r, rep.step, rep.loss, &rows, &rep.nrows)))
			return rc;
		rep.rows = rows;
		rc = hooks && hooks->on_step ? hooks->on_step(hooks->ctx, r, &rep) : QE_OK;
		free(rows);
		if (rc)
			return rc;
		if (qe_rank_stop_agreed(r))
			break; /* every rank agreed at this step's loss all-reduce: the caller checkpoints and ends */
	}
	return QE_OK;
}
