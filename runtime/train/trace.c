/*
 * trace.c - fingerprints of a rank's state after a step.  Device memory is
 * copied to the host in pieces and fed to a streaming XXH3-64 state, in a
 * fixed order (microbatch order for per-microbatch buffers), so the same
 * bytes give the same fingerprint on every backend, mapping and process.
 */
#include "runtime/train/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "runtime/core/status.h"

static const qe_trace_category categories[] = {
	{ "loss", 0, "the step's mean training loss (last stage)" },
	{ "f_out", 0, "F outputs: the stage's output activation of every microbatch" },
	{ "di_out", 0, "dI outputs: input gradient of every microbatch (first stage: its non-matrix gradients summed over microbatches in order)" },
	{ "dw_out", 0, "dW outputs: each matrix gradient summed over microbatches in order (either arena layout)" },
	{ "grad_nonmatrix", 0, "non-matrix gradients summed over microbatches in order (either arena layout)" },
	{ "params", 0, "fp32 master parameters after the optimizer" },
	{ "adam_m", 0, "AdamW first moments" },
	{ "adam_v", 0, "AdamW second moments" },
	{ "adam_step", 0, "AdamW step count" },
	{ "amax_input", 0, "amax history of the input role of every linear" },
	{ "amax_weight", 0, "amax history of the weight role" },
	{ "amax_grad", 0, "amax history of the grad_output role" },
	{ "scale_input", 0, "scale of the input role" },
	{ "scale_weight", 0, "scale of the weight role" },
	{ "scale_grad", 0, "scale of the grad_output role" },
	{ "sinv_input", 0, "scale_inv of the input role" },
	{ "sinv_weight", 0, "scale_inv of the weight role" },
	{ "sinv_grad", 0, "scale_inv of the grad_output role" },
	{ "epoch_w", 0, "optimizer epoch e_W" },
	{ "epoch_c", 0, "weight-cache epoch e_C (-1 invalid)" },
	{ "data_pos", 0, "data position (steps consumed)" },
	{ "live_tapes", 0, "tapes still live at the end of the step (0)" },
	{ "arena_writes", 0, "arena views written in the step (M per matrix)" },
	{ "peak_tapes", 1, "most tapes live at once in the step" },
	{ "delayed_dw", 1, "dW actions not right after their own dI" },
	{ "mapping", 2, "the step's schedule, backward mode, pp, dp, micro and chunks" },
};
#define NCAT (int)(sizeof(categories) / sizeof(categories[0]))

const qe_trace_category *qe_trace_categories(int *n)
{
	*n = NCAT;
	return categories;
}

const qe_trace_category *qe_trace_category_find(const char *name)
{
	for (int i = 0; i < NCAT; i++)
		if (strcmp(categories[i].name, name) == 0)
			return &categories[i];
	return NULL;
}

typedef struct hasher {
	qe_backend *b;
	XXH3_state_t *st;
	unsigned char *buf; /* staging for device memory */
	size_t buflen;
	int rc;
} hasher;

static void h_reset(hasher *h)
{
	XXH3_64bits_reset(h->st);
}

static void h_host(hasher *h, const void *p, size_t n)
{
	XXH3_64bits_update(h->st, p, n);
}

/* Hash backend memory. */
static void h_dev(hasher *h, const void *p, size_t n)
{
	if (h->b->ops->device == QE_DEV_CPU) {
		h_host(h, p, n);
		return;
	}
	for (size_t off = 0; off < n && !h->rc; off += h->buflen) {
		size_t k = n - off < h->buflen ? n - off : h->buflen;
		h->rc = h->b->ops->copy(NULL, h->buf, (const char *)p + off, k, QE_COPY_D2H);
		if (!h->rc)
			h_host(h, h->buf, k);
	}
}

/*
 * Hash the fp32 sum ((v0 + v1) + v2) + ... of nv views of n floats, element
 * by element: the matrix gradient of the step as the optimizer reduces it.
 * An accumulating arena holds that sum in its one view (nv == 1), the
 * per-mb layout in M views, so both layouts give one fingerprint.
 */
static void h_dev_sum(hasher *h, const float *const *views, int nv, size_t n)
{
	if (nv == 1) {
		h_dev(h, views[0], n * 4);
		return;
	}
	int host = h->b->ops->device == QE_DEV_CPU;
	size_t piece = (size_t)1 << 18;
	float *acc = malloc(piece * 4), *tmp = host ? NULL : malloc(piece * 4);
	if (!acc || (!host && !tmp)) {
		h->rc = qe_fail(QE_ENOMEM, "trace: out of memory for the gradient sum");
		goto free_buffers;
	}
	for (size_t off = 0; off < n && !h->rc; off += piece) {
		size_t k = n - off < piece ? n - off : piece;
		for (int v = 0; v < nv && !h->rc; v++) {
			const float *src = views[v] + off;
			if (!host) {
				h->rc = h->b->ops->copy(NULL, tmp, src, k * 4, QE_COPY_D2H);
				src = tmp;
			}
			if (h->rc)
				break;
			if (v == 0)
				memcpy(acc, src, k * 4);
			else
				for (size_t i = 0; i < k; i++)
					acc[i] = acc[i] + src[i];
		}
		if (!h->rc)
			h_host(h, acc, k * 4);
	}
free_buffers:
	free(acc);
	free(tmp);
}

static void emit(qe_trace_row *rows, int *n, int64_t step, int stage, const char *cat, hasher *h)
{
	qe_trace_row *r = &rows[(*n)++];
	r->step = step;
	r->stage = stage;
	snprintf(r->category, sizeof(r->category), "%s", cat);
	r->fp = XXH3_64bits_digest(h->st);
}

/* Hash one part (history, scale or scale_inv) of one role over every linear. */
static void h_role(hasher *h, qe_stage *st, int hist, qe_fp8_role role, int part)
{
	for (int l = 0; l < qe_stage_nlinear(st); l++) {
		float *blk = qe_stage_fp8_role(st, l, role);
		if (part == 0)
			h_dev(h, blk, (size_t)hist * 4);
		else
			h_dev(h, blk + hist + (part - 1), 4);
	}
}

int qe_trace_rank(qe_rank *r, int64_t step, float loss, qe_trace_row **out, int *nout)
{
	int V = qe_rank_nchunks(r);
	const qe_train_config *cfg = qe_rank_config(r);
	int M = cfg->micro, hist = cfg->prec.recipe.history_len;
	qe_trace_row *rows = calloc((size_t)V * NCAT, sizeof(qe_trace_row));
	hasher *h = malloc(sizeof(hasher));
	if (!rows || !h || !(h->st = XXH3_createState())) {
		free(rows);
		free(h);
		return qe_fail(QE_ENOMEM, "trace: out of memory");
	}
	h->b = qe_rank_backend(r);
	h->rc = QE_OK;
	h->buflen = 8u << 20;
	h->buf = h->b->ops->device == QE_DEV_CPU ? NULL : malloc(h->buflen);
	if (h->b->ops->device != QE_DEV_CPU && !h->buf) {
		XXH3_freeState(h->st);
		free(h);
		free(rows);
		return qe_fail(QE_ENOMEM, "trace: out of memory");
	}
	int n = 0;
	static const char *role_cat[3][3] = { { "amax_input", "scale_input", "sinv_input" },
					      { "amax_weight", "scale_weight", "sinv_weight" },
					      { "amax_grad", "scale_grad", "sinv_grad" } };
	for (int c = 0; c < V; c++) {
		qe_stage *st = qe_rank_stage(r, c);
		qe_adamw *opt = qe_rank_optimizer(r, c);
		int s = qe_stage_index(st);
		size_t act = qe_stage_act_bytes(st);
		if (qe_stage_is_last(st)) {
			h_reset(h);
			h_host(h, &loss, 4);
			emit(rows, &n, step, s, "loss", h);
		}
		h_reset(h);
		for (int m = 0; m < M; m++)
			h_dev(h, qe_stage_slot_output(st, m), act);
		emit(rows, &n, step, s, "f_out", h);
		/* the non-matrix gradients as their in-order sum: per-microbatch buffers or the accumulated one */
		const float *nm[256];
		int nnm = qe_stage_nonmatrix_views(st) < 256 ? qe_stage_nonmatrix_views(st) : 256;
		for (int v = 0; v < nnm; v++)
			nm[v] = qe_stage_nonmatrix_grad(st, v);
		h_reset(h);
		if (qe_stage_is_first(st))
			h_dev_sum(h, nm, nnm, (size_t)qe_stage_nonmatrix_floats(st));
		else
			for (int m = 0; m < M; m++)
				h_dev(h, qe_stage_slot_dinput(st, m), act);
		emit(rows, &n, step, s, "di_out", h);
		h_reset(h);
		for (int j = 0; j < qe_stage_nmatrices(st); j++) {
			const float *views[256];
			int nv = qe_rank_arena_nviews(r);
			qe_tensor v0 = qe_rank_arena_view(r, c, j, 0);
			for (int m = 0; m < nv && m < 256; m++)
				views[m] = qe_rank_arena_view(r, c, j, m).data;
			h_dev_sum(h, views, nv < 256 ? nv : 256, (size_t)qe_tensor_numel(&v0));
		}
		emit(rows, &n, step, s, "dw_out", h);
		h_reset(h);
		h_dev_sum(h, nm, nnm, (size_t)qe_stage_nonmatrix_floats(st));
		emit(rows, &n, step, s, "grad_nonmatrix", h);
		size_t pbytes = qe_stage_param_floats(st) * 4;
		h_reset(h);
		h_dev(h, qe_stage_params(st), pbytes);
		emit(rows, &n, step, s, "params", h);
		h_reset(h);
		h_dev(h, opt->m, pbytes);
		emit(rows, &n, step, s, "adam_m", h);
		h_reset(h);
		h_dev(h, opt->v, pbytes);
		emit(rows, &n, step, s, "adam_v", h);
		h_reset(h);
		h_host(h, &opt->step, sizeof(opt->step));
		emit(rows, &n, step, s, "adam_step", h);
		for (int role = 0; role < 3; role++)
			for (int part = 0; part < 3; part++) {
				h_reset(h);
				h_role(h, st, hist, (qe_fp8_role)role, part);
				emit(rows, &n, step, s, role_cat[role][part], h);
			}
		const qe_epoch_state *ep = qe_rank_epochs(r);
		int64_t ec = qe_rank_chunk_cache_epoch(r, c), dp = qe_rank_steps_done(r);
		h_reset(h);
		h_host(h, &ep->e_W, sizeof(ep->e_W));
		emit(rows, &n, step, s, "epoch_w", h);
		h_reset(h);
		h_host(h, &ec, sizeof(ec));
		emit(rows, &n, step, s, "epoch_c", h);
		h_reset(h);
		h_host(h, &dp, sizeof(dp));
		emit(rows, &n, step, s, "data_pos", h);
		qe_rank_chunk_stats cs;
		qe_rank_chunk_get_stats(r, c, &cs);
		int64_t vals[4] = { cs.live_tapes, cs.arena_writes, cs.peak_live_tapes, (int64_t)cs.delayed_dw };
		const char *names[4] = { "live_tapes", "arena_writes", "peak_tapes", "delayed_dw" };
		for (int k = 0; k < 4; k++) {
			h_reset(h);
			h_host(h, &vals[k], sizeof(vals[k]));
			emit(rows, &n, step, s, names[k], h);
		}
		/* The mapping this step ran under: resource counts are comparable only when it agrees. */
		int32_t map[6] = { (int32_t)cfg->schedule, (int32_t)cfg->backward, cfg->pp, cfg->dp, cfg->micro, cfg->chunks };
		h_reset(h);
		h_host(h, map, sizeof(map));
		emit(rows, &n, step, s, "mapping", h);
	}
	int rc = h->rc;
	XXH3_freeState(h->st);
	free(h->buf);
	free(h);
	if (rc) {
		free(rows);
		return qe_fail_ctx(rc, "trace: reading device state");
	}
	*out = rows;
	*nout = n;
	return QE_OK;
}
