/*
 * infer.c - one token at a time through the model, keys and values cached
 * (what and why: infer.h): the host forward, and the public calls, which
 * hand a step to infer_dev.c when the forward runs on a backend.
 *
 * Every tensor is found by its GPT-2 name in the one-stage naming table, so
 * the layout is the training layout and nothing here restates it.  Linear
 * weights are [out, in] (Y = X W^T), so each output is a dot product of one
 * contiguous weight row.  Sums run in float in index order, as the cpu
 * backend's kernels do.
 */
#include "runtime/model/infer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/model/infer_int.h"

struct qe_infer {
	qe_model_config cfg;
	qe_names names;
	float *params;        /* the host forward's weights; on a backend, what qe_infer_load copies */
	qe__infer_dev *dev;   /* the op-table forward, or NULL: the host loops below */
	qe__infer_weights w;  /* host forward: into params */
	float *kcache, *vcache; /* host forward: [layer][pos][C] each */
	float *x, *a, *qkv, *att, *tmp, *ffn, *scores;
	int pos;
};

static const float *tensor(const qe_names *names, const float *base, const char *name, int64_t floats, int *rc)
{
	const qe_named *e = qe_names_find(names, name);
	if (*rc)
		return NULL;
	if (!e || e->source != QE_NAME_PARAMS || qe_named_floats(e) != floats) {
		*rc = qe_fail(QE_EINVAL, "sampling forward: the naming table has no parameter '%s' of %lld floats", name,
			      (long long)floats);
		return NULL;
	}
	return base + e->offset;
}

int qe__infer_bind(const qe_model_config *c, const qe_names *names, const float *base, qe__infer_weights *w)
{
	int64_t C = c->hidden, F = c->ffn, V = c->vocab;
	int rc = QE_OK;
	char n[96];
	w->wte = tensor(names, base, "wte.weight", V * C, &rc);
	w->wpe = tensor(names, base, "wpe.weight", (int64_t)c->seq * C, &rc);
	for (int l = 0; l < c->layers; l++) {
		qe__infer_block *b = &w->blocks[l];
#define T(field, suffix, floats)                                        \
	snprintf(n, sizeof(n), "h.%d.%s", l, suffix);                   \
	b->field = tensor(names, base, n, floats, &rc);
		T(ln1w, "ln_1.weight", C)
		T(ln1b, "ln_1.bias", C)
		T(qkvw, "attn.c_attn.weight", 3 * C * C)
		T(qkvb, "attn.c_attn.bias", 3 * C)
		T(projw, "attn.c_proj.weight", C * C)
		T(projb, "attn.c_proj.bias", C)
		T(ln2w, "ln_2.weight", C)
		T(ln2b, "ln_2.bias", C)
		T(fc1w, "mlp.c_fc.weight", F * C)
		T(fc1b, "mlp.c_fc.bias", F)
		T(fc2w, "mlp.c_proj.weight", C * F)
		T(fc2b, "mlp.c_proj.bias", C)
#undef T
	}
	w->lnfw = tensor(names, base, "ln_f.weight", C, &rc);
	w->lnfb = tensor(names, base, "ln_f.bias", C, &rc);
	/* Every table names lm_head.weight; a tied model's is wte's copy, the same bytes (names.h).  wte serves
	 * only a table without a head. */
	w->head = qe_names_find(names, "lm_head.weight") ? tensor(names, base, "lm_head.weight", V * C, &rc) : w->wte;
	return rc;
}

void qe_infer_free(qe_infer *m)
{
	if (!m)
		return;
	qe__infer_dev_free(m->dev);
	qe_names_release(&m->names);
	free(m->params);
	free(m->w.blocks);
	free(m->kcache);
	free(m->vcache);
	free(m->x);
	free(m->a);
	free(m->qkv);
	free(m->att);
	free(m->tmp);
	free(m->ffn);
	free(m->scores);
	free(m);
}

/* The host forward's cache and activations, and its weights bound into m->params. */
static int host_create(qe_infer *m)
{
	const qe_model_config *cfg = &m->cfg;
	size_t C = (size_t)cfg->hidden, cache = (size_t)cfg->layers * (size_t)cfg->seq * C;
	m->w.blocks = calloc((size_t)cfg->layers, sizeof(qe__infer_block));
	m->kcache = malloc(cache * sizeof(float));
	m->vcache = malloc(cache * sizeof(float));
	m->x = malloc(C * sizeof(float));
	m->a = malloc(C * sizeof(float));
	m->qkv = malloc(3 * C * sizeof(float));
	m->att = malloc(C * sizeof(float));
	m->tmp = malloc(C * sizeof(float));
	m->ffn = malloc((size_t)cfg->ffn * sizeof(float));
	m->scores = malloc((size_t)cfg->seq * sizeof(float));
	if (!m->w.blocks || !m->kcache || !m->vcache || !m->x || !m->a || !m->qkv || !m->att || !m->tmp || !m->ffn ||
	    !m->scores)
		return qe_fail(QE_ENOMEM, "sampling forward: out of memory for a cache of %zu floats", 2 * cache);
	return qe__infer_bind(cfg, &m->names, m->params, &m->w);
}

int qe_infer_create(const qe_model_config *cfg, qe_backend *b, qe_infer **out)
{
	int rc;
	*out = NULL;
	if ((rc = qe_model_config_check(cfg)))
		return rc;
	qe_infer *m = calloc(1, sizeof(*m));
	if (!m)
		return qe_fail(QE_ENOMEM, "sampling forward: out of memory");
	m->cfg = *cfg;
	if ((rc = qe_model_names(cfg, 1, 1, &m->names)))
		goto free_infer;
	m->params = calloc((size_t)m->names.param_floats[0], sizeof(float));
	if (!m->params) {
		rc = qe_fail(QE_ENOMEM, "sampling forward: out of memory for %lld parameters",
			     (long long)m->names.param_floats[0]);
		goto free_infer;
	}
	if ((rc = b ? qe__infer_dev_create(cfg, &m->names, b, &m->dev) : host_create(m)))
		goto free_infer;
	*out = m;
	return QE_OK;
free_infer:
	qe_infer_free(m);
	return rc;
}

int qe_infer_load(qe_infer *m)
{
	return m->dev ? qe__infer_dev_load(m->dev, m->params) : QE_OK;
}

const qe_names *qe_infer_names(const qe_infer *m)
{
	return &m->names;
}

float *qe_infer_params(qe_infer *m)
{
	return m->params;
}

const qe_model_config *qe_infer_config(const qe_infer *m)
{
	return &m->cfg;
}

int qe_infer_pos(const qe_infer *m)
{
	return m->pos;
}

void qe_infer_reset(qe_infer *m)
{
	m->pos = 0;
}

/* y = layernorm(x) w + b over n values: eps 1e-5, biased variance (the cpu kernel's order). */
static void layernorm(float *y, const float *x, const float *w, const float *b, int n)
{
	float mean = 0.0f, var = 0.0f;
	for (int i = 0; i < n; i++)
		mean += x[i];
	mean = mean / (float)n;
	for (int i = 0; i < n; i++) {
		float d = x[i] - mean;
		var += d * d;
	}
	var = var / (float)n;
	float s = 1.0f / sqrtf(var + 1e-5f);
	for (int i = 0; i < n; i++)
		y[i] = s * (x[i] - mean) * w[i] + b[i];
}

/* y[o] = W[o, :] . x + b[o] for o < rows; W is [rows, cols], b may be NULL. */
static void matvec(float *y, const float *w, const float *b, const float *x, int64_t rows, int64_t cols)
{
	for (int64_t o = 0; o < rows; o++) {
		const float *wr = w + o * cols;
		float s = 0.0f;
		for (int64_t i = 0; i < cols; i++)
			s += wr[i] * x[i];
		y[o] = b ? s + b[o] : s;
	}
}

static float gelu(float v)
{
	float a = 0.7978845608028654f * (v + 0.044715f * v * v * v); /* sqrt(2/pi) (v + 0.044715 v^3) */
	return 0.5f * v * (1.0f + tanhf(a));
}

/* Causal attention of the newest position over the cached keys and values of layer l. */
static void attend(qe_infer *m, int l)
{
	int C = m->cfg.hidden, nh = m->cfg.heads, hs = C / nh, T = m->pos + 1;
	const float *K = m->kcache + (size_t)l * m->cfg.seq * C, *V = m->vcache + (size_t)l * m->cfg.seq * C;
	float scale = 1.0f / sqrtf((float)hs);
	for (int h = 0; h < nh; h++) {
		const float *q = m->qkv + h * hs;
		float maxval = -INFINITY, sum = 0.0f;
		for (int t = 0; t < T; t++) {
			const float *k = K + (size_t)t * C + h * hs;
			float s = 0.0f;
			for (int i = 0; i < hs; i++)
				s += q[i] * k[i];
			s *= scale;
			m->scores[t] = s;
			if (s > maxval)
				maxval = s;
		}
		for (int t = 0; t < T; t++) {
			m->scores[t] = expf(m->scores[t] - maxval);
			sum += m->scores[t];
		}
		float inv = 1.0f / sum, *o = m->att + h * hs;
		for (int i = 0; i < hs; i++)
			o[i] = 0.0f;
		for (int t = 0; t < T; t++) {
			const float *v = V + (size_t)t * C + h * hs;
			float p = m->scores[t] * inv;
			for (int i = 0; i < hs; i++)
				o[i] += p * v[i];
		}
	}
}

/* QE_ENUMERIC naming the first logit that is not finite. */
static int check_logits(const float *logits, int V, int pos)
{
	for (int v = 0; v < V; v++)
		if (!isfinite(logits[v]))
			return qe_fail(QE_ENUMERIC, "sampling forward: logit %d at position %d is %g", v, pos,
				       (double)logits[v]);
	return QE_OK;
}

int qe_infer_step(qe_infer *m, int32_t token, float *logits)
{
	const qe_model_config *c = &m->cfg;
	int C = c->hidden, F = c->ffn;
	if (token < 0 || token >= c->vocab)
		return qe_fail(QE_EINVAL, "sampling forward: token %d is outside the vocabulary [0, %d)", (int)token,
			       c->vocab);
	if (m->pos >= c->seq)
		return qe_fail(QE_EINVAL, "sampling forward: the cache is full (%d positions, the model's seq)", c->seq);
	if (m->dev) {
		int rc = qe__infer_dev_step(m->dev, m->pos, token, logits);
		if (rc)
			return rc;
		m->pos++;
		return logits ? check_logits(logits, c->vocab, m->pos - 1) : QE_OK;
	}
	for (int i = 0; i < C; i++)
		m->x[i] = m->w.wte[(int64_t)token * C + i] + m->w.wpe[(int64_t)m->pos * C + i];
	for (int l = 0; l < c->layers; l++) {
		const qe__infer_block *b = &m->w.blocks[l];
		size_t at = ((size_t)l * c->seq + (size_t)m->pos) * C;
		layernorm(m->a, m->x, b->ln1w, b->ln1b, C);
		matvec(m->qkv, b->qkvw, b->qkvb, m->a, 3 * C, C);
		memcpy(m->kcache + at, m->qkv + C, (size_t)C * sizeof(float));
		memcpy(m->vcache + at, m->qkv + 2 * C, (size_t)C * sizeof(float));
		attend(m, l);
		matvec(m->tmp, b->projw, b->projb, m->att, C, C);
		for (int i = 0; i < C; i++)
			m->x[i] += m->tmp[i];
		layernorm(m->a, m->x, b->ln2w, b->ln2b, C);
		matvec(m->ffn, b->fc1w, b->fc1b, m->a, F, C);
		for (int i = 0; i < F; i++)
			m->ffn[i] = gelu(m->ffn[i]);
		matvec(m->tmp, b->fc2w, b->fc2b, m->ffn, C, F);
		for (int i = 0; i < C; i++)
			m->x[i] += m->tmp[i];
	}
	m->pos++;
	if (!logits)
		return QE_OK;
	layernorm(m->a, m->x, m->w.lnfw, m->w.lnfb, C);
	matvec(logits, m->w.head, NULL, m->a, c->vocab, C);
	return check_logits(logits, c->vocab, m->pos - 1);
}
