/*
 * train_sample.h - text from the model's weights (issue 37, item 6): the
 * token generator that `qeffect sample` (from a checkpoint) and `qeffect
 * train --sample-every K` (from the live weights) both draw with, and the
 * training hook of the latter.
 *
 * The generator runs the host forward of runtime/model/infer.h with the
 * counter-based generator of runtime/core/rng.h: one 53-bit uniform per
 * drawn token, so weights, start tokens, seed, temperature and top-k name
 * the tokens.  The hook gathers every stage's fp32 parameters to rank 0
 * after every K-th optimizer step, fills a one-stage forward by name (the
 * naming table, runtime/model/names.h) and prints what it draws; it only
 * reads the parameters, so training runs the same bytes with or without it.
 */
#ifndef CLI_TRAIN_SAMPLE_H
#define CLI_TRAIN_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/exec/rank.h"
#include "runtime/job/detok.h"
#include "runtime/job/tokenizer.h"
#include "runtime/model/infer.h"

#define CLI_GPT2_VOCAB 50257 /* GPT-2's BPE: <|endoftext|> (QE_GPT2_EOT) starts an empty prompt */
#define CLI_BYTE_VOCAB 256   /* bytes */
#define CLI_BYTE_START 10    /* '\n': what the byte loader puts after each document */

/* How tokens are drawn. */
typedef struct cli_gen {
	long tokens;        /* tokens to draw, >= 0 */
	double temperature; /* logits / T before the softmax; 0: greedy (the lowest id on a tie) */
	long top_k;         /* draw among the K largest logits only; 0: all */
	uint64_t seed;      /* the generator's seed */
} cli_gen;

/*
 * Feed hist's tokens (at least one) to m from an empty cache, then draw
 * g->tokens tokens, each appended to hist and fed in turn.  Past the
 * model's seq the cache restarts from the last seq/2 tokens.  logprobs (may
 * be NULL): g->tokens doubles, each drawn token's natural log probability
 * under the model (before temperature and top-k).  Codes: those of
 * qe_infer_step (QE_EINVAL: a token outside the vocabulary; QE_ENUMERIC: a
 * logit that is not finite), QE_ENOMEM.  hist keeps what was drawn before a
 * failure; the caller releases it.
 */
int cli_generate(qe_infer *m, qe_tokbuf *hist, const cli_gen *g, double *logprobs);

/*
 * The bytes of tokens t[0..n) appended to *buf (NUL-terminated, *len bytes
 * before the NUL; grown with realloc, freed by the caller with free): d's
 * bytes of each id, or each id as one byte when d is NULL (a byte
 * vocabulary).  Codes: QE_EINVAL (an id d does not know), QE_ENOMEM.
 */
int cli_tokens_bytes(const qe_gpt2_detok *d, const int32_t *t, size_t n, char **buf, size_t *len);

/* t[0..n) as a new JSON array of integers (the caller owns the reference). */
json_t *cli_ids_json(const int32_t *t, size_t n);

/* ---- train --sample-every ------------------------------------------------- */

/* The hook's state on one rank process. */
typedef struct cli_train_sample cli_train_sample;

/*
 * A hook for rank r that samples after every every-th step (every > 0):
 * tokens tokens from the start token (<|endoftext|> for GPT-2's vocabulary,
 * '\n' for bytes, else 0), at temperature 1 over the whole vocabulary, with
 * seed (the run's seed + the step) - what `qeffect sample --step S --seed
 * (seed + S) --tokens N` draws from a checkpoint of step S.  Rank 0 prints
 * one line a sample on stdout, "sample at step S: TEXT" (C escapes for
 * backslash, newline, tab and the other control bytes), or with json
 * {"event":"sample","step":S,"seed":X,"sample":TEXT,"ids":[...]}.  TEXT is
 * decoded with GPT-2's encoder.json (looked for as `qeffect sample` does,
 * cli/encoder_dir.h) or as bytes; a vocabulary that cannot be decoded gets
 * the ids ("sample": null) and one line on stderr saying why.  Every rank
 * opens one.  Codes (rank 0): QE_EINVAL (a model the host forward does not
 * run), QE_ENOMEM.  OUT *out: closed with cli_train_sample_close (NULL after
 * a failure).
 */
int cli_train_sample_open(qe_rank *r, long every, long tokens, int json, cli_train_sample **out);

/*
 * After optimizer step `step` (steps done): nothing unless step is a
 * multiple of the hook's every; else collective over every rank: each
 * copies its chunks' parameters to the host (replicas other than 0 send
 * nothing) and rank 0 gathers, generates and prints.  A generation that
 * fails on rank 0 (weights that give a logit that is not finite) prints why
 * on stderr and returns 0: training goes on.  Codes: the backend's copy,
 * QE_ECOMM, QE_ENOMEM, QE_EINVAL (a stage's parameters do not match the
 * naming table).  s may be NULL (no hook: 0).
 */
int cli_train_sample_step(cli_train_sample *s, qe_rank *r, int64_t step);

void cli_train_sample_close(cli_train_sample *s);

#endif
