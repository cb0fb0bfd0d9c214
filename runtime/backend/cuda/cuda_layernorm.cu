/*
 * cuda_layernorm.cu - the layernorm forward and the residual add (with the
 * statistics of the layernorm after it); the backward and the column sums
 * are in cuda_layernorm_bwd.cu, what both use in cuda_layernorm.cuh.
 *
 * Same formulas as the cpu reference (cpu_kernels.c), written operation for
 * operation in the same order; this folder is compiled with -fmad=false
 * (CMakeLists.txt), so no multiply-add is fused and an op whose cpu version
 * has no reduction gives the same bits (the residual add).  Row reductions
 * (layernorm statistics) are fixed-shape trees rather than the cpu's
 * left-to-right sums: repeatable to the bit, within rounding of the cpu.
 *
 * The residual stream (the residual add's a, b and y; the layernorm's x)
 * may be bf16: the kernels are templates on its element type (float or
 * __nv_bfloat16), widen a bf16 value exactly as they load it and round a
 * bf16 store to nearest even, so after the load everything is the f32
 * path's arithmetic and a bf16 tensor gives the bytes of its f32 widening.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_layernorm.cuh"
#include "runtime/backend/cuda/cuda_reduce.cuh"

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
