/*
 * cuda_flash_wg_bwd.cu - the wgmma flash backward, dQ and dK/dV (the structure
 * and the shared helpers: cuda_flash_wg.cuh).
 */
#include "runtime/backend/cuda/cuda_flash_wg.cuh"

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
	if (threadIdx.x == 128 * NC)
		wg_ring_init(qfull, full, empty, NST, NC);
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC) {
			mb_expect(qfull, 2 * QR * D * 2);
			tma_tile<QR, D>(Qs, &tm, h * D, q0, b, qfull);
			tma_tile<QR, D>(dOs, &dm, h * D, q0, b, qfull);
			wg_stream_kv<WG_BR, D>(KV, &tm, H, h, b, nkt, full, empty, NST);
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
	wg_ring_pass(full, empty, NST, nwt, nkt, lane); /* tiles after the group's rows */
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

template <int D, typename OT>
static int wg_bwd(qe_stream *s, OT *dqkv, const bf16 *qkv16, const bf16 *do16, const float *bias, const float *lse,
		  const float *Dt, int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_bwd";
	CUtensorMap tm, dm;
	int rc = qe__flashwg_rows_map(&tm, qkv16, B, T, 3 * H, op, "qkv");
	if (!rc)
		rc = qe__flashwg_rows_map(&dm, do16, B, T, H, op, "dout");
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
