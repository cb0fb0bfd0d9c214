/*
 * cuda_layernorm.cu - layernorm forward and backward, the residual add (with
 * the statistics of the layernorm after it), and the column sums of
 * colsum.h (bias gradients, and the layernorm's weight and bias gradients).
 *
 * Same formulas as the cpu reference (cpu_kernels.c), written operation for
 * operation in the same order; this folder is compiled with -fmad=false
 * (CMakeLists.txt), so no multiply-add is fused and an op whose cpu version
 * has no reduction gives the same bits (the residual add, bias_grad, the
 * layernorm weight/bias gradients).  Row reductions (layernorm statistics)
 * are fixed-shape trees rather than the cpu's left-to-right sums:
 * repeatable to the bit, within rounding of the cpu.  No atomics where
 * order matters: column sums follow colsum.h's groups and runs.
 *
 * The residual stream (the residual add's a, b and y; the layernorms' x)
 * may be bf16: the kernels are templates on its element type (float or
 * __nv_bfloat16), widen a bf16 value exactly as they load it and round a
 * bf16 store to nearest even, so after the load everything is the f32
 * path's arithmetic and a bf16 tensor gives the bytes of its f32 widening.
 * Four bf16 move as one 8-byte load or store where the f32 path moves a
 * 16-byte float4: half the bytes, the same lanes.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_reduce.cuh"
#include "runtime/backend/colsum.h"

/* Column sums: a block covers 32 columns, one thread per (column, row group of colsum.h). */
#define COL_THREADS 32

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

/*
 * Column sums in colsum.h's order, in two kernels.  colsum_part_kernel:
 * thread (x, y) of block (bx, by) sums row group g = by*8 + y of column
 * j = bx*32 + x (a warp reads 32 neighbouring floats of a row) into
 * part[g*cols + j], in runs of `run` rows (0: the group is one run);
 * db's partial is the sum of dy, dw's (when asked for) the
 * sum of the layernorm weight gradient's nrm * dy with nrm = (x - mean) *
 * rstd - the cpu's expressions.  colsum_fin_kernel (below) adds column j's
 * partials in group order from 0.  dy and x are each f32 or bf16 (DY, X).
 */
#define COL_GROUPS_PER_BLOCK 8
template <typename DY, typename X>
__global__ void colsum_part_kernel(float *__restrict__ pw, float *__restrict__ pb, const DY *__restrict__ dy,
				   const X *__restrict__ x, const float *__restrict__ mean,
				   const float *__restrict__ rstd, int64_t rows, int64_t cols, int64_t groups, int run)
{
	int64_t j = (int64_t)blockIdx.x * COL_THREADS + threadIdx.x;
	int64_t g = (int64_t)blockIdx.y * COL_GROUPS_PER_BLOCK + threadIdx.y;
	if (j >= cols || g >= groups)
		return;
	float aw = 0.0f, ab = 0.0f, rw = 0.0f, rb = 0.0f;
	int64_t r0 = qe_colsum_group_start(rows, g), r1 = qe_colsum_group_start(rows, g + 1);
	int left = run > 0 ? run : QE_COLSUM_ROWS; /* rows left in the run */
#pragma unroll 4
	for (int64_t r = r0; r < r1; r++) {
		float v = ld1(dy, r * cols + j);
		rb += v;
		if (pw) {
			float nrm = (ld1(x, r * cols + j) - mean[r]) * rstd[r];
			rw += nrm * v;
		}
		if (--left == 0 || r + 1 == r1) { /* the run ends */
			aw += rw;
			ab += rb;
			rw = rb = 0.0f;
			left = run > 0 ? run : QE_COLSUM_ROWS;
		}
	}
	if (pw)
		pw[g * cols + j] = aw;
	pb[g * cols + j] = ab;
}

/*
 * colsum_fin_kernel: block (32 columns) x (32 loaders).  The partials of a
 * chunk of up to FIN_CHUNK groups are loaded by all 1024 threads at once into
 * shared memory (one thread, one group: every load in flight together), then
 * the column's thread of row 0 adds them in group order onto its running sum
 * from 0.  One thread a column walking the groups itself (the kernel before
 * this one) waited on a dependent chain of loads: 9 us a call at 128 groups
 * with 6 blocks busy.
 */
#define FIN_CHUNK 128
#define FIN_BATCH 16
__global__ void __launch_bounds__(1024) colsum_fin_kernel(float *__restrict__ dw, float *__restrict__ db,
							  const float *__restrict__ pw, const float *__restrict__ pb,
							  int64_t cols, int64_t groups)
{
	__shared__ float sb[FIN_CHUNK][COL_THREADS], sw[FIN_CHUNK][COL_THREADS];
	const int x = threadIdx.x, y = threadIdx.y;
	int64_t j = (int64_t)blockIdx.x * COL_THREADS + x;
	float accb = 0.0f, accw = 0.0f;
	for (int64_t g0 = 0; g0 < groups; g0 += FIN_CHUNK) {
		int n = groups - g0 < FIN_CHUNK ? (int)(groups - g0) : FIN_CHUNK;
		if (j < cols)
			for (int u = y; u < n; u += COL_THREADS) {
				sb[u][x] = pb[(g0 + u) * cols + j];
				if (pw)
					sw[u][x] = pw[(g0 + u) * cols + j];
			}
		__syncthreads();
		if (y == 0 && j < cols) {
			/*
			 * FIN_BATCH partials read before they are added (in the same order): one
			 * shared-memory load waited on per add made the sum a chain of loads
			 */
			int u = 0;
			for (; u + FIN_BATCH <= n; u += FIN_BATCH) {
				float b[FIN_BATCH], w[FIN_BATCH];
#pragma unroll
				for (int k = 0; k < FIN_BATCH; k++) {
					b[k] = sb[u + k][x];
					w[k] = pw ? sw[u + k][x] : 0.0f;
				}
#pragma unroll
				for (int k = 0; k < FIN_BATCH; k++) {
					accb += b[k];
					if (pw)
						accw += w[k];
				}
			}
			for (; u < n; u++) {
				accb += sb[u][x];
				if (pw)
					accw += sw[u][x];
			}
		}
		__syncthreads();
	}
	if (y == 0 && j < cols) {
		if (dw)
			dw[j] = accw;
		if (db)
			db[j] = accb;
	}
}

/* One block per row (eps 1e-5, llm.c). */
template <typename X>
__global__ void layernorm_fwd_kernel(float *y, float *mean, float *rstd, const X *x, const float *w, const float *b,
				     int64_t cols)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const X *xr = x + r * cols;
	float *yr = y ? y + r * cols : NULL; /* NULL: the statistics alone */
	float part = 0.0f;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
		part += ld1(xr, i);
	float m = block_sum(part, sh) / (float)cols;
	part = 0.0f;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
		float d = ld1(xr, i) - m;
		part += d * d;
	}
	float v = block_sum(part, sh) / (float)cols;
	float s = 1.0f / sqrtf(v + 1e-5f);
	for (int64_t i = threadIdx.x; yr && i < cols; i += blockDim.x) {
		float nrm = s * (ld1(xr, i) - m);
		yr[i] = nrm * w[i] + b[i];
	}
	if (threadIdx.x == 0) {
		if (mean)
			mean[r] = m;
		if (rstd)
			rstd[r] = s;
	}
}

/*
 * dx of one row per block (+ the residual's gradient, when given, as add
 * would).  dx and residual are of x's type X, the residual stream's: the
 * sum is f32 and a bf16 dx is rounded once, as it is stored.  residual may
 * be dx: each element is read before the same thread writes it.
 */
template <typename DY, typename X>
__global__ void layernorm_bwd_dx_kernel(X *dx, const DY *dy, const X *x, const float *mean, const float *rstd,
					const float *w, const X *residual, int64_t cols)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const DY *dyr = dy + r * cols;
	const X *xr = x + r * cols;
	X *dxr = dx + r * cols;
	float m = mean[r], s = rstd[r];
	float p1 = 0.0f, p2 = 0.0f;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
		float nrm = (ld1(xr, i) - m) * s;
		float dn = w[i] * ld1(dyr, i);
		p1 += dn;
		p2 += dn * nrm;
	}
	float dnorm_mean = block_sum(p1, sh) / (float)cols;
	float dnorm_norm_mean = block_sum(p2, sh) / (float)cols;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
		float nrm = (ld1(xr, i) - m) * s;
		float dn = w[i] * ld1(dyr, i);
		float dval = dn - dnorm_mean - nrm * dnorm_norm_mean;
		float g = dval * s;
		st1(dxr, i, residual ? ld1(residual, r * cols + i) + g : g);
	}
}

/*
 * y = a + (b + bias[col]), bias NULL: a + b - the cpu's qe_cpu_residual_add,
 * element for element (no bias is not a bias of zeros: -0 + 0 is +0), each
 * sum stored as T.
 */
template <typename T>
__global__ void residual_add_kernel(T *y, const T *a, const T *b, const float *bias, int64_t n, int64_t cols)
{
	GRID_STRIDE(i, n)
	{
		float v = bias ? ld1(b, i) + bias[i % cols] : ld1(b, i);
		st1(y, i, ld1(a, i) + v);
	}
}

/* four lanes of a + (b + bias) (bias NULL: a + b) with the bias's float4 j; bias is 16-byte aligned */
__device__ __forceinline__ float4 res_add4(float4 u, float4 v, const float *bias, int64_t j)
{
	if (bias) {
		float4 w = ((const float4 *)bias)[j];
		v = make_float4(v.x + w.x, v.y + w.y, v.z + w.z, v.w + w.w);
	}
	return make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
}

/* cols % 4 == 0: four elements lie in one row, at the bias's float4 i % (cols / 4); y, a, b and bias al4 */
template <typename T>
__global__ void residual_add4_kernel(T *y, const T *a, const T *b, const float *bias, int64_t n4, int64_t cols4)
{
	GRID_STRIDE(i, n4)
	put4(y, i, res_add4(ld4(a, i, true), ld4(b, i, true), bias, bias ? i % cols4 : 0), true);
}

/*
 * Layernorm over rows of c4 * 4 columns, one block per row, the row held in
 * registers (thread t has float4s t, t + blockDim, ... - at most LN_VEC_MAX),
 * so x is read once.  Which thread adds which element depends only on the
 * shape, never on alignment (al picks the load width alone), so a tensor
 * gives the same bits wherever it lives.
 */
template <typename X>
__global__ void layernorm_fwd_vec_kernel(float *y, float *mean, float *rstd, const X *x, const float *w,
					 const float *b, int64_t c4, bool al)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const X *xr = x + r * c4 * 4;
	float *yr = y ? y + r * c4 * 4 : NULL; /* NULL: the statistics alone */
	float cols = (float)(c4 * 4);
	float4 xv[LN_VEC_MAX];
	float part = 0.0f;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4) {
			xv[k] = ld4(xr, i, al);
			part = sum4(part, xv[k]);
		}
	}
	float m = block_sum(part, sh) / cols;
	part = 0.0f;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4) {
			float4 d = make_float4(xv[k].x - m, xv[k].y - m, xv[k].z - m, xv[k].w - m);
			part = sum4(part, make_float4(d.x * d.x, d.y * d.y, d.z * d.z, d.w * d.w));
		}
	}
	float v = block_sum(part, sh) / cols;
	float s = 1.0f / sqrtf(v + 1e-5f);
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (yr && i < c4) {
			float4 wv = ld4(w, i, al), bv = ld4(b, i, al), o;
			o.x = (s * (xv[k].x - m)) * wv.x + bv.x;
			o.y = (s * (xv[k].y - m)) * wv.y + bv.y;
			o.z = (s * (xv[k].z - m)) * wv.z + bv.z;
			o.w = (s * (xv[k].w - m)) * wv.w + bv.w;
			st4(yr, i, o, al);
		}
	}
	if (threadIdx.x == 0) {
		if (mean)
			mean[r] = m;
		if (rstd)
			rstd[r] = s;
	}
}

/* a float4 of a row's layernorm backward terms: nrm = (x - mean) rstd and w dy (the cpu's expressions) */
__device__ __forceinline__ void ln_bwd_terms(float4 xv, float4 g, float4 wv, float m, float s, float4 *nv, float4 *dv)
{
	*nv = make_float4((xv.x - m) * s, (xv.y - m) * s, (xv.z - m) * s, (xv.w - m) * s);
	*dv = make_float4(wv.x * g.x, wv.y * g.y, wv.z * g.z, wv.w * g.w);
}

/* dx of a float4 from its terms and the row's means of w dy (dm) and of w dy nrm (dnm) */
__device__ __forceinline__ float4 ln_bwd_dx4(float4 dv, float4 nv, float dm, float dnm, float s)
{
	return make_float4((dv.x - dm - nv.x * dnm) * s, (dv.y - dm - nv.y * dnm) * s, (dv.z - dm - nv.z * dnm) * s,
			   (dv.w - dm - nv.w * dnm) * s);
}

/*
 * dx of one row per block, nrm and w * dy held in registers as in the
 * forward; dx and residual of type X as in layernorm_bwd_dx_kernel (put4
 * stores a bf16 float4 as one 8-byte word when al; the value it returns,
 * the stored one widened, is not needed here).
 */
template <typename DY, typename X>
__global__ void layernorm_bwd_dx_vec_kernel(X *dx, const DY *dy, const X *x, const float *mean, const float *rstd,
					    const float *w, const X *residual, int64_t c4, bool al)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const DY *dyr = dy + r * c4 * 4;
	const X *xr = x + r * c4 * 4;
	X *dxr = dx + r * c4 * 4;
	float m = mean[r], s = rstd[r];
	float cols = (float)(c4 * 4);
	float4 nv[LN_VEC_MAX], dv[LN_VEC_MAX];
	float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4) {
			float4 g = ld4(dyr, i, al);
			ln_bwd_terms(ld4(xr, i, al), g, ld4(w, i, al), m, s, &nv[k], &dv[k]);
			p1 = sum4(p1, dv[k]);
			p2 = sum4(p2, make_float4(dv[k].x * nv[k].x, dv[k].y * nv[k].y, dv[k].z * nv[k].z,
						  dv[k].w * nv[k].w));
		}
	}
	float dnorm_mean = block_sum(p1, sh) / cols;
	float dnorm_norm_mean = block_sum(p2, sh) / cols;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4) {
			float4 o = ln_bwd_dx4(dv[k], nv[k], dnorm_mean, dnorm_norm_mean, s);
			if (residual) {
				float4 q = ld4(residual + r * c4 * 4, i, al);
				o = make_float4(q.x + o.x, q.y + o.y, q.z + o.z, q.w + o.w);
			}
			put4(dxr, i, o, al);
		}
	}
}

/*
 * Layernorm over rows of c4 * 4 columns with c4 <= 32 * K, one warp per row
 * and LN_WARP_ROWS rows a block: lane l holds float4s l, l + 32, ... in
 * registers, adds its own left to right, and the warp adds the lanes in a
 * fixed butterfly (every lane ends with the same bits) - no barrier and no
 * shared memory, so a row costs its loads and a few shuffles.  A row of 768
 * columns took 57 us a gpt2 batch-16 call (890 GB/s) with a block a row,
 * mostly waiting on the block's barriers.  As in the block kernels, which
 * lane adds which element depends on the shape alone, never on alignment.
 */
#define LN_WARP_ROWS 8

/*
 * A row's mean and rstd from the float4s its warp's lane holds (xv[k] is
 * float4 lane + 32 k of the row, c4 of them): the lane's sums left to
 * right, then the warp's fixed butterfly, so every lane gets the same bits.
 * The one definition of the statistics both warp kernels below write.
 */
template <int K>
__device__ __forceinline__ void ln_warp_stats(const float4 *xv, int64_t c4, int lane, float *mean, float *rstd)
{
	float cols = (float)(c4 * 4), part = 0.0f;
#pragma unroll
	for (int k = 0; k < K; k++)
		if (lane + 32 * k < c4)
			part = sum4(part, xv[k]);
	float m = warp_sum(part) / cols;
	part = 0.0f;
#pragma unroll
	for (int k = 0; k < K; k++)
		if (lane + 32 * k < c4) {
			float4 d = make_float4(xv[k].x - m, xv[k].y - m, xv[k].z - m, xv[k].w - m);
			part = sum4(part, make_float4(d.x * d.x, d.y * d.y, d.z * d.z, d.w * d.w));
		}
	float v = warp_sum(part) / cols;
	*mean = m;
	*rstd = 1.0f / sqrtf(v + 1e-5f);
}

template <int K, typename X>
__global__ void __launch_bounds__(32 * LN_WARP_ROWS)
	layernorm_fwd_warp_kernel(float *y, float *mean, float *rstd, const X *x, const float *w, const float *b,
				  int64_t rows, int64_t c4, bool al)
{
	int lane = threadIdx.x & 31;
	int64_t r = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
	if (r >= rows)
		return; /* the whole warp */
	const X *xr = x + r * c4 * 4;
	float4 xv[K];
#pragma unroll
	for (int k = 0; k < K; k++) {
		int64_t i = lane + 32 * k;
		if (i < c4)
			xv[k] = ld4(xr, i, al);
	}
	float m, s;
	ln_warp_stats<K>(xv, c4, lane, &m, &s);
	if (y) {
		float *yr = y + r * c4 * 4;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int64_t i = lane + 32 * k;
			if (i < c4) {
				float4 wv = ld4(w, i, al), bv = ld4(b, i, al), o;
				o.x = (s * (xv[k].x - m)) * wv.x + bv.x;
				o.y = (s * (xv[k].y - m)) * wv.y + bv.y;
				o.z = (s * (xv[k].z - m)) * wv.z + bv.z;
				o.w = (s * (xv[k].w - m)) * wv.w + bv.w;
				st4(yr, i, o, al);
			}
		}
	}
	if (lane == 0) {
		if (mean)
			mean[r] = m;
		if (rstd)
			rstd[r] = s;
	}
}

/*
 * y = a + (b + bias[col]) (residual_add4_kernel's sum, element for element)
 * and the statistics of the layernorm that reads y, in one pass: one warp a
 * row holds its sums in registers as stored (bf16: rounded, then widened
 * back) and takes ln_warp_stats over them, so mean and rstd are the bits
 * layernorm_fwd_warp_kernel gives reading that y.  Rows are whole float4s
 * (c4 of them, at most 32 K) and every pointer passes al4.
 */
template <int K, typename T>
__global__ void __launch_bounds__(32 * LN_WARP_ROWS)
	residual_ln_warp_kernel(T *y, float *mean, float *rstd, const T *a, const T *b, const float *bias,
				int64_t rows, int64_t c4)
{
	int lane = threadIdx.x & 31;
	int64_t r = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
	if (r >= rows)
		return; /* the whole warp */
	const int64_t o = r * c4 * 4; /* the row's first element */
	float4 xv[K];
#pragma unroll
	for (int k = 0; k < K; k++) {
		int64_t i = lane + 32 * k;
		if (i < c4)
			xv[k] = put4(y + o, i, res_add4(ld4(a + o, i, true), ld4(b + o, i, true), bias, i), true);
	}
	float m, s;
	ln_warp_stats<K>(xv, c4, lane, &m, &s);
	if (lane == 0) {
		mean[r] = m;
		rstd[r] = s;
	}
}

/*
 * layernorm_bwd's dx a warp a row, nrm and w * dy in registers (+ the
 * residual's gradient, when given), and a block a row group of colsum.h:
 * warp u takes the group's run u (QE_COLSUM_RUN rows, in order).  With pb
 * (and pw for dw), each lane also sums its columns' dy (and nrm * dy) over
 * its warp's run as the rows go by, and the block adds its runs in order
 * through shared memory into the group's partials (colsum_fin_kernel adds
 * the groups): the column sums take no second pass over dy and x, which
 * cost a gpt2 batch-16 step 25 x 39 us.  A lane holds float4s lane,
 * lane + 32, ... of a row (K of them at most, c4 in all).  dx and residual
 * are of type X as in layernorm_bwd_dx_kernel (residual may be dx: a lane
 * reads its float4 of residual before it stores that float4 of dx).
 */
#define LN_BWD_WARPS (QE_COLSUM_ROWS / QE_COLSUM_RUN)
template <int K, typename DY, typename X>
__global__ void __launch_bounds__(32 * LN_BWD_WARPS)
	layernorm_bwd_warp_kernel(X *dx, float *pw, float *pb, const DY *dy, const X *x, const float *mean,
				  const float *rstd, const float *w, const X *residual, int64_t rows, int64_t c4,
				  bool al)
{
	extern __shared__ float4 run_sums[]; /* [2][LN_BWD_WARPS][c4]: the runs' sums of nrm * dy, then of dy */
	const int lane = threadIdx.x & 31, u = threadIdx.x >> 5;
	const int64_t g = blockIdx.x, r0 = g * QE_COLSUM_ROWS + (int64_t)u * QE_COLSUM_RUN;
	const float cols = (float)(c4 * 4);
	float4 sw[K], sb[K];
#pragma unroll
	for (int k = 0; k < K; k++)
		sw[k] = sb[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int64_t r = r0; r < r0 + QE_COLSUM_RUN && r < rows; r++) {
		const DY *dyr = dy + r * c4 * 4;
		const X *xr = x + r * c4 * 4;
		X *dxr = dx + r * c4 * 4;
		float m = mean[r], s = rstd[r];
		float4 nv[K], dv[K];
		float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int64_t i = lane + 32 * k;
			if (i < c4) {
				float4 gv = ld4(dyr, i, al);
				ln_bwd_terms(ld4(xr, i, al), gv, ld4(w, i, al), m, s, &nv[k], &dv[k]);
				p1 = sum4(p1, dv[k]);
				p2 = sum4(p2, make_float4(dv[k].x * nv[k].x, dv[k].y * nv[k].y, dv[k].z * nv[k].z,
							  dv[k].w * nv[k].w));
				sb[k] = make_float4(sb[k].x + gv.x, sb[k].y + gv.y, sb[k].z + gv.z, sb[k].w + gv.w);
				sw[k] = make_float4(sw[k].x + nv[k].x * gv.x, sw[k].y + nv[k].y * gv.y,
						    sw[k].z + nv[k].z * gv.z, sw[k].w + nv[k].w * gv.w);
			}
		}
		float dnorm_mean = warp_sum(p1) / cols;
		float dnorm_norm_mean = warp_sum(p2) / cols;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int64_t i = lane + 32 * k;
			if (i < c4) {
				float4 o = ln_bwd_dx4(dv[k], nv[k], dnorm_mean, dnorm_norm_mean, s);
				if (residual) {
					float4 q = ld4(residual + r * c4 * 4, i, al);
					o = make_float4(q.x + o.x, q.y + o.y, q.z + o.z, q.w + o.w);
				}
				put4(dxr, i, o, al);
			}
		}
	}
	if (!pb)
		return; /* the whole block */
	float4 *rw = run_sums + u * c4, *rb = run_sums + (LN_BWD_WARPS + u) * c4;
#pragma unroll
	for (int k = 0; k < K; k++) {
		int64_t i = lane + 32 * k;
		if (i < c4) {
			rw[i] = sw[k];
			rb[i] = sb[k];
		}
	}
	__syncthreads();
	/* the group's runs that hold rows, added in order from 0 */
	int64_t in_group = rows - g * QE_COLSUM_ROWS < QE_COLSUM_ROWS ? rows - g * QE_COLSUM_ROWS : QE_COLSUM_ROWS;
	int nrun = (int)((in_group + QE_COLSUM_RUN - 1) / QE_COLSUM_RUN);
	const float *fw = (const float *)run_sums, *fb = fw + LN_BWD_WARPS * c4 * 4;
	for (int64_t j = threadIdx.x; j < c4 * 4; j += blockDim.x) {
		float aw = 0.0f, ab = 0.0f;
		for (int v = 0; v < nrun; v++) {
			aw += fw[v * c4 * 4 + j];
			ab += fb[v * c4 * 4 + j];
		}
		if (pw)
			pw[g * c4 * 4 + j] = aw;
		pb[g * c4 * 4 + j] = ab;
	}
}

/* ---- launchers ------------------------------------------------------------------- */

/* One block per row: a power of two up to 256, at least a warp. */
static unsigned row_threads(int64_t cols)
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
static bool ln_vec_threads(int64_t cols, unsigned *threads)
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

/*
 * The warp-per-row layernorm's K (float4s a lane: 1, 2, 4, 8 or 16, the
 * smallest that holds a row) when a row is whole float4s of at most 32 *
 * kmax; 0 when it does not apply.  A function of cols alone.
 */
static int ln_warp_k(int64_t cols, int kmax)
{
	if (cols % 4 != 0 || cols == 0)
		return 0;
	int64_t per = (cols / 4 + 31) / 32;
	for (int k = 1; k <= kmax; k <<= 1)
		if (per <= k)
			return k;
	return 0;
}

#define LN_WARP_CASE(KK, kernel, T, ...)                                                                       \
	case KK:                                                                                               \
		kernel<KK, T><<<grid, 32 * LN_WARP_ROWS, 0, s->cs>>>(__VA_ARGS__);                              \
		break;

/*
 * residual_add over elements of type T (dt).  The one-pass kernel when the
 * statistics are asked for, a row is at most 512 whole float4s and every
 * pointer passes al4; otherwise the elementwise kernels (four-wide when the
 * pointers pass al4 and rows are whole float4s), then layernorm_fwd's pass
 * over y as stored, whose bits the one-pass kernel gives too.
 */
template <typename T>
static int residual_add(qe_stream *s, T *y, const T *a, const T *b, qe_dtype dt, const float *bias, int64_t rows,
			int64_t cols, float *mean, float *rstd)
{
	int64_t n = rows * cols;
	bool al = al4(y) && al4(a) && al4(b) && al4(bias);
	int k = ln_warp_k(cols, 16);
	if (mean && k && rows <= INT32_MAX && al) {
		unsigned grid = (unsigned)((rows + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
		switch (k) {
			LN_WARP_CASE(1, residual_ln_warp_kernel, T, y, mean, rstd, a, b, bias, rows, cols / 4)
			LN_WARP_CASE(2, residual_ln_warp_kernel, T, y, mean, rstd, a, b, bias, rows, cols / 4)
			LN_WARP_CASE(4, residual_ln_warp_kernel, T, y, mean, rstd, a, b, bias, rows, cols / 4)
			LN_WARP_CASE(8, residual_ln_warp_kernel, T, y, mean, rstd, a, b, bias, rows, cols / 4)
			LN_WARP_CASE(16, residual_ln_warp_kernel, T, y, mean, rstd, a, b, bias, rows, cols / 4)
		}
		return qe__cuda_launched("residual_add", "residual_ln_warp_kernel");
	}
	if (al && cols % 4 == 0)
		residual_add4_kernel<T><<<grid_for(n / 4), THREADS, 0, s->cs>>>(y, a, b, bias, n / 4, cols / 4);
	else
		residual_add_kernel<T><<<grid_for(n), THREADS, 0, s->cs>>>(y, a, b, bias, n, cols);
	int rc = qe__cuda_launched("residual_add", "residual_add_kernel");
	if (!rc && mean) /* the statistics: layernorm_fwd's pass over y, for rows the one-pass kernel does not take */
		rc = qe__cuda_layernorm_fwd(s, NULL, mean, rstd, y, dt, NULL, NULL, rows, cols);
	return rc;
}

extern "C" int qe__cuda_residual_add(qe_stream *s, void *y, const void *a, const void *b, qe_dtype dt,
				     const float *bias, int64_t rows, int64_t cols, float *mean, float *rstd)
{
	if (rows * cols == 0)
		return QE_OK;
	if (dt == QE_BF16)
		return residual_add(s, (__nv_bfloat16 *)y, (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, dt, bias,
				    rows, cols, mean, rstd);
	return residual_add(s, (float *)y, (const float *)a, (const float *)b, dt, bias, rows, cols, mean, rstd);
}

/*
 * Column sums of dy into db and (x != NULL) of the layernorm weight
 * gradient into dw, in colsum.h's order; the partials live in the stream's
 * scratch.
 */
template <typename DY, typename X>
static int colsum_run(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
		      const float *mean, const float *rstd, int64_t rows, int64_t cols, float *part, int run);

template <typename DY, typename X>
static int colsum_launch(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
			 const float *mean, const float *rstd, int64_t rows, int64_t cols, int run)
{
	int64_t groups = qe_colsum_groups(rows);
	float *part = NULL;
	int rc = qe__cuda_scratch(s, (size_t)(x ? 2 : 1) * (size_t)(groups * cols) * sizeof(float), op, (void **)&part);
	if (rc)
		return rc;
	return colsum_run(s, op, dw, db, dy, x, mean, rstd, rows, cols, part, run);
}

extern "C" int qe__cuda_colsum_with(qe_stream *s, const char *op, float *db, const float *dy, int64_t rows,
				    int64_t cols, float *part)
{
	if (cols == 0)
		return QE_OK;
	return colsum_run<float, float>(s, op, NULL, db, dy, NULL, NULL, NULL, rows, cols, part, 0);
}

/* colsum_launch's kernels over the partials buffer part (groups x cols floats, twice with x); runs of run rows */
template <typename DY, typename X>
static int colsum_run(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
		      const float *mean, const float *rstd, int64_t rows, int64_t cols, float *part, int run)
{
	int rc;
	int64_t groups = qe_colsum_groups(rows);
	if ((cols + COL_THREADS - 1) / COL_THREADS > INT32_MAX ||
	    (groups + COL_GROUPS_PER_BLOCK - 1) / COL_GROUPS_PER_BLOCK > 65535)
		return qe_fail(QE_EUNSUPPORTED, "%s: column sums of %lld x %lld", op, (long long)rows, (long long)cols);
	float *pb = part, *pw = x ? part + groups * cols : NULL;
	dim3 grid((unsigned)((cols + COL_THREADS - 1) / COL_THREADS),
		  (unsigned)((groups + COL_GROUPS_PER_BLOCK - 1) / COL_GROUPS_PER_BLOCK));
	colsum_part_kernel<<<grid, dim3(COL_THREADS, COL_GROUPS_PER_BLOCK), 0, s->cs>>>(pw, pb, dy, x, mean, rstd, rows,
											   cols, groups, run);
	if ((rc = qe__cuda_launched(op, "colsum_part_kernel")))
		return rc;
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(dw, db, pw, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

extern "C" int qe__cuda_colsum_finish(qe_stream *s, const char *op, float *db, const float *pb, int64_t groups,
				      int64_t cols)
{
	if ((cols + COL_THREADS - 1) / COL_THREADS > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: column sums over %lld columns", op, (long long)cols);
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(NULL, db, NULL, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

extern "C" int qe__cuda_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols)
{
	if (cols == 0)
		return QE_OK;
	return colsum_launch<float, float>(s, "bias_grad", NULL, db, dy, NULL, NULL, NULL, rows, cols, 0);
}

/* layernorm_fwd with x of type X (float, or bf16 widened as it is read) */
template <typename X>
static int ln_fwd(qe_stream *s, float *y, float *mean, float *rstd, const X *x, const float *w, const float *b,
		  int64_t rows, int64_t cols)
{
	unsigned lt;
	int k = ln_warp_k(cols, 16);
	bool al = al4(y) && al4(x) && al4(w) && al4(b);
	if (k) {
		unsigned grid = (unsigned)((rows + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
		switch (k) {
			LN_WARP_CASE(1, layernorm_fwd_warp_kernel, X, y, mean, rstd, x, w, b, rows, cols / 4, al)
			LN_WARP_CASE(2, layernorm_fwd_warp_kernel, X, y, mean, rstd, x, w, b, rows, cols / 4, al)
			LN_WARP_CASE(4, layernorm_fwd_warp_kernel, X, y, mean, rstd, x, w, b, rows, cols / 4, al)
			LN_WARP_CASE(8, layernorm_fwd_warp_kernel, X, y, mean, rstd, x, w, b, rows, cols / 4, al)
			LN_WARP_CASE(16, layernorm_fwd_warp_kernel, X, y, mean, rstd, x, w, b, rows, cols / 4, al)
		}
		return qe__cuda_launched("layernorm_fwd", "layernorm_fwd_warp_kernel");
	}
	if (ln_vec_threads(cols, &lt)) {
		layernorm_fwd_vec_kernel<X><<<(unsigned)rows, lt, 0, s->cs>>>(y, mean, rstd, x, w, b, cols / 4, al);
		return qe__cuda_launched("layernorm_fwd", "layernorm_fwd_vec_kernel");
	}
	layernorm_fwd_kernel<X><<<(unsigned)rows, row_threads(cols), 0, s->cs>>>(y, mean, rstd, x, w, b, cols);
	return qe__cuda_launched("layernorm_fwd", "layernorm_fwd_kernel");
}

extern "C" int qe__cuda_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const void *x, qe_dtype x_dt,
				      const float *w, const float *b, int64_t rows, int64_t cols)
{
	if (rows == 0)
		return QE_OK;
	if (rows > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "layernorm_fwd: %lld rows", (long long)rows);
	if (x_dt == QE_BF16)
		return ln_fwd(s, y, mean, rstd, (const __nv_bfloat16 *)x, w, b, rows, cols);
	return ln_fwd(s, y, mean, rstd, (const float *)x, w, b, rows, cols);
}

/*
 * layernorm_bwd for rows of k float4s a lane at most (1 <= k <= 8): dx and,
 * when dw or db is asked for, the groups' partials in one kernel, then
 * colsum_fin_kernel over them.
 */
template <typename DY, typename X>
static int ln_bwd_warp(qe_stream *s, X *dx, float *dw, float *db, const DY *dy, const X *x, const float *mean,
		       const float *rstd, const float *w, int64_t rows, int64_t cols, const X *residual, int k)
{
	const char *op = "layernorm_bwd";
	int64_t groups = qe_colsum_groups(rows);
	float *part = NULL;
	size_t smem = 0;
	int rc;
	if (dw || db) {
		if ((rc = qe__cuda_scratch(s, (size_t)(2 * groups * cols) * sizeof(float), op, (void **)&part)))
			return rc;
		smem = (size_t)(2 * LN_BWD_WARPS * cols) * sizeof(float);
	}
	float *pb = part, *pw = part && dw ? part + groups * cols : NULL;
	bool al = al4(dx) && al4(dy) && al4(x) && al4(w) && al4(residual);
	cudaError_t e = cudaSuccess;
#define LN_BWD_CASE(KK)                                                                                        \
	case KK:                                                                                               \
		e = cudaFuncSetAttribute(layernorm_bwd_warp_kernel<KK, DY, X>,                                \
					 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);              \
		if (e == cudaSuccess)                                                                          \
			layernorm_bwd_warp_kernel<KK, DY, X><<<(unsigned)groups, 32 * LN_BWD_WARPS, smem, s->cs>>>( \
				dx, pw, pb, dy, x, mean, rstd, w, residual, rows, cols / 4, al);                 \
		break;
	switch (k) {
		LN_BWD_CASE(1)
		LN_BWD_CASE(2)
		LN_BWD_CASE(3)
		LN_BWD_CASE(4)
		LN_BWD_CASE(5)
		LN_BWD_CASE(6)
		LN_BWD_CASE(7)
		LN_BWD_CASE(8)
	}
#undef LN_BWD_CASE
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(layernorm_bwd_warp_kernel)");
	if ((rc = qe__cuda_launched(op, "layernorm_bwd_warp_kernel")) || !part)
		return rc;
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(dw, db, pw, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

/*
 * layernorm_bwd with dy of type DY and x of type X (each float, or bf16
 * widened as it is read); dx and residual are X's too.  al4 of dx and
 * residual is X's alignment, so a bf16 dx takes the four-wide path when
 * 8-byte aligned.
 */
template <typename DY, typename X>
static int ln_bwd(qe_stream *s, X *dx, float *dw, float *db, const DY *dy, const X *x, const float *mean,
		  const float *rstd, const float *w, int64_t rows, int64_t cols, const X *residual)
{
	const char *op = "layernorm_bwd";
	int rc;
	if (rows > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "layernorm_bwd: %lld rows", (long long)rows);
	if (rows > 0 && cols > 0) {
		unsigned lt;
		int k = cols % 4 == 0 ? (int)((cols / 4 + 31) / 32) : 0; /* float4s a lane, when a row is whole float4s */
		if (k >= 1 && k <= 8)
			return ln_bwd_warp<DY, X>(s, dx, dw, db, dy, x, mean, rstd, w, rows, cols, residual, k);
		if (ln_vec_threads(cols, &lt)) {
			bool al = al4(dx) && al4(dy) && al4(x) && al4(w) && al4(residual);
			layernorm_bwd_dx_vec_kernel<DY, X><<<(unsigned)rows, lt, 0, s->cs>>>(dx, dy, x, mean, rstd, w,
											    residual, cols / 4, al);
			rc = qe__cuda_launched(op, "layernorm_bwd_dx_vec_kernel");
		} else {
			layernorm_bwd_dx_kernel<DY, X><<<(unsigned)rows, row_threads(cols), 0, s->cs>>>(
				dx, dy, x, mean, rstd, w, residual, cols);
			rc = qe__cuda_launched(op, "layernorm_bwd_dx_kernel");
		}
		if (rc)
			return rc;
	}
	if (cols > 0 && (dw || db))
		return colsum_launch<DY, X>(s, op, dw, db, dy, dw ? x : NULL, mean, rstd, rows, cols, QE_COLSUM_RUN);
	return QE_OK;
}

/* layernorm_bwd with dy of type DY; x, dx and residual of x_dt */
template <typename DY>
static int ln_bwd_x(qe_stream *s, void *dx, float *dw, float *db, const DY *dy, const void *x, qe_dtype x_dt,
		    const float *mean, const float *rstd, const float *w, int64_t rows, int64_t cols,
		    const void *residual)
{
	if (x_dt == QE_BF16)
		return ln_bwd(s, (__nv_bfloat16 *)dx, dw, db, dy, (const __nv_bfloat16 *)x, mean, rstd, w, rows, cols,
			      (const __nv_bfloat16 *)residual);
	return ln_bwd(s, (float *)dx, dw, db, dy, (const float *)x, mean, rstd, w, rows, cols, (const float *)residual);
}

extern "C" int qe__cuda_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
				      const void *x, qe_dtype x_dt, const float *mean, const float *rstd,
				      const float *w, int64_t rows, int64_t cols, const void *residual)
{
	if (dy_dt == QE_BF16)
		return ln_bwd_x(s, dx, dw, db, (const __nv_bfloat16 *)dy, x, x_dt, mean, rstd, w, rows, cols, residual);
	return ln_bwd_x(s, dx, dw, db, (const float *)dy, x, x_dt, mean, rstd, w, rows, cols, residual);
}
