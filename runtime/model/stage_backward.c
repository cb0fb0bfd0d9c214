/*
 * stage_backward.c - the split backward: dI (input gradient, non-matrix
 * gradients, one quantization of each dY whose transposed copy is retained)
 * and dW (matrix gradients from what dI retained), and B = dI then dW.
 */
#include "runtime/model/model_int.h"

#include <stdio.h>

#include "runtime/core/status.h"

qe_tensor qe__stage_ws_row(qe_stage *st, qe_dtype dt, int64_t r, int64_t c);
int qe__stage_update_roles(qe_stage *st, qe_stream *s, qe_fp8_role r0, qe_fp8_role r1);

static qe_tensor f32_2d(const qe_stage *st, float *p, int64_t r, int64_t c)
{
	return qe_tensor_2d(p, QE_F32, st->b->ops->device, r, c);
}

/*
 * Backward through linear `lin` given dy [T, out]: the bias gradient into
 * grad (microbatch buffer), dY quantized once with the grad_output role (the
 * transposed copy stays in the tape for dW), and dx [T, in] = dY . W.
 */
static int linear_backward_input(qe_stage *st, qe_stream *s, slot_tape *t, int lin, float *dy, float *dx, float *grad)
{
	const qe_backend_ops *o = st->b->ops;
	lin_info *L = &st->lin[lin];
	lin_tape *lt = &t->lin[lin];
	int64_t T = st->cfg.seq;
	int hist = st->prec.recipe.history_len;
	if (L->bias >= 0)
		QE_TRY(o->bias_grad(s, grad + st->params[L->bias].grad_offset, dy, T, L->out));
	float *role = qe_stage_fp8_role(st, lin, QE_ROLE_GRAD_OUTPUT);
	qe_cast_args ca = { 0 };
	ca.x = f32_2d(st, dy, T, L->out);
	ca.row = qe__stage_ws_row(st, lt->dyq_col.dtype, T, L->out);
	ca.row.scale_inv = lt->dy_sinv;
	ca.col = lt->dyq_col;
	ca.scale = L->current ? NULL : role + hist;
	ca.amax = L->current ? NULL : role;
	ca.scale_inv = lt->dy_sinv;
	ca.current = L->current;
	ca.margin = st->prec.recipe.margin;
	QE_TRY(o->cast(s, &ca));
	qe_tensor out = f32_2d(st, dx, T, L->in);
	return o->gemm(s, &ca.row, &L->wq_col, &out, NULL, 0);
}

int qe_stage_backward_input(qe_stage *st, qe_stream *s, int slot, int m)
{
	if (slot < 0 || slot >= st->nslots || m < 0 || m >= st->nmicro)
		return qe_fail(QE_EINVAL, "stage %d: dI on slot %d microbatch %d (have %d slots, %d microbatches)",
			       st->stage, slot, m, st->nslots, st->nmicro);
	const qe_backend_ops *o = st->b->ops;
	const qe_model_config *c = &st->cfg;
	slot_tape *t = &st->slots[slot];
	int64_t T = c->seq, H = c->hidden;
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;
	float *grad = qe_stage_nonmatrix_grad(st, m);
	float *dx_out;

	if (st->last) {
		/* dlogits were written over the logits by the loss in F */
		QE_TRY(linear_backward_input(st, s, t, QE_LIN_HEAD, t->logits, st->ws_g[0], grad));
		QE_TRY(o->layernorm_bwd(s, st->ws_g[1], grad + pi[st->p_lnfw].grad_offset, grad + pi[st->p_lnfb].grad_offset,
				     st->ws_g[0], t->x_out, t->meanf, t->rstdf, P + pi[st->p_lnfw].offset, T, H));
		dx_out = st->ws_g[1];
	} else {
		dx_out = t->dout;
	}
	/* MLP half */
	QE_TRY(linear_backward_input(st, s, t, QE_LIN_FC2, dx_out, st->ws_big[0], grad));
	QE_TRY(o->gelu_bwd(s, st->ws_big[1], t->fc1_out, st->ws_big[0], T * c->ffn));
	QE_TRY(linear_backward_input(st, s, t, QE_LIN_FC1, st->ws_big[1], st->ws_h[0], grad));
	QE_TRY(o->layernorm_bwd(s, st->ws_h[1], grad + pi[st->p_ln2w].grad_offset, grad + pi[st->p_ln2b].grad_offset,
			     st->ws_h[0], t->x_mid, t->mean2, t->rstd2, P + pi[st->p_ln2w].offset, T, H));
	QE_TRY(o->add(s, st->ws_h[2], dx_out, st->ws_h[1], T * H)); /* d x_mid */
	/* attention half */
	QE_TRY(linear_backward_input(st, s, t, QE_LIN_PROJ, st->ws_h[2], st->ws_h[0], grad));
	QE_TRY(o->attn_bwd(s, st->ws_big[0], st->ws_h[0], t->qkv, t->probs, T, H, c->heads));
	QE_TRY(linear_backward_input(st, s, t, QE_LIN_QKV, st->ws_big[0], st->ws_h[1], grad));
	QE_TRY(o->layernorm_bwd(s, st->ws_h[0], grad + pi[st->p_ln1w].grad_offset, grad + pi[st->p_ln1b].grad_offset,
			     st->ws_h[1], t->x_in, t->mean1, t->rstd1, P + pi[st->p_ln1w].offset, T, H));
	if (st->first) {
		QE_TRY(o->add(s, st->ws_h[1], st->ws_h[2], st->ws_h[0], T * H));
		/* microbatch m's wte gradient keeps its rows zero except those its last tokens wrote */
		QE_TRY(o->embed_bwd(s, grad + pi[st->p_wte].grad_offset, grad + pi[st->p_wpe].grad_offset, t->tokens,
				 st->ws_h[1], T, H, c->vocab, st->tok_written + (int64_t)m * T));
	} else {
		QE_TRY(o->add(s, t->dx_in, st->ws_h[2], st->ws_h[0], T * H));
	}
	return qe__stage_update_roles(st, s, QE_ROLE_GRAD_OUTPUT, QE_ROLE_GRAD_OUTPUT);
}

int qe_stage_backward_weight(qe_stage *st, qe_stream *s, int slot, const qe_tensor *dests, int accumulate)
{
	if (slot < 0 || slot >= st->nslots)
		return qe_fail(QE_EINVAL, "stage %d: dW on slot %d of %d", st->stage, slot, st->nslots);
	slot_tape *t = &st->slots[slot];
	for (int j = 0; j < st->nmatrices; j++) {
		const qe_param_info *p = &st->params[st->matrix_param[j]];
		lin_tape *lt = &t->lin[p->linear];
		qe_tensor want = qe_stage_matrix_grad_shape(st, j);
		char what[64];
		snprintf(what, sizeof(what), "stage %d dW destination of %s", st->stage, p->name);
		QE_TRY(qe_tensor_check_same(&want, &dests[j], what));
		qe_tensor d = dests[j];
		/* dW[out, in] = dYT[out, T] . XT[in, T]^T (+ dW[out, in] when accumulating) */
		QE_TRY(st->b->ops->gemm(s, &lt->dyq_col, &lt->xq_col, &d, NULL, accumulate ? 1 : 0));
	}
	return QE_OK;
}

int qe_stage_backward_full(qe_stage *st, qe_stream *s, int slot, int m, const qe_tensor *dests)
{
	QE_TRY(qe_stage_backward_input(st, s, slot, m));
	return qe_stage_backward_weight(st, s, slot, dests, 0);
}
