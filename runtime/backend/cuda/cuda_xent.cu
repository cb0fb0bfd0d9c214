/*
 * cuda_xent.cu - softmax cross-entropy over f32 or bf16 logits (backend.h
 * xent and xent_rows).
 *
 * xent_stats_kernel takes one row a block: its threads read the row once,
 * 16 bytes at a time with several loads in flight, each keeping a running
 * max m and sum s of exp(l - m) over its valid logits (when a chunk brings
 * a larger max, s is rescaled by exp(m_old - m_new) first); the threads'
 * pairs are then merged in a fixed tree (cuda_reduce.cuh's order), so the
 * row's max is exact and its sum the same bits on every run.  Thread 0
 * writes the row's loss and, for xent_rows, its max and 1 / sum.  xent
 * with a gradient runs the same statistics kernel and then
 * xent_grad_kernel, which reads the row again and writes (p - onehot) * g
 * (over the logits when dlogits aliases them: each element is read before
 * the same thread writes it) - xent's gradient exists only for tests and
 * the cpu comparison now; training's is made by the head's dY cast from
 * the statistics (cuda_fp8.cu, pre_xent, with cuda_xent.cuh's expression),
 * which gives the bits this file's gradient kernel writes.
 *
 * Before, one kernel staged each row in 100 KB of shared memory and took
 * max, sum and gradient from there: 1.03 ms for the statistics alone of a
 * gpt2 batch-16 step's 1.65 GB of bf16 logits (1.6 TB/s, H100, ncu at base
 * clocks), two blocks an SM and no loads in flight across its phases.
 *
 * The arithmetic against the cpu's (cpu_kernels.c qe_cpu_xent): the same
 * max, the gradient's expressions the same, bf16 widened exactly and the
 * gradient rounded to nearest even; the sum differs in order (the running
 * rescaled sums and the tree, where the cpu adds exp(l - max) left to right)
 * and exp is the hardware's (__expf: a relative error of about |x| 2^-22 at
 * exp(x), x <= 0 here; the exact expf made the kernels instruction-bound).
 * Results are repeatable to the bit and within the stated bounds of the
 * cpu's (tests/backend/test_cuda_ops.c, test_cuda_xent_cast.c).  The loss
 * is the mean of the rows' -log p in double, in a fixed order.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_reduce.cuh"
#include "runtime/backend/cuda/cuda_xent.cuh"

#define XENT_THREADS 256 /* a row a block; eight blocks an SM */
#define XENT_UNROLL 4	 /* 16-byte chunks a thread loads before it uses them */

/* (m, s) merged with (m2, s2): the larger max, each sum rescaled to it (a max of -inf has sum 0) */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2)
{
	float M = fmaxf(m, m2);
	if (M == -INFINITY)
		return;
	s = (m == -INFINITY ? 0.0f : s * __expf(m - M)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - M));
	m = M;
}

/* The running (m, s) with n values v[0..n-1] of one chunk (n: the chunk's valid columns). */
template <int N> __device__ __forceinline__ void lse_chunk(float &m, float &s, const float (&v)[N], int n)
{
	float cm = -INFINITY;
#pragma unroll
	for (int k = 0; k < N; k++)
		if (k < n && v[k] > cm)
			cm = v[k];
	if (cm == -INFINITY)
		return;
	if (cm > m) {
		s = m == -INFINITY ? 0.0f : s * __expf(m - cm);
		m = cm;
	}
#pragma unroll
	for (int k = 0; k < N; k++)
		if (k < n)
			s += __expf(v[k] - m);
}

/* The block's (m, s) merged in a fixed tree: the warps' by shuffles, then the warps' in order. */
__device__ __forceinline__ void lse_block(float &m, float &s)
{
	__shared__ float shm[32], shs[32];
	for (int off = 16; off > 0; off >>= 1)
		lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) {
		shm[w] = m;
		shs[w] = s;
	}
	__syncthreads();
	m = lane < nw ? shm[lane] : -INFINITY;
	s = lane < nw ? shs[lane] : 0.0f;
	for (int off = 16; off > 0; off >>= 1)
		lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
}

/* the PER values of chunk u of a row, widened */
template <typename E> __device__ __forceinline__ void chunk_widen(uint4 u, float (&v)[16 / sizeof(E)])
{
	const E *e = (const E *)&u;
#pragma unroll
	for (int k = 0; k < (int)(16 / sizeof(E)); k++)
		v[k] = xent_widen(e[k]);
}

/*
 * The row's loss (rowloss may be NULL) and statistics (stats may be NULL),
 * and the target check.  vec: the row's bytes are a multiple of 16 and the
 * logits 16-byte aligned, so it moves in uint4 chunks.
 */
template <typename E>
__global__ void __launch_bounds__(XENT_THREADS) xent_stats_kernel(float *rowloss, float *stats, const E *logits,
								   const int32_t *tgt, int64_t V, int64_t nvalid,
								   unsigned *err, bool vec)
{
	constexpr int PER = 16 / sizeof(E);
	int64_t t = blockIdx.x;
	const E *l = logits + t * V;
	float m = -INFINITY, s = 0.0f;
	if (vec) {
		const uint4 *src = (const uint4 *)l;
		int64_t nc = (nvalid + PER - 1) / PER; /* chunks holding a valid column */
		for (int64_t i0 = threadIdx.x; i0 < nc; i0 += (int64_t)XENT_UNROLL * blockDim.x) {
			uint4 u[XENT_UNROLL];
#pragma unroll
			for (int j = 0; j < XENT_UNROLL; j++) {
				int64_t i = i0 + (int64_t)j * blockDim.x;
				if (i < nc)
					u[j] = src[i];
			}
#pragma unroll
			for (int j = 0; j < XENT_UNROLL; j++) {
				int64_t i = i0 + (int64_t)j * blockDim.x;
				if (i < nc) {
					float v[PER];
					chunk_widen<E>(u[j], v);
					int64_t left = nvalid - i * PER;
					lse_chunk<PER>(m, s, v, left < PER ? (int)left : PER);
				}
			}
		}
	} else {
		for (int64_t c = threadIdx.x; c < nvalid; c += blockDim.x) {
			float v[1] = { xent_widen(l[c]) };
			lse_chunk<1>(m, s, v, 1);
		}
	}
	lse_block(m, s);
	if (threadIdx.x != 0)
		return;
	int32_t tg = tgt[t];
	bool valid = tg >= 0 && tg < nvalid;
	if (!valid)
		atomicOr(err, QE_CUDA_ERR_TARGET);
	if (rowloss)
		rowloss[t] = valid ? logf(s) - (xent_widen(l[tg]) - m) : __uint_as_float(0x7FC00000u);
	if (stats) {
		stats[2 * t] = m;
		stats[2 * t + 1] = 1.0f / s;
	}
}

/* xent's gradient of row blockIdx.x from the statistics: (p - onehot) * g, 0 in the padding (cuda_xent.cuh) */
template <typename E>
__global__ void __launch_bounds__(XENT_THREADS) xent_grad_kernel(E *dlogits, const E *logits, const float *stats,
								  const int32_t *tgt, int64_t V, int64_t nvalid, float g,
								  bool vec)
{
	constexpr int PER = 16 / sizeof(E);
	int64_t t = blockIdx.x;
	const E *l = logits + t * V;
	E *d = dlogits + t * V;
	int32_t tg = tgt[t];
	float maxv = stats[2 * t], inv = stats[2 * t + 1];
	if (vec) {
		for (int64_t i = threadIdx.x; i < V / PER; i += blockDim.x) {
			uint4 u = ((const uint4 *)l)[i];
			E *e = (E *)&u;
#pragma unroll
			for (int k = 0; k < PER; k++)
				e[k] = xent_narrow<E>(xent_grad(xent_widen(e[k]), i * PER + k, nvalid, tg, maxv, inv, g));
			((uint4 *)d)[i] = u;
		}
	} else {
		for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
			d[v] = xent_narrow<E>(xent_grad(xent_widen(l[v]), v, nvalid, tg, maxv, inv, g));
	}
}

/*
 * The mean over rows in double, in a fixed order: thread i adds rows i*k ..
 * i*k + k - 1 in order (k = ceil(T / blockDim)), then the threads' sums are
 * added in a fixed tree, so the bits do not depend on timing.  (Thread 0
 * adding every row in order took 159 us for 16384 rows.)
 */
#define XENT_LOSS_THREADS 1024
__global__ void __launch_bounds__(XENT_LOSS_THREADS) xent_loss_kernel(float *loss, const float *rowloss, int64_t T)
{
	__shared__ double part[XENT_LOSS_THREADS];
	int64_t k = (T + XENT_LOSS_THREADS - 1) / XENT_LOSS_THREADS;
	int64_t t0 = threadIdx.x * k, t1 = t0 + k < T ? t0 + k : T;
	double acc = 0.0;
	for (int64_t t = t0; t < t1; t++)
		acc += (double)rowloss[t];
	part[threadIdx.x] = acc;
	__syncthreads();
	for (int half = XENT_LOSS_THREADS / 2; half > 0; half >>= 1) {
		if (threadIdx.x < half)
			part[threadIdx.x] += part[threadIdx.x + half];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*loss = (float)(part[0] / (double)T);
}

/* the statistics (into stats: the caller's, or scratch for xent's gradient), then the gradient when asked */
template <typename E>
static int launch_rows(qe_stream *s, const char *op, float *rowloss, float *stats, void *dlogits, const void *logits,
		       const int32_t *tgt, int64_t T, int64_t V, int64_t valid, float g)
{
	bool vec = (V * sizeof(E)) % 16 == 0 && ((uintptr_t)logits | (uintptr_t)dlogits) % 16 == 0;
	xent_stats_kernel<E><<<(unsigned)T, XENT_THREADS, 0, s->cs>>>(rowloss, stats, (const E *)logits, tgt, V, valid,
								      s->words + 1, vec);
	int rc = qe__cuda_launched(op, "xent_stats_kernel");
	if (rc || !dlogits)
		return rc;
	xent_grad_kernel<E><<<(unsigned)T, XENT_THREADS, 0, s->cs>>>((E *)dlogits, (const E *)logits, stats, tgt, V,
								     valid, g, vec);
	return qe__cuda_launched(op, "xent_grad_kernel");
}

/*
 * xent and xent_rows: the rows' statistics (and xent's gradient from
 * them), then the loss from the rows' losses.  The gradient's g =
 * grad_scale / T is computed here, on the host, as the cast's pre_xent
 * launcher computes it.
 */
static int xent_run(qe_stream *s, const char *op, float *loss, float *stats, void *dlogits, const void *logits,
		    const int32_t *tgt, int64_t T, int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	float *rowloss = NULL;
	int rc;
	if (T > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: %lld rows", op, (long long)T);
	/* scratch: the rows' losses, then (xent's gradient) the rows' statistics */
	size_t lb = qe__cuda_align256((size_t)T * sizeof(float));
	float *scr = NULL;
	if ((loss || (dlogits && !stats)) && (rc = qe__cuda_scratch(s, 2 * lb + (size_t)T * 2 * sizeof(float), op,
								    (void **)&scr)))
		return rc;
	if (loss)
		rowloss = scr;
	if (dlogits && !stats)
		stats = (float *)((char *)scr + lb);
	float g = grad_scale / (float)T;
	rc = dt == QE_BF16
		     ? launch_rows<__nv_bfloat16>(s, op, rowloss, stats, dlogits, logits, tgt, T, V, valid, g)
		     : launch_rows<float>(s, op, rowloss, stats, dlogits, logits, tgt, T, V, valid, g);
	if (rc)
		return rc;
	if (loss) {
		xent_loss_kernel<<<1, XENT_LOSS_THREADS, 0, s->cs>>>(loss, rowloss, T);
		rc = qe__cuda_launched(op, "xent_loss_kernel");
	}
	return rc;
}

extern "C" int qe__cuda_xent(qe_stream *s, float *loss, void *dlogits, const void *logits, const int32_t *tgt,
			     int64_t T, int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	return xent_run(s, "xent", loss, NULL, dlogits, logits, tgt, T, V, valid, grad_scale, dt);
}

/* xent_rows: xent's statistics kernel alone, so the loss and the rows' max and 1 / sum are xent's own bits. */
extern "C" int qe__cuda_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt,
				  int64_t T, int64_t V, int64_t valid, qe_dtype dt)
{
	return xent_run(s, "xent_rows", loss, stats, NULL, logits, tgt, T, V, valid, 0.0f, dt);
}
