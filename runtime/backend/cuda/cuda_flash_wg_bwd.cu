/*
 * cuda_flash_wg_bwd.cu - the wgmma flash backward, dQ and dK/dV (the structure
 * and the shared helpers: cuda_flash_wg.cuh).
 */
#include "runtime/backend/cuda/cuda_flash_wg.cuh"

/* ---- backward (Dt = dout . out from flash_dot_kernel, cuda_flash_row.cuh) ------------------- */

/*
 * The backward's consumer groups own 64 rows each and walk the other side
 * in tiles of 64 (WG_BR); their accumulators take about twice the
 * forward's registers, which sets how many groups a block has.
 */
#define WG_BR 64 /* rows of a backward group, and of the tiles it walks */


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
 * dQ: persistent, as the forward (cuda_flash_wg_fwd.cu): a block per SM
 * walks the work items (query block x of QR rows, head, sequence), head by
 * head, the longest block of each head first, in alternately reversed
 * rounds (wg_item).  Per item, NC consumer warp groups of 64 queries
 * and the producer warp's first lane, which copies Q and dO into one of two
 * buffer pairs and the key tiles' K and V into NST mbarrier stages, the
 * ring running on from item to item.  A consumer walks the key tiles up to
 * its diagonal (later ones it only waits for and releases): S = Q K^T and
 * dP = dO V^T (wgmma from shared memory), dS = P (dP - Dt) (flash_p_rows,
 * flash_ds_of_p_rows), dQ += dS K (dS from registers, K read N-major).  The
 * QKV bias: Q gets it in shared memory; the streamed K and V tiles do not,
 * and their terms move the rows' lse and Dt instead, as flash16's dQ does.
 */
/*
 * A dQ block: consumer groups three at 64 (128 registers each), two at 128
 * (168); three stages at 64, one more than the forward (1% at gpt2's
 * shapes), two at 128 (the shared memory holds no third beside two Q, dO
 * pairs).
 */
template <int D> struct wg_dq_cfg {
	static const int NC = D == 64 ? 3 : 2, NST = D == 64 ? 3 : 2, QR = 64 * NC, NT = 128 * NC + 32;
	/* shared bytes: two pairs of Q and dO of an item's rows, the stages, their barriers, room to align */
	static size_t smem(void) { return (size_t)(4 * QR + 2 * NST * WG_BR) * D * 2 + 1024 + 8 * (4 + 2 * NST); }
};

template <int D, typename OT>
__global__ void __launch_bounds__(wg_dq_cfg<D>::NT, 1)
	flashwg_dq_kernel(const __grid_constant__ CUtensorMap tm, const __grid_constant__ CUtensorMap dm, OT *dqkv,
			  const float *bias, const float *lse, const float *Dt, int T, int H, int nh, int nitems,
			  float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	const int NC = wg_dq_cfg<D>::NC, NST = wg_dq_cfg<D>::NST, QR = wg_dq_cfg<D>::QR, TB = WG_BR * D * 2;
	const int QB = QR * D * 2;
	extern __shared__ unsigned char smraw[];
	unsigned char *Qs = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023); /* pair i: Q at 2 i QB */
	unsigned char *KV = Qs + 4 * QB; /* stage i: K at KV + 2 i TB, V after it */
	uint64_t *qfull = (uint64_t *)(KV + NST * 2 * TB), *qempty = qfull + 2, *full = qempty + 2, *empty = full + NST;
	const int wg = threadIdx.x >> 7, nx = (T + QR - 1) / QR, ntk = (T + WG_BR - 1) / WG_BR;
	if (threadIdx.x == 128 * NC)
		wg_ring_init_own2(qfull, qempty, full, empty, NST, NC);
	__syncthreads();
	if (wg == NC) {
		if (threadIdx.x == 128 * NC)
			for (int n = 0, u = 0, j = wg_item(0); j < nitems; j = wg_item(++n)) {
				const int hb = j / nx, x = j - hb * nx, h = hb % nh, b = hb / nh;
				const int q0 = wg_block_row0<QR>(T, x), nkt = min(ntk, (q0 + QR - 1) / WG_BR + 1);
				unsigned char *Qb = Qs + (n & 1) * 2 * QB;
				if (n >= 2)
					mb_wait(&qempty[n & 1], ((n >> 1) - 1) & 1);
				mb_expect(&qfull[n & 1], 2 * QB);
				tma_tile<QR, D>(Qb, &tm, h * D, q0, b, &qfull[n & 1]);
				tma_tile<QR, D>(Qb + QB, &dm, h * D, q0, b, &qfull[n & 1]);
				wg_stream_kv<WG_BR, D>(KV, &tm, H, h, b, nkt, full, empty, NST, u);
				u += nkt;
			}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5, lane = threadIdx.x & 31;
	const int g = lane >> 2, c = lane & 3;
	const float sl2 = scale * FLASH_LOG2E;
	for (int n = 0, u = 0, j = wg_item(0); j < nitems; j = wg_item(++n)) {
		const int hb = j / nx, x = j - hb * nx, h = hb % nh, b = hb / nh;
		const int q0 = wg_block_row0<QR>(T, x), nkt = min(ntk, (q0 + QR - 1) / WG_BR + 1);
		const int64_t hrow = ((int64_t)b * nh + h) * T;
		const int gfirst = q0 + 64 * cw, wfirst = gfirst + 16 * w, wlast = wfirst + 15;
		const int ra = wfirst + g, rb = ra + 8;
		const int glast = min(gfirst + 63, T - 1);
		const int nwt = glast >= 0 && gfirst < T ? min(nkt, glast / WG_BR + 1) : 0; /* the tiles this group computes */
		const bool ina = (unsigned)ra < (unsigned)T, inb = (unsigned)rb < (unsigned)T;
		float la = ina ? lse[hrow + ra] * FLASH_LOG2E : 0.0f, lb = inb ? lse[hrow + rb] * FLASH_LOG2E : 0.0f;
		float da = ina ? Dt[hrow + ra] : 0.0f, db = inb ? Dt[hrow + rb] : 0.0f;
		unsigned char *Qb = Qs + (n & 1) * 2 * QB, *dOb = Qb + QB;
		const unsigned char *Qg = Qb + cw * 64 * 128, *dOg = dOb + cw * 64 * 128; /* the group's rows in each panel */
		mb_wait(&qfull[n & 1], (n >> 1) & 1);
		if (bias) {
			wg_rows_bias<QR, D>(Qb, bias + h * D, 64 * cw, t);
			wg_proxy_fence();
			wg_bar(1 + cw);
			/* q . bk moves the row's lse, dO . bv its Dt; a row of dS sums to zero, so dS bk adds nothing */
			const float *bk = bias + H + h * D, *bv = bias + 2 * H + h * D;
			la -= wg_row_dot<D, QR>(Qb, ra - q0, bk, c) * sl2;
			lb -= wg_row_dot<D, QR>(Qb, rb - q0, bk, c) * sl2;
			da -= wg_row_dot<D, QR>(dOb, ra - q0, bv, c);
			db -= wg_row_dot<D, QR>(dOb, rb - q0, bv, c);
		}
		float dq[D / 8][4];
#pragma unroll
		for (int k = 0; k < D / 8; k++)
			dq[k][0] = dq[k][1] = dq[k][2] = dq[k][3] = 0.0f;
		for (int kt = 0; kt < nwt; kt++) {
			const int k0 = kt * WG_BR, i = u + kt, st = i % NST;
			const unsigned char *Ks = KV + st * 2 * TB, *Vs = Ks + TB;
			float sc[WG_BR / 8][4], dp[WG_BR / 8][4];
			mb_wait(&full[st], (i / NST) & 1);
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
		wg_ring_pass(full, empty, NST, u + nwt, u + nkt, lane); /* tiles after the group's rows */
		u += nkt;
		__syncwarp();
		if (lane == 0)
			mb_arrive(&qempty[n & 1]); /* the warp is done with this Q, dO pair */
		flash_store_dq<D / 8>(dqkv, dq, (int64_t)b * T, ra, rb, c, T, H, h, scale);
	}
#endif
}

/*
 * Lane's rows lane + 32 j of query tile qt of R rows: lse in log2 units
 * and Dt, zeros past T; nothing when qt is past the last tile (nqt).
 */
template <int R>
__device__ __forceinline__ void wg_tile_rows(float *lv, float *dv, const float *lse, const float *Dt, int64_t hrow,
					     int qt, int nqt, int T, int lane)
{
	if (qt >= nqt)
		return;
#pragma unroll
	for (int j = 0; j < R / 32; j++) {
		const int q = qt * R + lane + 32 * j;
		lv[j] = q < T ? lse[hrow + q] * FLASH_LOG2E : 0.0f;
		dv[j] = q < T ? Dt[hrow + q] : 0.0f;
	}
}

/*
 * dK and dV: a block owns NC x 64 keys, one consumer warp group per 64,
 * and a producer warp: its first lane copies K and V once and then each
 * query tile's Q and dO into NST mbarrier stages; all its lanes put the
 * tile's lse (log2 units) and Dt beside them.  A consumer walks the query
 * tiles from its own diagonal on (earlier ones it only waits for and
 * releases): S^T = K Q^T and dP^T = V dO^T (wgmma from shared memory), P^T
 * and dS^T (flash_p_cols, flash_ds_of_p_cols), dV += P^T dO and dK += dS^T
 * Q (from registers, dO and Q read N-major).  The QKV bias: a group adds
 * bk and bv to its own K and V rows; the shared Q tiles stay as copied, and
 * bq enters as k . bq, a term of the key's row of exponents, and as dK's
 * (sum over queries of dS^T) bq.
 *
 * Not persistent, unlike the forward and dQ: a block per key block (grid
 * x, head, sequence).  Made persistent like dQ (double-buffered K and V,
 * items head by head), it gained 3% at gpt2-xl's shape and lost 2-3% at
 * the others and 18% at head dim 128, seq 4096
 * (bench/results/session13-1xH100, call 2).
 */
/* a dK, dV block: consumer groups two at 64 (168 registers each), one at 128 (244); three stages */
template <int D> struct wg_dkv_cfg {
	static const int NC = D == 64 ? 2 : 1, NST = 3, KR = 64 * NC, NT = 128 * NC + 32;
	/* shared bytes: K and V of the block's keys, the stages with their lse and Dt, the barriers, room to align */
	static size_t smem(void)
	{
		return (size_t)(2 * KR + 2 * NST * WG_BR) * D * 2 + NST * 2 * WG_BR * sizeof(float) + 1024 +
		       8 * (1 + 2 * NST);
	}
};

template <int D, typename OT>
__global__ void __launch_bounds__(wg_dkv_cfg<D>::NT, 1)
	flashwg_dkv_kernel(const __grid_constant__ CUtensorMap tm, const __grid_constant__ CUtensorMap dm, OT *dqkv,
			   const float *bias, const float *lse, const float *Dt, int T, int H, int nh, float scale)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
	const int NC = wg_dkv_cfg<D>::NC, NST = wg_dkv_cfg<D>::NST, KR = wg_dkv_cfg<D>::KR, TB = WG_BR * D * 2;
	extern __shared__ unsigned char smraw[];
	unsigned char *Ks = (unsigned char *)(((uintptr_t)smraw + 1023) & ~(uintptr_t)1023);
	unsigned char *Vs = Ks + KR * D * 2, *QD = Vs + KR * D * 2; /* stage i: Q at QD + 2 i TB, dO after it */
	float *lse_s = (float *)(QD + NST * 2 * TB), *dt_s = lse_s + NST * WG_BR; /* stage i at i WG_BR */
	uint64_t *kvfull = (uint64_t *)(dt_s + NST * WG_BR), *full = kvfull + 1, *empty = full + NST;
	const int h = blockIdx.y, b = blockIdx.z, wg = threadIdx.x >> 7, lane = threadIdx.x & 31;
	const int k0 = blockIdx.x * KR, nqt = (T + WG_BR - 1) / WG_BR, qfirst = k0 / WG_BR;
	const int64_t hrow = ((int64_t)b * nh + h) * T;
	if (threadIdx.x == 128 * NC)
		wg_ring_init(kvfull, full, empty, NST, 1 + 32, NC);
	__syncthreads();
	if (wg == NC) {
		if (lane == 0) {
			mb_expect(kvfull, 2 * KR * D * 2);
			tma_tile<KR, D>(Ks, &tm, H + h * D, k0, b, kvfull);
			tma_tile<KR, D>(Vs, &tm, 2 * H + h * D, k0, b, kvfull);
		}
		/*
		 * Each lane's lse and Dt of a tile are loaded one tile ahead, so
		 * their latency runs while the lane waits for the next stage
		 * to be released, not between the copies and "full": +7-9%
		 * backward at T 1024, +5% at 4k d64, flat at 4k d128
		 * (bench/results/session13-1xH100, call 3).
		 */
		float lv[WG_BR / 32], dv[WG_BR / 32];
		wg_tile_rows<WG_BR>(lv, dv, lse, Dt, hrow, qfirst, nqt, T, lane);
		for (int qt = qfirst; qt < nqt; qt++) {
			const int i = qt - qfirst, st = i % NST;
			wg_ring_claim(empty, NST, i);
			if (lane == 0) {
				unsigned char *Qs = QD + st * 2 * TB;
				mb_expect(&full[st], 2 * TB);
				tma_tile<WG_BR, D>(Qs, &tm, h * D, qt * WG_BR, b, &full[st]);
				tma_tile<WG_BR, D>(Qs + TB, &dm, h * D, qt * WG_BR, b, &full[st]);
			}
#pragma unroll
			for (int j = 0; j < WG_BR / 32; j++) {
				lse_s[st * WG_BR + lane + 32 * j] = lv[j];
				dt_s[st * WG_BR + lane + 32 * j] = dv[j];
			}
			mb_arrive(&full[st]);
			wg_tile_rows<WG_BR>(lv, dv, lse, Dt, hrow, qt + 1, nqt, T, lane);
		}
		return;
	}
	const int cw = wg, t = threadIdx.x & 127, w = t >> 5;
	const int g = lane >> 2, c = lane & 3;
	const int64_t base = (int64_t)b * T;
	const int gfirst = k0 + 64 * cw, wfirst = gfirst + 16 * w;
	const int ka = wfirst + g, kb = ka + 8;
	const int qown = gfirst < T ? gfirst / WG_BR : nqt; /* the first query tile this group computes */
	const float sl2 = scale * FLASH_LOG2E;
	const unsigned char *Kg = Ks + cw * 64 * 128, *Vg = Vs + cw * 64 * 128; /* the group's rows in each panel */
	float oa = 0.0f, ob = 0.0f, sa_ = 0.0f, sb_ = 0.0f; /* k . bq of rows ka, kb (log2 units); their dS^T sums */
	mb_wait(kvfull, 0);
	if (bias) {
		wg_rows_bias<KR, D>(Ks, bias + H + h * D, 64 * cw, t);
		wg_rows_bias<KR, D>(Vs, bias + 2 * H + h * D, 64 * cw, t);
		wg_proxy_fence();
		wg_bar(1 + cw);
		oa = wg_row_dot<D, KR>(Ks, ka - k0, bias + h * D, c) * sl2;
		ob = wg_row_dot<D, KR>(Ks, kb - k0, bias + h * D, c) * sl2;
	}
	float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
		dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
	}
	wg_ring_pass(full, empty, NST, 0, min(qown, nqt) - qfirst, lane); /* tiles before the group's keys */
	for (int qt = qown; qt < nqt; qt++) {
		const int i = qt - qfirst, st = i % NST, q0 = qt * WG_BR;
		const unsigned char *Qs = QD + st * 2 * TB, *dOs = Qs + TB;
		const float *ls = lse_s + st * WG_BR, *ds = dt_s + st * WG_BR;
		float s_[WG_BR / 8][4], dpt[WG_BR / 8][4];
		mb_wait(&full[st], (i / NST) & 1);
		wg_fence();
		wg_xyt<D, KR>(s_, Kg, Qs); /* S^T: keys x queries */
		wg_commit();
		wg_xyt<D, KR>(dpt, Vg, dOs); /* dP^T */
		wg_commit();
		wg_wait<1>(); /* S^T is ready; P^T's exponentials overlap dP^T's products */
		wg_settle<WG_BR / 8>(s_);
		if (q0 < wfirst + 15 || q0 + WG_BR > T || wfirst + 15 >= T)
			flash_p_cols<WG_BR / 8, true>(s_, q0, ka, kb, c, T, sl2, ls, oa, ob);
		else
			flash_p_cols<WG_BR / 8, false>(s_, q0, ka, kb, c, T, sl2, ls, oa, ob);
		uint32_t pa[WG_BR / 16][4], sa[WG_BR / 16][4];
		wg_frags<WG_BR>(pa, s_);
		wg_wait<0>();
		wg_settle<WG_BR / 8>(dpt);
		flash_ds_of_p_cols<WG_BR / 8>(dpt, s_, c, ds);
		if (bias)
#pragma unroll
			for (int n = 0; n < WG_BR / 8; n++) {
				sa_ += dpt[n][0] + dpt[n][1];
				sb_ += dpt[n][2] + dpt[n][3];
			}
		wg_frags<WG_BR>(sa, dpt);
		wg_fence();
		wg_py<D>(dv, pa, dOs);
		wg_py<D>(dk, sa, Qs);
		wg_commit();
		wg_wait_all();
		wg_settle<D / 8>(dv);
		wg_settle<D / 8>(dk);
		if (lane == 0)
			mb_arrive(&empty[st]);
	}
	if (bias) { /* dK += (dS^T 1) bq: the rows' sums over the quad's columns, in a fixed butterfly */
		sa_ += __shfl_xor_sync(0xffffffffu, sa_, 1);
		sa_ += __shfl_xor_sync(0xffffffffu, sa_, 2);
		sb_ += __shfl_xor_sync(0xffffffffu, sb_, 1);
		sb_ += __shfl_xor_sync(0xffffffffu, sb_, 2);
		const float *bq = bias + h * D;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			float v0 = __ldg(bq + 8 * n + 2 * c), v1 = __ldg(bq + 8 * n + 2 * c + 1);
			dk[n][0] = fmaf(sa_, v0, dk[n][0]);
			dk[n][1] = fmaf(sa_, v1, dk[n][1]);
			dk[n][2] = fmaf(sb_, v0, dk[n][2]);
			dk[n][3] = fmaf(sb_, v1, dk[n][3]);
		}
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
	typedef wg_dkv_cfg<D> K;
	size_t qsmem = Q::smem(), smem = K::smem();
	cudaError_t e = cudaFuncSetAttribute(flashwg_dq_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
					     (int)qsmem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_dq_kernel)");
	e = cudaFuncSetAttribute(flashwg_dkv_kernel<D, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(flashwg_dkv_kernel)");
	float scale = 1.0f / sqrtf((float)D);
	int nitems;
	dim3 qgrid;
	if ((rc = qe__flashwg_grid(op, B, T, nh, Q::QR, &nitems, &qgrid)))
		return rc;
	flashwg_dq_kernel<D, OT><<<qgrid, Q::NT, qsmem, s->cs>>>(tm, dm, dqkv, bias, lse, Dt, T, H, nh, nitems,
								  scale);
	rc = qe__cuda_launched(op, "flashwg_dq_kernel");
	if (rc)
		return rc;
	dim3 grid((unsigned)((T + K::KR - 1) / K::KR), (unsigned)nh, (unsigned)B);
	flashwg_dkv_kernel<D, OT><<<grid, K::NT, smem, s->cs>>>(tm, dm, dqkv, bias, lse, Dt, T, H, nh, scale);
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
