/*
 * model.h - the GPT stage, written once against the backend op table.
 *
 * A model of `layers` blocks is cut into S virtual stages of layers/S
 * consecutive blocks each (DESIGN.md section 5).  Stage 0 also holds the token
 * and position embeddings; the last stage also holds the final layernorm, the
 * output head and the loss.  A microbatch is `batch` sequences of `seq`
 * tokens, N = batch x seq rows in every activation; attention runs per
 * sequence.  The vocabulary is padded to a multiple of 128 rows (wte and the
 * head); the padded logits are masked out of the loss, so they never receive
 * probability mass and padding changes no result.  A qe_stage owns, in
 * backend memory:
 *   - its fp32 master parameters (one buffer, named views, qe_stage_param),
 *   - the FP8 meta of its linear layers (roles input/weight/grad_output,
 *     each a role block of fp8.h),
 *   - the FP8 weight cache (row-wise and transposed copies of each matrix),
 *   - nslots tape slots of fixed storage (activations and the retained
 *     FP8 copies dW needs), at fixed addresses for graph capture,
 *   - per-microbatch buffers for the non-matrix gradients,
 *   - a workspace shared by its actions.
 * Matrix gradients are written by dW into destinations the caller provides
 * (the gradient arena), one per matrix parameter.
 *
 * The physical actions below do no contract bookkeeping: the executor checks
 * the relations (runtime/contract) before each and commits after it.
 */
#ifndef QE_MODEL_H
#define QE_MODEL_H

#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/fp8/fp8.h"

typedef struct qe_model_config {
	char preset[16];
	int vocab;  /* real vocabulary: tokens and targets are below it */
	int hidden, ffn, heads, seq, layers;
	int batch;  /* sequences per microbatch */
	int attn;   /* qe_attn_mode: how attention keeps what its backward needs */
	/*
	 * The output head is the token embedding (GPT-2, nanoGPT, llm.c).  The
	 * first stage keeps wte and the last stage the head as two copies that
	 * training keeps identical: both start from wte's initialization, and
	 * each step both take the same gradient, (wte's summed over its views)
	 * + (the head's summed over its views), so the same AdamW update.
	 */
	int tie_embeddings;
} qe_model_config;

/*
 * Attention: probs saves the T x T probabilities per head (batched GEMMs
 * on cuda; fine at T <= 256); flash saves the output and the row log-sum-exp
 * and recomputes the probabilities in the backward (no T x T tensor; head
 * dimension 16, 32 or 64); auto picks flash for seq > 256 where the head
 * dimension allows it.
 */
typedef enum qe_attn_mode { QE_ATTN_AUTO = 0, QE_ATTN_PROBS = 1, QE_ATTN_FLASH = 2 } qe_attn_mode;
const char *qe_attn_mode_name(qe_attn_mode m);
int qe_attn_mode_parse(const char *s, qe_attn_mode *out);
/* The mode auto resolves to for this shape (probs or flash). */
qe_attn_mode qe_model_attn(const qe_model_config *c);

/*
 * "tiny", "small", "h2048", "h4096", "gpt2", "gpt2-medium", "gpt2-large",
 * "gpt2-xl" (batch 1).  QE_EINVAL names the unknown preset.
 */
int qe_model_preset(const char *name, qe_model_config *out);
/* Every dimension positive, hidden a multiple of heads; QE_EINVAL names the field. */
int qe_model_config_check(const qe_model_config *c);
/* The vocabulary rounded up to a multiple of 128: the rows of wte and the head. */
int qe_model_vocab_padded(const qe_model_config *c);
/* Tokens (activation rows) per microbatch: batch x seq. */
int64_t qe_model_tokens(const qe_model_config *c);
/*
 * The parameters the model trains, the vocabulary's padding rows left out:
 * wte, wpe; per block two layernorms, QKV, projection, FC1 and FC2 with
 * biases; the final layernorm and the output head (not counted again when
 * tied to wte).
 */
double qe_model_param_count(const qe_model_config *c);
/*
 * Training FLOPs per token, forward and backward, as nanoGPT and PaLM count
 * them: 6 N for the matrices (N: the parameters without the position
 * embedding) plus 12 L H T for attention's two products (the causal half
 * not taken off).
 */
double qe_model_flops_per_token(const qe_model_config *c);
/* Blocks per virtual stage when the model is cut into nstages; QE_EINVAL unless it divides. */
int qe_model_blocks_per_stage(const qe_model_config *c, int nstages, int *out);

/* GEMM operand precision of the linear layers. */
typedef enum qe_prec_mode { QE_PREC_F32 = 0, QE_PREC_BF16 = 1, QE_PREC_FP8 = 2 } qe_prec_mode;
const char *qe_prec_mode_name(qe_prec_mode m);
int qe_prec_mode_parse(const char *s, qe_prec_mode *out);

typedef struct qe_precision {
	/*
	 * fp8: matrix GEMMs in FP8 with delayed scaling; bf16: operands rounded to
	 * bf16 (nearest even), fp32 accumulation; f32: f32 GEMMs (gradient checks).
	 */
	qe_prec_mode mode;
	int head_current; /* fp8: the output head uses current scaling (no history) */
	qe_fp8_recipe recipe;
} qe_precision;

static inline int qe_prec_is_fp8(const qe_precision *p) { return p->mode == QE_PREC_FP8; }

/*
 * The kinds of linear layer.  A stage's linears are numbered block by block
 * (block k: 4k + QKV, PROJ, FC1, FC2), then the head on the last stage.
 */
enum { QE_LIN_QKV = 0, QE_LIN_PROJ, QE_LIN_FC1, QE_LIN_FC2, QE_LIN_HEAD, QE_LIN_KINDS };
const char *qe_linear_name(int kind);
/*
 * The name of linear lin of a stage with nlinear linears: "qkv" ... "head" when
 * the stage has one block, else "b<k>.qkv" ... (k the block within the stage).
 */
void qe_linear_label(int lin, int nlinear, char *buf, size_t len);

typedef struct qe_param_info {
	char name[24];     /* "qkv.w", "ln1.b", "wte", ...; "L<layer>.qkv.w" when a stage has several blocks */
	int64_t rows, cols; /* cols == 1 for vectors stored as [rows] */
	int64_t offset;    /* floats from the start of the parameter buffer */
	int is_matrix;     /* an FP8 GEMM weight: its gradient goes to the arena */
	int matrix_index;  /* index among the stage's matrices, or -1 */
	int64_t grad_offset; /* non-matrix: floats from the start of a microbatch grad buffer; else -1 */
	int decay;         /* weight decay applies */
	int linear;        /* the stage's linear index (see QE_LIN_*) for matrices, -1 otherwise */
	int layer;         /* global layer of the block it belongs to (wte, wpe: 0; lnf, head: layers - 1) */
} qe_param_info;

typedef struct qe_stage qe_stage;

/*
 * Create global stage `stage` of `nstages` (cfg->layers / nstages blocks) with
 * nslots tape slots, for steps of nmicro microbatches.  The non-matrix
 * gradients (embeddings, layernorms, biases) are one buffer per microbatch,
 * or with accumulate_nonmatrix one buffer that microbatch 0's dI writes and
 * every later microbatch's dI adds into, in ascending order (the accumulating
 * arena's rule for matrices; the same bits as the per-microbatch buffers
 * summed in order), plus one scratch buffer.  Parameters start zero: call
 * qe_stage_init_params.  *out is freed with qe_stage_free.
 */
int qe_stage_create(qe_backend *b, const qe_model_config *cfg, const qe_precision *prec, int stage, int nstages,
		    int nslots, int nmicro, int accumulate_nonmatrix, qe_stage **out);
void qe_stage_free(qe_stage *st);

int qe_stage_index(const qe_stage *st);
int qe_stage_is_first(const qe_stage *st);
int qe_stage_is_last(const qe_stage *st);
const qe_model_config *qe_stage_config(const qe_stage *st);

/* GPT-2 style initialization, a pure function of (seed, global layer, parameter), so every cut of the model into stages initializes the same model. */
int qe_stage_init_params(qe_stage *st, uint64_t seed);

/*
 * The parameter table of global stage `stage` of `nstages` without creating
 * the stage (no backend, no memory beyond the table): what qe_stage_param
 * would list, and the floats of its parameter buffer (the checkpoint's
 * "params", "adam_m" and "adam_v" arrays of that stage).  QE_EINVAL for a bad
 * shape or cut.  OUT *out: nparams entries, the caller frees it with free().
 */
int qe_model_param_table(const qe_model_config *cfg, int stage, int nstages, qe_param_info **out, int *nparams,
			 int64_t *param_floats);
int qe_stage_nparams(const qe_stage *st);
const qe_param_info *qe_stage_param(const qe_stage *st, int i);
int qe_stage_nmatrices(const qe_stage *st);
/* The parameter index of matrix j (0 <= j < nmatrices). */
int qe_stage_matrix_param(const qe_stage *st, int j);
float *qe_stage_params(qe_stage *st);            /* backend memory, qe_stage_param_floats floats */
int64_t qe_stage_param_floats(const qe_stage *st);
/* The fp32 parameter i as a tensor [rows, cols]. */
qe_tensor qe_stage_param_tensor(qe_stage *st, int i);

/* FP8 meta: nlinear x QE_ROLE_COUNT role blocks of qe_fp8_role_floats(L) floats. */
float *qe_stage_fp8_meta(qe_stage *st);
int64_t qe_stage_fp8_meta_floats(const qe_stage *st);
int qe_stage_nlinear(const qe_stage *st);
int qe_stage_nblocks(const qe_stage *st);
float *qe_stage_fp8_role(qe_stage *st, int lin, qe_fp8_role role);

/*
 * Per-slot input/output buffers, [N, hidden] (N = batch x seq): the
 * activations and their gradients in qe_stage_act_dtype (the residual
 * stream's type: f32 under --precision f32, else bf16).
 */
int32_t *qe_stage_slot_tokens(qe_stage *st, int slot);  /* [N]; first stage only */
int32_t *qe_stage_slot_targets(qe_stage *st, int slot); /* [N]; last stage only */
void *qe_stage_slot_input(qe_stage *st, int slot);      /* activation in; not on the first stage */
void *qe_stage_slot_output(qe_stage *st, int slot);     /* activation out */
void *qe_stage_slot_dout(qe_stage *st, int slot);       /* gradient of the output; not on the last stage */
void *qe_stage_slot_dinput(qe_stage *st, int slot);     /* gradient of the input; not on the first stage */
float *qe_stage_slot_loss(qe_stage *st, int slot);      /* [1]; last stage only */
qe_dtype qe_stage_act_dtype(const qe_stage *st);        /* the activations' type */
size_t qe_stage_act_bytes(const qe_stage *st);          /* bytes of one [N, hidden] activation or its gradient */
size_t qe_stage_slot_bytes(const qe_stage *st);         /* tape bytes of one slot */

/*
 * The step's non-matrix gradients (layout by qe_param_info.grad_offset) as
 * qe_stage_nonmatrix_views(st) views, to be summed in view order: one per
 * microbatch (view m is microbatch m's), or one (the accumulated sum).
 */
float *qe_stage_nonmatrix_grad(qe_stage *st, int view);
int qe_stage_nonmatrix_views(const qe_stage *st);
int64_t qe_stage_nonmatrix_floats(const qe_stage *st);

/*
 * F: forward of the slot's microbatch.  refresh_cache re-casts every matrix
 * into the FP8 weight cache first (the first F of a step).  Updates the
 * forward roles' scaling state at the end.
 */
int qe_stage_forward(qe_stage *st, qe_stream *s, int slot, int refresh_cache);
/*
 * Evaluation forward: re-casts the weight cache from the current weights and
 * runs F, recording no amax and updating no scaling state (held-out loss).
 */
int qe_stage_forward_eval(qe_stage *st, qe_stream *s, int slot);
/*
 * dI: input gradient and non-matrix gradients of microbatch m (written to
 * its non-matrix buffer), quantizing each dY exactly once and retaining the
 * transposed FP8 copies dW needs in the slot.  Updates the backward role.
 */
int qe_stage_backward_input(qe_stage *st, qe_stream *s, int slot, int m);
/*
 * dW: the matrix gradients from what dI retained, written to dests[j] for
 * matrix j (f32 [rows, cols] of that matrix): dests[j] = dW_j when
 * accumulate is 0 (GEMM beta = 0), dests[j] = dests[j] + dW_j when 1 (beta =
 * 1: dW_j computed in fp32 in the GEMM's fixed order, then one rounding for
 * the add; the accumulating gradient arena).  Never touches scaling state.
 */
int qe_stage_backward_weight(qe_stage *st, qe_stream *s, int slot, const qe_tensor *dests, int accumulate);
/* B: full backward, dI then dW (written, accumulate 0). */
int qe_stage_backward_full(qe_stage *st, qe_stream *s, int slot, int m, const qe_tensor *dests);

/* Expected shape of the gradient destination of matrix j. */
qe_tensor qe_stage_matrix_grad_shape(const qe_stage *st, int j);

#endif
