/*
 * cuda_flash_row.cuh - what the flash kernels share (cuda_flash.cu: TF32
 * operands; cuda_flash16.cu and cuda_flash_wg_*.cu: bf16).  A warp's score
 * tile in the accumulator layout of the MMA (lane g = lane/4, c = lane%4
 * holds, of each 8-column slice n, rows g and g+8 at columns 8n + 2c and
 * 8n + 2c + 1; mma.sync and wgmma agree on it), masked and scaled, then one
 * step of the online softmax, then the output and log-sum-exp rows; the
 * backward's P and dS, its row dot products Dt (flash_dot_kernel, both
 * kinds) and its stores of dQ and of dK, dV into f32 or bf16 (the stores'
 * pointer type: the bf16 kernels write what the stage stores, the TF32 ones
 * f32).  The operand kinds differ only in how P becomes an operand (rounded
 * to TF32, or packed to bf16), which the kernels do after
 * flash_softmax_step.  Last, the bf16 kernels' bf16x2 packing and cp.async
 * copies.
 */
#ifndef QE_CUDA_FLASH_ROW_CUH
#define QE_CUDA_FLASH_ROW_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

/* the running state of the lane's two rows (a = g, b = g + 8): max, sum of exponentials */
typedef struct flash_rows {
	float ma, mb, la, lb;
} flash_rows;

__device__ __forceinline__ flash_rows flash_rows_start(void)
{
	flash_rows r = { -INFINITY, -INFINITY, 0.0f, 0.0f };
	return r;
}

/* 2^x by the special-function unit (ex2.approx.ftz: 2^-22 relative, -inf -> +0) */
__device__ __forceinline__ float flash_ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/*
 * One key tile (keys k0..k0 + 8 NS - 1) for rows ra, rb: with MASK, the
 * scores where the key is after the row or outside T become -inf (a tile
 * wholly inside both needs no mask, and the kernels say which); then the
 * online softmax in units of log2: the rows' new maxima (max score times
 * sl2 = scale log2 e), sc holding the probabilities 2^(s sl2 - max) (one
 * fused multiply-add and one ex2 a score), the sums rescaled and grown; the
 * factors that rescale the rows' outputs come back in ra_scale, rb_scale
 * (flash_softmax_step below applies them at once; a kernel whose previous
 * P V is still running applies them after it).  The quad's
 * partial maxima and sums are combined in a fixed butterfly, so the bits do
 * not depend on timing.  Every tile a warp reads holds a key at or before
 * each of its rows (key k0 <= the warp's first row), so a row's maximum is
 * finite from its first tile on; the guard against an all -inf row stays
 * for safety and costs one select a row.
 */
template <int NS, bool MASK>
__device__ __forceinline__ void flash_softmax_probs(float (*sc)[4], flash_rows *st, int k0, int ra, int rb, int c, int T,
						    float sl2, float *ra_scale, float *rb_scale)
{
	float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
	for (int n = 0; n < NS; n++) {
		if (MASK) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int key = k0 + 8 * n + 2 * c + (e & 1), row = e < 2 ? ra : rb;
				sc[n][e] = (key <= row && key < T) ? sc[n][e] : -INFINITY;
			}
		}
		xa = fmaxf(xa, fmaxf(sc[n][0], sc[n][1]));
		xb = fmaxf(xb, fmaxf(sc[n][2], sc[n][3]));
	}
	xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));
	xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
	xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));
	xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
	float na = fmaxf(st->ma, xa * sl2), nb = fmaxf(st->mb, xb * sl2);
	float ua = na == -INFINITY ? 0.0f : na, ub = nb == -INFINITY ? 0.0f : nb;
	float aa = flash_ex2(st->ma - ua), ab = flash_ex2(st->mb - ub);
	float sa = 0.0f, sb = 0.0f;
#pragma unroll
	for (int n = 0; n < NS; n++) {
		sc[n][0] = flash_ex2(fmaf(sc[n][0], sl2, -ua));
		sc[n][1] = flash_ex2(fmaf(sc[n][1], sl2, -ua));
		sc[n][2] = flash_ex2(fmaf(sc[n][2], sl2, -ub));
		sc[n][3] = flash_ex2(fmaf(sc[n][3], sl2, -ub));
		sa += sc[n][0] + sc[n][1];
		sb += sc[n][2] + sc[n][3];
	}
	sa += __shfl_xor_sync(0xffffffffu, sa, 1);
	sa += __shfl_xor_sync(0xffffffffu, sa, 2);
	sb += __shfl_xor_sync(0xffffffffu, sb, 1);
	sb += __shfl_xor_sync(0xffffffffu, sb, 2);
	st->la = st->la * aa + sa;
	st->lb = st->lb * ab + sb;
	st->ma = na;
	st->mb = nb;
	*ra_scale = aa;
	*rb_scale = ab;
}

/* the output accumulators (DN 8-column slices) of rows a and b rescaled to their new maxima */
template <int DN> __device__ __forceinline__ void flash_rescale(float (*o)[4], float aa, float ab)
{
#pragma unroll
	for (int n = 0; n < DN; n++) {
		o[n][0] *= aa;
		o[n][1] *= aa;
		o[n][2] *= ab;
		o[n][3] *= ab;
	}
}

/* one step of the online softmax: the probabilities, then the output rescaled */
template <int NS, int DN, bool MASK>
__device__ __forceinline__ void flash_softmax_step(float (*sc)[4], float (*o)[4], flash_rows *st, int k0, int ra, int rb,
						   int c, int T, float sl2)
{
	float aa, ab;
	flash_softmax_probs<NS, MASK>(sc, st, k0, ra, rb, c, T, sl2, &aa, &ab);
	flash_rescale<DN>(o, aa, ab);
}

/*
 * dQ's tile, first half: sc (scores of rows ra, rb against keys k0..k0 +
 * 8 NS - 1) becomes P = 2^(s sl2 - lse log2 e) (la, lb: the rows' lse in
 * log2 units).  With MASK, P is 0 where the key is after the row or either
 * is outside T; a tile wholly before the warp's first row and inside T
 * needs no mask.
 */
template <int NS, bool MASK>
__device__ __forceinline__ void flash_p_rows(float (*sc)[4], int k0, int ra, int rb, int c, int T, float sl2, float la,
					     float lb)
{
#pragma unroll
	for (int n = 0; n < NS; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int key = k0 + 8 * n + 2 * c + (e & 1), row = e < 2 ? ra : rb;
			float p = flash_ex2(fmaf(sc[n][e], sl2, -(e < 2 ? la : lb)));
			if (MASK && !(key <= row && key < T && row < T))
				p = 0.0f;
			sc[n][e] = p;
		}
}

/* second half: P becomes dS = P (dP - Dt) (da, db: the rows' Dt) */
template <int NS>
__device__ __forceinline__ void flash_ds_of_p_rows(float (*sc)[4], const float (*dp)[4], float da, float db)
{
#pragma unroll
	for (int n = 0; n < NS; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			sc[n][e] = sc[n][e] * (dp[n][e] - (e < 2 ? da : db));
}

/* both halves, for kernels that have dP at hand with the scores */
template <int NS, bool MASK>
__device__ __forceinline__ void flash_ds_rows(float (*sc)[4], const float (*dp)[4], int k0, int ra, int rb, int c, int T,
					      float sl2, float la, float lb, float da, float db)
{
	flash_p_rows<NS, MASK>(sc, k0, ra, rb, c, T, sl2, la, lb);
	flash_ds_of_p_rows<NS>(sc, dp, da, db);
}

/*
 * dK and dV's tile, transposed, first half: st (scores of keys ka, kb
 * against queries q0..q0 + 8 NS - 1) becomes P^T; ls holds the queries'
 * lse (log2 units); oa, ob are terms the keys' rows add to their exponents
 * (a query bias the scores left out).  MASK as for flash_p_rows.
 */
template <int NS, bool MASK>
__device__ __forceinline__ void flash_p_cols(float (*st)[4], int q0, int ka, int kb, int c, int T, float sl2,
					     const float *ls, float oa = 0.0f, float ob = 0.0f)
{
#pragma unroll
	for (int n = 0; n < NS; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int qc = 8 * n + 2 * c + (e & 1), tq = q0 + qc, key = e < 2 ? ka : kb;
			float p = flash_ex2(fmaf(st[n][e], sl2, (e < 2 ? oa : ob) - ls[qc]));
			if (MASK && !(key <= tq && tq < T && key < T))
				p = 0.0f;
			st[n][e] = p;
		}
}

/* second half: dpt (dP^T) becomes dS^T = P^T (dP^T - Dt); ds holds the queries' Dt */
template <int NS>
__device__ __forceinline__ void flash_ds_of_p_cols(float (*dpt)[4], const float (*st)[4], int c, const float *ds)
{
#pragma unroll
	for (int n = 0; n < NS; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dpt[n][e] = st[n][e] * (dpt[n][e] - ds[8 * n + 2 * c + (e & 1)]);
}

/* both halves */
template <int NS, bool MASK>
__device__ __forceinline__ void flash_ds_cols(float (*st)[4], float (*dpt)[4], int q0, int ka, int kb, int c, int T,
					      float sl2, const float *ls, const float *ds)
{
	flash_p_cols<NS, MASK>(st, q0, ka, kb, c, T, sl2, ls);
	flash_ds_of_p_cols<NS>(dpt, st, c, ds);
}

/* two floats as one bf16x2 register: lo in the low half, nearest even */
__device__ __forceinline__ uint32_t flash_pack2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

/*
 * 16 bytes global -> shared without passing through registers (cp.async, L2
 * only); with ok false, 16 zero bytes (the source size is 0, g is not read).
 */
__device__ __forceinline__ void flash_cp16(void *sm, const __nv_bfloat16 *g, bool ok)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(sm);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(g), "r"(ok ? 16 : 0));
}

__device__ __forceinline__ void flash_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }

/* wait until at most N of this thread's committed copy groups are still in flight */
template <int N> __device__ __forceinline__ void flash_cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* four values at p as floats: bf16 widened exactly */
__device__ __forceinline__ float4 flash_load4(const float *p) { return *(const float4 *)p; }

__device__ __forceinline__ float4 flash_load4(const __nv_bfloat16 *p)
{
	uint2 u = *(const uint2 *)p;
	float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
	return make_float4(a.x, a.y, b.x, b.y);
}

/*
 * The backward's Dt[b, h, t] = dout_t . out_t over head h's D columns
 * (dout of DT, out of OT: f32, or bf16 widened exactly): D/4 lanes a row,
 * four products each, then a fixed butterfly over those lanes.
 */
template <int D, typename DT, typename OT>
__global__ void flash_dot_kernel(float *Dt, const DT *dout, const OT *out, int64_t rows, int T, int H, int nh)
{
	const int LPR = D / 4;
	int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / LPR; /* (b, h, t) row */
	int part = threadIdx.x % LPR;
	float s = 0.0f;
	if (i < rows) {
		int t = (int)(i % T), h = (int)((i / T) % nh);
		int64_t b = i / ((int64_t)T * nh);
		int64_t at = (b * T + t) * H + h * D + part * 4;
		float4 a = flash_load4(dout + at), o = flash_load4(out + at);
		s = a.x * o.x + a.y * o.y + a.z * o.z + a.w * o.w;
	}
#pragma unroll
	for (int m = 1; m < LPR; m <<= 1)
		s += __shfl_xor_sync(0xffffffffu, s, m);
	if (i < rows && part == 0)
		Dt[i] = s;
}

/* two adjacent values at p: as they are, or each rounded to bf16 (nearest even) */
__device__ __forceinline__ void flash_put2(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }

__device__ __forceinline__ void flash_put2(__nv_bfloat16 *p, float a, float b)
{
	*(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}

/*
 * The rows' outputs o / l into out [N, H] (head h's D = 8 DN columns) and
 * lse = max ln 2 + ln l into lse (row hrow + t), for the rows in 0..T-1
 * (a block aligned to T's end may hold rows before 0).
 */
template <int DN, typename OT>
__device__ __forceinline__ void flash_store_rows(OT *out, float *lse, const float (*o)[4], const flash_rows *st,
						 int64_t base, int64_t hrow, int ra, int rb, int c, int T, int H, int h)
{
	const float ia = 1.0f / st->la, ib = 1.0f / st->lb;
#pragma unroll
	for (int n = 0; n < DN; n++) {
		int col = h * 8 * DN + 8 * n + 2 * c;
		if ((unsigned)ra < (unsigned)T)
			flash_put2(out + (base + ra) * H + col, o[n][0] * ia, o[n][1] * ia);
		if ((unsigned)rb < (unsigned)T)
			flash_put2(out + (base + rb) * H + col, o[n][2] * ib, o[n][3] * ib);
	}
	if (c == 0) {
		if ((unsigned)ra < (unsigned)T)
			lse[hrow + ra] = st->ma * FLASH_LN2 + logf(st->la);
		if ((unsigned)rb < (unsigned)T)
			lse[hrow + rb] = st->mb * FLASH_LN2 + logf(st->lb);
	}
}

/* dQ rows ra, rb (times scale) into the q third of dqkv [N, 3H], those in 0..T-1 */
template <int DN, typename OT>
__device__ __forceinline__ void flash_store_dq(OT *dqkv, const float (*dq)[4], int64_t base, int ra, int rb, int c,
					       int T, int H, int h, float scale)
{
#pragma unroll
	for (int n = 0; n < DN; n++) {
		int col = h * 8 * DN + 8 * n + 2 * c;
		if ((unsigned)ra < (unsigned)T)
			flash_put2(dqkv + (base + ra) * 3 * H + col, dq[n][0] * scale, dq[n][1] * scale);
		if ((unsigned)rb < (unsigned)T)
			flash_put2(dqkv + (base + rb) * 3 * H + col, dq[n][2] * scale, dq[n][3] * scale);
	}
}

/* dK (times scale) and dV of key rows ka, kb into the k and v thirds of dqkv */
template <int DN, typename OT>
__device__ __forceinline__ void flash_store_dkv(OT *dqkv, const float (*dk)[4], const float (*dv)[4], int64_t base,
						int ka, int kb, int c, int T, int H, int h, float scale)
{
#pragma unroll
	for (int n = 0; n < DN; n++) {
		int col = h * 8 * DN + 8 * n + 2 * c;
		if (ka < T) {
			OT *r = dqkv + (base + ka) * 3 * H + col;
			flash_put2(r + H, dk[n][0] * scale, dk[n][1] * scale);
			flash_put2(r + 2 * H, dv[n][0], dv[n][1]);
		}
		if (kb < T) {
			OT *r = dqkv + (base + kb) * 3 * H + col;
			flash_put2(r + H, dk[n][2] * scale, dk[n][3] * scale);
			flash_put2(r + 2 * H, dv[n][2], dv[n][3]);
		}
	}
}

#endif
