/*
 * names.c - the naming table: GPT-2 names of a stage's parameters, their
 * AdamW moments and the FP8 meta of their linears (see names.h).
 *
 * The floats come from qe_model_param_table, the table stage creation uses,
 * so the offsets here are the ones training writes; this file only adds the
 * names.  kinds[] below is the one home of the mapping from the stage's
 * short parameter names to GPT-2's, and of llm.c's parameter order.
 */
#include "runtime/model/names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/fp8/fp8.h"

static const struct {
	const char *stage_name; /* qe_param_info.name without a block's "L<layer>." prefix */
	const char *gpt2;       /* its name; "h.N." is prefixed for a block's */
	int block;              /* belongs to block N */
	int conv1d;             /* Hugging Face's Conv1D holds it transposed */
	int llmc;               /* llm.c's order, -1: not in its file */
	int vocab_rows;         /* rows are the (padded) vocabulary */
} kinds[] = {
	{ "wte", "wte.weight", 0, 0, 0, 1 },
	{ "wpe", "wpe.weight", 0, 0, 1, 0 },
	{ "ln1.w", "ln_1.weight", 1, 0, 2, 0 },
	{ "ln1.b", "ln_1.bias", 1, 0, 3, 0 },
	{ "qkv.w", "attn.c_attn.weight", 1, 1, 4, 0 },
	{ "qkv.b", "attn.c_attn.bias", 1, 0, 5, 0 },
	{ "proj.w", "attn.c_proj.weight", 1, 1, 6, 0 },
	{ "proj.b", "attn.c_proj.bias", 1, 0, 7, 0 },
	{ "ln2.w", "ln_2.weight", 1, 0, 8, 0 },
	{ "ln2.b", "ln_2.bias", 1, 0, 9, 0 },
	{ "fc1.w", "mlp.c_fc.weight", 1, 1, 10, 0 },
	{ "fc1.b", "mlp.c_fc.bias", 1, 0, 11, 0 },
	{ "fc2.w", "mlp.c_proj.weight", 1, 1, 12, 0 },
	{ "fc2.b", "mlp.c_proj.bias", 1, 0, 13, 0 },
	{ "lnf.w", "ln_f.weight", 0, 0, 14, 0 },
	{ "lnf.b", "ln_f.bias", 0, 0, 15, 0 },
	{ "head.w", "lm_head.weight", 0, 0, -1, 1 },
};
#define NKINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

static const char *const source_arrays[] = { "params", "adam_m", "adam_v", "fp8_meta" };

const char *qe_name_source_array(qe_name_source s)
{
	return (unsigned)s < QE_NAME_SOURCES ? source_arrays[s] : "?";
}

static int kind_of(const char *stage_name)
{
	const char *base = stage_name;
	if (base[0] == 'L' && strchr(base, '.'))
		base = strchr(base, '.') + 1;
	for (int k = 0; k < NKINDS; k++)
		if (strcmp(base, kinds[k].stage_name) == 0)
			return k;
	return -1;
}

void qe_names_release(qe_names *n)
{
	free(n->t);
	free(n->param_floats);
	free(n->fp8_floats);
	memset(n, 0, sizeof(*n));
}

/* Append one entry; cap was sized up front. */
static qe_named *add(qe_names *n, const char *name, qe_name_source src, int stage, int64_t offset, int ndim,
		     int64_t rows, int64_t cols, int param)
{
	qe_named *e = &n->t[n->n];
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->source = src;
	e->stage = stage;
	e->offset = offset;
	e->ndim = ndim;
	e->shape[0] = rows;
	e->shape[1] = cols;
	e->stored_rows = rows;
	e->llmc = -1;
	e->layer = -1;
	e->linear = -1;
	e->param = param < 0 ? n->n : param;
	return &n->t[n->n++];
}

int qe_model_names(const qe_model_config *cfg, int nstages, int history_len, qe_names *out)
{
	int rc = QE_OK, nblk;
	memset(out, 0, sizeof(*out));
	if ((rc = qe_model_config_check(cfg)) || (rc = qe_model_blocks_per_stage(cfg, nstages, &nblk)))
		return rc;
	if (history_len < 1)
		return qe_fail(QE_EINVAL, "naming table: amax history length %d", history_len);
	int nparams = 12 * cfg->layers + 5, nlin = 4 * cfg->layers + 1, L = history_len;
	size_t cap = (size_t)nparams * 3 + (size_t)nlin * QE_ROLE_COUNT * 3;
	out->nstages = nstages;
	out->t = calloc(cap, sizeof(*out->t));
	out->param_floats = calloc((size_t)nstages, sizeof(int64_t));
	out->fp8_floats = calloc((size_t)nstages, sizeof(int64_t));
	if (!out->t || !out->param_floats || !out->fp8_floats)
		return qe_fail(QE_ENOMEM, "naming table: out of memory");

	/* The parameters, stage by stage: the stages' order is the model's. */
	for (int s = 0; s < nstages; s++) {
		qe_param_info *pt;
		int np;
		if ((rc = qe_model_param_table(cfg, s, nstages, &pt, &np, &out->param_floats[s])))
			return rc;
		int nlin_s = 4 * nblk + (s == nstages - 1 ? 1 : 0);
		out->fp8_floats[s] = (int64_t)nlin_s * QE_ROLE_COUNT * qe_fp8_role_floats(L);
		for (int i = 0; i < np && !rc; i++) {
			const qe_param_info *p = &pt[i];
			int k = kind_of(p->name);
			if (k < 0) {
				rc = qe_fail(QE_EINVAL, "naming table: stage %d parameter '%s' has no GPT-2 name", s, p->name);
				break;
			}
			char name[64];
			if (kinds[k].block)
				snprintf(name, sizeof(name), "h.%d.%s", p->layer, kinds[k].gpt2);
			else
				snprintf(name, sizeof(name), "%s", kinds[k].gpt2);
			qe_named *e = add(out, name, QE_NAME_PARAMS, s, p->offset, p->cols == 1 ? 1 : 2,
					  kinds[k].vocab_rows ? cfg->vocab : p->rows, p->cols, -1);
			e->stored_rows = p->rows;
			e->conv1d = kinds[k].conv1d;
			e->llmc = kinds[k].llmc;
			e->layer = kinds[k].block ? p->layer : -1;
			e->linear = p->is_matrix ? p->linear : -1;
			e->tied = cfg->tie_embeddings && strcmp(kinds[k].stage_name, "head.w") == 0;
		}
		free(pt);
		if (rc)
			return rc;
	}
	out->nparams = out->n;

	/* The moments follow their parameters' layout in adam_m and adam_v. */
	static const char *const suffix[2] = { ".exp_avg", ".exp_avg_sq" };
	for (int m = 0; m < 2; m++) {
		for (int i = 0; i < out->nparams; i++) {
			qe_named p = out->t[i];
			char name[64];
			snprintf(name, sizeof(name), "%s%s", p.name, suffix[m]);
			qe_named *e = add(out, name, m ? QE_NAME_ADAM_V : QE_NAME_ADAM_M, p.stage, p.offset, p.ndim, p.shape[0],
					  p.shape[1], i);
			e->stored_rows = p.stored_rows;
			e->conv1d = p.conv1d;
			e->layer = p.layer;
			e->tied = p.tied; /* the copies take the same gradient, so the same moments */
		}
	}

	/* FP8 meta: [linear, role, history L, scale, scale_inv] per stage, linears in the stage's order. */
	for (int s = 0; s < nstages; s++) {
		for (int i = 0; i < out->nparams; i++) {
			const qe_named *p = &out->t[i];
			if (p->stage != s || p->linear < 0)
				continue;
			int lin = p->linear;
			char mod[64];
			snprintf(mod, sizeof(mod), "%.*s", (int)(strlen(p->name) - strlen(".weight")), p->name);
			for (int r = 0; r < QE_ROLE_COUNT; r++) {
				int64_t base = ((int64_t)lin * QE_ROLE_COUNT + r) * qe_fp8_role_floats(L);
				const char *rn = qe_fp8_role_name((qe_fp8_role)r);
				char fn[128];
				snprintf(fn, sizeof(fn), "%s.fp8.%s.amax_history", mod, rn);
				add(out, fn, QE_NAME_FP8_META, s, base, 1, L, 1, i)->layer = p->layer;
				snprintf(fn, sizeof(fn), "%s.fp8.%s.scale", mod, rn);
				add(out, fn, QE_NAME_FP8_META, s, base + L, 1, 1, 1, i)->layer = p->layer;
				snprintf(fn, sizeof(fn), "%s.fp8.%s.scale_inv", mod, rn);
				add(out, fn, QE_NAME_FP8_META, s, base + L + 1, 1, 1, 1, i)->layer = p->layer;
			}
		}
	}
	return QE_OK;
}

const qe_named *qe_names_find(const qe_names *n, const char *name)
{
	if (strcmp(name, "wte") == 0)
		name = "wte.weight";
	else if (strcmp(name, "wpe") == 0)
		name = "wpe.weight";
	for (int i = 0; i < n->n; i++)
		if (strcmp(n->t[i].name, name) == 0)
			return &n->t[i];
	return NULL;
}
