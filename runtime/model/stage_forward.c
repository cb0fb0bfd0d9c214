/*
 * stage_forward.c - the F action: weight-cache refresh, the forward of each
 * of the stage's blocks (and the embedding and the head with the loss where
 * the stage has them), and the end-of-action update of the forward roles'
 * scaling state.
 */
#include "runtime/model/model_int.h"

#include "runtime/core/status.h"

qe_tensor qe__stage_ws_row(qe_stage *st, qe_dtype dt, int64_t r, int64_t c)
{
	return qe_tensor_2d(st->ws_q, dt, st->b->ops->device, r, c);
}

/*
 * Scaling arguments of a cast of linear L with role block `role`: FP8 applies
 * the role's delayed scale (or current scaling) and records amax when record
 * is set; bf16 rounds without scaling and records nothing; f32 copies, with
 * the arguments FP8 would use (the cast ignores them for an f32 output).
 */
void qe__stage_cast_args(const qe_stage *st, const lin_info *L, float *role, int record, qe_cast_args *ca)
{
	int hist = st->prec.recipe.history_len;
	if (st->prec.mode == QE_PREC_BF16) {
		ca->scale = NULL;
		ca->amax = NULL;
		ca->current = 0;
		ca->margin = 0;
		return;
	}
	ca->scale = L->current ? NULL : role + hist;
	ca->amax = L->current || !record ? NULL : role;
	ca->current = L->current;
	ca->margin = st->prec.recipe.margin;
}

/*
 * How a linear's forward is joined to its neighbours: the GEMM leaves its
 * bias to the consumer (no_bias), or the input cast applies the producer
 * itself - the layernorm from its statistics (ln), the bias and GELU of FC1
 * (the prologue of qe_cast_args).
 */
typedef struct fwd_fuse {
	int no_bias;
	qe_dtype in_dt, out_dt; /* the types of x and y: f32 (0), or the stage's act_dt */
	const float *ln_mean, *ln_rstd, *ln_w, *ln_b;
	const float *pre_bias;
	int pre_gelu;
} fwd_fuse;

/*
 * Cast the input of linear `lin` (x, [N, in]) with the input role, keep the
 * transposed copy in the tape, and run the forward GEMM into y [N, out]
 * (fz: NULL, or the fused MLP's changes).
 */
static int linear_forward(qe_stage *st, qe_stream *s, slot_tape *t, int lin, const void *x, void *y, int record,
			  const fwd_fuse *fz)
{
	const qe_backend_ops *o = st->b->ops;
	lin_info *L = &st->lin[lin];
	lin_tape *lt = &t->lin[lin];
	int64_t N = st->N;
	qe_cast_args ca = { 0 };
	ca.x = qe_tensor_2d((void *)x, fz ? fz->in_dt : QE_F32, st->b->ops->device, N, L->in);
	ca.row = qe__stage_ws_row(st, lt->xq_col.dtype, N, L->in);
	ca.row.scale_inv = lt->x_sinv;
	ca.col = lt->xq_col;
	ca.scale_inv = lt->x_sinv;
	qe__stage_cast_args(st, L, qe_stage_fp8_role(st, lin, QE_ROLE_INPUT), record, &ca);
	if (fz) {
		ca.pre_ln.mean = fz->ln_mean;
		ca.pre_ln.rstd = fz->ln_rstd;
		ca.pre_ln.w = fz->ln_w;
		ca.pre_ln.b = fz->ln_b;
		ca.pre_bias = fz->pre_bias;
		ca.pre_gelu = fz->pre_gelu;
	}
	QE_TRY(o->cast(s, &ca));
	qe_tensor out = qe_tensor_2d(y, fz ? fz->out_dt : QE_F32, st->b->ops->device, N, L->out);
	return o->gemm(s, &ca.row, &L->wq_row, &out, fz && fz->no_bias ? NULL : qe__stage_lin_bias(st, lin), 0);
}

/*
 * y = linear lin of layernorm(x) with weight w, bias b; mean and rstd are
 * saved for the backward.  The layernorm writes its statistics alone (or,
 * with have_stats, the residual that wrote x already did) and lin's
 * input cast normalizes as it loads x (no normalized copy goes to memory);
 * no_bias leaves lin's bias to its consumer.
 */
static int ln_linear_forward(qe_stage *st, qe_stream *s, slot_tape *t, int lin, const void *x, float *mean,
			     float *rstd, int have_stats, const float *w, const float *b, void *y, qe_dtype y_dt,
			     int record, int no_bias)
{
	const qe_backend_ops *o = st->b->ops;
	int64_t N = st->N, H = st->cfg.hidden;
	if (!have_stats)
		QE_TRY(o->layernorm_fwd(s, NULL, mean, rstd, x, st->act_dt, w, b, N, H));
	fwd_fuse fz = { .no_bias = no_bias,
			.in_dt = st->act_dt,
			.out_dt = y_dt,
			.ln_mean = mean,
			.ln_rstd = rstd,
			.ln_w = w,
			.ln_b = b };
	return linear_forward(st, s, t, lin, x, y, record, &fz);
}

/* Re-cast every matrix into the weight cache with the weight role's scale. */
static int refresh_weight_cache(qe_stage *st, qe_stream *s, int record)
{
	for (int l = 0; l < st->nlin; l++) {
		lin_info *L = &st->lin[l];
		qe_cast_args ca = { 0 };
		ca.x = qe_stage_param_tensor(st, L->param);
		ca.row = L->wq_row;
		ca.col = L->wq_col;
		ca.scale_inv = L->w_sinv;
		qe__stage_cast_args(st, L, qe_stage_fp8_role(st, l, QE_ROLE_WEIGHT), record, &ca);
		QE_TRY(st->b->ops->cast(s, &ca));
	}
	return QE_OK;
}

/*
 * End of an action: update and roll the roles r0..r1 of every delayed-scaled
 * linear, all in one op (one launch on cuda rather than one per role: at
 * 4.5 us a launch, the per-role updates cost ~1.8 ms a step on h4096).
 */
int qe__stage_update_roles(qe_stage *st, qe_stream *s, qe_fp8_role r0, qe_fp8_role r1)
{
	if (!qe_prec_is_fp8(&st->prec))
		return QE_OK; /* no quantization, no scaling state to advance */
	qe_fp8_update_item *items = st->upd;
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

/*
 * Causal attention of every sequence of the microbatch.  flash: one op over
 * the batch, its output kept in the tape (att) for the backward; probs: per
 * sequence, the output in out.  Returns where the output is (of type
 * qe__stage_attn_dt).
 */
static int attention_forward(qe_stage *st, qe_stream *s, block_tape *bt, int qkv_lin, float *out, void **res)
{
	const qe_model_config *c = &st->cfg;
	int64_t T = c->seq, H = c->hidden;
	float *probs = bt->probs;
	const float *qkv = bt->qkv; /* f32 unless flash */
	*res = st->flash ? bt->att : out;
	if (st->flash)
		return st->b->ops->attn_flash_fwd(s, bt->att, bt->probs, bt->qkv, qe__stage_qkv_bias(st, qkv_lin),
						  c->batch, T, H, c->heads, qe__stage_flash_operands(st),
						  qe__stage_attn_dt(st));
	for (int b = 0; b < c->batch; b++)
		QE_TRY(st->b->ops->attn_fwd(s, out + b * T * H, probs + (int64_t)b * c->heads * T * T, qkv + b * T * 3 * H,
					    T, H, c->heads));
	return QE_OK;
}

/* The token embedding of all N tokens plus each one's position, into the residual stream (act_dt). */
static int embed_forward(qe_stage *st, qe_stream *s, void *x, const int32_t *tokens)
{
	const qe_model_config *c = &st->cfg;
	const float *wte = st->param_buf + st->params[st->p_wte].offset, *wpe = st->param_buf + st->params[st->p_wpe].offset;
	return st->b->ops->embed_fwd(s, x, st->act_dt, tokens, wte, wpe, st->N, c->seq, c->hidden);
}

/*
 * out = in + y, the residual stream plus linear lin's output, all three in
 * act_dt; y lacks lin's bias (its GEMM left it out) and residual_add adds
 * it first.  With mean and rstd, also the statistics of the layernorm that
 * reads out next, in the same op.
 */
static int residual(qe_stage *st, qe_stream *s, void *out, const void *in, const void *y, int lin, float *mean,
		    float *rstd)
{
	return st->b->ops->residual_add(s, out, in, y, st->act_dt, qe__stage_lin_bias(st, lin), st->N, st->cfg.hidden,
					mean, rstd);
}

/* the statistics of the layernorm that reads block k's output: block k + 1's first, or the final one */
static void next_ln_stats(qe_stage *st, slot_tape *t, int k, float **mean, float **rstd)
{
	if (k + 1 < st->nblk) {
		*mean = t->blk[k + 1].mean1;
		*rstd = t->blk[k + 1].rstd1;
	} else if (st->last) {
		*mean = t->meanf;
		*rstd = t->rstdf;
	} else {
		*mean = *rstd = NULL; /* the next stage's first block: its layernorm runs there */
	}
}

/*
 * Block k.  Each residual writes the statistics of the layernorm after it
 * in this stage, so only block 0's first layernorm (after the embedding or
 * a peer's activations) takes its own.
 */
static int block_forward(qe_stage *st, qe_stream *s, slot_tape *t, int k, int record)
{
	const block_info *bk = &st->blocks[k];
	block_tape *bt = &t->blk[k];
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;
	/* attention half */
	int qkv = bk->lin0 + QE_LIN_QKV;
	QE_TRY(ln_linear_forward(st, s, t, qkv, bt->x_in, bt->mean1, bt->rstd1, k > 0, P + pi[bk->ln1w].offset,
				 P + pi[bk->ln1b].offset, bt->qkv, qe__stage_attn_dt(st), record,
				 qe__stage_qkv_bias(st, qkv) != NULL));
	void *att;
	QE_TRY(attention_forward(st, s, bt, qkv, st->ws_h[1], &att));
	int proj = bk->lin0 + QE_LIN_PROJ, fc1 = bk->lin0 + QE_LIN_FC1, fc2 = bk->lin0 + QE_LIN_FC2;
	/* the projection's and FC2's outputs, in act_dt like the residual stream they join */
	fwd_fuse proj_in = { .no_bias = 1, .in_dt = qe__stage_attn_dt(st), .out_dt = st->act_dt };
	QE_TRY(linear_forward(st, s, t, proj, att, st->ws_h[2], record, &proj_in));
	QE_TRY(residual(st, s, bt->x_mid, bt->x_in, st->ws_h[2], proj, bt->mean2, bt->rstd2));
	/* MLP half: fc1_out lacks its bias, and FC2's input cast adds it and applies GELU */
	QE_TRY(ln_linear_forward(st, s, t, fc1, bt->x_mid, bt->mean2, bt->rstd2, 1, P + pi[bk->ln2w].offset,
				 P + pi[bk->ln2b].offset, bt->fc1_out, st->act_dt, record, 1));
	fwd_fuse down = { .no_bias = 1,
			  .in_dt = st->act_dt,
			  .out_dt = st->act_dt,
			  .pre_bias = qe__stage_lin_bias(st, fc1),
			  .pre_gelu = 1 };
	QE_TRY(linear_forward(st, s, t, fc2, bt->fc1_out, st->ws_h[2], record, &down));
	float *mean, *rstd;
	next_ln_stats(st, t, k, &mean, &rstd);
	return residual(st, s, bt->x_out, bt->x_mid, st->ws_h[2], fc2, mean, rstd);
}

/* record == 0: evaluation - nothing is recorded into amax histories and no role is updated. */
static int forward(qe_stage *st, qe_stream *s, int slot, int refresh_cache, int record)
{
	if (slot < 0 || slot >= st->nslots)
		return qe_fail(QE_EINVAL, "stage %d: F on slot %d of %d", st->stage, slot, st->nslots);
	const qe_backend_ops *o = st->b->ops;
	const qe_model_config *c = &st->cfg;
	slot_tape *t = &st->slots[slot];
	int64_t N = st->N;
	const float *P = st->param_buf;
	const qe_param_info *pi = st->params;

	if (refresh_cache)
		QE_TRY(refresh_weight_cache(st, s, record));
	if (st->first)
		QE_TRY(embed_forward(st, s, t->blk[0].x_in, t->tokens));
	for (int k = 0; k < st->nblk; k++)
		QE_TRY(block_forward(st, s, t, k, record));
	if (st->last) {
		const void *x = t->blk[st->nblk - 1].x_out;
		QE_TRY(ln_linear_forward(st, s, t, st->nlin - 1, x, t->meanf, t->rstdf, 1, P + pi[st->p_lnfw].offset,
					 P + pi[st->p_lnfb].offset, t->logits, st->act_dt, record, 0));
		/*
		 * The loss and the rows' softmax statistics; padded columns are masked.  The logits'
		 * gradient is made by the head's dY cast in dI, from these (qe__stage_head_dy_prologue).
		 */
		QE_TRY(o->xent_rows(s, t->loss, t->xstats, t->logits, t->targets, N, st->vpad, c->vocab, st->act_dt));
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
