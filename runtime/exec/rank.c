/*
 * rank.c - building a rank (schedule, local stages, optimizer state, tape
 * pools, stage contracts, gradient arena, streams), the checkpoint gate,
 * restart bookkeeping and the rank's accessors.  Messages between ranks are
 * links.c's, the step is rank_step.c's.
 */
#include "runtime/exec/rank_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

static int setup_chunk(qe_rank *r, int c, qe_arena_param *aparams, char (*names)[40], int cap, int *np)
{
	rank_chunk *ch = &r->chunks[c];
	int rc;
	ch->chunk = c;
	ch->stage = qe_sched_stage_of(r->sched, r->pr, c);
	ch->nslots = r->nslots;
	if ((rc = qe_stage_create(r->b, &r->cfg.model, &r->cfg.prec, ch->stage, r->S, ch->nslots, r->M,
				  r->cfg.arena == QE_ARENA_ACCUMULATE, &ch->st)))
		return qe_fail_ctx(rc, "rank %d: creating stage %d", r->rank, ch->stage);
	if ((rc = qe_stage_init_params(ch->st, r->cfg.seed)) || (rc = qe_adamw_create(r->b, ch->st, &ch->opt)))
		return rc;
	if ((rc = qe_tape_pool_create(ch->nslots, NULL, &ch->pool)))
		return qe_fail_ctx(rc, "rank %d stage %d: tape pool", r->rank, ch->stage);
	ch->p_begin = *np;
	ch->nmat = qe_stage_nmatrices(ch->st);
	for (int j = 0; j < ch->nmat; j++) {
		const qe_param_info *pi = qe_stage_param(ch->st, qe_stage_matrix_param(ch->st, j));
		if (*np >= cap)
			return qe_fail(QE_EINVAL, "rank %d: more than %d matrix parameters", r->rank, cap);
		snprintf(names[*np], sizeof(names[0]), "stage%d.%s", ch->stage, pi->name);
		qe_arena_param *ap = &aparams[*np];
		ap->name = names[(*np)++];   /* copied by qe_arena_create */
		ap->rows = pi->rows;
		ap->cols = pi->cols;
		ap->dtype = QE_F32;
		ap->device = r->b->ops->device;
	}
	return QE_OK;
}

int qe_rank_create(const qe_train_config *cfg, qe_backend *b, qe_comm *comm, qe_rank **out)
{
	int rc;
	*out = NULL;
	if ((rc = qe_train_config_check(cfg)))
		return rc;
	qe_rank *r = calloc(1, sizeof(*r));
	if (!r)
		return qe_fail(QE_ENOMEM, "rank: out of host memory");
	r->cfg = *cfg;
	r->b = b;
	r->comm = comm;
	r->rank = comm ? qe_comm_rank(comm) : 0;
	r->world = comm ? qe_comm_world_size(comm) : 1;
	r->P = cfg->pp;
	r->D = cfg->dp;
	r->V = cfg->chunks;
	r->M = cfg->micro;
	r->S = r->P * r->V;
	if (r->world != r->P * r->D) {
		rc = qe_fail(QE_EINVAL, "rank %d: world size %d is not --pp %d x --dp %d", r->rank, r->world, r->P, r->D);
		free(r);
		return rc;
	}
	if (r->V > QE_RANK_MAX_CHUNKS || r->M > QE_RANK_MAX_MICRO) {
		free(r);
		return qe_fail(QE_EINVAL, "rank: at most %d chunks and %d microbatches", QE_RANK_MAX_CHUNKS,
			       QE_RANK_MAX_MICRO);
	}
	r->pr = r->rank % r->P;
	qe__rank_profile_init(r);
	r->dr = r->rank / r->P;
	qe_sched_config sc = { cfg->schedule, r->P, r->M, r->V, cfg->backward };
	/* every chunk holds layers / S blocks of four matrices, and the last stage the head */
	int per_chunk = 4 * (cfg->model.layers / r->S) + 1, cap = r->V * per_chunk;
	qe_arena_param *aparams = calloc((size_t)cap, sizeof(*aparams));
	char (*anames)[40] = calloc((size_t)cap, sizeof(*anames));
	r->commit_views = calloc((size_t)per_chunk * r->M, sizeof(*r->commit_views));
	int np = 0;
	if (!aparams || !anames || !r->commit_views) {
		rc = qe_fail(QE_ENOMEM, "rank: out of host memory for %d matrix parameters", cap);
		goto free_rank;
	}
	r->commit_cap = per_chunk;
	if ((rc = qe_sched_build(&sc, &r->sched)) || (rc = qe_sched_validate(r->sched)) ||
	    (rc = qe__rank_plan_slots(r, &r->nslots)))
		goto free_rank;
	const qe_backend_ops *o = b->ops;
	if ((rc = o->stream_create(b, &r->caller)) || (rc = o->stream_create(b, &r->gstream)) ||
	    (rc = o->event_create(b, &r->ev_in)) || (rc = o->event_create(b, &r->ev_tail)))
		goto free_rank;
	for (int c = 0; c < r->V; c++)
		if ((rc = setup_chunk(r, c, aparams, anames, cap, &np)))
			goto free_rank;
	r->grad_norm = NAN;
	if ((rc = qe__rank_grad_norm_init(r)) || (rc = qe__rank_tie_init(r)))
		goto free_rank;
	size_t abytes = qe_arena_bytes(aparams, np, r->M, cfg->arena);
	if ((rc = o->alloc(b, abytes, &r->arena_mem)) ||
	    (rc = qe_arena_create(aparams, np, r->M, cfg->arena,
				  cfg->grad == QE_GRAD_COPY ? QE_ARENA_COPY : QE_ARENA_DIRECT, r->arena_mem, abytes,
				  o->device, &r->arena)))
		goto free_rank;
	qe_epoch_init(&r->ep, 0);
	size_t max_param = 0, act = 0;
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		if ((rc = qe_stage_contract_init(&ch->sc, ch->stage, r->M, &r->ep, ch->pool, r->arena, ch->p_begin,
						 ch->p_begin + ch->nmat)) ||
		    (rc = qe_stage_contract_set_slots(&ch->sc, 0, ch->nslots)))
			goto free_rank;
		if (qe_stage_nonmatrix_views(ch->st) == 1 && r->M > 1)
			qe_stage_contract_accumulate_nonmatrix(&ch->sc);
		ch->views = calloc((size_t)r->M * ch->nmat, sizeof(qe_tensor));
		ch->scratch = calloc((size_t)ch->nmat, sizeof(qe_tensor));
		if (!ch->views || !ch->scratch) {
			rc = qe_fail(QE_ENOMEM, "rank: out of host memory");
			goto free_rank;
		}
		size_t sbytes = 0;
		for (int j = 0; j < ch->nmat; j++) {
			for (int m = 0; m < r->M; m++)
				if ((rc = qe_arena_view(r->arena, ch->p_begin + j, m, &ch->views[m * ch->nmat + j])))
					goto free_rank;
			qe_tensor sh = qe_stage_matrix_grad_shape(ch->st, j);
			sbytes += (qe_tensor_nbytes(&sh) + 255) / 256 * 256;
		}
		for (int i = 0; i < qe_stage_nparams(ch->st); i++) {
			const qe_param_info *pi = qe_stage_param(ch->st, i);
			if ((size_t)(pi->rows * pi->cols) > max_param)
				max_param = (size_t)(pi->rows * pi->cols);
		}
		if (cfg->grad == QE_GRAD_COPY) {
			if ((rc = o->alloc(b, sbytes, &ch->scratch_mem)))
				goto free_rank;
			char *p = ch->scratch_mem;
			for (int j = 0; j < ch->nmat; j++) {
				ch->scratch[j] = qe_stage_matrix_grad_shape(ch->st, j);
				ch->scratch[j].data = p;
				p += (qe_tensor_nbytes(&ch->scratch[j]) + 255) / 256 * 256;
			}
		}
		if (qe_stage_act_bytes(ch->st) > act)
			act = qe_stage_act_bytes(ch->st);
	}
	for (int c = 0; r->D > 1 && c < r->V; c++)
		if ((rc = o->alloc(b, (size_t)qe_stage_param_floats(r->chunks[c].st) * 4,
				   (void **)&r->chunks[c].replica_grads)))
			goto free_rank;
	if ((rc = o->alloc(b, (size_t)r->M * sizeof(float), (void **)&r->loss_mb)))
		goto free_rank;
	r->host_bytes = act > max_param * 4 ? act : max_param * 4;
	if (!qe__rank_host_mem(r)) {
		r->host_buf = malloc(r->host_bytes);
		if (!r->host_buf) {
			rc = qe_fail(QE_ENOMEM, "rank: out of host memory for staging");
			goto free_rank;
		}
	}
	if ((rc = qe__rank_links_open(r, act, r->D > 1 ? max_param : 0)))
		goto free_rank;
	qe_arena_stats as;
	qe_arena_get_stats(r->arena, &as);
	r->ctr.arena_bytes = as.capacity_bytes;
	free(aparams);
	free(anames);
	*out = r;
	return QE_OK;
free_rank:
	free(aparams);
	free(anames);
	qe_rank_free(r);
	return rc;
}

void qe__rank_drop_graphs(qe_rank *r)
{
	for (int c = 0; c < r->V; c++)
		for (int k = 0; k < RANK_GRAPH_KINDS; k++)
			for (int m = 0; m < QE_RANK_MAX_MICRO; m++)
				if (r->chunks[c].graphs[k][m]) {
					r->b->ops->graph_destroy(r->chunks[c].graphs[k][m]);
					r->chunks[c].graphs[k][m] = NULL;
				}
	r->graphs_ready = 0;
	r->ctr.graphs = 0;
}

void qe_rank_free(qe_rank *r)
{
	if (!r)
		return;
	const qe_backend_ops *o = r->b->ops;
	qe__rank_profile_report(r);
	qe__rank_links_close(r);
	qe__rank_drop_graphs(r);
	qe__rank_tie_free(r);
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		qe_tape_pool_free(ch->pool);
		qe_adamw_free(ch->opt);
		qe_stage_free(ch->st);
		if (ch->scratch_mem)
			o->free(r->b, ch->scratch_mem);
		if (ch->replica_grads)
			o->free(r->b, ch->replica_grads);
		free(ch->views);
		free(ch->scratch);
	}
	qe_arena_free(r->arena);
	if (r->arena_mem)
		o->free(r->b, r->arena_mem);
	if (r->loss_mb)
		o->free(r->b, r->loss_mb);
	free(r->host_buf);
	free(r->commit_views);
	free(r->norm_sq);
	if (r->ev_in)
		o->event_destroy(r->ev_in);
	if (r->ev_tail)
		o->event_destroy(r->ev_tail);
	if (r->caller)
		o->stream_destroy(r->caller);
	if (r->gstream)
		o->stream_destroy(r->gstream);
	qe_sched_free(r->sched);
	free(r);
}

int qe_rank_quiescent(qe_rank *r)
{
	int rc = qe__rank_sync(r, r->caller);
	if (rc)
		return qe_fail_ctx(rc, "checkpoint gate: device work did not complete");
	if ((rc = qe__rank_links_quiesce(r)))
		return qe_fail_ctx(rc, "checkpoint gate: messages still in flight");
	if ((rc = qe__rank_sync(r, r->gstream)))
		return qe_fail_ctx(rc, "checkpoint gate: graph stream work did not complete");
	for (int c = 0; c < r->V; c++) {
		rc = qe_quiescence_check(&r->ep, r->chunks[c].pool, r->arena, 0, 0);
		if (rc)
			return qe_fail_ctx(rc, "rank %d stage %d", r->rank, r->chunks[c].stage);
	}
	return QE_OK;
}

int qe_rank_restart(qe_rank *r, int64_t step, int64_t e_W)
{
	qe__rank_drop_graphs(r);
	r->steps = step;
	r->steps_here = 0;
	qe_epoch_restart(&r->ep, e_W);
	for (int c = 0; c < r->V; c++) {
		qe_stage_contract_restart(&r->chunks[c].sc);
		r->chunks[c].token = 0;
	}
	return QE_OK;
}

const qe_train_config *qe_rank_config(const qe_rank *r) { return &r->cfg; }
const qe_sched *qe_rank_sched(const qe_rank *r) { return r->sched; }
int qe_rank_index(const qe_rank *r) { return r->rank; }
int qe_rank_pipeline_rank(const qe_rank *r) { return r->pr; }
int qe_rank_replica(const qe_rank *r) { return r->dr; }
int qe_rank_nchunks(const qe_rank *r) { return r->V; }
qe_stage *qe_rank_stage(qe_rank *r, int chunk) { return r->chunks[chunk].st; }
qe_adamw *qe_rank_optimizer(qe_rank *r, int chunk) { return r->chunks[chunk].opt; }
qe_backend *qe_rank_backend(qe_rank *r) { return r->b; }
qe_comm *qe_rank_comm(qe_rank *r) { return r->comm; }
int64_t qe_rank_steps_done(const qe_rank *r) { return r->steps; }
double qe_rank_grad_norm(const qe_rank *r) { return r->grad_norm; }
void qe_rank_set_stop_source(qe_rank *r, const volatile sig_atomic_t *flag) { r->stop_source = flag; }
int qe_rank_stop_agreed(const qe_rank *r) { return r->stop_agreed; }
const qe_epoch_state *qe_rank_epochs(const qe_rank *r) { return &r->ep; }

void qe_rank_get_counters(const qe_rank *r, qe_rank_counters *out)
{
	*out = r->ctr;
	out->steps = r->steps;
	qe__rank_links_counters(r, &out->device_links, &out->link_sends, &out->link_bytes);
	out->live_tapes = 0;
	out->tape_slots = r->nslots;
	for (int c = 0; c < r->V; c++)
		out->live_tapes += qe_tape_pool_live_refs(r->chunks[c].pool, QE_EPOCH_ANY, NULL, 0);
}

qe_tensor qe_rank_arena_view(const qe_rank *r, int chunk, int j, int m)
{
	const rank_chunk *ch = &r->chunks[chunk];
	return ch->views[m * ch->nmat + j];
}

int qe_rank_arena_nviews(const qe_rank *r)
{
	return qe_arena_nviews(r->arena);
}

void qe_rank_chunk_get_stats(const qe_rank *r, int chunk, qe_rank_chunk_stats *out)
{
	*out = r->chunks[chunk].last;
}

int64_t qe_rank_chunk_cache_epoch(const qe_rank *r, int chunk)
{
	return qe_weight_cache_epoch(&r->chunks[chunk].sc.cache);
}
