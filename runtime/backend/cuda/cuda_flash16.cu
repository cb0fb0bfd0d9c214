/*
 * cuda_flash16.cu - the flash attention's kernels with bf16 operands
 * (mma.sync m16n8k16, fp32 accumulation), for models whose linear layers run
 * in bf16 or FP8 (QE_FLASH_BF16).  Same contract, layout and schedule as the
 * TF32 kernels of cuda_flash.cu (read its comment first): a block of 4 warps
 * owns 64 rows (16 a warp) of queries (forward, dQ) or keys (dK, dV) and
 * walks the other side in tiles of 64; a warp skips the tiles the causal mask
 * hides from all of its rows; every sum runs in a fixed order and no kernel
 * uses atomics, so two runs give the same bytes.
 *
 * What differs from the TF32 kernels:
 * - The operands are bf16, read where they lie: qkv [B*T, 3H] as the QKV
 *   GEMM writes it when activations are stored in bf16, and dout [B*T, H]
 *   as the projection's input gradient is.  Given f32 (the ops' other
 *   type), a pass rounds them to bf16 (nearest even) into the stream's
 *   scratch first, in the same layout.  The kernels copy tiles (64 rows of
 *   a head's D columns, zeros after T) into shared memory with cp.async,
 *   into one of two buffers while the warps compute on the other (rows of
 *   D + 8 bf16: 16-byte aligned for cp.async and ldmatrix, and no two of a
 *   matrix's eight rows share a bank group for D = 16, 32 and 64).  out
 *   and dqkv are written in the same type as qkv and dout (OT).
 * - The warp's own 16 rows (Q and dO, or K and V) are read into registers
 *   once, as A fragments (ldmatrix.x4), not once per tile.
 * - The other side's rows come as B fragments through ldmatrix: as they are
 *   for a product with Y^T (S = Q K^T, dP = dO V^T and the transposed ones),
 *   transposed (.trans) for a product with Y (O += P V, dQ += dS K,
 *   dV += P^T dO, dK += dS^T Q).
 * - P and dS go from the accumulator layout to an A operand without any
 *   shuffle: for m16n8k16 the accumulators of two adjacent 8-column slices
 *   are exactly the A fragment of their 16 columns, each pair of values
 *   packed into one bf16x2 register (rounded to nearest even there).
 * Each product takes half the instructions of TF32's m16n8k8 and a fragment
 * load serves a whole 8 x 8 matrix, which is what this file is for.
 *
 * These kernels run at head dimensions 16 and 32.  At 64 and 128 the
 * launchers below hand the bf16 rows (converted here when given f32) to
 * Hopper's warp-group MMA kernels of cuda_flash_wg_*.cu, which keep this
 * file's contract: the D = 64 templates here are no longer instantiated.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "runtime/backend/cuda/cuda_flash_row.cuh"
#include "runtime/backend/cuda/cuda_int.h"

#define F16_TILE 64              /* queries or keys per tile walked, and rows a backward block owns */
#define F16_QROWS 128            /* queries a forward block owns */
#define F16_NS (F16_TILE / 8)    /* 8-column slices of a 16 x 64 score tile */
#define F16_NT 128               /* threads a block: 4 warps of 16 rows */
#define F16_LOG2E FLASH_LOG2E

typedef __nv_bfloat16 bf16;


/* d += A . B for one m16n8k16 step: a[4], b0, b1 bf16x2 registers */
__device__ __forceinline__ void mma16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* four 8 x 8 bf16 matrices from shared memory; lane l names a row of matrix l/8 */
__device__ __forceinline__ void ldsm4(uint32_t *r, const bf16 *p)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

/* the same, each matrix transposed */
__device__ __forceinline__ void ldsm4_t(uint32_t *r, const bf16 *p)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(a));
}

/* ---- bf16 operands ------------------------------------------------------------------- */

/*
 * dst = src (+ bias, a row of cols values, or NULL) rounded to bf16
 * (nearest even), the same layout: what the kernels read when an op is
 * given f32 qkv or dout.  The bias is added in f32 before the one rounding,
 * so the operands are those of gemm's bias add rounded once.  One thread
 * converts 8 values (cols is a multiple of 8: H is a multiple of 16).
 */
__global__ void bf16_copy_kernel(bf16 *dst, const float *src, const float *bias, int64_t n8, int64_t cols)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n8)
		return;
	float v[8];
	*(float4 *)v = ((const float4 *)src)[2 * i];
	*(float4 *)(v + 4) = ((const float4 *)src)[2 * i + 1];
	if (bias) {
		const float *b = bias + (8 * i) % cols;
#pragma unroll
		for (int e = 0; e < 8; e++)
			v[e] = v[e] + b[e];
	}
	((uint4 *)dst)[i] = make_uint4(flash_pack2(v[0], v[1]), flash_pack2(v[2], v[3]), flash_pack2(v[4], v[5]), flash_pack2(v[6], v[7]));
}


/*
 * Start copying a tile into s (stride D+8): 64 rows of one head's D
 * columns, row r at g + r ld (g: the tile's first row, at or before T - 1);
 * rows r >= nvalid (at or after T) are zeros.  Thread i copies the chunks
 * i, i + 128, ... (tile_bias fixes up the same ones).
 */
template <int D> __device__ __forceinline__ void tile_async(bf16 *s, const bf16 *g, int64_t ld, int nvalid)
{
	const int LD = D + 8, C = D / 8;
#pragma unroll
	for (int i = threadIdx.x; i < F16_TILE * C; i += F16_NT) {
		int r = i / C, c = (i - r * C) * 8;
		bool ok = r < nvalid;
		flash_cp16(s + r * LD + c, ok ? g + r * ld + c : g, ok);
	}
}

/*
 * The bias of the head's D columns (b) added to this thread's chunks of the
 * tile at s, in f32, rounded to bf16 again: once its copies are complete
 * (cp_wait), before the __syncthreads after which other warps read them.
 * Rows past T get the bias too; the mask hides them.  A thread's chunks
 * share their 8 columns (F16_NT is a multiple of D / 8).
 */
template <int D> __device__ __forceinline__ void tile_bias(bf16 *s, const float *b)
{
	const int LD = D + 8, C = D / 8, c = (threadIdx.x % C) * 8;
	float bb[8];
#pragma unroll
	for (int e = 0; e < 8; e++)
		bb[e] = __ldg(b + c + e);
#pragma unroll
	for (int i = threadIdx.x; i < F16_TILE * C; i += F16_NT) {
		uint4 *p = (uint4 *)(s + (i / C) * LD + c);
		uint4 v = *p;
		uint32_t *w = (uint32_t *)&v;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[e]);
			w[e] = flash_pack2(f.x + bb[2 * e], f.y + bb[2 * e + 1]);
		}
		*p = v;
	}
}

/*
 * The next pair of tiles (rows at ga and gb, strides la and lb, nvalid rows
 * inside T) started into dst and dst + one tile when there is one, then a
 * wait until every copy but those is done; on the last iteration, a wait for
 * all.  A __syncthreads must follow before the tiles are read.
 */
template <int D>
__device__ __forceinline__ void pair_next(bf16 *dst, const bf16 *ga, int64_t la, const bf16 *gb, int64_t lb, int nvalid,
					  bool more)
{
	if (more) {
		tile_async<D>(dst, ga, la, nvalid);
		tile_async<D>(dst + F16_TILE * (D + 8), gb, lb, nvalid);
		flash_cp_commit();
		flash_cp_wait<1>();
	} else {
		flash_cp_wait<0>();
	}
}

/* the warp's 16 rows at s (stride D+8) as the A fragments of its D columns */
template <int D> __device__ __forceinline__ void frag_rows(uint32_t (*a)[4], const bf16 *s, int lane)
{
	const int LD = D + 8;
#pragma unroll
	for (int k = 0; k < D / 16; k++)
		ldsm4(a[k], s + (lane & 15) * LD + 16 * k + (lane >> 4) * 8);
}

/*
 * acc[r][n] = X_r . Y^T for each of the warp's RG groups of 16 rows: X_r
 * the group's A fragments, Y the tile's 64 rows in shared memory; acc[r][n]
 * is columns 8n..8n+7.  One ldmatrix.x4 gives the B fragments of two slices
 * (rows 16j..16j+15, 16 of the D columns), which every group uses: with two
 * groups a fragment serves four products, which is what lets the forward
 * keep the tensor cores fed from shared memory.
 */
template <int D, int RG>
__device__ __forceinline__ void mm16_xyt(float (*acc)[F16_NS][4], const uint32_t (*xa)[D / 16][4], const bf16 *y,
					 int lane)
{
	const int LD = D + 8;
#pragma unroll
	for (int r = 0; r < RG; r++)
#pragma unroll
		for (int n = 0; n < F16_NS; n++)
			acc[r][n][0] = acc[r][n][1] = acc[r][n][2] = acc[r][n][3] = 0.0f;
	const bf16 *yl = y + ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
	for (int k = 0; k < D / 16; k++)
#pragma unroll
		for (int j = 0; j < F16_NS / 2; j++) {
			uint32_t b[4];
			ldsm4(b, yl + 16 * j * LD + 16 * k);
#pragma unroll
			for (int r = 0; r < RG; r++) {
				mma16(acc[r][2 * j], xa[r][k], b[0], b[1]);
				mma16(acc[r][2 * j + 1], xa[r][k], b[2], b[3]);
			}
		}
}

/*
 * out[r][n] += P_r . Y over the tile's 64 columns for each of RG row
 * groups: p[r][j] the accumulator layout of slice j (fp32, rounded to bf16
 * here), Y the tile's 64 rows (stride D+8); out[r][n] is columns 8n..8n+7
 * of the D.  One ldmatrix.x4.trans gives the B fragments of 16 rows for two
 * 8-column slices of Y, shared by the groups.
 */
template <int D, int RG>
__device__ __forceinline__ void mm16_py(float (*out)[D / 8][4], const float (*p)[F16_NS][4], const bf16 *y, int lane)
{
	const int LD = D + 8;
	const bf16 *yl = y + (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
#pragma unroll
	for (int k = 0; k < F16_TILE / 16; k++) {
		uint32_t a[RG][4];
#pragma unroll
		for (int r = 0; r < RG; r++) {
			a[r][0] = flash_pack2(p[r][2 * k][0], p[r][2 * k][1]);
			a[r][1] = flash_pack2(p[r][2 * k][2], p[r][2 * k][3]);
			a[r][2] = flash_pack2(p[r][2 * k + 1][0], p[r][2 * k + 1][1]);
			a[r][3] = flash_pack2(p[r][2 * k + 1][2], p[r][2 * k + 1][3]);
		}
#pragma unroll
		for (int n = 0; n < D / 16; n++) {
			uint32_t b[4];
			ldsm4_t(b, yl + 16 * k * LD + 16 * n);
#pragma unroll
			for (int r = 0; r < RG; r++) {
				mma16(out[r][2 * n], a[r], b[0], b[1]);
				mma16(out[r][2 * n + 1], a[r], b[2], b[3]);
			}
		}
	}
}

/*
 * The kernels read q, k and v where the QKV GEMM wrote them (bf16 [B*T, 3H]:
 * sequence b, token t, head h's q at (b*T + t)*3H + h*D, k at +H, v at +2H)
 * and dout as [B*T, H]: a tile is 64 rows of 16-byte pieces, copied by
 * cp.async into one of two shared buffers while the warps compute on the
 * other, so a block waits for global memory only at its first tile.  Q
 * (forward, dQ) or K and V (dK/dV) are copied once.  With a QKV bias (bf16
 * qkv stores the GEMM's output without it), each thread adds it to the
 * pieces of the tiles copied once that it copied (tile_bias) before the
 * barrier that lets the warps read them, and so to dK/dV's Q tiles; the
 * forward's and dQ's streamed K and V tiles stay as they are and the
 * bias's effect is added to their rows instead (fwd_bias_rows, and dQ's
 * lse and Dt), which costs a few dot products a block, not a pass over
 * every tile.  Tp is T rounded up to a whole tile.
 */

/*
 * Row r of the tile at s (stride D+8) dotted with the D floats at v, in f32:
 * lane c of the row's quad takes columns c D/4 .. (c+1) D/4 - 1 in order,
 * then the quad's butterfly; every lane of the warp must call it.
 */
template <int D> __device__ __forceinline__ float row_dot(const bf16 *s, int r, const float *v, int c)
{
	const int LD = D + 8, Q = D / 4;
	float a = 0.0f;
#pragma unroll
	for (int d = 0; d < Q; d++)
		a = fmaf(__bfloat162float(s[r * LD + c * Q + d]), __ldg(v + c * Q + d), a);
	a += __shfl_xor_sync(0xffffffffu, a, 1);
	return a + __shfl_xor_sync(0xffffffffu, a, 2);
}

/*
 * The K and V biases (bk, bv: the head's D columns) the forward's streamed
 * tiles leave out, applied to one group of 16 rows (q: their Q rows in
 * shared memory, biased; o, st: their output and softmax state):
 *   each score q . (k + bk) is q . k + q . bk, the same term for a whole
 *   row, which the softmax cancels; only the row's log-sum-exp moves, so
 *   the running max (log2 units of scaled scores) gains (q . bk) sl2;
 *   P (V + 1 bv) is P V + bv since the probabilities sum to one, so the
 *   unnormalized output gains l bv.
 * So the K and V tiles go to the tensor cores as the GEMM wrote them.
 */
template <int D>
__device__ __forceinline__ void fwd_bias_rows(float (*o)[4], flash_rows *st, const bf16 *q, const float *bk,
					      const float *bv, int g, int c, float sl2)
{
	st->ma += row_dot<D>(q, g, bk, c) * sl2;
	st->mb += row_dot<D>(q, g + 8, bk, c) * sl2;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		float v0 = __ldg(bv + 8 * n + 2 * c), v1 = __ldg(bv + 8 * n + 2 * c + 1);
		o[n][0] += st->la * v0;
		o[n][1] += st->la * v1;
		o[n][2] += st->lb * v0;
		o[n][3] += st->lb * v1;
	}
}

/* ---- forward ------------------------------------------------------------------------ */

/*
 * A block owns 128 queries (F16_QROWS): each warp 32 rows, two groups of
 * 16 that share every K and V fragment it loads.  Tp need not be a multiple
 * of 128: the second half of the last block's Q is then not loaded, and its
 * warps, whose rows are all at or after T, do nothing.  A tile wholly
 * before the warp's first row and inside T is taken without the mask.
 */
template <int D, typename OT>
__global__ void __launch_bounds__(F16_NT, 2) flash16_fwd_kernel(OT *out, float *lse, const bf16 *qkv16,
								 const float *bias, int T, int Tp, int H, int nh,
								 float scale)
{
	extern __shared__ __align__(16) unsigned char smraw[];
	const int LD = D + 8, TS = F16_TILE * LD;
	bf16 *Qs = (bf16 *)smraw, *KV = Qs + 2 * TS; /* KV: buffer i holds K at KV + 2i TS, V after it */
	const int nqb = (Tp + F16_QROWS - 1) / F16_QROWS;
	const int qb = nqb - 1 - (int)blockIdx.x; /* the longest rows first */
	const int h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int q0 = qb * F16_QROWS, wfirst = q0 + w * 32, wlast = wfirst + 31;
	const int nkt = min(Tp / F16_TILE, (q0 + F16_QROWS - 1) / F16_TILE + 1); /* key tiles up to the diagonal */
	const float sl2 = scale * F16_LOG2E;
	const int64_t ld = 3 * (int64_t)H;
	const bf16 *qg = qkv16 + base * ld + h * D, *kg = qg + H, *vg = qg + 2 * H;
	const bool two = q0 + F16_TILE < Tp; /* the block's second 64 queries start before T */
	tile_async<D>(Qs, qg + q0 * ld, ld, T - q0);
	if (two)
		tile_async<D>(Qs + TS, qg + (q0 + F16_TILE) * ld, ld, T - q0 - F16_TILE);
	flash_cp_commit();
	tile_async<D>(KV, kg, ld, T);
	tile_async<D>(KV + TS, vg, ld, T);
	flash_cp_commit();
	flash_cp_wait<1>();
	if (bias) {
		tile_bias<D>(Qs, bias + h * D);
		if (two)
			tile_bias<D>(Qs + TS, bias + h * D);
	}
	__syncthreads();
	const bool live = wfirst < T;
	uint32_t qa[2][D / 16][4];
	frag_rows<D>(qa[0], Qs + w * 32 * LD, lane);
	frag_rows<D>(qa[1], Qs + (w * 32 + 16) * LD, lane);
	float o[2][D / 8][4];
#pragma unroll
	for (int r = 0; r < 2; r++)
#pragma unroll
		for (int n = 0; n < D / 8; n++)
			o[r][n][0] = o[r][n][1] = o[r][n][2] = o[r][n][3] = 0.0f;
	flash_rows rs[2] = { flash_rows_start(), flash_rows_start() };
	const int ra0 = wfirst + g, ra1 = ra0 + 16;
	for (int kt = 0; kt < nkt; kt++) {
		const int k0 = kt * F16_TILE;
		bf16 *Ks = KV + (kt & 1) * 2 * TS, *Vs = Ks + TS;
		pair_next<D>(KV + ((kt + 1) & 1) * 2 * TS, kg + (k0 + F16_TILE) * ld, ld, vg + (k0 + F16_TILE) * ld, ld,
			     T - k0 - F16_TILE, kt + 1 < nkt);
		__syncthreads();
		if (live && k0 <= wlast) { /* else every key of the tile is after every row of the warp */
			float sc[2][F16_NS][4];
			mm16_xyt<D, 2>(sc, qa, Ks, lane);
			if (k0 + F16_TILE - 1 > wfirst || k0 + F16_TILE > T) {
				flash_softmax_step<F16_NS, D / 8, true>(sc[0], o[0], &rs[0], k0, ra0, ra0 + 8, c, T, sl2);
				flash_softmax_step<F16_NS, D / 8, true>(sc[1], o[1], &rs[1], k0, ra1, ra1 + 8, c, T, sl2);
			} else {
				flash_softmax_step<F16_NS, D / 8, false>(sc[0], o[0], &rs[0], k0, ra0, ra0 + 8, c, T, sl2);
				flash_softmax_step<F16_NS, D / 8, false>(sc[1], o[1], &rs[1], k0, ra1, ra1 + 8, c, T, sl2);
			}
			mm16_py<D, 2>(o, sc, Vs, lane);
		}
		__syncthreads(); /* the buffer is refilled by the next iteration's copy */
	}
	if (live) {
		if (bias) {
			const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
			fwd_bias_rows<D>(o[0], &rs[0], Qs + w * 32 * LD, bk, bv, g, c, sl2);
			fwd_bias_rows<D>(o[1], &rs[1], Qs + (w * 32 + 16) * LD, bk, bv, g, c, sl2);
		}
		flash_store_rows<D / 8>(out, lse, o[0], &rs[0], base, hrow, ra0, ra0 + 8, c, T, H, h);
		flash_store_rows<D / 8>(out, lse, o[1], &rs[1], base, hrow, ra1, ra1 + 8, c, T, H, h);
	}
}

/* ---- backward (Dt = dout . out from flash_dot_kernel, cuda_flash_row.cuh) ------------------- */

template <int D, typename OT>
__global__ void __launch_bounds__(F16_NT, 4) flash16_dq_kernel(OT *dqkv, const bf16 *qkv16, const bf16 *do16,
							     const float *bias, const float *lse, const float *Dt, int T,
							     int Tp, int H, int nh, float scale)
{
	extern __shared__ __align__(16) unsigned char smraw[];
	const int LD = D + 8, TS = F16_TILE * LD;
	bf16 *Qs = (bf16 *)smraw, *dOs = Qs + TS, *KV = dOs + TS;
	const int nqt = Tp / F16_TILE;
	const int qt = nqt - 1 - (int)blockIdx.x;
	const int h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int q0 = qt * F16_TILE, wfirst = q0 + w * 16, wlast = wfirst + 15;
	const int ra = wfirst + g, rb = ra + 8;
	const float sl2 = scale * F16_LOG2E;
	const int64_t ld = 3 * (int64_t)H;
	const bf16 *qg = qkv16 + base * ld + h * D, *kg = qg + H, *vg = qg + 2 * H;
	tile_async<D>(Qs, qg + q0 * ld, ld, T - q0);
	tile_async<D>(dOs, do16 + base * H + h * D + q0 * H, H, T - q0);
	flash_cp_commit();
	tile_async<D>(KV, kg, ld, T);
	tile_async<D>(KV + TS, vg, ld, T);
	flash_cp_commit();
	float la = ra < T ? lse[hrow + ra] * F16_LOG2E : 0.0f, lb = rb < T ? lse[hrow + rb] * F16_LOG2E : 0.0f;
	float da = ra < T ? Dt[hrow + ra] : 0.0f, db = rb < T ? Dt[hrow + rb] : 0.0f;
	float dq[1][D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		dq[0][n][0] = dq[0][n][1] = dq[0][n][2] = dq[0][n][3] = 0.0f;
	for (int kt = 0; kt <= qt; kt++) {
		const int k0 = kt * F16_TILE;
		bf16 *Ks = KV + (kt & 1) * 2 * TS, *Vs = Ks + TS;
		pair_next<D>(KV + ((kt + 1) & 1) * 2 * TS, kg + (k0 + F16_TILE) * ld, ld, vg + (k0 + F16_TILE) * ld, ld,
			     T - k0 - F16_TILE, kt < qt);
		if (bias && kt == 0)
			tile_bias<D>(Qs, bias + h * D);
		__syncthreads();
		if (bias && kt == 0) {
			/*
			 * The K and V tiles arrive without their biases.  A row's
			 * scores miss q . bk, the same for all its keys: its lse
			 * (la, lb) loses that much.  dP = dO (V + bv)^T misses
			 * dO . bv, also one term per row: Dt (da, db) loses it.
			 * dQ = dS (K + bk) misses (sum of the row's dS) bk, and a
			 * row of dS sums to zero (P (dP - Dt) with Dt = P . dP).
			 */
			const bf16 *qw = Qs + w * 16 * LD, *dow = dOs + w * 16 * LD;
			const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
			la -= row_dot<D>(qw, g, bk, c) * sl2;
			lb -= row_dot<D>(qw, g + 8, bk, c) * sl2;
			da -= row_dot<D>(dow, g, bv, c);
			db -= row_dot<D>(dow, g + 8, bv, c);
		}
		if (k0 <= wlast) {
			/* the warp's Q and dO rows come from shared memory for every tile (as in dK/dV) */
			float sc[1][F16_NS][4], dp[1][F16_NS][4];
			uint32_t xa[1][D / 16][4];
			frag_rows<D>(xa[0], Qs + w * 16 * LD, lane);
			mm16_xyt<D, 1>(sc, xa, Ks, lane);
			frag_rows<D>(xa[0], dOs + w * 16 * LD, lane);
			mm16_xyt<D, 1>(dp, xa, Vs, lane);
			if (k0 + F16_TILE - 1 > wfirst || k0 + F16_TILE > T || wlast >= T)
				flash_ds_rows<F16_NS, true>(sc[0], dp[0], k0, ra, rb, c, T, sl2, la, lb, da, db);
			else
				flash_ds_rows<F16_NS, false>(sc[0], dp[0], k0, ra, rb, c, T, sl2, la, lb, da, db);
			mm16_py<D, 1>(dq, sc, Ks, lane);
		}
		__syncthreads();
	}
	flash_store_dq<D / 8>(dqkv, dq[0], base, ra, rb, c, T, H, h, scale);
}

template <int D, typename OT>
__global__ void __launch_bounds__(F16_NT, 3) flash16_dkv_kernel(OT *dqkv, const bf16 *qkv16, const bf16 *do16,
							      const float *bias, const float *lse, const float *Dt,
							      int T, int Tp, int H, int nh, float scale)
{
	extern __shared__ __align__(16) unsigned char smraw[];
	const int LD = D + 8, TS = F16_TILE * LD;
	/* QD: buffer i holds Q at QD + 2i TS, dO after it; lse_s, dt_s: [2][64] */
	bf16 *Ks = (bf16 *)smraw, *Vs = Ks + TS, *QD = Vs + TS;
	float *lse_s = (float *)(QD + 4 * TS), *dt_s = lse_s + 2 * F16_TILE;
	const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3, tid = threadIdx.x;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int k0 = kt * F16_TILE, nqt = Tp / F16_TILE, wfirst = k0 + w * 16;
	const int ka = k0 + w * 16 + g, kb = ka + 8;
	const float sl2 = scale * F16_LOG2E;
	const int64_t ld = 3 * (int64_t)H;
	const bf16 *qg = qkv16 + base * ld + h * D, *dog = do16 + base * H + h * D;
	tile_async<D>(Ks, qg + H + k0 * ld, ld, T - k0);
	tile_async<D>(Vs, qg + 2 * H + k0 * ld, ld, T - k0);
	flash_cp_commit();
	tile_async<D>(QD, qg + k0 * ld, ld, T - k0);
	tile_async<D>(QD + TS, dog + k0 * H, H, T - k0);
	flash_cp_commit();
	if (tid < F16_TILE) {
		int t = k0 + tid;
		lse_s[tid] = t < T ? lse[hrow + t] * F16_LOG2E : 0.0f;
		dt_s[tid] = t < T ? Dt[hrow + t] : 0.0f;
	}
	float dk[1][D / 8][4], dv[1][D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		dk[0][n][0] = dk[0][n][1] = dk[0][n][2] = dk[0][n][3] = 0.0f;
		dv[0][n][0] = dv[0][n][1] = dv[0][n][2] = dv[0][n][3] = 0.0f;
	}
	for (int qt = kt; qt < nqt; qt++) {
		const int q0 = qt * F16_TILE, cur = (qt - kt) & 1, nxt = cur ^ 1;
		bf16 *Qs = QD + cur * 2 * TS, *dOs = Qs + TS;
		float ln = 0.0f, dn = 0.0f; /* the next tile's lse and Dt, stored after this tile's products */
		int tn = q0 + F16_TILE + tid;
		if (tid < F16_TILE && tn < T) { /* loads in flight while the products run */
			ln = lse[hrow + tn] * F16_LOG2E;
			dn = Dt[hrow + tn];
		}
		pair_next<D>(QD + nxt * 2 * TS, qg + (q0 + F16_TILE) * ld, ld, dog + (q0 + F16_TILE) * H, H,
			     T - q0 - F16_TILE, qt + 1 < nqt);
		if (bias) {
			if (qt == kt) {
				tile_bias<D>(Ks, bias + H + h * D);
				tile_bias<D>(Vs, bias + 2 * H + h * D);
			}
			tile_bias<D>(Qs, bias + h * D);
		}
		__syncthreads();
		if (q0 + F16_TILE - 1 >= wfirst) { /* else every query of the tile is before every key of the warp */
			const float *ls = lse_s + cur * F16_TILE, *ds = dt_s + cur * F16_TILE;
			/* the warp's K and V rows are read from shared memory for every tile, not kept in
			 * registers: 32 fewer registers let 3 blocks share an SM instead of 2 */
			float st[1][F16_NS][4], dpt[1][F16_NS][4];
			uint32_t xa[1][D / 16][4];
			frag_rows<D>(xa[0], Ks + w * 16 * LD, lane);
			mm16_xyt<D, 1>(st, xa, Qs, lane); /* S^T: keys x queries */
			frag_rows<D>(xa[0], Vs + w * 16 * LD, lane);
			mm16_xyt<D, 1>(dpt, xa, dOs, lane); /* dP^T */
			if (q0 < wfirst + 15 || q0 + F16_TILE > T || wfirst + 15 >= T)
				flash_ds_cols<F16_NS, true>(st[0], dpt[0], q0, ka, kb, c, T, sl2, ls, ds);
			else
				flash_ds_cols<F16_NS, false>(st[0], dpt[0], q0, ka, kb, c, T, sl2, ls, ds);
			mm16_py<D, 1>(dv, st, dOs, lane);
			mm16_py<D, 1>(dk, dpt, Qs, lane);
		}
		if (tid < F16_TILE) {
			lse_s[nxt * F16_TILE + tid] = ln;
			dt_s[nxt * F16_TILE + tid] = dn;
		}
		__syncthreads();
	}
	flash_store_dkv<D / 8>(dqkv, dk[0], dv[0], base, ka, kb, c, T, H, h, scale);
}

/* ---- launchers (cuda_flash.cu checked the arguments) ----------------------------------- */

static size_t tile_bytes(int D) { return (size_t)F16_TILE * (D + 8) * sizeof(bf16); }
static size_t fwd_smem16(int D) { return 6 * tile_bytes(D); }
static size_t bwd_smem16(int D) { return 6 * tile_bytes(D) + 4 * F16_TILE * sizeof(float); }

template <typename K> static int smem16(K kernel, size_t bytes, const char *op, const char *name)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	return e == cudaSuccess ? QE_OK : qe__cuda_err(e, op, name);
}

/*
 * The bf16 rows the kernels read: x itself when it is bf16, else a bf16 copy
 * of its n values (rows of cols, plus bias when not NULL) in scratch at
 * *dst (advanced past it).
 */
static int bf16_rows(qe_stream *s, const void *x, qe_dtype dt, const float *bias, int64_t n, int64_t cols,
		     unsigned char **dst, const bf16 **rows, const char *op)
{
	if (dt == QE_BF16) {
		*rows = (const bf16 *)x;
		return QE_OK;
	}
	bf16 *c = (bf16 *)*dst;
	int64_t n8 = n / 8;
	bf16_copy_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, s->cs>>>(c, (const float *)x, bias, n8, cols);
	*dst += qe__cuda_align256((size_t)n * sizeof(bf16));
	*rows = c;
	return qe__cuda_launched(op, "bf16_copy_kernel");
}

/* scratch bytes for the bf16 copies of n values of type dt (none when they are bf16) */
static size_t copy_bytes(qe_dtype dt, int64_t n) { return dt == QE_BF16 ? 0 : qe__cuda_align256((size_t)n * 2); }

template <int D, typename OT>
static int fwd16(qe_stream *s, OT *out, float *lse, const void *qkv, const float *qkv_bias, int64_t B, int T, int H,
		 int nh, qe_dtype dt)
{
	const char *op = "attn_flash_fwd";
	int Tp = (T + F16_TILE - 1) / F16_TILE * F16_TILE, rc;
	int64_t n = 3 * B * T * H;
	unsigned char *scr = NULL;
	const bf16 *qkv16 = NULL;
	if (dt != QE_BF16 && (rc = qe__cuda_scratch(s, copy_bytes(dt, n), op, (void **)&scr)))
		return rc;
	if ((rc = bf16_rows(s, qkv, dt, qkv_bias, n, 3 * H, &scr, &qkv16, op)))
		return rc;
	const float *in_tile_bias = dt == QE_BF16 ? qkv_bias : NULL; /* else the copy added it */
	if constexpr (D >= 64) { /* Hopper's warp-group MMA (cuda_flash_wg_fwd.cu) */
		(void)Tp;
		return qe__cuda_flashwg_fwd(s, out, lse, qkv16, in_tile_bias, B, T, H, nh, dt);
	} else {
		if ((rc = smem16(flash16_fwd_kernel<D, OT>, fwd_smem16(D), op,
				 "cudaFuncSetAttribute(flash16_fwd_kernel)")))
			return rc;
		dim3 grid((unsigned)((Tp + F16_QROWS - 1) / F16_QROWS), (unsigned)nh, (unsigned)B);
		flash16_fwd_kernel<D, OT><<<grid, F16_NT, fwd_smem16(D), s->cs>>>(out, lse, qkv16, in_tile_bias, T, Tp,
										   H, nh, 1.0f / sqrtf((float)D));
		return qe__cuda_launched(op, "flash16_fwd_kernel");
	}
}

template <int D, typename OT>
static int bwd16(qe_stream *s, OT *dqkv, const void *dout, const void *qkv, const float *qkv_bias, const OT *out,
		 const float *lse, int64_t B, int T, int H, int nh, qe_dtype dt)
{
	const char *op = "attn_flash_bwd";
	int Tp = (T + F16_TILE - 1) / F16_TILE * F16_TILE, rc;
	int64_t rows = B * nh * T;
	size_t dt_bytes = qe__cuda_align256((size_t)rows * sizeof(float));
	unsigned char *scr = NULL;
	const bf16 *qkv16 = NULL, *do16 = NULL;
	if ((rc = qe__cuda_scratch(s, dt_bytes + copy_bytes(dt, 3 * B * T * H) + copy_bytes(dt, B * T * H), op,
				   (void **)&scr)))
		return rc;
	float *Dt = (float *)scr;
	scr += dt_bytes;
	if ((rc = bf16_rows(s, qkv, dt, qkv_bias, 3 * B * T * H, 3 * H, &scr, &qkv16, op)) ||
	    (rc = bf16_rows(s, dout, dt, NULL, B * T * H, H, &scr, &do16, op)))
		return rc;
	const float *in_tile_bias = dt == QE_BF16 ? qkv_bias : NULL; /* else the copy added it */
	unsigned nb = (unsigned)((rows * (D / 4) + 255) / 256);
	flash_dot_kernel<D, bf16, OT><<<nb, 256, 0, s->cs>>>(Dt, do16, out, rows, T, H, nh);
	if ((rc = qe__cuda_launched(op, "flash_dot_kernel")))
		return rc;
	if constexpr (D >= 64) { /* Hopper's warp-group MMA (cuda_flash_wg_bwd.cu) */
		(void)Tp;
		return qe__cuda_flashwg_bwd(s, dqkv, qkv16, do16, in_tile_bias, lse, Dt, B, T, H, nh, dt);
	} else {
		if ((rc = smem16(flash16_dq_kernel<D, OT>, bwd_smem16(D), op, "cudaFuncSetAttribute(flash16_dq_kernel)")) ||
		    (rc = smem16(flash16_dkv_kernel<D, OT>, bwd_smem16(D), op,
				 "cudaFuncSetAttribute(flash16_dkv_kernel)")))
			return rc;
		dim3 grid((unsigned)(Tp / F16_TILE), (unsigned)nh, (unsigned)B);
		float scale = 1.0f / sqrtf((float)D);
		flash16_dq_kernel<D, OT><<<grid, F16_NT, bwd_smem16(D), s->cs>>>(dqkv, qkv16, do16, in_tile_bias, lse, Dt,
										  T, Tp, H, nh, scale);
		if ((rc = qe__cuda_launched(op, "flash16_dq_kernel")))
			return rc;
		flash16_dkv_kernel<D, OT><<<grid, F16_NT, bwd_smem16(D), s->cs>>>(dqkv, qkv16, do16, in_tile_bias, lse,
										   Dt, T, Tp, H, nh, scale);
		return qe__cuda_launched(op, "flash16_dkv_kernel");
	}
}

/* the forward for head dimension D, its output of dt */
template <int D>
static int fwd16_dt(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias, int64_t B, int T,
		    int H, int nh, qe_dtype dt)
{
	if (dt == QE_BF16)
		return fwd16<D, bf16>(s, (bf16 *)out, lse, qkv, qkv_bias, B, T, H, nh, dt);
	return fwd16<D, float>(s, (float *)out, lse, qkv, qkv_bias, B, T, H, nh, dt);
}

/* the backward for head dimension D, out and dqkv of dt */
template <int D>
static int bwd16_dt(qe_stream *s, void *dqkv, const void *dout, const void *qkv, const float *qkv_bias,
		    const void *out, const float *lse, int64_t B, int T, int H, int nh, qe_dtype dt)
{
	if (dt == QE_BF16)
		return bwd16<D, bf16>(s, (bf16 *)dqkv, dout, qkv, qkv_bias, (const bf16 *)out, lse, B, T, H, nh, dt);
	return bwd16<D, float>(s, (float *)dqkv, dout, qkv, qkv_bias, (const float *)out, lse, B, T, H, nh, dt);
}

extern "C" int qe__cuda_flash16_fwd(qe_stream *s, void *out, float *lse, const void *qkv, const float *qkv_bias,
				    int64_t B, int T, int H, int nh, qe_dtype dt)
{
	switch (H / nh) {
	case 16:
		return fwd16_dt<16>(s, out, lse, qkv, qkv_bias, B, T, H, nh, dt);
	case 32:
		return fwd16_dt<32>(s, out, lse, qkv, qkv_bias, B, T, H, nh, dt);
	case 64:
		return fwd16_dt<64>(s, out, lse, qkv, qkv_bias, B, T, H, nh, dt);
	case 128:
		return fwd16_dt<128>(s, out, lse, qkv, qkv_bias, B, T, H, nh, dt);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_fwd: head dimension %d", H / nh);
	}
}

extern "C" int qe__cuda_flash16_bwd(qe_stream *s, void *dqkv, const void *dout, const void *qkv,
				    const float *qkv_bias, const void *out, const float *lse, int64_t B, int T, int H,
				    int nh, qe_dtype dt)
{
	switch (H / nh) {
	case 16:
		return bwd16_dt<16>(s, dqkv, dout, qkv, qkv_bias, out, lse, B, T, H, nh, dt);
	case 32:
		return bwd16_dt<32>(s, dqkv, dout, qkv, qkv_bias, out, lse, B, T, H, nh, dt);
	case 64:
		return bwd16_dt<64>(s, dqkv, dout, qkv, qkv_bias, out, lse, B, T, H, nh, dt);
	case 128:
		return bwd16_dt<128>(s, dqkv, dout, qkv, qkv_bias, out, lse, B, T, H, nh, dt);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_bwd: head dimension %d", H / nh);
	}
}
