/*
 * test_cuda_model.c - the whole tiny model on the cuda backend against the
 * cpu reference: all four stages in one process, two microbatches, F then
 * dI/dW per stage, AdamW, for 3 steps with FP8 (HYBRID, history 4, delayed
 * scaling) and for 2 steps in f32.  The stages are driven only through the
 * op table (ops->copy for tokens, hand-overs and read-back), so the same
 * driver runs on either backend.
 *
 * Checks: per-step loss within 1e-3 relative (FP8) or 1e-4 (f32); two cuda
 * runs byte-identical in losses, parameters, AdamW moments and FP8 meta;
 * after 3 steps at lr 0 (the same weights every step) the weight role's
 * scales equal (the cast is bit-exact) and the input and grad_output
 * scales within 10%.
 *
 * Why no tighter bound on the activation scales: Hopper's FP8 tensor cores
 * add in reduced precision (the FP8 GEMMs differ from the cpu's exact fp32
 * sums by up to 3e-4 of max|C|), the next layer's cast then puts a few
 * elements on the neighbouring FP8 code (a step of 6-25%), and amax - the
 * max of one element - follows; the difference grows with depth.  Seen on
 * the H200 at lr 0: input up to 3.2%, grad_output up to 3.8%, weight 0,
 * loss within 1.4e-4.  At lr 3e-3 AdamW adds its own amplification (its
 * first steps move a weight by about lr however small its gradient, so tiny
 * gradients of opposite sign end up 2 lr apart): scales then differ by up
 * to 19% and are only reported, while the loss stays within 3e-4.
 * Linked with qe_model (CMakeLists.txt).  Skips without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/backend.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"
#include "runtime/optim/adamw.h"
#include "testlib.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

#define NAME "backend_test_cuda_model"

#ifdef QE_WITH_CUDA

#define SEED 7u
#define M 2
#define NST 4

typedef struct run_out {
	float loss[8];
	unsigned char *state; /* params | m | v | meta of every stage */
	size_t nstate;
	float *meta; /* FP8 meta of every stage, concatenated */
	int64_t nmeta;
} run_out;

typedef struct pipe {
	qe_backend *b;
	const qe_backend_ops *o;
	qe_stream *s;
	qe_stage *st[NST];
	qe_adamw *opt[NST];
	float *grads[NST];
	qe_tensor *dests[NST];
	const float **views[NST];
} pipe;

static int pipe_open(pipe *p, const char *backend, const qe_model_config *cfg, const qe_precision *prec)
{
	int rc;
	memset(p, 0, sizeof(*p));
	if ((rc = qe_backend_open(backend, &p->b)))
		return rc;
	p->o = p->b->ops;
	if ((rc = p->o->stream_create(p->b, &p->s)))
		return rc;
	for (int s = 0; s < NST; s++) {
		if ((rc = qe_stage_create(p->b, cfg, prec, s, NST, M, M, 0, &p->st[s])) ||
		    (rc = qe_stage_init_params(p->st[s], SEED)) || (rc = qe_adamw_create(p->b, p->st[s], &p->opt[s])))
			return rc;
		int nm = qe_stage_nmatrices(p->st[s]);
		size_t total = 0;
		for (int j = 0; j < nm; j++) {
			qe_tensor sh = qe_stage_matrix_grad_shape(p->st[s], j);
			total += (size_t)qe_tensor_numel(&sh);
		}
		if ((rc = p->o->alloc(p->b, total * M * sizeof(float), (void **)&p->grads[s])))
			return rc;
		p->dests[s] = calloc((size_t)nm * M, sizeof(qe_tensor));
		p->views[s] = calloc((size_t)nm * M, sizeof(float *));
		float *cur = p->grads[s];
		for (int m = 0; m < M; m++)
			for (int j = 0; j < nm; j++) {
				qe_tensor sh = qe_stage_matrix_grad_shape(p->st[s], j);
				sh.data = cur;
				p->dests[s][m * nm + j] = sh;
				p->views[s][j * M + m] = cur;
				cur += qe_tensor_numel(&sh);
			}
	}
	return QE_OK;
}

static void pipe_close(pipe *p)
{
	if (!p->b)
		return;
	for (int s = 0; s < NST; s++) {
		qe_adamw_free(p->opt[s]);
		qe_stage_free(p->st[s]);
		if (p->grads[s])
			p->o->free(p->b, p->grads[s]);
		free(p->dests[s]);
		free(p->views[s]);
	}
	if (p->s)
		p->o->stream_destroy(p->s);
	qe_backend_close(p->b);
}

static int step(pipe *p, int T, qe_rng *r, float lr, float *loss)
{
	int rc;
	const qe_backend_ops *o = p->o;
	int32_t tok[M][256], tgt[M][256];
	int V = qe_stage_config(p->st[0])->vocab;
	for (int m = 0; m < M; m++)
		for (int t = 0; t < T; t++) {
			tok[m][t] = (int32_t)qe_rng_below(r, V);
			tgt[m][t] = (int32_t)qe_rng_below(r, V);
		}
	for (int m = 0; m < M; m++) {
		if ((rc = o->copy(p->s, qe_stage_slot_tokens(p->st[0], m), tok[m], T * 4, QE_COPY_H2D)) ||
		    (rc = o->copy(p->s, qe_stage_slot_targets(p->st[NST - 1], m), tgt[m], T * 4, QE_COPY_H2D)))
			return rc;
		for (int s = 0; s < NST; s++) {
			if (s > 0 && (rc = o->copy(p->s, qe_stage_slot_input(p->st[s], m),
						   qe_stage_slot_output(p->st[s - 1], m), qe_stage_act_bytes(p->st[s]),
						   QE_COPY_D2D)))
				return rc;
			if ((rc = qe_stage_forward(p->st[s], p->s, m, m == 0)))
				return rc;
		}
	}
	for (int m = 0; m < M; m++)
		for (int s = NST - 1; s >= 0; s--) {
			if ((rc = qe_stage_backward_input(p->st[s], p->s, m, m)))
				return rc;
			if (s > 0 && (rc = o->copy(p->s, qe_stage_slot_dout(p->st[s - 1], m),
						   qe_stage_slot_dinput(p->st[s], m), qe_stage_act_bytes(p->st[s]),
						   QE_COPY_D2D)))
				return rc;
			if ((rc = qe_stage_backward_weight(p->st[s], p->s, m,
							   &p->dests[s][m * qe_stage_nmatrices(p->st[s])], 0)))
				return rc;
		}
	qe_adamw_config oc = qe_adamw_config_default();
	oc.lr = lr;
	for (int s = 0; s < NST; s++)
		if ((rc = qe_adamw_step(p->opt[s], p->s, p->st[s], p->views[s], M, M, &oc, 1.0f)))
			return rc;
	float l[M];
	for (int m = 0; m < M; m++)
		if ((rc = o->copy(p->s, &l[m], qe_stage_slot_loss(p->st[NST - 1], m), 4, QE_COPY_D2H)))
			return rc;
	if ((rc = o->stream_sync(p->s)))
		return rc;
	float sum = 0;
	for (int m = 0; m < M; m++)
		sum += l[m];
	*loss = sum / (float)M;
	return QE_OK;
}

/* Append n bytes of backend memory to the host state. */
static int grab(pipe *p, run_out *out, const void *src, size_t n)
{
	out->state = realloc(out->state, out->nstate + n);
	int rc = p->o->copy(p->s, out->state + out->nstate, src, n, QE_COPY_D2H);
	if (!rc)
		rc = p->o->stream_sync(p->s);
	out->nstate += n;
	return rc;
}

static int run(const char *backend, int fp8, int steps, float lr, run_out *out)
{
	qe_model_config cfg;
	qe_precision prec;
	pipe p;
	int rc;
	memset(out, 0, sizeof(*out));
	memset(&prec, 0, sizeof(prec));
	if ((rc = qe_model_preset("tiny", &cfg)))
		return rc;
	prec.mode = fp8 ? QE_PREC_FP8 : QE_PREC_F32;
	prec.recipe = qe_fp8_recipe_default();
	prec.recipe.history_len = 4;
	if ((rc = pipe_open(&p, backend, &cfg, &prec)))
		goto done;
	qe_rng r;
	qe_rng_init(&r, SEED);
	for (int i = 0; i < steps; i++)
		if ((rc = step(&p, cfg.seq, &r, lr, &out->loss[i])))
			goto done;
	for (int s = 0; s < NST; s++) {
		size_t np = qe_stage_param_floats(p.st[s]) * 4, nm = qe_stage_fp8_meta_floats(p.st[s]) * 4;
		if ((rc = grab(&p, out, qe_stage_params(p.st[s]), np)) || (rc = grab(&p, out, p.opt[s]->m, np)) ||
		    (rc = grab(&p, out, p.opt[s]->v, np)))
			goto done;
		size_t at = out->nstate;
		if ((rc = grab(&p, out, qe_stage_fp8_meta(p.st[s]), nm)))
			goto done;
		out->meta = realloc(out->meta, (size_t)(out->nmeta * 4 + nm));
		memcpy(out->meta + out->nmeta, out->state + at, nm);
		out->nmeta += (int64_t)(nm / 4);
	}
done:
	pipe_close(&p);
	return rc;
}

static void free_out(run_out *o)
{
	free(o->state);
	free(o->meta);
}

/*
 * scale and scale_inv of every role block (L = 4: blocks of 6 floats; the
 * blocks cycle input, weight, grad_output) against per-role bounds on the
 * relative difference: 0 asks for equal floats, a negative bound only
 * reports.
 */
static void compare_scales(const run_out *c, const run_out *g, const double bound[QE_ROLE_COUNT])
{
	const int L = 4;
	double worst[QE_ROLE_COUNT] = { 0 }, worst_amax = 0;
	CHECK(c->nmeta == g->nmeta, "meta sizes differ: %lld vs %lld", (long long)c->nmeta, (long long)g->nmeta);
	for (int64_t b = 0; b + L + 2 <= c->nmeta && b + L + 2 <= g->nmeta; b += L + 2) {
		int role = (int)((b / (L + 2)) % QE_ROLE_COUNT);
		for (int i = 0; i < L + 2; i++) {
			float x = c->meta[b + i], y = g->meta[b + i];
			double rel = x == y ? 0 : fabs((double)x - y) / fmax(fabs(x), fabs(y));
			if (i < L) {
				worst_amax = fmax(worst_amax, rel);
				continue;
			}
			worst[role] = fmax(worst[role], rel);
			CHECK(bound[role] < 0 || rel <= bound[role],
			      "FP8 meta float %lld (%s %s): cpu %.9g cuda %.9g (rel %.3g > %.3g)", (long long)(b + i),
			      qe_fp8_role_name((qe_fp8_role)role), i == L ? "scale" : "scale_inv", x, y, rel, bound[role]);
		}
	}
	printf("  FP8 scale/scale_inv max rel diff: input %.3g, weight %.3g, grad_output %.3g", worst[0], worst[1],
	       worst[2]);
	if (bound[0] < 0)
		printf(" (reported only)");
	else
		printf(" (bounds %.3g, %.3g, %.3g)", bound[0], bound[1], bound[2]);
	printf("; amax histories %.3g\n", worst_amax);
}

int main(void)
{
	if (qe_cuda_device_count() < 1) {
		printf("SKIP: no CUDA device\n");
		return 0;
	}
	printf("seed %u, tiny preset, %d stages, %d microbatches\n", SEED, NST, M);
	run_out c8, g8, g8b, c0, g0, c32, g32;
	CHECK_OK(run("cpu", 1, 3, 3e-3f, &c8));
	CHECK_OK(run("cuda", 1, 3, 3e-3f, &g8));
	CHECK_OK(run("cuda", 1, 3, 3e-3f, &g8b));
	CHECK_OK(run("cpu", 1, 3, 0.0f, &c0));
	CHECK_OK(run("cuda", 1, 3, 0.0f, &g0));
	CHECK_OK(run("cpu", 0, 2, 3e-3f, &c32));
	CHECK_OK(run("cuda", 0, 2, 3e-3f, &g32));
	printf("FP8 (hybrid, history 4), 3 steps, lr 3e-3\n");
	for (int i = 0; i < 3; i++) {
		double rel = fabs((double)g8.loss[i] - c8.loss[i]) / fabs(c8.loss[i]);
		printf("  step %d loss cpu %.7f cuda %.7f rel %.3g (bound 1e-3)\n", i, c8.loss[i], g8.loss[i], rel);
		CHECK(rel <= 1e-3, "FP8 step %d: loss cpu %.7f cuda %.7f", i, c8.loss[i], g8.loss[i]);
	}
	/*
	 * Not checked here: AdamW's first steps move every weight by about lr
	 * whatever its gradient's size, so weights whose gradient is near zero
	 * (and of either sign on the two backends) end up 2 lr apart, and the
	 * amax of later steps follows.  The lr = 0 run below checks the scales.
	 */
	const double report_only[QE_ROLE_COUNT] = { -1, -1, -1 };
	compare_scales(&c8, &g8, report_only);
	CHECK(memcmp(g8.loss, g8b.loss, sizeof(g8.loss)) == 0, "two cuda runs gave different losses");
	CHECK(g8.nstate == g8b.nstate && g8.nstate > 0 && memcmp(g8.state, g8b.state, g8.nstate) == 0,
	      "two cuda runs ended in different state");
	printf("  two cuda runs: %zu bytes of state (params, moments, FP8 meta) %s\n", g8.nstate,
	       g8.nstate == g8b.nstate && g8.nstate > 0 && !memcmp(g8.state, g8b.state, g8.nstate) ? "identical"
												 : "DIFFER");
	printf("FP8, 3 steps, lr 0 (same weights every step: the scales see only numerical differences)\n");
	for (int i = 0; i < 3; i++) {
		double rel = fabs((double)g0.loss[i] - c0.loss[i]) / fabs(c0.loss[i]);
		printf("  step %d loss cpu %.7f cuda %.7f rel %.3g (bound 1e-3)\n", i, c0.loss[i], g0.loss[i], rel);
		CHECK(rel <= 1e-3, "FP8 lr 0 step %d: loss cpu %.7f cuda %.7f", i, c0.loss[i], g0.loss[i]);
	}
	const double lr0_bounds[QE_ROLE_COUNT] = { 0.1, 0.0, 0.1 };
	compare_scales(&c0, &g0, lr0_bounds);
	printf("f32, 2 steps\n");
	for (int i = 0; i < 2; i++) {
		double rel = fabs((double)g32.loss[i] - c32.loss[i]) / fabs(c32.loss[i]);
		printf("  step %d loss cpu %.7f cuda %.7f rel %.3g (bound 1e-4)\n", i, c32.loss[i], g32.loss[i], rel);
		CHECK(rel <= 1e-4, "f32 step %d: loss cpu %.7f cuda %.7f", i, c32.loss[i], g32.loss[i]);
	}
	free_out(&c8);
	free_out(&g8);
	free_out(&g8b);
	free_out(&c0);
	free_out(&g0);
	free_out(&c32);
	free_out(&g32);
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif
