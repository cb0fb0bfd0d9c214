/*
 * cuda_flash_wg_fwd.cu - the wgmma flash forward (the structure and the shared
 * helpers: cuda_flash_wg.cuh).
 */
#include "runtime/backend/cuda/cuda_flash_wg.cuh"

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
	const int h = blockIdx.y, b = blockIdx.z;
	const int wg = threadIdx.x >> 7;
	const int q0 = wg_block_row0<QR>(T);
	const int nkt = min((T + BN - 1) / BN, (q0 + QR - 1) / BN + 1); /* key tiles up to the diagonal */
	if (threadIdx.x == 128 * NC)
		wg_ring_init(qfull, full, empty, NST, 1, NC);
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC) {
			mb_expect(qfull, QR * D * 2);
			tma_tile<QR, D>(Qs, &tm, h * D, q0, b, qfull);
			wg_stream_kv<BN, D>(KV, &tm, H, h, b, nkt, full, empty, NST);
		}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int gfirst = q0 + cw * 64, glast = min(gfirst + 63, T - 1);
	const bool live = glast >= 0 && gfirst < T;
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
	wg_ring_pass(full, empty, NST, nwt, nkt, lane); /* tiles after the group's rows */
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
