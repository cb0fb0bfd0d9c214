/*
 * names.h - every tensor of a checkpoint by its GPT-2 name: the one naming
 * table (DESIGN.md section 5, issue 37 item 1).
 *
 * A checkpoint stores one flat f32 array per global stage for each of
 * "params", "adam_m" and "adam_v" (the parameter buffer's layout, see
 * qe_model_param_table) and one "fp8_meta" array ([linear, role, L + 2]).
 * This table says which floats of which stage's array are which tensor of
 * the model, so a name - not a stage - is the address, under any cut of the
 * model into stages.  The names are Hugging Face's GPT2Model names, plus the
 * untied head:
 *
 *   wte.weight [vocab, C]            wpe.weight [seq, C]
 *   h.N.ln_1.weight, h.N.ln_1.bias [C]
 *   h.N.attn.c_attn.weight [3C, C]   h.N.attn.c_attn.bias [3C]
 *   h.N.attn.c_proj.weight [C, C]    h.N.attn.c_proj.bias [C]
 *   h.N.ln_2.weight, h.N.ln_2.bias [C]
 *   h.N.mlp.c_fc.weight [ffn, C]     h.N.mlp.c_fc.bias [ffn]
 *   h.N.mlp.c_proj.weight [C, ffn]   h.N.mlp.c_proj.bias [C]
 *   ln_f.weight, ln_f.bias [C]       lm_head.weight [vocab, C]
 *
 * Shapes are as qeffect holds the tensors: a linear's weight is [out, in]
 * (Y = X W^T, llm.c's orientation; Hugging Face's Conv1D stores the
 * transpose, see conv1d).  wte and lm_head have the real vocabulary's rows:
 * the rows padding the vocabulary to a multiple of 128 follow them in the
 * stage's array (stored_rows) and are not part of the named tensor.  "wte"
 * and "wpe" are accepted as short names of wte.weight and wpe.weight.
 *
 * Tied embeddings (qe_model_config.tie_embeddings, the gpt2 presets'
 * default): the head is the token embedding, but the model still holds two
 * copies, wte on the first stage and the head on the last, which training
 * keeps byte-identical (runtime/exec/tie.c), their AdamW moments too.  The
 * table names both, each at its own place, so every stage array stays
 * named; lm_head.weight, lm_head.weight.exp_avg and .exp_avg_sq are marked
 * tied: wte's copy, not a tensor of the model's own.  What leaves qeffect
 * (export) writes the tied tensor once, as wte; what comes in (--init-from)
 * fills both copies from wte.  The head's FP8 meta (lm_head.fp8.*) is its
 * own in either case: the head is an FP8 linear, wte a lookup.
 *
 * AdamW moments: NAME.exp_avg (first moment, "adam_m") and NAME.exp_avg_sq
 * (second moment, "adam_v") of every parameter NAME, PyTorch's state names,
 * same shape and layout.  FP8 meta of each linear M (M is the weight's name
 * without ".weight": h.N.attn.c_attn ... lm_head) and role R (input, weight,
 * grad_output): M.fp8.R.amax_history [L] (index 0 the slot the next step
 * fills, see fp8.h's roll), M.fp8.R.scale [1], M.fp8.R.scale_inv [1].
 */
#ifndef QE_MODEL_NAMES_H
#define QE_MODEL_NAMES_H

#include <stdint.h>

#include "runtime/model/model.h"

/* The per-stage checkpoint array a named tensor's floats are in. */
typedef enum qe_name_source {
	QE_NAME_PARAMS = 0, /* "params" */
	QE_NAME_ADAM_M,     /* "adam_m" */
	QE_NAME_ADAM_V,     /* "adam_v" */
	QE_NAME_FP8_META,   /* "fp8_meta" */
	QE_NAME_SOURCES
} qe_name_source;
/* The checkpoint tensor name of a source ("params", ...). */
const char *qe_name_source_array(qe_name_source s);

/* llm.c's parameter tensors, in its file's order. */
enum { QE_LLMC_TENSORS = 16 };

typedef struct qe_named {
	char name[64];
	qe_name_source source;
	int stage;           /* global stage whose array holds it */
	int64_t offset;      /* floats from the start of that array */
	int ndim;            /* 1 or 2 */
	int64_t shape[2];    /* shape[1] is 1 when ndim is 1 */
	int64_t stored_rows; /* rows in the array: shape[0], or the padded vocabulary for wte and lm_head */
	int conv1d;          /* a linear's weight (or its moment): Hugging Face stores it transposed, [in, out] */
	int llmc;            /* index in llm.c's parameter order (0 wte ... 15 lnfb), -1: not in llm.c's file */
	int layer;           /* the block h.N, -1 for wte, wpe, ln_f, lm_head */
	int linear;          /* a linear's weight: its index among the stage's linears (FP8 meta); else -1 */
	int param;           /* the parameter this entry belongs to (index in the table); itself for a parameter */
	int tied;            /* a tied model's head (lm_head.weight and its moments): wte's copy, kept
				byte-identical by training; not a tensor of its own */
} qe_named;

typedef struct qe_names {
	int n;
	qe_named *t;      /* parameters in model order, then exp_avg, exp_avg_sq, then FP8 meta */
	int nparams;      /* t[0..nparams) are the parameters */
	int nstages;
	int64_t *param_floats; /* per stage: floats of its "params" (and "adam_m", "adam_v") array */
	int64_t *fp8_floats;   /* per stage: floats of its "fp8_meta" array */
} qe_names;

/*
 * The table of a model cut into nstages virtual stages, with FP8 meta of
 * history length history_len.  QE_EINVAL for a bad shape or cut.  OUT *out:
 * released with qe_names_release() (also after a failure).
 */
int qe_model_names(const qe_model_config *cfg, int nstages, int history_len, qe_names *out);
void qe_names_release(qe_names *n);
/* The entry named name (or its short name), NULL when none. */
const qe_named *qe_names_find(const qe_names *n, const char *name);
/* Floats of the named tensor (shape[0] x shape[1]). */
static inline int64_t qe_named_floats(const qe_named *e)
{
	return e->shape[0] * e->shape[1];
}

#endif
