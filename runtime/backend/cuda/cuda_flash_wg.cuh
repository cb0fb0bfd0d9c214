/*
 * cuda_flash_wg.cuh - what the flash attention on Hopper's warp-group MMA
 * (wgmma.mma_async, sm_90a), bf16 operands and f32 accumulation, for head
 * dimensions 64 and 128, shares: the wgmma wrappers and descriptors, the
 * swizzled tiles, the mbarriers, the TMA copies and their ring.  The
 * kernels: cuda_flash_wg_fwd.cu (the forward), cuda_flash_wg_bwd.cu (dQ
 * and dK/dV); cuda_flash_wg_map.cu encodes the tensor maps they read
 * through.  Same contract as flash16's kernels (cuda_flash16.cu, which
 * converts f32 operands and calls these for those head dimensions):
 * qkv bf16 [B*T, 3H] where the QKV GEMM wrote it (with or without the QKV
 * bias, which is added here as flash16 does), dout [B*T, H], out and dqkv
 * in f32 or bf16, lse [B, nh, T] f32; causal; no atomics and a fixed order
 * for every sum, so two runs give the same bytes.
 *
 * Every kernel is warp-specialized: a work item is 64 x NC rows (queries, or
 * keys for dK/dV), one consumer warp group per 64, and a producer warp.  The
 * producer's first lane copies the item's own rows once and then the other
 * side's tiles through the tensor memory accelerator (TMA: 3-D maps of the
 * strided qkv and of dout, [B][T][C], rows outside 0..T-1 arriving as
 * zeros, so nothing is copied in front of attention) into a ring of stages;
 * each stage has a "full" mbarrier (the copies' bytes landed) and an
 * "empty" one (every consumer warp is done with it).  The consumers issue no
 * loads and meet no block-wide barrier after the setup; a group whose rows
 * need none of a tile (past its diagonal) waits for it and releases it.
 * Query blocks are aligned to T's end (wg_block_row0).
 *
 * The forward and dQ are persistent: a block per SM walks the work items
 * (query block, head, sequence) head by head (wg_item), its own rows
 * double-buffered and the ring running on from item to item; dK/dV runs a
 * block per key block.
 *
 * The forward, per key tile of BN, each consumer group:
 *   S = Q K^T    wgmma m64nBNk16, D/16 of them, Q and K read from shared
 *                memory through descriptors (both K-major);
 *   the online softmax of its rows (flash_softmax_probs, cuda_flash_row.cuh:
 *                the accumulator layout of wgmma is that of mma.sync, warp w
 *                of the group holding rows 16w..16w+15);
 *   O += P V     wgmma m64nDk16, BN/16 of them, P from registers (the
 *                accumulators of two adjacent 8-column slices are the A
 *                fragment of their 16 columns, packed to bf16 nearest even)
 *                and V read N-major (transposed) from shared memory.
 *
 * Shared tiles use the 128-byte swizzle wgmma's descriptors name: a tile of
 * R rows and D columns is D/64 panels of R rows of 128 bytes (64 columns);
 * in a panel, row r's 16-byte chunk j lies at r*128 + ((j ^ (r % 8)) * 16),
 * so the eight rows of a core matrix fall in eight different bank groups.
 * Panels start on 1024-byte boundaries.  A K-major operand's k-step of 16
 * columns is the panel's start plus 32 bytes per step (the hardware applies
 * the XOR to the address it forms); an N-major operand's k-step of 16 rows
 * is 2048 bytes further.  Descriptor strides: 1024 bytes from one group of 8
 * rows to the next (SBO); for V, one panel to the next (LBO) when D is 128.
 */
#ifndef QE_CUDA_FLASH_WG_CUH
#define QE_CUDA_FLASH_WG_CUH

#include <cuda_bf16.h>
#include <cuda.h>
#include <math.h>
#include <stdint.h>

#include "runtime/backend/cuda/cuda_flash_row.cuh"
#include "runtime/backend/cuda/cuda_int.h"


typedef __nv_bfloat16 bf16;


/* ---- wgmma and its fences ------------------------------------------------------------ */

/* registers the next wgmma reads or writes were touched by ordinary instructions */
__device__ __forceinline__ void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

/* wait until at most N committed groups of the warp group's wgmma are still running */
template <int N> __device__ __forceinline__ void wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* wait for every committed wgmma of the warp group */
__device__ __forceinline__ void wg_wait_all(void) { wg_wait<0>(); }

/*
 * After wg_wait_all, the accumulators (n slices) become ordinary registers
 * again: the empty asm "writes" them, so the compiler cannot move a read of
 * them above the wait.
 */
template <int NS> __device__ __forceinline__ void wg_settle(float (*d)[4])
{
#pragma unroll
	for (int n = 0; n < NS; n++)
		asm volatile("" : "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])::"memory");
}

/*
 * A shared-memory matrix descriptor with the 128-byte swizzle: start
 * address, leading (lbo) and stride (sbo) byte offsets, each in 16-byte units.
 */
__device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
	return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
	       (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}

/* d = A B (acc 0) or d += A B (acc 1), m64n64k16: A and B in shared memory, both K-major */
__device__ __forceinline__ void wg_ss64(float (*d)[4], uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
		       "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
		       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
		       "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
		       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
		       "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
		       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
		       "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
		     : "l"(da), "l"(db), "r"(acc));
}

/* d += A B, m64n64k16: A the warp group's fragments in registers, B N-major in shared memory */
__device__ __forceinline__ void wg_rs64(float (*d)[4], const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
		     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
		       "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
		       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
		       "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
		       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
		       "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
		       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
		       "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* d = A B (acc 0) or d += A B (acc 1), m64n128k16: A and B in shared memory, both K-major */
__device__ __forceinline__ void wg_ss128(float (*d)[4], uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
		       "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
		       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
		       "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
		       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
		       "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
		       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
		       "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
		       "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
		       "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
		       "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
		       "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
		       "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
		       "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
		       "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
		       "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
		     : "l"(da), "l"(db), "r"(acc));
}

/* d += A B, m64n128k16: A the warp group's fragments in registers, B N-major in shared memory */
__device__ __forceinline__ void wg_rs128(float (*d)[4], const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
		     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
		       "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
		       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
		       "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
		       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
		       "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
		       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
		       "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
		       "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
		       "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
		       "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
		       "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
		       "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
		       "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
		       "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
		       "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}


/* d = A B (acc 0) or d += A B over the K-major operands: m64nNk16 */
template <int N> __device__ __forceinline__ void wg_ss(float (*d)[4], uint64_t da, uint64_t db, int acc);
template <> __device__ __forceinline__ void wg_ss<64>(float (*d)[4], uint64_t da, uint64_t db, int acc)
{
	wg_ss64(d, da, db, acc);
}
template <> __device__ __forceinline__ void wg_ss<128>(float (*d)[4], uint64_t da, uint64_t db, int acc)
{
	wg_ss128(d, da, db, acc);
}

/* d += A B, A in registers, B N-major: m64nNk16 */
template <int N> __device__ __forceinline__ void wg_rs(float (*d)[4], const uint32_t *a, uint64_t db);
template <> __device__ __forceinline__ void wg_rs<64>(float (*d)[4], const uint32_t *a, uint64_t db)
{
	wg_rs64(d, a, db);
}
template <> __device__ __forceinline__ void wg_rs<128>(float (*d)[4], const uint32_t *a, uint64_t db)
{
	wg_rs128(d, a, db);
}


/* an accumulator tile of N columns as the A fragments of its N/16 steps of 16 columns, bf16 nearest even */
template <int N> __device__ __forceinline__ void wg_frags(uint32_t (*a)[4], const float (*x)[4])
{
#pragma unroll
	for (int k = 0; k < N / 16; k++) {
		a[k][0] = flash_pack2(x[2 * k][0], x[2 * k][1]);
		a[k][1] = flash_pack2(x[2 * k][2], x[2 * k][3]);
		a[k][2] = flash_pack2(x[2 * k + 1][0], x[2 * k + 1][1]);
		a[k][3] = flash_pack2(x[2 * k + 1][2], x[2 * k + 1][3]);
	}
}

/* ---- swizzled tiles ------------------------------------------------------------------ */

/* byte offset of row r's 16-byte chunk cc (of D/8) in a swizzled tile of R rows */
template <int R> __device__ __forceinline__ uint32_t sw_chunk(int r, int cc)
{
	return (uint32_t)((cc >> 3) * R * 128 + r * 128 + (((cc & 7) ^ (r & 7)) << 4));
}

/* row r, column col of a swizzled tile of R rows */
template <int R> __device__ __forceinline__ float sw_at(const unsigned char *s, int r, int col)
{
	return __bfloat162float(*(const bf16 *)(s + sw_chunk<R>(r, col >> 3) + (col & 7) * 2));
}


/*
 * The bias b of the head's D columns added in f32 to rows r0..r0+63 of a
 * swizzled tile of R rows, rounded to bf16 again, by the 128 threads of one
 * warp group (t its thread).
 */
template <int R, int D> __device__ __forceinline__ void wg_rows_bias(unsigned char *s, const float *b, int r0, int t)
{
	const int C = D / 8;
#pragma unroll
	for (int i = t; i < 64 * C; i += 128) {
		int r = r0 + i / C, cc = i % C;
		uint4 *p = (uint4 *)(s + sw_chunk<R>(r, cc));
		uint4 v = *p;
		uint32_t *w = (uint32_t *)&v;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[e]);
			__nv_bfloat162 o = __floats2bfloat162_rn(f.x + __ldg(b + cc * 8 + 2 * e), f.y + __ldg(b + cc * 8 + 2 * e + 1));
			w[e] = *(uint32_t *)&o;
		}
		*p = v;
	}
}

/* shared-memory writes by ordinary instructions made visible to wgmma (the async proxy) */
__device__ __forceinline__ void wg_proxy_fence(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/*
 * Row r of a swizzled tile of R rows dotted with the D floats at v, in f32:
 * lane c of the row's quad takes columns c D/4 .. (c+1) D/4 - 1 in order,
 * then the quad's butterfly (the order flash16's row_dot uses).
 */
template <int D, int R>
__device__ __forceinline__ float wg_row_dot(const unsigned char *q, int r, const float *v, int c)
{
	const int Q = D / 4;
	float a = 0.0f;
#pragma unroll
	for (int d = 0; d < Q; d++)
		a = fmaf(sw_at<R>(q, r, c * Q + d), __ldg(v + c * Q + d), a);
	a += __shfl_xor_sync(0xffffffffu, a, 1);
	return a + __shfl_xor_sync(0xffffffffu, a, 2);
}

/* ---- mbarriers and the tensor memory accelerator (the producers' copies) ------------ */

__device__ __forceinline__ uint32_t wg_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mb_init(uint64_t *b, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(wg_smem(b)), "r"(count) : "memory");
}

/* the producer's arrival, announcing the bytes its copies will complete on b */
__device__ __forceinline__ void mb_expect(uint64_t *b, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(wg_smem(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mb_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(wg_smem(b)) : "memory");
}

/* wait until the phase of b with this parity has completed */
__device__ __forceinline__ void mb_wait(uint64_t *b, uint32_t parity)
{
	uint32_t done;
	do {
		asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(done)
			     : "r"(wg_smem(b)), "r"(parity)
			     : "memory");
	} while (!done);
}

/*
 * One box of the qkv map (64 columns from col, 64 rows from row, of
 * sequence seq; rows at or after T arrive as zeros) into the 8 KiB at s,
 * 128-byte swizzled as the descriptors expect, completing on b.
 */
__device__ __forceinline__ void tma_box(void *s, const CUtensorMap *m, int col, int row, int seq, uint64_t *b)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(wg_smem(s)),
		     "l"((uint64_t)m), "r"(col), "r"(row), "r"(seq), "r"(wg_smem(b))
		     : "memory");
}

/* R rows (from row) of D columns (from col) into a swizzled tile of R rows: D/64 panels of R/64 boxes */
template <int R, int D>
__device__ __forceinline__ void tma_tile(unsigned char *s, const CUtensorMap *m, int col, int row, int seq, uint64_t *b)
{
#pragma unroll
	for (int p = 0; p < D / 64; p++)
#pragma unroll
		for (int i = 0; i < R / 64; i++)
			tma_box(s + p * R * 128 + i * 64 * 128, m, col + 64 * p, row + 64 * i, seq, b);
}

/* the 128 threads of one warp group meet (named barrier id, 1 and up; 0 is __syncthreads) */
__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

/* ---- the ring of stages ------------------------------------------------------------- */

/*
 * The barriers of a block, set up by its producer warp's first thread
 * before the block's one __syncthreads: "own" (the block's own rows landed;
 * one arrival), and per stage "full" (full_count arrivals: the producer's
 * expect_tx, and any other producer lanes that write the stage) and "empty"
 * (one arrival from each of the nc consumer groups' four warps).
 */
__device__ __forceinline__ void wg_ring_init(uint64_t *own, uint64_t *full, uint64_t *empty, int nst, int full_count,
					     int nc)
{
	mb_init(own, 1);
	for (int i = 0; i < nst; i++) {
		mb_init(&full[i], full_count);
		mb_init(&empty[i], 4 * nc);
	}
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/*
 * A persistent block's barriers (the forward's and dQ's): its own rows in
 * two buffers, own[i] landed (one arrival) and own_empty[i] read (one
 * arrival from each consumer warp), then the ring's as wg_ring_init.
 */
__device__ __forceinline__ void wg_ring_init_own2(uint64_t *own, uint64_t *own_empty, uint64_t *full, uint64_t *empty,
						  int nst, int nc)
{
	mb_init(&own[1], 1);
	mb_init(&own_empty[0], 4 * nc);
	mb_init(&own_empty[1], 4 * nc);
	wg_ring_init(own, full, empty, nst, 1, nc);
}

/* a consumer warp's turn at the ring's uses from..to-1 without reading them: wait for each, release it */
__device__ __forceinline__ void wg_ring_pass(uint64_t *full, uint64_t *empty, int nst, int from, int to, int lane)
{
	for (int i = from; i < to; i++) {
		mb_wait(&full[i % nst], (i / nst) & 1);
		if (lane == 0)
			mb_arrive(&empty[i % nst]);
	}
}

/* the producer's wait before refilling a stage: the ring's use i may take it once use i - nst was released */
__device__ __forceinline__ void wg_ring_claim(uint64_t *empty, int nst, int i)
{
	if (i >= nst)
		mb_wait(&empty[i % nst], ((i / nst) - 1) & 1);
}

/*
 * The producer's key tiles 0..nkt-1 of R rows: K then V of head h (columns
 * H + h D and 2H + h D of the qkv map m) of sequence b, as the ring's uses
 * u0..u0+nkt-1 (a persistent block's ring goes on from one work item to the
 * next): use i into stage i % nst of KV (K at KV + 2 s TB, V TB after it),
 * each once the consumers released the use nst before it.
 */
template <int R, int D>
__device__ __forceinline__ void wg_stream_kv(unsigned char *KV, const CUtensorMap *m, int H, int h, int b, int nkt,
					     uint64_t *full, uint64_t *empty, int nst, int u0)
{
	const int TB = R * D * 2;
	for (int kt = 0; kt < nkt; kt++) {
		const int i = u0 + kt, st = i % nst;
		unsigned char *Ks = KV + st * 2 * TB;
		wg_ring_claim(empty, nst, i);
		mb_expect(&full[st], 2 * TB);
		tma_tile<R, D>(Ks, m, H + h * D, kt * R, b, &full[st]);
		tma_tile<R, D>(Ks + TB, m, 2 * H + h * D, kt * R, b, &full[st]);
	}
}

/*
 * The first row of query block x of R rows, x 0 the last rows of T (the
 * longest walk first).  The blocks are aligned to T's end, so the one that T
 * does not fill is the last x, whose rows before 0 compute nothing (the
 * copies of rows before 0 arrive as zeros, as past T): it is also the
 * shortest, so no long block runs with idle warp groups.
 */
template <int R> __device__ __forceinline__ int wg_block_row0(int T, int x)
{
	return T - (x + 1) * R;
}

/*
 * A persistent block's n-th work item: rounds of gridDim.x items, every
 * other round in reverse, so that with the items ordered head by head,
 * the longest block of each head first, a block's items alternate between
 * the long and the short end of a head (no block gets only long ones), and
 * the blocks running at once share a few heads' tiles in L2.
 */
__device__ __forceinline__ int wg_item(int n)
{
	const int g = (int)gridDim.x, i = (int)blockIdx.x;
	return n * g + ((n & 1) ? g - 1 - i : i);
}

/*
 * A map of a bf16 tensor [B][T][C] (qkv: C = 3H; dout: C = H) for the
 * kernels' copies: boxes of 64 rows by 64 columns, 128-byte swizzle, rows
 * past T read as zeros (cuda_flash_wg_map.cu).  Returns 0, or an error
 * naming op and the tensor (what).
 */
int qe__flashwg_rows_map(CUtensorMap *m, const bf16 *x, int64_t B, int T, int C, const char *op, const char *what);

/*
 * A persistent kernel's launch over query blocks of `rows` (the forward and
 * dQ): *nitems = blocks x heads x sequences, *grid one block per SM of the
 * current device or per item, whichever is fewer (cuda_flash_wg_map.cu).
 * Returns 0, or an error naming op.
 */
int qe__flashwg_grid(const char *op, int64_t B, int T, int nh, int rows, int *nitems, dim3 *grid);

#endif
