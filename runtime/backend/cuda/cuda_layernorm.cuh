/*
 * cuda_layernorm.cuh - what the layernorm's two files share
 * (cuda_layernorm.cu: the forward and the residual add; cuda_layernorm_bwd.cu:
 * the backward and the column sums): a value or four of them as f32 from
 * f32 or bf16 and back (four bf16 move as one 8-byte word where four f32
 * move as a 16-byte float4), whether a pointer takes the four-wide path,
 * and the row kernels' block sizes.
 */
#ifndef QE_CUDA_LAYERNORM_CUH
#define QE_CUDA_LAYERNORM_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "runtime/backend/cuda/cuda_grid.cuh"

/* one value as f32: bf16 widened exactly */
__device__ __forceinline__ float ld1(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld1(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }

/* one value stored: f32 as it is, bf16 rounded to nearest even (qe_bf16_from_f32's code) */
__device__ __forceinline__ void st1(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st1(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* Left to right over the four lanes, as a scalar loop adds them. */
__device__ __forceinline__ float sum4(float acc, float4 v)
{
	return (((acc + v.x) + v.y) + v.z) + v.w;
}

/* Float4 i of p: one 16-byte load when p is aligned, four loads otherwise (same values). */
__device__ __forceinline__ float4 ld4(const float *p, int64_t i, bool al)
{
	if (al)
		return ((const float4 *)p)[i];
	return make_float4(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
}

/* four bf16 at p + 4i widened exactly (al: p is 8-byte aligned) */
__device__ __forceinline__ float4 ld4(const __nv_bfloat16 *p, int64_t i, bool al)
{
	if (al) {
		uint2 u = ((const uint2 *)p)[i];
		float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
		float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
		return make_float4(a.x, a.y, b.x, b.y);
	}
	p += 4 * i;
	return make_float4(__bfloat162float(p[0]), __bfloat162float(p[1]), __bfloat162float(p[2]),
			   __bfloat162float(p[3]));
}

__device__ __forceinline__ void st4(float *p, int64_t i, float4 v, bool al)
{
	if (al) {
		((float4 *)p)[i] = v;
		return;
	}
	p[4 * i] = v.x;
	p[4 * i + 1] = v.y;
	p[4 * i + 2] = v.z;
	p[4 * i + 3] = v.w;
}

/*
 * v stored as the four elements at p + 4i, returned as stored: f32 as it
 * is; bf16 rounded to nearest even (one 8-byte store when al: p 8-byte
 * aligned) and widened back, the values a reader of the stored tensor sees
 * - what the residual add's statistics must be taken from.
 */
__device__ __forceinline__ float4 put4(float *p, int64_t i, float4 v, bool al)
{
	st4(p, i, v, al);
	return v;
}

__device__ __forceinline__ float4 put4(__nv_bfloat16 *p, int64_t i, float4 v, bool al)
{
	__nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
	if (al) {
		((uint2 *)p)[i] = make_uint2(*(const uint32_t *)&lo, *(const uint32_t *)&hi);
	} else {
		p[4 * i] = lo.x;
		p[4 * i + 1] = lo.y;
		p[4 * i + 2] = hi.x;
		p[4 * i + 3] = hi.y;
	}
	float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
	return make_float4(a.x, a.y, b.x, b.y);
}

/*
 * Whether p may take the four-wide loads above: 16-byte aligned for f32, 8
 * for bf16 (NULL passes: a pointer not read).  Host side, per launch.
 */
template <typename T> static inline bool al4(const T *p)
{
	return (uintptr_t)p % (4 * sizeof(T)) == 0;
}

/* Layernorm keeps a row in registers: up to this many float4s per thread, 256 threads a row. */
#define LN_VEC_MAX 8

/* One block per row: a power of two up to 256, at least a warp. */
static inline unsigned row_threads(int64_t cols)
{
	unsigned t = 32;
	while (t < THREADS && (int64_t)t < cols)
		t <<= 1;
	return t;
}

/*
 * The register-resident layernorm applies when a row is whole float4s that
 * fit LN_VEC_MAX per thread; *threads gets its block size (a warp multiple,
 * at most THREADS).  A function of cols alone, so a shape always takes the
 * same kernel.
 */
static inline bool ln_vec_threads(int64_t cols, unsigned *threads)
{
	if (cols % 4 != 0 || cols == 0)
		return false;
	int64_t c4 = cols / 4;
	int64_t t = (c4 + 31) / 32 * 32;
	if (t > THREADS)
		t = THREADS;
	if (c4 > t * LN_VEC_MAX)
		return false;
	*threads = (unsigned)t;
	return true;
}

#endif
