/*
 * cuda_attn.cu - causal multi-head attention over qkv[T, 3H]: cuBLAS
 * strided-batched GEMMs (one batch entry per head) for Q.K^T and P.V and
 * their gradients, and fused causal softmax kernels (forward and backward).
 *
 * The GEMMs run on tensor cores in TF32 (operands rounded to a 10-bit
 * mantissa, products summed in fp32; DESIGN.md 3 allows bf16, which keeps 7
 * bits): at h4096 plain fp32 SGEMMs took 24 us each and a quarter of a
 * step's attention-and-elementwise time.  Storage stays fp32.
 * Semantics are the cpu's (cpu_kernels.c, llm.c's attention): probs
 * [nh, T, T] with zeros above the diagonal are saved, outputs are
 * overwritten.  That is enough at sequence length 256 (DESIGN.md 3).
 *
 * Layout: q, k, v of head h are the D = H/nh columns h*D.. of the first,
 * second and third H-wide part of each qkv row; as column-major matrices
 * they are D x T with leading dimension 3H, one head D floats after the
 * other - exactly what strided batching wants, with no permute.  A row-major
 * [T, T] matrix per head is its own transpose in column-major terms, which
 * is how the GEMMs below read and write probs:
 *   scores:  S^T[t2,t] = K_h^T Q_h             (alpha = 1/sqrt(D))
 *   out:     O_h[:,t]  = V_h P^T               (O_h: D x T, ld H)
 *   dP^T              = V_h^T dO_h
 *   dS = P * (dP - rowsum(P * dP))             (softmax backward kernel)
 *   dQ_h = K_h dS^T * scale,  dK_h = Q_h dS * scale,  dV_h = dO_h P
 * The masked upper triangle of P and dS is exactly zero, so the full-square
 * GEMMs add only zeros there.  Reductions in the kernels are warp butterflies
 * in a fixed order: repeatable, but not the cpu's sequential sums.
 */
#include <math.h>

#include "runtime/backend/cuda/cuda_int.h"

#define ROWS_PER_BLOCK 4 /* one warp per softmax row */

/* ---- kernels ------------------------------------------------------------------ */

__device__ __forceinline__ float warp_max(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v = v + __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

/* Row (h, t) of probs holds scaled scores; make it the causal softmax, zeros after t. */
__global__ void softmax_causal_kernel(float *probs, int64_t T, int64_t nrows)
{
	int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= nrows)
		return; /* whole warps leave together */
	int64_t t = row % T;
	float *p = probs + row * T;
	float mx = -INFINITY;
	for (int64_t j = lane; j <= t; j += 32)
		mx = fmaxf(mx, p[j]); /* like the cpu's '>' scan, a NaN score is skipped */
	mx = warp_max(mx);
	float sum = 0.0f;
	for (int64_t j = lane; j <= t; j += 32) {
		float e = expf(p[j] - mx);
		p[j] = e;
		sum += e;
	}
	sum = warp_sum(sum);
	float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
	for (int64_t j = lane; j < T; j += 32)
		p[j] = j <= t ? p[j] * inv : 0.0f;
}

/* ds (holding dP) becomes dS = P * (dP - sum_j P dP) on the causal part, 0 elsewhere. */
__global__ void softmax_causal_bwd_kernel(float *ds, const float *probs, int64_t T, int64_t nrows)
{
	int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	if (row >= nrows)
		return;
	int64_t t = row % T;
	float *d = ds + row * T;
	const float *p = probs + row * T;
	float dot = 0.0f;
	for (int64_t j = lane; j <= t; j += 32)
		dot += p[j] * d[j];
	dot = warp_sum(dot);
	for (int64_t j = lane; j < T; j += 32)
		d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

/* ---- launchers ------------------------------------------------------------------- */

static int softmax_launch(qe_stream *s, float *probs, int64_t T, int nh)
{
	int64_t nrows = (int64_t)nh * T;
	int64_t blocks = (nrows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
	if (blocks > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "attn_fwd: %lld softmax rows", (long long)nrows);
	softmax_causal_kernel<<<(unsigned)blocks, 32 * ROWS_PER_BLOCK, 0, s->cs>>>(probs, T, nrows);
	return qe__cuda_launched("attn_fwd", "softmax_causal_kernel");
}

/* One strided-batched fp32-storage GEMM over the heads (TF32 tensor cores), with our error text. */
static int sgemm(qe_stream *s, const char *op, const char *what, cublasOperation_t ta, cublasOperation_t tb, int m,
		 int n, int k, float alpha, const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
		 float *C, int ldc, long long sC, int batch)
{
	const float beta = 0.0f;
	cublasStatus_t st = cublasGemmStridedBatchedEx(s->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sA, B,
						       CUDA_R_32F, ldb, sB, &beta, C, CUDA_R_32F, ldc, sC, batch,
						       CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
	return st == CUBLAS_STATUS_SUCCESS ? QE_OK : qe__blas_err(st, op, what);
}

extern "C" int qe__cuda_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh)
{
	const char *op = "attn_fwd";
	if (T == 0)
		return QE_OK;
	int D = (int)(H / nh), t = (int)T, h3 = (int)(3 * H), hh = (int)H;
	long long TT = (long long)T * T;
	float scale = 1.0f / sqrtf((float)D);
	int rc;
	if (D == 0) {
		/* no features: every score is 0 (the cpu's empty dot products) */
		cudaError_t e = cudaMemsetAsync(probs, 0, (size_t)TT * nh * sizeof(float), s->cs);
		if (e != cudaSuccess)
			return qe__cuda_err(e, op, "cudaMemsetAsync(probs)");
		return softmax_launch(s, probs, T, nh);
	}
	if ((rc = sgemm(s, op, "scores K^T Q", CUBLAS_OP_T, CUBLAS_OP_N, t, t, D, scale, qkv + H, h3, D, qkv, h3, D,
			probs, t, TT, nh)))
		return rc;
	if ((rc = softmax_launch(s, probs, T, nh)))
		return rc;
	return sgemm(s, op, "out V P^T", CUBLAS_OP_N, CUBLAS_OP_N, D, t, t, 1.0f, qkv + 2 * H, h3, D, probs, t, TT, out,
		     hh, D, nh);
}

extern "C" int qe__cuda_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs,
				 int64_t T, int64_t H, int nh)
{
	const char *op = "attn_bwd";
	if (T == 0 || H == 0)
		return QE_OK;
	int D = (int)(H / nh), t = (int)T, h3 = (int)(3 * H), hh = (int)H;
	long long TT = (long long)T * T;
	float scale = 1.0f / sqrtf((float)D);
	float *ds = NULL;
	int rc = qe__cuda_scratch(s, (size_t)TT * nh * sizeof(float), op, (void **)&ds);
	if (rc)
		return rc;
	/* dP^T[t2,t] = sum_i V[t2,i] dO[t,i] */
	if ((rc = sgemm(s, op, "dP = dO V^T", CUBLAS_OP_T, CUBLAS_OP_N, t, t, D, 1.0f, qkv + 2 * H, h3, D, dout, hh, D,
			ds, t, TT, nh)))
		return rc;
	int64_t nrows = (int64_t)nh * T;
	int64_t blocks = (nrows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
	softmax_causal_bwd_kernel<<<(unsigned)blocks, 32 * ROWS_PER_BLOCK, 0, s->cs>>>(ds, probs, T, nrows);
	if ((rc = qe__cuda_launched(op, "softmax_causal_bwd_kernel")))
		return rc;
	/* dQ[t,i] = scale * sum_t2 dS[t,t2] K[t2,i] */
	if ((rc = sgemm(s, op, "dQ = dS K", CUBLAS_OP_N, CUBLAS_OP_N, D, t, t, scale, qkv + H, h3, D, ds, t, TT, dqkv, h3,
			D, nh)))
		return rc;
	/* dK[t2,i] = scale * sum_t dS[t,t2] Q[t,i] */
	if ((rc = sgemm(s, op, "dK = dS^T Q", CUBLAS_OP_N, CUBLAS_OP_T, D, t, t, scale, qkv, h3, D, ds, t, TT, dqkv + H,
			h3, D, nh)))
		return rc;
	/* dV[t2,i] = sum_t P[t,t2] dO[t,i] */
	return sgemm(s, op, "dV = P^T dO", CUBLAS_OP_N, CUBLAS_OP_T, D, t, t, 1.0f, dout, hh, D, probs, t, TT, dqkv + 2 * H,
		     h3, D, nh);
}
