/*
 * cuda_xent.cu - softmax cross-entropy over f32 or bf16 logits (backend.h
 * xent), one block per row.
 *
 * The row kernel brings its row into shared memory once, with 16-byte loads,
 * taking the max as it goes; the sum of exp(l - max) and the gradient are
 * then computed from shared memory, and the gradient goes out with 16-byte
 * stores (over the logits when dlogits aliases them: the row is read whole
 * before any of it is written).  A GPT-2 row is 50304 logits: 100 KB in
 * bf16, 200 KB in f32, so the logits cross memory once each way.  Rows too
 * long for shared memory take the streaming kernel, which reads the row
 * from global memory in each pass.
 *
 * The arithmetic is the cpu's (cpu_kernels.c qe_cpu_xent): the max and
 * every exp and product in the same expressions, bf16 widened exactly and
 * the gradient rounded to nearest even, but for two things: the row sum
 * runs in a fixed tree instead of left to right, and exp is the hardware's
 * (__expf: a relative error of about |x| 2^-22 at exp(x), x <= 0 here; the
 * exact expf made the kernel instruction-bound, two exponentials an
 * element).  Results are repeatable to the bit and within the stated
 * bounds of the cpu's (tests/backend/test_cuda_ops.c).  The loss is the mean of the rows' -log p in
 * double, in a fixed order.
 *
 * xent_rows runs the same kernels without the gradient and keeps each row's
 * max and 1 / sum instead: the head's dY cast (cuda_fp8.cu, pre_xent) makes
 * the gradient from them with this file's expression (cuda_xent.cuh) as it
 * loads the logits, so the 1.65 GB gradient of GPT-2's head is neither
 * written here nor read back there, and its bits are those xent would have
 * stored.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_reduce.cuh"
#include "runtime/backend/cuda/cuda_xent.cuh"

#define XENT_THREADS 1024 /* two 100 KB bf16 rows an SM: every thread slot busy (31 registers) */
/* Rows of at most this many bytes are staged in shared memory (the H100/H200 allow 227 KB a block). */
#define XENT_SMEM_MAX ((size_t)200 << 10)

/* The row's loss and the target check, by thread 0, once max and sum are known. */
__device__ __forceinline__ void row_loss(float *rowloss, int64_t t, bool valid, float lt, float maxv, float sum,
					 unsigned *err)
{
	if (threadIdx.x != 0)
		return;
	if (!valid)
		atomicOr(err, QE_CUDA_ERR_TARGET);
	if (rowloss)
		rowloss[t] = valid ? logf(sum) - (lt - maxv) : __uint_as_float(0x7FC00000u);
}

/*
 * The row's statistics for xent_rows (stats not NULL), by thread 0: the max
 * and the inverse sum the gradient below is made from, so that a cast's
 * pre_xent prologue that reads them makes the same gradient bits.
 */
__device__ __forceinline__ void row_stats(float *stats, int64_t t, float maxv, float inv)
{
	if (stats && threadIdx.x == 0) {
		stats[2 * t] = maxv;
		stats[2 * t + 1] = inv;
	}
}

/*
 * The row in shared memory (V * sizeof(E) bytes of dynamic shared memory).
 * vec: the row's bytes are a multiple of 16 and both pointers 16-byte
 * aligned, so it moves in uint4s.
 */
template <typename E>
__global__ void xent_smem_kernel(float *rowloss, float *stats, E *dlogits, const E *logits, const int32_t *tgt,
				 int64_t V, int64_t nvalid, float g, unsigned *err, bool vec)
{
	extern __shared__ uint4 stage[];
	__shared__ float sh[32];
	E *row = (E *)stage;
	int64_t t = blockIdx.x;
	const E *l = logits + t * V;
	int32_t tg = tgt[t];
	bool valid = tg >= 0 && tg < nvalid;
	constexpr int per = 16 / sizeof(E);
	float mx = -INFINITY;
	if (vec) {
		const uint4 *src = (const uint4 *)l;
		for (int64_t i = threadIdx.x; i < V / per; i += blockDim.x) {
			uint4 u = src[i];
			stage[i] = u;
			const E *e = (const E *)&u;
#pragma unroll
			for (int k = 0; k < per; k++) {
				float lv = xent_widen(e[k]);
				if (i * per + k < nvalid && lv > mx)
					mx = lv;
			}
		}
	} else {
		for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
			E e = l[v];
			row[v] = e;
			float lv = xent_widen(e);
			if (v < nvalid && lv > mx)
				mx = lv;
		}
	}
	float maxv = block_max(mx, sh); /* its barriers also make the staged row visible */
	float part = 0.0f;
	for (int64_t v = threadIdx.x; v < nvalid; v += blockDim.x)
		part += __expf(xent_widen(row[v]) - maxv);
	float sum = block_sum(part, sh);
	row_loss(rowloss, t, valid, valid ? xent_widen(row[tg]) : 0.0f, maxv, sum, err);
	float inv = 1.0f / sum;
	row_stats(stats, t, maxv, inv);
	if (!dlogits)
		return;
	E *d = dlogits + t * V;
	if (vec) {
		for (int64_t i = threadIdx.x; i < V / per; i += blockDim.x) {
			uint4 u = stage[i];
			E *e = (E *)&u;
#pragma unroll
			for (int k = 0; k < per; k++)
				e[k] = xent_narrow<E>(xent_grad(xent_widen(e[k]), i * per + k, nvalid, tg, maxv, inv, g));
			((uint4 *)d)[i] = u;
		}
	} else {
		for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
			d[v] = xent_narrow<E>(xent_grad(xent_widen(row[v]), v, nvalid, tg, maxv, inv, g));
	}
}

/*
 * Rows too long for shared memory: the max, the sum and the gradient each
 * read the row from global memory; dlogits may alias logits (each element
 * is read before it is written, by the same thread, after the reductions).
 */
template <typename E>
__global__ void xent_stream_kernel(float *rowloss, float *stats, E *dlogits, const E *logits, const int32_t *tgt,
				   int64_t V, int64_t nvalid, float g, unsigned *err)
{
	__shared__ float sh[32];
	int64_t t = blockIdx.x;
	const E *l = logits + t * V;
	int32_t tg = tgt[t];
	bool valid = tg >= 0 && tg < nvalid;
	float lt = valid ? xent_widen(l[tg]) : 0.0f; /* read before any thread may overwrite it */
	float mx = -INFINITY;
	for (int64_t v = threadIdx.x; v < nvalid; v += blockDim.x) {
		float lv = xent_widen(l[v]);
		if (lv > mx)
			mx = lv;
	}
	float maxv = block_max(mx, sh);
	float part = 0.0f;
	for (int64_t v = threadIdx.x; v < nvalid; v += blockDim.x)
		part += __expf(xent_widen(l[v]) - maxv);
	float sum = block_sum(part, sh);
	row_loss(rowloss, t, valid, lt, maxv, sum, err);
	float inv = 1.0f / sum;
	row_stats(stats, t, maxv, inv);
	if (!dlogits)
		return;
	E *d = dlogits + t * V;
	for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
		d[v] = xent_narrow<E>(xent_grad(xent_widen(l[v]), v, nvalid, tg, maxv, inv, g));
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

template <typename E>
static int launch_rows(qe_stream *s, const char *op, float *rowloss, float *stats, void *dlogits, const void *logits,
		       const int32_t *tgt, int64_t T, int64_t V, int64_t valid, float g)
{
	size_t bytes = (size_t)V * sizeof(E);
	if (bytes <= XENT_SMEM_MAX) {
		/* above 48 KB a kernel must ask for its shared memory (once a process, before any capture) */
		static bool asked = false;
		if (bytes > ((size_t)48 << 10) && !asked) {
			cudaError_t e = cudaFuncSetAttribute(xent_smem_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
							     (int)XENT_SMEM_MAX);
			if (e != cudaSuccess)
				return qe__cuda_err(e, op, "cudaFuncSetAttribute(xent_smem_kernel shared memory)");
			asked = true;
		}
		bool vec = bytes % 16 == 0 && ((uintptr_t)logits | (uintptr_t)dlogits) % 16 == 0;
		xent_smem_kernel<E><<<(unsigned)T, XENT_THREADS, bytes, s->cs>>>(rowloss, stats, (E *)dlogits,
										 (const E *)logits, tgt, V, valid, g,
										 s->words + 1, vec);
		return qe__cuda_launched(op, "xent_smem_kernel");
	}
	xent_stream_kernel<E><<<(unsigned)T, XENT_THREADS, 0, s->cs>>>(rowloss, stats, (E *)dlogits, (const E *)logits,
								       tgt, V, valid, g, s->words + 1);
	return qe__cuda_launched(op, "xent_stream_kernel");
}

/*
 * xent and xent_rows: the rows' kernel (writing the gradient, the
 * statistics, or neither), then the loss from the rows' losses.  The
 * gradient's g = grad_scale / T is computed here, on the host, as the cast's
 * pre_xent launcher computes it.
 */
static int xent_run(qe_stream *s, const char *op, float *loss, float *stats, void *dlogits, const void *logits,
		    const int32_t *tgt, int64_t T, int64_t V, int64_t valid, float grad_scale, qe_dtype dt)
{
	float *rowloss = NULL;
	int rc;
	if (T > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: %lld rows", op, (long long)T);
	if (loss && (rc = qe__cuda_scratch(s, (size_t)T * sizeof(float), op, (void **)&rowloss)))
		return rc;
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

/*
 * xent_rows: xent's kernels with no gradient, so the loss and the rows'
 * max and 1 / sum are xent's own bits; the row still goes through shared
 * memory (the sum reads it there, as xent's does) for rows that fit.
 */
extern "C" int qe__cuda_xent_rows(qe_stream *s, float *loss, float *stats, const void *logits, const int32_t *tgt,
				  int64_t T, int64_t V, int64_t valid, qe_dtype dt)
{
	return xent_run(s, "xent_rows", loss, stats, NULL, logits, tgt, T, V, valid, 0.0f, dt);
}
