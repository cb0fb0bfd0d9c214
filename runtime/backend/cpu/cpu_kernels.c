/*
 * cpu_kernels.c - the reference kernels of every non-GEMM op: FP8 and bf16
 * cast, elementwise ops, layernorm, GELU, embedding, causal attention, softmax
 * cross-entropy, AdamW.
 *
 * The math follows llm.c's train_gpt2.c (the readable CPU reference the GPT-2
 * numbers are usually checked against), in fp32, every reduction in one fixed
 * index order, so two runs give the same bytes.  Where the order is a
 * contract other modules rely on (gradient views summed in view order,
 * embedding scatter in t order, the column sums in the grouped row order of
 * colsum.h, which the cuda backend follows too) the comment says so.
 * Arguments were checked by cpu_ops.c; only data-dependent checks
 * (token ids) remain here.
 */
#include "runtime/backend/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/backend/backend_check.h"
#include "runtime/backend/colsum.h"
#include "runtime/fp8/bf16.h"

float *qe_cpu_scratch_get(qe_cpu_scratch *sc, int which, size_t n)
{
	if (n == 0)
		n = 1;
	if (sc->cap[which] >= n)
		return sc->buf[which];
	size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
	float *p = aligned_alloc(64, bytes);
	if (!p) {
		qe_fail(QE_ENOMEM, "cpu scratch: %zu bytes", bytes);
		return NULL;
	}
	free(sc->buf[which]);
	sc->buf[which] = p;
	sc->cap[which] = bytes / sizeof(float);
	return p;
}

void qe_cpu_scratch_release(qe_cpu_scratch *sc)
{
	for (int i = 0; i < QE_CPU_SCRATCH_SLOTS; i++) {
		free(sc->buf[i]);
		sc->buf[i] = NULL;
		sc->cap[i] = 0;
	}
}

/* ---- FP8 and bf16 cast -------------------------------------------------- */

/* Blocked transpose of 1-byte codes: dst[c, r] = src[r, c]. */
static void transpose_u8(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols)
{
	for (int64_t r0 = 0; r0 < rows; r0 += 32)
		for (int64_t c0 = 0; c0 < cols; c0 += 32)
			for (int64_t c = c0; c < c0 + 32 && c < cols; c++)
				for (int64_t r = r0; r < r0 + 32 && r < rows; r++)
					dst[c * rows + r] = src[r * cols + c];
}

static void transpose_u16(uint16_t *dst, const uint16_t *src, int64_t rows, int64_t cols)
{
	for (int64_t r0 = 0; r0 < rows; r0 += 32)
		for (int64_t c0 = 0; c0 < cols; c0 += 32)
			for (int64_t c = c0; c < c0 + 32 && c < cols; c++)
				for (int64_t r = r0; r < r0 + 32 && r < rows; r++)
					dst[c * rows + r] = src[r * cols + c];
}

static void transpose_f32(float *dst, const float *src, int64_t rows, int64_t cols)
{
	for (int64_t r0 = 0; r0 < rows; r0 += 16)
		for (int64_t c0 = 0; c0 < cols; c0 += 16)
			for (int64_t c = c0; c < c0 + 16 && c < cols; c++)
				for (int64_t r = r0; r < r0 + 16 && r < rows; r++)
					dst[c * rows + r] = src[r * cols + c];
}

/* The gradient of logit lv in column v: (p - onehot) * g, 0 in the padding. */
static float xent_grad(float lv, int64_t v, int64_t valid, int32_t tg, float maxv, float inv, float g)
{
	if (v >= valid)
		return 0.0f; /* padding: probability 0, no gradient */
	float p = expf(lv - maxv) * inv;
	return (p - (v == tg ? 1.0f : 0.0f)) * g;
}

/*
 * The pre_xent prologue: row r's gradient from the logits x (f32; xt, the
 * type they are stored in) as qe_cpu_xent writes it, widened back from xt.
 */
static void xent_grad_rows(float *v, const float *x, qe_dtype xt, int64_t rows, int64_t cols, const qe_cast_args *a)
{
	float g = a->pre_xent.grad_scale / (float)rows;
	for (int64_t r = 0; r < rows; r++) {
		float maxv = a->pre_xent.stats[2 * r], inv = a->pre_xent.stats[2 * r + 1];
		for (int64_t c = 0; c < cols; c++) {
			float d = xent_grad(x[r * cols + c], c, a->pre_xent.valid, a->pre_xent.tgt[r], maxv, inv, g);
			v[r * cols + c] = xt == QE_BF16 ? qe_bf16_to_f32(qe_bf16_from_f32(d)) : d;
		}
	}
}

/*
 * The cast's prologue into the scratch: the layernorm with the saved
 * statistics (layernorm_fwd's expression), x + pre_bias[c] (gemm's f32
 * add), then gelu_fwd - or gelu_bwd with x as the gradient - the very
 * functions the unfused ops run; returns the buffer or NULL (out of memory,
 * said).
 */
static const float *cast_prologue(qe_cpu_scratch *sc, const qe_cast_args *a, const float *x, int64_t rows,
				  int64_t cols)
{
	int64_t n = rows * cols;
	float *v = qe_cpu_scratch_get(sc, 0, (size_t)n);
	if (!v)
		return NULL;
	if (a->pre_xent.stats) {
		xent_grad_rows(v, x, a->x.dtype, rows, cols, a);
		return v;
	}
	if (a->pre_dgelu) {
		const float *u = a->pre_dgelu;
		if (a->pre_dgelu_dtype == QE_BF16) { /* widened exactly (scratch 2: 0 is v, 1 may hold x) */
			float *wu = qe_cpu_scratch_get(sc, 2, (size_t)n);
			if (!wu)
				return NULL;
			const uint16_t *src = a->pre_dgelu;
			for (int64_t i = 0; i < n; i++)
				wu[i] = qe_bf16_to_f32(src[i]);
			u = wu;
		}
		qe_cpu_gelu_bwd(v, u, x, a->pre_bias, n, cols);
		return v;
	}
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float e = x[r * cols + c];
			if (a->pre_ln.mean) {
				float nrm = a->pre_ln.rstd[r] * (e - a->pre_ln.mean[r]);
				e = nrm * a->pre_ln.w[c] + a->pre_ln.b[c];
			}
			v[r * cols + c] = e;
		}
	if (a->pre_bias)
		qe_cpu_add_bias(v, v, a->pre_bias, rows, cols);
	if (a->pre_gelu)
		qe_cpu_gelu_fwd(v, v, n);
	return v;
}

int qe_cpu_cast(qe_cpu_scratch *sc, const qe_cast_args *a)
{
	const float *x = (const float *)a->x.data;
	int64_t cols = a->x.ndim > 0 ? a->x.shape[a->x.ndim - 1] : 1;
	int64_t n = qe_tensor_numel(&a->x);
	int64_t rows = cols > 0 ? n / cols : 0;
	if (a->x.dtype == QE_BF16) { /* widened exactly (scratch 1: the prologue writes scratch 0) */
		float *w = qe_cpu_scratch_get(sc, 1, (size_t)n);
		if (!w)
			return QE_ENOMEM;
		const uint16_t *src = (const uint16_t *)a->x.data;
		for (int64_t i = 0; i < n; i++)
			w[i] = qe_bf16_to_f32(src[i]);
		x = w;
	}
	if ((a->pre_ln.mean || a->pre_bias || a->pre_gelu || a->pre_dgelu || a->pre_xent.stats) &&
	    !(x = cast_prologue(sc, a, x, rows, cols)))
		return QE_ENOMEM;

	/* max|x| of this tensor; a NaN anywhere makes it NaN (TE's torch.amax). */
	float amax = 0.0f;
	for (int64_t i = 0; i < n; i++)
		amax = qe_cpu_nanmax(amax, fabsf(x[i]));
	if (a->amax)
		*a->amax = qe_cpu_nanmax(*a->amax, amax);
	if (a->colsum)
		qe_cpu_bias_grad(a->colsum, x, rows, cols);

	qe_dtype fmt = qe__cast_out_dtype(a);
	if (fmt == QE_BF16) {
		/* each element rounded to nearest even (bf16.h); no scaling */
		if (a->row.data) {
			uint16_t *q = (uint16_t *)a->row.data;
			for (int64_t i = 0; i < n; i++)
				q[i] = qe_bf16_from_f32(x[i]);
			if (a->col.data)
				transpose_u16((uint16_t *)a->col.data, q, rows, cols);
		} else if (a->col.data) {
			uint16_t *qt = (uint16_t *)a->col.data;
			for (int64_t r = 0; r < rows; r++)
				for (int64_t c = 0; c < cols; c++)
					qt[c * rows + r] = qe_bf16_from_f32(x[r * cols + c]);
		}
		if (a->scale_inv)
			*a->scale_inv = 1.0f;
		return QE_OK;
	}
	if (!qe_dtype_is_fp8(fmt)) {
		if (a->row.data)
			memcpy(a->row.data, x, (size_t)n * sizeof(float));
		if (a->col.data)
			transpose_f32((float *)a->col.data, x, rows, cols);
		if (a->scale_inv)
			*a->scale_inv = 1.0f;
		return QE_OK;
	}

	float s;
	if (a->current) {
		s = qe_fp8_scale_for_amax(amax, qe_fp8_max(fmt), a->margin, 1.0f);
		if (a->scale)
			*a->scale = s;
	} else {
		s = *a->scale;
	}
	if (a->row.data) {
		uint8_t *q = (uint8_t *)a->row.data;
		for (int64_t i = 0; i < n; i++)
			q[i] = qe_fp8_encode(x[i] * s, fmt, 1);
		if (a->col.data)
			transpose_u8((uint8_t *)a->col.data, q, rows, cols);
	} else if (a->col.data) {
		uint8_t *qt = (uint8_t *)a->col.data;
		for (int64_t r = 0; r < rows; r++)
			for (int64_t c = 0; c < cols; c++)
				qt[c * rows + r] = qe_fp8_encode(x[r * cols + c] * s, fmt, 1);
	}
	if (a->scale_inv)
		*a->scale_inv = 1.0f / s;
	return QE_OK;
}

/* ---- elementwise ---------------------------------------------------------- */

void qe_cpu_add(float *y, const float *a, const float *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

void qe_cpu_add_inplace(float *y, const float *a, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += a[i];
}

void qe_cpu_add_bias(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			y[r * cols + c] = x[r * cols + c] + bias[c];
}

void qe_cpu_residual_add(float *y, const float *a, const float *b, const float *bias, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			int64_t i = r * cols + c;
			float v = bias ? b[i] + bias[c] : b[i]; /* gemm's bias add */
			y[i] = a[i] + v;
		}
}

#define COLSUM_TILE 512 /* columns per pass: the partials stay on the stack */

/*
 * out[j] = the column sum in colsum.h's order over rows of dy[r,j] (x ==
 * NULL) or of the layernorm weight gradient's nrm * dy[r,j], nrm = (x[r,j] -
 * mean[r]) * rstd[r]: per group a partial from 0 that adds the group's runs
 * of `run` rows (0: the whole group is one run), each summed from 0 in row
 * order; then the partials in group order from 0.
 */
static void colsum(float *out, const float *dy, const float *x, const float *mean, const float *rstd, int64_t rows,
		   int64_t cols, int64_t run)
{
	float part[COLSUM_TILE], rs[COLSUM_TILE];
	for (int64_t j0 = 0; j0 < cols; j0 += COLSUM_TILE) {
		int64_t nj = cols - j0 < COLSUM_TILE ? cols - j0 : COLSUM_TILE;
		float *o = out + j0;
		for (int64_t j = 0; j < nj; j++)
			o[j] = 0.0f;
		int64_t ng = qe_colsum_groups(rows);
		for (int64_t g = 0; g < ng; g++) {
			for (int64_t j = 0; j < nj; j++)
				part[j] = 0.0f;
			int64_t r0 = qe_colsum_group_start(rows, g), r1 = qe_colsum_group_start(rows, g + 1);
			int64_t step = run > 0 ? run : r1 - r0;
			for (int64_t u0 = r0; u0 < r1; u0 += step) {
				int64_t u1 = u0 + step < r1 ? u0 + step : r1;
				for (int64_t j = 0; j < nj; j++)
					rs[j] = 0.0f;
				for (int64_t r = u0; r < u1; r++) {
					const float *gr = dy + r * cols + j0;
					if (!x) {
						for (int64_t j = 0; j < nj; j++)
							rs[j] += gr[j];
						continue;
					}
					const float *xr = x + r * cols + j0;
					float m = mean[r], s = rstd[r];
					for (int64_t j = 0; j < nj; j++) {
						float nrm = (xr[j] - m) * s;
						rs[j] += nrm * gr[j];
					}
				}
				for (int64_t j = 0; j < nj; j++)
					part[j] += rs[j];
			}
			for (int64_t j = 0; j < nj; j++)
				o[j] += part[j];
		}
	}
}

void qe_cpu_bias_grad(float *db, const float *dy, int64_t rows, int64_t cols)
{
	colsum(db, dy, NULL, NULL, NULL, rows, cols, 0);
}

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrtf(2/pi) */

/*
 * GELU, tanh approximation, through one exponential: with a = sqrt(2/pi)
 * (v + 0.044715 v^3) clamped to [-30, 30] and e = exp(-2a),
 * 0.5 (1 + tanh a) = 1 / (1 + e) and 0.5 sech^2 a = 2 e / (1 + e)^2, so
 * gelu(v) = v (1 / (1 + e)) and gelu'(v) = 1 / (1 + e) + 2 v e / (1 + e)^2 *
 * sqrt(2/pi) (1 + 3 * 0.044715 v^2).  cuda_gelu.cuh has the same expressions.
 */
static float gelu_exp(float v)
{
	float a = GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v);
	a = fminf(fmaxf(a, -30.0f), 30.0f);
	return expf(-2.0f * a);
}

void qe_cpu_gelu_fwd(float *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] * (1.0f / (1.0f + gelu_exp(x[i])));
}

void qe_cpu_gelu_bwd(float *dx, const float *x, const float *dy, const float *bias, int64_t n, int64_t cols)
{
	for (int64_t i = 0; i < n; i++) {
		float v = bias ? x[i] + bias[i % cols] : x[i];
		float e = gelu_exp(v);
		float sg = 1.0f / (1.0f + e);
		float local = sg + 2.0f * v * (e * sg * sg) * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
		dx[i] = local * dy[i];
	}
}

/* ---- layernorm (eps 1e-5, as llm.c) ---------------------------------------- */

void qe_cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
			  int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * cols;
		float *yr = y ? y + r * cols : NULL;
		float m = 0.0f;
		for (int64_t i = 0; i < cols; i++)
			m += xr[i];
		m = m / (float)cols;
		float v = 0.0f;
		for (int64_t i = 0; i < cols; i++) {
			float d = xr[i] - m;
			v += d * d;
		}
		v = v / (float)cols;
		float s = 1.0f / sqrtf(v + 1e-5f);
		for (int64_t i = 0; y && i < cols; i++) {
			float nrm = s * (xr[i] - m);
			yr[i] = nrm * w[i] + b[i];
		}
		if (mean)
			mean[r] = m;
		if (rstd)
			rstd[r] = s;
	}
}

void qe_cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *mean,
			  const float *rstd, const float *w, int64_t rows, int64_t cols, const float *residual)
{
	if (dw)
		colsum(dw, dy, x, mean, rstd, rows, cols, QE_COLSUM_RUN);
	if (db)
		colsum(db, dy, NULL, NULL, NULL, rows, cols, QE_COLSUM_RUN);
	for (int64_t r = 0; r < rows; r++) {
		const float *dyr = dy + r * cols, *xr = x + r * cols;
		float *dxr = dx + r * cols;
		float m = mean[r], s = rstd[r];
		float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
		for (int64_t i = 0; i < cols; i++) {
			float nrm = (xr[i] - m) * s;
			float dn = w[i] * dyr[i];
			dnorm_mean += dn;
			dnorm_norm_mean += dn * nrm;
		}
		dnorm_mean = dnorm_mean / (float)cols;
		dnorm_norm_mean = dnorm_norm_mean / (float)cols;
		for (int64_t i = 0; i < cols; i++) {
			float nrm = (xr[i] - m) * s;
			float dn = w[i] * dyr[i];
			float dval = dn - dnorm_mean - nrm * dnorm_norm_mean;
			float g = dval * s;
			dxr[i] = residual ? residual[r * cols + i] + g : g;
		}
	}
}

/* ---- embedding -------------------------------------------------------------- */

void qe_cpu_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t rows, int64_t T,
		      int64_t H)
{
	for (int64_t t = 0; t < rows; t++) {
		const float *e = wte + (int64_t)tok[t] * H;
		float *o = out + t * H;
		if (wpe) {
			const float *p = wpe + (t % T) * H;
			for (int64_t i = 0; i < H; i++)
				o[i] = e[i] + p[i];
		} else {
			memcpy(o, e, (size_t)H * sizeof(float));
		}
	}
}

/*
 * The accumulating embed_bwd's wte half: each distinct token's rows summed
 * from 0 in t order into a row of its own (slot[token], in order of first
 * occurrence), then added to dwte's row.
 */
static int embed_bwd_add(float *dwte, const int32_t *tok, const float *dout, int64_t T, int64_t H, int64_t V)
{
	int64_t *slot = malloc((size_t)V * sizeof(int64_t)), *rowof = malloc((size_t)(T > 0 ? T : 1) * sizeof(int64_t));
	float *acc = calloc((size_t)(T > 0 ? T : 1) * (size_t)H, sizeof(float));
	if (!slot || !rowof || !acc) {
		free(slot);
		free(rowof);
		free(acc);
		return qe_fail(QE_ENOMEM, "embed_bwd: %lld x %lld floats of row sums", (long long)T, (long long)H);
	}
	for (int64_t v = 0; v < V; v++)
		slot[v] = -1;
	int64_t nu = 0;
	for (int64_t t = 0; t < T; t++) {
		if (slot[tok[t]] < 0) {
			slot[tok[t]] = nu;
			rowof[nu++] = tok[t];
		}
		float *a = acc + slot[tok[t]] * H;
		const float *d = dout + t * H;
		for (int64_t i = 0; i < H; i++)
			a[i] += d[i];
	}
	for (int64_t k = 0; k < nu; k++) {
		float *e = dwte + rowof[k] * H;
		const float *a = acc + k * H;
		for (int64_t i = 0; i < H; i++)
			e[i] += a[i];
	}
	free(slot);
	free(rowof);
	free(acc);
	return QE_OK;
}

/*
 * Overwriting: the rows of the previous call (rows_written) or all of dwte
 * are cleared, then the rows summed in place; accumulating: embed_bwd_add.
 * See backend.h.
 */
int qe_cpu_embed_bwd(float *dwte, float *dwpe, const int32_t *tok, const float *dout, int64_t rows, int64_t T,
		     int64_t H, int64_t V, int32_t *rows_written, int accumulate)
{
	for (int64_t t = 0; t < rows; t++)
		if (tok[t] < 0 || tok[t] >= V)
			return qe_fail(QE_EINVAL, "embed_bwd: token %d at t=%lld outside the vocabulary [0,%lld)",
				       (int)tok[t], (long long)t, (long long)V);
	if (accumulate) {
		int rc = embed_bwd_add(dwte, tok, dout, rows, H, V);
		if (rc)
			return rc;
	} else if (rows_written) {
		for (int64_t t = 0; t < rows; t++)
			if (rows_written[t] >= 0 && rows_written[t] < V)
				memset(dwte + (int64_t)rows_written[t] * H, 0, (size_t)H * sizeof(float));
		memcpy(rows_written, tok, (size_t)rows * sizeof(int32_t));
	} else {
		memset(dwte, 0, (size_t)(V * H) * sizeof(float));
	}
	if (dwpe)
		memset(dwpe, 0, (size_t)(T * H) * sizeof(float));
	for (int64_t t = 0; t < rows; t++) {
		const float *d = dout + t * H;
		float *e = dwte + (int64_t)tok[t] * H;
		if (!accumulate)
			for (int64_t i = 0; i < H; i++)
				e[i] += d[i];
		if (dwpe) { /* position t % T: the sequences' rows added in order */
			float *p = dwpe + (t % T) * H;
			for (int64_t i = 0; i < H; i++)
				p[i] += d[i];
		}
	}
	return QE_OK;
}

/* ---- causal attention (llm.c attention_forward/backward, B = 1) ------------- */

/*
 * One query row q of one head against n keys and values (row j of each at
 * k + j * ld, v + j * ld): att[0..n) the probabilities, then o [hs] their
 * sum of values.  Scores are dot products from 0 in index order, the
 * softmax subtracts the max and adds the exps in order, and o adds the rows
 * in order: the one place both attn_fwd and attn_decode compute a row, so
 * a decoded row has the bytes of attn_fwd's row.
 */
static void attend_row(float *o, float *att, const float *q, const float *k, const float *v, int64_t ld, int64_t n,
		       int64_t hs, float scale)
{
	/* scores into att[0..n), then overwritten in place by the probabilities */
	float maxval = -INFINITY;
	for (int64_t j = 0; j < n; j++) {
		const float *key = k + j * ld;
		float val = 0.0f;
		for (int64_t i = 0; i < hs; i++)
			val += q[i] * key[i];
		val *= scale;
		if (val > maxval)
			maxval = val;
		att[j] = val;
	}
	float expsum = 0.0f;
	for (int64_t j = 0; j < n; j++) {
		float e = expf(att[j] - maxval);
		expsum += e;
		att[j] = e;
	}
	float inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;
	for (int64_t j = 0; j < n; j++)
		att[j] = att[j] * inv;
	for (int64_t i = 0; i < hs; i++)
		o[i] = 0.0f;
	for (int64_t j = 0; j < n; j++) {
		const float *val = v + j * ld;
		float a = att[j];
		for (int64_t i = 0; i < hs; i++)
			o[i] += a * val[i];
	}
}

void qe_cpu_attn_fwd(float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh)
{
	int64_t hs = H / nh, C3 = 3 * H;
	float scale = 1.0f / sqrtf((float)hs);
	for (int64_t t = 0; t < T; t++) {
		for (int h = 0; h < nh; h++) {
			float *att = probs + ((int64_t)h * T + t) * T;
			const float *base = qkv + h * hs;
			attend_row(out + t * H + h * hs, att, base + t * C3, base + H, base + 2 * H, C3, t + 1, hs, scale);
			for (int64_t t2 = t + 1; t2 < T; t2++)
				att[t2] = 0.0f;
		}
	}
}

/*
 * The last row of qe_cpu_attn_fwd for a query of its own over cached keys
 * and values (k, v [T, H] rows): attend_row's sums, so its bytes are that
 * row's when q, k and v are taken from one qkv.
 */
void qe_cpu_attn_decode(float *out, float *probs, const float *q, const float *k, const float *v, int64_t T, int64_t H,
			int nh)
{
	int64_t hs = H / nh;
	float scale = 1.0f / sqrtf((float)hs);
	for (int h = 0; h < nh; h++)
		attend_row(out + h * hs, probs + (int64_t)h * T, q + h * hs, k + h * hs, v + h * hs, H, T, hs, scale);
}

/*
 * Same accumulation order as llm.c except the softmax backward, which uses
 * dpre[t3] = p[t3] * (datt[t3] - sum_t2 p[t2] datt[t2]) - the same expression
 * factored, O(T^2) instead of llm.c's O(T^3) double loop.
 */
int qe_cpu_attn_bwd(qe_cpu_scratch *sc, float *dqkv, const float *dout, const float *qkv, const float *probs,
		    int64_t T, int64_t H, int nh)
{
	int64_t hs = H / nh, C3 = 3 * H;
	float scale = 1.0f / sqrtf((float)hs);
	float *datt = qe_cpu_scratch_get(sc, 2, (size_t)(2 * T));
	if (!datt)
		return qe_fail_ctx(QE_ENOMEM, "attn_bwd: T=%lld", (long long)T);
	float *dpre = datt + T;
	memset(dqkv, 0, (size_t)(T * C3) * sizeof(float));
	for (int64_t t = 0; t < T; t++) {
		for (int h = 0; h < nh; h++) {
			const float *att = probs + ((int64_t)h * T + t) * T;
			const float *dout_t = dout + t * H + h * hs;
			const float *q = qkv + t * C3 + h * hs;
			float *dq = dqkv + t * C3 + h * hs;
			/* through the value accumulation */
			for (int64_t t2 = 0; t2 <= t; t2++) {
				const float *v = qkv + t2 * C3 + h * hs + 2 * H;
				float *dv = dqkv + t2 * C3 + h * hs + 2 * H;
				float da = 0.0f, a = att[t2];
				for (int64_t i = 0; i < hs; i++) {
					da += v[i] * dout_t[i];
					dv[i] += a * dout_t[i];
				}
				datt[t2] = da;
			}
			/* softmax */
			float dot = 0.0f;
			for (int64_t t2 = 0; t2 <= t; t2++)
				dot += att[t2] * datt[t2];
			for (int64_t t3 = 0; t3 <= t; t3++)
				dpre[t3] = att[t3] * (datt[t3] - dot);
			/* through q.k */
			for (int64_t t2 = 0; t2 <= t; t2++) {
				const float *key = qkv + t2 * C3 + h * hs + H;
				float *dk = dqkv + t2 * C3 + h * hs + H;
				float g = dpre[t2] * scale;
				for (int64_t i = 0; i < hs; i++) {
					dq[i] += key[i] * g;
					dk[i] += q[i] * g;
				}
			}
		}
	}
	return QE_OK;
}

/* ---- flash-style attention (no T x T probabilities kept) ------------------- */

/*
 * Per sequence b, head h and row t: the scores of t2 <= t, their max, the
 * sum of exp in t2 order, out = sum_t2 p * v_t2 in t2 order, lse = max +
 * log(sum).  The backward recomputes p from lse, D_t = dout_t . out_t, and
 * dq, dk, dv in (t, t2) order: the reference the cuda kernels are held to.
 */
int qe_cpu_attn_flash_fwd(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t H, int nh)
{
	int64_t D = H / nh, C3 = 3 * H;
	float scale = 1.0f / sqrtf((float)D);
	float *sc = malloc((size_t)T * sizeof(float));
	if (!sc)
		return qe_fail(QE_ENOMEM, "attn_flash_fwd: out of host memory for %lld scores", (long long)T);
	for (int64_t b = 0; b < B; b++) {
		const float *x = qkv + b * T * C3;
		float *o = out + b * T * H;
		for (int h = 0; h < nh; h++) {
			for (int64_t t = 0; t < T; t++) {
				const float *q = x + t * C3 + h * D;
				float mx = -INFINITY;
				for (int64_t t2 = 0; t2 <= t; t2++) {
					const float *k = x + t2 * C3 + H + h * D;
					float v = 0.0f;
					for (int64_t i = 0; i < D; i++)
						v += q[i] * k[i];
					sc[t2] = v * scale;
					if (sc[t2] > mx)
						mx = sc[t2];
				}
				float sum = 0.0f;
				for (int64_t t2 = 0; t2 <= t; t2++) {
					sc[t2] = expf(sc[t2] - mx);
					sum += sc[t2];
				}
				float inv = 1.0f / sum, *orow = o + t * H + h * D;
				for (int64_t i = 0; i < D; i++)
					orow[i] = 0.0f;
				for (int64_t t2 = 0; t2 <= t; t2++) {
					const float *v = x + t2 * C3 + 2 * H + h * D;
					float p = sc[t2] * inv;
					for (int64_t i = 0; i < D; i++)
						orow[i] += p * v[i];
				}
				lse[(b * nh + h) * T + t] = mx + logf(sum);
			}
		}
	}
	free(sc);
	return QE_OK;
}

void qe_cpu_attn_flash_bwd(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
			   int64_t B, int64_t T, int64_t H, int nh)
{
	int64_t D = H / nh, C3 = 3 * H;
	float scale = 1.0f / sqrtf((float)D);
	memset(dqkv, 0, (size_t)(B * T * C3) * sizeof(float));
	for (int64_t b = 0; b < B; b++) {
		const float *x = qkv + b * T * C3, *dO = dout + b * T * H, *O = out + b * T * H;
		float *dx = dqkv + b * T * C3;
		for (int h = 0; h < nh; h++) {
			for (int64_t t = 0; t < T; t++) {
				const float *q = x + t * C3 + h * D, *dot = dO + t * H + h * D, *ot = O + t * H + h * D;
				float Dt = 0.0f;
				for (int64_t i = 0; i < D; i++)
					Dt += dot[i] * ot[i];
				float l = lse[(b * nh + h) * T + t];
				float *dq = dx + t * C3 + h * D;
				for (int64_t t2 = 0; t2 <= t; t2++) {
					const float *k = x + t2 * C3 + H + h * D, *v = x + t2 * C3 + 2 * H + h * D;
					float s = 0.0f, dp = 0.0f;
					for (int64_t i = 0; i < D; i++) {
						s += q[i] * k[i];
						dp += dot[i] * v[i];
					}
					float p = expf(s * scale - l);
					float ds = p * (dp - Dt) * scale;
					float *dk = dx + t2 * C3 + H + h * D, *dv = dx + t2 * C3 + 2 * H + h * D;
					for (int64_t i = 0; i < D; i++) {
						dq[i] += ds * k[i];
						dk[i] += ds * q[i];
						dv[i] += p * dot[i];
					}
				}
			}
		}
	}
}

/* ---- softmax cross-entropy ------------------------------------------------- */

/* A row's softmax statistics over its valid logits: the max, and the sum of exp(l - max) left to right. */
static void xent_row_stats(const float *l, int64_t valid, float *maxv, float *sum)
{
	float m = -INFINITY;
	for (int64_t v = 0; v < valid; v++)
		if (l[v] > m)
			m = l[v];
	float s = 0.0f;
	for (int64_t v = 0; v < valid; v++)
		s += expf(l[v] - m);
	*maxv = m;
	*sum = s;
}

static int xent_targets(const int32_t *tgt, int64_t T, int64_t valid)
{
	for (int64_t t = 0; t < T; t++)
		if (tgt[t] < 0 || tgt[t] >= valid)
			return qe_fail(QE_EINVAL, "xent: target %d at t=%lld outside the vocabulary [0,%lld)",
				       (int)tgt[t], (long long)t, (long long)valid);
	return QE_OK;
}

/* Row t of the logits as f32: the row itself, or (bf16) widened into wide. */
static const float *xent_row(const void *logits, qe_dtype dt, int64_t t, int64_t V, float *wide)
{
	if (dt != QE_BF16)
		return (const float *)logits + t * V;
	const uint16_t *src = (const uint16_t *)logits + t * V;
	for (int64_t v = 0; v < V; v++)
		wide[v] = qe_bf16_to_f32(src[v]);
	return wide;
}

int qe_cpu_xent(qe_cpu_scratch *sc, float *loss, void *dlogits, const void *logits, const int32_t *tgt, int64_t T,
		int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	QE_TRY(xent_targets(tgt, T, valid));
	double total = 0.0;
	float g = grad_scale / (float)T;
	float *wide = NULL; /* bf16: the row widened; its gradient goes out rounded */
	if (dt == QE_BF16 && !(wide = qe_cpu_scratch_get(sc, 0, (size_t)(2 * V))))
		return QE_ENOMEM;
	for (int64_t t = 0; t < T; t++) {
		const float *l = xent_row(logits, dt, t, V, wide);
		float maxv, sum;
		xent_row_stats(l, valid, &maxv, &sum);
		/* -log p = log(sum) - (l - max): finite even where p underflows */
		total += (double)(logf(sum) - (l[tgt[t]] - maxv));
		if (dlogits) {
			float inv = 1.0f / sum;
			float *d = wide ? wide + V : (float *)dlogits + t * V;
			for (int64_t v = 0; v < V; v++) /* l[v] is read before d[v] may overwrite it */
				d[v] = xent_grad(l[v], v, valid, tgt[t], maxv, inv, g);
			if (wide) {
				uint16_t *dst = (uint16_t *)dlogits + t * V;
				for (int64_t v = 0; v < V; v++)
					dst[v] = qe_bf16_from_f32(d[v]);
			}
		}
	}
	if (loss)
		*loss = (float)(total / (double)T);
	return QE_OK;
}

int qe_cpu_xent_rows(qe_cpu_scratch *sc, float *loss, float *stats, const void *logits, const int32_t *tgt,
		     int64_t T, int64_t V, int64_t valid, qe_dtype dt)
{
	QE_TRY(xent_targets(tgt, T, valid));
	double total = 0.0;
	float *wide = NULL;
	if (dt == QE_BF16 && !(wide = qe_cpu_scratch_get(sc, 0, (size_t)V)))
		return QE_ENOMEM;
	for (int64_t t = 0; t < T; t++) {
		const float *l = xent_row(logits, dt, t, V, wide);
		float maxv, sum;
		xent_row_stats(l, valid, &maxv, &sum);
		total += (double)(logf(sum) - (l[tgt[t]] - maxv));
		stats[2 * t] = maxv;
		stats[2 * t + 1] = 1.0f / sum;
	}
	if (loss)
		*loss = (float)(total / (double)T);
	return QE_OK;
}

/* ---- optimizer and reductions ----------------------------------------------- */

void qe_cpu_adamw(const qe_adamw_args *a)
{
	float b1c = 1.0f - powf(a->beta1, (float)a->step);
	float b2c = 1.0f - powf(a->beta2, (float)a->step);
	for (int64_t i = 0; i < a->n; i++) {
		float grad = a->grads[0][i];
		for (int vi = 1; vi < a->nviews; vi++)
			grad += a->grads[vi][i];
		grad = grad * a->grad_scale;
		float p = a->param[i];
		float m = a->beta1 * a->m[i] + (1.0f - a->beta1) * grad;
		float v = a->beta2 * a->v[i] + (1.0f - a->beta2) * grad * grad;
		float mhat = m / b1c;
		float vhat = v / b2c;
		a->m[i] = m;
		a->v[i] = v;
		a->param[i] = p - a->lr * (mhat / (sqrtf(vhat) + a->eps) + a->weight_decay * p);
	}
}

void qe_cpu_adamw_many(const qe_adamw_many_args *a)
{
	for (int i = 0; i < a->nseg; i++) {
		const qe_adamw_seg *g = &a->segs[i];
		if (g->n == 0)
			continue; /* its pointers may be NULL */
		qe_adamw_args one = { .param = a->param + g->offset, .m = a->m + g->offset, .v = a->v + g->offset,
				      .grads = g->grads, .nviews = g->nviews, .n = g->n, .lr = a->lr,
				      .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps,
				      .weight_decay = g->weight_decay, .step = a->step, .grad_scale = a->grad_scale };
		qe_cpu_adamw(&one);
	}
}

/*
 * Each segment's squared gradient norm: the scaled view sums of
 * qe_cpu_adamw, squared and summed in fp32 over chunks of QE_CPU_SUMSQ_CHUNK
 * elements, the chunks added in double.
 */
#define QE_CPU_SUMSQ_CHUNK 4096
void qe_cpu_grad_sumsq(const qe_adamw_many_args *a, float *out)
{
	for (int i = 0; i < a->nseg; i++) {
		const qe_adamw_seg *g = &a->segs[i];
		double total = 0;
		for (int64_t c = 0; c < g->n; c += QE_CPU_SUMSQ_CHUNK) {
			int64_t end = c + QE_CPU_SUMSQ_CHUNK < g->n ? c + QE_CPU_SUMSQ_CHUNK : g->n;
			float part = 0;
			for (int64_t k = c; k < end; k++) {
				float grad = g->grads[0][k];
				for (int vi = 1; vi < g->nviews; vi++)
					grad += g->grads[vi][k];
				grad = grad * a->grad_scale;
				part += grad * grad;
			}
			total += (double)part;
		}
		out[i] = (float)total;
	}
}

/* out[i] = ((v0[i] + v1[i]) + v2[i]) ...; out may alias v0 (the DP all-reduce case). */
void qe_cpu_sum_views(float *out, const float *const *views, int nviews, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float s = views[0][i];
		for (int vi = 1; vi < nviews; vi++)
			s += views[vi][i];
		out[i] = s;
	}
}
