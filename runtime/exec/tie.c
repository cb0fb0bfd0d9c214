/*
 * tie.c - tied embeddings: the first stage's wte and the last stage's head
 * are two copies of one matrix, kept identical (Megatron's embedding group).
 *
 * Both copies start from wte's initialization (stage.c).  Before each
 * optimizer step the one gradient of the tied matrix is made,
 *   g = (wte's gradient summed over its views) + (the head's, likewise),
 * each sum in view order and the last addition once, so g is the same bytes
 * whatever the mapping: on one rank with sum_views, across two ranks by an
 * all-reduce of the two partial sums (a + b is b + a in IEEE arithmetic).
 * Both copies then take g through qe_adamw_set_grad: the same gradient, the
 * same moments, the same update, so they stay identical, which
 * --check-replicas verifies (replicas.c; after every step with --dp > 1,
 * else after the run's last).  The gradient norm counts the
 * matrix once: the head's slot is left out (grad_norm.c).
 *
 * The exchange goes through host memory (one all-reduce of vocab x hidden
 * floats between the two ranks per step); the ranks in between take no part.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/core/status.h"
#include "runtime/exec/rank_int.h"
#include "runtime/optim/adamw.h"

/* The index of stage st's parameter named name, or -1. */
static int param_named(qe_stage *st, const char *name)
{
	for (int i = 0; i < qe_stage_nparams(st); i++)
		if (strcmp(qe_stage_param(st, i)->name, name) == 0)
			return i;
	return -1;
}

/* The pipeline rank that holds global stage s. */
static int holder_of(const qe_rank *r, int s)
{
	for (int p = 0; p < r->P; p++)
		for (int c = 0; c < r->V; c++)
			if (qe_sched_stage_of(r->sched, p, c) == s)
				return p;
	return -1;
}

int qe__rank_tie_init(qe_rank *r)
{
	rank_tie *t = &r->tie;
	memset(t, 0, sizeof(*t));
	t->wte = t->head = -1;
	if (!r->cfg.model.tie_embeddings)
		return QE_OK;
	t->on = 1;
	t->pr_wte = holder_of(r, 0);
	t->pr_head = holder_of(r, r->S - 1);
	rank_chunk *e = qe__rank_chunk_of_stage(r, 0), *h = qe__rank_chunk_of_stage(r, r->S - 1);
	if (e && (t->wte = param_named(e->st, "wte")) < 0)
		return qe_fail(QE_EINVAL, "rank %d: tied embeddings, but stage 0 has no wte", r->rank);
	if (h && (t->head = param_named(h->st, "head.w")) < 0)
		return qe_fail(QE_EINVAL, "rank %d: tied embeddings, but stage %d has no head", r->rank, r->S - 1);
	if (!e && !h)
		return QE_OK;
	const qe_param_info *pi = e ? qe_stage_param(e->st, t->wte) : qe_stage_param(h->st, t->head);
	t->n = pi->rows * pi->cols;
	const qe_backend_ops *o = r->b->ops;
	int rc = o->alloc(r->b, (size_t)t->n * 4, (void **)&t->sum);
	/* one rank with both copies and views of both to add: the head's sum needs a place of its own */
	if (!rc && e && h)
		rc = o->alloc(r->b, (size_t)t->n * 4, (void **)&t->scratch);
	if (!rc && !(e && h) && !qe__rank_host_mem(r) && !(t->host = malloc((size_t)t->n * 4)))
		rc = qe_fail(QE_ENOMEM, "rank %d: out of host memory for the tied embedding's exchange (%lld floats)",
			     r->rank, (long long)t->n);
	if (rc)
		return qe_fail_ctx(rc, "rank %d: tied embeddings' gradient buffers", r->rank);
	if (e)
		qe_adamw_set_grad(e->opt, t->wte, t->sum);
	if (h)
		qe_adamw_set_grad(h->opt, t->head, t->sum);
	return QE_OK;
}

void qe__rank_tie_free(qe_rank *r)
{
	rank_tie *t = &r->tie;
	if (t->sum)
		r->b->ops->free(r->b, t->sum);
	if (t->scratch)
		r->b->ops->free(r->b, t->scratch);
	free(t->host);
	memset(t, 0, sizeof(*t));
}

/* The copy's gradient views on this rank: wte's non-matrix views, or the head's arena views. */
static int copy_views(qe_rank *r, rank_chunk *ch, int is_head, const float **v, int *nv)
{
	const qe_param_info *pi = qe_stage_param(ch->st, is_head ? r->tie.head : r->tie.wte);
	if (is_head)
		return qe_arena_views_for(r->arena, ch->p_begin + pi->matrix_index, v, nv);
	*nv = qe_stage_nonmatrix_views(ch->st);
	for (int m = 0; m < *nv; m++)
		v[m] = qe_stage_nonmatrix_grad(ch->st, m) + pi->grad_offset;
	return QE_OK;
}

/*
 * One copy's gradient summed over its views: the view itself when it is one
 * and need_own is 0, else sum_views into dst.
 */
static int copy_sum(qe_rank *r, rank_chunk *ch, int is_head, float *dst, int need_own, const float **out)
{
	const float *v[QE_RANK_MAX_MICRO];
	int nv = 0;
	QE_TRY(copy_views(r, ch, is_head, v, &nv));
	if (nv == 1 && !need_own) {
		*out = v[0];
		return QE_OK;
	}
	QE_TRY(r->b->ops->sum_views(r->caller, dst, v, nv, r->tie.n));
	*out = dst;
	return QE_OK;
}

/* The two partial sums of the two ranks added: through host memory, between those two ranks only. */
static int exchange(qe_rank *r)
{
	rank_tie *t = &r->tie;
	int group[2] = { r->dr * r->P + t->pr_wte, r->dr * r->P + t->pr_head };
	size_t n = (size_t)t->n;
	if (qe__rank_host_mem(r)) {
		QE_TRY(qe__rank_sync(r, r->caller));
		return qe_comm_allreduce_sum_f32(r->comm, t->sum, n, group, 2);
	}
	const qe_backend_ops *o = r->b->ops;
	QE_TRY(o->copy(r->caller, t->host, t->sum, n * 4, QE_COPY_D2H));
	QE_TRY(qe__rank_sync(r, r->caller));
	QE_TRY(qe_comm_allreduce_sum_f32(r->comm, t->host, n, group, 2));
	return o->copy(r->caller, t->sum, t->host, n * 4, QE_COPY_H2D);
}

int qe__rank_tie_grads(qe_rank *r)
{
	rank_tie *t = &r->tie;
	if (!t->on)
		return QE_OK;
	rank_chunk *e = qe__rank_chunk_of_stage(r, 0), *h = qe__rank_chunk_of_stage(r, r->S - 1);
	if (!e && !h)
		return QE_OK;
	int rc;
	if (e && h) {
		const float *parts[2];
		if ((rc = copy_sum(r, e, 0, t->sum, 0, &parts[0])) || (rc = copy_sum(r, h, 1, t->scratch, 0, &parts[1])) ||
		    (rc = r->b->ops->sum_views(r->caller, t->sum, parts, 2, t->n)))
			return qe_fail_ctx(rc, "rank %d: the tied embedding's gradient", r->rank);
		return QE_OK;
	}
	const float *mine;
	if ((rc = copy_sum(r, e ? e : h, !e, t->sum, 1, &mine)) || (rc = exchange(r)))
		return qe_fail_ctx(rc, "rank %d: the tied embedding's gradient with rank %d", r->rank,
				   r->dr * r->P + (e ? t->pr_head : t->pr_wte));
	return QE_OK;
}
