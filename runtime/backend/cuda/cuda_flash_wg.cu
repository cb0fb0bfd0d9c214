/*
 * cuda_flash_wg.cu - the flash attention on Hopper's warp-group MMA
 * (wgmma.mma_async, sm_90a), bf16 operands and f32 accumulation, for head
 * dimensions 64 and 128: the forward, then dQ and dK/dV (their own
 * comments).  Same contract as flash16's kernels (cuda_flash16.cu, which
 * converts f32 operands and calls this file for those head dimensions):
 * qkv bf16 [B*T, 3H] where the QKV GEMM wrote it (with or without the QKV
 * bias, which is added here as flash16 does), dout [B*T, H], out and dqkv
 * in f32 or bf16, lse [B, nh, T] f32; causal; no atomics and a fixed order
 * for every sum, so two runs give the same bytes.
 *
 * The forward and dQ are warp-specialized: a block is NC consumer warp
 * groups of 64 query rows and one producer warp.  The producer's first lane
 * copies the block's own rows once and then the key tiles through the
 * tensor memory accelerator (TMA: 3-D maps of the strided qkv and of dout,
 * [B][T][C], rows past T arriving as zeros, so nothing is copied in front
 * of attention) into a ring of stages; each stage has a "full" mbarrier
 * (the copies' bytes landed) and an "empty" one (every consumer warp is
 * done with it).  The consumers issue no loads and meet no block-wide
 * barrier after the setup.  dK/dV is still one warp group a block that
 * copies its tiles with cp.async (its comment).
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
#include <cuda_bf16.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <pthread.h>
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
 * Start copying R rows of one head's D columns (row r at g + r ld) into the
 * swizzled tile s; rows at or after nvalid are zeros.  Thread i of NT copies
 * the chunks i, i + NT, ...
 */
template <int R, int D, int NT>
__device__ __forceinline__ void wg_tile_async(unsigned char *s, const bf16 *g, int64_t ld, int nvalid)
{
	const int C = D / 8;
#pragma unroll
	for (int i = threadIdx.x; i < R * C; i += NT) {
		int r = i / C, cc = i - r * C;
		bool ok = r < nvalid;
		flash_cp16(s + sw_chunk<R>(r, cc), ok ? g + r * ld + cc * 8 : g, ok);
	}
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

/* shared-memory writes by ordinary instructions and cp.async made visible to wgmma (the async proxy) */
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

/* ---- mbarriers and the tensor memory accelerator (the forward's producer) ------------ */

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

/* ---- forward ------------------------------------------------------------------------- */

/*
 * The forward's configuration per head dimension: key tile BN, consumer
 * warp groups NC (64 queries each; three, 12 warps and the producer in 128
 * registers a thread, one block an SM), pipeline stages NST (K and V of one
 * tile a stage).  Session 11 timed the others on an H100
 * (bench/results/session11-1xH100): two groups at 168 registers with S of
 * tile j issued before P V of tile j - 1, three such groups at tiles of 64,
 * and three stages were all slower.
 */
template <int BN_, int NC_, int NST_> struct wg_fwd_of {
	static const int BN = BN_, NC = NC_, NST = NST_;
	static const int QR = 64 * NC, NT = 128 * NC + 32; /* the producer is the last warp */
	/* shared bytes: Q, the stages, their barriers, room to align to 1024 */
	static size_t smem(int D) { return (size_t)(QR + 2 * NST * BN) * D * 2 + 1024 + 8 * (1 + 2 * NST); }
};
template <int D> struct wg_fwd_cfg;
template <> struct wg_fwd_cfg<64> : wg_fwd_of<128, 3, 2> {};
template <> struct wg_fwd_cfg<128> : wg_fwd_of<64, 3, 2> {};

/*
 * S = Q K^T of one key tile for the warp group's rows: D/16 wgmma
 * m64nBNk16 from shared memory (Qg: the group's rows in Q's first panel),
 * committed as one group.
 */
template <int D, int BN, int QR>
__device__ __forceinline__ void wg_fwd_s(float (*sc)[4], const unsigned char *Qg, const unsigned char *Ks)
{
#pragma unroll
	for (int k = 0; k < D / 16; k++) {
		const int pan = k >> 2, off = (k & 3) * 32;
		wg_ss<BN>(sc, wg_desc(Qg + pan * QR * 128 + off, 16, 1024), wg_desc(Ks + pan * BN * 128 + off, 16, 1024),
			  k > 0);
	}
	wg_commit();
}

/* O += P V: BN/16 wgmma m64nDk16, P from registers, V N-major; committed as one group */
template <int D, int BN> __device__ __forceinline__ void wg_fwd_pv(float (*o)[4], uint32_t (*pa)[4], const unsigned char *Vs)
{
#pragma unroll
	for (int k = 0; k < BN / 16; k++)
		wg_rs<D>(o, pa[k], wg_desc(Vs + k * 16 * 128, BN * 128, 1024));
	wg_commit();
}

/* the softmax of one tile, masked where the tile crosses the group's diagonal or T */
template <int NS>
__device__ __forceinline__ void wg_fwd_probs(float (*sc)[4], flash_rows *rs, int k0, int gfirst, int ra, int rb, int c,
					     int T, float sl2, float *aa, float *ab)
{
	if (k0 + 8 * NS - 1 > gfirst || k0 + 8 * NS > T)
		flash_softmax_probs<NS, true>(sc, rs, k0, ra, rb, c, T, sl2, aa, ab);
	else
		flash_softmax_probs<NS, false>(sc, rs, k0, ra, rb, c, T, sl2, aa, ab);
}

/*
 * Grid (query blocks, heads, sequences), the longest rows first; a block is
 * NC consumer warp groups of 64 queries and one producer warp.  The
 * producer's first lane copies Q once and then K and V tile by tile
 * through the tensor memory accelerator (tm: the strided qkv as a map of
 * [B][T][3H]) into NST stages, each with a "full" barrier (the copies'
 * bytes landed) and an "empty" one (every consumer warp is done with it);
 * the producer's other lanes leave.  No block-wide barrier follows the
 * setup.
 *
 * A consumer walks the block's key tiles up to the diagonal; tiles whose
 * keys all come after its last row it only waits for and releases.  Per
 * tile, S = Q K^T, the online softmax (flash_softmax_probs), O += P V with
 * P from registers.  The K and V biases are applied to the rows at the
 * end, as flash16 does: q . bk moves only the row's lse, and P (V + bv) =
 * P V + l bv; Q's bias is added in place when Q lands.
 */
template <int D, typename OT>
__global__ void __launch_bounds__(wg_fwd_cfg<D>::NT, 1)
	flashwg_fwd_kernel(const __grid_constant__ CUtensorMap tm, OT *out, float *lse, const float *bias, int T, int H,
			   int nh, float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	typedef wg_fwd_cfg<D> F;
	const int BN = F::BN, NC = F::NC, NST = F::NST, QR = F::QR, NS = BN / 8;
	extern __shared__ unsigned char smraw[];
	unsigned char *Qs = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023);
	unsigned char *KV = Qs + QR * D * 2; /* stage i: K at KV + 2 i TB, V after it */
	const int TB = BN * D * 2;
	uint64_t *qfull = (uint64_t *)(KV + NST * 2 * TB), *full = qfull + 1, *empty = full + NST;
	const int nqb = (T + QR - 1) / QR;
	const int qb = nqb - 1 - (int)blockIdx.x;
	const int h = blockIdx.y, b = blockIdx.z;
	const int wg = threadIdx.x >> 7;
	const int q0 = qb * QR;
	const int nkt = min((T + BN - 1) / BN, (q0 + QR - 1) / BN + 1); /* key tiles up to the diagonal */
	if (threadIdx.x == 128 * NC) {
		mb_init(qfull, 1);
		for (int i = 0; i < NST; i++) {
			mb_init(&full[i], 1);
			mb_init(&empty[i], 4 * NC);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC) {
			mb_expect(qfull, QR * D * 2);
			tma_tile<QR, D>(Qs, &tm, h * D, q0, b, qfull);
			for (int kt = 0; kt < nkt; kt++) {
				const int st = kt % NST;
				if (kt >= NST)
					mb_wait(&empty[st], ((kt / NST) - 1) & 1);
				unsigned char *Ks = KV + st * 2 * TB;
				mb_expect(&full[st], 2 * TB);
				tma_tile<BN, D>(Ks, &tm, H + h * D, kt * BN, b, &full[st]);
				tma_tile<BN, D>(Ks + TB, &tm, 2 * H + h * D, kt * BN, b, &full[st]);
			}
		}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int gfirst = q0 + cw * 64, glast = gfirst + 63;
	const bool live = gfirst < T;
	const int nwt = live ? min(nkt, glast / BN + 1) : 0; /* the tiles this group computes */
	const float sl2 = scale * FLASH_LOG2E;
	mb_wait(qfull, 0);
	if (bias) {
		wg_rows_bias<QR, D>(Qs, bias + h * D, cw * 64, t);
		wg_proxy_fence();
		wg_bar(1 + cw);
	}
	float o[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	flash_rows rs = flash_rows_start();
	const int ra = gfirst + 16 * w + g, rb = ra + 8;
	const unsigned char *Qg = Qs + cw * 64 * 128; /* the group's 64 rows in each panel */
	for (int kt = 0; kt < nwt; kt++) {
		const int st = kt % NST;
		const unsigned char *Ks = KV + st * 2 * TB;
		float sc[NS][4], aa, ab;
		mb_wait(&full[st], (kt / NST) & 1);
		wg_fence();
		wg_fwd_s<D, BN, QR>(sc, Qg, Ks);
		wg_wait_all();
		wg_settle<NS>(sc);
		wg_fwd_probs<NS>(sc, &rs, kt * BN, gfirst, ra, rb, c, T, sl2, &aa, &ab);
		flash_rescale<D / 8>(o, aa, ab);
		uint32_t pa[BN / 16][4];
		wg_frags<BN>(pa, sc);
		wg_fence();
		wg_fwd_pv<D, BN>(o, pa, Ks + TB);
		wg_wait_all();
		wg_settle<D / 8>(o);
		if (lane == 0)
			mb_arrive(&empty[st]);
	}
	for (int kt = nwt; kt < nkt; kt++) { /* tiles after the group's rows: released in turn */
		mb_wait(&full[kt % NST], (kt / NST) & 1);
		if (lane == 0)
			mb_arrive(&empty[kt % NST]);
	}
	if (live) {
		if (bias) {
			const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
			rs.ma += wg_row_dot<D, QR>(Qs, ra - q0, bk, c) * sl2;
			rs.mb += wg_row_dot<D, QR>(Qs, rb - q0, bk, c) * sl2;
#pragma unroll
			for (int n = 0; n < D / 8; n++) {
				float v0 = __ldg(bv + 8 * n + 2 * c), v1 = __ldg(bv + 8 * n + 2 * c + 1);
				o[n][0] += rs.la * v0;
				o[n][1] += rs.la * v1;
				o[n][2] += rs.lb * v0;
				o[n][3] += rs.lb * v1;
			}
		}
		flash_store_rows<D / 8>(out, lse, o, &rs, base, hrow, ra, rb, c, T, H, h);
	}
#endif
}

/* ---- backward (Dt = dout . out from flash_dot_kernel, cuda_flash_row.cuh) ------------------- */

/*
 * The backward's warp groups own 64 rows each and walk the other side in
 * tiles of 64.  Their accumulators take about twice the forward's
 * registers: dQ's blocks (below) have three groups at head dimension 64 and
 * two at 128; dK/dV's are one group each (WG_BT threads), several to an SM.
 */
#define WG_BT 128 /* threads a backward block */
#define WG_BR 64  /* rows a backward block owns, and rows of the tiles it walks */

/* dK, dV's shared bytes: four tiles of 64 rows of D (its own two and one pair of the other
 * side's) and a second pair to fill, lse and Dt of two tiles, room to align */
static size_t wg_dkv_smem(int D) { return (size_t)6 * WG_BR * D * 2 + 4 * WG_BR * sizeof(float) + 1024; }

/*
 * acc = X Y^T over the D columns of 64 rows of a swizzled tile of RX rows
 * (x: the warp group's rows in its first panel) and a swizzled 64-row tile
 */
template <int D, int RX = WG_BR>
__device__ __forceinline__ void wg_xyt(float (*acc)[4], const unsigned char *x, const unsigned char *y)
{
#pragma unroll
	for (int k = 0; k < D / 16; k++) {
		const int off = (k & 3) * 32, pan = k >> 2;
		wg_ss<WG_BR>(acc, wg_desc(x + pan * RX * 128 + off, 16, 1024), wg_desc(y + pan * WG_BR * 128 + off, 16, 1024),
			     k > 0);
	}
}

/* acc += P Y: P the warp group's 64 x 64 fragments in registers, Y a swizzled 64-row tile read N-major */
template <int D> __device__ __forceinline__ void wg_py(float (*acc)[4], const uint32_t (*p)[4], const unsigned char *y)
{
#pragma unroll
	for (int k = 0; k < WG_BR / 16; k++)
		wg_rs<D>(acc, p[k], wg_desc(y + k * 16 * 128, WG_BR * 128, 1024));
}

/*
 * dQ: a block owns NC x 64 queries, one consumer warp group per 64, and a
 * producer warp that copies Q and dO once and the key tiles' K and V into
 * NST mbarrier stages, as the forward's does.  A consumer walks the key
 * tiles up to its diagonal (later ones it only waits for and releases):
 * S = Q K^T and dP = dO V^T (wgmma from shared memory), dS = P (dP - Dt)
 * (flash_p_rows, flash_ds_of_p_rows), dQ += dS K (dS from registers, K
 * read N-major).  The QKV bias: Q gets it in shared memory; the streamed K
 * and V tiles do not, and their terms move the rows' lse and Dt instead, as
 * flash16's dQ does.
 */
/* consumer warp groups of a dQ block: three at 64 (128 registers each), two at 128 (168) */
template <int D> struct wg_dq_cfg {
	static const int NC = D == 64 ? 3 : 2, NST = 2, QR = 64 * NC, NT = 128 * NC + 32;
	/* shared bytes: Q and dO of the block's rows, the stages, their barriers, room to align */
	static size_t smem(void) { return (size_t)(2 * QR + 2 * NST * WG_BR) * D * 2 + 1024 + 8 * (1 + 2 * NST); }
};

template <int D, typename OT>
__global__ void __launch_bounds__(wg_dq_cfg<D>::NT, 1)
	flashwg_dq_kernel(const __grid_constant__ CUtensorMap tm, const __grid_constant__ CUtensorMap dm, OT *dqkv,
			  const float *bias, const float *lse, const float *Dt, int T, int H, int nh, float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	const int NC = wg_dq_cfg<D>::NC, NST = wg_dq_cfg<D>::NST, QR = wg_dq_cfg<D>::QR, TB = WG_BR * D * 2;
	extern __shared__ unsigned char smraw[];
	unsigned char *Qs = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023);
	unsigned char *dOs = Qs + QR * D * 2, *KV = dOs + QR * D * 2; /* stage i: K at KV + 2 i TB, V after it */
	uint64_t *qfull = (uint64_t *)(KV + NST * 2 * TB), *full = qfull + 1, *empty = full + NST;
	const int nqb = (T + QR - 1) / QR;
	const int qb = nqb - 1 - (int)blockIdx.x; /* the longest rows first */
	const int h = blockIdx.y, b = blockIdx.z, wg = threadIdx.x >> 7;
	const int q0 = qb * QR;
	const int nkt = min((T + WG_BR - 1) / WG_BR, (q0 + QR - 1) / WG_BR + 1); /* key tiles up to the diagonal */
	if (threadIdx.x == 128 * NC) {
		mb_init(qfull, 1);
		for (int i = 0; i < NST; i++) {
			mb_init(&full[i], 1);
			mb_init(&empty[i], 4 * NC);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC) {
			mb_expect(qfull, 2 * QR * D * 2);
			tma_tile<QR, D>(Qs, &tm, h * D, q0, b, qfull);
			tma_tile<QR, D>(dOs, &dm, h * D, q0, b, qfull);
			for (int kt = 0; kt < nkt; kt++) {
				const int st = kt % NST;
				if (kt >= NST)
					mb_wait(&empty[st], ((kt / NST) - 1) & 1);
				unsigned char *Ks = KV + st * 2 * TB;
				mb_expect(&full[st], 2 * TB);
				tma_tile<WG_BR, D>(Ks, &tm, H + h * D, kt * WG_BR, b, &full[st]);
				tma_tile<WG_BR, D>(Ks + TB, &tm, 2 * H + h * D, kt * WG_BR, b, &full[st]);
			}
		}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int gfirst = q0 + 64 * cw, wfirst = gfirst + 16 * w, wlast = wfirst + 15;
	const int ra = wfirst + g, rb = ra + 8;
	const int nwt = gfirst < T ? gfirst / WG_BR + 1 : 0; /* the tiles this group computes */
	const float sl2 = scale * FLASH_LOG2E;
	float la = ra < T ? lse[hrow + ra] * FLASH_LOG2E : 0.0f, lb = rb < T ? lse[hrow + rb] * FLASH_LOG2E : 0.0f;
	float da = ra < T ? Dt[hrow + ra] : 0.0f, db = rb < T ? Dt[hrow + rb] : 0.0f;
	const unsigned char *Qg = Qs + cw * 64 * 128, *dOg = dOs + cw * 64 * 128; /* the group's rows in each panel */
	mb_wait(qfull, 0);
	if (bias) {
		wg_rows_bias<QR, D>(Qs, bias + h * D, 64 * cw, t);
		wg_proxy_fence();
		wg_bar(1 + cw);
		/* q . bk moves the row's lse, dO . bv its Dt; a row of dS sums to zero, so dS bk adds nothing */
		const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
		la -= wg_row_dot<D, QR>(Qs, ra - q0, bk, c) * sl2;
		lb -= wg_row_dot<D, QR>(Qs, rb - q0, bk, c) * sl2;
		da -= wg_row_dot<D, QR>(dOs, ra - q0, bv, c);
		db -= wg_row_dot<D, QR>(dOs, rb - q0, bv, c);
	}
	float dq[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
	for (int kt = 0; kt < nwt; kt++) {
		const int k0 = kt * WG_BR, st = kt % NST;
		const unsigned char *Ks = KV + st * 2 * TB, *Vs = Ks + TB;
		float sc[WG_BR / 8][4], dp[WG_BR / 8][4];
		mb_wait(&full[st], (kt / NST) & 1);
		wg_fence();
		wg_xyt<D, QR>(sc, Qg, Ks);
		wg_commit();
		wg_xyt<D, QR>(dp, dOg, Vs);
		wg_commit();
		wg_wait<1>(); /* S is ready; its exponentials overlap dP's products */
		wg_settle<WG_BR / 8>(sc);
		if (k0 + WG_BR - 1 > wfirst || k0 + WG_BR > T || wlast >= T)
			flash_p_rows<WG_BR / 8, true>(sc, k0, ra, rb, c, T, sl2, la, lb);
		else
			flash_p_rows<WG_BR / 8, false>(sc, k0, ra, rb, c, T, sl2, la, lb);
		wg_wait<0>();
		wg_settle<WG_BR / 8>(dp);
		flash_ds_of_p_rows<WG_BR / 8>(sc, dp, da, db);
		uint32_t pa[WG_BR / 16][4];
		wg_frags<WG_BR>(pa, sc);
		wg_fence();
		wg_py<D>(dq, pa, Ks);
		wg_commit();
		wg_wait_all();
		wg_settle<D / 8>(dq);
		if (lane == 0)
			mb_arrive(&empty[st]);
	}
	for (int kt = nwt; kt < nkt; kt++) { /* tiles after the group's rows: released in turn */
		mb_wait(&full[kt % NST], (kt / NST) & 1);
		if (lane == 0)
			mb_arrive(&empty[kt % NST]);
	}
	flash_store_dq<D / 8>(dqkv, dq, base, ra, rb, c, T, H, h, scale);
#endif
}

/*
 * dK and dV: a block owns 64 keys and walks the query tiles from its own
 * on: S^T = K Q^T and dP^T = V dO^T (wgmma from shared memory), P^T and
 * dS^T (flash_ds_cols), dV += P^T dO and dK += dS^T Q (from registers, dO
 * and Q read N-major).  The queries' lse and Dt come through shared memory,
 * the next tile's loaded while this one's products run.  With a QKV bias,
 * K and V (copied once) and every Q tile get it in shared memory.
 */
template <int D, typename OT>
__global__ void __launch_bounds__(WG_BT, 2) flashwg_dkv_kernel(OT *dqkv, const bf16 *qkv16, const bf16 *do16,
							      const float *bias, const float *lse, const float *Dt,
							      int T, int H, int nh, float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	extern __shared__ unsigned char smraw[];
	const int TB = WG_BR * D * 2;
	unsigned char *Ks = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023);
	unsigned char *Vs = Ks + TB, *QD = Vs + TB; /* buffer i: Q at QD + 2 i TB, dO after it */
	float *lse_s = (float *)(QD + 4 * TB), *dt_s = lse_s + 2 * WG_BR;
	const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3, tid = threadIdx.x;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int k0 = kt * WG_BR, nqt = (T + WG_BR - 1) / WG_BR, wfirst = k0 + 16 * w;
	const int ka = wfirst + g, kb = ka + 8;
	const float sl2 = scale * FLASH_LOG2E;
	const int64_t ld = 3 * (int64_t)H;
	const bf16 *qg = qkv16 + base * ld + h * D, *dog = do16 + base * H + h * D;
	wg_tile_async<WG_BR, D, WG_BT>(Ks, qg + H + k0 * ld, ld, T - k0);
	wg_tile_async<WG_BR, D, WG_BT>(Vs, qg + 2 * H + k0 * ld, ld, T - k0);
	flash_cp_commit();
	wg_tile_async<WG_BR, D, WG_BT>(QD, qg + k0 * ld, ld, T - k0);
	wg_tile_async<WG_BR, D, WG_BT>(QD + TB, dog + k0 * H, H, T - k0);
	flash_cp_commit();
	if (tid < WG_BR) {
		int t = k0 + tid;
		lse_s[tid] = t < T ? lse[hrow + t] * FLASH_LOG2E : 0.0f;
		dt_s[tid] = t < T ? Dt[hrow + t] : 0.0f;
	}
	float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
		dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
	}
	for (int qt = kt; qt < nqt; qt++) {
		const int q0 = qt * WG_BR, cur = (qt - kt) & 1, nxt = cur ^ 1;
		unsigned char *Qs = QD + cur * 2 * TB, *dOs = Qs + TB;
		float ln = 0.0f, dn = 0.0f; /* the next tile's lse and Dt, stored after this tile's products */
		int tn = q0 + WG_BR + tid;
		if (tid < WG_BR && tn < T) {
			ln = lse[hrow + tn] * FLASH_LOG2E;
			dn = Dt[hrow + tn];
		}
		if (qt + 1 < nqt) {
			unsigned char *nx = QD + nxt * 2 * TB;
			wg_tile_async<WG_BR, D, WG_BT>(nx, qg + (q0 + WG_BR) * ld, ld, T - q0 - WG_BR);
			wg_tile_async<WG_BR, D, WG_BT>(nx + TB, dog + (q0 + WG_BR) * H, H, T - q0 - WG_BR);
			flash_cp_commit();
			flash_cp_wait<1>();
		} else {
			flash_cp_wait<0>();
		}
		if (bias) {
			if (qt == kt) {
				wg_rows_bias<WG_BR, D>(Ks, bias + H + h * D, 0, threadIdx.x);
				wg_rows_bias<WG_BR, D>(Vs, bias + 2 * H + h * D, 0, threadIdx.x);
			}
			wg_rows_bias<WG_BR, D>(Qs, bias + h * D, 0, threadIdx.x);
		}
		wg_proxy_fence();
		__syncthreads();
		const float *ls = lse_s + cur * WG_BR, *ds = dt_s + cur * WG_BR;
		float st[WG_BR / 8][4], dpt[WG_BR / 8][4];
		wg_fence();
		wg_xyt<D>(st, Ks, Qs); /* S^T: keys x queries */
		wg_commit();
		wg_xyt<D>(dpt, Vs, dOs); /* dP^T */
		wg_commit();
		wg_wait<1>(); /* S^T is ready; P^T's exponentials overlap dP^T's products */
		wg_settle<WG_BR / 8>(st);
		if (q0 < wfirst + 15 || q0 + WG_BR > T || wfirst + 15 >= T)
			flash_p_cols<WG_BR / 8, true>(st, q0, ka, kb, c, T, sl2, ls);
		else
			flash_p_cols<WG_BR / 8, false>(st, q0, ka, kb, c, T, sl2, ls);
		uint32_t pa[WG_BR / 16][4], sa[WG_BR / 16][4];
		wg_frags<WG_BR>(pa, st);
		wg_wait<0>();
		wg_settle<WG_BR / 8>(dpt);
		wg_fence();
		wg_py<D>(dv, pa, dOs); /* dV's products overlap dS^T */
		wg_commit();
		flash_ds_of_p_cols<WG_BR / 8>(dpt, st, c, ds);
		wg_frags<WG_BR>(sa, dpt);
		wg_fence();
		wg_py<D>(dk, sa, Qs);
		wg_commit();
		wg_wait_all();
		wg_settle<D / 8>(dv);
		wg_settle<D / 8>(dk);
		if (tid < WG_BR) {
			lse_s[nxt * WG_BR + tid] = ln;
			dt_s[nxt * WG_BR + tid] = dn;
		}
		__syncthreads();
	}
	flash_store_dkv<D / 8>(dqkv, dk, dv, base, ka, kb, c, T, H, h, scale);
#endif
}

/* ---- launcher ------------------------------------------------------------------------ */

/* cuTensorMapEncodeTiled, found once through the runtime (no link against the driver library) */
static PFN_cuTensorMapEncodeTiled_v12000 g_encoder;
static pthread_once_t g_encoder_once = PTHREAD_ONCE_INIT;

static void find_encoder(void)
{
	void *p = NULL;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		g_encoder = (PFN_cuTensorMapEncodeTiled_v12000)p;
}

static PFN_cuTensorMapEncodeTiled_v12000 wg_encoder(void)
{
	pthread_once(&g_encoder_once, find_encoder);
	return g_encoder;
}

/*
 * A map of a bf16 tensor [B][T][C] (qkv: C = 3H; dout: C = H) for the
 * kernels' copies: boxes of 64 rows by 64 columns, 128-byte swizzle, rows
 * past T read as zeros.
 */
static int wg_rows_map(CUtensorMap *m, const bf16 *x, int64_t B, int T, int C, const char *op, const char *what)
{
	PFN_cuTensorMapEncodeTiled_v12000 enc = wg_encoder();
	if (!enc)
		return qe_fail(QE_ECUDA, "%s: the driver has no cuTensorMapEncodeTiled (a CUDA 12 driver is needed)", op);
	cuuint64_t dim[3] = { (cuuint64_t)C, (cuuint64_t)T, (cuuint64_t)B };
	cuuint64_t stride[2] = { (cuuint64_t)C * 2, (cuuint64_t)T * C * 2 };
	cuuint32_t box[3] = { 64, 64, 1 }, step[3] = { 1, 1, 1 };
	CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)x, dim, stride, box, step,
			 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
			 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS)
		return qe_fail(QE_ECUDA,
			       "%s: cuTensorMapEncodeTiled refused %s (%p, B %lld, T %d, %d columns): driver error %d "
			       "(the tensor must start on 16 bytes)",
			       op, what, (const void *)x, (long long)B, T, C, (int)r);
	return 0;
}

template <int D, typename OT>
static int wg_fwd(qe_stream *s, OT *out, float *lse, const bf16 *qkv16, const float *bias, int64_t B, int T, int H,
		  int nh)
{
	typedef wg_fwd_cfg<D> F;
	const char *op = "attn_flash_fwd";
	CUtensorMap tm;
	int rc = wg_rows_map(&tm, qkv16, B, T, 3 * H, op, "qkv");
	if (rc)
		return rc;
	size_t smem = F::smem(D);
	cudaError_t e = cudaFuncSetAttribute(flashwg_fwd_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)smem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_fwd_kernel)");
	dim3 grid((unsigned)((T + F::QR - 1) / F::QR), (unsigned)nh, (unsigned)B);
	flashwg_fwd_kernel<D, OT><<<grid, F::NT, smem, s->cs>>>(tm, out, lse, bias, T, H, nh, 1.0f / sqrtf((float)D));
	return qe__cuda_launched(op, "flashwg_fwd_kernel");
}

extern "C" int qe__cuda_flashwg_fwd(qe_stream *s, void *out, float *lse, const void *qkv16, const float *bias,
				    int64_t B, int T, int H, int nh, qe_dtype out_dt)
{
	const bf16 *q = (const bf16 *)qkv16;
	switch ((H / nh) * 2 + (out_dt == QE_BF16)) {
	case 64 * 2:
		return wg_fwd<64, float>(s, (float *)out, lse, q, bias, B, T, H, nh);
	case 64 * 2 + 1:
		return wg_fwd<64, bf16>(s, (bf16 *)out, lse, q, bias, B, T, H, nh);
	case 128 * 2:
		return wg_fwd<128, float>(s, (float *)out, lse, q, bias, B, T, H, nh);
	case 128 * 2 + 1:
		return wg_fwd<128, bf16>(s, (bf16 *)out, lse, q, bias, B, T, H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_fwd: the wgmma kernel has no head dimension %d", H / nh);
	}
}

template <int D, typename OT>
static int wg_bwd(qe_stream *s, OT *dqkv, const bf16 *qkv16, const bf16 *do16, const float *bias, const float *lse,
		  const float *Dt, int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_bwd";
	CUtensorMap tm, dm;
	int rc = wg_rows_map(&tm, qkv16, B, T, 3 * H, op, "qkv");
	if (!rc)
		rc = wg_rows_map(&dm, do16, B, T, H, op, "dout");
	if (rc)
		return rc;
	typedef wg_dq_cfg<D> Q;
	size_t qsmem = Q::smem(), smem = wg_dkv_smem(D);
	cudaError_t e = cudaFuncSetAttribute(flashwg_dq_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)qsmem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_dq_kernel)");
	e = cudaFuncSetAttribute(flashwg_dkv_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_dkv_kernel)");
	float scale = 1.0f / sqrtf((float)D);
	dim3 qgrid((unsigned)((T + Q::QR - 1) / Q::QR), (unsigned)nh, (unsigned)B);
	flashwg_dq_kernel<D, OT><<<qgrid, Q::NT, qsmem, s->cs>>>(tm, dm, dqkv, bias, lse, Dt, T, H, nh,
										 scale);
	rc = qe__cuda_launched(op, "flashwg_dq_kernel");
	if (rc)
		return rc;
	dim3 grid((unsigned)((T + WG_BR - 1) / WG_BR), (unsigned)nh, (unsigned)B);
	flashwg_dkv_kernel<D, OT><<<grid, WG_BT, smem, s->cs>>>(dqkv, qkv16, do16, bias, lse, Dt, T, H, nh, scale);
	return qe__cuda_launched(op, "flashwg_dkv_kernel");
}

extern "C" int qe__cuda_flashwg_bwd(qe_stream *s, void *dqkv, const void *qkv16, const void *do16, const float *bias,
				    const float *lse, const float *Dt, int64_t B, int T, int H, int nh, qe_dtype out_dt)
{
	const bf16 *q = (const bf16 *)qkv16, *d = (const bf16 *)do16;
	switch ((H / nh) * 2 + (out_dt == QE_BF16)) {
	case 64 * 2:
		return wg_bwd<64, float>(s, (float *)dqkv, q, d, bias, lse, Dt, B, T, H, nh);
	case 64 * 2 + 1:
		return wg_bwd<64, bf16>(s, (bf16 *)dqkv, q, d, bias, lse, Dt, B, T, H, nh);
	case 128 * 2:
		return wg_bwd<128, float>(s, (float *)dqkv, q, d, bias, lse, Dt, B, T, H, nh);
	case 128 * 2 + 1:
		return wg_bwd<128, bf16>(s, (bf16 *)dqkv, q, d, bias, lse, Dt, B, T, H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_bwd: the wgmma kernels have no head dimension %d", H / nh);
	}
}
