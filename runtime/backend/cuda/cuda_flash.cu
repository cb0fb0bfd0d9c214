/*
 * cuda_flash.cu - causal multi-head attention without the T x T
 * probabilities (flash-style), forward and backward, on tensor cores
 * (mma.sync m16n8k8, TF32 operands, fp32 accumulation), deterministic: every
 * sum runs in a fixed order and no kernel uses atomics, so two runs give the
 * same bytes.
 *
 * Layout (backend.h attn_flash_*): sequence b, token t, head h: q at
 * qkv[(b*T + t)*3H + h*D], k at +H, v at +2H; out[(b*T + t)*H + h*D];
 * lse[(b*nh + h)*T + t].  A block of W warps owns 16 W rows (16 a warp) of
 * queries (forward, dQ) or keys (dK, dV) and walks the other side in tiles
 * of 64; a warp skips a tile the causal mask hides from all of its rows.
 * W is 4 (64 rows a block), or 8 with QE_FLASH_ROWS=128 (a tuning knob:
 * each tile loaded then serves twice the products, but fewer blocks fit an
 * SM; on the H200 gpt2 at seq 1024 took 119.3 ms a step with 4, 126.1 with 8).
 *
 * Scores, probabilities and their gradients stay in registers, in the
 * accumulator layout of the MMA: lane (g = lane/4, c = lane%4) holds, of
 * each 8-column slice n of a warp's 16 x 64 tile, rows g and g+8 at columns
 * 8n + 2c and 8n + 2c + 1.  A second product over the tile's columns (P V,
 * dS K, P^T dO, dS^T Q) takes those registers as its A operand as they are:
 * the A operand's lane holds columns c and c+4 of an 8-wide step, so the
 * step's k index c stands for column 2c and c+4 for column 2c+1, and the B
 * operand is read from shared memory in the same order (rows 2c and 2c+1 of
 * the slice).  Only the order of the terms inside one MMA changes; the
 * hardware sums them in a fixed way, so the result is still deterministic.
 *
 * TF32 rounding happens once, when a tile is loaded into shared memory, and
 * where P and dS become an operand; never per fragment.  Shared rows have a
 * stride of D + 4 floats, which keeps every fragment load free of bank
 * conflicts for D = 16, 32 and 64.
 *
 * Forward, per query tile: for each key tile up to the diagonal, S = Q K^T,
 * the online softmax of each row (running max m and sum l; the output rows
 * rescaled by exp(m_old - m_new)), O += P V; then out = O / l and
 * lse = m + log l.  Exponentials are exp2 of log2(e)-scaled scores.
 * Backward, with Dt = dout_t . out_t (flash_dot_kernel):
 *   dQ kernel, per query tile, over key tiles <= it:  P = exp(S - lse),
 *     dP = dO V^T, dS = P (dP - Dt), dQ += dS K;
 *   dK/dV kernel, per key tile, over query tiles >= it: with S^T = K Q^T and
 *     dP^T = V dO^T, dV += P^T dO and dK += dS^T Q.
 * Splitting dQ from dK/dV (each recomputes S) is what removes the atomics a
 * single backward kernel would need for dQ.  Masked entries (t2 > t, or
 * beyond T) are exactly zero in P and dS.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_flash_row.cuh"
#include "runtime/backend/cuda/cuda_int.h"

#define FL_TILE 64    /* queries or keys per tile walked */
#define FL_NS (FL_TILE / 8) /* 8-column slices of a 16 x 64 score tile */
#define FL_LOG2E FLASH_LOG2E

/* fp32 -> TF32, round to nearest (ties away), as the bits of a float */
__device__ __forceinline__ float to_tf32(float x)
{
	uint32_t r;
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
	return __uint_as_float(r);
}

/* d += A . B for one m16n8k8 step: a[4], b[2] hold TF32 values */
__device__ __forceinline__ void mma_tf32(float *d, const float *a, float b0, float b1)
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
		       "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

/*
 * Rows [r0, r0+ROWS) of an [N, ld] tensor's columns col..col+D into s (stride
 * D+4), float4 at a time (16-byte aligned: the launchers check), rounded to
 * TF32; zeros beyond T.
 */
template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_rows4(float *s, const float *x, int64_t ld, int64_t col, int64_t row_base, int r0,
					   int T)
{
	const int LD = D + 4, Q = D / 4;
	/* NT (the block's threads) a compile-time stride: the loop unrolls and its loads are in flight together */
#pragma unroll
	for (int i = threadIdx.x; i < ROWS * Q; i += NT) {
		int r = i / Q, c = (i - r * Q) * 4, t = r0 + r;
		float4 v = t < T ? *(const float4 *)(x + (row_base + t) * ld + col + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		v.x = to_tf32(v.x);
		v.y = to_tf32(v.y);
		v.z = to_tf32(v.z);
		v.w = to_tf32(v.w);
		*(float4 *)(s + r * LD + c) = v;
	}
}

/* rows [r0, r0+ROWS) of one of q (part 0), k (1), v (2) of head h into s */
template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile(float *s, const float *qkv, int64_t row_base, int r0, int T, int H, int part,
					  int h)
{
	load_rows4<D, ROWS, NT>(s, qkv, 3 * (int64_t)H, (int64_t)part * H + h * D, row_base, r0, T);
}

/* rows [r0, r0+ROWS) of an [N, H] tensor's head h into s */
template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_rows(float *s, const float *x, int64_t row_base, int r0, int T, int H, int h)
{
	load_rows4<D, ROWS, NT>(s, x, H, (int64_t)h * D, row_base, r0, T);
}

/*
 * acc[n] = X_w . Y^T for the warp: X_w is the warp's 16 rows (stride D+4) of
 * shared memory, Y the tile's 64 rows; acc[n] is columns 8n..8n+7.
 */
template <int D> __device__ __forceinline__ void mm_xyt(float (*acc)[4], const float *xw, const float *y, int lane)
{
	const int LD = D + 4, g = lane >> 2, c = lane & 3;
#pragma unroll
	for (int n = 0; n < FL_NS; n++)
		acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
	for (int k = 0; k < D / 8; k++) {
		float a[4];
		a[0] = xw[g * LD + 8 * k + c];
		a[1] = xw[(g + 8) * LD + 8 * k + c];
		a[2] = xw[g * LD + 8 * k + c + 4];
		a[3] = xw[(g + 8) * LD + 8 * k + c + 4];
#pragma unroll
		for (int n = 0; n < FL_NS; n++) {
			const float *yr = y + (8 * n + g) * LD + 8 * k + c;
			mma_tf32(acc[n], a, yr[0], yr[4]);
		}
	}
}

/*
 * out[n] += P . Y over the tile's 64 columns: p[j] holds the accumulator
 * layout of slice j (TF32 values), Y the tile's 64 rows (stride D+4); out[n]
 * is columns 8n..8n+7 of the D.
 */
template <int D> __device__ __forceinline__ void mm_py(float (*out)[4], float (*p)[4], const float *y, int lane)
{
	const int LD = D + 4, g = lane >> 2, c = lane & 3;
#pragma unroll
	for (int j = 0; j < FL_NS; j++) {
		float a[4] = { p[j][0], p[j][2], p[j][1], p[j][3] };
		const float *y0 = y + (8 * j + 2 * c) * LD + g;
#pragma unroll
		for (int n = 0; n < D / 8; n++)
			mma_tf32(out[n], a, y0[8 * n], y0[LD + 8 * n]);
	}
}

/* ---- forward ------------------------------------------------------------------------ */

template <int D, int W>
__global__ void __launch_bounds__(W * 32) flash_fwd_kernel(float *out, float *lse, const float *qkv, int T, int H,
							    int nh, float scale)
{
	extern __shared__ __align__(16) float sm[];
	const int LD = D + 4, R = 16 * W;
	float *Qs = sm, *Ks = Qs + R * LD, *Vs = Ks + FL_TILE * LD;
	const int nqt = (T + R - 1) / R;
	const int qt = nqt - 1 - (int)blockIdx.x; /* the longest rows first */
	const int h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T;
	const int q0 = qt * R, wlast = q0 + w * 16 + 15; /* the warp's last row */
	const int ra = q0 + w * 16 + g, rb = ra + 8;     /* this lane's two rows */
	const int nkt = min((T + FL_TILE - 1) / FL_TILE, (q0 + R - 1) / FL_TILE + 1);
	const float sl2 = scale * FL_LOG2E;
	load_tile<D, R, W * 32>(Qs, qkv, base, q0, T, H, 0, h);
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	flash_rows rs = flash_rows_start();
	for (int kt = 0; kt < nkt; kt++) {
		const int k0 = kt * FL_TILE;
		__syncthreads(); /* the previous tile's K, V are no longer read */
		load_tile<D, FL_TILE, W * 32>(Ks, qkv, base, k0, T, H, 1, h);
		load_tile<D, FL_TILE, W * 32>(Vs, qkv, base, k0, T, H, 2, h);
		__syncthreads();
		if (k0 > wlast)
			continue; /* every key of the tile is after every row of the warp */
		float sc[FL_NS][4];
		mm_xyt<D>(sc, Qs + w * 16 * LD, Ks, lane);
		flash_softmax_step<FL_NS, D / 8, true>(sc, o, &rs, k0, ra, rb, c, T, sl2);
#pragma unroll
		for (int n = 0; n < FL_NS; n++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				sc[n][e] = to_tf32(sc[n][e]);
		mm_py<D>(o, sc, Vs, lane);
	}
	flash_store_rows<D / 8>(out, lse, o, &rs, base, ((int64_t)b * nh + h) * T, ra, rb, c, T, H, h);
}

/* ---- backward ------------------------------------------------------------------------ */

template <int D, int W>
__global__ void __launch_bounds__(W * 32) flash_dq_kernel(float *dqkv, const float *dout, const float *qkv,
							   const float *lse, const float *Dt, int T, int H, int nh, float scale)
{
	extern __shared__ __align__(16) float sm[];
	const int LD = D + 4, R = 16 * W;
	float *Qs = sm, *dOs = Qs + R * LD, *Ks = dOs + R * LD, *Vs = Ks + FL_TILE * LD;
	const int nqt = (T + R - 1) / R;
	const int qt = nqt - 1 - (int)blockIdx.x;
	const int h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int q0 = qt * R, wlast = q0 + w * 16 + 15;
	const int ra = q0 + w * 16 + g, rb = ra + 8;
	const int nkt = min((T + FL_TILE - 1) / FL_TILE, (q0 + R - 1) / FL_TILE + 1);
	const float sl2 = scale * FL_LOG2E;
	load_tile<D, R, W * 32>(Qs, qkv, base, q0, T, H, 0, h);
	load_rows<D, R, W * 32>(dOs, dout, base, q0, T, H, h);
	const float la = ra < T ? lse[hrow + ra] * FL_LOG2E : 0.0f, lb = rb < T ? lse[hrow + rb] * FL_LOG2E : 0.0f;
	const float da = ra < T ? Dt[hrow + ra] : 0.0f, db = rb < T ? Dt[hrow + rb] : 0.0f;
	float dq[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
	for (int kt = 0; kt < nkt; kt++) {
		const int k0 = kt * FL_TILE;
		__syncthreads();
		load_tile<D, FL_TILE, W * 32>(Ks, qkv, base, k0, T, H, 1, h);
		load_tile<D, FL_TILE, W * 32>(Vs, qkv, base, k0, T, H, 2, h);
		__syncthreads();
		if (k0 > wlast)
			continue;
		float sc[FL_NS][4], dp[FL_NS][4];
		mm_xyt<D>(sc, Qs + w * 16 * LD, Ks, lane);
		mm_xyt<D>(dp, dOs + w * 16 * LD, Vs, lane);
#pragma unroll
		for (int n = 0; n < FL_NS; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int key = k0 + 8 * n + 2 * c + (e & 1), row = e < 2 ? ra : rb;
				float p = (key <= row && key < T && row < T) ? exp2f(sc[n][e] * sl2 - (e < 2 ? la : lb)) : 0.0f;
				sc[n][e] = to_tf32(p * (dp[n][e] - (e < 2 ? da : db))); /* dS */
			}
		mm_py<D>(dq, sc, Ks, lane);
	}
	flash_store_dq<D / 8>(dqkv, dq, base, ra, rb, c, T, H, h, scale);
}

template <int D, int W>
__global__ void __launch_bounds__(W * 32) flash_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
							    const float *lse, const float *Dt, int T, int H, int nh, float scale)
{
	extern __shared__ __align__(16) float sm[];
	const int LD = D + 4, R = 16 * W;
	float *Ks = sm, *Vs = Ks + R * LD, *Qs = Vs + R * LD, *dOs = Qs + FL_TILE * LD;
	float *lse_s = dOs + FL_TILE * LD, *dt_s = lse_s + FL_TILE;
	const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int k0 = kt * R, nqt = (T + FL_TILE - 1) / FL_TILE, wfirst = k0 + w * 16; /* the warp's first key */
	const int ka = k0 + w * 16 + g, kb = ka + 8; /* this lane's two key rows */
	const float sl2 = scale * FL_LOG2E;
	load_tile<D, R, W * 32>(Ks, qkv, base, k0, T, H, 1, h);
	load_tile<D, R, W * 32>(Vs, qkv, base, k0, T, H, 2, h);
	float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
		dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
	}
	for (int qt = k0 / FL_TILE; qt < nqt; qt++) {
		const int q0 = qt * FL_TILE;
		__syncthreads();
		load_tile<D, FL_TILE, W * 32>(Qs, qkv, base, q0, T, H, 0, h);
		load_rows<D, FL_TILE, W * 32>(dOs, dout, base, q0, T, H, h);
		for (int i = threadIdx.x; i < FL_TILE; i += W * 32) {
			int t = q0 + i;
			lse_s[i] = t < T ? lse[hrow + t] * FL_LOG2E : 0.0f;
			dt_s[i] = t < T ? Dt[hrow + t] : 0.0f;
		}
		__syncthreads();
		if (q0 + FL_TILE - 1 < wfirst)
			continue; /* every query of the tile is before every key of the warp */
		float st[FL_NS][4], dpt[FL_NS][4];
		mm_xyt<D>(st, Ks + w * 16 * LD, Qs, lane);   /* S^T: keys x queries */
		mm_xyt<D>(dpt, Vs + w * 16 * LD, dOs, lane); /* dP^T */
#pragma unroll
		for (int n = 0; n < FL_NS; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int qc = 8 * n + 2 * c + (e & 1), tq = q0 + qc, key = e < 2 ? ka : kb;
				float p = (key <= tq && tq < T && key < T) ? exp2f(st[n][e] * sl2 - lse_s[qc]) : 0.0f;
				st[n][e] = to_tf32(p);                         /* P^T */
				dpt[n][e] = to_tf32(p * (dpt[n][e] - dt_s[qc])); /* dS^T */
			}
		mm_py<D>(dv, st, dOs, lane);
		mm_py<D>(dk, dpt, Qs, lane);
	}
	flash_store_dkv<D / 8>(dqkv, dk, dv, base, ka, kb, c, T, H, h, scale);
}

/* ---- launchers ------------------------------------------------------------------------ */

static size_t fwd_smem(int D, int W) { return (size_t)(16 * W + 2 * FL_TILE) * (D + 4) * 4; }
static size_t dq_smem(int D, int W) { return (size_t)(2 * 16 * W + 2 * FL_TILE) * (D + 4) * 4; }
static size_t dkv_smem(int D, int W) { return ((size_t)(2 * 16 * W + 2 * FL_TILE) * (D + 4) + 2 * FL_TILE) * 4; }

/*
 * Warps a block (16 rows each): 4 unless QE_FLASH_ROWS=128 asks for 8 (the
 * file comment says why 4).  Read once per process.
 */
static int flash_warps(void)
{
	static int w;
	if (!w) {
		w = strcmp(qe_rt_options_get()->flash_rows, "128") == 0 ? 8 : 4;
	}
	return w;
}

template <typename K> static int set_smem(K kernel, size_t bytes, const char *op, const char *name)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	return e == cudaSuccess ? QE_OK : qe__cuda_err(e, op, name);
}

template <int D, int W>
static int fwd_launch(qe_stream *s, float *out, float *lse, const float *qkv, int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_fwd";
	size_t sm = fwd_smem(D, W);
	int rc = set_smem(flash_fwd_kernel<D, W>, sm, op, "cudaFuncSetAttribute(flash_fwd_kernel)");
	if (rc)
		return rc;
	dim3 grid((unsigned)((T + 16 * W - 1) / (16 * W)), (unsigned)nh, (unsigned)B);
	flash_fwd_kernel<D, W><<<grid, W * 32, sm, s->cs>>>(out, lse, qkv, T, H, nh, 1.0f / sqrtf((float)D));
	return qe__cuda_launched(op, "flash_fwd_kernel");
}

/* Dt = dout . out row by row for the TF32 kernels (cuda_flash16.cu launches flash_dot_kernel on bf16 dout) */
template <int D> static int dot_launch(qe_stream *s, float *Dt, const float *dout, const float *out, int64_t B, int T,
				       int H, int nh)
{
	int64_t rows = B * nh * T;
	unsigned nb = (unsigned)((rows * (D / 4) + 255) / 256);
	flash_dot_kernel<D, float, float><<<nb, 256, 0, s->cs>>>(Dt, dout, out, rows, T, H, nh);
	return qe__cuda_launched("attn_flash_bwd", "flash_dot_kernel");
}

/* Dt[b, h, t] = dout_t . out_t over head h's columns, into Dt [B*nh*T] */
static int flash_dot(qe_stream *s, float *Dt, const float *dout, const float *out, int64_t B, int T, int H, int nh)
{
	switch (H / nh) {
	case 16:
		return dot_launch<16>(s, Dt, dout, out, B, T, H, nh);
	case 32:
		return dot_launch<32>(s, Dt, dout, out, B, T, H, nh);
	case 64:
		return dot_launch<64>(s, Dt, dout, out, B, T, H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_bwd: head dimension %d", H / nh);
	}
}

template <int D, int W>
static int bwd_launch(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *lse,
		      const float *Dt, int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_bwd";
	int rc;
	if ((rc = set_smem(flash_dq_kernel<D, W>, dq_smem(D, W), op, "cudaFuncSetAttribute(flash_dq_kernel)")) ||
	    (rc = set_smem(flash_dkv_kernel<D, W>, dkv_smem(D, W), op, "cudaFuncSetAttribute(flash_dkv_kernel)")))
		return rc;
	dim3 grid((unsigned)((T + 16 * W - 1) / (16 * W)), (unsigned)nh, (unsigned)B);
	float scale = 1.0f / sqrtf((float)D);
	flash_dq_kernel<D, W><<<grid, W * 32, dq_smem(D, W), s->cs>>>(dqkv, dout, qkv, lse, Dt, T, H, nh, scale);
	if ((rc = qe__cuda_launched(op, "flash_dq_kernel")))
		return rc;
	flash_dkv_kernel<D, W><<<grid, W * 32, dkv_smem(D, W), s->cs>>>(dqkv, dout, qkv, lse, Dt, T, H, nh, scale);
	return qe__cuda_launched(op, "flash_dkv_kernel");
}

/* the TF32 backward after Dt: 4 or 8 warps a block (flash_warps) */
template <int D>
static int bwd_tf32(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *lse,
		    const float *Dt, int64_t B, int T, int H, int nh)
{
	return flash_warps() == 4 ? bwd_launch<D, 4>(s, dqkv, dout, qkv, lse, Dt, B, T, H, nh)
				  : bwd_launch<D, 8>(s, dqkv, dout, qkv, lse, Dt, B, T, H, nh);
}

/* dst = qkv + bias, gemm's own bias add on a copy: the TF32 kernels' operands when attention gets the QKV bias */
static int qkv_biased(qe_stream *s, float *dst, const float *qkv, const float *bias, int64_t rows, int64_t H,
		      const char *op)
{
	cudaError_t e = cudaMemcpyAsync(dst, qkv, (size_t)(rows * 3 * H) * sizeof(float), cudaMemcpyDeviceToDevice, s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaMemcpyAsync(qkv)");
	return qe__cuda_add_bias(s, op, dst, bias, rows, 3 * H);
}

static int aligned16(const char *op, const char *name, const void *p)
{
	if ((uintptr_t)p & 15)
		return qe_fail(QE_EINVAL, "%s: %s at %p is not 16-byte aligned (the kernels load float4)", op, name, p);
	return QE_OK;
}

static int flash_operands(const char *op, qe_flash_operands operands)
{
	if (operands != QE_FLASH_TF32 && operands != QE_FLASH_BF16)
		return qe_fail(QE_EINVAL, "%s: operand kind %d (known: %d tf32, %d bf16)", op, (int)operands,
			       (int)QE_FLASH_TF32, (int)QE_FLASH_BF16);
	return QE_OK;
}

extern "C" int qe__cuda_attn_flash_fwd(qe_stream *s, void *out_in, float *lse, const void *qkv_in, const float *qkv_bias,
				       int64_t B, int64_t T, int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	const float *qkv = (const float *)qkv_in; /* f32 unless operands are bf16 (qe__check_flash) */
	float *out = (float *)out_in;
	const char *op = "attn_flash_fwd";
	if (B * T == 0)
		return QE_OK;
	int rc;
	if ((rc = flash_operands(op, operands)) || (rc = aligned16(op, "qkv", qkv)) || (rc = aligned16(op, "out", out)))
		return rc;
	if (T > INT32_MAX / 4 || 3 * H > INT32_MAX || B > 65535)
		return qe_fail(QE_EUNSUPPORTED, "%s: batch %lld x T %lld x H %lld is too large", op, (long long)B,
			       (long long)T, (long long)H);
	if (operands == QE_FLASH_BF16)
		return qe__cuda_flash16_fwd(s, out_in, lse, qkv_in, qkv_bias, B, (int)T, (int)H, nh, dt);
	if (qkv_bias) { /* the TF32 kernels read qkv itself: a biased copy first */
		float *qb = NULL;
		if ((rc = qe__cuda_scratch(s, (size_t)(B * T * 3 * H) * sizeof(float), op, (void **)&qb)) ||
		    (rc = qkv_biased(s, qb, qkv, qkv_bias, B * T, H, op)))
			return rc;
		qkv = qb;
	}
	switch (H / nh) {
	case 16:
		return flash_warps() == 4 ? fwd_launch<16, 4>(s, out, lse, qkv, B, (int)T, (int)H, nh)
					  : fwd_launch<16, 8>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	case 32:
		return flash_warps() == 4 ? fwd_launch<32, 4>(s, out, lse, qkv, B, (int)T, (int)H, nh)
					  : fwd_launch<32, 8>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	case 64:
		return flash_warps() == 4 ? fwd_launch<64, 4>(s, out, lse, qkv, B, (int)T, (int)H, nh)
					  : fwd_launch<64, 8>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "%s: head dimension %lld", op, (long long)(H / nh));
	}
}

extern "C" int qe__cuda_attn_flash_bwd(qe_stream *s, void *dqkv_in, const void *dout_in, const void *qkv_in,
				       const float *qkv_bias, const void *out_in, const float *lse, int64_t B, int64_t T,
				       int64_t H, int nh, qe_flash_operands operands, qe_dtype dt)
{
	/* f32 unless the operands are bf16 (qe__check_flash) */
	const float *qkv = (const float *)qkv_in, *dout = (const float *)dout_in, *out = (const float *)out_in;
	float *dqkv = (float *)dqkv_in;
	const char *op = "attn_flash_bwd";
	if (B * T == 0)
		return QE_OK;
	if (T > INT32_MAX / 4 || 3 * H > INT32_MAX || B > 65535)
		return qe_fail(QE_EUNSUPPORTED, "%s: batch %lld x T %lld x H %lld is too large", op, (long long)B,
			       (long long)T, (long long)H);
	float *Dt = NULL;
	int64_t rows = B * nh * T;
	int rc;
	if ((rc = flash_operands(op, operands)) || (rc = aligned16(op, "qkv", qkv)) || (rc = aligned16(op, "dout", dout)) ||
	    (rc = aligned16(op, "out", out)) || (rc = aligned16(op, "dqkv", dqkv)))
		return rc;
	int iT = (int)T, iH = (int)H;
	if (operands == QE_FLASH_BF16)
		return qe__cuda_flash16_bwd(s, dqkv_in, dout_in, qkv_in, qkv_bias, out_in, lse, B, iT, iH, nh, dt);
	/* Dt, then (with a bias) the biased copy of qkv the TF32 kernels read */
	size_t dt_bytes = qe__cuda_align256((size_t)rows * sizeof(float));
	size_t qb_bytes = qkv_bias ? (size_t)(B * T * 3 * H) * sizeof(float) : 0;
	if ((rc = qe__cuda_scratch(s, dt_bytes + qb_bytes, op, (void **)&Dt)) ||
	    (rc = flash_dot(s, Dt, dout, out, B, iT, iH, nh)))
		return rc;
	if (qkv_bias) {
		float *qb = (float *)((char *)Dt + dt_bytes);
		if ((rc = qkv_biased(s, qb, qkv, qkv_bias, B * T, H, op)))
			return rc;
		qkv = qb;
	}
	switch (H / nh) {
	case 16:
		return bwd_tf32<16>(s, dqkv, dout, qkv, lse, Dt, B, iT, iH, nh);
	case 32:
		return bwd_tf32<32>(s, dqkv, dout, qkv, lse, Dt, B, iT, iH, nh);
	default:
		return bwd_tf32<64>(s, dqkv, dout, qkv, lse, Dt, B, iT, iH, nh);
	}
}
