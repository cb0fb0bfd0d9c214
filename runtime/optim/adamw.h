/*
 * adamw.h - AdamW with fp32 master weights, fused with the reduction of the
 * per-microbatch gradients in microbatch order.
 *
 * The moments share the stage's parameter layout (qe_param_info.offset), so
 * a checkpoint saves them as two typed arrays beside the parameters.  The
 * reduction order is fixed (microbatch 0, 1, ...: grad = g0, then grad +=
 * g1, += g2, ... in fp32), so the update does not depend on the order in
 * which a schedule ran dW.  With the accumulating gradient arena a matrix
 * arrives as one view that already holds that same sum (dW of mb 0 wrote
 * g0, each later dW added g_m), and the reduction of one view is the view.
 *
 * A step is one backend op for the whole stage (adamw_many: one segment per
 * parameter; cuda: one launch), whose bytes are those of one adamw op per
 * parameter.
 */
#ifndef QE_ADAMW_H
#define QE_ADAMW_H

#include "runtime/model/model.h"

/* The learning rate's shape over the steps after warmup (qe_adamw_lr_at). */
typedef enum qe_lr_schedule { QE_LR_CONSTANT = 0, QE_LR_COSINE, QE_LR_LINEAR } qe_lr_schedule;

/*
 * AdamW's hyperparameters and the learning-rate schedule.  Weight decay
 * applies to the matrices and the embeddings, not to biases or layernorm
 * weights (qe_param_info.decay), as llm.c and nanoGPT do.
 */
typedef struct qe_adamw_config {
	float lr, beta1, beta2, eps, weight_decay;
	int lr_schedule;     /* qe_lr_schedule */
	int64_t warmup;      /* steps of linear warmup: lr (s + 1) / warmup at step s < warmup */
	float lr_min;        /* where cosine and linear end */
	int64_t decay_steps; /* the step where they reach lr_min (train's --steps unless given) */
	float grad_clip;     /* > 0: scale the gradients so their global norm is at most this; 0: off */
} qe_adamw_config;

qe_adamw_config qe_adamw_config_default(void);

/*
 * The learning rate of the update at 0-based step s (the steps done before
 * it): during warmup lr (s + 1) / warmup; then constant lr, or with
 * p = min(1, (s - warmup) / (decay_steps - warmup)) (1 when decay_steps <=
 * warmup): cosine lr_min + (lr - lr_min) (1 + cos(pi p)) / 2, linear
 * lr - (lr - lr_min) p.  Computed in double on the host, rounded to float
 * once: every rank and backend gets the same value, and a resume continues
 * the schedule exactly.
 */
float qe_adamw_lr_at(const qe_adamw_config *c, int64_t s);

/* "constant", "cosine", "linear"; "?" otherwise.  Parse: QE_EINVAL naming the value. */
const char *qe_lr_schedule_name(int k);
int qe_lr_schedule_parse(const char *s, int *out);

typedef struct qe_adamw {
	qe_backend *b;
	float *m, *v;   /* backend memory, n floats each */
	float *sumsq;   /* backend memory, one float per parameter: qe_adamw_grad_sumsq's results */
	int64_t n;
	int64_t step;   /* optimizer steps taken (persisted) */
	/* qe_adamw_step's table for adamw_many: host memory owned here, rewritten every step */
	qe_adamw_seg *segs;   /* one per parameter */
	int nsegs;
	const float **views;  /* the segments' view pointers, views_cap of them (grown as needed) */
	size_t views_cap;
	const float **grad_of; /* per parameter: NULL, or the one buffer holding its whole gradient (qe_adamw_set_grad) */
} qe_adamw;

/* Moments for a stage's parameter buffer, zero-initialized. Free with qe_adamw_free. */
int qe_adamw_create(qe_backend *b, const qe_stage *st, qe_adamw **out);
void qe_adamw_free(qe_adamw *a);

/*
 * One optimizer step of stage st, as one adamw_many op on s.
 * matrix_views[j * nmatrix_views + v] is view v of matrix j (the arena:
 * nmatrix_views = nmicro, microbatch v's gradient, or 1, the accumulated
 * sum); the non-matrix gradients come from the stage's own views
 * (qe_stage_nonmatrix_views: one per microbatch, or the one accumulated
 * sum).  The summed gradient is multiplied by grad_scale before the update.
 * a->step advances by one unless it fails: QE_EINVAL for nmicro outside
 * 1..256 or nmatrix_views neither 1 nor nmicro, QE_ENOMEM, or the op's
 * status (an argument error names the parameter).
 */
int qe_adamw_step(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views, int nmatrix_views,
		  int nmicro, const qe_adamw_config *cfg, float grad_scale);
/*
 * The same step, filling a->sumsq on the way with what qe_adamw_grad_sumsq
 * would (the same bytes) from the gradients the update reads: the gradient
 * norm without a second pass over them, when nothing has to be known
 * before the update (no clipping).
 */
int qe_adamw_step_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views,
			int nmatrix_views, int nmicro, const qe_adamw_config *cfg, float grad_scale);

/*
 * From now on parameter i's gradient is the one buffer grad (backend memory)
 * instead of its views: qe_adamw_step and qe_adamw_grad_sumsq read it, and
 * so does the data-parallel replica sum (qe_adamw_grad_of).  Tied embeddings use it for wte and the head,
 * whose gradient is the sum of both (runtime/exec/tie.c).  grad NULL: the
 * views again.
 */
void qe_adamw_set_grad(qe_adamw *a, int i, const float *grad);
/* parameter i's gradient buffer set by qe_adamw_set_grad, or NULL. */
const float *qe_adamw_grad_of(const qe_adamw *a, int i);

/*
 * For --grad-clip: the squared norm of each parameter's gradient, as
 * qe_adamw_step with these arguments would apply it (the views summed in
 * order, times grad_scale), into a->sumsq[i] for parameter i (backend
 * memory; the caller copies it back).  The step does not advance.  The
 * backend's grad_sumsq op fixes the order of every addition, so a
 * parameter's value does not depend on the stage it sits in.
 */
int qe_adamw_grad_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, const float *const *matrix_views, int nmatrix_views,
			int nmicro, const qe_adamw_config *cfg, float grad_scale);
/* The same for parameter i alone, from one gradient buffer (the data parallel replica sum), into a->sumsq[i]. */
int qe_adamw_param_sumsq(qe_adamw *a, qe_stream *s, qe_stage *st, int i, const float *grad, float grad_scale);

/*
 * The factor --grad-clip puts on the gradients: clip / (norm + 1e-6) when
 * norm > clip > 0 (as PyTorch's clip_grad_norm_), else 1; in double, rounded
 * to float once.
 */
float qe_adamw_clip_factor(float clip, double norm);

#endif
