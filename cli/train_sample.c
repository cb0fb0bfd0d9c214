/*
 * train_sample.c - the token generator shared by `qeffect sample` and
 * `qeffect train --sample-every K`, and the latter's training hook (see
 * train_sample.h).
 *
 * The hook moves whole stage buffers: after the step every rank copies its
 * chunks' parameters to the host as records {stage, floats, data} and rank
 * 0 gathers them on the comm's collective lane (the training thread's own
 * order, so it never meets a background checkpoint's messages, which use
 * the service lane).  Rank 0 then copies each tensor the one-stage forward
 * names from wherever the training cut put it.  Nothing is written to the
 * rank's state: the parameters, moments and FP8 meta of the next step are
 * the bytes they would have been without the hook.
 */
#include "cli/train_sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/encoder_dir.h"
#include "runtime/comm/comm.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"

/* ---- the generator ---------------------------------------------------------- */

typedef struct cand {
	float logit;
	int32_t id;
} cand;

/* Larger logit first, the lower id first among equals: a total order, so qsort's result is fixed. */
static int cand_cmp(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * The next token from logits[0..V): greedy at temperature 0, else a draw
 * from softmax(logits / T) over the top_k largest (all when 0), by one
 * uniform u in [0, 1) against the cumulative sum in candidate order.
 */
static int32_t pick(const float *logits, int V, double temperature, long top_k, qe_rng *rng, cand *cs)
{
	int n = V;
	for (int i = 0; i < V; i++)
		cs[i] = (cand){ logits[i], i };
	if (temperature == 0 || (top_k > 0 && top_k < V)) {
		if (temperature == 0) {
			int best = 0;
			for (int i = 1; i < V; i++)
				if (logits[i] > logits[best])
					best = i;
			return best;
		}
		qsort(cs, (size_t)V, sizeof(cand), cand_cmp);
		n = (int)top_k;
	}
	float mx = cs[0].logit;
	for (int i = 1; i < n; i++)
		if (cs[i].logit > mx)
			mx = cs[i].logit;
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += exp(((double)cs[i].logit - mx) / temperature);
	double u = (double)(qe_rng_u64(rng) >> 11) * 0x1p-53 * sum, acc = 0;
	for (int i = 0; i < n; i++) {
		acc += exp(((double)cs[i].logit - mx) / temperature);
		if (u < acc)
			return cs[i].id;
	}
	return cs[n - 1].id;
}

/* log softmax(logits)[id]: the model's own probability of id, before temperature and top-k. */
static double logprob(const float *logits, int V, int32_t id)
{
	float mx = logits[0];
	for (int i = 1; i < V; i++)
		if (logits[i] > mx)
			mx = logits[i];
	double sum = 0;
	for (int i = 0; i < V; i++)
		sum += exp((double)logits[i] - mx);
	return (double)logits[id] - mx - log(sum);
}

/*
 * Feed hist[j] to the forward (logits when not NULL); a full cache restarts
 * from hist's last seq/2 tokens before j.
 */
static int feed(qe_infer *m, const qe_tokbuf *hist, size_t j, float *logits)
{
	int rc, seq = qe_infer_config(m)->seq;
	if (qe_infer_pos(m) >= seq) {
		size_t keep = (size_t)seq / 2;
		qe_infer_reset(m);
		for (size_t i = j - keep; i < j; i++)
			if ((rc = qe_infer_step(m, hist->v[i], NULL)))
				return rc;
	}
	return qe_infer_step(m, hist->v[j], logits);
}

int cli_generate(qe_infer *m, qe_tokbuf *hist, const cli_gen *g, double *logprobs)
{
	int V = qe_infer_config(m)->vocab, rc = QE_OK;
	size_t nprompt = hist->n;
	if (!nprompt)
		return qe_fail(QE_EINVAL, "generation needs at least one token to start from");
	float *logits = malloc((size_t)V * sizeof(float));
	cand *cs = malloc((size_t)V * sizeof(cand));
	if (!logits || !cs) {
		rc = qe_fail(QE_ENOMEM, "out of memory for %d logits", V);
		goto free_buffers;
	}
	qe_rng rng;
	qe_rng_init(&rng, g->seed);
	qe_infer_reset(m);
	for (size_t j = 0; j < nprompt && !rc; j++)
		rc = feed(m, hist, j, j + 1 == nprompt ? logits : NULL);
	for (long k = 0; k < g->tokens && !rc; k++) {
		if ((rc = qe_tokbuf_push(hist, pick(logits, V, g->temperature, g->top_k, &rng, cs))))
			break;
		if (logprobs)
			logprobs[k] = logprob(logits, V, hist->v[hist->n - 1]);
		if (k + 1 < g->tokens)
			rc = feed(m, hist, hist->n - 1, logits);
	}
free_buffers:
	free(cs);
	free(logits);
	return rc;
}

int cli_tokens_bytes(const qe_gpt2_detok *d, const int32_t *t, size_t n, char **buf, size_t *len)
{
	for (size_t i = 0; i < n; i++) {
		const char *b;
		size_t bl = 1;
		char one = (char)t[i];
		int rc = d ? qe_gpt2_detok_token(d, t[i], &b, &bl) : QE_OK;
		if (rc)
			return rc;
		if (!d)
			b = &one;
		char *g = realloc(*buf, *len + bl + 1);
		if (!g)
			return qe_fail(QE_ENOMEM, "out of memory for %zu bytes of text", *len + bl);
		*buf = g;
		memcpy(g + *len, b, bl);
		*len += bl;
		g[*len] = 0;
	}
	return QE_OK;
}

json_t *cli_ids_json(const int32_t *t, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer(t[i]));
	return a;
}

/* ---- the training hook ------------------------------------------------------ */

struct cli_train_sample {
	long every, tokens;
	int json;
	int printer;           /* rank 0: gathers, generates and prints */
	uint64_t run_seed;
	int32_t start;         /* the start token */
	int bytes;             /* a byte vocabulary: each id is its byte */
	qe_gpt2_detok *dec;    /* GPT-2's vocabulary with its encoder files found; else NULL */
	qe_names names;        /* rank 0: the training cut's naming table */
	qe_infer *m;           /* rank 0: the one-stage forward */
};

/* Per chunk in a rank's blob: this header, then floats floats. */
typedef struct sample_rec {
	int32_t stage;
	int32_t reserved;
	int64_t floats;
} sample_rec;

int cli_train_sample_open(qe_rank *r, long every, long tokens, int json, cli_train_sample **out)
{
	const qe_train_config *cfg = qe_rank_config(r);
	const qe_model_config *mc = &cfg->model;
	char why[4400] = "";
	int rc = QE_OK;
	*out = NULL;
	cli_train_sample *s = calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "--sample-every: out of memory");
	s->every = every;
	s->tokens = tokens;
	s->json = json;
	s->printer = qe_rank_index(r) == 0;
	s->run_seed = (uint64_t)cfg->seed;
	s->bytes = mc->vocab == CLI_BYTE_VOCAB;
	s->start = mc->vocab == CLI_GPT2_VOCAB ? QE_GPT2_EOT : s->bytes ? CLI_BYTE_START : 0;
	if (!s->printer) {
		*out = s;
		return QE_OK;
	}
	if ((rc = qe_model_names(mc, cfg->pp * cfg->chunks, cfg->prec.recipe.history_len, &s->names)) ||
	    (rc = qe_infer_create(mc, NULL, &s->m))) {
		qe_fail_ctx(rc, "--sample-every: the model's host forward");
		goto free_hook;
	}
	/* Text where the vocabulary has a decoder; else ids, and why, once. */
	if (mc->vocab == CLI_GPT2_VOCAB) {
		char encdir[4096];
		const char *from;
		cli_encoder_dir(NULL, encdir, sizeof(encdir), &from);
		if (qe_gpt2_detok_open(encdir, &s->dec))
			snprintf(why, sizeof(why), "GPT-2's encoder files in '%s' (%s) cannot be read: %s", encdir, from,
				 qe_last_error());
		else if (qe_gpt2_detok_size(s->dec) != CLI_GPT2_VOCAB)
			snprintf(why, sizeof(why), "'%s/encoder.json' has %d ids, GPT-2's has %d", encdir,
				 qe_gpt2_detok_size(s->dec), CLI_GPT2_VOCAB);
		if (why[0]) {
			qe_gpt2_detok_free(s->dec);
			s->dec = NULL;
			qe_clear_error();
		}
	} else if (!s->bytes) {
		snprintf(why, sizeof(why),
			 "the model's vocabulary has %d tokens, neither GPT-2's BPE (%d) nor bytes (%d): no decoder for its ids",
			 mc->vocab, CLI_GPT2_VOCAB, CLI_BYTE_VOCAB);
	}
	if (why[0])
		fprintf(stderr, "qeffect: --sample-every: samples are shown as token ids: %s\n", why);
	*out = s;
	return QE_OK;
free_hook:
	cli_train_sample_close(s);
	return rc;
}

void cli_train_sample_close(cli_train_sample *s)
{
	if (!s)
		return;
	qe_infer_free(s->m);
	qe_names_release(&s->names);
	qe_gpt2_detok_free(s->dec);
	free(s);
}

/* This rank's chunks' parameters as records (replica 0 only; others send nothing).  OUT *blob, *n: free(). */
static int local_blob(qe_rank *r, char **blob, size_t *n)
{
	*blob = NULL;
	*n = 0;
	if (qe_rank_replica(r) != 0)
		return QE_OK;
	size_t total = 0;
	for (int c = 0; c < qe_rank_nchunks(r); c++)
		total += sizeof(sample_rec) + (size_t)qe_stage_param_floats(qe_rank_stage(r, c)) * 4;
	char *b = malloc(total ? total : 1), *p = b;
	if (!b)
		return qe_fail(QE_ENOMEM, "--sample-every: out of host memory for %zu bytes of parameters", total);
	qe_backend *be = qe_rank_backend(r);
	for (int c = 0; c < qe_rank_nchunks(r); c++) {
		qe_stage *st = qe_rank_stage(r, c);
		sample_rec h = { qe_stage_index(st), 0, qe_stage_param_floats(st) };
		memcpy(p, &h, sizeof(h));
		p += sizeof(h);
		int rc = be->ops->copy(NULL, p, qe_stage_params(st), (size_t)h.floats * 4, QE_COPY_D2H);
		if (rc) {
			free(b);
			return qe_fail_ctx(rc, "--sample-every: copying stage %d's parameters to the host", h.stage);
		}
		p += (size_t)h.floats * 4;
	}
	*blob = b;
	*n = total;
	return QE_OK;
}

/* Rank 0: every stage's parameters from the gathered blobs into the forward, by name. */
static int fill_forward(cli_train_sample *s, const qe_comm_blob *blobs, int nblobs)
{
	int S = s->names.nstages;
	const float **at = calloc((size_t)S, sizeof(*at));
	if (!at)
		return qe_fail(QE_ENOMEM, "--sample-every: out of memory");
	int rc = QE_OK;
	for (int i = 0; i < nblobs && !rc; i++) {
		const char *p = blobs[i].data, *end = p + blobs[i].size;
		while (p < end && !rc) {
			sample_rec h;
			if ((size_t)(end - p) < sizeof(h)) {
				rc = qe_fail(QE_EINVAL, "--sample-every: rank %d sent a cut record", i);
				break;
			}
			memcpy(&h, p, sizeof(h));
			p += sizeof(h);
			if (h.stage < 0 || h.stage >= S || h.floats != s->names.param_floats[h.stage] ||
			    (size_t)(end - p) < (size_t)h.floats * 4)
				rc = qe_fail(QE_EINVAL,
					     "--sample-every: rank %d sent stage %d with %lld floats; the naming table has %d "
					     "stages",
					     i, h.stage, (long long)h.floats, S);
			else
				at[h.stage] = (const float *)(const void *)p;
			p += (size_t)h.floats * 4;
		}
	}
	for (int st = 0; st < S && !rc; st++)
		if (!at[st])
			rc = qe_fail(QE_EINVAL, "--sample-every: no rank sent stage %d's parameters", st);
	const qe_names *one = qe_infer_names(s->m);
	float *dst = qe_infer_params(s->m);
	for (int i = 0; i < one->nparams && !rc; i++) {
		const qe_named *e = &one->t[i];
		const qe_named *from = qe_names_find(&s->names, e->name);
		if (!from || qe_named_floats(from) != qe_named_floats(e))
			rc = qe_fail(QE_EINVAL, "--sample-every: tensor '%s' of the forward is not in the training cut",
				     e->name);
		else
			memcpy(dst + e->offset, at[from->stage] + from->offset, (size_t)qe_named_floats(e) * 4);
	}
	free(at);
	return rc ? rc : qe_infer_load(s->m);
}

/* TEXT for the line: C escapes for backslash and the control bytes, so one sample is one line. */
static void print_escaped(const char *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c == '\\')
			fputs("\\\\", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			fputc(c, stdout);
	}
}

/* Rank 0: draw and print the sample of step `step` from the filled forward. */
static int print_sample(cli_train_sample *s, int64_t step)
{
	qe_tokbuf hist = { 0 };
	char *raw = NULL, *text = NULL;
	size_t raw_len = 0, text_len = 0;
	cli_gen g = { s->tokens, 1.0, 0, (s->run_seed + (uint64_t)step) & INT64_MAX };
	int decode = s->dec || s->bytes;
	int rc = qe_tokbuf_push(&hist, s->start);
	if (!rc)
		rc = cli_generate(s->m, &hist, &g, NULL);
	/* the start token is not part of the text, as `qeffect sample` shows an empty prompt's */
	const int32_t *ids = hist.v + 1;
	size_t nids = hist.n ? hist.n - 1 : 0;
	if (!rc && decode && !(rc = cli_tokens_bytes(s->dec, ids, nids, &raw, &raw_len)))
		rc = qe_utf8_lossy(raw ? raw : "", raw_len, &text, &text_len);
	if (rc)
		goto release;
	if (s->json) {
		json_t *o = json_pack("{s:s,s:I,s:I}", "event", "sample", "step", (json_int_t)step, "seed",
				      (json_int_t)g.seed);
		json_object_set_new(o, "sample", decode ? json_stringn(text, text_len) : json_null());
		json_object_set_new(o, "ids", cli_ids_json(ids, nids));
		char *line = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		if (!line) {
			rc = qe_fail(QE_ENOMEM, "--sample-every: out of memory for the JSON line");
			goto release;
		}
		puts(line);
		free(line);
	} else {
		printf("sample at step %lld: ", (long long)step);
		if (decode)
			print_escaped(text, text_len);
		else
			for (size_t i = 0; i < nids; i++)
				printf("%s%d", i ? " " : "ids ", ids[i]);
		fputc('\n', stdout);
	}
	fflush(stdout);
release:
	free(text);
	free(raw);
	qe_tokbuf_release(&hist);
	return rc;
}

int cli_train_sample_step(cli_train_sample *s, qe_rank *r, int64_t step)
{
	if (!s || s->every <= 0 || step % s->every)
		return QE_OK;
	char *blob = NULL;
	size_t n = 0;
	qe_comm_blob *all = NULL, mine;
	qe_comm *comm = qe_rank_comm(r);
	int nblobs = comm ? qe_comm_world_size(comm) : 1;
	int rc = local_blob(r, &blob, &n);
	if (!rc && comm)
		rc = qe_comm_gather_blobs(comm, blob, n, &all);
	if (rc) {
		qe_fail_ctx(rc, "sample at step %lld", (long long)step);
		goto release;
	}
	if (!s->printer)
		goto release;
	mine = (qe_comm_blob){ blob, n };
	if ((rc = fill_forward(s, all ? all : &mine, nblobs)))
		goto release;
	if ((rc = print_sample(s, step))) {
		/* the weights gave no sample (a logit that is not finite): said, and training goes on */
		fprintf(stderr, "qeffect: sample at step %lld: %s (%s); training goes on\n", (long long)step,
			qe_last_error(), qe_errname(rc));
		qe_clear_error();
		rc = QE_OK;
	}
release:
	if (all)
		qe_comm_blobs_free(all, nblobs);
	free(blob);
	return rc;
}
