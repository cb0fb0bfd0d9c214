/*
 * test_model_grad.c - with quantization off, the analytic gradients of every
 * parameter and of the stage input match central finite differences, for
 * the embedding stage, a middle block and the head with the loss: once with
 * one block per stage and one sequence per microbatch (vocabulary 32, padded
 * to 128), and once with two blocks per stage, two sequences per microbatch
 * and a vocabulary of 100 padded to 128, and that again with the flash
 * attention (two stages of two blocks).  Either way the padded logits are
 * masked out of the loss: their head rows get exactly zero gradient, and
 * changing them changes no bit of the loss.
 *
 * Objective: the last stage's own loss; other stages L = sum(x_out * R) for a
 * fixed random R (so dL/dx_out = R).  f32 forward, eps = 1e-2, bound:
 * |analytic - numeric| <= 3e-2 * max(|analytic|, |numeric|) + 2e-3.
 */
#include <math.h>
#include <stdio.h>

#include "model_util.h"
#include "runtime/core/rng.h"

#define SEED 1234
#define EPS 1e-2f
#define RTOL 3e-2
#define ATOL 2e-3

static mu_pipe P;
static float *R; /* [T, H] */
static int T, H; /* T: rows of an activation (batch x seq) */

static double objective(int s)
{
	qe_stage *st = P.st[s];
	CHECK_OK(qe_stage_forward(st, P.s, 0, 1));
	if (qe_stage_is_last(st))
		return *qe_stage_slot_loss(st, 0);
	const float *y = qe_stage_slot_output(st, 0);
	double acc = 0;
	for (int i = 0; i < T * H; i++)
		acc += (double)y[i] * R[i];
	return acc;
}

static int close_enough(double a, double n)
{
	return fabs(a - n) <= RTOL * fmax(fabs(a), fabs(n)) + ATOL;
}

static void check_stage(int s, qe_rng *rng)
{
	qe_stage *st = P.st[s];
	int nm = qe_stage_nmatrices(st);
	double worst = 0;
	int checked = 0;
	/* analytic */
	objective(s);
	if (!qe_stage_is_last(st))
		memcpy(qe_stage_slot_dout(st, 0), R, (size_t)T * H * 4);
	CHECK_OK(qe_stage_backward_full(st, P.s, 0, 0, &P.dests[s][0]));
	const float *gnm = qe_stage_nonmatrix_grad(st, 0);
	float *params = qe_stage_params(st);
	for (int i = 0; i < qe_stage_nparams(st); i++) {
		const qe_param_info *pi = qe_stage_param(st, i);
		int64_t n = pi->rows * pi->cols;
		const float *g = pi->is_matrix ? P.dests[s][pi->matrix_index].data : gnm + pi->grad_offset;
		int samples = n < 12 ? (int)n : 12;
		for (int k = 0; k < samples; k++) {
			int64_t idx = samples == n ? k : (int64_t)qe_rng_below(rng, (uint64_t)n);
			float *w = params + pi->offset + idx;
			float old = *w;
			*w = old + EPS;
			double fp = objective(s);
			*w = old - EPS;
			double fm = objective(s);
			*w = old;
			double num = (fp - fm) / (2.0 * EPS), ana = g[idx];
			double err = fabs(ana - num) / (fabs(ana) + fabs(num) + 1e-9);
			if (err > worst && fabs(ana - num) > ATOL)
				worst = err;
			checked++;
			CHECK(close_enough(ana, num), "stage %d %s[%lld]: analytic %.6g numeric %.6g", s, pi->name,
			      (long long)idx, ana, num);
		}
	}
	(void)nm;
	if (!qe_stage_is_first(st)) {
		/* The input gradient: the analytic one was computed above into dx_in. */
		float *x = qe_stage_slot_input(st, 0);
		float *dx = malloc((size_t)T * H * 4);
		objective(s);
		if (!qe_stage_is_last(st))
			memcpy(qe_stage_slot_dout(st, 0), R, (size_t)T * H * 4);
		CHECK_OK(qe_stage_backward_input(st, P.s, 0, 0));
		memcpy(dx, qe_stage_slot_dinput(st, 0), (size_t)T * H * 4);
		for (int k = 0; k < 16; k++) {
			int idx = (int)qe_rng_below(rng, (uint64_t)T * H);
			float old = x[idx];
			x[idx] = old + EPS;
			double fp = objective(s);
			x[idx] = old - EPS;
			double fm = objective(s);
			x[idx] = old;
			double num = (fp - fm) / (2.0 * EPS);
			checked++;
			CHECK(close_enough(dx[idx], num), "stage %d input[%d]: analytic %.6g numeric %.6g", s, idx,
			      (double)dx[idx], num);
		}
		free(dx);
	}
	printf("stage %d (%s): %d gradient entries checked, worst relative error above atol %.3g\n", s,
	       qe_stage_is_first(st) ? "embedding+block" : qe_stage_is_last(st) ? "block+head+loss" : "block",
	       checked, worst);
}

/* The head rows of padded vocabulary entries: zero gradient, and the loss ignores them. */
static void check_padding(int s, const qe_model_config *cfg)
{
	qe_stage *st = P.st[s];
	int vpad = qe_model_vocab_padded(cfg);
	if (vpad == cfg->vocab)
		return;
	for (int i = 0; i < qe_stage_nparams(st); i++) {
		const qe_param_info *pi = qe_stage_param(st, i);
		if (strcmp(pi->name, "head.w"))
			continue;
		CHECK(pi->rows == vpad, "head.w has %lld rows, want the padded %d", (long long)pi->rows, vpad);
		double before = objective(s);
		CHECK_OK(qe_stage_backward_full(st, P.s, 0, 0, &P.dests[s][0]));
		const float *g = P.dests[s][pi->matrix_index].data;
		int nonzero = 0;
		for (int64_t k = (int64_t)cfg->vocab * pi->cols; k < pi->rows * pi->cols; k++)
			nonzero += g[k] != 0.0f;
		CHECK(nonzero == 0, "%d gradient entries of padded head rows are not zero", nonzero);
		/* a padded row, however large, changes no loss bit */
		float *w = qe_stage_params(st) + pi->offset + (int64_t)cfg->vocab * pi->cols;
		for (int64_t k = 0; k < (vpad - cfg->vocab) * pi->cols; k++)
			w[k] += 50.0f;
		double after = objective(s);
		CHECK(before == after, "padded head rows changed the loss: %.9g -> %.9g", before, after);
		for (int64_t k = 0; k < (vpad - cfg->vocab) * pi->cols; k++)
			w[k] -= 50.0f;
		printf("stage %d: %d padded vocabulary rows get zero gradient and leave the loss unchanged\n", s,
		       vpad - cfg->vocab);
	}
}

static void run_case(const qe_model_config *cfg, int nstages)
{
	qe_precision prec = { 0 };
	prec.mode = QE_PREC_F32;
	prec.recipe = qe_fp8_recipe_default();
	prec.recipe.history_len = 4;
	T = (int)qe_model_tokens(cfg);
	H = cfg->hidden;
	printf("%d layers in %d stages, batch %d x seq %d, vocab %d (padded %d)\n", cfg->layers, nstages, cfg->batch,
	       cfg->seq, cfg->vocab, qe_model_vocab_padded(cfg));
	CHECK_OK(mu_pipe_open_cut(&P, cfg, &prec, 1, SEED, nstages));
	if (qe_test_failures)
		return;
	qe_rng rng;
	qe_rng_init(&rng, SEED);
	R = malloc((size_t)T * H * 4);
	for (int i = 0; i < T * H; i++)
		R[i] = qe_rng_normal(&rng);
	for (int s = 0; s < P.nstages; s++) {
		qe_stage *st = P.st[s];
		/* Larger weights than the GPT init, so every path carries signal. */
		float *w = qe_stage_params(st);
		for (int i = 0; i < qe_stage_nparams(st); i++) {
			const qe_param_info *pi = qe_stage_param(st, i);
			for (int64_t k = 0; k < pi->rows * pi->cols; k++) {
				float z = qe_rng_normal(&rng);
				w[pi->offset + k] = pi->cols == 1 ? (strstr(pi->name, ".w") ? 1.0f + 0.1f * z : 0.1f * z)
								 : 0.3f * z;
			}
		}
		if (qe_stage_is_first(st)) {
			for (int t = 0; t < T; t++)
				qe_stage_slot_tokens(st, 0)[t] = (int32_t)qe_rng_below(&rng, cfg->vocab);
		} else {
			for (int i = 0; i < T * H; i++)
				((float *)qe_stage_slot_input(st, 0))[i] = qe_rng_normal(&rng);
		}
		if (qe_stage_is_last(st))
			for (int t = 0; t < T; t++)
				qe_stage_slot_targets(st, 0)[t] = (int32_t)qe_rng_below(&rng, cfg->vocab);
		check_stage(s, &rng);
		if (qe_stage_is_last(st))
			check_padding(s, cfg);
	}
	free(R);
	mu_pipe_close(&P);
}

int main(void)
{
	printf("seed %d, eps %g, bound |a-n| <= %g*max(|a|,|n|) + %g\n", SEED, EPS, RTOL, ATOL);
	qe_model_config one = { "gradcheck", 32, 16, 32, 2, 8, 3, 1, QE_ATTN_PROBS, 0 };
	run_case(&one, 3);
	/* two blocks per stage, two sequences per microbatch, vocabulary 100 padded to 128 */
	qe_model_config multi = { "gradcheck-b2", 100, 16, 32, 2, 8, 6, 2, QE_ATTN_PROBS, 0 };
	run_case(&multi, 3);
	/* the flash attention (output and log-sum-exp kept, probabilities recomputed), head dimension 16 */
	qe_model_config flash = { "gradcheck-flash", 100, 16, 32, 1, 8, 4, 2, QE_ATTN_FLASH, 0 };
	run_case(&flash, 2);
	return qe_test_done("model_grad");
}
