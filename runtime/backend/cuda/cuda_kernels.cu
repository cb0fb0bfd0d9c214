/*
 * cuda_kernels.cu - the elementwise ops of the table: add, add_inplace and
 * GELU forward and backward (the layernorm forward and the residual add are
 * cuda_layernorm.cu, its backward and the column sums cuda_layernorm_bwd.cu,
 * the optimizer cuda_optim.cu, the embedding
 * cuda_embed.cu, the cross-entropy cuda_xent.cu).
 *
 * Same formulas as the cpu reference (cpu_kernels.c), written operation for
 * operation; this folder is compiled with -fmad=false (CMakeLists.txt), so
 * no multiply-add is fused and these ops give the cpu's bits.
 */
#include "runtime/backend/cuda/cuda_gelu.cuh"
#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"

/* ---- kernels ------------------------------------------------------------------ */

__global__ void add_kernel(float *y, const float *a, const float *b, int64_t n)
{
	GRID_STRIDE(i, n)
	y[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float *y, const float *a, int64_t n)
{
	GRID_STRIDE(i, n)
	y[i] += a[i];
}

__global__ void gelu_fwd_kernel(float *y, const float *x, int64_t n)
{
	GRID_STRIDE(i, n)
	y[i] = gelu_fwd1(x[i]);
}

__global__ void gelu_bwd_kernel(float *dx, const float *x, const float *dy, int64_t n)
{
	GRID_STRIDE(i, n)
	dx[i] = gelu_bwd1(x[i], dy[i]);
}

/* ---- float4 versions (16-byte aligned pointers, lengths in float4s) ---------------- */

__global__ void add4_kernel(float4 *y, const float4 *a, const float4 *b, int64_t n4)
{
	GRID_STRIDE(i, n4)
	{
		float4 u = a[i], v = b[i];
		y[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
	}
}

__global__ void gelu_fwd4_kernel(float4 *y, const float4 *x, int64_t n4)
{
	GRID_STRIDE(i, n4)
	{
		float4 v = x[i];
		y[i] = make_float4(gelu_fwd1(v.x), gelu_fwd1(v.y), gelu_fwd1(v.z), gelu_fwd1(v.w));
	}
}

__global__ void gelu_bwd4_kernel(float4 *dx, const float4 *x, const float4 *dy, int64_t n4)
{
	GRID_STRIDE(i, n4)
	{
		float4 v = x[i], d = dy[i];
		dx[i] = make_float4(gelu_bwd1(v.x, d.x), gelu_bwd1(v.y, d.y), gelu_bwd1(v.z, d.z), gelu_bwd1(v.w, d.w));
	}
}

/* ---- launchers ------------------------------------------------------------------- */

extern "C" int qe__cuda_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n)
{
	if (n == 0)
		return QE_OK;
	if (vec4_ok(n, y, a, b))
		add4_kernel<<<grid_for(n / 4), THREADS, 0, s->cs>>>((float4 *)y, (const float4 *)a, (const float4 *)b,
								   n / 4);
	else
		add_kernel<<<grid_for(n), THREADS, 0, s->cs>>>(y, a, b, n);
	return qe__cuda_launched("add", "add_kernel");
}

extern "C" int qe__cuda_add_inplace(qe_stream *s, float *y, const float *a, int64_t n)
{
	if (n == 0)
		return QE_OK;
	add_inplace_kernel<<<grid_for(n), THREADS, 0, s->cs>>>(y, a, n);
	return qe__cuda_launched("add_inplace", "add_inplace_kernel");
}

extern "C" int qe__cuda_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n)
{
	if (n == 0)
		return QE_OK;
	if (vec4_ok(n, y, x, NULL))
		gelu_fwd4_kernel<<<grid_for(n / 4), THREADS, 0, s->cs>>>((float4 *)y, (const float4 *)x, n / 4);
	else
		gelu_fwd_kernel<<<grid_for(n), THREADS, 0, s->cs>>>(y, x, n);
	return qe__cuda_launched("gelu_fwd", "gelu_fwd_kernel");
}

extern "C" int qe__cuda_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n)
{
	if (n == 0)
		return QE_OK;
	if (vec4_ok(n, dx, x, dy))
		gelu_bwd4_kernel<<<grid_for(n / 4), THREADS, 0, s->cs>>>((float4 *)dx, (const float4 *)x,
									 (const float4 *)dy, n / 4);
	else
		gelu_bwd_kernel<<<grid_for(n), THREADS, 0, s->cs>>>(dx, x, dy, n);
	return qe__cuda_launched("gelu_bwd", "gelu_bwd_kernel");
}
