/*
 * cuda_flash_wg_fwd.cu - the wgmma flash forward (the structure and the shared
 * helpers: cuda_flash_wg.cuh).
 */
#include "runtime/backend/cuda/cuda_flash_wg.cuh"

/* ---- forward ------------------------------------------------------------------------- */

/*
 * The forward's configuration per head dimension: key tile BN, consumer
 * warp groups NC of 64 queries, pipeline stages NST (K and V of one tile a
 * stage).  One block an SM: three groups (12 warps and the producer) run at
 * 128 registers a thread, two at 168.
 *   D 64: three groups, tiles of 128, two stages.  Session 11 timed the
 *   others on an H100 (bench/results/session11-1xH100): two groups with S
 *   of tile j issued before P V of tile j - 1, three groups at tiles of
 *   64, and three stages were all slower.
 *   D 128: two groups, tiles of 128, two stages: no spill, where three
 *   groups at tiles of 64 spilled 540 bytes at 128 registers; 5-9% faster
 *   than those (bench/results/session13-1xH100, call 2), while two groups
 *   at tiles of 64 and three stages were 3% slower than them.
 */
template <int BN_, int NC_, int NST_> struct wg_fwd_of {
	static const int BN = BN_, NC = NC_, NST = NST_;
	static const int QR = 64 * NC, NT = 128 * NC + 32; /* the producer is the last warp */
	/* shared bytes: two Q buffers, the stages, their barriers, room to align to 1024 */
	static size_t smem(int D) { return (size_t)(2 * QR + 2 * NST * BN) * D * 2 + 1024 + 8 * (4 + 2 * NST); }
};
template <int D> struct wg_fwd_cfg;
template <> struct wg_fwd_cfg<64> : wg_fwd_of<128, 3, 2> {};
template <> struct wg_fwd_cfg<128> : wg_fwd_of<128, 2, 2> {};

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
 * Persistent: a block per SM (or per work item, when there are fewer)
 * walks the work items (query block x of QR rows, head h, sequence b),
 * ordered head by head, the longest block of each head first; a block's
 * n-th item comes from round n of grid items, every other round reversed
 * (wg_item).  So the blocks running at once share a few heads' K and V in
 * L2, and no block gets only long items.  Session 12 timed the x-major
 * order (no two running blocks on one head): slower at head dim 128; this
 * one gained 5-11% at every shape (bench/results/session13-1xH100).
 * A block is NC consumer warp groups of 64 queries and one producer
 * warp.  The producer's first lane copies each item's Q into one of two
 * buffers (each with a "full" barrier and an "empty" one the consumers
 * arrive at when done reading it) and then the item's K and V tile by tile
 * through the tensor memory accelerator (tm: the strided qkv as a map of
 * [B][T][3H]) into NST stages, each with a "full" barrier (the copies'
 * bytes landed) and an "empty" one (every consumer warp is done with it);
 * the ring's uses run on from one item to the next, so the next item's Q
 * and first tiles land while this one's last tiles and stores run.  The
 * producer's other lanes leave.  No block-wide barrier follows the setup.
 *
 * A consumer walks an item's key tiles up to the diagonal; tiles whose
 * keys all come after its last row it only waits for and releases.  Per
 * tile, S = Q K^T, the online softmax (flash_softmax_probs), O += P V with
 * P from registers.  The K and V biases are applied to the rows at the
 * end, as flash16 does: q . bk moves only the row's lse, and P (V + bv) =
 * P V + l bv; Q's bias is added in place when Q lands.
 */
template <int D, typename OT>
__global__ void __launch_bounds__(wg_fwd_cfg<D>::NT, 1)
	flashwg_fwd_kernel(const __grid_constant__ CUtensorMap tm, OT *out, float *lse, const float *bias, int T, int H,
			   int nh, int nitems, float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	typedef wg_fwd_cfg<D> F;
	const int BN = F::BN, NC = F::NC, NST = F::NST, QR = F::QR, NS = BN / 8, QB = QR * D * 2, TB = BN * D * 2;
	extern __shared__ unsigned char smraw[];
	unsigned char *Qs = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023); /* buffer i at i QB */
	unsigned char *KV = Qs + 2 * QB; /* stage i: K at KV + 2 i TB, V after it */
	uint64_t *qfull = (uint64_t *)(KV + NST * 2 * TB), *qempty = qfull + 2, *full = qempty + 2, *empty = full + NST;
	const int wg = threadIdx.x >> 7, nx = (T + QR - 1) / QR, ntk = (T + BN - 1) / BN;
	if (threadIdx.x == 128 * NC)
		wg_ring_init_own2(qfull, qempty, full, empty, NST, NC);
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC)
			for (int n = 0, u = 0, j = wg_item(0); j < nitems; j = wg_item(++n)) {
				const int hb = j / nx, x = j - hb * nx, h = hb % nh, b = hb / nh;
				const int q0 = wg_block_row0<QR>(T, x), nkt = min(ntk, (q0 + QR - 1) / BN + 1);
				if (n >= 2)
					mb_wait(&qempty[n & 1], ((n >> 1) - 1) & 1);
				mb_expect(&qfull[n & 1], QB);
				tma_tile<QR, D>(Qs + (n & 1) * QB, &tm, h * D, q0, b, &qfull[n & 1]);
				wg_stream_kv<BN, D>(KV, &tm, H, h, b, nkt, full, empty, NST, u);
				u += nkt;
			}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const float sl2 = scale * FLASH_LOG2E;
	for (int n = 0, u = 0, j = wg_item(0); j < nitems; j = wg_item(++n)) {
		const int hb = j / nx, x = j - hb * nx, h = hb % nh;
		const int q0 = wg_block_row0<QR>(T, x), nkt = min(ntk, (q0 + QR - 1) / BN + 1);
		const int gfirst = q0 + cw * 64, glast = min(gfirst + 63, T - 1);
		const bool live = glast >= 0 && gfirst < T;
		const int nwt = live ? min(nkt, glast / BN + 1) : 0; /* the tiles this group computes */
		unsigned char *Qb = Qs + (n & 1) * QB;
		mb_wait(&qfull[n & 1], (n >> 1) & 1);
		if (bias) {
			wg_rows_bias<QR, D>(Qb, bias + h * D, cw * 64, t);
			wg_proxy_fence();
			wg_bar(1 + cw);
		}
		float o[D / 8][4];
#pragma unroll
		for (int k = 0; k < D / 8; k++)
			o[k][0] = o[k][1] = o[k][2] = o[k][3] = 0.0f;
		flash_rows rs = flash_rows_start();
		const int ra = gfirst + 16 * w + g, rb = ra + 8;
		const unsigned char *Qg = Qb + cw * 64 * 128; /* the group's 64 rows in each panel */
		for (int kt = 0; kt < nwt; kt++) {
			const int i = u + kt, st = i % NST;
			const unsigned char *Ks = KV + st * 2 * TB;
			float sc[NS][4], aa, ab;
			mb_wait(&full[st], (i / NST) & 1);
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
		wg_ring_pass(full, empty, NST, u + nwt, u + nkt, lane); /* tiles after the group's rows */
		u += nkt;
		if (live && bias) {
			const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
			rs.ma += wg_row_dot<D, QR>(Qb, ra - q0, bk, c) * sl2;
			rs.mb += wg_row_dot<D, QR>(Qb, rb - q0, bk, c) * sl2;
#pragma unroll
			for (int k = 0; k < D / 8; k++) {
				float v0 = __ldg(bv + 8 * k + 2 * c), v1 = __ldg(bv + 8 * k + 2 * c + 1);
				o[k][0] += rs.la * v0;
				o[k][1] += rs.la * v1;
				o[k][2] += rs.lb * v0;
				o[k][3] += rs.lb * v1;
			}
		}
		__syncwarp();
		if (lane == 0)
			mb_arrive(&qempty[n & 1]); /* the warp is done with this Q buffer */
		if (live) {
			const int b = hb / nh; /* found here: fewer registers live through the walk */
			const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
			flash_store_rows<D / 8>(out, lse, o, &rs, base, hrow, ra, rb, c, T, H, h);
		}
	}
#endif
}

/* ---- launcher ------------------------------------------------------------------------ */

template <int D, typename OT>
static int wg_fwd(qe_stream *s, OT *out, float *lse, const bf16 *qkv16, const float *bias, int64_t B, int T, int H,
		  int nh)
{
	typedef wg_fwd_cfg<D> F;
	const char *op = "attn_flash_fwd";
	CUtensorMap tm;
	int rc = qe__flashwg_rows_map(&tm, qkv16, B, T, 3 * H, op, "qkv");
	if (rc)
		return rc;
	size_t smem = F::smem(D);
	cudaError_t e = cudaFuncSetAttribute(flashwg_fwd_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)smem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_fwd_kernel)");
	int nitems;
	dim3 grid;
	if ((rc = qe__flashwg_grid(op, B, T, nh, F::QR, &nitems, &grid)))
		return rc;
	flashwg_fwd_kernel<D, OT><<<grid, F::NT, smem, s->cs>>>(tm, out, lse, bias, T, H, nh, nitems,
								 1.0f / sqrtf((float)D));
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
