/*
 * model_int.h - the layout of a stage's memory, shared by the files of
 * runtime/model.  Everything is carved out of a few backend allocations at
 * create time, so every address is fixed for the stage's lifetime (what
 * graph capture needs).
 */
#ifndef QE_MODEL_INT_H
#define QE_MODEL_INT_H

#include "runtime/model/model.h"

#define QE_MAX_PARAMS 24

/* What one slot retains for one linear layer. */
typedef struct lin_tape {
	qe_tensor xq_col;  /* input, transposed copy [in, T] (dW operand) */
	qe_tensor dyq_col; /* output gradient, transposed copy [out, T] (dW operand) */
	float *x_sinv;     /* scale_inv of the input cast */
	float *dy_sinv;    /* scale_inv of the output-gradient cast */
} lin_tape;

typedef struct slot_tape {
	int32_t *tokens, *targets;
	float *x_in, *mean1, *rstd1, *qkv, *probs, *x_mid, *mean2, *rstd2, *fc1_out, *x_out;
	float *meanf, *rstdf, *logits, *loss;
	float *dout, *dx_in;
	lin_tape lin[QE_LIN_MAX];
} slot_tape;

typedef struct lin_info {
	int in, out;     /* W is [out, in] */
	int param;       /* parameter index of W */
	int bias;        /* parameter index of b, or -1 */
	int current;     /* current scaling (head_current on the head) */
	qe_tensor wq_row, wq_col; /* weight cache */
	float *w_sinv;
} lin_info;

struct qe_stage {
	qe_backend *b;
	qe_model_config cfg;
	qe_precision prec;
	int stage, nstages, nslots, nmicro;
	int first, last;

	int nparams;
	qe_param_info params[QE_MAX_PARAMS];
	int64_t param_floats, nonmatrix_floats;
	int nmatrices;
	int matrix_param[QE_LIN_MAX];
	float *param_buf;    /* param_floats */
	float *grad_buf;     /* nmicro x nonmatrix_floats */
	int32_t *tok_written; /* first stage: nmicro x seq token ids whose wte-gradient rows are non-zero */

	int nlin;
	lin_info lin[QE_LIN_MAX];
	float *meta;         /* nlin x 3 role blocks */
	int64_t meta_floats;

	void *slot_mem;
	size_t slot_bytes;
	slot_tape *slots;    /* host array of nslots layouts */

	void *ws_mem;        /* workspace */
	float *ws_h[3], *ws_g[2], *ws_big[2];
	void *ws_q;          /* row-wise cast of the current GEMM operand */
	void *cache_mem;     /* weight cache */

	/* parameter indices used by the actions */
	int p_wte, p_wpe, p_ln1w, p_ln1b, p_ln2w, p_ln2b, p_lnfw, p_lnfb;
};

#endif
