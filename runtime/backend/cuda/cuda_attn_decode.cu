/*
 * cuda_attn_decode.cu - attention of one new query row over cached keys and
 * values (attn_decode, backend.h): the step of generating a token with a
 * key/value cache (runtime/model/infer.h).
 *
 * One block per head, DECODE_THREADS threads.  The work is tiny (nh x T x D
 * products per layer and token), so the kernel is written for plainness
 * and determinism, not for occupancy:
 *   scores  a warp per cached position, its lanes over the head's columns,
 *           a fixed butterfly (cuda_reduce.cuh) - not the cpu's left-to-right
 *           sum, hence a bound rather than bytes (test_cuda_attn.c);
 *   softmax max, exp and sum over the positions in block-wide fixed trees,
 *           the probabilities written to probs as the cpu writes them;
 *   output  the positions cut into G = DECODE_THREADS / D contiguous runs
 *           (one when D > DECODE_THREADS), each summed in position order by
 *           a group of D threads, one thread per column; then the G partial
 *           sums added in run order.  With G = 1 the sum is the cpu's.
 * No atomics anywhere, so two runs give the same bytes.  This folder is
 * compiled with -fmad=false, so each product and add rounds as the cpu's.
 */
#include <math.h>

#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_reduce.cuh"

#define DECODE_THREADS 256
#define DECODE_MAX_D 4096 /* q and the partial sums in shared memory: (D + DECODE_THREADS) floats <= 17 KiB */

/* ---- kernels ------------------------------------------------------------------ */

__global__ void attn_decode_kernel(float *out, float *probs, const float *q, const float *k, const float *v,
				   int64_t T, int64_t H, int D, float scale)
{
	extern __shared__ float sh[]; /* q of this head [D], then the output's partial sums [G * D] */
	__shared__ float red[32];
	float *qs = sh, *part = sh + D;
	int h = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int64_t col = (int64_t)h * D;
	for (int i = threadIdx.x; i < D; i += blockDim.x)
		qs[i] = q[col + i];
	__syncthreads();

	float *p = probs + (int64_t)h * T;
	for (int64_t t = w; t < T; t += nw) {
		const float *kt = k + t * H + col;
		float dot = 0.0f;
		for (int i = lane; i < D; i += 32)
			dot += qs[i] * kt[i];
		dot = warp_sum(dot);
		if (lane == 0)
			p[t] = dot * scale;
	}
	__syncthreads(); /* the scores in global memory are the block's from here */

	float mx = -INFINITY;
	for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
		mx = fmaxf(mx, p[t]); /* like the cpu's '>' scan, a NaN score is skipped */
	mx = block_max(mx, red);
	float sum = 0.0f;
	for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
		float e = expf(p[t] - mx);
		p[t] = e;
		sum += e;
	}
	sum = block_sum(sum, red);
	float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
	for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
		p[t] = p[t] * inv;
	__syncthreads();

	int G = D > 0 && D <= (int)blockDim.x ? (int)blockDim.x / D : 1;
	if (G == 1) {
		for (int i = threadIdx.x; i < D; i += blockDim.x) {
			const float *vc = v + col + i;
			float acc = 0.0f;
			for (int64_t t = 0; t < T; t++)
				acc += p[t] * vc[t * H];
			out[col + i] = acc;
		}
		return;
	}
	int g = threadIdx.x / D, i = threadIdx.x % D;
	int64_t run = (T + G - 1) / G;
	if (g < G) {
		int64_t t0 = g * run, t1 = t0 + run < T ? t0 + run : T;
		const float *vc = v + col + i;
		float acc = 0.0f;
		for (int64_t t = t0; t < t1; t++)
			acc += p[t] * vc[t * H];
		part[g * D + i] = acc;
	}
	__syncthreads();
	if (threadIdx.x < D) {
		float acc = part[threadIdx.x];
		for (int r = 1; r < G; r++)
			acc += part[r * D + threadIdx.x];
		out[col + threadIdx.x] = acc;
	}
}

/* ---- launcher ------------------------------------------------------------------- */

extern "C" int qe__cuda_attn_decode(qe_stream *s, float *out, float *probs, const float *q, const float *k,
				    const float *v, int64_t T, int64_t H, int nh)
{
	int64_t D = H / nh;
	if (D > DECODE_MAX_D)
		return qe_fail(QE_EUNSUPPORTED, "attn_decode: head dimension %lld (at most %d on cuda)", (long long)D,
			       DECODE_MAX_D);
	size_t shmem = (size_t)(D + DECODE_THREADS) * sizeof(float);
	float scale = 1.0f / sqrtf((float)D);
	attn_decode_kernel<<<(unsigned)nh, DECODE_THREADS, shmem, s->cs>>>(out, probs, q, k, v, T, H, (int)D, scale);
	return qe__cuda_launched("attn_decode", "attn_decode_kernel");
}
