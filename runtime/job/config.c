/*
 * config.c - defaults, checks, names and the JSON form of a run's config.
 */
#include "runtime/job/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/core/status.h"

void qe_train_config_default(qe_train_config *c)
{
	memset(c, 0, sizeof(*c));
	qe_model_preset("tiny", &c->model);
	c->prec.mode = QE_PREC_FP8;
	c->prec.head_current = 0;
	c->prec.recipe = qe_fp8_recipe_default();
	c->optim = qe_adamw_config_default();
	snprintf(c->backend, sizeof(c->backend), "cpu");
	c->pp = 1;
	c->dp = 1;
	c->micro = 4;
	c->chunks = 0; /* derived: layers / pp for interleaved, 2 for zbv */
	c->schedule = QE_SCHED_INTERLEAVED;
	c->backward = QE_BACKWARD_SPLIT;
	c->exec = QE_EXEC_EAGER;
	c->grad = QE_GRAD_DIRECT;
	c->arena = QE_ARENA_ACCUMULATE;
	c->steps = 20;
	c->seed = 1;
	c->eval_every = 0;
	c->eval_micro = 4;
	c->ckpt_every = 0;
	c->log_every = 1;
	c->check_replicas = 1;
	c->full_slots = 1;
}

int qe_train_config_check(const qe_train_config *c)
{
	int rc;
	if ((rc = qe_model_config_check(&c->model)))
		return rc;
	if (qe_prec_is_fp8(&c->prec) && (rc = qe_fp8_recipe_check(&c->prec.recipe)))
		return rc;
	if (c->pp < 1 || c->dp < 1)
		return qe_fail(QE_EINVAL, "--pp and --dp must be at least 1 (got %d, %d)", c->pp, c->dp);
	if (c->micro < 1 || c->micro > 256)
		return qe_fail(QE_EINVAL, "--micro must be in 1..256 (got %d)", c->micro);
	int stages = c->pp * c->chunks;
	if (c->chunks < 1 || c->model.layers % stages)
		return qe_fail(QE_EINVAL,
			       "--pp %d with %d chunks per rank gives %d virtual stages, but model '%s' has %d layers, "
			       "which do not divide evenly into them (each chunk holds layers / (P x V) layers)",
			       c->pp, c->chunks, stages, c->model.preset, c->model.layers);
	if (c->schedule == QE_SCHED_ZBV && c->chunks != 2)
		return qe_fail(QE_EINVAL, "--schedule zbv places two chunks per rank (V shape): --chunks must be 2, got %d",
			       c->chunks);
	if (c->schedule == QE_SCHED_INTERLEAVED && c->chunks > 1 && c->micro % c->pp)
		return qe_fail(QE_EINVAL, "--schedule interleaved needs --micro (%d) to be a multiple of --pp (%d)",
			       c->micro, c->pp);
	if (c->steps < 0)
		return qe_fail(QE_EINVAL, "--steps must be >= 0");
	if (qe_prec_is_fp8(&c->prec) && strcmp(c->backend, "cuda") == 0) {
		/* cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16 (the vocabulary is padded) */
		const qe_model_config *m = &c->model;
		int64_t n = qe_model_tokens(m);
		if (m->hidden % 16 || m->ffn % 16 || n % 16)
			return qe_fail(QE_EINVAL,
				       "model '%s': FP8 on cuda needs --hidden (%d), --ffn (%d) and batch x seq (%lld) to be "
				       "multiples of 16 (or --precision bf16)",
				       m->preset, m->hidden, m->ffn, (long long)n);
	}
	if (c->arena != QE_ARENA_PER_MB && c->arena != QE_ARENA_ACCUMULATE)
		return qe_fail(QE_EINVAL, "--arena must be accumulate or per-mb (got %d)", (int)c->arena);
	/* lr 0 is allowed: the weights then stay as they are (an --init-from round trip) */
	if (!(c->optim.lr >= 0))
		return qe_fail(QE_EINVAL, "--lr must be >= 0");
	const qe_adamw_config *o = &c->optim;
	if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
		return qe_fail(QE_EINVAL, "--beta1 (%g) and --beta2 (%g) must be in [0, 1)", (double)o->beta1,
			       (double)o->beta2);
	if (!(o->eps > 0))
		return qe_fail(QE_EINVAL, "--eps must be > 0, got %g", (double)o->eps);
	if (!(o->weight_decay >= 0))
		return qe_fail(QE_EINVAL, "--weight-decay must be >= 0, got %g", (double)o->weight_decay);
	if (!(o->grad_clip >= 0) || isinf(o->grad_clip))
		return qe_fail(QE_EINVAL, "--grad-clip must be a finite norm >= 0 (0: off), got %g", (double)o->grad_clip);
	if (o->lr_schedule < QE_LR_CONSTANT || o->lr_schedule > QE_LR_LINEAR)
		return qe_fail(QE_EINVAL, "--lr-schedule: unknown schedule %d", o->lr_schedule);
	if (o->warmup < 0 || o->decay_steps < 0)
		return qe_fail(QE_EINVAL, "--warmup (%lld) and --lr-decay-steps (%lld) must be >= 0", (long long)o->warmup,
			       (long long)o->decay_steps);
	if (!(o->lr_min >= 0 && o->lr_min <= o->lr))
		return qe_fail(QE_EINVAL, "--lr-min (%g) must be in [0, --lr %g]", (double)o->lr_min, (double)o->lr);
	return QE_OK;
}

#define NAMES(fn, parse, type, ...)                                                         \
	static const char *fn##_tab[] = { __VA_ARGS__ };                                    \
	const char *fn(type v)                                                              \
	{                                                                                   \
		return (unsigned)v < sizeof(fn##_tab) / sizeof(fn##_tab[0]) ? fn##_tab[v] : "?"; \
	}                                                                                   \
	int parse(const char *s, type *out)                                                 \
	{                                                                                   \
		for (unsigned i = 0; i < sizeof(fn##_tab) / sizeof(fn##_tab[0]); i++)      \
			if (strcmp(s, fn##_tab[i]) == 0) {                                  \
				*out = (type)i;                                             \
				return QE_OK;                                               \
			}                                                                   \
		return qe_fail(QE_EINVAL, "unknown value '%s' for " #type, s);              \
	}
NAMES(qe_exec_name, qe_exec_parse, qe_exec_mode, "eager", "graph")
NAMES(qe_grad_name, qe_grad_parse, qe_grad_mode, "direct", "copy")
#undef NAMES

char *qe_train_config_to_json(const qe_train_config *c)
{
	json_t *o = json_pack(
		"{s:{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i},"
		"s:{s:b,s:s,s:b,s:s,s:i,s:i,s:s},"
		"s:{s:f,s:f,s:f,s:f,s:f},"
		"s:s,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:s,s:i,s:i,s:i,s:i}",
		"model", "preset", c->model.preset, "vocab", c->model.vocab, "hidden", c->model.hidden, "ffn",
		c->model.ffn, "heads", c->model.heads, "seq", c->model.seq, "layers", c->model.layers, "batch",
		c->model.batch, "precision", "fp8", qe_prec_is_fp8(&c->prec), "mode", qe_prec_mode_name(c->prec.mode),
		"head_current", c->prec.head_current, "format",
		qe_fp8_format_name(c->prec.recipe.format), "margin", c->prec.recipe.margin, "history",
		c->prec.recipe.history_len, "amax_algo", qe_amax_algo_name(c->prec.recipe.algo),
		"optim", "lr", (double)c->optim.lr, "beta1", (double)c->optim.beta1, "beta2", (double)c->optim.beta2,
		"eps", (double)c->optim.eps, "weight_decay", (double)c->optim.weight_decay,
		"backend", c->backend, "pp", c->pp, "dp", c->dp, "micro", c->micro, "chunks", c->chunks,
		"schedule", qe_sched_kind_name(c->schedule), "backward", qe_sched_backward_name(c->backward), "exec",
		qe_exec_name(c->exec), "grad", qe_grad_name(c->grad), "steps", (json_int_t)c->steps, "seed",
		(json_int_t)c->seed, "data", c->data, "run_dir", c->run_dir, "eval_every", c->eval_every,
		"eval_micro", c->eval_micro, "ckpt_every", c->ckpt_every, "log_every", c->log_every);
	if (!o)
		return NULL;
	json_t *op = json_object_get(o, "optim");
	if (json_object_set_new(json_object_get(o, "model"), "attention", json_string(qe_attn_mode_name(c->model.attn))) ||
	    json_object_set_new(json_object_get(o, "model"), "tie_embeddings", json_boolean(c->model.tie_embeddings)) ||
	    json_object_set_new(o, "arena", json_string(qe_arena_layout_name(c->arena))) ||
	    json_object_set_new(op, "lr_schedule", json_string(qe_lr_schedule_name(c->optim.lr_schedule))) ||
	    json_object_set_new(op, "warmup", json_integer((json_int_t)c->optim.warmup)) ||
	    json_object_set_new(op, "lr_min", json_real((double)c->optim.lr_min)) ||
	    json_object_set_new(op, "decay_steps", json_integer((json_int_t)c->optim.decay_steps)) ||
	    (c->optim.grad_clip > 0 && json_object_set_new(op, "grad_clip", json_real((double)c->optim.grad_clip)))) {
		json_decref(o);
		return NULL;
	}
	if (c->local_dir[0] && json_object_set_new(o, "local_dir", json_string(c->local_dir))) {
		json_decref(o);
		return NULL;
	}
	if (c->data_fingerprint) {
		char hex[17];
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->data_fingerprint);
		if (json_object_set_new(o, "data_fingerprint", json_string(hex))) {
			json_decref(o);
			return NULL;
		}
	}
	if (c->init_from[0] && json_object_set_new(o, "init_from",
						   json_pack("{s:s,s:s,s:s}", "path", c->init_from, "format", c->init_format,
							     "xxh3_128", c->init_hash))) {
		json_decref(o);
		return NULL;
	}
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

int qe_train_config_from_json(const char *text, qe_train_config *c)
{
	json_error_t err;
	json_t *o = json_loads(text, 0, &err);
	if (!o)
		return qe_fail(QE_ECORRUPT, "run config: not JSON: %s", err.text);
	const char *preset, *fmt, *algo, *backend, *sched, *bw, *ex, *gr, *data, *rundir;
	double lr, b1, b2, eps, wd;
	int fp8, headc;
	json_int_t steps, seed;
	qe_train_config_default(c);
	int r = json_unpack_ex(
		o, &err, 0,
		"{s:{s:s,s:i,s:i,s:i,s:i,s:i,s:i},"
		"s:{s:b,s:b,s:s,s:i,s:i,s:s},"
		"s:{s:F,s:F,s:F,s:F,s:F},"
		"s:s,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:s,s:i,s:i,s:i,s:i}",
		"model", "preset", &preset, "vocab", &c->model.vocab, "hidden", &c->model.hidden, "ffn",
		&c->model.ffn, "heads", &c->model.heads, "seq", &c->model.seq, "layers", &c->model.layers,
		"precision", "fp8", &fp8, "head_current", &headc, "format", &fmt, "margin", &c->prec.recipe.margin,
		"history", &c->prec.recipe.history_len, "amax_algo", &algo,
		"optim", "lr", &lr, "beta1", &b1, "beta2", &b2, "eps", &eps, "weight_decay", &wd,
		"backend", &backend, "pp", &c->pp, "dp", &c->dp, "micro", &c->micro, "chunks", &c->chunks,
		"schedule", &sched, "backward", &bw, "exec", &ex, "grad", &gr, "steps", &steps, "seed", &seed,
		"data", &data, "run_dir", &rundir, "eval_every", &c->eval_every, "eval_micro", &c->eval_micro,
		"ckpt_every", &c->ckpt_every, "log_every", &c->log_every);
	int rc = QE_OK;
	if (r) {
		rc = qe_fail(QE_ECORRUPT, "run config: %s", err.text);
		goto free_json;
	}
	snprintf(c->model.preset, sizeof(c->model.preset), "%s", preset);
	c->prec.mode = fp8 ? QE_PREC_FP8 : QE_PREC_F32;
	c->prec.head_current = headc;
	c->optim.lr = (float)lr;
	c->optim.beta1 = (float)b1;
	c->optim.beta2 = (float)b2;
	c->optim.eps = (float)eps;
	c->optim.weight_decay = (float)wd;
	snprintf(c->backend, sizeof(c->backend), "%s", backend);
	snprintf(c->data, sizeof(c->data), "%s", data);
	snprintf(c->run_dir, sizeof(c->run_dir), "%s", rundir);
	c->steps = steps;
	c->seed = (uint64_t)seed;
	if ((rc = qe_fp8_format_parse(fmt, &c->prec.recipe.format)) || (rc = qe_amax_algo_parse(algo, &c->prec.recipe.algo)) ||
	    (rc = qe_sched_kind_parse(sched, &c->schedule)) || (rc = qe_sched_backward_parse(bw, &c->backward)) ||
	    (rc = qe_exec_parse(ex, &c->exec)) || (rc = qe_grad_parse(gr, &c->grad)))
		rc = qe_fail_ctx(QE_ECORRUPT, "run config");
	/* "batch" and the precision "mode" are newer: runs recorded without them had batch 1 and fp8 on/off */
	json_t *bt = json_object_get(json_object_get(o, "model"), "batch");
	c->model.batch = 1;
	if (!rc && bt && (!json_is_integer(bt) || (c->model.batch = (int)json_integer_value(bt)) < 1))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'model.batch'");
	/* the stores' --local-dir is newer: runs recorded without it name none */
	json_t *ld = json_object_get(o, "local_dir");
	if (!rc && ld && (!json_is_string(ld) || strlen(json_string_value(ld)) >= sizeof(c->local_dir)))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'local_dir'");
	else if (!rc && ld)
		snprintf(c->local_dir, sizeof(c->local_dir), "%s", json_string_value(ld));
	/* the learning-rate schedule is newer: runs recorded without it had a constant rate */
	json_t *op = json_object_get(o, "optim"), *ls = json_object_get(op, "lr_schedule"),
	       *wu = json_object_get(op, "warmup"), *lm = json_object_get(op, "lr_min"),
	       *ds = json_object_get(op, "decay_steps"), *gc = json_object_get(op, "grad_clip");
	if (!rc && ls && (!json_is_string(ls) || qe_lr_schedule_parse(json_string_value(ls), &c->optim.lr_schedule)))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'optim.lr_schedule'");
	if (!rc && wu && (!json_is_integer(wu) || (c->optim.warmup = json_integer_value(wu)) < 0))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'optim.warmup'");
	if (!rc && lm && (!json_is_number(lm) || (c->optim.lr_min = (float)json_number_value(lm)) < 0))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'optim.lr_min'");
	if (!rc && ds && (!json_is_integer(ds) || (c->optim.decay_steps = json_integer_value(ds)) < 0))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'optim.decay_steps'");
	/* clipping is newer, and recorded only when on */
	if (!rc && gc && (!json_is_number(gc) || !((c->optim.grad_clip = (float)json_number_value(gc)) >= 0)))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'optim.grad_clip'");
	json_t *at = json_object_get(json_object_get(o, "model"), "attention");
	qe_attn_mode am = QE_ATTN_AUTO;
	if (!rc && at && (!json_is_string(at) || qe_attn_mode_parse(json_string_value(at), &am)))
		rc = qe_fail_ctx(QE_ECORRUPT, "run config: field 'model.attention'");
	c->model.attn = (int)am;
	/* tied embeddings are newer: runs recorded without the field had a separate head */
	json_t *te = json_object_get(json_object_get(o, "model"), "tie_embeddings");
	c->model.tie_embeddings = 0;
	if (!rc && te && !json_is_boolean(te))
		rc = qe_fail(QE_ECORRUPT, "run config: field 'model.tie_embeddings' is not true or false");
	else if (te)
		c->model.tie_embeddings = json_is_true(te);
	json_t *md = json_object_get(json_object_get(o, "precision"), "mode");
	if (!rc && md && (!json_is_string(md) || qe_prec_mode_parse(json_string_value(md), &c->prec.mode)))
		rc = qe_fail_ctx(QE_ECORRUPT, "run config: field 'precision.mode'");
	/* "arena" is newer than the other fields: a run recorded without it ran per-mb views */
	json_t *ar = json_object_get(o, "arena");
	c->arena = QE_ARENA_PER_MB;
	if (!rc && ar && (!json_is_string(ar) || qe_arena_layout_parse(json_string_value(ar), &c->arena)))
		rc = qe_fail_ctx(QE_ECORRUPT, "run config: field 'arena'");
	/* "data_fingerprint" is newer still: runs recorded without it cannot have their data checked */
	json_t *fpj = json_object_get(o, "data_fingerprint");
	if (!rc && fpj) {
		const char *hex = json_is_string(fpj) ? json_string_value(fpj) : "";
		char *end = NULL;
		c->data_fingerprint = strtoull(hex, &end, 16);
		if (strlen(hex) != 16 || *end || !c->data_fingerprint)
			rc = qe_fail(QE_ECORRUPT, "run config: field 'data_fingerprint' is not 16 hex digits");
	}
	/* "init_from" (train --init-from) is recorded only by runs that started from a model file */
	json_t *inf = json_object_get(o, "init_from");
	if (!rc && inf) {
		const char *ip = json_string_value(json_object_get(inf, "path")),
			   *ifm = json_string_value(json_object_get(inf, "format")),
			   *ih = json_string_value(json_object_get(inf, "xxh3_128"));
		if (!ip || !ifm || !ih || strlen(ip) >= sizeof(c->init_from) || strlen(ifm) >= sizeof(c->init_format) ||
		    strlen(ih) >= sizeof(c->init_hash))
			rc = qe_fail(QE_ECORRUPT, "run config: field 'init_from'");
		else {
			snprintf(c->init_from, sizeof(c->init_from), "%s", ip);
			snprintf(c->init_format, sizeof(c->init_format), "%s", ifm);
			snprintf(c->init_hash, sizeof(c->init_hash), "%s", ih);
		}
	}
free_json:
	json_decref(o);
	return rc;
}

int qe_train_config_compatible(const qe_train_config *a, const qe_train_config *b, char *why, size_t len)
{
#define DIFF(cond, ...)                                  \
	do {                                             \
		if (cond) {                              \
			snprintf(why, len, __VA_ARGS__); \
			return QE_EMISMATCH;             \
		}                                        \
	} while (0)
	const qe_model_config *am = &a->model, *bm = &b->model;
	DIFF(strcmp(am->preset, bm->preset) || am->hidden != bm->hidden || am->vocab != bm->vocab ||
		     am->ffn != bm->ffn || am->heads != bm->heads || am->seq != bm->seq || am->layers != bm->layers ||
		     am->batch != bm->batch,
	     "model: checkpoint has '%s' (layers %d, hidden %d, heads %d, ffn %d, seq %d, vocab %d, batch %d), asked for "
	     "'%s' (layers %d, hidden %d, heads %d, ffn %d, seq %d, vocab %d, batch %d)",
	     am->preset, am->layers, am->hidden, am->heads, am->ffn, am->seq, am->vocab, am->batch, bm->preset,
	     bm->layers, bm->hidden, bm->heads, bm->ffn, bm->seq, bm->vocab, bm->batch);
	DIFF(qe_model_attn(am) != qe_model_attn(bm), "model: checkpoint has %s attention, asked for %s",
	     qe_attn_mode_name(qe_model_attn(am)), qe_attn_mode_name(qe_model_attn(bm)));
	DIFF(am->tie_embeddings != bm->tie_embeddings,
	     "model: checkpoint has %s embeddings, asked for %s (--tie-embeddings %s; it cannot change in a run)",
	     am->tie_embeddings ? "tied" : "untied", bm->tie_embeddings ? "tied" : "untied",
	     am->tie_embeddings ? "on" : "off");
	DIFF(a->prec.mode != b->prec.mode, "precision: checkpoint has %s, asked for %s", qe_prec_mode_name(a->prec.mode),
	     qe_prec_mode_name(b->prec.mode));
	DIFF(a->pp * a->chunks != b->pp * b->chunks,
	     "mapping: checkpoint has %d virtual stages (pp %d x chunks %d, %d layers each); pp %d x chunks %d gives %d "
	     "(a resume may change pp and chunks, not their product)",
	     a->pp * a->chunks, a->pp, a->chunks, am->layers / (a->pp * a->chunks), b->pp, b->chunks, b->pp * b->chunks);
	DIFF(a->prec.head_current != b->prec.head_current, "precision: output-head scaling differs (checkpoint %s)",
	     a->prec.head_current ? "current" : "delayed");
	DIFF(a->prec.recipe.history_len != b->prec.recipe.history_len,
	     "recipe: checkpoint has amax history %d, asked for %d", a->prec.recipe.history_len,
	     b->prec.recipe.history_len);
	DIFF(a->prec.recipe.margin != b->prec.recipe.margin, "recipe: checkpoint has margin %d, asked for %d",
	     a->prec.recipe.margin, b->prec.recipe.margin);
	DIFF(a->prec.recipe.format != b->prec.recipe.format || a->prec.recipe.algo != b->prec.recipe.algo,
	     "recipe: format/amax algo differ (checkpoint %s/%s)", qe_fp8_format_name(a->prec.recipe.format),
	     qe_amax_algo_name(a->prec.recipe.algo));
	DIFF(a->micro != b->micro, "microbatches: checkpoint has %d, asked for %d", a->micro, b->micro);
	DIFF(a->seed != b->seed, "seed: checkpoint has %llu, asked for %llu", (unsigned long long)a->seed,
	     (unsigned long long)b->seed);
#undef DIFF
	return QE_OK;
}
