/*
 * stage.c - creating a stage: its parameter table, and the carving of its
 * parameters, FP8 meta, weight cache, tape slots, gradient buffers and
 * workspace out of backend memory at fixed addresses.
 */
#include "runtime/model/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"

#define ALIGN 256

/* A bump allocator that only computes offsets when base is NULL. */
typedef struct carver {
	char *base;
	size_t off;
} carver;

static void *carve(carver *c, size_t bytes)
{
	void *p = c->base ? c->base + c->off : NULL;
	c->off += (bytes + ALIGN - 1) / ALIGN * ALIGN;
	return p;
}

static int add_param(qe_stage *st, const char *name, int layer, int64_t rows, int64_t cols, int is_matrix,
		     int decay, int lin)
{
	qe_param_info *p = &st->params[st->nparams];
	memset(p, 0, sizeof(*p));
	/* one block per stage keeps the short names checkpoints and tests have always used */
	if (st->nblk > 1 && strcmp(name, "wte") && strcmp(name, "wpe") && strncmp(name, "lnf", 3) &&
	    strncmp(name, "head", 4))
		snprintf(p->name, sizeof(p->name), "L%d.%s", layer, name);
	else
		snprintf(p->name, sizeof(p->name), "%s", name);
	p->rows = rows;
	p->cols = cols;
	p->offset = st->param_floats;
	p->is_matrix = is_matrix;
	p->decay = decay;
	p->linear = is_matrix ? lin : -1;
	p->layer = layer;
	p->matrix_index = -1;
	p->grad_offset = -1;
	/* keep every parameter 64-float aligned so views stay 256-byte aligned */
	st->param_floats += (rows * cols + 63) / 64 * 64;
	if (is_matrix) {
		p->matrix_index = st->nmatrices;
		st->matrix_param[st->nmatrices++] = st->nparams;
	} else {
		p->grad_offset = st->nonmatrix_floats;
		st->nonmatrix_floats += (rows * cols + 63) / 64 * 64;
	}
	return st->nparams++;
}

static void add_linear(qe_stage *st, int lin, int kind, int layer, int in, int out, int with_bias)
{
	char n[24];
	lin_info *L = &st->lin[lin];
	const char *name = qe_linear_name(kind);
	L->in = in;
	L->out = out;
	L->kind = kind;
	snprintf(n, sizeof(n), "%s.w", name);
	L->param = add_param(st, n, layer, out, in, 1, 1, lin);
	L->bias = -1;
	if (with_bias) {
		snprintf(n, sizeof(n), "%s.b", name);
		L->bias = add_param(st, n, layer, out, 1, 0, 0, -1);
	}
	L->current = kind == QE_LIN_HEAD && st->prec.head_current;
}

static void build_param_table(qe_stage *st)
{
	const qe_model_config *c = &st->cfg;
	int H = c->hidden;
	int layer0 = st->stage * st->nblk;
	st->p_wte = st->p_wpe = st->p_lnfw = st->p_lnfb = -1;
	if (st->first) {
		st->p_wte = add_param(st, "wte", 0, st->vpad, H, 0, 1, -1);
		st->p_wpe = add_param(st, "wpe", 0, c->seq, H, 0, 1, -1);
	}
	for (int k = 0; k < st->nblk; k++) {
		block_info *bk = &st->blocks[k];
		int l = layer0 + k, lin0 = 4 * k;
		bk->layer = l;
		bk->lin0 = lin0;
		bk->ln1w = add_param(st, "ln1.w", l, H, 1, 0, 0, -1);
		bk->ln1b = add_param(st, "ln1.b", l, H, 1, 0, 0, -1);
		add_linear(st, lin0 + QE_LIN_QKV, QE_LIN_QKV, l, H, 3 * H, 1);
		add_linear(st, lin0 + QE_LIN_PROJ, QE_LIN_PROJ, l, H, H, 1);
		bk->ln2w = add_param(st, "ln2.w", l, H, 1, 0, 0, -1);
		bk->ln2b = add_param(st, "ln2.b", l, H, 1, 0, 0, -1);
		add_linear(st, lin0 + QE_LIN_FC1, QE_LIN_FC1, l, H, c->ffn, 1);
		add_linear(st, lin0 + QE_LIN_FC2, QE_LIN_FC2, l, c->ffn, H, 1);
	}
	if (st->last) {
		st->p_lnfw = add_param(st, "lnf.w", c->layers - 1, H, 1, 0, 0, -1);
		st->p_lnfb = add_param(st, "lnf.b", c->layers - 1, H, 1, 0, 0, -1);
		add_linear(st, st->nlin - 1, QE_LIN_HEAD, c->layers - 1, H, st->vpad, 0);
	}
}

static qe_dtype role_dtype(const qe_stage *st, qe_fp8_role role)
{
	switch (st->prec.mode) {
	case QE_PREC_FP8:
		return qe_fp8_role_dtype(&st->prec.recipe, role);
	case QE_PREC_BF16:
		return QE_BF16;
	default:
		return QE_F32;
	}
}

/* Lay out (base NULL: measure) one slot's tape into t (whose blk and lin arrays the caller provides). */
static size_t layout_slot(qe_stage *st, char *base, slot_tape *t)
{
	const qe_model_config *c = &st->cfg;
	int64_t N = st->N, T = c->seq, H = c->hidden;
	qe_device dev = st->b->ops->device;
	carver cv = { base, 0 };
	block_tape *blk = t->blk;
	lin_tape *lins = t->lin;
	memset(t, 0, sizeof(*t));
	t->blk = blk;
	t->lin = lins;
	memset(blk, 0, (size_t)st->nblk * sizeof(*blk));
	memset(lins, 0, (size_t)st->nlin * sizeof(*lins));
	if (st->first)
		t->tokens = carve(&cv, N * 4);
	if (st->last)
		t->targets = carve(&cv, N * 4);
	for (int k = 0; k < st->nblk; k++) {
		block_tape *b = &blk[k];
		int64_t xb = N * H * (int64_t)qe_dtype_size(st->act_dt);
		b->x_in = k ? blk[k - 1].x_out : carve(&cv, xb);
		b->mean1 = carve(&cv, N * 4);
		b->rstd1 = carve(&cv, N * 4);
		b->qkv = carve(&cv, N * 3 * H * (int64_t)qe_dtype_size(qe__stage_attn_dt(st)));
		if (st->flash) {
			b->probs = carve(&cv, (size_t)c->batch * c->heads * T * 4);
			b->att = carve(&cv, N * H * (int64_t)qe_dtype_size(qe__stage_attn_dt(st)));
		} else {
			b->probs = carve(&cv, (size_t)c->batch * c->heads * T * T * 4);
		}
		b->x_mid = carve(&cv, xb);
		b->mean2 = carve(&cv, N * 4);
		b->rstd2 = carve(&cv, N * 4);
		b->fc1_out = carve(&cv, N * c->ffn * (int64_t)qe_dtype_size(st->act_dt));
		b->x_out = carve(&cv, xb);
	}
	if (st->last) {
		t->meanf = carve(&cv, N * 4);
		t->rstdf = carve(&cv, N * 4);
		t->logits = carve(&cv, N * st->vpad * (int64_t)qe_dtype_size(st->act_dt));
		t->xstats = carve(&cv, N * 2 * 4);
		t->loss = carve(&cv, 4);
	} else {
		t->dout = carve(&cv, N * H * (int64_t)qe_dtype_size(st->act_dt));
	}
	if (!st->first)
		t->dx_in = carve(&cv, N * H * (int64_t)qe_dtype_size(st->act_dt));
	qe_dtype in_dt = role_dtype(st, QE_ROLE_INPUT), go_dt = role_dtype(st, QE_ROLE_GRAD_OUTPUT);
	for (int l = 0; l < st->nlin; l++) {
		lin_info *L = &st->lin[l];
		lin_tape *lt = &lins[l];
		lt->x_sinv = carve(&cv, 4);
		lt->dy_sinv = carve(&cv, 4);
		lt->xq_col = qe_tensor_2d(carve(&cv, (size_t)L->in * N * qe_dtype_size(in_dt)), in_dt, dev, L->in, N);
		lt->xq_col.scale_inv = lt->x_sinv;
		lt->dyq_col =
			qe_tensor_2d(carve(&cv, (size_t)L->out * N * qe_dtype_size(go_dt)), go_dt, dev, L->out, N);
		lt->dyq_col.scale_inv = lt->dy_sinv;
	}
	return cv.off;
}

/* Lay out (base NULL: measure) the weight cache. */
static size_t layout_cache(qe_stage *st, char *base)
{
	carver cv = { base, 0 };
	qe_dtype w_dt = role_dtype(st, QE_ROLE_WEIGHT);
	qe_device dev = st->b->ops->device;
	for (int l = 0; l < st->nlin; l++) {
		lin_info *L = &st->lin[l];
		size_t n = (size_t)L->in * L->out * qe_dtype_size(w_dt);
		L->w_sinv = carve(&cv, 4);
		L->wq_row = qe_tensor_2d(carve(&cv, n), w_dt, dev, L->out, L->in);
		L->wq_col = qe_tensor_2d(carve(&cv, n), w_dt, dev, L->in, L->out);
		L->wq_row.scale_inv = L->wq_col.scale_inv = L->w_sinv;
	}
	return cv.off;
}

/*
 * The workspace: activations' scratch, and ws_q, the row-wise copy of the
 * widest GEMM operand (up to the padded vocabulary), in the operands' own
 * element size (1 byte under FP8: the logits' gradient alone would take
 * N x vpad x 4 bytes in f32).  One wide buffer: nothing writes GELU's
 * input gradient (FC1's dY cast computes it as it loads).
 */
static size_t layout_workspace(qe_stage *st, char *base)
{
	const qe_model_config *c = &st->cfg;
	int64_t T = st->N, H = c->hidden;
	int64_t wide = 3 * H > c->ffn ? 3 * H : c->ffn;
	int64_t qwide = wide > st->vpad ? wide : st->vpad;
	size_t in_sz = qe_dtype_size(role_dtype(st, QE_ROLE_INPUT));
	size_t go_sz = qe_dtype_size(role_dtype(st, QE_ROLE_GRAD_OUTPUT));
	carver cv = { base, 0 };
	for (int i = 0; i < 3; i++)
		st->ws_h[i] = carve(&cv, T * H * 4);
	for (int i = 0; i < 2; i++)
		st->ws_g[i] = carve(&cv, T * H * 4);
	st->ws_big = carve(&cv, T * wide * 4);
	st->ws_q = carve(&cv, (size_t)(T * qwide) * (in_sz > go_sz ? in_sz : go_sz));
	return cv.off;
}

static int stage_alloc(qe_stage *st, size_t bytes, void **out, const char *what)
{
	int rc = st->b->ops->alloc(st->b, bytes ? bytes : 1, out);
	if (rc)
		return qe_fail_ctx(rc, "stage %d: allocating %zu bytes for %s", st->stage, bytes, what);
	return QE_OK;
}

int qe_stage_create(qe_backend *b, const qe_model_config *cfg, const qe_precision *prec, int stage, int nstages,
		    int nslots, int nmicro, int accumulate_nonmatrix, qe_stage **out)
{
	int rc, nblk;
	*out = NULL;
	if ((rc = qe_model_config_check(cfg)) || (rc = qe_model_blocks_per_stage(cfg, nstages, &nblk)))
		return rc;
	if (stage < 0 || stage >= nstages || nslots < 1 || nmicro < 1)
		return qe_fail(QE_EINVAL, "stage %d of %d with %d slots and %d microbatches is not a valid stage",
			       stage, nstages, nslots, nmicro);
	if (qe_prec_is_fp8(prec) && (rc = qe_fp8_recipe_check(&prec->recipe)))
		return rc;
	if (qe_model_attn(cfg) == QE_ATTN_FLASH && cfg->hidden / cfg->heads > 64 && prec->mode == QE_PREC_F32)
		return qe_fail(QE_EINVAL, "model '%s': --attention flash at head dimension %d needs --precision bf16 or "
			       "fp8 (the TF32 kernels of f32 models stop at 64)", cfg->preset, cfg->hidden / cfg->heads);
	qe_stage *st = calloc(1, sizeof(*st));
	if (!st)
		return qe_fail(QE_ENOMEM, "stage %d: out of host memory", stage);
	st->b = b;
	st->cfg = *cfg;
	st->prec = *prec;
	if (st->prec.recipe.history_len < 1)
		st->prec.recipe = qe_fp8_recipe_default();
	st->stage = stage;
	st->nstages = nstages;
	st->nslots = nslots;
	st->nmicro = nmicro;
	st->nm_accumulate = accumulate_nonmatrix && nmicro > 1;
	st->nm_bufs = st->nm_accumulate ? 2 : nmicro;
	st->first = stage == 0;
	st->last = stage == nstages - 1;
	st->nblk = nblk;
	st->N = qe_model_tokens(cfg);
	st->vpad = qe_model_vocab_padded(cfg);
	st->flash = qe_model_attn(cfg) == QE_ATTN_FLASH;
	st->act_dt = prec->mode == QE_PREC_F32 ? QE_F32 : QE_BF16;
	st->nlin = 4 * nblk + (st->last ? 1 : 0);
	st->cap_params = 12 * nblk + 5;
	st->params = calloc((size_t)st->cap_params, sizeof(*st->params));
	st->matrix_param = calloc((size_t)st->nlin, sizeof(int));
	st->lin = calloc((size_t)st->nlin, sizeof(*st->lin));
	st->blocks = calloc((size_t)nblk, sizeof(*st->blocks));
	st->upd = calloc((size_t)st->nlin * QE_ROLE_COUNT, sizeof(*st->upd));
	st->slots = calloc((size_t)nslots, sizeof(slot_tape));
	st->slot_blk = calloc((size_t)nslots * nblk, sizeof(block_tape));
	st->slot_lin = calloc((size_t)nslots * st->nlin, sizeof(lin_tape));
	if (!st->params || !st->matrix_param || !st->lin || !st->blocks || !st->upd || !st->slots || !st->slot_blk ||
	    !st->slot_lin) {
		qe_stage_free(st);
		return qe_fail(QE_ENOMEM, "stage %d: out of host memory", stage);
	}
	for (int l = 0; l < st->nlin; l++)
		st->lin[l].param = st->lin[l].bias = -1;
	for (int s = 0; s < nslots; s++) {
		st->slots[s].blk = st->slot_blk + (size_t)s * nblk;
		st->slots[s].lin = st->slot_lin + (size_t)s * st->nlin;
	}
	build_param_table(st);

	int L = st->prec.recipe.history_len;
	st->meta_floats = (int64_t)st->nlin * QE_ROLE_COUNT * qe_fp8_role_floats(L);
	st->slot_bytes = layout_slot(st, NULL, &st->slots[0]);
	size_t cache_bytes = layout_cache(st, NULL);
	size_t ws_bytes = layout_workspace(st, NULL);

	if ((rc = stage_alloc(st, st->param_floats * 4, (void **)&st->param_buf, "parameters")) ||
	    (rc = stage_alloc(st, (size_t)st->nm_bufs * st->nonmatrix_floats * 4, (void **)&st->grad_buf,
			      "non-matrix gradients")) ||
	    (rc = stage_alloc(st, st->meta_floats * 4, (void **)&st->meta, "fp8 meta")) ||
	    (rc = stage_alloc(st, st->slot_bytes * nslots, &st->slot_mem, "tape slots")) ||
	    (rc = stage_alloc(st, cache_bytes, &st->cache_mem, "weight cache")) ||
	    (rc = stage_alloc(st, ws_bytes, &st->ws_mem, "workspace")) ||
	    (st->first && (rc = stage_alloc(st, (size_t)st->nm_bufs * st->N * 4, (void **)&st->tok_written,
					    "embedding-gradient rows")))) {
		qe_stage_free(st);
		return rc;
	}
	/* no wte-gradient row written yet (-1); the buffers start zeroed */
	if (st->tok_written && (rc = b->ops->fill(NULL, st->tok_written, 0xFF, (size_t)st->nm_bufs * st->N * 4))) {
		qe_stage_free(st);
		return rc;
	}
	for (int s = 0; s < nslots; s++)
		layout_slot(st, (char *)st->slot_mem + (size_t)s * st->slot_bytes, &st->slots[s]);
	layout_cache(st, st->cache_mem);
	layout_workspace(st, st->ws_mem);

	/* Initial FP8 meta: history zeros, scale 1 (DESIGN.md 4). */
	float *meta = malloc(st->meta_floats * 4);
	if (!meta) {
		qe_stage_free(st);
		return qe_fail(QE_ENOMEM, "stage %d: out of host memory", stage);
	}
	for (int64_t i = 0; i < st->meta_floats; i += qe_fp8_role_floats(L))
		qe_fp8_role_init(meta + i, L);
	rc = b->ops->copy(NULL, st->meta, meta, st->meta_floats * 4, QE_COPY_H2D);
	free(meta);
	if (rc) {
		qe_stage_free(st);
		return rc;
	}
	*out = st;
	return QE_OK;
}

void qe_stage_free(qe_stage *st)
{
	if (!st)
		return;
	void *bufs[] = { st->param_buf, st->grad_buf, st->meta, st->slot_mem, st->cache_mem, st->ws_mem, st->tok_written };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i])
			st->b->ops->free(st->b, bufs[i]);
	free(st->params);
	free(st->matrix_param);
	free(st->lin);
	free(st->blocks);
	free(st->upd);
	free(st->slots);
	free(st->slot_blk);
	free(st->slot_lin);
	free(st);
}

int qe_stage_init_params(qe_stage *st, uint64_t seed)
{
	float *host = calloc((size_t)st->param_floats, 4);
	if (!host)
		return qe_fail(QE_ENOMEM, "stage %d: out of host memory for initialization", st->stage);
	float resid_scale = 1.0f / sqrtf(2.0f * (float)st->cfg.layers);
	for (int i = 0; i < st->nparams; i++) {
		const qe_param_info *p = &st->params[i];
		float *w = host + p->offset;
		int64_t n = p->rows * p->cols;
		/* The stream depends on the global layer and the parameter's name within
		 * its block only, so any cut of the model into stages initializes the
		 * same model (with one block per stage the layer is the stage). */
		const char *base = p->name[0] == 'L' ? strchr(p->name, '.') + 1 : p->name;
		int layer = p->layer;
		/* a tied head is wte's copy: wte's stream, on whichever stage it sits */
		if (st->cfg.tie_embeddings && strcmp(base, "head.w") == 0) {
			base = "wte";
			layer = 0;
		}
		uint64_t h = 1469598103934665603ULL;
		for (const char *c = base; *c; c++)
			h = (h ^ (uint8_t)*c) * 1099511628211ULL;
		qe_rng r = qe_rng_derive(seed, h ^ ((uint64_t)layer << 56));
		const char *dot = strrchr(base, '.');
		int is_ln_w = dot && strcmp(dot, ".w") == 0 && strncmp(base, "ln", 2) == 0;
		if (is_ln_w) {
			for (int64_t k = 0; k < n; k++)
				w[k] = 1.0f;
		} else if (p->cols == 1) {
			/* biases and layernorm shifts start at zero */
		} else {
			float stdv = strcmp(base, "wpe") == 0 ? 0.01f : 0.02f;
			if (strcmp(base, "proj.w") == 0 || strcmp(base, "fc2.w") == 0)
				stdv *= resid_scale;
			qe_rng_normal_fill(&r, w, n, stdv);
		}
	}
	int rc = st->b->ops->copy(NULL, st->param_buf, host, st->param_floats * 4, QE_COPY_H2D);
	free(host);
	return rc;
}

int qe_stage_index(const qe_stage *st) { return st->stage; }
int qe_stage_is_first(const qe_stage *st) { return st->first; }
int qe_stage_is_last(const qe_stage *st) { return st->last; }
const qe_model_config *qe_stage_config(const qe_stage *st) { return &st->cfg; }
/*
 * The parameter table of a stage without creating it: the same
 * build_param_table on a host-only qe_stage holding just the table's arrays,
 * so readers of a checkpoint (names.c) see the very layout training writes.
 */
int qe_model_param_table(const qe_model_config *cfg, int stage, int nstages, qe_param_info **out, int *nparams,
			 int64_t *param_floats)
{
	int rc, nblk;
	*out = NULL;
	*nparams = 0;
	*param_floats = 0;
	if ((rc = qe_model_config_check(cfg)) || (rc = qe_model_blocks_per_stage(cfg, nstages, &nblk)))
		return rc;
	if (stage < 0 || stage >= nstages)
		return qe_fail(QE_EINVAL, "stage %d of %d is not a stage", stage, nstages);
	qe_stage t;
	memset(&t, 0, sizeof(t));
	t.cfg = *cfg;
	t.stage = stage;
	t.nstages = nstages;
	t.first = stage == 0;
	t.last = stage == nstages - 1;
	t.nblk = nblk;
	t.vpad = qe_model_vocab_padded(cfg);
	t.nlin = 4 * nblk + (t.last ? 1 : 0);
	t.cap_params = 12 * nblk + 5;
	t.params = calloc((size_t)t.cap_params, sizeof(*t.params));
	t.matrix_param = calloc((size_t)t.nlin, sizeof(int));
	t.lin = calloc((size_t)t.nlin, sizeof(*t.lin));
	t.blocks = calloc((size_t)nblk, sizeof(*t.blocks));
	if (!t.params || !t.matrix_param || !t.lin || !t.blocks) {
		free(t.params);
		free(t.matrix_param);
		free(t.lin);
		free(t.blocks);
		return qe_fail(QE_ENOMEM, "stage %d: out of host memory for its parameter table", stage);
	}
	build_param_table(&t);
	free(t.matrix_param);
	free(t.lin);
	free(t.blocks);
	*out = t.params;
	*nparams = t.nparams;
	*param_floats = t.param_floats;
	return QE_OK;
}

int qe_stage_nparams(const qe_stage *st) { return st->nparams; }
const qe_param_info *qe_stage_param(const qe_stage *st, int i) { return &st->params[i]; }
int qe_stage_nmatrices(const qe_stage *st) { return st->nmatrices; }
int qe_stage_matrix_param(const qe_stage *st, int j) { return st->matrix_param[j]; }
float *qe_stage_params(qe_stage *st) { return st->param_buf; }
int64_t qe_stage_param_floats(const qe_stage *st) { return st->param_floats; }
float *qe_stage_fp8_meta(qe_stage *st) { return st->meta; }
int64_t qe_stage_fp8_meta_floats(const qe_stage *st) { return st->meta_floats; }
int qe_stage_nlinear(const qe_stage *st) { return st->nlin; }
int qe_stage_nblocks(const qe_stage *st) { return st->nblk; }
float *qe_stage_nonmatrix_grad(qe_stage *st, int view) { return st->grad_buf + (int64_t)view * st->nonmatrix_floats; }
int qe_stage_nonmatrix_views(const qe_stage *st) { return st->nm_accumulate ? 1 : st->nmicro; }
int64_t qe_stage_nonmatrix_floats(const qe_stage *st) { return st->nonmatrix_floats; }
size_t qe_stage_act_bytes(const qe_stage *st) { return (size_t)st->N * st->cfg.hidden * qe_dtype_size(st->act_dt); }
qe_dtype qe_stage_act_dtype(const qe_stage *st) { return st->act_dt; }
size_t qe_stage_slot_bytes(const qe_stage *st) { return st->slot_bytes; }

qe_tensor qe_stage_param_tensor(qe_stage *st, int i)
{
	const qe_param_info *p = &st->params[i];
	return qe_tensor_2d(st->param_buf + p->offset, QE_F32, st->b->ops->device, p->rows, p->cols);
}

float *qe_stage_fp8_role(qe_stage *st, int lin, qe_fp8_role role)
{
	return st->meta + ((int64_t)lin * QE_ROLE_COUNT + role) * qe_fp8_role_floats(st->prec.recipe.history_len);
}

int32_t *qe_stage_slot_tokens(qe_stage *st, int slot) { return st->slots[slot].tokens; }
int32_t *qe_stage_slot_targets(qe_stage *st, int slot) { return st->slots[slot].targets; }
void *qe_stage_slot_input(qe_stage *st, int slot) { return st->first ? NULL : st->slots[slot].blk[0].x_in; }
void *qe_stage_slot_output(qe_stage *st, int slot) { return st->slots[slot].blk[st->nblk - 1].x_out; }
void *qe_stage_slot_dout(qe_stage *st, int slot) { return st->slots[slot].dout; }
void *qe_stage_slot_dinput(qe_stage *st, int slot) { return st->slots[slot].dx_in; }
float *qe_stage_slot_loss(qe_stage *st, int slot) { return st->slots[slot].loss; }

qe_tensor qe_stage_matrix_grad_shape(const qe_stage *st, int j)
{
	const qe_param_info *p = &st->params[st->matrix_param[j]];
	return qe_tensor_2d(NULL, QE_F32, st->b->ops->device, p->rows, p->cols);
}
