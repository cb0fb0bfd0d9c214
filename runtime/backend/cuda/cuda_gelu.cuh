/*
 * cuda_gelu.cuh - GELU (tanh approximation) of one element, forward and
 * backward, the expressions of the cpu reference (cpu_kernels.c; the two
 * differ only where expf rounds differently).  Shared by
 * the gelu ops (cuda_kernels.cu) and the cast's prologue (cuda_fp8.cu): one
 * definition, so a cast that applies GELU itself gives the bytes of gelu_fwd
 * followed by the cast.
 */
#ifndef QE_CUDA_GELU_CUH
#define QE_CUDA_GELU_CUH

#include <math.h>

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrtf(2/pi) */

/*
 * exp(-2a) of a = sqrt(2/pi) (v + 0.044715 v^3), a clamped to [-30, 30]
 * (tanh and the logistic function are 1 in float beyond it, and exp stays
 * finite).  0.5 (1 + tanh a) = 1 / (1 + exp(-2a)) and 0.5 sech^2 a =
 * 2 exp(-2a) / (1 + exp(-2a))^2, so GELU and its derivative need this one
 * exponential: tanhf and coshf made the casts that run GELU compute-bound
 * (1.1 TB/s on an H100 where the other casts ran at 2 to 2.5).
 */
__device__ __forceinline__ float gelu_exp1(float v)
{
	float a = GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v);
	a = fminf(fmaxf(a, -30.0f), 30.0f);
	return expf(-2.0f * a);
}

/* 1 / (1 + e), correctly rounded as the division is (the reciprocal instruction and its refinement) */
__device__ __forceinline__ float gelu_sig1(float e)
{
	return __frcp_rn(1.0f + e);
}

__device__ __forceinline__ float gelu_fwd1(float v)
{
	return v * gelu_sig1(gelu_exp1(v));
}

__device__ __forceinline__ float gelu_bwd1(float v, float d)
{
	float e = gelu_exp1(v);
	float sg = gelu_sig1(e);
	float local = sg + 2.0f * v * (e * sg * sg) * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
	return local * d;
}

#endif
