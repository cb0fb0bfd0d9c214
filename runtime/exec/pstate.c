/*
 * pstate.c - the rank's persistent items.  Run-wide records live in a small
 * host struct of the rank that the checkpoint fills on restore; they are
 * applied by qe_rank_pstate_loaded.  The copies of an item's bytes and the
 * host staging the checkpoint uses go through the backend here, so ckpt calls
 * no backend op.
 */
#include "runtime/exec/pstate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/rank_int.h"
#include "runtime/core/fault.h"
#include "runtime/core/status.h"

const char *qe_pstate_kind_name(qe_pstate_kind k)
{
	static const char *n[] = { "param", "adam_m", "adam_v", "fp8_meta", "runtime" };
	return (unsigned)k < 5 ? n[k] : "?";
}

static qe_pstate_item *add(qe_pstate_item *items, int *n, const char *name, int stage, qe_pstate_kind kind,
			   qe_dtype dt, void *data, size_t bytes, int on_device)
{
	qe_pstate_item *it = &items[(*n)++];
	memset(it, 0, sizeof(*it));
	snprintf(it->name, sizeof(it->name), "%s", name);
	it->stage = stage;
	it->kind = kind;
	it->dtype = dt;
	it->ndim = 1;
	it->shape[0] = (int64_t)(bytes / qe_dtype_size(dt));
	it->bytes = bytes;
	it->data = data;
	it->on_device = on_device;
	return it;
}

int qe_rank_pstate(qe_rank *r, qe_pstate_item **out, int *nout)
{
	qe_pstate_item *items = calloc((size_t)r->V * 5 + 8, sizeof(qe_pstate_item));
	int n = 0, dev = r->b->ops->device != QE_DEV_CPU;
	if (!items)
		return qe_fail(QE_ENOMEM, "pstate: out of memory");
	for (int c = 0; c < r->V; c++) {
		rank_chunk *ch = &r->chunks[c];
		size_t pbytes = qe_stage_param_floats(ch->st) * 4;
		add(items, &n, "params", ch->stage, QE_PSTATE_PARAM, QE_F32, qe_stage_params(ch->st), pbytes, dev);
		add(items, &n, "adam_m", ch->stage, QE_PSTATE_ADAM_M, QE_F32, ch->opt->m, pbytes, dev);
		add(items, &n, "adam_v", ch->stage, QE_PSTATE_ADAM_V, QE_F32, ch->opt->v, pbytes, dev);
		qe_pstate_item *meta = add(items, &n, "fp8_meta", ch->stage, QE_PSTATE_FP8_META, QE_F32,
					   qe_stage_fp8_meta(ch->st), qe_stage_fp8_meta_floats(ch->st) * 4, dev);
		/* [linear, role, history + scale + scale_inv] */
		meta->ndim = 3;
		meta->shape[0] = qe_stage_nlinear(ch->st);
		meta->shape[1] = QE_ROLE_COUNT;
		meta->shape[2] = qe_fp8_role_floats(r->cfg.prec.recipe.history_len);
		add(items, &n, "adam_step", ch->stage, QE_PSTATE_RUNTIME, QE_U8, &ch->opt->step, sizeof(ch->opt->step), 0);
	}
	if (r->rank == 0) {
		/* Run-wide records: the rank's live values are saved; a restore writes into the same fields. */
		add(items, &n, "steps_done", -1, QE_PSTATE_RUNTIME, QE_U8, &r->steps, sizeof(r->steps), 0);
		add(items, &n, "e_W", -1, QE_PSTATE_RUNTIME, QE_U8, &r->ep.e_W, sizeof(r->ep.e_W), 0);
		/* The sampler is counter-based: its whole state is (seed, data position). */
		r->rng_record[0] = r->cfg.seed;
		r->rng_record[1] = (uint64_t)r->steps;
		add(items, &n, "rng", -1, QE_PSTATE_RUNTIME, QE_U8, r->rng_record, sizeof(r->rng_record), 0);
		/* Cache semantics: the FP8 weight cache is never persisted; restore invalidates it. */
		r->cache_record = 0;
		add(items, &n, "cache_valid_on_restore", -1, QE_PSTATE_RUNTIME, QE_U8, &r->cache_record,
		    sizeof(r->cache_record), 0);
	}
	*out = items;
	*nout = n;
	return QE_OK;
}

int qe_rank_pstate_loaded(qe_rank *r)
{
	/* Non-zero ranks did not load the run-wide records: take them from rank 0. */
	int64_t rec[2] = { r->steps, r->ep.e_W };
	if (r->comm && r->world > 1) {
		int rc = qe_comm_bcast(r->comm, 0, rec, sizeof(rec));
		if (rc)
			return qe_fail_ctx(rc, "restore: sharing the step and epoch of rank 0");
	}
	return qe_rank_restart(r, rec[0], rec[1]);
}

/* The backend's copy of checkpoint data, where QE_FAULT=copy:N strikes. */
static int item_copy(qe_rank *r, void *dst, const void *src, size_t bytes, qe_copy_kind kind)
{
	if (qe_fault_hit(QE_FAULT_COPY))
		return qe_fail(QE_EIO, "backend copy of %zu bytes %s", bytes,
			       kind == QE_COPY_H2D ? "to the device" : kind == QE_COPY_D2H ? "to the host" : "on the device");
	return r->b->ops->copy(NULL, dst, src, bytes, kind);
}

int qe_pstate_read(qe_rank *r, const qe_pstate_item *it, void *dst)
{
	if (it->on_device)
		return item_copy(r, dst, it->data, it->bytes, QE_COPY_D2H);
	if (it->bytes)
		memcpy(dst, it->data, it->bytes);
	return QE_OK;
}

int qe_pstate_write(qe_rank *r, const qe_pstate_item *it, const void *src)
{
	if (it->on_device)
		return item_copy(r, it->data, src, it->bytes, QE_COPY_H2D);
	if (it->bytes)
		memcpy(it->data, src, it->bytes);
	return QE_OK;
}

int qe_pstate_read_at(qe_rank *r, const qe_pstate_item *it, size_t off, size_t len, void *dst)
{
	if (off > it->bytes || len > it->bytes - off)
		return qe_fail(QE_EINVAL, "bytes %zu..%zu of an item of %zu bytes", off, off + len, it->bytes);
	const unsigned char *src = (const unsigned char *)it->data + off;
	if (it->on_device)
		return item_copy(r, dst, src, len, QE_COPY_D2H);
	if (len)
		memcpy(dst, src, len);
	return QE_OK;
}

int qe_pstate_write_at(qe_rank *r, const qe_pstate_item *it, size_t off, size_t len, const void *src)
{
	if (off > it->bytes || len > it->bytes - off)
		return qe_fail(QE_EINVAL, "bytes %zu..%zu of an item of %zu bytes", off, off + len, it->bytes);
	unsigned char *dst = (unsigned char *)it->data + off;
	if (it->on_device)
		return item_copy(r, dst, src, len, QE_COPY_H2D);
	if (len)
		memcpy(dst, src, len);
	return QE_OK;
}

int qe_pstate_has_device(qe_rank *r)
{
	return r->b->ops->device != QE_DEV_CPU;
}

int qe_pstate_stage_alloc(qe_rank *r, size_t bytes, void **out)
{
	return r->b->ops->alloc(r->b, bytes, out);
}

int qe_pstate_stage_put(qe_rank *r, void *stage, size_t off, const void *src, size_t len)
{
	return item_copy(r, (unsigned char *)stage + off, src, len, QE_COPY_H2D);
}

int qe_pstate_stage_load(qe_rank *r, const qe_pstate_item *it, const void *stage)
{
	/* on cpu "device" memory is host memory: a host item takes it too (tests of the device path) */
	if (!it->on_device && r->b->ops->device != QE_DEV_CPU)
		return qe_fail(QE_EINVAL, "device staging loaded into a host item");
	return item_copy(r, it->data, stage, it->bytes, QE_COPY_D2D);
}

void qe_pstate_stage_free(qe_rank *r, void *stage)
{
	if (stage)
		r->b->ops->free(r->b, stage);
}

int qe_pstate_host_alloc(qe_backend *b, size_t bytes, void **out)
{
	return b->ops->host_alloc(b, bytes, out);
}

void qe_pstate_host_free(qe_backend *b, void *p)
{
	b->ops->host_free(b, p);
}

void qe_pstate_describe(const qe_rank *r, char *topo, size_t tl, char *sched, size_t sl, char *recipe, size_t rl)
{
	const qe_train_config *c = &r->cfg;
	snprintf(topo, tl, "pp=%d dp=%d chunks=%d", c->pp, c->dp, c->chunks);
	snprintf(sched, sl, "%s/%s %s %s", qe_sched_kind_name(c->schedule), qe_sched_backward_name(c->backward),
		 qe_exec_name(c->exec), qe_grad_name(c->grad));
	if (qe_prec_is_fp8(&c->prec))
		snprintf(recipe, rl, "model=%s fp8=%s history=%d margin=%d algo=%s head=%s", c->model.preset,
			 qe_fp8_format_name(c->prec.recipe.format), c->prec.recipe.history_len, c->prec.recipe.margin,
			 qe_amax_algo_name(c->prec.recipe.algo), c->prec.head_current ? "current" : "delayed");
	else if (c->prec.mode == QE_PREC_BF16)
		snprintf(recipe, rl, "model=%s precision=bf16", c->model.preset);
	else
		snprintf(recipe, rl, "model=%s fp8=off", c->model.preset);
}

int qe_pstate_fp8_roles(void)
{
	return QE_ROLE_COUNT;
}

const char *qe_pstate_fp8_role_name(int role)
{
	return qe_fp8_role_name((qe_fp8_role)role);
}

void qe_pstate_fp8_linear_label(int lin, int nlinear, char *buf, size_t len)
{
	qe_linear_label(lin, nlinear, buf, len);
}
