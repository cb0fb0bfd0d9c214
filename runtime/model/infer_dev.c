/*
 * infer_dev.c - the forward of infer.h through a backend's op table: the
 * parameters (uploaded once per qe_infer_load), the key/value cache and one
 * row of activations live in the backend's memory, and each step enqueues
 * the host forward's operations in the host forward's order on a stream of
 * its own, then copies the logits back and waits.
 *
 * A linear layer is the op table's one GEMM with m = 1 (C[1, out] = x[1, in]
 * W[out, in]^T, f32 x f32, fp32 accumulation; on cuda CUBLAS_COMPUTE_32F,
 * no TF32), its bias added by the GEMM as the host adds it (sum + b).  The
 * token's embedding is add(wte[token], wpe[pos]) on rows picked on the host
 * (the token is known there), so nothing but the logits crosses to the
 * host per step.  New keys and values are copied from the QKV row into the
 * cache, and attn_decode attends the new query over positions 0..pos.
 *
 * No graph capture: one token is some 10 ops a layer, and the row's
 * pointers into wte, wpe and the cache change with every step.
 */
#include <stdlib.h>

#include "runtime/core/status.h"
#include "runtime/model/infer_int.h"

struct qe__infer_dev {
	qe_backend *b;
	const qe_backend_ops *o;
	qe_stream *s;
	qe_model_config cfg;
	int64_t param_floats;
	float *params;          /* backend memory in the one-stage layout */
	qe__infer_weights w;    /* into params */
	float *kcache, *vcache; /* backend [layer][pos][C] each */
	/* one row: x [C] the residual stream, a [C] a layernorm's output, qkv [3C], att [C], tmp [C], ffn [F],
	 * probs [heads, seq] attention's probabilities, stats [2] a layernorm's mean and rstd, logits [V] */
	float *x, *a, *qkv, *att, *tmp, *ffn, *probs, *stats, *logits;
};

static int dev_alloc(qe__infer_dev *d, int64_t floats, float **out)
{
	void *p = NULL;
	int rc = d->o->alloc(d->b, (size_t)floats * sizeof(float), &p);
	*out = p;
	return rc ? qe_fail_ctx(rc, "sampling forward on %s: %lld floats of backend memory", d->o->name,
				(long long)floats)
		  : QE_OK;
}

void qe__infer_dev_free(qe__infer_dev *d)
{
	if (!d)
		return;
	if (d->s)
		d->o->stream_destroy(d->s);
	float *bufs[] = { d->params, d->kcache, d->vcache, d->x,     d->a,     d->qkv,
			  d->att,    d->tmp,    d->ffn,    d->probs, d->stats, d->logits };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			d->o->free(d->b, bufs[i]);
	free(d->w.blocks);
	free(d);
}

int qe__infer_dev_create(const qe_model_config *cfg, const qe_names *names, qe_backend *b, qe__infer_dev **out)
{
	*out = NULL;
	qe__infer_dev *d = calloc(1, sizeof(*d));
	if (!d)
		return qe_fail(QE_ENOMEM, "sampling forward: out of memory");
	d->b = b;
	d->o = b->ops;
	d->cfg = *cfg;
	d->param_floats = names->param_floats[0];
	int64_t C = cfg->hidden, cache = (int64_t)cfg->layers * cfg->seq * C;
	int rc;
	d->w.blocks = calloc((size_t)cfg->layers, sizeof(qe__infer_block));
	if (!d->w.blocks) {
		rc = qe_fail(QE_ENOMEM, "sampling forward: out of memory");
		goto free_dev;
	}
	if ((rc = dev_alloc(d, d->param_floats, &d->params)) || (rc = dev_alloc(d, cache, &d->kcache)) ||
	    (rc = dev_alloc(d, cache, &d->vcache)) || (rc = dev_alloc(d, C, &d->x)) || (rc = dev_alloc(d, C, &d->a)) ||
	    (rc = dev_alloc(d, 3 * C, &d->qkv)) || (rc = dev_alloc(d, C, &d->att)) || (rc = dev_alloc(d, C, &d->tmp)) ||
	    (rc = dev_alloc(d, cfg->ffn, &d->ffn)) || (rc = dev_alloc(d, (int64_t)cfg->heads * cfg->seq, &d->probs)) ||
	    (rc = dev_alloc(d, 2, &d->stats)) || (rc = dev_alloc(d, cfg->vocab, &d->logits)))
		goto free_dev;
	if ((rc = d->o->stream_create(b, &d->s))) {
		qe_fail_ctx(rc, "sampling forward on %s: a stream", d->o->name);
		goto free_dev;
	}
	if ((rc = qe__infer_bind(cfg, names, d->params, &d->w)))
		goto free_dev;
	*out = d;
	return QE_OK;
free_dev:
	qe__infer_dev_free(d);
	return rc;
}

int qe__infer_dev_load(qe__infer_dev *d, const float *params)
{
	int rc = d->o->copy(d->s, d->params, params, (size_t)d->param_floats * sizeof(float), QE_COPY_H2D);
	if (!rc)
		rc = d->o->stream_sync(d->s);
	return rc ? qe_fail_ctx(rc, "sampling forward on %s: copying %lld parameters", d->o->name,
				(long long)d->param_floats)
		  : QE_OK;
}

/* y[1, out] = x[1, in] W[out, in]^T (+ bias): the host forward's matvec. */
static int linear(qe__infer_dev *d, float *y, const float *x, const float *w, const float *bias, int64_t out,
		  int64_t in)
{
	qe_device dev = d->o->device;
	qe_tensor A = qe_tensor_2d((void *)x, QE_F32, dev, 1, in);
	qe_tensor B = qe_tensor_2d((void *)w, QE_F32, dev, out, in);
	qe_tensor Y = qe_tensor_2d(y, QE_F32, dev, 1, out);
	return d->o->gemm(d->s, &A, &B, &Y, bias, 0);
}

static int layernorm(qe__infer_dev *d, float *y, const float *x, const float *w, const float *b)
{
	return d->o->layernorm_fwd(d->s, y, d->stats, d->stats + 1, x, QE_F32, w, b, 1, d->cfg.hidden);
}

/* Block l at position pos: the host forward's loop body, op by op. */
static int block(qe__infer_dev *d, int l, int pos)
{
	const qe_backend_ops *o = d->o;
	const qe__infer_block *b = &d->w.blocks[l];
	int64_t C = d->cfg.hidden, F = d->cfg.ffn, layer = (int64_t)l * d->cfg.seq * C;
	float *kl = d->kcache + layer, *vl = d->vcache + layer;
	size_t row = (size_t)C * sizeof(float);
	QE_TRY(layernorm(d, d->a, d->x, b->ln1w, b->ln1b));
	QE_TRY(linear(d, d->qkv, d->a, b->qkvw, b->qkvb, 3 * C, C));
	QE_TRY(o->copy(d->s, kl + (int64_t)pos * C, d->qkv + C, row, QE_COPY_D2D));
	QE_TRY(o->copy(d->s, vl + (int64_t)pos * C, d->qkv + 2 * C, row, QE_COPY_D2D));
	QE_TRY(o->attn_decode(d->s, d->att, d->probs, d->qkv, kl, vl, pos + 1, C, d->cfg.heads));
	QE_TRY(linear(d, d->tmp, d->att, b->projw, b->projb, C, C));
	QE_TRY(o->add_inplace(d->s, d->x, d->tmp, C));
	QE_TRY(layernorm(d, d->a, d->x, b->ln2w, b->ln2b));
	QE_TRY(linear(d, d->ffn, d->a, b->fc1w, b->fc1b, F, C));
	QE_TRY(o->gelu_fwd(d->s, d->ffn, d->ffn, F));
	QE_TRY(linear(d, d->tmp, d->ffn, b->fc2w, b->fc2b, C, F));
	return o->add_inplace(d->s, d->x, d->tmp, C);
}

/* The ops of one step; the caller names the failure. */
static int enqueue_step(qe__infer_dev *d, int pos, int32_t token, float *logits)
{
	const qe_backend_ops *o = d->o;
	int64_t C = d->cfg.hidden, V = d->cfg.vocab;
	QE_TRY(o->add(d->s, d->x, d->w.wte + (int64_t)token * C, d->w.wpe + (int64_t)pos * C, C));
	for (int l = 0; l < d->cfg.layers; l++)
		QE_TRY(block(d, l, pos));
	if (!logits)
		return QE_OK;
	QE_TRY(layernorm(d, d->a, d->x, d->w.lnfw, d->w.lnfb));
	QE_TRY(linear(d, d->logits, d->a, d->w.head, NULL, V, C));
	QE_TRY(o->copy(d->s, logits, d->logits, (size_t)V * sizeof(float), QE_COPY_D2H));
	return o->stream_sync(d->s);
}

int qe__infer_dev_step(qe__infer_dev *d, int pos, int32_t token, float *logits)
{
	int rc = enqueue_step(d, pos, token, logits);
	return rc ? qe_fail_ctx(rc, "sampling forward on %s: token %d at position %d", d->o->name, (int)token, pos)
		  : QE_OK;
}
