/*
 * cuda_fp8.cu - the FP8 and bf16 cast (row-wise and transposed copies in one
 * pass, amax recorded) and the delayed-scaling role update, bit for bit as
 * the cpu reference (cpu_kernels.c qe_cpu_cast, fp8_recipe.c
 * qe_fp8_role_update).
 *
 * bf16 codes: __float2bfloat16_rn (cvt.rn.bf16.f32), unscaled.  Over all
 * 2^32 floats on an H200 it gave qe_bf16_from_f32's code for every non-NaN
 * and 0x7FFF for every NaN, which is the rule bf16.h states, so the cpu and
 * this kernel give the same bytes on every input.
 *
 * Codes: __nv_cvt_float_to_fp8(x * scale, SATFINITE) is the hardware
 * conversion the cpu encoder was checked against (tests/fp8), so both give
 * the same byte for every float.  amax: max|x| is order-independent, and for
 * non-negative floats (NaN included, with its sign cleared) the float order
 * is the unsigned order of the bits, so an atomicMax on the bits gives the
 * same value whatever the block order, with a NaN sticking as on cpu.  A
 * delayed-scaled cast max-es straight into the history row; a current-scaled
 * one first reduces into the stream's amax word, then quantizes with the
 * scale derived from it (qe_fp8_scale_for_amax with fallback 1).  The role
 * update runs one CUDA block per role block, so fp8_update_many updates a
 * whole action's roles in one launch with the single update's per-block code.
 *
 * The cast's prologue (qe_cast_args pre_ln, pre_bias, pre_gelu, pre_dgelu,
 * pre_xent) transforms each element as it is loaded, with the expressions of
 * the layernorm kernels, gemm's bias add, gelu_fwd and gelu_bwd
 * (cuda_gelu.cuh) and xent's gradient (cuda_xent.cuh, rounded to the
 * logits' type as xent stores it), so a fused cast writes what the unfused
 * ops would have; with colsum the four-wide kernel also writes each 64-row
 * tile's partial column sums of those values (a tile is one row group of
 * colsum.h), which colsum_fin adds.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <float.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_gelu.cuh"
#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_xent.cuh"
#include "runtime/backend/colsum.h"

#define TILE 32
#define TROWS 8 /* threads in y; each handles TILE / TROWS rows of the tile */

/* ---- kernels ------------------------------------------------------------------ */

__device__ __forceinline__ float scale_for_amax(float amax, float fp8_max, int margin, float fallback)
{
	if (!isfinite(amax) || !(amax > 0.0f))
		return fallback;
	float s = (fp8_max / amax) / ldexpf(1.0f, margin);
	if (isinf(s))
		s = FLT_MAX;
	return s;
}

/*
 * |x| as bits with the sign cleared, exactly what the cpu's fabsf does: the
 * hardware abs may return a canonical NaN, which would change the payload
 * recorded as amax.
 */
__device__ __forceinline__ unsigned abs_bits(float x)
{
	return __float_as_uint(x) & 0x7FFFFFFFu;
}

/* Max of bits over the block; one atomicMax from thread 0.  All threads must call it. */
__device__ void block_amax(unsigned m, unsigned *target)
{
	__shared__ unsigned wmax[32];
	int lane = (threadIdx.y * blockDim.x + threadIdx.x) & 31, warp = (threadIdx.y * blockDim.x + threadIdx.x) >> 5;
	int nwarps = (blockDim.x * blockDim.y + 31) >> 5;
	m = __reduce_max_sync(0xffffffffu, m);
	if (lane == 0)
		wmax[warp] = m;
	__syncthreads();
	if (warp == 0) {
		unsigned v = lane < nwarps ? wmax[lane] : 0u;
		v = __reduce_max_sync(0xffffffffu, v);
		if (lane == 0 && v > 0u)
			atomicMax(target, v);
	}
}

/*
 * The cast's input: f32, or bf16 widened exactly (its bits are the high half
 * of the float's).  bf16 takes 8-byte four-element loads (the launcher
 * checks the alignment the four-wide kernel needs).
 */
typedef struct xin {
	const void *p;
	int bf16;
} xin;

__device__ __forceinline__ float bf16_bits(unsigned short b)
{
	return __uint_as_float((unsigned)b << 16);
}

__device__ __forceinline__ float xload(const xin &x, int64_t i)
{
	return x.bf16 ? bf16_bits(((const unsigned short *)x.p)[i]) : ((const float *)x.p)[i];
}

__device__ __forceinline__ float4 xload4(const xin &x, int64_t i)
{
	if (!x.bf16)
		return *(const float4 *)((const float *)x.p + i);
	uint2 u = *(const uint2 *)((const unsigned short *)x.p + i);
	return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u), __uint_as_float(u.y << 16),
			   __uint_as_float(u.y & 0xFFFF0000u));
}

/*
 * The cast's prologue (qe_cast_args): the layernorm of row r with its saved
 * statistics (the layernorm kernels' expression), v + bias[c] as gemm's bias
 * add, then GELU with gelu_fwd's expression, so the fused cast sees the
 * values the unfused ops would have written.
 */
typedef struct cast_pre {
	const float *mean, *rstd, *w, *b; /* layernorm: mean NULL for none */
	const float *bias;                /* [cols] or NULL */
	int gelu;
	xin dgelu;                        /* GELU backward: GELU's input [rows, cols], x its output's gradient */
	int64_t cols;
	bool al;                          /* w, b and bias 16-byte aligned (or NULL): float4 loads of them */
	/*
	 * xent's gradient, x the logits (stats NULL for none; no other
	 * prologue with it): the rows' max and 1 / sum (xent_rows), their
	 * targets, the valid columns, g = grad_scale / rows as xent computes
	 * it on the host, and bf16: the logits (so the gradient xent would
	 * store) are bf16.
	 */
	struct {
		const float *stats;
		const int32_t *tgt;
		int64_t valid;
		float g;
		bool bf16;
	} xent;
} cast_pre;

__host__ __device__ __forceinline__ bool pre_none(const cast_pre &p)
{
	return !p.mean && !p.bias && !p.gelu && !p.dgelu.p && !p.xent.stats;
}

/* xent's gradient of logit l at (r, c) as xent stores it, widened (the per-element form of pre_xent4) */
__device__ __forceinline__ float pre_xent1(const cast_pre &p, float l, int64_t r, int64_t c)
{
	float d = xent_grad(l, c, p.xent.valid, p.xent.tgt[r], p.xent.stats[2 * r], p.xent.stats[2 * r + 1], p.xent.g);
	return p.xent.bf16 ? xent_stored<true>(d) : xent_stored<false>(d);
}

/* gelu_bwd_kernel's expression: dx = gelu'(u (+ bias)) * v */
__device__ __forceinline__ float pre_dgelu1(const cast_pre &p, float u, float v, int64_t c)
{
	return gelu_bwd1(p.bias ? u + p.bias[c] : u, v);
}

/*
 * XE: xent's gradient (pre_xent1) and nothing else, a kernel instance of its
 * own, so that the others keep the registers they had without it (the
 * byte-wide cast took 36 to 38 with both in one, 32 without).
 */
template <bool XE> __device__ __forceinline__ float pre_apply(const cast_pre &p, float v, int64_t r, int64_t c)
{
	if constexpr (XE)
		return pre_xent1(p, v, r, c);
	if (p.dgelu.p)
		return pre_dgelu1(p, xload(p.dgelu, r * p.cols + c), v, c);
	if (p.mean)
		v = (p.rstd[r] * (v - p.mean[r])) * p.w[c] + p.b[c];
	if (p.bias)
		v = v + p.bias[c];
	return p.gelu ? gelu_fwd1(v) : v;
}

/* columns c..c+3 of a [cols] parameter: one 16-byte load when aligned */
__device__ __forceinline__ float4 col4(const float *q, int64_t c, bool al)
{
	return al ? *(const float4 *)(q + c) : make_float4(q[c], q[c + 1], q[c + 2], q[c + 3]);
}

/*
 * pre_apply on four elements of row r, columns c..c+3, with the same
 * expressions, in the kinds the four-wide kernel is built for (PK_FWD,
 * PK_DGELU, PK_XENT); the row's statistics and the columns' parameters are
 * loaded once for the four (a load per element and parameter made the
 * prologue casts load-bound).  u: GELU's input there, loaded by the caller
 * (aligned as x: the launcher checks).
 */
enum { PK_NONE = 0, PK_FWD = 1, PK_DGELU = 2, PK_XENT = 3 };

/* the columns' parameters of the thread's four columns, loaded once for all its rows */
typedef struct cols4 {
	float4 w, b, bias;
} cols4;

__device__ __forceinline__ cols4 cols4_load(const cast_pre &p, int64_t c)
{
	cols4 q;
	if (p.mean) {
		q.w = col4(p.w, c, p.al);
		q.b = col4(p.b, c, p.al);
	}
	if (p.bias)
		q.bias = col4(p.bias, c, p.al);
	return q;
}

__device__ __forceinline__ float4 pre_dgelu4(const cast_pre &p, float4 v, float4 u, const cols4 &q)
{
	if (p.bias)
		u = make_float4(u.x + q.bias.x, u.y + q.bias.y, u.z + q.bias.z, u.w + q.bias.w);
	return make_float4(gelu_bwd1(u.x, v.x), gelu_bwd1(u.y, v.y), gelu_bwd1(u.z, v.z), gelu_bwd1(u.w, v.w));
}

/* the forward prologue (layernorm with the row's mean mr and rstd sr, bias, GELU: no pre_dgelu) on four elements */
__device__ __forceinline__ float4 pre_fwd4(const cast_pre &p, float4 v, float mr, float sr, const cols4 &q)
{
	if (p.mean) {
		v.x = (sr * (v.x - mr)) * q.w.x + q.b.x;
		v.y = (sr * (v.y - mr)) * q.w.y + q.b.y;
		v.z = (sr * (v.z - mr)) * q.w.z + q.b.z;
		v.w = (sr * (v.w - mr)) * q.w.w + q.b.w;
	}
	if (p.bias)
		v = make_float4(v.x + q.bias.x, v.y + q.bias.y, v.z + q.bias.z, v.w + q.bias.w);
	if (p.gelu)
		v = make_float4(gelu_fwd1(v.x), gelu_fwd1(v.y), gelu_fwd1(v.z), gelu_fwd1(v.w));
	return v;
}

/*
 * xent's gradient on four logits of a row (max maxv, 1 / sum inv), columns
 * c..c+3, rounded to the logits' type (XB: bf16) as xent stores it:
 * pre_xent1's values.  nv: how many of the four are valid columns (0..4),
 * kt: which of them is the row's target (-1: none), both worked out once by
 * the caller, so that each element pays 32-bit compares with constants in
 * place of xent_grad's two 64-bit ones; the arithmetic is xent_grad_valid.
 */
template <bool XB>
__device__ __forceinline__ float xent4_1(float l, int k, int nv, int kt, float maxv, float inv, float g)
{
	return k < nv ? xent_stored<XB>(xent_grad_valid(l, k == kt, maxv, inv, g)) : 0.0f;
}

template <bool XB>
__device__ __forceinline__ float4 pre_xent4(const cast_pre &p, float4 l, int nv, int kt, float maxv, float inv)
{
	const float g = p.xent.g;
	return make_float4(xent4_1<XB>(l.x, 0, nv, kt, maxv, inv, g), xent4_1<XB>(l.y, 1, nv, kt, maxv, inv, g),
			   xent4_1<XB>(l.z, 2, nv, kt, maxv, inv, g), xent4_1<XB>(l.w, 3, nv, kt, maxv, inv, g));
}

/* v = x after the prologue, into a buffer (the cast's fallback when it must also sum columns of v). */
template <bool XE>
__global__ void pre_materialize_kernel(float *__restrict__ v, xin x, int64_t n, int64_t cols,
				       cast_pre pre)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		v[i] = pre_apply<XE>(pre, xload(x, i), i / cols, i % cols);
}

/* amax of a whole tensor [n / cols, cols], after the prologue, into *target (current scaling's first pass). */
template <bool XE> __global__ void amax_kernel(xin x, int64_t n, int64_t cols, cast_pre pre, unsigned *target)
{
	unsigned m = 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		m = max(m, abs_bits(pre_apply<XE>(pre, xload(x, i), i / cols, i % cols)));
	block_amax(m, target);
}

/*
 * One 32x32 tile of x: quantized (FP8: T = uint8_t), rounded (bf16: T =
 * uint16_t, the code's bits) or copied (T = float) into row[r, c] and
 * col[c, r].  The scale is *scale (delayed), or derived from *cur_amax
 * (current), or 1 for f32 and bf16 outputs.  amax_dst (delayed) receives
 * max|x| of the tile.  Block (0,0) writes the scalars: scale_inv, and for
 * current scaling scale and amax.
 */
template <typename T, bool XE>
__global__ void cast_kernel(xin x, T *__restrict__ row, T *__restrict__ col, int64_t rows,
			    int64_t cols, cast_pre pre, int fmt_e5m2, const float *scale, const unsigned *cur_amax,
			    float fp8_max, int margin, unsigned *amax_dst, float *scale_out, float *scale_inv_out)
{
	__shared__ T tile[TILE][TILE + 1];
	constexpr bool is_fp8 = sizeof(T) == 1, is_bf16 = sizeof(T) == 2;
	float s = 1.0f;
	if constexpr (is_fp8)
		s = cur_amax ? scale_for_amax(__uint_as_float(*cur_amax), fp8_max, margin, 1.0f) : *scale;
	int64_t r0 = (int64_t)blockIdx.y * TILE, c0 = (int64_t)blockIdx.x * TILE;
	unsigned m = 0;
	for (int j = threadIdx.y; j < TILE; j += TROWS) {
		int64_t r = r0 + j, c = c0 + threadIdx.x;
		if (r < rows && c < cols) {
			float v = pre_apply<XE>(pre, xload(x, r * cols + c), r, c);
			m = max(m, abs_bits(v));
			T q;
			if constexpr (is_fp8)
				q = (T)__nv_cvt_float_to_fp8(v * s, __NV_SATFINITE, fmt_e5m2 ? __NV_E5M2 : __NV_E4M3);
			else if constexpr (is_bf16)
				q = (T)__bfloat16_as_ushort(__float2bfloat16_rn(v));
			else
				q = v;
			if (row)
				row[r * cols + c] = q;
			tile[j][threadIdx.x] = q;
		}
	}
	if (amax_dst)
		block_amax(m, amax_dst); /* contains the __syncthreads the transpose needs */
	else
		__syncthreads();
	if (col) {
		for (int j = threadIdx.y; j < TILE; j += TROWS) {
			int64_t c = c0 + j, r = r0 + threadIdx.x;
			if (r < rows && c < cols)
				col[c * rows + r] = tile[threadIdx.x][j];
		}
	}
	if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
		if (scale_inv_out)
			*scale_inv_out = is_fp8 ? 1.0f / s : 1.0f;
		if (is_fp8 && cur_amax && scale_out)
			*scale_out = s;
	}
}

/*
 * The same cast, four elements per thread: float4 loads and 4-byte packed
 * stores of the codes, over 64x64 tiles.  The byte-wide kernel above spends
 * most of its time in narrow memory transactions (the per-step weight-cache
 * refresh casts the whole stage).  Needs rows and cols multiples of 4 and
 * aligned pointers (the launcher checks); each code is computed exactly as
 * above, so both kernels give the same bytes.
 */
#define VT 64 /* tile edge */
#define VX 16 /* threads in x, four columns each */
#define VY 16 /* threads in y */

/*
 * Four codes of v packed as they lie in memory: FP8 (T = uint8_t, scaled by
 * s; one 4-byte word) by two pair conversions (cvt.rn.satfinite.e4m3x2, the
 * single conversion's instruction on two elements: the same bytes), or bf16
 * (T = uint16_t, the codes' bits; 8 bytes), rounded to nearest even.
 */
template <typename T> struct word4 {
	typedef uint2 type;
};
template <> struct word4<uint8_t> {
	typedef uint32_t type;
};

template <typename T>
__device__ __forceinline__ typename word4<T>::type codes4(float4 v, float s, __nv_fp8_interpretation_t k)
{
	if constexpr (sizeof(T) == 1) {
		uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x * s, v.y * s), __NV_SATFINITE, k);
		uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z * s, v.w * s), __NV_SATFINITE, k);
		return lo | (hi << 16);
	} else {
		__nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
		return make_uint2(*(uint32_t *)&lo, *(uint32_t *)&hi);
	}
}

/* four codes in one store: 4 bytes (FP8) or 8 (bf16) */
template <typename T> __device__ __forceinline__ void store4(T *p, const T *q)
{
	if constexpr (sizeof(T) == 1)
		*(uint32_t *)p = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
	else
		*(uint2 *)p = make_uint2((uint32_t)q[0] | ((uint32_t)q[1] << 16), (uint32_t)q[2] | ((uint32_t)q[3] << 16));
}

/*
 * T = uint8_t: FP8 codes with the delayed or current scale as cast_kernel;
 * T = uint16_t: bf16 codes (scale 1), the same bytes as cast_kernel<uint16_t>.
 * SUMS: the tile's rows are one row group of colsum.h (VT == QE_COLSUM_ROWS),
 * so the block also writes that group's partial column sums of x into
 * part[group, col] - from 0, rows in order, as colsum_part_kernel does - and
 * the column sums need no pass of their own over x (colsum_fin adds them).
 */
static_assert(VT == QE_COLSUM_ROWS, "a cast tile must be one row group of colsum.h");
/*
 * PK: the prologue kind, so that each kernel carries only its own code and
 * registers (one kernel for all kinds took 60 registers: half the threads
 * an SM, and the casts ran at 1.0-1.6 TB/s).  The launch bounds give the
 * kernel without a prologue 48 registers, the prologue kernels 64 (the
 * columns' parameters and the rows' statistics are held for all of the
 * thread's rows) and GELU backward with column sums 80, without spills
 * (ptxas -v).  PK_XENT holds each row's max, 1 / sum and target and no
 * columns' parameters: without column sums it takes the 48 of the kernel
 * without a prologue (GPT-2's head, 16384 x 50304 bf16 logits into e5m2 on
 * an H100: 1.43 ms at 64 registers, 1.38 at 48, the plain cast of the
 * stored gradient 1.18: the more threads, the more loads in flight), with
 * them 64.
 */
/*
 * One tile of cast4_kernel for one kind of x (XB: bf16, else f32) and of
 * tile (FULL: every row and column inside the tensor, so no element needs
 * a bound check): split out so that each combination is straight-line
 * code.  The casts are bound by instructions issued, not by memory (ncu:
 * 80% of issue slots at 1.4 TB/s for GELU's), so what every element pays
 * for is kept to the arithmetic.
 */
template <typename T, bool SUMS, int PK, bool XB, bool FULL>
__device__ __forceinline__ void cast4_tile(T (*tile)[VT + 4], float (*vals)[VT + 1], const void *xp,
					   T *__restrict__ row, T *__restrict__ col, int64_t rows, int64_t cols,
					   const cast_pre &pre, float s, __nv_fp8_interpretation_t k, unsigned *amax_dst,
					   float *__restrict__ part)
{
	typedef typename word4<T>::type W;
	const int64_t r0 = (int64_t)blockIdx.y * VT, c0 = (int64_t)blockIdx.x * VT;
	const int cx = threadIdx.x * 4;
	const int64_t c = c0 + cx;
	const bool cin = FULL || c < cols;
	const xin x = { xp, XB };
	unsigned m = 0;
	cols4 cp;
	if constexpr (PK == PK_FWD || PK == PK_DGELU) {
		if (cin)
			cp = cols4_load(pre, c);
	}
	/*
	 * Every load of the thread's rows first, then the arithmetic: each
	 * thread keeps all its loads in flight at once (one at a time, the
	 * casts ran at half the memory's bandwidth).
	 */
	constexpr int NJ = VT / VY;
	float4 xv[NJ], uv[PK == PK_DGELU ? NJ : 1];
	float mr[PK == PK_FWD ? NJ : 1], sr[PK == PK_FWD ? NJ : 1]; /* the rows' layernorm statistics */
	float xm[PK == PK_XENT ? NJ : 1], xi[PK == PK_XENT ? NJ : 1]; /* the rows' softmax max and 1 / sum */
	int xt[PK == PK_XENT ? NJ : 1];                               /* and their targets' place in c..c+3 */
	int xnv = 0;                                                  /* valid columns of c..c+3 */
	if constexpr (PK == PK_XENT) {
		int64_t left = pre.xent.valid - c;
		xnv = left <= 0 ? 0 : left >= 4 ? 4 : (int)left;
	}
#pragma unroll
	for (int q = 0; q < NJ; q++) {
		int64_t r = r0 + threadIdx.y + q * VY;
		if (FULL || (r < rows && cin)) {
			xv[q] = xload4(x, r * cols + c);
			if constexpr (PK == PK_DGELU)
				uv[q] = xload4(pre.dgelu, r * cols + c);
			if constexpr (PK == PK_FWD) {
				if (pre.mean) {
					mr[q] = pre.mean[r];
					sr[q] = pre.rstd[r];
				}
			}
			if constexpr (PK == PK_XENT) {
				xm[q] = pre.xent.stats[2 * r];
				xi[q] = pre.xent.stats[2 * r + 1];
				int64_t dt = (int64_t)pre.xent.tgt[r] - c;
				xt[q] = dt >= 0 && dt < 4 ? (int)dt : -1;
			}
		}
	}
#pragma unroll
	for (int q = 0; q < NJ; q++) {
		int j = threadIdx.y + q * VY;
		int64_t r = r0 + j;
		if (FULL || (r < rows && cin)) { /* cols % 4 == 0: the whole float4 is inside */
			float4 v = xv[q];
			if constexpr (PK == PK_FWD)
				v = pre_fwd4(pre, v, mr[q], sr[q], cp);
			else if constexpr (PK == PK_DGELU)
				v = pre_dgelu4(pre, v, uv[q], cp);
			else if constexpr (PK == PK_XENT)
				v = pre_xent4<XB>(pre, v, xnv, xt[q], xm[q], xi[q]);
			m = max(max(m, max(abs_bits(v.x), abs_bits(v.y))), max(abs_bits(v.z), abs_bits(v.w)));
			W w = codes4<T>(v, s, k);
			if (row)
				*(W *)(row + r * cols + c) = w;
			*(W *)&tile[j][cx] = w;
			if constexpr (SUMS) {
				vals[j][cx] = v.x;
				vals[j][cx + 1] = v.y;
				vals[j][cx + 2] = v.z;
				vals[j][cx + 3] = v.w;
			}
		}
	}
	if (amax_dst)
		block_amax(m, amax_dst); /* contains the __syncthreads the transpose needs */
	else
		__syncthreads();
	if (col) {
		for (int j = threadIdx.y; j < VT; j += VY) {
			int64_t cc = c0 + j, r = r0 + cx;
			if (FULL || (cc < cols && r < rows)) { /* rows % 4 == 0 */
				T q[4] = { tile[cx][j], tile[cx + 1][j], tile[cx + 2][j], tile[cx + 3][j] };
				store4<T>(col + cc * rows + r, q);
			}
		}
	}
	if constexpr (SUMS) {
		int t = threadIdx.y * VX + threadIdx.x;
		int64_t cc = c0 + t;
		if (t < VT && (FULL || cc < cols)) {
			int nr = FULL ? VT : rows - r0 < VT ? (int)(rows - r0) : VT;
			float p = 0.0f;
			for (int j = 0; j < nr; j++)
				p += vals[j][t];
			part[(int64_t)blockIdx.y * cols + cc] = p;
		}
	}
}

/* the blocks an SM each cast4_kernel instance is built for (the registers above) */
constexpr int cast4_min_blocks(int pk, bool sums)
{
	return pk == PK_DGELU && sums ? 3 : pk == PK_NONE || (pk == PK_XENT && !sums) ? 5 : 4;
}

template <typename T, bool SUMS, int PK>
__global__ void __launch_bounds__(VX * VY, cast4_min_blocks(PK, SUMS)) cast4_kernel(xin x, T *__restrict__ row, T *__restrict__ col, int64_t rows,
			     int64_t cols, cast_pre pre, int fmt_e5m2, const float *scale, const unsigned *cur_amax,
			     float fp8_max, int margin, unsigned *amax_dst, float *scale_out, float *scale_inv_out,
			     float *__restrict__ part)
{
	constexpr bool is_fp8 = sizeof(T) == 1;
	__shared__ __align__(8) T tile[VT][VT + 4];
	__shared__ float vals[SUMS ? VT : 1][VT + 1];
	__nv_fp8_interpretation_t k = fmt_e5m2 ? __NV_E5M2 : __NV_E4M3;
	float s = 1.0f;
	if constexpr (is_fp8)
		s = cur_amax ? scale_for_amax(__uint_as_float(*cur_amax), fp8_max, margin, 1.0f) : *scale;
	const bool full = ((int64_t)blockIdx.y + 1) * VT <= rows && ((int64_t)blockIdx.x + 1) * VT <= cols;
#define CAST4_TILE(XB, FULL)                                                                                       	cast4_tile<T, SUMS, PK, XB, FULL>(tile, vals, x.p, row, col, rows, cols, pre, s, k, amax_dst, part)
	if (x.bf16)
		full ? CAST4_TILE(true, true) : CAST4_TILE(true, false);
	else
		full ? CAST4_TILE(false, true) : CAST4_TILE(false, false);
#undef CAST4_TILE
	if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
		if (scale_inv_out)
			*scale_inv_out = is_fp8 ? 1.0f / s : 1.0f;
		if (is_fp8 && cur_amax && scale_out)
			*scale_out = s;
	}
}

/* A current-scaled cast also max-es its amax into the role's history row when asked. */
__global__ void fold_amax_kernel(const unsigned *src, unsigned *dst)
{
	if (*src > 0u)
		atomicMax(dst, *src);
}

/*
 * qe_fp8_role_update on one block (one CUDA block): NaN-aware max over the
 * history (exact, so the reduction order does not matter), the scale from it,
 * then the roll done chunk by chunk in place: each chunk reads its sources
 * (one index up, not yet overwritten) before any thread writes.  The early
 * return is taken by every thread of the block or none (all read hist[0]
 * before the first barrier).
 */
__device__ void fp8_update_role(float *block, int L, float fp8_max, int algo_max, int margin)
{
	__shared__ float red[32];
	float *hist = block;
	float first = hist[0];
	if (first == 0.0f)
		return; /* nothing cast since the last update: no update, no roll */
	const float qnan = __uint_as_float(0x7FC00000u);
	float amax = first;
	if (algo_max) {
		float m = first;
		for (int i = threadIdx.x; i < L; i += blockDim.x) {
			float h = hist[i];
			m = (isnan(h) || isnan(m)) ? qnan : fmaxf(m, h);
		}
		for (int off = 16; off > 0; off >>= 1) {
			float o = __shfl_xor_sync(0xffffffffu, m, off);
			m = (isnan(o) || isnan(m)) ? qnan : fmaxf(m, o);
		}
		int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
		if (lane == 0)
			red[warp] = m;
		__syncthreads();
		if (threadIdx.x == 0) {
			float v = red[0];
			for (int w = 1; w < nw; w++)
				v = (isnan(red[w]) || isnan(v)) ? qnan : fmaxf(v, red[w]);
			red[0] = v;
		}
		__syncthreads();
		amax = red[0];
	}
	if (threadIdx.x == 0 && isfinite(amax) && amax > 0.0f) {
		float scale = scale_for_amax(amax, fp8_max, margin, block[L]);
		block[L] = scale;
		block[L + 1] = 1.0f / scale;
	}
	for (int base = 0; base < L; base += blockDim.x) {
		int i = base + threadIdx.x;
		float v = 0.0f;
		if (i < L)
			v = i == 0 ? 0.0f : (i + 1 < L ? hist[i + 1] : first);
		__syncthreads();
		if (i < L)
			hist[i] = v;
		__syncthreads();
	}
}

__global__ void fp8_update_kernel(float *block, int L, float fp8_max, int algo_max, int margin)
{
	fp8_update_role(block, L, fp8_max, algo_max, margin);
}

/*
 * The role blocks of one fp8_update_many launch, by value: a captured graph
 * keeps the kernel's arguments, so replay needs no copy of the item list.
 */
struct fp8_update_batch {
	float *block[QE_CUDA_UPDATE_BATCH];
	float fp8_max[QE_CUDA_UPDATE_BATCH];
};

/* One CUDA block per role block; the blocks are disjoint (checked), so they may run in any order. */
__global__ void fp8_update_many_kernel(fp8_update_batch b, int L, int algo_max, int margin)
{
	fp8_update_role(b.block[blockIdx.x], L, b.fp8_max[blockIdx.x], algo_max, margin);
}

/* ---- launchers ------------------------------------------------------------------ */

/* The byte-wide kernel of output T, its xent instance when pre_xent is asked for. */
template <typename T>
static int launch_cast1(qe_stream *s, const char *name, dim3 grid, dim3 block, xin x, const qe_cast_args *a,
			const cast_pre &pre, int e5m2, const float *scale, const unsigned *cur, float fmax, int margin,
			unsigned *amax_dst, float *scale_out)
{
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	T *row = (T *)a->row.data, *col = (T *)a->col.data;
	if (pre.xent.stats)
		cast_kernel<T, true><<<grid, block, 0, s->cs>>>(x, row, col, rows, cols, pre, e5m2, scale, cur, fmax, margin,
								 amax_dst, scale_out, a->scale_inv);
	else
		cast_kernel<T, false><<<grid, block, 0, s->cs>>>(x, row, col, rows, cols, pre, e5m2, scale, cur, fmax,
								  margin, amax_dst, scale_out, a->scale_inv);
	return qe__cuda_launched("cast", name);
}

/*
 * The four-wide kernel of output T, with the partial column sums when part is
 * not NULL; then colsum_fin adds the partials into a->colsum.
 */
template <typename T>
static int launch_cast4(qe_stream *s, const char *name, dim3 grid, const qe_cast_args *a, cast_pre pre, int e5m2,
			const float *scale, const unsigned *cur, float fmax, unsigned *amax_dst, float *scale_out,
			float *part)
{
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	xin x = { a->x.data, a->x.dtype == QE_BF16 };
	dim3 block(VX, VY);
	/* one kernel a prologue kind and with or without the sums: each carries only its own registers */
	int pk = pre.xent.stats ? PK_XENT : pre.dgelu.p ? PK_DGELU : pre_none(pre) ? PK_NONE : PK_FWD;
#define CAST4(SUMS, PK)                                                                                            \
	cast4_kernel<T, SUMS, PK><<<grid, block, 0, s->cs>>>(x, (T *)a->row.data, (T *)a->col.data, rows, cols, pre,   \
							      e5m2, scale, cur, fmax, a->margin, amax_dst, scale_out, \
							      a->scale_inv, part)
	if (part)
		pk == PK_NONE	 ? CAST4(true, PK_NONE)
		: pk == PK_FWD	 ? CAST4(true, PK_FWD)
		: pk == PK_DGELU ? CAST4(true, PK_DGELU)
				 : CAST4(true, PK_XENT);
	else
		pk == PK_NONE	 ? CAST4(false, PK_NONE)
		: pk == PK_FWD	 ? CAST4(false, PK_FWD)
		: pk == PK_DGELU ? CAST4(false, PK_DGELU)
				 : CAST4(false, PK_XENT);
#undef CAST4
	int rc = qe__cuda_launched("cast", name);
	if (rc || !part)
		return rc;
	return qe__cuda_colsum_finish(s, "cast", a->colsum, part, qe_colsum_groups(rows), cols);
}

extern "C" int qe__cuda_cast(qe_stream *s, const qe_cast_args *a)
{
	const char *op = "cast";
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	qe_dtype fmt = qe__cast_out_dtype(a);
	xin x = { a->x.data, a->x.dtype == QE_BF16 };
	int64_t gx = (cols + TILE - 1) / TILE, gy = (rows + TILE - 1) / TILE;
	if (gx < 1)
		gx = 1;
	if (gy < 1)
		gy = 1;
	if (gy > 65535 || gx > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "cast: x [%lld,%lld] needs more than 65535 row tiles", (long long)rows,
			       (long long)cols);
	dim3 grid((unsigned)gx, (unsigned)gy), block(TILE, TROWS);
	unsigned *amax_dst = (unsigned *)a->amax;
	/* xent's g = grad_scale / T, computed on the host as qe__cuda_xent does: the same float */
	cast_pre pre = { a->pre_ln.mean, a->pre_ln.rstd, a->pre_ln.w, a->pre_ln.b, a->pre_bias, a->pre_gelu,
			 { a->pre_dgelu, a->pre_dgelu_dtype == QE_BF16 }, cols,
			 ((uintptr_t)a->pre_ln.w | (uintptr_t)a->pre_ln.b | (uintptr_t)a->pre_bias) % 16 == 0,
			 { a->pre_xent.stats, a->pre_xent.tgt, a->pre_xent.valid, a->pre_xent.grad_scale / (float)rows,
			   x.bf16 != 0 } };
	dim3 grid4((unsigned)((cols + VT - 1) / VT), (unsigned)((rows + VT - 1) / VT));
	int is_fp8 = qe_dtype_is_fp8(fmt), esz = fmt == QE_BF16 ? 8 : 4; /* alignment of four codes */
	int wide = (fmt == QE_BF16 || is_fp8) && rows % 4 == 0 && cols % 4 == 0 &&
		   (uintptr_t)x.p % (x.bf16 ? 8 : 16) == 0 &&
		   (uintptr_t)a->pre_dgelu % (pre.dgelu.bf16 ? 8 : 16) == 0 && (uintptr_t)a->row.data % esz == 0 &&
		   (uintptr_t)a->col.data % esz == 0 && (rows + VT - 1) / VT <= 65535;
	int prologue = a->pre_ln.mean || a->pre_bias || a->pre_gelu || a->pre_dgelu || a->pre_xent.stats;
	/*
	 * Column sums: in the four-wide kernel when it runs (a tile is a row
	 * group); else their own pass over x first (bias_grad's kernels), or,
	 * with a prologue or a bf16 x, over v (f32) made in the stream's
	 * scratch, which the cast then rounds without the prologue.
	 */
	float *part = NULL;
	int rc;
	if (a->colsum && rows > 0 && cols > 0 && wide) {
		if ((rc = qe__cuda_scratch(s, (size_t)(qe_colsum_groups(rows) * cols) * sizeof(float), op, (void **)&part)))
			return rc;
	} else if (a->colsum && (prologue || x.bf16) && rows > 0 && cols > 0) {
		int64_t n = rows * cols;
		float *v = NULL;
		size_t bytes = (size_t)(n + qe_colsum_groups(rows) * cols) * sizeof(float);
		if ((rc = qe__cuda_scratch(s, bytes, op, (void **)&v)))
			return rc;
		int64_t nb = (n + 255) / 256;
		unsigned nbk = (unsigned)(nb > 4096 ? 4096 : nb);
		if (pre.xent.stats)
			pre_materialize_kernel<true><<<nbk, 256, 0, s->cs>>>(v, x, n, cols, pre);
		else
			pre_materialize_kernel<false><<<nbk, 256, 0, s->cs>>>(v, x, n, cols, pre);
		if ((rc = qe__cuda_launched(op, "pre_materialize_kernel")) ||
		    (rc = qe__cuda_colsum_with(s, op, a->colsum, v, rows, cols, v + n)))
			return rc;
		qe_cast_args plain = *a;
		plain.x.data = v;
		plain.x.dtype = QE_F32;
		memset(&plain.pre_ln, 0, sizeof(plain.pre_ln));
		plain.pre_bias = NULL;
		plain.pre_gelu = 0;
		plain.pre_dgelu = NULL;
		memset(&plain.pre_xent, 0, sizeof(plain.pre_xent));
		plain.colsum = NULL;
		return qe__cuda_cast(s, &plain);
	} else if (a->colsum && (rc = qe__cuda_bias_grad(s, a->colsum, (const float *)x.p, rows, cols))) {
		return rc;
	}

	if (fmt == QE_BF16) {
		if (wide)
			return launch_cast4<uint16_t>(s, "cast4_kernel<bf16>", grid4, a, pre, 0, NULL, NULL, 0.0f, amax_dst,
						      NULL, part);
		return launch_cast1<uint16_t>(s, "cast_kernel<bf16>", grid, block, x, a, pre, 0, NULL, NULL, 0.0f, 0,
					      amax_dst, NULL);
	}
	if (!is_fp8) {
		return launch_cast1<float>(s, "cast_kernel<f32>", grid, block, x, a, pre, 0, NULL, NULL, 0.0f, 0, amax_dst,
					   NULL);
	}
	int e5m2 = fmt == QE_E5M2;
	float fmax = qe_fp8_max(fmt);
	if (!a->current && wide)
		return launch_cast4<uint8_t>(s, "cast4_kernel", grid4, a, pre, e5m2, a->scale, NULL, fmax, amax_dst, NULL,
					     part);
	if (!a->current) {
		return launch_cast1<uint8_t>(s, "cast_kernel<fp8>", grid, block, x, a, pre, e5m2, a->scale, NULL, fmax,
					     a->margin, amax_dst, NULL);
	}
	/* current scaling: amax of this tensor first, then quantize with the scale it gives */
	unsigned *cur = s->words;
	cudaError_t e = cudaMemsetAsync(cur, 0, sizeof(unsigned), s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaMemsetAsync(amax word)");
	int64_t n = rows * cols;
	int64_t nb = (n + 255) / 256;
	if (nb > 1024)
		nb = 1024;
	if (nb < 1)
		nb = 1;
	if (pre.xent.stats)
		amax_kernel<true><<<(unsigned)nb, 256, 0, s->cs>>>(x, n, cols, pre, cur);
	else
		amax_kernel<false><<<(unsigned)nb, 256, 0, s->cs>>>(x, n, cols, pre, cur);
	if ((rc = qe__cuda_launched(op, "amax_kernel")))
		return rc;
	if (wide)
		rc = launch_cast4<uint8_t>(s, "cast4_kernel<current>", grid4, a, pre, e5m2, NULL, cur, fmax, NULL, a->scale,
					   part);
	else {
		rc = launch_cast1<uint8_t>(s, "cast_kernel<fp8, current>", grid, block, x, a, pre, e5m2, NULL, cur, fmax,
					   a->margin, NULL, a->scale);
	}
	if (rc)
		return rc;
	if (amax_dst) {
		fold_amax_kernel<<<1, 1, 0, s->cs>>>(cur, amax_dst);
		rc = qe__cuda_launched(op, "fold_amax_kernel");
	}
	return rc;
}

/* Threads per role block: a warp multiple covering the history, at most 256. */
static int update_threads(int history_len)
{
	return history_len >= 256 ? 256 : ((history_len + 31) / 32) * 32;
}

extern "C" int qe__cuda_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r)
{
	int threads = update_threads(history_len);
	fp8_update_kernel<<<1, threads, 0, s->cs>>>(block, history_len, qe_fp8_max(fmt), r->algo == QE_AMAX_MAX,
						     r->margin);
	return qe__cuda_launched("fp8_update", "fp8_update_kernel");
}

extern "C" int qe__cuda_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
					 const qe_fp8_recipe *r)
{
	for (int base = 0; base < n; base += QE_CUDA_UPDATE_BATCH) {
		int k = n - base < QE_CUDA_UPDATE_BATCH ? n - base : QE_CUDA_UPDATE_BATCH;
		fp8_update_batch b = {};
		for (int i = 0; i < k; i++) {
			b.block[i] = items[base + i].block;
			b.fp8_max[i] = qe_fp8_max(items[base + i].fmt);
		}
		fp8_update_many_kernel<<<k, update_threads(history_len), 0, s->cs>>>(b, history_len,
										      r->algo == QE_AMAX_MAX, r->margin);
		int rc = qe__cuda_launched("fp8_update_many", "fp8_update_many_kernel");
		if (rc)
			return rc;
	}
	return QE_OK;
}
