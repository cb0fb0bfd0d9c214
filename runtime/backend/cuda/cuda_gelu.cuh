/*
 * cuda_gelu.cuh - GELU (tanh approximation) of one element, forward and
 * backward, the expressions of the cpu reference (cpu_kernels.c), with the
 * special-function unit's exponential and reciprocal (the bound is below).  Shared by
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
 * The exponential and the reciprocal are the special-function unit's
 * (__expf: ex2.approx of x log2 e; rcp.approx.ftz): about 2^-21 relative
 * each, 2 ulp with the rounding around them, against the cpu's expf and
 * division (the cpu tests hold gelu to 1e-5 of max|cpu|).  The correctly
 * rounded forms took three times the instructions, and the GELU casts were
 * bound by them (FC2's input 158 us, FC1's dY 193 us a layer at gpt2 batch
 * 16, against about 65 and 100 us for their bytes).
 */
__device__ __forceinline__ float gelu_exp1(float v)
{
	float a = GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v);
	a = fminf(fmaxf(a, -30.0f), 30.0f);
	return __expf(-2.0f * a);
}

/* 1 / (1 + e), e in [0, e^60]: the approximate reciprocal */
__device__ __forceinline__ float gelu_sig1(float e)
{
	float r;
	asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
	return r;
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
