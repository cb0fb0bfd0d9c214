/*
 * cuda_reduce.cuh - warp and block reductions in a fixed tree (the same
 * inputs give the same bits whatever the timing), shared by the row kernels
 * of cuda_layernorm.cu and cuda_layernorm_bwd.cu and the cross-entropy of cuda_xent.cu.
 */
#ifndef QE_CUDA_REDUCE_CUH
#define QE_CUDA_REDUCE_CUH

#include <math.h>

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v = v + __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

/* Sum over the block in a fixed tree; every thread gets the same value. blockDim.x % 32 == 0. */
static __device__ __forceinline__ float block_sum(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads(); /* sh may still be read by an earlier call */
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	return warp_sum(lane < nw ? sh[lane] : 0.0f);
}

static __device__ __forceinline__ float block_max(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	return warp_max(lane < nw ? sh[lane] : -INFINITY);
}

#endif
