/*
 * stage_forward.c - the F action: weight-cache refresh, the block's forward
 * (and the embedding and the head with the loss where the stage has them),
 * and the end-of-action update of the forward roles' scaling state.
 */
#include "runtime/model/model_int.h"

#include "runtime/core/status.h"

static qe_tensor f32_2d(const qe_stage *st, float *p, int64_t r, int64_t c)
{
	return qe_tensor_2d(p, QE_F32, st->b->ops->device, r, c);
}

/* Scratch for the row-wise copy of a GEMM operand. */
qe_tensor qe__stage_ws_row(qe_stage *st, qe_dtype dt, int64_t r, int64_t c);
qe_tensor qe__stage_ws_row(qe_stage *st, qe_dtype dt, int64_t r, int64_t c)
{
	return qe_tensor_2d(st->ws_q, dt, st->b->ops->device, r, c);
}

/*
 * Cast the input of linear `lin` (x, [T, in]) with the input role, keep the
 * transposed copy in the tape, and run the forward GEMM into y [T, out].
 */
static int linear_forward(qe_stage *st, qe_stream *s, slot_tape *t, int lin, float *x, float *y, int record)
{
	const qe_backend_ops *o = st->b->ops;
	lin_info *L = &st->lin[lin];
	lin_tape *lt = &t->lin[lin];
	int64_t T = st->cfg.seq;
	float *role = qe_stage_fp8_role(st, lin, QE_ROLE_INPUT);
	int hist = st->prec.recipe.history_len;
	qe_cast_args ca = { 0 };
	ca.x = f32_2d(st, x, T, L->in);
	ca.row = qe__stage_ws_row(st, lt->xq_col.dtype, T, L->in);
	ca.row.scale_inv = lt->x_sinv;
	ca.col = lt->xq_col;
	ca.scale = L->current ? NULL : role + hist;
	ca.amax = L->current || !record ? NULL : role;
	ca.scale_inv = lt->x_sinv;
	ca.current = L->current;
	ca.margin = st->prec.recipe.margin;
	QE_TRY(o->cast(s, &ca));
	qe_tensor out = f32_2d(st, y, T, L->out);
	const float *bias = L->bias >= 0 ? st->param_buf + st->params[L->bias].offset : NULL;
	return o->gemm(s, &ca.row, &L->wq_row, &out, bias, 0);
}

/* Re-cast every matrix into the weight cache with the weight role's scale. */
static int refresh_weight_cache(qe_stage *st, qe_stream *s, int record)
{
	int hist = st->prec.recipe.history_len;
	for (int l = 0; l < st->nlin; l++) {
		lin_info *L = &st->lin[l];
		float *role = qe_stage_fp8_role(st, l, QE_ROLE_WEIGHT);
		qe_cast_args ca = { 0 };
		ca.x = qe_stage_param_tensor(st, L->param);
		ca.row = L->wq_row;
		ca.col = L->wq_col;
		ca.scale = L->current ? NULL : role + hist;
		ca.amax = L->current || !record ? NULL : role;
		ca.scale_inv = L->w_sinv;
		ca.current = L->current;
		ca.margin = st->prec.recipe.margin;
		QE_TRY(st->b->ops->cast(s, &ca));
	}
	return QE_OK;
}

/*
 * End of an action: update and roll the roles r0..r1 of every delayed-scaled
 * linear, all in one op (one launch on cuda rather than one per role: at
 * 4.5 us a launch, the per-role updates cost ~1.8 ms a step on h4096).
 */
int qe__stage_update_roles(qe_stage *st, qe_stream *s, qe_fp8_role r0, qe_fp8_role r1);
int qe__stage_update_roles(qe_stage *st, qe_stream *s, qe_fp8_role r0, qe_fp8_role r1)
{
	if (!st->prec.fp8)
		return QE_OK; /* no quantization, no scaling state to advance */
	qe_fp8_update_item items[QE_LIN_MAX * QE_ROLE_COUNT];
	int n = 0;
	for (int l = 0; l < st->nlin; l++) {
		if (st->lin[l].current)
			continue;
		for (int r = r0; r <= (int)r1; r++) {
			items[n].block = qe_stage_fp8_role(st, l, (qe_fp8_role)r);
			items[n].fmt = qe_fp8_role_dtype(&st->prec.recipe, (qe_fp8_role)r);
			n++;
		}
	}
	if (n == 0)
		return QE_OK;
	return st->b->ops->fp8_update_many(s, items, n, st->prec.recipe.history_len, st->prec.recipe);
}

/* record == 0: evaluation - nothing is recorded into amax histories and no role is updated. */
static int forward(qe_stage *st, qe_stream *s, int slot, int refresh_cache, int record)
{
	if (slot < 0 || slot >= st->nslots)
		return qe_fail(QE_EINVAL, "stage %d: F on slot %d of %d", st->stage, slot, st->nslots);
	const qe_backend_ops *o = st->b->ops;
	const qe_model_config *c = &st->cfg;
	slot_tape *t = &st->slots[slot];
	int64_t T = c->seq, H = c->hidden;
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;

	if (refresh_cache)
		QE_TRY(refresh_weight_cache(st, s, record));
	if (st->first)
		QE_TRY(o->embed_fwd(s, t->x_in, t->tokens, P + pi[st->p_wte].offset, P + pi[st->p_wpe].offset, T, H));
	/* attention half */
	QE_TRY(o->layernorm_fwd(s, st->ws_h[0], t->mean1, t->rstd1, t->x_in, P + pi[st->p_ln1w].offset,
			     P + pi[st->p_ln1b].offset, T, H));
	QE_TRY(linear_forward(st, s, t, QE_LIN_QKV, st->ws_h[0], t->qkv, record));
	QE_TRY(o->attn_fwd(s, st->ws_h[1], t->probs, t->qkv, T, H, c->heads));
	QE_TRY(linear_forward(st, s, t, QE_LIN_PROJ, st->ws_h[1], st->ws_h[2], record));
	QE_TRY(o->add(s, t->x_mid, t->x_in, st->ws_h[2], T * H));
	/* MLP half */
	QE_TRY(o->layernorm_fwd(s, st->ws_h[0], t->mean2, t->rstd2, t->x_mid, P + pi[st->p_ln2w].offset,
			     P + pi[st->p_ln2b].offset, T, H));
	QE_TRY(linear_forward(st, s, t, QE_LIN_FC1, st->ws_h[0], t->fc1_out, record));
	QE_TRY(o->gelu_fwd(s, st->ws_big[0], t->fc1_out, T * c->ffn));
	QE_TRY(linear_forward(st, s, t, QE_LIN_FC2, st->ws_big[0], st->ws_h[2], record));
	QE_TRY(o->add(s, t->x_out, t->x_mid, st->ws_h[2], T * H));
	if (st->last) {
		QE_TRY(o->layernorm_fwd(s, st->ws_h[0], t->meanf, t->rstdf, t->x_out, P + pi[st->p_lnfw].offset,
				     P + pi[st->p_lnfb].offset, T, H));
		QE_TRY(linear_forward(st, s, t, QE_LIN_HEAD, st->ws_h[0], t->logits, record));
		/* The step's loss is the mean over microbatches, hence 1/nmicro. */
		QE_TRY(o->xent(s, t->loss, t->logits, t->logits, t->targets, T, c->vocab, 1.0f / (float)st->nmicro));
	}
	return record ? qe__stage_update_roles(st, s, QE_ROLE_INPUT, QE_ROLE_WEIGHT) : QE_OK;
}

int qe_stage_forward(qe_stage *st, qe_stream *s, int slot, int refresh_cache)
{
	return forward(st, s, slot, refresh_cache, 1);
}

int qe_stage_forward_eval(qe_stage *st, qe_stream *s, int slot)
{
	return forward(st, s, slot, 1, 0);
}
