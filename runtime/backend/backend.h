/*
 * backend.h - the op table the model, contracts and executor are written against.
 *
 * A backend (cpu: the reference; cuda: the fast path) fills a qe_backend_ops
 * table.  Every compute op is enqueued on a stream and returns a status.  The
 * cpu backend executes an op at once unless its stream is capturing, in which
 * case it records the op with its arguments (pointers, not data) into a graph
 * and executes nothing - exactly like CUDA stream capture.  Allocation while
 * any stream of the backend captures fails with QE_ECAPTURE.
 *
 * Layout conventions: tensors are row-major.  Activations are f32, except
 * where an op says it takes bf16 (gemm's C, the cast's x, xent's logits).
 * The one GEMM is "TN": C[m,n] = A[m,k] * B[n,k]^T, computed as
 *   C = (sum_k A[i,k] * B[j,k]) * sa * sb  (+ bias[j]) (+ C if accumulate)
 * with fp32 accumulation over k in ascending order; sa = *A.scale_inv when A
 * is FP8, else 1 (same for B).  Each operand is f32, bf16 or FP8; a bf16 or
 * FP8 operand is widened exactly to fp32 (bf16 has no scale: its scale_inv is
 * not read), so a bf16 GEMM is the f32 GEMM of the rounded operands - bf16
 * operands with fp32 accumulation, as cuBLASLt computes it with
 * CUBLAS_COMPUTE_32F.  The cpu takes every pairing; cuda only f32 x f32,
 * bf16 x bf16 and FP8 x FP8 (cuda_gemm.cu).  The three GEMMs of a linear
 * layer Y = X W^T:
 *   forward  Y[N,out]  = X[N,in]    . W[out,in]^T          (X, W row-wise)
 *   dgrad    dX[N,in]  = dY[N,out]  . WT[in,out]^T         (W transposed copy)
 *   wgrad    dW[out,in]= dYT[out,N] . XT[in,N]^T           (dY, X transposed copies)
 *
 * A NULL stream names the backend's default stream: the op runs at once and
 * synchronously (used at setup, never while capturing).
 *
 * Ownership: streams, events and graphs are created and destroyed through the
 * table; memory from alloc is freed with free.  Tensor descriptors never own.
 */
#ifndef QE_BACKEND_H
#define QE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/tensor.h"
#include "runtime/fp8/fp8.h"

typedef struct qe_backend qe_backend;
typedef struct qe_stream qe_stream; /* backend-defined */
typedef struct qe_event qe_event;   /* backend-defined */
typedef struct qe_graph qe_graph;   /* backend-defined */
typedef struct qe_link qe_link;     /* backend-defined: a one-way device channel between two ranks */

/* Size of the opaque id two ranks share to open a link (NCCL's unique id). */
#define QE_LINK_ID_BYTES 128

typedef enum qe_copy_kind { QE_COPY_H2D = 0, QE_COPY_D2H = 1, QE_COPY_D2D = 2 } qe_copy_kind;

/* What the flash attention's products take as operands on tensor cores (attn_flash_fwd). */
typedef enum qe_flash_operands { QE_FLASH_TF32 = 0, QE_FLASH_BF16 = 1 } qe_flash_operands;

/* Arguments of the FP8, bf16 (or identity) cast. */
typedef struct qe_cast_args {
	qe_tensor x;        /* f32 or bf16 [rows, cols] input (bf16 is widened exactly first) */
	qe_tensor row;      /* out [rows, cols]; data NULL: not written */
	qe_tensor col;      /* out [cols, rows] transposed copy; data NULL: not written */
	/*
	 * Delayed scaling: *scale is applied, max|x| is max-ed into *amax
	 * (history row 0; may be NULL), 1/(*scale) is written to *scale_inv.
	 * Current scaling (current != 0): the scale is computed from max|x| of
	 * this very tensor (qe_fp8_scale_for_amax with fallback 1), written to
	 * *scale when scale is not NULL, and its inverse to *scale_inv.
	 * When row/col dtype is f32 the copy is exact (no scaling) and
	 * *scale_inv = 1.  When it is bf16 (2 bytes an element) each element
	 * is rounded to nearest even as qe_bf16_from_f32 (runtime/fp8/bf16.h)
	 * does - overflow to inf, every NaN to 0x7FFF, no flush of subnormals -
	 * with no scaling: scale, current and margin are not read and *scale is
	 * not written, and *scale_inv = 1.  For every output dtype (f32 and
	 * bf16 too) max|x| is max-ed into *amax when amax is not NULL, so an
	 * amax history keeps recording whatever the precision.
	 */
	float *scale;
	float *amax;
	float *scale_inv;
	int current;
	int margin;
	/*
	 * Prologue (the producer of x fused into its cast): each element is
	 * first the layernorm v = (rstd[r] * (x[r,c] - mean[r])) * w[c] + b[c]
	 * when pre_ln.mean is not NULL (mean, rstd: rows floats, from
	 * layernorm_fwd with y NULL; w, b: cols floats), then v + pre_bias[c]
	 * when pre_bias is not NULL (cols floats), then gelu_fwd(v) when
	 * pre_gelu, and that v is what the cast records and rounds.  The bytes,
	 * amax included, are those of the unfused ops - layernorm_fwd into a
	 * buffer, gemm's bias add, gelu_fwd - followed by the plain cast.
	 * The GELU backward instead (pre_dgelu, [rows, cols] like x; not with
	 * pre_ln or pre_gelu): x is the gradient of GELU's output and pre_dgelu
	 * GELU's input, whose bias pre_bias (if any) is added to it first:
	 * v = the bytes gelu_bwd(dx, u, x) writes, u = pre_dgelu + pre_bias
	 * (gemm's f32 add).  pre_dgelu is of pre_dgelu_dtype, QE_F32 (0) or
	 * QE_BF16 (widened exactly first).
	 */
	struct {
		const float *mean, *rstd, *w, *b;
	} pre_ln;
	const float *pre_bias;
	int pre_gelu;
	const void *pre_dgelu;
	qe_dtype pre_dgelu_dtype;
	/*
	 * The softmax cross-entropy's gradient instead (pre_xent.stats not
	 * NULL; with no other prologue): x is the logits [rows, cols] (f32 or
	 * bf16), stats the rows' statistics that xent_rows wrote from them,
	 * tgt the rows' targets, and v = the bytes xent with grad_scale would
	 * write as their gradient (in x's type), widened: (p - onehot) *
	 * grad_scale / rows with p = exp(x - max) * inv, and 0 in columns
	 * valid..cols-1 (the vocabulary padding).  So the head's dY cast makes
	 * the logits' gradient as it loads them, and the gradient is never
	 * stored in between.
	 */
	struct {
		const float *stats;
		const int32_t *tgt;
		int64_t valid;
		float grad_scale;
	} pre_xent;
	/*
	 * colsum (optional, [cols]): overwritten with the column sums of v (x
	 * after the prologue) in colsum.h's order - the bytes
	 * bias_grad(colsum, v, rows, cols) writes - so the backward's bias
	 * gradient needs no pass of its own over dY.
	 */
	float *colsum;
} qe_cast_args;

/*
 * One role block of a batched scaling-state update (fp8_update_many) and the
 * format its scale targets.  The block is backend memory of
 * qe_fp8_role_floats(history_len) floats, owned by the caller.
 */
typedef struct qe_fp8_update_item {
	float *block;
	qe_dtype fmt; /* QE_E4M3 or QE_E5M2 */
} qe_fp8_update_item;

typedef struct qe_adamw_args {
	float *param;                /* [n] fp32 master weights, updated */
	float *m, *v;                /* [n] moments, updated */
	const float *const *grads;   /* nviews pointers to [n] gradient views, summed in index order */
	int nviews;
	int64_t n;
	float lr, beta1, beta2, eps, weight_decay;
	int64_t step;                /* 1-based step for bias correction */
	float grad_scale;            /* multiplies the summed gradient */
} qe_adamw_args;

/*
 * One parameter tensor of adamw_many: floats [offset, offset + n) of the
 * op's param, m and v, updated as adamw updates them from these views with
 * this weight decay.
 */
typedef struct qe_adamw_seg {
	int64_t offset;            /* floats from the start of param, m and v; >= 0 */
	int64_t n;
	float weight_decay;
	int nviews;
	const float *const *grads; /* nviews pointers to [n] gradient views, summed in index order */
	const char *name;          /* for messages (the parameter's name); may be NULL; read during the call only */
} qe_adamw_seg;

typedef struct qe_adamw_many_args {
	float *param;              /* fp32 master weights, updated where a segment covers them */
	float *m, *v;              /* moments in param's layout, updated likewise */
	const qe_adamw_seg *segs;  /* nseg segments, pairwise disjoint */
	int nseg;
	float lr, beta1, beta2, eps;
	int64_t step;              /* 1-based step for bias correction, shared by every segment */
	float grad_scale;          /* multiplies each summed gradient */
	/*
	 * adamw_many only, optional: backend memory of nseg floats that the same
	 * pass fills with what grad_sumsq would write, to the bit (the progress
	 * line's gradient norm without a second read of the gradients).  NULL:
	 * not wanted.
	 */
	float *sumsq;
} qe_adamw_many_args;

typedef struct qe_backend_ops {
	const char *name;
	qe_device device;

	/* memory */
	int (*alloc)(qe_backend *b, size_t bytes, void **out);  /* zero-filled; QE_ECAPTURE while capturing */
	void (*free)(qe_backend *b, void *p);
	int (*copy)(qe_stream *s, void *dst, const void *src, size_t bytes, qe_copy_kind kind);
	int (*fill)(qe_stream *s, void *dst, uint8_t byte, size_t bytes);
	/*
	 * Host memory that copies to and from the device run fastest through
	 * (page-locked on cuda; plain on cpu), for staging that is reused, such
	 * as checkpoint snapshots.  Not zeroed; freed with host_free.
	 */
	int (*host_alloc)(qe_backend *b, size_t bytes, void **out);
	void (*host_free)(qe_backend *b, void *p);
	/*
	 * The memory this backend allocates from: *free_bytes and *total_bytes
	 * (both required).  cuda: the device's, by cudaMemGetInfo, so total - free
	 * counts every user of the device, this process's context included.
	 * cpu: the host's RAM (sysinfo); its memory is the process's, which a
	 * per-process measure (the resident set) describes better.
	 */
	int (*mem_info)(qe_backend *b, size_t *free_bytes, size_t *total_bytes);

	/* streams, events, graphs */
	int (*stream_create)(qe_backend *b, qe_stream **out);
	void (*stream_destroy)(qe_stream *s);
	int (*stream_sync)(qe_stream *s);
	int (*event_create)(qe_backend *b, qe_event **out);
	void (*event_destroy)(qe_event *e);
	int (*event_record)(qe_event *e, qe_stream *s);
	int (*stream_wait)(qe_stream *s, qe_event *e);
	int (*capture_begin)(qe_stream *s);
	int (*capture_end)(qe_stream *s, qe_graph **out);
	int (*graph_launch)(qe_graph *g, qe_stream *s);
	void (*graph_destroy)(qe_graph *g);
	int (*graph_op_count)(const qe_graph *g); /* recorded ops (cpu) or nodes (cuda) */
	/* 0 when everything enqueued on s has completed, 1 while work is pending, else an error. */
	int (*stream_query)(qe_stream *s);

	/*
	 * Device links (NULL on backends that have none; callers then move
	 * messages through host memory).  A link is a one-way channel between two
	 * ranks: one side opens it as sender, the other as receiver, with the same
	 * id (made by link_id on one of them and handed to the other).  link_open
	 * blocks until both sides have called it.  Sends and receives on a link
	 * pair up in the order they were enqueued; link_send enqueues on s a
	 * transfer that completes only when the receiver's matching link_recv
	 * runs, so put sends on a stream of their own.  link_abort makes pending
	 * and later transfers fail instead of waiting (a peer died); link_close
	 * frees the link.
	 */
	int (*link_id)(qe_backend *b, void *id /* QE_LINK_ID_BYTES */);
	/*
	 * The physical device this backend runs on, as a string no other device
	 * of any host shares ("HOST/PCI-bus-id" on cuda), into key (len bytes;
	 * NULL op: a backend whose links do not care).  Ranks that find the same
	 * key in two of them share one device: device links between them would
	 * fail (NCCL refuses two ranks on one GPU), so they use host memory.
	 */
	int (*device_key)(qe_backend *b, char *key, size_t len);
	int (*link_open)(qe_backend *b, const void *id, int is_sender, qe_link **out);
	int (*link_send)(qe_link *l, qe_stream *s, const void *buf, size_t bytes);
	int (*link_recv)(qe_link *l, qe_stream *s, void *buf, size_t bytes);
	/* 0 while healthy; an error with a message when the link failed asynchronously. */
	int (*link_check)(qe_link *l);
	void (*link_abort)(qe_link *l);
	void (*link_close)(qe_link *l);

	/* FP8 */
	int (*cast)(qe_stream *s, const qe_cast_args *a);
	/* qe_fp8_role_update on a role block living in backend memory. */
	int (*fp8_update)(qe_stream *s, float *block, int history_len, qe_dtype fmt, qe_fp8_recipe recipe);
	/*
	 * fp8_update of items[0..n-1], in index order, as one op: the end of an
	 * action updates every role at once instead of launching one kernel per
	 * role (cuda: one launch per 32 items).  The blocks must not overlap -
	 * that is what makes the order immaterial, so the blocks may run in
	 * parallel and still give the bytes of n single updates.
	 * items is read during the call only (a capture keeps its own copy);
	 * n == 0 does nothing.  QE_EINVAL, with nothing enqueued, for n < 0,
	 * items NULL with n > 0, history_len < 1, a bad recipe, and naming the
	 * item: a NULL block, a format that is not FP8, two overlapping blocks.
	 */
	int (*fp8_update_many)(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
			       qe_fp8_recipe recipe);

	/*
	 * C = A.B^T * sa * sb (+bias) (+C); see the file comment.  a and b are
	 * f32, bf16, e4m3 or e5m2 (QE_ESHAPE otherwise); an FP8 operand needs
	 * its scale_inv (QE_EINVAL).  c is f32, or bf16: each fp32 result is
	 * then rounded to nearest even as qe_bf16_from_f32 does (an activation
	 * stored in bf16), with neither bias nor accumulate (QE_EINVAL), and on
	 * cuda only from FP8 or bf16 operands.
	 */
	int (*gemm)(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		    int accumulate);

	/* elementwise and row ops; all f32, shapes [rows, cols] */
	int (*add)(qe_stream *s, float *y, const float *a, const float *b, int64_t n);        /* y = a + b */
	int (*add_inplace)(qe_stream *s, float *y, const float *a, int64_t n);               /* y += a */
	/*
	 * y[r,c] = a[r,c] + (b[r,c] + bias[c]): a linear's output b whose bias
	 * gemm left out, added to the residual stream a - the bits of gemm's
	 * f32 bias add followed by add (bias NULL: a + b, the bits of add).
	 * y, a and b are all of type dt, f32 or bf16: bf16 values are widened
	 * exactly, summed in f32 as above, and the sum rounded to nearest even
	 * (qe_bf16_from_f32) as it is stored - the residual stream kept in
	 * bf16.  y may be a or b.  With mean and rstd (both or neither,
	 * [rows]), also the layernorm statistics of each row of y as stored
	 * (rounded) - the bits layernorm_fwd with y NULL would write from it -
	 * so the next layernorm needs no pass of its own over y.
	 */
	int (*residual_add)(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt, const float *bias,
			    int64_t rows, int64_t cols, float *mean, float *rstd);
	int (*bias_grad)(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols); /* db = sum_rows dy */
	int (*gelu_fwd)(qe_stream *s, float *y, const float *x, int64_t n);                  /* tanh approx */
	int (*gelu_bwd)(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n);
	/*
	 * y = (x - mean) * rstd * w + b per row; mean/rstd [rows] saved for
	 * backward.  y NULL: mean and rstd alone (both then required; w and b
	 * not read) - the statistics a cast's layernorm prologue reads.  x is
	 * of x_dt: f32, or bf16 (widened exactly as it is read); y is f32.
	 */
	int (*layernorm_fwd)(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
			     const float *w, const float *b, int64_t rows, int64_t cols);
	/*
	 * dx = (overwrite) the input gradient g, plus residual[r, c] first-come
	 * (residual + g, the bits of writing g and then add) when residual is
	 * not NULL: the residual branch's gradient joined in the same pass;
	 * residual may be dx, dx may not be dy.  dw, db = sums over rows
	 * (overwrite), in colsum.h's runs.  dy is of dy_dt and x (the forward's
	 * input) of x_dt: each f32, or bf16 (widened exactly as it is read).
	 * dx and residual are of x_dt too - the residual stream's gradient is
	 * kept in the stream's type: bf16 residual values are widened, the sum
	 * is f32, and dx is rounded to nearest even once as it is stored.
	 */
	int (*layernorm_bwd)(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
			     const void *x, qe_dtype x_dt, const float *mean, const float *rstd, const float *w,
			     int64_t rows, int64_t cols, const void *residual);
	/*
	 * out[r,:] = wte[tok[r],:] + wpe[r % T,:] for rows r of a batch of
	 * sequences of T positions (wpe NULL: the token rows alone), summed in
	 * f32 and stored as out_dt: f32, or bf16 rounded to nearest even.
	 */
	int (*embed_fwd)(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
			 const float *wpe, int64_t rows, int64_t T, int64_t H);
	/*
	 * The gradients of embed_fwd's tables from dout [rows, H] (of dout_dt:
	 * f32, or bf16 widened exactly as it is read) over a batch of sequences
	 * of T positions (rows a multiple of T).  dwte [V,H] and dwpe [T,H]
	 * overwritten: dwpe whole, row p the sum of the sequences' rows at
	 * position p from 0 in sequence order (((0 + d[p]) + d[T + p]) + ...),
	 * and each row of dwte that tok [rows] names gets the sum of its
	 * occurrences' dout rows in row order; every other row of dwte is zero
	 * afterwards.  rows_written NULL: all of
	 * dwte is cleared first.  Otherwise it holds [rows] token ids from the
	 * previous call on this dwte (-1 before the first; ids outside [0, V) are
	 * skipped): only those rows are cleared, every other row must already be
	 * zero, and it receives tok for the next call.  (Clearing all of a
	 * 32768 x 4096 dwte for every microbatch wrote 537 MB per call.)
	 * accumulate (rows_written must be NULL): nothing is cleared; each row
	 * that tok names gets its occurrences' sum (formed from 0 in t order, as
	 * above) added to what it holds, every other row is left as it is - the
	 * bits of the overwriting call on a zeroed buffer followed by add_inplace
	 * into dwte, without touching the rows no token names.
	 */
	int (*embed_bwd)(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout, qe_dtype dout_dt,
			 int64_t rows, int64_t T, int64_t H, int64_t V, int32_t *rows_written, int accumulate);
	/*
	 * Causal multi-head attention over qkv[T, 3H] (q | k | v, head h at
	 * columns h*D..h*D+D-1 of each third), out[T,H]; probs[nh,T,T] saved.
	 */
	int (*attn_fwd)(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh);
	int (*attn_bwd)(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs, int64_t T,
			int64_t H, int nh);
	/*
	 * Causal multi-head attention of `batch` sequences of T tokens without the
	 * T x T probabilities (flash-style): qkv [batch*T, 3H] as for attn_fwd,
	 * out [batch*T, H], and lse [batch, nh, T], the log-sum-exp of each row's
	 * scaled scores s[t, t2] = q_t . k_t2 / sqrt(D) over t2 <= t, from which
	 * the backward recomputes p[t, t2] = exp(s[t, t2] - lse[t]).
	 * attn_flash_bwd overwrites dqkv [batch*T, 3H] from dout [batch*T, H] and
	 * what the forward saved (qkv, out, lse).  D = H / nh must be 16, 32 or
	 * 64 (QE_EUNSUPPORTED otherwise).  Both are deterministic (cuda: every
	 * sum in a fixed order, no atomics).  operands picks what cuda's tensor
	 * cores multiply: QE_FLASH_TF32 (q, k, v, dout, P and dS rounded to
	 * TF32) or QE_FLASH_BF16 (rounded to bf16, twice the products an
	 * instruction); the sums are fp32 either way.  The cpu computes in fp32
	 * whatever operands says (it checks that the value is known).
	 * qkv_bias ([3H] or NULL): q, k and v are qkv + qkv_bias, column by
	 * column - so the QKV GEMM may leave its bias to attention.  For f32 qkv
	 * these are the bits of gemm's f32 bias add (cuda: in the bf16 copy, or,
	 * TF32, a biased copy first).  For bf16 qkv the cuda kernels add it in
	 * shared memory to the tiles a block loads once, rounding to bf16 again,
	 * and take its effect on each row for the key and value tiles that
	 * stream past (cuda_flash16.cu).  Both ops must get the same.
	 * dt is the type of the activations the ops read and write - qkv, out,
	 * dout and dqkv; lse is f32 - QE_F32, or QE_BF16 (activations stored in
	 * bf16, which only QE_FLASH_BF16 takes): read widened exactly, written
	 * as the f32 result rounded to nearest even.  The bf16 kernels read bf16
	 * rows where they lie; given f32 they first make a bf16 copy of the same
	 * layout.  With a bias and bf16 qkv, the cpu computes bf16 + bias in f32.
	 */
	int (*attn_flash_fwd)(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias, int64_t batch,
			      int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt);
	int (*attn_flash_bwd)(qe_stream *s, void *dqkv, const void *dout, const void *qkv, const float *qkv_bias,
			      const void *out, const float *lse, int64_t batch, int64_t T, int64_t H, int nh,
			      qe_flash_operands operands, qe_dtype dt);
	/*
	 * Attention of one new query row over cached keys and values, the step
	 * of generating a token (runtime/model/infer.h): q [H] (head h at
	 * columns h*D..h*D+D-1, D = H / nh; the q third of a qkv row will do),
	 * k and v [T, H] rows of positions 0..T-1 (the newest included), out
	 * [H], probs [nh, T] overwritten with the probabilities.  Per head:
	 * s[t] = (q . k[t]) / sqrt(D), a dot product summed from 0 in index
	 * order in fp32; p = exp(s - max s) / sum (the sum in t order); out =
	 * sum over t of p[t] v[t].  The cpu computes exactly that order;
	 * cuda's sums run in another fixed order (deterministic, not the cpu's
	 * bits; tests/backend/test_cuda_attn.c states the bound).  T >= 1,
	 * H a multiple of nh >= 1 (QE_ESHAPE otherwise); out may not alias q,
	 * k, v or probs.
	 */
	int (*attn_decode)(qe_stream *s, float *out, float *probs, const float *q, const float *k, const float *v,
			   int64_t T, int64_t H, int nh);
	/*
	 * Softmax cross-entropy over the first `valid` columns of logits[T,V]
	 * (1 <= valid <= V; columns valid..V-1 are vocabulary padding, masked:
	 * they take no part in the max or the sum and get probability 0):
	 * *loss = mean_t -log p[t, tgt[t]] with 0 <= tgt[t] < valid;
	 * dlogits = (p - onehot) * grad_scale / T, and 0 in the padded columns.
	 * dlogits may alias logits.  dt is the type of both, QE_F32 or QE_BF16:
	 * bf16 logits are widened exactly, the arithmetic is fp32 either way,
	 * and each gradient is rounded to nearest even (qe_bf16_from_f32).
	 */
	int (*xent)(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt, int64_t T,
		    int64_t V, int64_t valid, float grad_scale, qe_dtype dt);
	/*
	 * xent's loss without its gradient: *loss (may be NULL) as xent writes
	 * it, and each row's softmax statistics, stats[2t] = the max over its
	 * valid logits and stats[2t + 1] = 1 / the sum of exp(l - max) - the
	 * numbers xent's gradient is made from, which a cast's pre_xent
	 * prologue reads.
	 */
	int (*xent_rows)(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt, int64_t T,
			 int64_t V, int64_t valid, qe_dtype dt);
	/* Sum the views in index order, scale, and apply AdamW (decoupled decay). */
	int (*adamw)(qe_stream *s, const qe_adamw_args *a);
	/*
	 * out = sum of views in index order: ((v0 + v1) + v2) + ..., element by
	 * element (for the replica sum and tests).  out may be one of the views.
	 */
	int (*sum_views)(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n);
	/*
	 * AdamW over many parameter tensors as one op (the optimizer's pass over
	 * a stage; cuda: one launch for up to 256 segments and 2048 views, one
	 * more for each further such batch).  Segment i gives the bytes of
	 * adamw on param + offset, m + offset, v + offset with the segment's n,
	 * grads, nviews and weight_decay and the op's lr, betas, eps, step and
	 * grad_scale - the same operations in the same order, the bias
	 * corrections 1 - beta^step included.  The segments must not overlap,
	 * which makes their order immaterial, and no view may overlap param, m
	 * or v (not checked).  segs and each grads array are read during the
	 * call only (a capture keeps its own copy; a captured op replays the lr
	 * and step it was captured with, as adamw does); nseg == 0 does nothing.
	 * QE_EINVAL, with nothing enqueued, for a NULL a, nseg < 0, segs NULL
	 * with nseg > 0, step < 1, and naming the segment: offset or n < 0,
	 * param, m or v NULL under a segment with n > 0, its views as adamw's
	 * (at most 256 on cuda), two overlapping segments.
	 */
	int (*adamw_many)(qe_stream *s, const qe_adamw_many_args *a);
	/*
	 * The squared norm of each segment's gradient, as adamw_many(a) would
	 * apply it: out[i] = sum over the segment's elements of (grad_scale x
	 * the views summed in index order)^2, for --grad-clip.  out is backend
	 * memory of a->nseg floats (0 for an empty segment); param, m and v are
	 * not touched.  Deterministic: a fixed split into chunks, each summed in
	 * a fixed order in fp32, the chunks added in order in double and rounded
	 * to float once.  The chunking is the backend's, so cpu and cuda agree
	 * within rounding, not to the bit.  Refusals as adamw_many's, and
	 * QE_EINVAL for a NULL out.
	 */
	int (*grad_sumsq)(qe_stream *s, const qe_adamw_many_args *a, float *out);
} qe_backend_ops;

struct qe_backend {
	const qe_backend_ops *ops;
	void *impl; /* backend-private */
};

/* Open a backend by name ("cpu", "cuda"). *out is freed with qe_backend_close. */
int qe_backend_open(const char *name, qe_backend **out);
void qe_backend_close(qe_backend *b);

#endif
