/*
 * adamw.c - AdamW over a stage's parameters, each tensor's views summed in
 * order before the update (M microbatch views, or one accumulated matrix
 * view).  A step is one adamw_many op over every parameter (149 adamw ops
 * for GPT-2 small were 149 launches on cuda); under data parallelism too,
 * each parameter reading its replica sum as its one gradient
 * (qe_adamw_set_grad; runtime/exec/rank_step.c).
 */
#include "runtime/optim/adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

qe_adamw_config qe_adamw_config_default(void)
{
	qe_adamw_config c = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, QE_LR_CONSTANT, 0, 0.0f, 0, 0.0f };
	return c;
}

float qe_adamw_lr_at(const qe_adamw_config *c, int64_t s)
{
	double lr = c->lr, lo = c->lr_min;
	if (c->warmup > 0 && s < c->warmup)
		return (float)(lr * (double)(s + 1) / (double)c->warmup);
	if (c->lr_schedule != QE_LR_COSINE && c->lr_schedule != QE_LR_LINEAR)
		return c->lr;
	int64_t span = c->decay_steps - c->warmup;
	double p = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
	if (p > 1.0)
		p = 1.0;
	if (p < 0.0)
		p = 0.0;
	if (c->lr_schedule == QE_LR_COSINE)
		return (float)(lo + (lr - lo) * 0.5 * (1.0 + cos(3.14159265358979323846 * p)));
	return (float)(lr - (lr - lo) * p);
}

static const char *const schedule_names[] = { "constant", "cosine", "linear" };

const char *qe_lr_schedule_name(int k)
{
	return k >= 0 && k < 3 ? schedule_names[k] : "?";
}

int qe_lr_schedule_parse(const char *s, int *out)
{
	for (int k = 0; k < 3; k++)
		if (!strcmp(s, schedule_names[k])) {
			*out = k;
			return QE_OK;
		}
	return qe_fail(QE_EINVAL, "unknown learning-rate schedule '%s' (constant, cosine or linear)", s);
}

int qe_adamw_create(qe_backend *b, const qe_stage *st, qe_adamw **out)
{
	qe_adamw *a = calloc(1, sizeof(*a));
	int rc;
	if (!a)
		return qe_fail(QE_ENOMEM, "adamw: out of host memory");
	a->b = b;
	a->n = qe_stage_param_floats(st);
	a->nsegs = qe_stage_nparams(st);
	if (!(a->segs = calloc((size_t)(a->nsegs > 0 ? a->nsegs : 1), sizeof(*a->segs))) ||
	    !(a->grad_of = calloc((size_t)(a->nsegs > 0 ? a->nsegs : 1), sizeof(*a->grad_of)))) {
		qe_adamw_free(a);
		return qe_fail(QE_ENOMEM, "adamw: out of host memory for the segments of stage %d", qe_stage_index(st));
	}
	if ((rc = b->ops->alloc(b, a->n * 4, (void **)&a->m)) || (rc = b->ops->alloc(b, a->n * 4, (void **)&a->v)) ||
	    (rc = b->ops->alloc(b, (size_t)(a->nsegs > 0 ? a->nsegs : 1) * 4, (void **)&a->sumsq))) {
		qe_adamw_free(a);
		return qe_fail_ctx(rc, "adamw: allocating moments of stage %d", qe_stage_index(st));
	}
	*out = a;
	return QE_OK;
}

void qe_adamw_free(qe_adamw *a)
{
	if (!a)
		return;
	if (a->m)
		a->b->ops->free(a->b, a->m);
	if (a->v)
		a->b->ops->free(a->b, a->v);
	if (a->sumsq)
		a->b->ops->free(a->b, a->sumsq);
	free(a->segs);
	free(a->grad_of);
	free(a->views);
	free(a);
}

/* a->views holding at least need pointers; QE_ENOMEM (said) when it cannot grow. */
static int views_reserve(qe_adamw *a, size_t need)
{
	if (need <= a->views_cap)
		return QE_OK;
	const float **p = realloc(a->views, need * sizeof(*p));
	if (!p)
		return qe_fail(QE_ENOMEM, "adamw: out of host memory for %zu gradient view pointers", need);
	a->views = p;
	a->views_cap = need;
	return QE_OK;
}

/* a->segs for every parameter of st: its gradient views, decay and place (qe_adamw_step's table). */
static int fill_segments(qe_adamw *a, qe_stage *st, const float *const *matrix_views, int nmatrix_views, int nmicro,
			 const qe_adamw_config *cfg)
{
	if (nmicro < 1 || nmicro > 256)
		return qe_fail(QE_EINVAL, "adamw: %d microbatches (1..256 supported)", nmicro);
	if (nmatrix_views != 1 && nmatrix_views != nmicro)
		return qe_fail(QE_EINVAL, "adamw: %d matrix views per parameter (1 or %d microbatches)", nmatrix_views,
			       nmicro);
	int np = qe_stage_nparams(st), nnm = qe_stage_nonmatrix_views(st);
	if (np != a->nsegs)
		return qe_fail(QE_EINVAL, "adamw: stage %d has %d parameters; its optimizer was made for %d",
			       qe_stage_index(st), np, a->nsegs);
	size_t need = 0;
	for (int i = 0; i < np; i++)
		need += a->grad_of[i] ? 1 : (size_t)(qe_stage_param(st, i)->is_matrix ? nmatrix_views : nnm);
	int rc = views_reserve(a, need);
	if (rc)
		return rc;
	const float **views = a->views;
	for (int i = 0; i < np; i++) {
		const qe_param_info *p = qe_stage_param(st, i);
		int nv = a->grad_of[i] ? 1 : p->is_matrix ? nmatrix_views : nnm;
		for (int m = 0; m < nv; m++)
			views[m] = a->grad_of[i] ? a->grad_of[i]
				   : p->is_matrix ? matrix_views[(size_t)p->matrix_index * nmatrix_views + m]
						  : qe_stage_nonmatrix_grad(st, m) + p->grad_offset;
		a->segs[i] = (qe_adamw_seg){ .offset = p->offset, .n = p->rows * p->cols,
					     .weight_decay = p->decay ? cfg->weight_decay : 0.0f, .nviews = nv,
					     .grads = views, .name = p->name };
		views += nv;
	}
	return QE_OK;
}

static qe_adamw_many_args many_args(qe_adamw *a, qe_stage *st, const qe_adamw_seg *segs, int nseg,
				    const qe_adamw_config *cfg, float grad_scale)
{
	return (qe_adamw_many_args){ .param = qe_stage_params(st), .m = a->m, .v = a->v, .segs = segs, .nseg = nseg,
				     .lr = cfg->lr, .beta1 = cfg->beta1, .beta2 = cfg->beta2, .eps = cfg->eps,
				     .step = a->step + 1, .grad_scale = grad_scale };
}

static int step(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views, int nmatrix_views,
		int nmicro, const qe_adamw_config *cfg, float grad_scale, float *sumsq)
{
	int rc = fill_segments(a, st, matrix_views, nmatrix_views, nmicro, cfg);
	if (rc)
		return rc;
	qe_adamw_many_args args = many_args(a, st, a->segs, a->nsegs, cfg, grad_scale);
	args.sumsq = sumsq;
	rc = a->b->ops->adamw_many(s, &args);
	if (rc)
		return qe_fail_ctx(rc, "adamw: stage %d", qe_stage_index(st));
	a->step++;
	return QE_OK;
}

int qe_adamw_step(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views, int nmatrix_views,
		  int nmicro, const qe_adamw_config *cfg, float grad_scale)
{
	return step(a, s, st, matrix_views, nmatrix_views, nmicro, cfg, grad_scale, NULL);
}

int qe_adamw_step_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views,
			int nmatrix_views, int nmicro, const qe_adamw_config *cfg, float grad_scale)
{
	return step(a, s, st, matrix_views, nmatrix_views, nmicro, cfg, grad_scale, a->sumsq);
}

int qe_adamw_grad_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views, int nmatrix_views,
			int nmicro, const qe_adamw_config *cfg, float grad_scale)
{
	int rc = fill_segments(a, st, matrix_views, nmatrix_views, nmicro, cfg);
	if (rc)
		return rc;
	qe_adamw_many_args args = many_args(a, st, a->segs, a->nsegs, cfg, grad_scale);
	rc = a->b->ops->grad_sumsq(s, &args, a->sumsq);
	return rc ? qe_fail_ctx(rc, "grad norm: stage %d", qe_stage_index(st)) : QE_OK;
}

int qe_adamw_param_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, int i, const float *grad, float grad_scale)
{
	const qe_param_info *p = qe_stage_param(st, i);
	const float *views[1] = { grad };
	qe_adamw_seg seg = { .offset = p->offset, .n = p->rows * p->cols, .nviews = 1, .grads = views, .name = p->name };
	qe_adamw_config cfg = qe_adamw_config_default();
	qe_adamw_many_args args = many_args(a, st, &seg, 1, &cfg, grad_scale);
	int rc = a->b->ops->grad_sumsq(s, &args, a->sumsq + i);
	return rc ? qe_fail_ctx(rc, "grad norm: stage %d", qe_stage_index(st)) : QE_OK;
}

void qe_adamw_set_grad(qe_adamw *a, int i, const float *grad)
{
	if (i >= 0 && i < a->nsegs)
		a->grad_of[i] = grad;
}

const float *qe_adamw_grad_of(const qe_adamw *a, int i)
{
	return i >= 0 && i < a->nsegs ? a->grad_of[i] : NULL;
}

float qe_adamw_clip_factor(float clip, double norm)
{
	if (!(clip > 0) || !(norm > (double)clip))
		return 1.0f;
	return (float)((double)clip / (norm + 1e-6));
}
