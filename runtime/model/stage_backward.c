/*
 * stage_backward.c - the split backward: dI (input gradient, non-matrix
 * gradients, one quantization of each dY whose transposed copy is retained)
 * through the stage's blocks from the last to the first, dW (matrix
 * gradients from what dI retained), and B = dI then dW.
 */
#include "runtime/model/model_int.h"

#include <stdio.h>

#include "runtime/core/status.h"

/*
 * Backward through linear `lin` given dy [N, out]: the bias gradient into
 * grad (microbatch buffer; summed by the cast), dY quantized once
 * with the grad_output role (the transposed copy stays in the tape for dW),
 * and dx [N, in] = dY . W in dx's type: act_dt for the layernorms' output
 * gradients and FC2's input gradient, the attention's type for the
 * projection's.  gelu_in (FC1 only, in
 * act_dt): dy is the gradient of GELU's output and gelu_in its input without
 * gelu_bias; the cast turns dy into GELU's input gradient as it loads it
 * (qe_cast_args pre_dgelu).  The head's dy is the logits: its cast makes
 * their gradient from them and the rows' softmax statistics the loss
 * saved in F (pre_xent), with the loss's scale, 1/nmicro.
 */
static int linear_backward_input(qe_stage *st, qe_stream *s, slot_tape *t, int lin, qe_tensor dy, qe_tensor dx,
				 float *grad, const void *gelu_in, const float *gelu_bias)
{
	const qe_backend_ops *o = st->b->ops;
	lin_info *L = &st->lin[lin];
	lin_tape *lt = &t->lin[lin];
	int64_t N = st->N;
	float *dbias = L->bias >= 0 ? grad + st->params[L->bias].grad_offset : NULL;
	qe_cast_args ca = { 0 };
	ca.colsum = dbias;
	ca.pre_dgelu = gelu_in;
	ca.pre_dgelu_dtype = st->act_dt;
	ca.pre_bias = gelu_in ? gelu_bias : NULL;
	if (st->last && lin == st->nlin - 1) {
		ca.pre_xent.stats = t->xstats;
		ca.pre_xent.tgt = t->targets;
		ca.pre_xent.valid = st->cfg.vocab;
		ca.pre_xent.grad_scale = 1.0f / (float)st->nmicro;
	}
	ca.x = dy;
	ca.row = qe__stage_ws_row(st, lt->dyq_col.dtype, N, L->out);
	ca.row.scale_inv = lt->dy_sinv;
	ca.col = lt->dyq_col;
	ca.scale_inv = lt->dy_sinv;
	qe__stage_cast_args(st, L, qe_stage_fp8_role(st, lin, QE_ROLE_GRAD_OUTPUT), 1, &ca);
	QE_TRY(o->cast(s, &ca));
	return o->gemm(s, &ca.row, &L->wq_col, &dx, NULL, 0);
}

/* Attention backward of every sequence of the microbatch (flash: one op over the batch). */
static int attention_backward(qe_stage *st, qe_stream *s, void *dqkv_out, const void *dout_in, const block_tape *bt,
			      int qkv_lin)
{
	const qe_model_config *c = &st->cfg;
	int64_t T = c->seq, H = c->hidden;
	const float *qkv = bt->qkv, *probs = bt->probs, *dout = dout_in; /* f32 unless flash */
	float *dqkv = dqkv_out;
	if (st->flash)
		return st->b->ops->attn_flash_bwd(s, dqkv_out, dout_in, bt->qkv, qe__stage_qkv_bias(st, qkv_lin), bt->att,
						  bt->probs, c->batch, T, H, c->heads, qe__stage_flash_operands(st),
						  qe__stage_attn_dt(st));
	for (int b = 0; b < c->batch; b++)
		QE_TRY(st->b->ops->attn_bwd(s, dqkv + b * T * 3 * H, dout + b * T * H, qkv + b * T * 3 * H,
					    probs + (int64_t)b * c->heads * T * T, T, H, c->heads));
	return QE_OK;
}

/*
 * Block k's backward from dx_out (the gradient of its output, read until the
 * residual add) to dx_in, the gradient of its input: at each residual join
 * the two branches' sum, residual first (the layernorm_bwd adds its
 * residual as it writes, with no add of its own).  dx_in must not be
 * ws_h[1] or ws_h[2].  The residual stream's gradients (dx_out, dx_in, d
 * x_mid) are in act_dt, like the stream.
 */
static int block_backward(qe_stage *st, qe_stream *s, slot_tape *t, int k, const void *dx_out, float *grad,
			  void *dx_in)
{
	const qe_backend_ops *o = st->b->ops;
	const qe_model_config *c = &st->cfg;
	const block_info *bk = &st->blocks[k];
	block_tape *bt = &t->blk[k];
	int64_t N = st->N, H = c->hidden;
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;
	/* MLP half: FC2's input gradient in act_dt, which FC1's dY cast reads with GELU's input */
	qe_tensor d_gelu = qe_tensor_2d(st->ws_big, st->act_dt, st->b->ops->device, N, c->ffn);
	qe_tensor d_out = qe_tensor_2d((void *)dx_out, st->act_dt, st->b->ops->device, N, H);
	QE_TRY(linear_backward_input(st, s, t, bk->lin0 + QE_LIN_FC2, d_out, d_gelu, grad, NULL, NULL));
	/*
	 * FC1's dY cast runs GELU's backward itself (fc1_out lacks FC1's bias, which it adds first); FC1's input
	 * gradient, LN2's output gradient, in act_dt
	 */
	qe_tensor d_ln2 = qe_tensor_2d(st->ws_h[0], st->act_dt, st->b->ops->device, N, H);
	QE_TRY(linear_backward_input(st, s, t, bk->lin0 + QE_LIN_FC1, d_gelu, d_ln2, grad, bt->fc1_out,
				     qe__stage_lin_bias(st, bk->lin0 + QE_LIN_FC1)));
	/* d x_mid (ws_h[2]) = dx_out + the gradient through LN2 */
	float *dw2 = grad + pi[bk->ln2w].grad_offset, *db2 = grad + pi[bk->ln2b].grad_offset;
	const float *w2 = P + pi[bk->ln2w].offset;
	QE_TRY(o->layernorm_bwd(s, st->ws_h[2], dw2, db2, st->ws_h[0], st->act_dt, bt->x_mid, st->act_dt, bt->mean2,
				bt->rstd2, w2, N, H, dx_out));
	/* attention half: the projection's input gradient and qkv's in the type attention reads and writes */
	qe_tensor d_att = qe_tensor_2d(st->ws_h[0], qe__stage_attn_dt(st), st->b->ops->device, N, H);
	qe_tensor d_mid = qe_tensor_2d(st->ws_h[2], st->act_dt, st->b->ops->device, N, H);
	QE_TRY(linear_backward_input(st, s, t, bk->lin0 + QE_LIN_PROJ, d_mid, d_att, grad, NULL, NULL));
	QE_TRY(attention_backward(st, s, st->ws_big, st->ws_h[0], bt, bk->lin0 + QE_LIN_QKV));
	qe_tensor d_qkv = qe_tensor_2d(st->ws_big, qe__stage_attn_dt(st), st->b->ops->device, N, 3 * H);
	qe_tensor d_ln1 = qe_tensor_2d(st->ws_h[1], st->act_dt, st->b->ops->device, N, H);
	QE_TRY(linear_backward_input(st, s, t, bk->lin0 + QE_LIN_QKV, d_qkv, d_ln1, grad, NULL, NULL));
	/* dx_in = d x_mid + the gradient through LN1 */
	float *dw1 = grad + pi[bk->ln1w].grad_offset, *db1 = grad + pi[bk->ln1b].grad_offset;
	const float *w1 = P + pi[bk->ln1w].offset;
	return o->layernorm_bwd(s, dx_in, dw1, db1, st->ws_h[1], st->act_dt, bt->x_in, st->act_dt, bt->mean1,
				bt->rstd1, w1, N, H, st->ws_h[2]);
}

/*
 * The embedding gradients from dx [N, H] (act_dt), in one embed_bwd: wte's
 * rows, and wpe as the sum of the sequences' position gradients in sequence
 * order (0 + d_0 + d_1 ...).  The scratch buffer of an accumulating stage (buf 1) gets no wte rows: they
 * are added straight into the sum buffer's (embed_bwd accumulate: the same
 * bits as writing them into the scratch and adding that), so the add of the
 * scratch skips the wte gradient, most of the non-matrix bytes.
 */
static int embed_backward(qe_stage *st, qe_stream *s, slot_tape *t, int buf, const void *dx, float *grad)
{
	const qe_model_config *c = &st->cfg;
	int add = st->nm_accumulate && buf == 1;
	int64_t wte_at = st->params[st->p_wte].grad_offset;
	float *dwte = (add ? st->grad_buf : grad) + wte_at, *dwpe = grad + st->params[st->p_wpe].grad_offset;
	/* buffer buf's wte gradient keeps its rows zero except those its last tokens wrote */
	int32_t *rows = add ? NULL : st->tok_written + (int64_t)buf * st->N;
	return st->b->ops->embed_bwd(s, dwte, dwpe, t->tokens, dx, st->act_dt, st->N, c->seq, c->hidden, st->vpad, rows,
				     add);
}

int qe_stage_backward_input(qe_stage *st, qe_stream *s, int slot, int m)
{
	if (slot < 0 || slot >= st->nslots || m < 0 || m >= st->nmicro)
		return qe_fail(QE_EINVAL, "stage %d: dI on slot %d microbatch %d (have %d slots, %d microbatches)",
			       st->stage, slot, m, st->nslots, st->nmicro);
	const qe_backend_ops *o = st->b->ops;
	const qe_model_config *c = &st->cfg;
	slot_tape *t = &st->slots[slot];
	int64_t N = st->N, H = c->hidden;
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;
	/*
	 * Where the non-matrix gradients go: microbatch m's own buffer, or when
	 * accumulating, microbatch 0 writes the sum buffer (its wte rows cleared
	 * first: the adds of the last step wrote rows its record does not list)
	 * and later microbatches write the scratch buffer, added in at the end.
	 * The caller keeps ascending order (the stage contract checks it).
	 */
	int buf = st->nm_accumulate ? (m == 0 ? 0 : 1) : m;
	float *grad = st->grad_buf + (int64_t)buf * st->nonmatrix_floats;
	void *dx_out;
	if (st->nm_accumulate && m == 0 && st->first)
		QE_TRY(o->fill(s, grad + pi[st->p_wte].grad_offset, 0,
			       (size_t)pi[st->p_wte].rows * (size_t)pi[st->p_wte].cols * sizeof(float)));

	if (st->last) {
		/* the head's dY cast reads the logits and makes their gradient (linear_backward_input) */
		qe_tensor logits = qe_tensor_2d(t->logits, st->act_dt, st->b->ops->device, N, st->vpad);
		qe_tensor d_lnf = qe_tensor_2d(st->ws_g[0], st->act_dt, st->b->ops->device, N, H);
		QE_TRY(linear_backward_input(st, s, t, st->nlin - 1, logits, d_lnf, grad, NULL, NULL));
		QE_TRY(o->layernorm_bwd(s, st->ws_g[1], grad + pi[st->p_lnfw].grad_offset, grad + pi[st->p_lnfb].grad_offset,
					st->ws_g[0], st->act_dt, t->blk[st->nblk - 1].x_out,
					st->act_dt, t->meanf, t->rstdf,
					P + pi[st->p_lnfw].offset, N, H, NULL));
		dx_out = st->ws_g[1];
	} else {
		dx_out = t->dout;
	}
	for (int k = st->nblk - 1; k >= 0; k--) {
		/* the input gradient of block k is block k-1's output gradient, or the embedding's, or dx_in's */
		void *dx_in = st->first ? (void *)st->ws_h[0] : t->dx_in;
		if (k > 0)
			dx_in = dx_out == (void *)st->ws_g[0] ? (void *)st->ws_g[1] : (void *)st->ws_g[0];
		QE_TRY(block_backward(st, s, t, k, dx_out, grad, dx_in));
		dx_out = dx_in;
	}
	if (st->first)
		QE_TRY(embed_backward(st, s, t, buf, dx_out, grad));
	/*
	 * sum += microbatch m's: the bits of the per-microbatch buffers summed in
	 * order; on the first stage the wte rows were already added (embed_backward)
	 */
	if (buf == 1 && st->nm_accumulate) {
		int64_t n = st->nonmatrix_floats, w0 = n, w1 = n;
		if (st->first) {
			w0 = st->params[st->p_wte].grad_offset;
			w1 = w0 + (int64_t)st->params[st->p_wte].rows * st->params[st->p_wte].cols;
		}
		if (w0 > 0)
			QE_TRY(o->add_inplace(s, st->grad_buf, grad, w0));
		if (w1 < n)
			QE_TRY(o->add_inplace(s, st->grad_buf + w1, grad + w1, n - w1));
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
		/* dW[out, in] = dYT[out, N] . XT[in, N]^T (+ dW[out, in] when accumulating) */
		QE_TRY(st->b->ops->gemm(s, &lt->dyq_col, &lt->xq_col, &d, NULL, accumulate ? 1 : 0));
	}
	return QE_OK;
}

int qe_stage_backward_full(qe_stage *st, qe_stream *s, int slot, int m, const qe_tensor *dests)
{
	QE_TRY(qe_stage_backward_input(st, s, slot, m));
	return qe_stage_backward_weight(st, s, slot, dests, 0);
}
