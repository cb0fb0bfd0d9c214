/*
 * test_grad_clip.c - --grad-clip against the formula, on the cpu backend in
 * one process.
 *
 * With beta1 = beta2 = 0 and no weight decay, AdamW's first step moves each
 * parameter by lr * g / (|g| + eps), so the gradient itself can be read back
 * from the step a run took: g = eps r / (1 - |r|), r = (p0 - p1) / lr.
 *  1. the norm the rank reports equals the norm of those recovered gradients;
 *  2. a run clipped at a quarter of that norm moves each parameter by
 *     lr * f g / (|f g| + eps), f = clip / (norm + 1e-6);
 *  3. a clip above the norm gives the unclipped run's bytes;
 *  4. a clip below it changes the bytes, and two clipped runs agree byte for byte.
 * The bounds are those of recovering g from float parameters (stated below).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#include "runtime/backend/backend.h"
#include "runtime/exec/rank.h"
#include "runtime/job/config.h"
#include "runtime/job/data.h"
#include "runtime/model/model.h"

#define LR 1e-3f
#define EPS 1e-2f

static qe_data g_data;

typedef struct step_result {
	float *p0, *p1; /* every parameter of the one stage, before and after one step */
	int64_t n;
	double norm;
} step_result;

static void one_step(float clip, step_result *out)
{
	qe_train_config c;
	qe_train_config_default(&c);
	c.micro = 2;
	c.pp = 1;
	c.chunks = 1;
	c.optim.lr = LR;
	c.optim.beta1 = 0;
	c.optim.beta2 = 0;
	c.optim.eps = EPS;
	c.optim.weight_decay = 0;
	c.optim.grad_clip = clip;
	c.log_every = 1;
	memset(out, 0, sizeof(*out));
	qe_backend *b = NULL;
	qe_rank *r = NULL;
	float loss;
	CHECK_OK(qe_backend_open("cpu", &b));
	CHECK_OK(qe_rank_create(&c, b, NULL, &r));
	if (!r)
		return;
	qe_stage *st = qe_rank_stage(r, 0);
	out->n = qe_stage_param_floats(st);
	out->p0 = malloc((size_t)out->n * sizeof(float));
	out->p1 = malloc((size_t)out->n * sizeof(float));
	memcpy(out->p0, qe_stage_params(st), (size_t)out->n * sizeof(float));
	CHECK_OK(qe_rank_step(r, &g_data, &loss));
	memcpy(out->p1, qe_stage_params(st), (size_t)out->n * sizeof(float));
	out->norm = qe_rank_grad_norm(r);
	qe_rank_free(r);
	qe_backend_close(b);
}

static void result_free(step_result *s)
{
	free(s->p0);
	free(s->p1);
}

int main(void)
{
	char path[512];
	const char *data = qe_test_shared_path("data/brown.jsonl", path, sizeof(path));
	CHECK_OK(qe_data_load(data ? data : "", &g_data));
	step_result plain, clipped, above, again;
	one_step(0, &plain);
	if (!plain.p0)
		return qe_test_done("exec_grad_clip");

	/* 1. the gradients read back from the unclipped step, and their norm */
	double *g = malloc((size_t)plain.n * sizeof(double)), sq = 0;
	int64_t moved = 0;
	for (int64_t i = 0; i < plain.n; i++) {
		double r = ((double)plain.p0[i] - (double)plain.p1[i]) / (double)LR;
		g[i] = (double)EPS * r / (1.0 - fabs(r));
		sq += g[i] * g[i];
		moved += plain.p0[i] != plain.p1[i];
	}
	double norm = sqrt(sq);
	printf("unclipped: %lld of %lld parameters moved; reported norm %.6e, read back %.6e\n", (long long)moved,
	       (long long)plain.n, plain.norm, norm);
	CHECK(moved > plain.n / 2, "only %lld of %lld parameters moved", (long long)moved, (long long)plain.n);
	CHECK(isfinite(plain.norm) && plain.norm > 0, "the rank reported a norm of %g", plain.norm);
	/* p is about 0.02 and its float step 1e-9: r is good to about 1e-5, the norm to 1e-4 */
	CHECK(fabs(plain.norm - norm) <= 1e-3 * norm, "reported norm %.8e, the recovered gradients' %.8e", plain.norm,
	      norm);

	/* 2. clipped at a quarter of the norm: each step as the formula says */
	float clip = (float)(plain.norm / 4);
	one_step(clip, &clipped);
	double f = (double)clip / (plain.norm + 1e-6), worst = 0;
	int64_t worst_i = 0;
	for (int64_t i = 0; i < plain.n && clipped.p0; i++) {
		double fg = f * g[i], want = (double)LR * fg / (fabs(fg) + (double)EPS);
		double got = (double)clipped.p0[i] - (double)clipped.p1[i];
		/*
		 * Against what float arithmetic allows: each run's new parameter
		 * rounds to half a spacing (the plain one, which g is read back
		 * from, and the clipped one), and the step lr * ratio, computed in
		 * float, is good to a few parts in 1e7 of itself.
		 */
		float a = fmaxf(fabsf(clipped.p0[i]), fabsf(clipped.p1[i]));
		double ulp = (double)(nextafterf(a, INFINITY) - a);
		double err = fabs(got - want) / (2 * ulp + 1e-6 * fabs(want));
		if (err > worst) {
			worst = err;
			worst_i = i;
		}
	}
	printf("clipped at %.6e (factor %.6f): worst step error %.3f of its float bound, at parameter %lld\n",
	       (double)clip, f, worst, (long long)worst_i);
	CHECK(clipped.norm == plain.norm, "the clipped run reports norm %.8e, the plain run %.8e", clipped.norm,
	      plain.norm);
	CHECK(worst <= 1.0, "parameter %lld moved %.9e, the formula says %.9e", (long long)worst_i,
	      (double)clipped.p0[worst_i] - (double)clipped.p1[worst_i],
	      (double)LR * f * g[worst_i] / (fabs(f * g[worst_i]) + (double)EPS));
	CHECK(memcmp(clipped.p1, plain.p1, (size_t)plain.n * sizeof(float)) != 0,
	      "clipping at a quarter of the norm left the parameters of the plain run");

	/* 3. a clip above the norm changes nothing */
	one_step((float)(plain.norm * 2), &above);
	CHECK(above.p1 && memcmp(above.p1, plain.p1, (size_t)plain.n * sizeof(float)) == 0,
	      "a clip of twice the norm changed the parameters");

	/* 4. clipping is deterministic */
	one_step(clip, &again);
	CHECK(again.p1 && clipped.p1 && memcmp(again.p1, clipped.p1, (size_t)plain.n * sizeof(float)) == 0,
	      "two runs clipped at %g differ", (double)clip);
	printf("a clip of twice the norm gives the plain bytes; two clipped runs are identical\n");

	free(g);
	result_free(&plain);
	result_free(&clipped);
	result_free(&above);
	result_free(&again);
	qe_data_free(&g_data);
	return qe_test_done("exec_grad_clip");
}
