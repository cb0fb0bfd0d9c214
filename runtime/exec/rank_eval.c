/*
 * rank_eval.c - held-out loss: forward only, through every stage in order,
 * with the evaluation forward that records no amax and updates no scaling
 * state, so evaluating never changes the training trajectory.  Runs at an
 * optimizer boundary (no live tapes), reusing slot 0's storage.
 */
#include "runtime/exec/rank_int.h"

#include <stdlib.h>

#include "runtime/core/status.h"

static int eval_pass(qe_rank *r, const qe_data *data, int32_t *tok, int32_t *tgt, float *loss);

int qe_rank_eval(qe_rank *r, const qe_data *data, float *loss)
{
	int64_t N = qe_model_tokens(&r->cfg.model);
	int32_t *tok = malloc((size_t)N * 2 * sizeof(int32_t));
	if (!tok)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for %lld held-out tokens", r->rank, (long long)N);
	int rc = eval_pass(r, data, tok, tok + N, loss);
	free(tok);
	return rc;
}

/*
 * Microbatch e's tokens and targets (batch x seq each) forward through every
 * stage this rank holds, in stage order; on the rank of the last stage the
 * microbatch's loss is added to *sum.
 */
static int eval_walk(qe_rank *r, const int32_t *tok, const int32_t *tgt, int e, float *sum)
{
	const qe_backend_ops *o = r->b->ops;
	size_t tbytes = (size_t)qe_model_tokens(&r->cfg.model) * 4;
	/* Every rank walks the stages in the same order, so messages pair up in FIFO order. */
	for (int s = 0; s < r->S; s++) {
		rank_chunk *ch = qe__rank_chunk_of_stage(r, s);
		if (!ch)
			continue;
		size_t act = qe_stage_act_bytes(ch->st);
		if (s == 0)
			QE_TRY(o->copy(r->caller, qe_stage_slot_tokens(ch->st, 0), tok, tbytes, QE_COPY_H2D));
		if (s == r->S - 1)
			QE_TRY(o->copy(r->caller, qe_stage_slot_targets(ch->st, 0), tgt, tbytes, QE_COPY_H2D));
		if (s > 0) {
			rank_chunk *prev = qe__rank_chunk_of_stage(r, s - 1);
			if (prev)
				QE_TRY(o->copy(r->caller, qe_stage_slot_input(ch->st, 0), qe_stage_slot_output(prev->st, 0), act,
					       QE_COPY_D2D));
			else
				QE_TRY(qe__rank_recv(r, r->dr * r->P + qe_sched_rank_of(r->sched, s - 1),
						     rank_tag(TAG_EVAL, s - 1, e), qe_stage_slot_input(ch->st, 0), act));
		}
		QE_TRY(qe_stage_forward_eval(ch->st, r->caller, 0));
		if (s < r->S - 1 && !qe__rank_chunk_of_stage(r, s + 1))
			QE_TRY(qe__rank_send(r, r->dr * r->P + qe_sched_rank_of(r->sched, s + 1), rank_tag(TAG_EVAL, s, e),
					     qe_stage_slot_output(ch->st, 0), act));
		if (s == r->S - 1) {
			float l;
			QE_TRY(o->copy(r->caller, &l, qe_stage_slot_loss(ch->st, 0), 4, QE_COPY_D2H));
			QE_TRY(qe__rank_sync(r, r->caller));
			*sum += l;
		}
	}
	return QE_OK;
}

static int eval_pass(qe_rank *r, const qe_data *data, int32_t *tok, int32_t *tgt, float *loss)
{
	const qe_model_config *mc = &r->cfg.model;
	int E = r->cfg.eval_micro > 0 ? r->cfg.eval_micro : 1;
	float sum = 0;
	QE_TRY(qe_rank_quiescent(r));
	for (int e = 0; e < E; e++) {
		QE_TRY(qe_data_sample_batch(data, 1, r->cfg.seed, 0, r->dr, e, mc->batch, mc->seq, mc->vocab, mc->preset,
					    tok, tgt));
		QE_TRY(eval_walk(r, tok, tgt, e, &sum));
	}
	float v = qe__rank_chunk_of_stage(r, r->S - 1) ? sum / (float)E / (float)r->D : 0.0f;
	if (r->comm && r->world > 1)
		QE_TRY(qe_comm_allreduce_sum_f32(r->comm, &v, 1, NULL, r->world));
	*loss = v;
	return QE_OK;
}

int qe_rank_eval_tokens(qe_rank *r, const int32_t *tokens, const int32_t *targets, float *loss)
{
	if (r->world != 1)
		return qe_fail(QE_EINVAL, "evaluating given tokens needs one rank holding every stage (this one is rank %d "
					  "of %d)", r->rank, r->world);
	float sum = 0;
	QE_TRY(qe_rank_quiescent(r));
	QE_TRY(eval_walk(r, tokens, targets, 0, &sum));
	*loss = sum;
	return QE_OK;
}
