/*
 * test_tie.c - tied embeddings (issue 37 item 4) on the cpu backend in one
 * process, read back from one AdamW step as test_grad_clip.c does: with
 * beta1 = beta2 = 0 and no weight decay a parameter moves by
 * lr * g / (|g| + eps), so g = eps r / (1 - |r|), r = (p0 - p1) / lr.
 *
 * An untied run whose head is set to wte's values before the step sees the
 * same forward and backward as the tied run, so:
 *  1. the tied run starts with its head equal to wte (bytes), the untied
 *     run's wte equals it too (wte's stream does not depend on the tie);
 *  2. after the step every parameter but the two copies has the untied
 *     run's bytes, and the two copies are still the same bytes;
 *  3. the copies moved by the step of g = g_wte + g_head of the untied run
 *     (within the float bound of reading those back);
 *  4. the reported gradient norm counts the tied matrix once;
 *  5. the copies check (qe_rank_check_replicas) fails, naming the tie, once
 *     one float of the head is changed, and passes again when it is put back;
 *  6. qe_model_param_count of the gpt2 preset is GPT-2's 124,439,808.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/exec/rank.h"
#include "runtime/job/config.h"
#include "runtime/job/data.h"
#include "runtime/model/model.h"

#define LR 1e-3f
#define EPS 1e-2f

static qe_data g_data;

typedef struct run {
	qe_backend *b;
	qe_rank *r;
	qe_stage *st;
	float *p0, *p1;
	int64_t n;
	int wte, head; /* parameter indices */
	double norm;
} run;

static int param_named(qe_stage *st, const char *name)
{
	for (int i = 0; i < qe_stage_nparams(st); i++)
		if (strcmp(qe_stage_param(st, i)->name, name) == 0)
			return i;
	return -1;
}

/* One step of the tiny model; with copy_head the untied head is set to wte first. Keeps the rank open. */
static int one_step(int tie, int copy_head, run *o)
{
	qe_train_config c;
	qe_train_config_default(&c);
	c.micro = 2;
	c.pp = 1;
	c.chunks = 1;
	c.model.tie_embeddings = tie;
	c.optim.lr = LR;
	c.optim.beta1 = 0;
	c.optim.beta2 = 0;
	c.optim.eps = EPS;
	c.optim.weight_decay = 0;
	c.log_every = 1;
	c.check_replicas = 0;
	memset(o, 0, sizeof(*o));
	float loss;
	CHECK_OK(qe_backend_open("cpu", &o->b));
	CHECK_OK(qe_rank_create(&c, o->b, NULL, &o->r));
	if (!o->r)
		return -1;
	o->st = qe_rank_stage(o->r, 0);
	o->wte = param_named(o->st, "wte");
	o->head = param_named(o->st, "head.w");
	CHECK(o->wte >= 0 && o->head >= 0, "the one stage lacks wte or head.w");
	if (o->wte < 0 || o->head < 0)
		return -1;
	float *p = qe_stage_params(o->st);
	const qe_param_info *w = qe_stage_param(o->st, o->wte), *h = qe_stage_param(o->st, o->head);
	if (copy_head)
		memcpy(p + h->offset, p + w->offset, (size_t)(w->rows * w->cols) * sizeof(float));
	o->n = qe_stage_param_floats(o->st);
	o->p0 = malloc((size_t)o->n * sizeof(float));
	o->p1 = malloc((size_t)o->n * sizeof(float));
	memcpy(o->p0, p, (size_t)o->n * sizeof(float));
	CHECK_OK(qe_rank_step(o->r, &g_data, &loss));
	memcpy(o->p1, p, (size_t)o->n * sizeof(float));
	o->norm = qe_rank_grad_norm(o->r);
	return 0;
}

static void run_free(run *o)
{
	qe_rank_free(o->r);
	qe_backend_close(o->b);
	free(o->p0);
	free(o->p1);
}

/* The gradient read back from parameter k's step. */
static double grad_at(const run *o, int64_t k)
{
	double r = ((double)o->p0[k] - (double)o->p1[k]) / (double)LR;
	return (double)EPS * r / (1.0 - fabs(r));
}

int main(void)
{
	char path[512];
	const char *data = qe_test_shared_path("data/brown.jsonl", path, sizeof(path));
	CHECK_OK(qe_data_load(data ? data : "", &g_data));
	run u, t;
	if (one_step(0, 1, &u) || one_step(1, 0, &t))
		return qe_test_done("exec_tie");
	const qe_param_info *w = qe_stage_param(t.st, t.wte), *h = qe_stage_param(t.st, t.head);
	size_t mat = (size_t)(w->rows * w->cols) * sizeof(float);

	/* 1. */
	CHECK(memcmp(t.p0 + w->offset, t.p0 + h->offset, mat) == 0, "the tied head does not start as wte's copy");
	CHECK(memcmp(t.p0, u.p0, (size_t)t.n * sizeof(float)) == 0,
	      "the tied run and the untied run with wte copied into its head start from different parameters");

	/* 2. */
	int64_t other_diff = 0;
	for (int i = 0; i < qe_stage_nparams(t.st); i++) {
		const qe_param_info *p = qe_stage_param(t.st, i);
		if (i != t.wte && i != t.head &&
		    memcmp(t.p1 + p->offset, u.p1 + p->offset, (size_t)(p->rows * p->cols) * sizeof(float)))
			other_diff++;
	}
	CHECK(other_diff == 0, "%lld parameters besides the tied pair differ from the untied run after the step",
	      (long long)other_diff);
	CHECK(memcmp(t.p1 + w->offset, t.p1 + h->offset, mat) == 0, "the two tied copies differ after the step");
	CHECK(memcmp(t.p1 + w->offset, u.p1 + w->offset, mat) != 0,
	      "the tied wte took the untied wte's step: the head's gradient was not added");

	/* 3. the step of the summed gradient, within the bound of reading both parts back */
	double worst = 0;
	int64_t worst_k = 0, n = w->rows * w->cols, moved = 0;
	for (int64_t k = 0; k < n; k++) {
		int64_t kw = w->offset + k, kh = h->offset + k;
		double g1 = grad_at(&u, kw), g2 = grad_at(&u, kh), g = g1 + g2;
		double want = (double)LR * g / (fabs(g) + (double)EPS);
		double got = (double)t.p0[kw] - (double)t.p1[kw];
		/*
		 * Each part is read back from a parameter rounded to half a spacing
		 * (ulp_w, ulp_h); through g -> lr g / (|g| + eps) that error becomes
		 * ulp / 2 x (|g_i| + eps)^2 / (|g| + eps)^2 of the step: large where
		 * the two parts nearly cancel.  The tied run's own parameter rounds
		 * to half a spacing, and the float step is good to 1e-6 of itself.
		 * The bound takes each reading's half spacing as a whole one.
		 */
		double s2 = (fabs(g) + (double)EPS) * (fabs(g) + (double)EPS);
		double amp_w = (fabs(g1) + (double)EPS) * (fabs(g1) + (double)EPS) / s2;
		double amp_h = (fabs(g2) + (double)EPS) * (fabs(g2) + (double)EPS) / s2;
		float aw = fmaxf(fabsf(u.p0[kw]), fabsf(u.p1[kw])), ah = fmaxf(fabsf(u.p0[kh]), fabsf(u.p1[kh]));
		float at = fmaxf(fabsf(t.p0[kw]), fabsf(t.p1[kw]));
		double ulp_w = (double)(nextafterf(aw, INFINITY) - aw), ulp_h = (double)(nextafterf(ah, INFINITY) - ah);
		double ulp_t = (double)(nextafterf(at, INFINITY) - at);
		double err = fabs(got - want) / (ulp_w * amp_w + ulp_h * amp_h + ulp_t + 1e-6 * fabs(want));
		moved += got != 0;
		if (err > worst) {
			worst = err;
			worst_k = k;
		}
	}
	printf("tied pair: %lld of %lld floats moved; worst step error %.3f of its bound (float %lld)\n",
	       (long long)moved, (long long)n, worst, (long long)worst_k);
	CHECK(moved > n / 4, "only %lld of the tied matrix's %lld floats moved", (long long)moved, (long long)n);
	CHECK(worst <= 1.0, "tied float %lld moved %.9e; wte's and the head's gradients summed say otherwise",
	      (long long)worst_k, (double)t.p0[w->offset + worst_k] - (double)t.p1[w->offset + worst_k]);

	/* 4. the matrix once in the norm */
	double once = 0, head_sq = 0;
	for (int i = 0; i < qe_stage_nparams(t.st); i++) {
		const qe_param_info *p = qe_stage_param(t.st, i);
		for (int64_t k = 0; k < p->rows * p->cols; k++) {
			double g = grad_at(&t, p->offset + k);
			if (i == t.head)
				head_sq += g * g;
			else
				once += g * g;
		}
	}
	printf("norm: reported %.6e, read back with the matrix once %.6e, twice %.6e\n", t.norm, sqrt(once),
	       sqrt(once + head_sq));
	CHECK(fabs(t.norm - sqrt(once)) <= 1e-3 * sqrt(once), "reported norm %.8e, read back %.8e", t.norm, sqrt(once));
	CHECK(fabs(sqrt(once + head_sq) - sqrt(once)) > 1e-3 * sqrt(once),
	      "counting the matrix twice would not change the norm: item 4 cannot fail here");

	/* 5. */
	CHECK_OK(qe_rank_check_replicas(t.r));
	float *hp = qe_stage_params(t.st) + h->offset + 7, keep = *hp;
	*hp = nextafterf(keep, INFINITY);
	int rc = qe_rank_check_replicas(t.r);
	CHECK(rc == QE_EMISMATCH && strstr(qe_last_error(), "tied embeddings diverged"),
	      "one changed float of the head: check returned %d (%s)", rc, qe_last_error());
	printf("changed head: %s\n", qe_last_error());
	*hp = keep;
	CHECK_OK(qe_rank_check_replicas(t.r));

	/* 6. */
	qe_model_config g;
	CHECK_OK(qe_model_preset("gpt2", &g));
	CHECK(g.tie_embeddings == 1, "the gpt2 preset does not tie its embeddings");
	CHECK(qe_model_param_count(&g) == 124439808.0, "gpt2 counts %.0f parameters, GPT-2 has 124439808",
	      qe_model_param_count(&g));
	g.tie_embeddings = 0;
	CHECK(qe_model_param_count(&g) == 124439808.0 + 50257.0 * 768, "untied gpt2 counts %.0f",
	      qe_model_param_count(&g));

	run_free(&u);
	run_free(&t);
	qe_data_free(&g_data);
	return qe_test_done("exec_tie");
}
