/*
 * infer.h - the model's forward for one token at a time, with cached keys and
 * values per layer: what `qeffect sample` generates with (issue 37, item 6).
 *
 * A plain fp32 forward on the host, written out loop by loop, beside the
 * staged forward of the op table (stage_forward.c), not through it: sampling
 * runs one row at a time on one process, and needs neither tapes, FP8 casts
 * nor pipeline stages.  It computes what the model computes at f32
 * precision, as tests/cli/lib/gpt2_forward.py writes it down: x = wte[token]
 * + wpe[pos]; per block (pre-norm) x += proj(attn(qkv(LN1(x)))), x +=
 * fc2(gelu(fc1(LN2(x)))), layernorm eps 1e-5 with the biased variance, GELU's
 * tanh approximation, causal attention scaled by 1/sqrt(head dim) over the
 * cached positions; then LN_f and the head.  Logits are computed for the real
 * vocabulary only: the rows padding it to a multiple of 128 have no logit, so
 * they can never be sampled.  A model trained at fp8 or bf16 is run here on
 * its fp32 master weights (what export writes), so its logits differ from its
 * training forward's by that quantization.
 *
 * The parameters are one buffer in the layout of a one-stage cut of the
 * model (the naming table qe_model_names(cfg, 1, ...)), which the caller fills
 * by name from wherever they come from (a checkpoint cut into any number of
 * stages).  The head is lm_head.weight (a tied model's is wte's copy, the
 * same bytes), or wte.weight for a table without a head.
 *
 * Two forwards, one handle: created without a backend it runs the loops of
 * infer.c on the host (the reference: what `qeffect sample` runs by
 * default, and what `train --sample-every` runs); created on a backend it
 * runs the same computation through the op table (infer_dev.c: one GEMM
 * per linear with m = 1, layernorm_fwd, gelu_fwd, add, attn_decode over a
 * cache in backend memory), the logits copied back to the host after each
 * step.  One handle rather than a second type, so that the generator
 * (cli/train_sample.h), the sampler and the cache restart stay one code
 * path whichever forward feeds them.  On the cpu backend the op-table
 * forward gives the host forward's logits to within GELU's rounding (the
 * backend's GELU is the exp form of the same tanh approximation,
 * cpu_kernels.c; every other op sums in the same order), checked by
 * tests/model/test_infer_dev.c; cuda's GEMMs, layernorm and attention sum
 * in other orders (tests/cli/sample_cuda.sh states the bound).
 *
 * A qe_infer is single-threaded state; use one per thread.
 */
#ifndef QE_MODEL_INFER_H
#define QE_MODEL_INFER_H

#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/model/model.h"
#include "runtime/model/names.h"

typedef struct qe_infer qe_infer;

/*
 * A forward for model cfg with a key/value cache of cfg->seq positions (the
 * rows of wpe) and zero parameters, on the host (b NULL) or on backend b
 * (parameters, cache and activations in its memory, one stream of its
 * own; b is the caller's and must outlive the forward).  Codes: QE_EINVAL
 * (the shape fails qe_model_config_check, or the table lacks a tensor the
 * forward needs), QE_ENOMEM, and on a backend its alloc's and
 * stream_create's.  OUT *out: freed with qe_infer_free (NULL after a
 * failure).
 */
int qe_infer_create(const qe_model_config *cfg, qe_backend *b, qe_infer **out);
void qe_infer_free(qe_infer *m);

/*
 * The naming table of the parameter buffer (one stage) and the buffer
 * itself (t->param_floats[0] floats, zero at create): fill entry e's floats
 * at qe_infer_params(m) + e->offset, e.g. with cli_named_read, then call
 * qe_infer_load.  Both live as long as m.
 */
const qe_names *qe_infer_names(const qe_infer *m);
float *qe_infer_params(qe_infer *m);

/*
 * Make what was written at qe_infer_params(m) the weights the next steps
 * use: on a backend, one copy into its memory (returns when it is done);
 * on the host, nothing (the host forward reads that buffer itself).  Call
 * it after every refill.  Codes: the backend's copy.
 */
int qe_infer_load(qe_infer *m);

/* The model's configuration (real vocabulary, seq: the cache's length). */
const qe_model_config *qe_infer_config(const qe_infer *m);
/* Positions in the cache: tokens fed since create or the last reset. */
int qe_infer_pos(const qe_infer *m);
/* Empty the cache: the next token is at position 0. */
void qe_infer_reset(qe_infer *m);

/*
 * Feed token at position qe_infer_pos(m) and, when logits is not NULL, write
 * the next token's logits there (cfg->vocab floats, the real vocabulary).
 * Codes: QE_EINVAL (token outside [0, vocab), or the cache is full: pos ==
 * seq; nothing changes), QE_ENUMERIC (a logit is not finite: the weights are
 * damaged or diverged; the position was consumed), and on a backend its
 * ops' codes (QE_ECUDA ...: the forward is then failed; free it).
 */
int qe_infer_step(qe_infer *m, int32_t token, float *logits);

#endif
