/*
 * rank_step.c - the stage executor: runs a rank's action list for one step,
 * each compute action bracketed by its contract (check, physical action,
 * commit), in eager mode or by replaying captured graphs with the two-way
 * stream handoff; then the optimizer commit under the epoch relation.
 * Messages go through links.c, the QE_PROFILE rows through profile.c.
 */
#include "runtime/exec/rank_int.h"

#include <stdlib.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* ---- physical actions ----------------------------------------------------- */

/*
 * dW of chunk ch for slot m on stream s, to the arena (direct: the GEMM
 * writes the view, or with an accumulating arena and m > 0 adds into it,
 * beta = 1) or to scratch, then copied into the view or added into it
 * (copy).  Either way an accumulated view is ((g0 + g1) + g2) + ..., one fp32
 * rounding per add.  Captured once per slot, the graph keeps that choice:
 * slot m is microbatch m.
 */
static int physical_dw(qe_rank *r, rank_chunk *ch, qe_stream *s, int m)
{
	int acc = qe_arena_accumulates(r->arena, m);
	if (acc < 0)
		return qe_fail(QE_EINVAL, "rank %d stage %d: dW of microbatch %d outside the arena's %d", r->rank,
			       ch->stage, m, r->M);
	int slot = rank_slot(ch, m);
	if (r->cfg.grad == QE_GRAD_DIRECT)
		return qe_stage_backward_weight(ch->st, s, slot, &ch->views[m * ch->nmat], acc);
	QE_TRY(qe_stage_backward_weight(ch->st, s, slot, ch->scratch, 0));
	for (int j = 0; j < ch->nmat; j++) {
		float *view = ch->views[m * ch->nmat + j].data;
		if (acc)
			QE_TRY(r->b->ops->add_inplace(s, view, ch->scratch[j].data, qe_tensor_numel(&ch->scratch[j])));
		else
			QE_TRY(r->b->ops->copy(s, view, ch->scratch[j].data, qe_tensor_nbytes(&ch->scratch[j]),
					    QE_COPY_D2D));
	}
	return QE_OK;
}

static int physical_eager(qe_rank *r, rank_chunk *ch, qe_action_kind kind, int m, int refresh)
{
	switch (kind) {
	case QE_ACT_F:
		return qe_stage_forward(ch->st, r->caller, rank_slot(ch, m), refresh);
	case QE_ACT_DI:
		return qe_stage_backward_input(ch->st, r->caller, rank_slot(ch, m), m);
	default:
		return physical_dw(r, ch, r->caller, m);
	}
}

/*
 * Capture one graph per (action, microbatch slot, local chunk) on the
 * manager-owned graph stream.  F of slot 0 includes the weight-cache refresh
 * (the first F of every step).  Nothing runs while capturing.
 */
static int capture_graphs(qe_rank *r)
{
	const qe_backend_ops *o = r->b->ops;
	double t0 = qe__rank_now_ms();
	QE_TRY(qe__rank_sync(r, r->caller));
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		for (qe_action_kind k = QE_ACT_F; k < RANK_GRAPH_KINDS; k++) {
			for (int m = 0; m < r->M; m++) {
				int rc = o->capture_begin(r->gstream);
				if (!rc) {
					if (k == QE_ACT_F)
						rc = qe_stage_forward(ch->st, r->gstream, rank_slot(ch, m), m == 0);
					else if (k == QE_ACT_DI)
						rc = qe_stage_backward_input(ch->st, r->gstream, rank_slot(ch, m), m);
					else
						rc = physical_dw(r, ch, r->gstream, m);
					qe_graph *g = NULL;
					int rc2 = o->capture_end(r->gstream, &g);
					if (!rc)
						rc = rc2;
					ch->graphs[k][m] = g;
				}
				if (rc)
					return qe_fail_ctx(rc, "rank %d: capturing %s graph of stage %d slot %d", r->rank,
							   qe_action_name(k), ch->stage, m);
				r->ctr.graphs++;
			}
		}
	}
	r->ctr.capture_ms += qe__rank_now_ms() - t0;
	r->graphs_ready = 1;
	return QE_OK;
}

/*
 * Two-way handoff around one replay: the graph stream waits for everything
 * the caller enqueued (inputs in the slot's static buffers), and the caller
 * waits for the graph's tail before it consumes anything the graph wrote.
 */
static int replay(qe_rank *r, qe_graph *g)
{
	const qe_backend_ops *o = r->b->ops;
	QE_TRY(o->event_record(r->ev_in, r->caller));
	QE_TRY(o->stream_wait(r->gstream, r->ev_in));
	QE_TRY(o->graph_launch(g, r->gstream));
	QE_TRY(o->event_record(r->ev_tail, r->gstream));
	QE_TRY(o->stream_wait(r->caller, r->ev_tail));
	r->ctr.replays++;
	r->ctr.handoffs++;
	return QE_OK;
}

static int physical(qe_rank *r, rank_chunk *ch, qe_action_kind kind, int m, int refresh)
{
	if (r->cfg.exec == QE_EXEC_GRAPH && r->graphs_ready) {
		/* The F graph of slot 0 refreshes the cache; the contract agrees only then. */
		if (kind == QE_ACT_F && refresh != (m == 0))
			return qe_fail(QE_ESTALE_CACHE, "stage %d: captured F of slot %d %s the weight cache, the contract "
				       "says it must%s", ch->stage, m, m == 0 ? "refreshes" : "does not refresh",
				       refresh ? "" : " not");
		return replay(r, ch->graphs[kind][m]);
	}
	return physical_eager(r, ch, kind, m, refresh);
}

/* ---- compute actions under their contracts -------------------------------- */

static void note_live(qe_rank *r)
{
	int live = 0;
	for (int c = 0; c < r->V; c++) {
		int l = qe_tape_pool_live_refs(r->chunks[c].pool, QE_EPOCH_ANY, NULL, 0);
		if (l > r->chunks[c].last.peak_live_tapes)
			r->chunks[c].last.peak_live_tapes = l;
		live += l;
	}
	if (live > r->peak_live_step)
		r->peak_live_step = live;
}

static int finish(qe_rank *r, rank_chunk *ch, qe_action_ticket *t, int rc, uint64_t *token)
{
	if (rc) {
		char buf[256];
		snprintf(buf, sizeof(buf), "%s", qe_last_error());
		qe_action_fail(&ch->sc, t);
		return qe_fail(rc, "rank %d: %s(stage %d, mb %d) failed: %s", r->rank, qe_action_name(t->kind), ch->stage,
			       t->m, buf);
	}
	rc = qe_action_end(&ch->sc, t, token);
	note_live(r);
	return rc;
}

static int feed_data(qe_rank *r, rank_chunk *ch, const qe_data *data, int m)
{
	int first = qe_stage_is_first(ch->st), last = qe_stage_is_last(ch->st);
	if (!first && !last)
		return QE_OK;
	const qe_model_config *mc = &r->cfg.model;
	int64_t N = qe_model_tokens(mc);
	int32_t *tok = malloc((size_t)N * 2 * sizeof(int32_t)), *tgt = tok + N;
	if (!tok)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for %lld tokens", r->rank, (long long)N);
	int rc = qe_data_sample_batch(data, 0, r->cfg.seed, r->steps, r->dr, m, mc->batch, mc->seq, mc->vocab, mc->preset,
				      tok, tgt);
	if (!rc && first)
		rc = r->b->ops->copy(r->caller, qe_stage_slot_tokens(ch->st, rank_slot(ch, m)), tok, (size_t)N * 4,
				     QE_COPY_H2D);
	if (!rc && last)
		rc = r->b->ops->copy(r->caller, qe_stage_slot_targets(ch->st, rank_slot(ch, m)), tgt, (size_t)N * 4,
				     QE_COPY_H2D);
	/* both backends have read a pageable source when copy returns (cuda stages it), as with the old stack buffers */
	free(tok);
	return rc;
}

static int act_f(qe_rank *r, rank_chunk *ch, const qe_data *data, int m)
{
	qe_action_ticket t;
	QE_TRY(qe_action_f_begin(&ch->sc, ch->token, m, &t));
	int rc = feed_data(r, ch, data, m);
	if (!rc)
		rc = physical(r, ch, QE_ACT_F, m, t.refresh_cache);
	QE_TRY(finish(r, ch, &t, rc, &ch->token));
	ch->refs[m] = t.ref;
	/* hand the activation to the next stage when it lives here */
	rank_chunk *next = qe__rank_chunk_of_stage(r, ch->stage + 1);
	if (next)
		QE_TRY(r->b->ops->copy(r->caller, qe_stage_slot_input(next->st, rank_slot(next, m)),
				    qe_stage_slot_output(ch->st, rank_slot(ch, m)), qe_stage_act_bytes(ch->st), QE_COPY_D2D));
	/* the last stage's loss leaves the slot at once: a later microbatch may take the slot */
	if (qe_stage_is_last(ch->st))
		QE_TRY(r->b->ops->copy(r->caller, r->loss_mb + m, qe_stage_slot_loss(ch->st, rank_slot(ch, m)), 4,
				    QE_COPY_D2D));
	return QE_OK;
}

static int handoff_grad(qe_rank *r, rank_chunk *ch, int m)
{
	rank_chunk *prev = qe__rank_chunk_of_stage(r, ch->stage - 1);
	if (prev)
		QE_TRY(r->b->ops->copy(r->caller, qe_stage_slot_dout(prev->st, rank_slot(prev, m)),
				    qe_stage_slot_dinput(ch->st, rank_slot(ch, m)),
				    qe_stage_act_bytes(ch->st), QE_COPY_D2D));
	return QE_OK;
}

static int act_di(qe_rank *r, rank_chunk *ch, int m)
{
	qe_action_ticket t;
	QE_TRY(qe_action_di_begin(&ch->sc, ch->token, &ch->refs[m], &t));
	QE_TRY(finish(r, ch, &t, physical(r, ch, QE_ACT_DI, m, 0), &ch->token));
	return handoff_grad(r, ch, m);
}

static int act_dw(qe_rank *r, rank_chunk *ch, int m)
{
	qe_action_ticket t;
	QE_TRY(qe_action_dw_begin(&ch->sc, &ch->refs[m], m, &ch->views[m * ch->nmat], &t));
	return finish(r, ch, &t, physical(r, ch, QE_ACT_DW, m, 0), NULL);
}

static int act_b(qe_rank *r, rank_chunk *ch, int m)
{
	qe_action_ticket t;
	QE_TRY(qe_action_b_begin(&ch->sc, ch->token, &ch->refs[m], &ch->views[m * ch->nmat], &t));
	int rc = physical(r, ch, QE_ACT_DI, m, 0);
	if (!rc)
		rc = physical(r, ch, QE_ACT_DW, m, 0);
	QE_TRY(finish(r, ch, &t, rc, &ch->token));
	return handoff_grad(r, ch, m);
}

static int run_action(qe_rank *r, const qe_sched_action *a, const qe_data *data)
{
	rank_chunk *ch = &r->chunks[a->chunk];
	int peer = a->peer >= 0 ? r->dr * r->P + a->peer : -1;
	size_t act = qe_stage_act_bytes(ch->st);
	if (qe_action_is_compute(a->kind))
		r->chunks[a->chunk].last.delayed_dw += (uint64_t)qe_dw_rule_note(&r->dw, a->kind, a->chunk, a->mb);
	switch (a->kind) {
	case QE_ACT_F:
		return act_f(r, ch, data, a->mb);
	case QE_ACT_DI:
		return act_di(r, ch, a->mb);
	case QE_ACT_DW:
		return act_dw(r, ch, a->mb);
	case QE_ACT_B:
		return act_b(r, ch, a->mb);
	case QE_ACT_SEND_ACT:
		return qe__rank_send(r, peer, rank_tag(TAG_ACT, a->stage, a->mb),
				     qe_stage_slot_output(ch->st, rank_slot(ch, a->mb)), act);
	case QE_ACT_RECV_ACT:
		return qe__rank_recv(r, peer, rank_tag(TAG_ACT, a->stage, a->mb),
				     qe_stage_slot_input(ch->st, rank_slot(ch, a->mb)), act);
	case QE_ACT_SEND_GRAD:
		return qe__rank_send(r, peer, rank_tag(TAG_GRAD, a->stage, a->mb),
				     qe_stage_slot_dinput(ch->st, rank_slot(ch, a->mb)),
				     act);
	case QE_ACT_RECV_GRAD:
		return qe__rank_recv(r, peer, rank_tag(TAG_GRAD, a->stage, a->mb),
				     qe_stage_slot_dout(ch->st, rank_slot(ch, a->mb)),
				     act);
	default:
		return qe_fail(QE_ESCHEDULE, "rank %d: unknown action kind %d", r->rank, a->kind);
	}
}

/* ---- optimizer commit --------------------------------------------------- */

/* The views of chunk ch's matrices (nv each) into r->commit_views. */
static int chunk_views(qe_rank *r, rank_chunk *ch, int nv)
{
	if (ch->nmat > r->commit_cap)
		return qe_fail(QE_EINVAL, "stage %d: %d matrices, more than the %d planned", ch->stage, ch->nmat,
			       r->commit_cap);
	for (int j = 0; j < ch->nmat; j++)
		QE_TRY(qe_arena_views_for(r->arena, ch->p_begin + j, &r->commit_views[j * nv], NULL));
	return QE_OK;
}

/*
 * Data parallel: parameter i of chunk ch summed over its microbatch views in
 * order (an accumulated matrix view is that sum already: it is only copied),
 * then all-reduced over the replicas of this pipeline rank in replica order,
 * into ch->replica_grads at the parameter's offset.  The arena's view itself
 * stays this rank's own sum.
 */
static int replica_sum(qe_rank *r, rank_chunk *ch, int i, int nv)
{
	const qe_param_info *pi = qe_stage_param(ch->st, i);
	const float *pv[QE_RANK_MAX_MICRO];
	int group[64];
	for (int d = 0; d < r->D && d < 64; d++)
		group[d] = d * r->P + r->pr;
	int64_t n = pi->rows * pi->cols;
	const float *whole = qe_adamw_grad_of(ch->opt, i); /* a tied embedding's summed gradient */
	int npv = whole ? 1 : pi->is_matrix ? nv : qe_stage_nonmatrix_views(ch->st);
	for (int m = 0; m < npv; m++)
		pv[m] = whole ? whole
		      : pi->is_matrix ? r->commit_views[pi->matrix_index * nv + m]
				      : qe_stage_nonmatrix_grad(ch->st, m) + pi->grad_offset;
	float *dst = ch->replica_grads + pi->offset;
	QE_TRY(r->b->ops->sum_views(r->caller, dst, pv, npv, n));
	/* the host path waits for the device itself; the link path stays on the streams */
	return qe__rank_allreduce(r, dst, (size_t)n, group, r->D);
}

/* Every parameter's replica sum of chunk ch, once a step (the clip pass may have made them). */
static int replica_sums(qe_rank *r, rank_chunk *ch, int nv)
{
	if (ch->replica_ready)
		return QE_OK;
	for (int i = 0; i < qe_stage_nparams(ch->st); i++)
		QE_TRY(replica_sum(r, ch, i, nv));
	ch->replica_ready = 1;
	return QE_OK;
}

/*
 * The update of chunk ch from its replica sums: one adamw_many over every
 * parameter, each reading its sum as its one gradient (qe_adamw_set_grad,
 * the tied embeddings' own buffers put back after), scaled by grad_scale;
 * with sumsq, the norm's parts on the way (the bytes qe_adamw_param_sumsq
 * gives from the same sums).
 */
static int replica_update(qe_rank *r, rank_chunk *ch, int nv, const qe_adamw_config *hyper, float grad_scale,
			  int sumsq)
{
	int np = qe_stage_nparams(ch->st);
	const float **own = malloc((size_t)(np > 0 ? np : 1) * sizeof(*own));
	if (!own)
		return qe_fail(QE_ENOMEM, "optimizer: stage %d: %d gradient pointers", ch->stage, np);
	for (int i = 0; i < np; i++) {
		own[i] = qe_adamw_grad_of(ch->opt, i);
		qe_adamw_set_grad(ch->opt, i, ch->replica_grads + qe_stage_param(ch->st, i)->offset);
	}
	int rc = sumsq ? qe_adamw_step_sumsq(ch->opt, r->caller, ch->st, r->commit_views, nv, r->M, hyper, grad_scale)
		       : qe_adamw_step(ch->opt, r->caller, ch->st, r->commit_views, nv, r->M, hyper, grad_scale);
	for (int i = 0; i < np; i++)
		qe_adamw_set_grad(ch->opt, i, own[i]);
	free(own);
	return rc;
}

/* Whether this step's gradient norm is measured: always under --grad-clip, else on the steps the progress line shows. */
static int norm_wanted(const qe_rank *r)
{
	int64_t step = r->steps + 1, every = r->cfg.log_every;
	return r->cfg.optim.grad_clip > 0 || every <= 1 || step % every == 0 || step == r->cfg.steps;
}

/*
 * Under --grad-clip, the norm must be known before any update: a first pass
 * over the gradients (with --dp, over the replica sums, which the update
 * then reads: they are made once a step).  Without it the norm is taken on
 * the way, by the update itself (adamw_many with sumsq, from the gradients
 * it reads: one pass over them, not two).
 */
static int clip_pass(qe_rank *r, const qe_adamw_config *hyper, int nv, double *norm)
{
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		QE_TRY(chunk_views(r, ch, nv));
		if (r->D == 1) {
			QE_TRY(qe_adamw_grad_sumsq(ch->opt, r->caller, ch->st, r->commit_views, nv, r->M, hyper, 1.0f));
			continue;
		}
		QE_TRY(replica_sums(r, ch, nv));
		for (int i = 0; i < qe_stage_nparams(ch->st); i++)
			QE_TRY(qe_adamw_param_sumsq(ch->opt, r->caller, ch->st, i,
						    ch->replica_grads + qe_stage_param(ch->st, i)->offset, 1.0f / (float)r->D));
	}
	return qe__rank_grad_norm_collect(r, norm);
}

static int optimizer_commit(qe_rank *r)
{
	const float **views = r->commit_views;
	/* this step's learning rate (the schedule at the steps done so far: the data position) */
	qe_adamw_config hyper = r->cfg.optim;
	hyper.lr = qe_adamw_lr_at(&r->cfg.optim, r->steps);
	/* views per matrix: M (per-mb: reduced here in microbatch order) or 1 (accumulated by dW) */
	const int nv = qe_arena_nviews(r->arena);
	for (int c = 0; c < r->V; c++) {
		r->chunks[c].replica_ready = 0; /* this step's replica sums are made below */
		QE_TRY(qe_epoch_check_commit(&r->ep, r->chunks[c].pool, r->arena, 0));
	}
	/* tied embeddings: wte's and the head's gradient summed, before anything reads either */
	QE_TRY(qe__rank_tie_grads(r));
	int want = norm_wanted(r), clip = r->cfg.optim.grad_clip > 0;
	double norm = NAN;
	float factor = 1.0f;
	if (want && clip) {
		QE_TRY(clip_pass(r, &hyper, nv, &norm));
		factor = qe_adamw_clip_factor(r->cfg.optim.grad_clip, norm);
	}
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		QE_TRY(chunk_views(r, ch, nv));
		if (r->D == 1) {
			/* without clipping the norm comes out of the update's own read of the gradients */
			if (want && !clip)
				QE_TRY(qe_adamw_step_sumsq(ch->opt, r->caller, ch->st, views, nv, r->M, &hyper, factor));
			else
				QE_TRY(qe_adamw_step(ch->opt, r->caller, ch->st, views, nv, r->M, &hyper, factor));
			continue;
		}
		/* the replica sums feed one update over the stage; without clipping factor is 1 and the
		 * norm's parts come out of it scaled by 1 / D, as qe_adamw_param_sumsq took them */
		float scale = (float)((double)factor / (double)r->D);
		QE_TRY(replica_sums(r, ch, nv));
		QE_TRY(replica_update(r, ch, nv, &hyper, scale, want && !clip));
	}
	if (want && !clip)
		QE_TRY(qe__rank_grad_norm_collect(r, &norm));
	r->grad_norm = norm;
	QE_TRY(qe__rank_sync(r, r->caller));
	qe_arena_stats as;
	qe_arena_get_stats(r->arena, &as);
	r->ctr.arena_writes = as.writes_this_step;
	qe_epoch_commit_optimizer(&r->ep);
	qe_arena_step_reset(r->arena);
	for (int c = 0; c < r->V; c++)
		qe_stage_contract_step_reset(&r->chunks[c].sc);
	return QE_OK;
}

/* The step's loss: mean over microbatches on the last stage, mean over replicas, known to every rank. */
static int step_loss(qe_rank *r, float *loss)
{
	float v = 0;
	rank_chunk *last = qe__rank_chunk_of_stage(r, r->S - 1);
	if (last) {
		float sum = 0, l[QE_RANK_MAX_MICRO];
		/* every microbatch's loss comes back, then one wait for all of them */
		QE_TRY(r->b->ops->copy(r->caller, l, r->loss_mb, (size_t)r->M * sizeof(float), QE_COPY_D2H));
		QE_TRY(qe__rank_sync(r, r->caller));
		for (int m = 0; m < r->M; m++)
			sum += l[m];
		v = sum / (float)r->M / (float)r->D;
	}
	/* the loss, and beside it this rank's vote to stop after this step (the sum of the loss is unchanged) */
	float both[2] = { v, r->stop_source && *r->stop_source ? 1.0f : 0.0f };
	if (r->comm && r->world > 1)
		QE_TRY(qe_comm_allreduce_sum_f32(r->comm, both, 2, NULL, r->world));
	r->stop_agreed = both[1] > 0;
	*loss = both[0];
	return QE_OK;
}

int qe_rank_step(qe_rank *r, const qe_data *data, float *loss)
{
	const qe_sched_rank *list = &r->sched->ranks[r->pr];
	if (r->cfg.exec == QE_EXEC_GRAPH && !r->graphs_ready && r->steps_here >= 1)
		QE_TRY(capture_graphs(r));
	for (int c = 0; c < r->V; c++)
		memset(&r->chunks[c].last, 0, sizeof(r->chunks[c].last));
	r->peak_live_step = 0;
	qe_dw_rule_reset(&r->dw);
	qe__rank_profile_step_begin(r);
	for (int i = 0; i < list->n; i++) {
		double t0 = qe__rank_profile_start(r);
		int rc = run_action(r, &list->actions[i], data);
		if (!rc)
			rc = qe__rank_profile_note(r, list->actions[i].kind, t0);
		if (rc) {
			char what[96];
			qe_sched_action_describe(&list->actions[i], what, sizeof(what));
			/* abort the step: every outstanding tape of this epoch is purged */
			for (int c = 0; c < r->V; c++)
				qe_tape_pool_purge_epoch(r->chunks[c].pool, r->ep.e_W);
			return qe_fail_ctx(rc, "step %lld, rank %d action %d %s", (long long)r->steps, r->rank, i, what);
		}
	}
	for (int c = 0; c < r->V; c++) {
		qe_tape_pool_stats ps;
		qe_tape_pool_get_stats(r->chunks[c].pool, &ps);
		r->chunks[c].last.live_tapes = ps.live;
		for (int j = 0; j < r->chunks[c].nmat; j++)
			for (int m = 0; m < r->M; m++)
				r->chunks[c].last.arena_writes +=
					qe_arena_is_written(r->arena, r->chunks[c].p_begin + j, m) == 1;
	}
	r->ctr.delayed_dw = 0;
	for (int c = 0; c < r->V; c++)
		r->ctr.delayed_dw += r->chunks[c].last.delayed_dw;
	r->ctr.peak_live_tapes = r->peak_live_step;
	double t0 = qe__rank_profile_start(r);
	QE_TRY(step_loss(r, loss));
	QE_TRY(qe__rank_profile_note(r, RANK_PROF_LOSS, t0));
	t0 = qe__rank_profile_start(r);
	int rc = optimizer_commit(r);
	if (!rc)
		rc = qe__rank_profile_note(r, RANK_PROF_OPTIM, t0);
	if (rc)
		return qe_fail_ctx(rc, "step %lld, rank %d: optimizer commit", (long long)r->steps, r->rank);
	r->steps++;
	r->steps_here++;
	qe__rank_profile_step_end(r);
	int check = r->cfg.check_replicas && (r->D > 1 || (r->tie.on && r->steps == r->cfg.steps));
	if (check && (rc = qe_rank_check_replicas(r)))
		return rc;
	return QE_OK;
}

int qe_rank_forward_only_for_test(qe_rank *r, const qe_data *data)
{
	for (int c = 0; c < r->V; c++)
		if (qe_sched_stage_of(r->sched, r->pr, c) == 0)
			return act_f(r, &r->chunks[c], data, 0);
	return qe_fail(QE_EINVAL, "rank %d holds no first stage", r->rank);
}

int qe_rank_microbatch_for_test(qe_rank *r, const qe_data *data, int m)
{
	if (r->world != 1)
		return qe_fail(QE_EINVAL, "microbatch test hook: needs every stage in this process");
	for (int s = 0; s < r->S; s++)
		QE_TRY(act_f(r, qe__rank_chunk_of_stage(r, s), data, m));
	for (int s = r->S - 1; s >= 0; s--)
		QE_TRY(act_b(r, qe__rank_chunk_of_stage(r, s), m));
	return QE_OK;
}
