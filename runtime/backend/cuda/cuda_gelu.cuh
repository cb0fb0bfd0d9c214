/*
 * cuda_gelu.cuh - GELU (tanh approximation) of one element, forward and
 * backward, the expressions of the cpu reference (cpu_kernels.c).  Shared by
 * the gelu ops (cuda_kernels.cu) and the cast's prologue (cuda_fp8.cu): one
 * definition, so a cast that applies GELU itself gives the bytes of gelu_fwd
 * followed by the cast.
 */
#ifndef QE_CUDA_GELU_CUH
#define QE_CUDA_GELU_CUH

#include <math.h>

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrtf(2/pi) */

__device__ __forceinline__ float gelu_fwd1(float v)
{
	float cube = 0.044715f * v * v * v;
	return 0.5f * v * (1.0f + tanhf(GELU_SCALING_FACTOR * (v + cube)));
}

__device__ __forceinline__ float gelu_bwd1(float v, float d)
{
	float cube = 0.044715f * v * v * v;
	float arg = GELU_SCALING_FACTOR * (v + cube);
	float th = tanhf(arg);
	float ch = coshf(arg);
	float sech = 1.0f / (ch * ch);
	float local = 0.5f * (1.0f + th) + v * 0.5f * sech * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
	return local * d;
}

#endif
