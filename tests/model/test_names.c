/*
 * test_names.c - the naming table (runtime/model/names.h) is the layout
 * training writes, under every cut of the model into stages.
 *
 * For a small GPT-2 shape (vocab 50257, padded to 50304) and the tiny preset,
 * cut into 1, 2 and 4 stages (1 to 4 blocks per stage):
 *   - qe_model_param_table gives exactly the parameter table of a stage made
 *     by qe_stage_create (names, shapes, offsets, buffer floats);
 *   - every parameter of every stage has one named entry at its offset, the
 *     vocabulary's padding rows are the only floats of a parameter not named,
 *     and no two entries overlap;
 *   - the names and shapes are the same for every cut (only stage and offset
 *     change), each name appears once, in model order;
 *   - moments mirror the parameters in adam_m / adam_v, and the FP8 entries
 *     tile each stage's fp8_meta array [linear, role, L + 2] exactly, at the
 *     stage's linear index of the weight they belong to;
 *   - llm.c's order covers its 16 tensors, the per-block ones once per layer;
 *   - short names and unknown names are looked up as documented;
 *   - tied embeddings (the gpt2 preset's default): exactly lm_head.weight
 *     and its two moments are marked tied, the head's FP8 meta is not and
 *     stays named; the same shape untied (and tiny) marks nothing, and its
 *     names are the tied model's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/status.h"
#include "runtime/fp8/fp8.h"
#include "runtime/model/model.h"
#include "runtime/model/names.h"

#define HIST 4

static void check_against_stage(qe_backend *b, const qe_model_config *cfg, int s, int S)
{
	qe_param_info *pt;
	int np;
	int64_t floats;
	CHECK_OK(qe_model_param_table(cfg, s, S, &pt, &np, &floats));
	qe_precision prec = { 0 };
	prec.mode = QE_PREC_F32;
	prec.recipe = qe_fp8_recipe_default();
	prec.recipe.history_len = HIST;
	qe_stage *st = NULL;
	CHECK_OK(qe_stage_create(b, cfg, &prec, s, S, 1, 1, 0, &st));
	if (st) {
		CHECK(qe_stage_nparams(st) == np, "stage %d/%d: %d params, table %d", s, S, qe_stage_nparams(st), np);
		CHECK(qe_stage_param_floats(st) == floats, "stage %d/%d: %lld floats, table %lld", s, S,
		      (long long)qe_stage_param_floats(st), (long long)floats);
		for (int i = 0; i < np && i < qe_stage_nparams(st); i++) {
			const qe_param_info *a = qe_stage_param(st, i), *t = &pt[i];
			CHECK(strcmp(a->name, t->name) == 0 && a->offset == t->offset && a->rows == t->rows &&
				      a->cols == t->cols && a->linear == t->linear && a->layer == t->layer,
			      "stage %d/%d param %d: stage '%s' @%lld [%lld,%lld], table '%s' @%lld [%lld,%lld]", s, S, i,
			      a->name, (long long)a->offset, (long long)a->rows, (long long)a->cols, t->name,
			      (long long)t->offset, (long long)t->rows, (long long)t->cols);
		}
		CHECK(qe_stage_fp8_meta_floats(st) == (int64_t)qe_stage_nlinear(st) * QE_ROLE_COUNT * qe_fp8_role_floats(HIST),
		      "stage %d/%d fp8 meta floats", s, S);
		qe_stage_free(st);
	}
	free(pt);
}

/* Mark [off, off + n) of a coverage map; an overlap is a failure. */
static void cover(unsigned char *map, int64_t len, int64_t off, int64_t n, const char *name)
{
	CHECK(off >= 0 && off + n <= len, "'%s' [%lld, +%lld) outside its array of %lld floats", name, (long long)off,
	      (long long)n, (long long)len);
	for (int64_t i = off; i < off + n && i < len; i++) {
		if (map[i]) {
			CHECK(0, "'%s' overlaps another entry at float %lld", name, (long long)i);
			return;
		}
		map[i] = 1;
	}
}

static void check_cut(qe_backend *b, const qe_model_config *cfg, int S, qe_names *first)
{
	qe_names n;
	CHECK_OK(qe_model_names(cfg, S, HIST, &n));
	for (int s = 0; s < S; s++)
		check_against_stage(b, cfg, s, S);
	int nparams = 12 * cfg->layers + 5, nlin = 4 * cfg->layers + 1;
	CHECK(n.nparams == nparams && n.n == 3 * nparams + 9 * nlin, "%d stages: %d params, %d entries", S, n.nparams,
	      n.n);
	int vpad = qe_model_vocab_padded(cfg);
	for (int s = 0; s < S; s++) {
		unsigned char *pm = calloc((size_t)n.param_floats[s], 1), *fm = calloc((size_t)n.fp8_floats[s], 1);
		int64_t padding = 0;
		for (int i = 0; i < n.n; i++) {
			const qe_named *e = &n.t[i];
			if (e->stage != s)
				continue;
			if (e->source == QE_NAME_PARAMS) {
				cover(pm, n.param_floats[s], e->offset, e->stored_rows * e->shape[1], e->name);
				padding += (e->stored_rows - e->shape[0]) * e->shape[1];
				CHECK(e->stored_rows == e->shape[0] || (e->stored_rows == vpad && e->shape[0] == cfg->vocab),
				      "'%s': stored rows %lld", e->name, (long long)e->stored_rows);
			} else if (e->source == QE_NAME_FP8_META) {
				cover(fm, n.fp8_floats[s], e->offset, qe_named_floats(e), e->name);
				const qe_named *w = &n.t[e->param];
				int64_t blk = (int64_t)w->linear * QE_ROLE_COUNT * qe_fp8_role_floats(HIST);
				CHECK(w->linear >= 0 && w->stage == s && e->offset >= blk &&
					      e->offset < blk + QE_ROLE_COUNT * qe_fp8_role_floats(HIST),
				      "'%s' is not in the block of linear %d ('%s')", e->name, w->linear, w->name);
				CHECK(strncmp(e->name, w->name, strlen(w->name) - strlen("weight")) == 0, "'%s' belongs to '%s'",
				      e->name, w->name);
			} else {
				const qe_named *p = &n.t[e->param];
				CHECK(p->source == QE_NAME_PARAMS && p->offset == e->offset && p->stage == e->stage &&
					      p->shape[0] == e->shape[0] && p->shape[1] == e->shape[1] &&
					      p->conv1d == e->conv1d,
				      "moment '%s' does not mirror '%s'", e->name, p->name);
			}
		}
		/* Every float of params is a named float, padding rows, or the 64-float alignment gap. */
		int64_t named = 0;
		for (int64_t i = 0; i < n.param_floats[s]; i++)
			named += pm[i];
		CHECK(named <= n.param_floats[s] && n.param_floats[s] - named < 64 * 14 * (cfg->layers / S + 2),
		      "stage %d/%d: %lld of %lld floats named (padding %lld)", s, S, (long long)named,
		      (long long)n.param_floats[s], (long long)padding);
		for (int64_t i = 0; i < n.fp8_floats[s]; i++)
			if (!fm[i]) {
				CHECK(0, "stage %d/%d: fp8_meta float %lld has no name", s, S, (long long)i);
				break;
			}
		free(pm);
		free(fm);
	}
	/* llm.c: each of 16 tensors, the per-block ones once per layer */
	int count[QE_LLMC_TENSORS] = { 0 };
	for (int i = 0; i < n.nparams; i++)
		if (n.t[i].llmc >= 0)
			count[n.t[i].llmc]++;
	for (int k = 0; k < QE_LLMC_TENSORS; k++)
		CHECK(count[k] == (k >= 2 && k < 14 ? cfg->layers : 1), "llm.c tensor %d named %d times", k, count[k]);
	/* names unique */
	for (int i = 0; i < n.n; i++)
		for (int j = i + 1; j < n.n; j++)
			if (strcmp(n.t[i].name, n.t[j].name) == 0)
				CHECK(0, "'%s' named twice", n.t[i].name);
	if (first->t) {
		for (int i = 0; i < n.n && i < first->n; i++)
			CHECK(strcmp(n.t[i].name, first->t[i].name) == 0 && n.t[i].shape[0] == first->t[i].shape[0] &&
				      n.t[i].shape[1] == first->t[i].shape[1],
			      "%d stages: entry %d is '%s', with one stage '%s'", S, i, n.t[i].name, first->t[i].name);
		qe_names_release(&n);
	} else {
		*first = n;
	}
}

/* Exactly the head and its moments are tied in a tied model; nothing in an untied one. */
static void check_tied(const qe_model_config *cfg, const qe_names *n)
{
	static const char *const head[] = { "lm_head.weight", "lm_head.weight.exp_avg", "lm_head.weight.exp_avg_sq" };
	int tied = 0;
	for (int i = 0; i < n->n; i++)
		tied += n->t[i].tied != 0;
	CHECK(tied == (cfg->tie_embeddings ? 3 : 0), "%s (tie_embeddings %d): %d entries tied, expected %d", cfg->preset,
	      cfg->tie_embeddings, tied, cfg->tie_embeddings ? 3 : 0);
	for (int k = 0; k < 3; k++) {
		const qe_named *e = qe_names_find(n, head[k]);
		CHECK(e && e->tied == cfg->tie_embeddings, "%s: '%s' tied %d, tie_embeddings %d", cfg->preset, head[k],
		      e ? e->tied : -1, cfg->tie_embeddings);
	}
	const qe_named *w = qe_names_find(n, "wte.weight"), *h = qe_names_find(n, "lm_head.weight");
	CHECK(w && h && !w->tied && h->shape[0] == w->shape[0] && h->shape[1] == w->shape[1] &&
		      h->stored_rows == w->stored_rows,
	      "%s: the head and wte must have one shape", cfg->preset);
	const qe_named *f = qe_names_find(n, "lm_head.fp8.weight.amax_history");
	CHECK(f && !f->tied && f->source == QE_NAME_FP8_META, "%s: the head's FP8 meta is named and its own",
	      cfg->preset);
}

int main(void)
{
	qe_backend *b = NULL;
	CHECK_OK(qe_cpu_backend_create(&b));
	qe_model_config g, t;
	CHECK_OK(qe_model_preset("gpt2", &g));
	g.layers = 4;
	g.hidden = 64;
	g.heads = 4;
	g.ffn = 256;
	g.seq = 32;
	CHECK(g.tie_embeddings == 1, "the gpt2 preset ties its embeddings");
	CHECK_OK(qe_model_preset("tiny", &t));
	CHECK(t.tie_embeddings == 0, "the tiny preset does not tie its embeddings");
	qe_model_config u = g; /* the same shape untied: --tie-embeddings off */
	u.tie_embeddings = 0;
	const qe_model_config *cfgs[] = { &g, &t, &u };
	qe_names gnames = { 0 };
	for (int c = 0; c < 3 && b; c++) {
		qe_names first = { 0 };
		for (int S = 1; S <= 4; S *= 2)
			check_cut(b, cfgs[c], S, &first);
		check_tied(cfgs[c], &first);
		const qe_named *e = qe_names_find(&first, "wte");
		CHECK(e && strcmp(e->name, "wte.weight") == 0 && e->shape[0] == cfgs[c]->vocab, "short name wte");
		e = qe_names_find(&first, "h.3.attn.c_attn.weight");
		CHECK(e && e->shape[0] == 3 * cfgs[c]->hidden && e->shape[1] == cfgs[c]->hidden && e->conv1d && e->layer == 3,
		      "h.3.attn.c_attn.weight");
		e = qe_names_find(&first, "lm_head.fp8.grad_output.scale_inv");
		CHECK(e && e->source == QE_NAME_FP8_META && e->shape[0] == 1, "lm_head.fp8.grad_output.scale_inv");
		e = qe_names_find(&first, "h.0.ln_1.bias.exp_avg_sq");
		CHECK(e && e->source == QE_NAME_ADAM_V, "h.0.ln_1.bias.exp_avg_sq");
		CHECK(!qe_names_find(&first, "h.4.ln_1.bias") && !qe_names_find(&first, "params"), "unknown names");
		if (c == 0) {
			gnames = first; /* the tied gpt2 shape, against its untied twin below */
			continue;
		}
		if (c == 2) {
			CHECK(gnames.n == first.n, "tied %d entries, untied %d", gnames.n, first.n);
			for (int i = 0; i < first.n && i < gnames.n; i++)
				CHECK(strcmp(gnames.t[i].name, first.t[i].name) == 0 &&
					      gnames.t[i].offset == first.t[i].offset && gnames.t[i].stage == first.t[i].stage,
				      "entry %d: tied '%s', untied '%s'", i, gnames.t[i].name, first.t[i].name);
		}
		qe_names_release(&first);
	}
	qe_names_release(&gnames);
	qe_names n;
	CHECK(qe_model_names(&g, 3, HIST, &n) == QE_EINVAL, "4 layers into 3 stages must be refused");
	qe_names_release(&n);
	if (b)
		qe_cpu_backend_destroy(b);
	return qe_test_done("test_names");
}
