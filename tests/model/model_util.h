/*
 * model_util.h - an in-process pipeline used by the model tests: every
 * stage of the model in one process, activations handed over by copies, and
 * plain per-(matrix, microbatch) gradient destinations standing in for the
 * arena.  (The real executor is runtime/exec.)
 */
#ifndef QE_MODEL_UTIL_H
#define QE_MODEL_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"
#include "runtime/optim/adamw.h"
#include "testlib.h"

#define MU_MAX_STAGES 8

typedef struct mu_pipe {
	qe_backend *b;
	qe_stream *s;
	int nstages, M;
	qe_stage *st[MU_MAX_STAGES];
	qe_adamw *opt[MU_MAX_STAGES];
	float *grads[MU_MAX_STAGES];   /* nmatrices x M destinations, contiguous */
	qe_tensor *dests[MU_MAX_STAGES]; /* [m * nmatrices + j] */
	const float **views[MU_MAX_STAGES]; /* [j * M + m] */
} mu_pipe;

/* The model cut into nstages stages (cfg->layers / nstages blocks each). */
static inline int mu_pipe_open_cut(mu_pipe *p, const qe_model_config *cfg, const qe_precision *prec, int M,
				   uint64_t seed, int nstages)
{
	int rc;
	memset(p, 0, sizeof(*p));
	p->nstages = nstages;
	p->M = M;
	if ((rc = qe_backend_open("cpu", &p->b)) || (rc = p->b->ops->stream_create(p->b, &p->s)))
		return rc;
	for (int s = 0; s < p->nstages; s++) {
		qe_stage *st;
		if ((rc = qe_stage_create(p->b, cfg, prec, s, p->nstages, M, M, 0, &st)))
			return rc;
		p->st[s] = st;
		if ((rc = qe_stage_init_params(st, seed)) || (rc = qe_adamw_create(p->b, st, &p->opt[s])))
			return rc;
		size_t nm = (size_t)qe_stage_nmatrices(st);
		size_t total = 0;
		for (size_t j = 0; j < nm; j++) {
			qe_tensor sh = qe_stage_matrix_grad_shape(st, (int)j);
			total += (size_t)qe_tensor_numel(&sh);
		}
		p->grads[s] = calloc(total * (size_t)M, sizeof(float));
		p->dests[s] = calloc(nm * (size_t)M, sizeof(qe_tensor));
		p->views[s] = calloc(nm * (size_t)M, sizeof(float *));
		float *cur = p->grads[s];
		for (int m = 0; m < M; m++) {
			for (size_t j = 0; j < nm; j++) {
				qe_tensor sh = qe_stage_matrix_grad_shape(st, (int)j);
				sh.data = cur;
				p->dests[s][m * nm + j] = sh;
				p->views[s][j * M + m] = cur;
				cur += qe_tensor_numel(&sh);
			}
		}
	}
	return QE_OK;
}

/* One block per stage. */
static inline int mu_pipe_open(mu_pipe *p, const qe_model_config *cfg, const qe_precision *prec, int M, uint64_t seed)
{
	return mu_pipe_open_cut(p, cfg, prec, M, seed, cfg->layers);
}

static inline size_t mu_grad_floats(const mu_pipe *p, int s)
{
	size_t total = 0;
	for (int j = 0; j < qe_stage_nmatrices(p->st[s]); j++) {
		qe_tensor sh = qe_stage_matrix_grad_shape(p->st[s], j);
		total += (size_t)qe_tensor_numel(&sh);
	}
	return total * p->M;
}

static inline void mu_pipe_close(mu_pipe *p)
{
	for (int s = 0; s < p->nstages; s++) {
		qe_adamw_free(p->opt[s]);
		qe_stage_free(p->st[s]);
		free(p->grads[s]);
		free(p->dests[s]);
		free(p->views[s]);
	}
	if (p->s)
		p->b->ops->stream_destroy(p->s);
	qe_backend_close(p->b);
}

/* F of microbatch m through every stage (slot m). */
static inline int mu_forward(mu_pipe *p, int m, const int32_t *tok, const int32_t *tgt)
{
	int rc, T = (int)qe_model_tokens(qe_stage_config(p->st[0]));
	memcpy(qe_stage_slot_tokens(p->st[0], m), tok, T * 4);
	memcpy(qe_stage_slot_targets(p->st[p->nstages - 1], m), tgt, T * 4);
	for (int s = 0; s < p->nstages; s++) {
		if (s > 0)
			memcpy(qe_stage_slot_input(p->st[s], m), qe_stage_slot_output(p->st[s - 1], m),
			       qe_stage_act_bytes(p->st[s]));
		if ((rc = qe_stage_forward(p->st[s], p->s, m, m == 0)))
			return rc;
	}
	return QE_OK;
}

/* dI of stage s for microbatch m (handing the input gradient to s-1). */
static inline int mu_dI(mu_pipe *p, int s, int m)
{
	int rc = qe_stage_backward_input(p->st[s], p->s, m, m);
	if (!rc && s > 0)
		memcpy(qe_stage_slot_dout(p->st[s - 1], m), qe_stage_slot_dinput(p->st[s], m),
		       qe_stage_act_bytes(p->st[s]));
	return rc;
}

static inline int mu_dW(mu_pipe *p, int s, int m)
{
	return qe_stage_backward_weight(p->st[s], p->s, m, &p->dests[s][m * qe_stage_nmatrices(p->st[s])], 0);
}

static inline int mu_B(mu_pipe *p, int s, int m)
{
	int rc = qe_stage_backward_full(p->st[s], p->s, m, m, &p->dests[s][m * qe_stage_nmatrices(p->st[s])]);
	if (!rc && s > 0)
		memcpy(qe_stage_slot_dout(p->st[s - 1], m), qe_stage_slot_dinput(p->st[s], m),
		       qe_stage_act_bytes(p->st[s]));
	return rc;
}

static inline int mu_optimize(mu_pipe *p, const qe_adamw_config *cfg)
{
	for (int s = 0; s < p->nstages; s++) {
		int rc = qe_adamw_step(p->opt[s], p->s, p->st[s], p->views[s], p->M, p->M, cfg, 1.0f);
		if (rc)
			return rc;
	}
	return QE_OK;
}

/* Mean loss over the step's microbatches (in microbatch order). */
static inline float mu_loss(mu_pipe *p)
{
	float sum = 0;
	for (int m = 0; m < p->M; m++)
		sum += *qe_stage_slot_loss(p->st[p->nstages - 1], m);
	return sum / (float)p->M;
}

#endif
