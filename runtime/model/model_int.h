/*
 * model_int.h - the layout of a stage's memory, shared by the files of
 * runtime/model.  Everything is carved out of a few backend allocations at
 * create time, so every address is fixed for the stage's lifetime (what
 * graph capture needs).
 *
 * A stage holds nblk consecutive blocks.  Its linears are numbered block by
 * block (4k + QE_LIN_QKV .. 4k + QE_LIN_FC2), then the head (last stage);
 * the FP8 meta, the weight cache and the tapes follow that numbering.  Block
 * k's output activation is block k+1's input (one buffer).
 */
#ifndef QE_MODEL_INT_H
#define QE_MODEL_INT_H

#include "runtime/model/model.h"

/* What one slot retains for one linear layer. */
typedef struct lin_tape {
	qe_tensor xq_col;  /* input, transposed copy [in, N] (dW operand) */
	qe_tensor dyq_col; /* output gradient, transposed copy [out, N] (dW operand) */
	float *x_sinv;     /* scale_inv of the input cast */
	float *dy_sinv;    /* scale_inv of the output-gradient cast */
} lin_tape;

/* What one slot retains for one block. */
typedef struct block_tape {
	/* the residual stream in act_dt: the block's input, its middle (after attention) and its output */
	void *x_in, *x_mid, *x_out;
	float *mean1, *rstd1, *mean2, *rstd2;
	void *qkv;     /* [N, 3H] in qe__stage_attn_dt; flash: without the QKV bias */
	void *fc1_out; /* [N, ffn] in st->act_dt, without FC1's bias */
	float *probs; /* probs attention: [batch, nh, T, T]; flash: the row log-sum-exp [batch, nh, T] */
	void *att;     /* flash: the attention output [N, H] in act_dt (the backward reads it); probs: NULL */
} block_tape;

typedef struct slot_tape {
	int32_t *tokens, *targets;
	block_tape *blk;   /* nblk; blk[k].x_in == blk[k-1].x_out */
	float *meanf, *rstdf, *loss;
	void *logits;      /* [N, vpad] in st->act_dt */
	float *xstats;     /* [N, 2] the rows' softmax statistics, from which the head's dY cast makes dlogits */
	void *dout, *dx_in; /* the gradients of the stage's output and input, in act_dt like the stream */
	lin_tape *lin;     /* nlin */
} slot_tape;

typedef struct lin_info {
	int in, out;     /* W is [out, in] */
	int kind;        /* QE_LIN_* */
	int param;       /* parameter index of W */
	int bias;        /* parameter index of b, or -1 */
	int current;     /* current scaling (head_current on the head) */
	qe_tensor wq_row, wq_col; /* weight cache */
	float *w_sinv;
} lin_info;

/* The parameters of one block. */
typedef struct block_info {
	int layer;                 /* global layer index */
	int ln1w, ln1b, ln2w, ln2b; /* parameter indices */
	int lin0;                  /* linear index of its QKV; PROJ, FC1, FC2 follow */
} block_info;

struct qe_stage {
	qe_backend *b;
	qe_model_config cfg;
	qe_precision prec;
	int stage, nstages, nslots, nmicro;
	int first, last;
	int nblk;            /* blocks in this stage */
	int64_t N;           /* tokens per microbatch: batch x seq */
	int vpad;            /* padded vocabulary */
	int flash;           /* attention keeps lse and the output, not the probabilities */
	/*
	 * The type of the activations stored in bf16 when the linears run in
	 * FP8 or bf16 (f32 under f32, the precision of gradient checks): each
	 * is a GEMM's output, rounded by the GEMM, whose consumers widen it.
	 * So far: the logits and their gradient (the loss reads bf16 and writes
	 * the gradient over them, the head's dY cast reads that), FC1's output
	 * (FC2's input cast and FC1's dY cast read it), FC2's input gradient
	 * (FC1's dY cast reads it), and with flash attention everything it
	 * reads and writes: qkv, its output, the projection's input gradient
	 * and qkv's gradient (qe__stage_attn_dt).  Everything else is f32.
	 */
	qe_dtype act_dt;
	/*
	 * Producers run inside their consumers.  Each layernorm before a linear
	 * writes its statistics alone and the linear's input cast normalizes;
	 * the MLP's FC1 bias and GELU run in the cast of FC2's input, and
	 * GELU's backward in the cast of FC1's dY (fc1_out holds the GEMM's
	 * output without the bias; neither GELU's output nor its input gradient
	 * is written); the attention projection's and FC2's biases join the
	 * residual adds (residual_add), the QKV bias flash attention's reads of
	 * qkv (qe__stage_qkv_bias); each bias gradient is summed by the cast of
	 * its dY; and the backward's residual joins are added by the layernorm
	 * backward that produces one of their terms.  Each fused form gives the
	 * bits of the ops it replaces (backend.h, qe_cast_args;
	 * tests/backend/test_fused.c).
	 */

	int nparams, cap_params;
	qe_param_info *params;  /* host, cap_params */
	int64_t param_floats, nonmatrix_floats;
	int nmatrices;
	int *matrix_param;      /* host, one per linear */
	float *param_buf;    /* param_floats */
	float *grad_buf;     /* nm_bufs x nonmatrix_floats */
	int32_t *tok_written; /* first stage: nm_bufs x N token ids whose wte-gradient rows are non-zero */
	int nm_accumulate;   /* non-matrix gradients: buffer 0 accumulates, buffer 1 is the scratch */
	int nm_bufs;         /* nmicro, or 2 when accumulating */
	int nm_next;         /* accumulating: the microbatch whose dI comes next (ascending order) */

	int nlin;
	lin_info *lin;          /* host, nlin */
	block_info *blocks;     /* host, nblk */
	qe_fp8_update_item *upd; /* host scratch of nlin x QE_ROLE_COUNT items for the role updates */
	float *meta;         /* nlin x 3 role blocks */
	int64_t meta_floats;

	void *slot_mem;
	size_t slot_bytes;
	slot_tape *slots;    /* host array of nslots layouts */
	block_tape *slot_blk; /* host, nslots x nblk */
	lin_tape *slot_lin;  /* host, nslots x nlin */

	void *ws_mem;        /* workspace */
	float *ws_h[3], *ws_g[2], *ws_big;
	void *ws_q;          /* row-wise cast of the current GEMM operand */
	void *cache_mem;     /* weight cache */

	/* parameter indices used by the actions (-1 where the stage has none) */
	int p_wte, p_wpe, p_lnfw, p_lnfb;
};

/* Linear lin's bias in the parameter buffer, or NULL when it has none. */
static inline const float *qe__stage_lin_bias(const qe_stage *st, int lin)
{
	int b = st->lin[lin].bias;
	return b >= 0 ? st->param_buf + st->params[b].offset : NULL;
}

/*
 * The QKV bias that flash attention adds as it reads qkv (the QKV GEMM then
 * leaves it out), or NULL when the GEMM adds it (the probs path).
 */
static inline const float *qe__stage_qkv_bias(const qe_stage *st, int qkv_lin)
{
	return st->flash ? qe__stage_lin_bias(st, qkv_lin) : NULL;
}

/* Scratch for the row-wise copy of a GEMM operand (stage_forward.c). */
qe_tensor qe__stage_ws_row(qe_stage *st, qe_dtype dt, int64_t r, int64_t c);
/* Update and roll roles r0..r1 of every delayed-scaled linear, in one op (stage_forward.c). */
int qe__stage_update_roles(qe_stage *st, qe_stream *s, qe_fp8_role r0, qe_fp8_role r1);
/* The cast arguments of an operand cast under the stage's precision (stage_forward.c). */
void qe__stage_cast_args(const qe_stage *st, const lin_info *L, float *role, int record, qe_cast_args *ca);

/*
 * The flash attention's tensor-core operands: bf16 when the linear layers
 * run in bf16 or FP8 (the attention then costs half of what TF32 does), TF32
 * under f32, the precision of gradient checks and references.
 */
static inline qe_flash_operands qe__stage_flash_operands(const qe_stage *st)
{
	return st->prec.mode == QE_PREC_F32 ? QE_FLASH_TF32 : QE_FLASH_BF16;
}

/*
 * The type of qkv, the attention's output and both their gradients: act_dt
 * with flash attention, which reads and writes them in that type, else f32
 * (attn_fwd/bwd).
 */
static inline qe_dtype qe__stage_attn_dt(const qe_stage *st)
{
	return st->flash ? st->act_dt : QE_F32;
}

#endif
