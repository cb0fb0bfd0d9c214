/*
 * cmd_sample.c - `qeffect sample --run-dir R [--step S] [--prompt TEXT]
 * [--tokens N] [--temperature T] [--top-k K] [--seed S] [--backend cpu|cuda]
 * [--json]`: text from a committed checkpoint (issue 37, item 6).
 *
 * The parameters are read by name (cli/named.h) from whatever cut into
 * stages wrote the checkpoint, into one process's forward with a key/value
 * cache (runtime/model/infer.h): the host forward by default, or with
 * --backend cuda the same forward through the cuda backend's op table, the
 * weights and the cache in GPU memory and only the logits copied back; the
 * sampler stays on the host either way.  The vocabulary decides the
 * tokens: 50257 is GPT-2's BPE (runtime/job/tokenizer.h to encode,
 * runtime/job/detok.h to decode), 256 is bytes; any other is refused before
 * a weight is read.  Sampling draws from the counter-based generator
 * (runtime/core/rng.h), one 53-bit uniform per token, so a seed names its
 * text; the generator is cli/train_sample.h's, which `train
 * --sample-every` draws with too.  When prompt and continuation outgrow the
 * model's context (seq), the cache is rebuilt from the last seq/2 tokens and
 * generation goes on.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/encoder_dir.h"
#include "cli/named.h"
#include "cli/run_args.h"
#include "cli/train_sample.h"
#include "ckpt/query/ckpt_query.h"
#include "runtime/core/status.h"
#include "runtime/job/detok.h"
#include "runtime/backend/backend.h"
#include "runtime/job/tokenizer.h"
#include "runtime/model/infer.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect sample --run-dir DIR [--step S] [--prompt TEXT] [--tokens N]\n"
		"                      [--temperature T] [--top-k K] [--seed S] [--encoder-dir DIR]\n"
		"                      [--backend cpu|cuda] [--json]\n\n"
		"Generate text from a committed checkpoint (default: the latest; --step S the one at S), whatever\n"
		"pipeline mapping wrote it: its fp32 weights are read by name into one process, and tokens are\n"
		"generated one at a time with cached keys and values.\n\n"
		"Tokens follow the model's vocabulary:\n"
		"  50257  GPT-2's byte-level BPE: the prompt is encoded as `tokenize` encodes text and the\n"
		"         continuation decoded with encoder.json; an empty prompt starts from <|endoftext|>\n"
		"         (50256).  The encoder files come from --encoder-dir DIR, else $QE_GPT2_ENCODER_DIR,\n"
		"         else " CLI_ENCODER_SUBDIR " beside this binary\n"
		"  256    bytes: the prompt's bytes in, bytes out; an empty prompt starts from '\\n' (10)\n"
		"Any other vocabulary is refused: there is no tokenizer to read its ids.\n\n"
		"  --prompt TEXT       text to continue (default: empty)\n"
		"  --tokens N          tokens to generate, 0..1000000 (default 64).  Past the model's seq, the\n"
		"                      cache restarts from the last seq/2 tokens\n"
		"  --temperature T     logits are divided by T before the softmax (default 1); 0: greedy, the\n"
		"                      largest logit (the lowest id on a tie), no random draw\n"
		"  --top-k K           draw among the K largest logits only (default 0: all)\n"
		"  --seed S            the generator's seed, >= 0 (default 1337): the same seed, checkpoint and\n"
		"                      flags give the same tokens\n"
		"  --backend cpu|cuda  where the forward runs (default cpu: fp32 loops on the host).  cuda: the\n"
		"                      same fp32 forward through the cuda backend (weights and cache in GPU\n"
		"                      memory, logits copied back; drawing stays on the host).  Its sums run in\n"
		"                      other orders, so its logits differ from the cpu's by rounding (about 1e-6\n"
		"                      of their size): the same seed repeats its text on cuda, and gives the cpu's\n"
		"                      text unless a draw falls within that rounding of a boundary\n"
		"  --json              one JSON object instead of text: prompt_tokens (the ids fed first),\n"
		"                      tokens (the generated ids), text (the generated text alone, invalid\n"
		"                      UTF-8 replaced by U+FFFD), logprobs (each generated token's natural log\n"
		"                      probability under the model: log softmax of the logits, before\n"
		"                      temperature and top-k), and run_id, step, seed, temperature, top_k\n"
		"Without --json, the prompt and the continuation are written to stdout as bytes, then a newline.\n"
		"Padding rows of the vocabulary have no logit and are never drawn.\n"
		"Exit status: 0 generated, 1 missing or damaged run or checkpoint, an unsupported vocabulary,\n"
		"missing encoder files or a cuda failure (no device), 2 bad usage (--backend cuda included, on a\n"
		"build without CUDA).\n");
}

typedef struct sample_flags {
	const char *dir, *prompt, *encoder_dir, *backend;
	long step, tokens, top_k, seed;
	double temperature;
	int json;
} sample_flags;

/* Parse argv into *sf.  Returns 0, 2 (bad usage, printed), or -1 for --help (printed). */
static int parse(int argc, char **argv, sample_flags *sf)
{
	*sf = (sample_flags){ .prompt = "", .step = -1, .tokens = 64, .seed = 1337, .temperature = 1.0 };
	int backend = 0; /* index into cli_backends */
	const cli_flag extra[] = {
		{ "step", 0, CLI_FLAG_LONG, &sf->step, .lo = 0, .hi = LLONG_MAX },
		{ "prompt", 0, CLI_FLAG_STRING, .dst = &sf->prompt },
		{ "tokens", 0, CLI_FLAG_LONG, &sf->tokens, .lo = 0, .hi = 1000000 },
		{ "temperature", 0, CLI_FLAG_DOUBLE, &sf->temperature, .dlo = 0, .dhi = HUGE_VAL },
		{ "top-k", 0, CLI_FLAG_LONG, &sf->top_k, .lo = 0, .hi = LLONG_MAX },
		{ "seed", 0, CLI_FLAG_LONG, &sf->seed, .lo = 0, .hi = LLONG_MAX },
		{ "encoder-dir", 0, CLI_FLAG_PATH, .dst = &sf->encoder_dir },
		{ "backend", 0, CLI_FLAG_CHOICE, &backend, .words = cli_backends },
		{ 0 },
	};
	int rc = cli_run_args_parse("sample", argc, argv, extra, &sf->dir, &sf->json);
	sf->backend = cli_backends[backend];
	if (rc < 0)
		help(stdout);
	return rc;
}

/* Read every parameter of the checkpoint into the forward's one-stage buffer, by name. */
static int load_weights(cli_named *nm, qe_infer *m)
{
	for (int i = 0; i < nm->names.nparams; i++) {
		const qe_named *e = &nm->names.t[i];
		const qe_named *to = qe_names_find(qe_infer_names(m), e->name);
		if (!to || qe_named_floats(to) != qe_named_floats(e))
			return qe_fail(QE_ECORRUPT, "tensor '%s' of the checkpoint has no place in the model's forward",
				       e->name);
		int rc = cli_named_read(nm, e, qe_infer_params(m) + to->offset);
		if (rc)
			return rc;
	}
	return qe_infer_load(m);
}

int cli_sample_main(int argc, char **argv)
{
	sample_flags sf;
	int rc = parse(argc, argv, &sf), status = 1;
	if (rc)
		return rc < 0 ? 0 : rc;
	ckpt_run *r = NULL;
	cat_ckpt ck = { 0 };
	cat_tensor_rows tr = { 0 };
	cli_named nm = { 0 };
	qe_gpt2 *enc = NULL;
	qe_gpt2_detok *dec = NULL;
	qe_infer *m = NULL;
	qe_backend *be = NULL;
	qe_tokbuf hist = { 0 };
	double *lps = NULL;
	char *text = NULL, *prompt_text = NULL, *clean = NULL;
	size_t text_len = 0, prompt_len = 0, clean_len = 0;
	char what[4400];
	/* The host forward needs no backend; cuda is opened first, so a build without it is a usage error. */
	snprintf(what, sizeof(what), "--backend %s", sf.backend);
	if (strcmp(sf.backend, "cuda") == 0 && (rc = qe_backend_open("cuda", &be))) {
		if (rc == QE_EUNSUPPORTED) {
			fprintf(stderr, "qeffect sample: --backend cuda: %s\n", qe_last_error());
			return 2;
		}
		goto fail;
	}
	if ((rc = cli_named_checkpoint(sf.dir, sf.step, "sampled", &r, &ck, &tr, &nm, what, sizeof(what))))
		goto fail;
	const qe_model_config *mc = &nm.cfg.model;
	int V = mc->vocab, gpt2 = V == CLI_GPT2_VOCAB;
	if (!gpt2 && V != CLI_BYTE_VOCAB) {
		rc = qe_fail(QE_EUNSUPPORTED,
			     "the model's vocabulary has %d tokens, and sample reads only GPT-2's BPE (50257) and bytes (256): "
			     "there is no tokenizer for its ids",
			     V);
		goto fail;
	}

	/* The prompt's tokens: GPT-2 BPE or bytes; an empty prompt starts from EOT or '\n'. */
	size_t plen = strlen(sf.prompt);
	if (gpt2) {
		char encdir[4096];
		const char *from;
		cli_encoder_dir(sf.encoder_dir, encdir, sizeof(encdir), &from);
		snprintf(what, sizeof(what), "GPT-2's encoder files in '%s' (%s; the model's vocabulary is 50257)", encdir,
			 from);
		if ((rc = qe_gpt2_detok_open(encdir, &dec)) || (rc = qe_gpt2_open(encdir, &enc)))
			goto fail;
		if (qe_gpt2_detok_size(dec) != CLI_GPT2_VOCAB) {
			rc = qe_fail(QE_ECORRUPT, "encoder.json has %d ids, GPT-2's has %d", qe_gpt2_detok_size(dec),
				     CLI_GPT2_VOCAB);
			goto fail;
		}
		snprintf(what, sizeof(what), "--prompt");
		if ((rc = plen ? qe_gpt2_encode(enc, sf.prompt, plen, &hist) : qe_tokbuf_push(&hist, QE_GPT2_EOT))) {
			if (rc == QE_EINVAL) {
				fprintf(stderr, "qeffect sample: --prompt: %s\n", qe_last_error());
				status = 2;
				goto release;
			}
			goto fail;
		}
	} else {
		for (size_t i = 0; i < plen && !rc; i++)
			rc = qe_tokbuf_push(&hist, (unsigned char)sf.prompt[i]);
		if (!rc && !plen)
			rc = qe_tokbuf_push(&hist, CLI_BYTE_START);
		if (rc)
			goto fail;
	}
	size_t nprompt = hist.n;

	snprintf(what, sizeof(what), "%s: checkpoint step %lld", sf.dir, (long long)ck.step);
	lps = malloc(((size_t)sf.tokens + 1) * sizeof(double));
	if (!lps) {
		rc = qe_fail(QE_ENOMEM, "out of memory for %ld log probabilities", sf.tokens);
		goto fail;
	}
	if ((rc = qe_infer_create(mc, be, &m)) || (rc = load_weights(&nm, m)))
		goto fail;

	/* The prompt, then one token at a time. */
	cli_gen g = { sf.tokens, sf.temperature, sf.top_k, (uint64_t)sf.seed };
	if ((rc = cli_generate(m, &hist, &g, lps)))
		goto fail;

	/* Text: the start token of an empty prompt is not part of it. */
	size_t shown = plen ? 0 : nprompt;
	if ((rc = cli_tokens_bytes(dec, hist.v + shown, nprompt - shown, &prompt_text, &prompt_len)) ||
	    (rc = cli_tokens_bytes(dec, hist.v + nprompt, hist.n - nprompt, &text, &text_len)))
		goto fail;
	if (sf.json) {
		if ((rc = qe_utf8_lossy(text ? text : "", text_len, &clean, &clean_len)))
			goto fail;
		json_t *o = json_pack("{s:s,s:I,s:I,s:f,s:I}", "run_id", ckpt_run_id(r), "step", (json_int_t)ck.step,
				      "seed", (json_int_t)sf.seed, "temperature", sf.temperature, "top_k",
				      (json_int_t)sf.top_k);
		json_object_set_new(o, "prompt_tokens", cli_ids_json(hist.v, nprompt));
		json_object_set_new(o, "tokens", cli_ids_json(hist.v + nprompt, hist.n - nprompt));
		json_object_set_new(o, "text", json_stringn(clean, clean_len));
		json_t *lp = json_array();
		for (long k = 0; k < sf.tokens; k++)
			json_array_append_new(lp, json_real(lps[k]));
		json_object_set_new(o, "logprobs", lp);
		char *s = json_dumps(o, JSON_COMPACT);
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		fwrite(prompt_text ? prompt_text : "", 1, prompt_len, stdout);
		fwrite(text ? text : "", 1, text_len, stdout);
		fputc('\n', stdout);
	}
	status = fflush(stdout) ? 1 : 0;
	goto release;
fail:
	status = cli_report("sample", rc, what);
release:
	free(clean);
	free(text);
	free(prompt_text);
	free(lps);
	qe_tokbuf_release(&hist);
	qe_infer_free(m);
	qe_backend_close(be);
	qe_gpt2_free(enc);
	qe_gpt2_detok_free(dec);
	cli_named_release(&nm);
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&ck);
	ckpt_run_close(r);
	return status;
}
