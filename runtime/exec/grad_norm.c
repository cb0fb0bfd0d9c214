/*
 * grad_norm.c - the global gradient norm of a step, for --grad-clip and the
 * progress line.
 *
 * Each parameter's squared norm comes from the backend's grad_sumsq op (a
 * fixed order of additions inside it), lands in a host vector at the
 * parameter's global index - its index in the model's parameter list, stage
 * after stage - and the pipeline ranks of one replica sum their vectors.
 * Each slot is written by one rank and is zero elsewhere, so that sum is
 * exact whatever order the transport adds in.  Every rank then adds the
 * vector in index order in double: all ranks get the same norm, and it does
 * not depend on how the model is cut into stages.  Replicas hold the same
 * reduced gradient and compute the same norm on their own.  A tied head
 * (tie.c) is not counted: wte's slot holds the tied matrix's norm.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/core/status.h"
#include "runtime/exec/rank_int.h"
#include "runtime/optim/adamw.h"

int qe__rank_grad_norm_init(qe_rank *r)
{
	int64_t base = 0;
	for (int s = 0; s < r->S; s++) {
		qe_param_info *t;
		int np;
		int64_t floats;
		int rc = qe_model_param_table(&r->cfg.model, s, r->S, &t, &np, &floats);
		if (rc)
			return qe_fail_ctx(rc, "rank %d: the parameter list of stage %d", r->rank, s);
		free(t);
		rank_chunk *ch = qe__rank_chunk_of_stage(r, s);
		if (ch)
			ch->param_base = base;
		base += np;
	}
	r->norm_sq = calloc((size_t)(base > 0 ? base : 1), sizeof(float));
	if (!r->norm_sq)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for %lld gradient norms", r->rank, (long long)base);
	r->norm_params = base;
	return QE_OK;
}

/* norm_sq summed over the pipeline ranks of this replica (each slot is one rank's, zero elsewhere). */
static int pipeline_sum(qe_rank *r)
{
	int *group = malloc((size_t)r->P * sizeof(int));
	if (!group)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for a group of %d", r->rank, r->P);
	for (int p = 0; p < r->P; p++)
		group[p] = r->dr * r->P + p;
	int rc = qe_comm_allreduce_sum_f32(r->comm, r->norm_sq, (size_t)r->norm_params, group, r->P);
	free(group);
	return rc ? qe_fail_ctx(rc, "rank %d: exchanging the gradient norms of the pipeline", r->rank) : QE_OK;
}

int qe__rank_grad_norm_collect(qe_rank *r, double *norm)
{
	const qe_backend_ops *o = r->b->ops;
	memset(r->norm_sq, 0, (size_t)r->norm_params * sizeof(float));
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		size_t n = (size_t)qe_stage_nparams(ch->st);
		QE_TRY(o->copy(r->caller, r->norm_sq + ch->param_base, ch->opt->sumsq, n * sizeof(float), QE_COPY_D2H));
	}
	QE_TRY(qe__rank_sync(r, r->caller));
	/* a tied head is wte's copy with wte's gradient: the matrix counts once, at wte's slot */
	rank_chunk *hc = r->tie.head >= 0 ? qe__rank_chunk_of_stage(r, r->S - 1) : NULL;
	if (hc)
		r->norm_sq[hc->param_base + r->tie.head] = 0;
	if (r->comm && r->P > 1)
		QE_TRY(pipeline_sum(r));
	double t = 0;
	for (int64_t k = 0; k < r->norm_params; k++)
		t += (double)r->norm_sq[k];
	*norm = sqrt(t);
	return QE_OK;
}
