/*
 * progress.c - the progress and summary lines (progress.h).
 */
#include "cli/progress.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#include "cli/rank_meter.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* "1:02:03" or "2:03" */
static const char *clock_text(char *buf, size_t len, double s)
{
	long t = s > 0 && isfinite(s) ? (long)(s + 0.5) : 0;
	if (t >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
	return buf;
}

/* A JSON number, or null for NaN and infinities. */
static void json_num(const char *key, double v, const char *fmt)
{
	printf(",\"%s\":", key);
	if (isfinite(v))
		printf(fmt, v);
	else
		printf("null");
}

static double peak_bytes(void)
{
	cli_alloc_stats a;
	cli_rank_meter_get(&a);
	return (double)a.peak;
}

void cli_progress_init(cli_progress *p, const qe_train_config *cfg, int print, int json, int peak, int64_t done,
		       int64_t until)
{
	*p = (cli_progress){ 0 };
	p->print = print;
	p->json = json;
	p->peak = peak;
	p->log_every = cfg->log_every;
	p->first = done;
	p->until = until;
	p->tokens_per_step = (double)cfg->micro * cfg->dp * (double)qe_model_tokens(&cfg->model);
	p->flops_per_token = qe_model_flops_per_token(&cfg->model);
	p->last_loss = p->last_eval = p->best_eval = p->last_norm = NAN;
	p->t0_ms = NAN;
}

void cli_progress_step(cli_progress *p, const qe_step_report *rep)
{
	if (isnan(p->t0_ms))
		p->t0_ms = now_ms() - rep->ms;
	p->steps++;
	p->ms_sum += rep->ms;
	p->last_loss = rep->loss;
	if (!isnan(rep->eval_loss)) {
		p->last_eval = rep->eval_loss;
		if (isnan(p->best_eval) || rep->eval_loss < p->best_eval)
			p->best_eval = rep->eval_loss;
	}
	if (!isnan(rep->grad_norm))
		p->last_norm = rep->grad_norm;
	if (!p->print || !(p->log_every <= 1 || rep->step % p->log_every == 0 || rep->step == p->until))
		return;
	double elapsed = (now_ms() - p->t0_ms) / 1e3;
	double eta = (double)(p->until - rep->step) * (p->ms_sum / (double)p->steps) / 1e3;
	double tflops = rep->ms > 0 ? p->tokens_per_step * p->flops_per_token / (rep->ms / 1e3) / 1e12 : 0;
	if (p->json) {
		printf("{\"event\":\"step\",\"step\":%lld,\"steps\":%lld", (long long)rep->step, (long long)p->until);
		json_num("loss", rep->loss, "%.6f");
		json_num("eval_loss", rep->eval_loss, "%.6f");
		json_num("lr", rep->lr, "%.6e");
		json_num("grad_norm", rep->grad_norm, "%.6e");
		json_num("tokens_per_s", rep->tokens_per_s, "%.1f");
		json_num("model_tflops", tflops, "%.3f");
		json_num("ms", rep->ms, "%.3f");
		json_num("elapsed_s", elapsed, "%.3f");
		json_num("eta_s", eta, "%.3f");
		if (p->peak)
			json_num("peak_bytes", peak_bytes(), "%.0f");
		printf("}\n");
		fflush(stdout);
		return;
	}
	char held[32] = "", gn[32] = "", pk[32] = "", e1[32], e2[32];
	if (!isnan(rep->eval_loss))
		snprintf(held, sizeof(held), "  held-out %.4f", rep->eval_loss);
	if (!isnan(rep->grad_norm))
		snprintf(gn, sizeof(gn), "  grad norm %.4e", rep->grad_norm);
	if (p->peak)
		snprintf(pk, sizeof(pk), "  peak %.2f GiB", peak_bytes() / (1024.0 * 1024 * 1024));
	printf("step %5lld/%lld  loss %.4f%s%s  %9.0f tok/s  %7.2f TFLOP/s  %8.2f ms/step  %s elapsed  eta %s%s  lr %.6e\n",
	       (long long)rep->step, (long long)p->until, rep->loss, held, gn, rep->tokens_per_s, tflops, rep->ms,
	       clock_text(e1, sizeof(e1), elapsed), clock_text(e2, sizeof(e2), eta), pk, rep->lr);
	fflush(stdout);
}

void cli_progress_summary(const cli_progress *p)
{
	if (!p->print || p->steps == 0)
		return;
	double s = p->ms_sum / 1e3, wall = (now_ms() - p->t0_ms) / 1e3;
	double tok = s > 0 ? p->tokens_per_step * (double)p->steps / s : 0;
	double tflops = tok * p->flops_per_token / 1e12;
	if (p->json) {
		printf("{\"event\":\"summary\",\"steps_run\":%lld,\"first_step\":%lld,\"last_step\":%lld", (long long)p->steps,
		       (long long)p->first + 1, (long long)(p->first + p->steps));
		json_num("loss", p->last_loss, "%.6f");
		json_num("eval_loss", p->last_eval, "%.6f");
		json_num("best_eval_loss", p->best_eval, "%.6f");
		json_num("grad_norm", p->last_norm, "%.6e");
		json_num("tokens_per_s", tok, "%.1f");
		json_num("model_tflops", tflops, "%.3f");
		json_num("wall_s", wall, "%.3f");
		if (p->peak)
			json_num("peak_bytes", peak_bytes(), "%.0f");
		printf("}\n");
		fflush(stdout);
		return;
	}
	char held[48] = "", pk[32] = "", e[32];
	if (!isnan(p->last_eval))
		snprintf(held, sizeof(held), ", held-out %.4f (best %.4f)", p->last_eval, p->best_eval);
	if (p->peak)
		snprintf(pk, sizeof(pk), ", peak %.2f GiB", peak_bytes() / (1024.0 * 1024 * 1024));
	printf("done: steps %lld to %lld in %s: loss %.4f%s, %.0f tok/s, %.2f model TFLOP/s%s\n",
	       (long long)p->first + 1, (long long)(p->first + p->steps), clock_text(e, sizeof(e), wall), p->last_loss,
	       held, tok, tflops, pk);
	fflush(stdout);
}
