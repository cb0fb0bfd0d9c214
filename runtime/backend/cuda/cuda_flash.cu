/*
 * cuda_flash.cu - causal multi-head attention without the T x T
 * probabilities (flash-style), forward and backward, on tensor cores (WMMA,
 * TF32 operands, fp32 accumulation), deterministic: every sum runs in a fixed
 * order and no kernel uses atomics, so two runs give the same bytes.
 *
 * Layout (backend.h attn_flash_*): sequence b, token t, head h: q at
 * qkv[(b*T + t)*3H + h*D], k at +H, v at +2H; out[(b*T + t)*H + h*D];
 * lse[(b*nh + h)*T + t].  Tiles are 64 queries x 64 keys; a block of four
 * warps owns 64 rows (16 a warp) of queries (forward, dQ) or keys (dK, dV).
 *
 * TF32 rounding happens once, when a tile is loaded into shared memory (and
 * where P and dS are written), never per fragment.
 *
 * Forward, per query tile: for each key tile up to the diagonal, S = Q K^T
 * (WMMA), the online softmax of each row in shared memory (running max m and
 * sum l, the output rows rescaled by exp(m_old - m_new)), O += P V (WMMA);
 * then out = O / l and lse = m + log l.
 * Backward, with Dt = dout_t . out_t (one small kernel):
 *   dQ kernel, per query tile, over key tiles <= it:  P = exp(S - lse),
 *     dP = dO V^T, dS = P (dP - Dt), dQ += dS K (accumulators in registers);
 *   dK/dV kernel, per key tile, over query tiles >= it: with S^T = K Q^T and
 *     dP^T = V dO^T, dV += P^T dO and dK += dS^T Q.
 * Splitting dQ from dK/dV (each recomputes S) is what removes the atomics a
 * single backward kernel would need for dQ.  Masked entries (t2 > t, or
 * beyond T) are exactly zero in P and dS.
 */
#include <math.h>
#include <mma.h>

#include "runtime/backend/cuda/cuda_int.h"

using namespace nvcuda;

#define FL_TILE 64    /* queries or keys per tile */
#define FL_WARPS 4    /* 16 rows each */
#define FL_THREADS (FL_WARPS * 32)
#define FL_LS (FL_TILE + 8) /* padded row stride of the score tiles (floats) */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> frag_bt; /* B = X^T */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> frag_c;

/*
 * Rows [r0, r0+64) of an [N, ld] tensor's columns col..col+D into s (stride
 * D+8), float4 at a time (16-byte aligned: the launchers check), rounded to
 * TF32; zeros beyond T.  Every tile in shared memory that feeds a product
 * holds TF32 values already (P and dS are rounded where they are written),
 * so no fragment is converted after loading.
 */
template <int D>
__device__ __forceinline__ void load_rows4(float *s, const float *x, int64_t ld, int64_t col, int64_t row_base, int r0,
					   int T)
{
	const int LD = D + 8, Q = D / 4;
	for (int i = threadIdx.x; i < FL_TILE * Q; i += FL_THREADS) {
		int r = i / Q, c = (i - r * Q) * 4, t = r0 + r;
		float4 v = t < T ? *(const float4 *)(x + (row_base + t) * ld + col + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		/* rounded to TF32 once here, so the fragments loaded from s need no conversion */
		v.x = wmma::__float_to_tf32(v.x);
		v.y = wmma::__float_to_tf32(v.y);
		v.z = wmma::__float_to_tf32(v.z);
		v.w = wmma::__float_to_tf32(v.w);
		*(float4 *)(s + r * LD + c) = v;
	}
}

/* rows [r0, r0+64) of one of q (part 0), k (1), v (2) of head h into s */
template <int D>
__device__ __forceinline__ void load_tile(float *s, const float *qkv, int64_t row_base, int r0, int T, int H, int part,
					  int h)
{
	load_rows4<D>(s, qkv, 3 * (int64_t)H, (int64_t)part * H + h * D, row_base, r0, T);
}

/* rows [r0, r0+64) of an [N, H] tensor's head h into s */
template <int D>
__device__ __forceinline__ void load_rows(float *s, const float *x, int64_t row_base, int r0, int T, int H, int h)
{
	load_rows4<D>(s, x, H, (int64_t)h * D, row_base, r0, T);
}

/* A warp's 16 x 64 product X_w (16 x D, stride LD) . Y^T (Y: 64 x D, stride LD) into out (stride FL_LS). */
template <int D> __device__ __forceinline__ void mm_abt(float *out, const float *xw, const float *y)
{
	const int LD = D + 8;
	frag_a a[D / 8]; /* the warp's rows, loaded once for the four column tiles */
	for (int k = 0; k < D / 8; k++) {
		wmma::load_matrix_sync(a[k], xw + k * 8, LD);
	}
	for (int n = 0; n < FL_TILE / 16; n++) {
		frag_c c;
		wmma::fill_fragment(c, 0.0f);
		for (int k = 0; k < D / 8; k++) {
			frag_bt b;
			wmma::load_matrix_sync(b, y + n * 16 * LD + k * 8, LD);
			wmma::mma_sync(c, a[k], b, c);
		}
		wmma::store_matrix_sync(out + n * 16, c, FL_LS, wmma::mem_row_major);
	}
}

/* acc[n] += P_w (16 x 64, stride FL_LS) . Y (64 x D, stride LD), n over the D/16 column tiles. */
template <int D> __device__ __forceinline__ void mm_acc(frag_c *acc, const float *pw, const float *y)
{
	const int LD = D + 8;
	for (int k = 0; k < FL_TILE / 8; k++) {
		frag_a a;
		wmma::load_matrix_sync(a, pw + k * 8, FL_LS);
		for (int n = 0; n < D / 16; n++) {
			frag_b b;
			wmma::load_matrix_sync(b, y + k * 8 * LD + n * 16, LD);
			wmma::mma_sync(acc[n], a, b, acc[n]);
		}
	}
}

/* ---- forward ------------------------------------------------------------------------ */

template <int D>
__global__ void __launch_bounds__(FL_THREADS) flash_fwd_kernel(float *out, float *lse, const float *qkv, int T, int H,
								int nh, float scale)
{
	extern __shared__ __align__(32) float sm[];
	const int LD = D + 8;
	float *Qs = sm, *Ks = Qs + FL_TILE * LD, *Vs = Ks + FL_TILE * LD, *Ss = Vs + FL_TILE * LD;
	float *Os = Ss + FL_WARPS * 16 * FL_LS;
	const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int64_t base = (int64_t)b * T;
	const int q0 = qt * FL_TILE;
	float *Sw = Ss + w * 16 * FL_LS, *Ow = Os + w * 16 * LD;
	load_tile<D>(Qs, qkv, base, q0, T, H, 0, h);
	for (int i = lane; i < 16 * D; i += 32)
		Ow[(i / D) * LD + i % D] = 0.0f;
	/* two lanes per row: lane r*2 + half takes the half's 32 columns */
	const int r = lane >> 1, half = lane & 1, tq = q0 + w * 16 + r;
	float m = -INFINITY, l = 0.0f;
	for (int kt = 0; kt <= qt; kt++) {
		const int k0 = kt * FL_TILE;
		__syncthreads(); /* the previous tile's K, V are no longer read */
		load_tile<D>(Ks, qkv, base, k0, T, H, 1, h);
		load_tile<D>(Vs, qkv, base, k0, T, H, 2, h);
		__syncthreads();
		mm_abt<D>(Sw, Qs + w * 16 * LD, Ks);
		__syncwarp();
		float *srow = Sw + r * FL_LS + half * 32;
		float mx = -INFINITY;
		for (int j = 0; j < 32; j++) {
			int tk = k0 + half * 32 + j;
			float v = (tk <= tq && tk < T) ? srow[j] * scale : -INFINITY;
			srow[j] = v;
			mx = fmaxf(mx, v);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		float mnew = fmaxf(m, mx);
		float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
		float sum = 0.0f;
		for (int j = 0; j < 32; j++) {
			float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - mnew);
			srow[j] = wmma::__float_to_tf32(p);
			sum += p;
		}
		/* the pair's halves in a fixed order: the lower half's sum first */
		float other = __shfl_xor_sync(0xffffffffu, sum, 1);
		sum = half ? other + sum : sum + other;
		l = l * alpha + sum;
		m = mnew;
		float *orow = Ow + r * LD + half * (D / 2);
		for (int j = 0; j < D / 2; j++)
			orow[j] *= alpha;
		__syncwarp();
		frag_c acc[D / 16];
		for (int n = 0; n < D / 16; n++)
			wmma::load_matrix_sync(acc[n], Ow + n * 16, LD, wmma::mem_row_major);
		mm_acc<D>(acc, Sw, Vs);
		for (int n = 0; n < D / 16; n++)
			wmma::store_matrix_sync(Ow + n * 16, acc[n], LD, wmma::mem_row_major);
		__syncwarp();
	}
	if (tq < T) {
		float inv = 1.0f / l;
		const float *orow = Ow + r * LD + half * (D / 2);
		float *o = out + (base + tq) * H + h * D + half * (D / 2);
		for (int j = 0; j < D / 2; j++)
			o[j] = orow[j] * inv;
		if (half == 0)
			lse[((int64_t)b * nh + h) * T + tq] = m + logf(l);
	}
}

/* ---- backward ------------------------------------------------------------------------ */

/* Dt[b, h, t] = dout_t . out_t over head h's D columns, in column order. */
__global__ void flash_dot_kernel(float *Dt, const float *dout, const float *out, int64_t B, int T, int H, int nh)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= B * nh * T)
		return;
	int t = (int)(i % T), h = (int)((i / T) % nh);
	int64_t b = i / ((int64_t)T * nh);
	int D = H / nh;
	const float *a = dout + (b * T + t) * H + h * D, *o = out + (b * T + t) * H + h * D;
	float s = 0.0f;
	for (int c = 0; c < D; c++)
		s += a[c] * o[c];
	Dt[i] = s;
}

template <int D>
__global__ void __launch_bounds__(FL_THREADS) flash_dq_kernel(float *dqkv, const float *dout, const float *qkv,
							       const float *lse, const float *Dt, int T, int H, int nh,
							       float scale)
{
	extern __shared__ __align__(32) float sm[];
	const int LD = D + 8;
	float *Qs = sm, *dOs = Qs + FL_TILE * LD, *Ks = dOs + FL_TILE * LD, *Vs = Ks + FL_TILE * LD;
	float *Ss = Vs + FL_TILE * LD, *Ps = Ss + FL_WARPS * 16 * FL_LS;
	const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int q0 = qt * FL_TILE;
	float *Sw = Ss + w * 16 * FL_LS, *dPw = Ps + w * 16 * FL_LS;
	load_tile<D>(Qs, qkv, base, q0, T, H, 0, h);
	load_rows<D>(dOs, dout, base, q0, T, H, h);
	const int r = lane >> 1, half = lane & 1, tq = q0 + w * 16 + r;
	const float lq = tq < T ? lse[hrow + tq] : 0.0f, dq_t = tq < T ? Dt[hrow + tq] : 0.0f;
	frag_c acc[D / 16];
	for (int n = 0; n < D / 16; n++)
		wmma::fill_fragment(acc[n], 0.0f);
	for (int kt = 0; kt <= qt; kt++) {
		const int k0 = kt * FL_TILE;
		__syncthreads();
		load_tile<D>(Ks, qkv, base, k0, T, H, 1, h);
		load_tile<D>(Vs, qkv, base, k0, T, H, 2, h);
		__syncthreads();
		mm_abt<D>(Sw, Qs + w * 16 * LD, Ks);
		mm_abt<D>(dPw, dOs + w * 16 * LD, Vs);
		__syncwarp();
		float *srow = Sw + r * FL_LS + half * 32, *prow = dPw + r * FL_LS + half * 32;
		for (int j = 0; j < 32; j++) {
			int tk = k0 + half * 32 + j;
			float p = (tk <= tq && tk < T && tq < T) ? expf(srow[j] * scale - lq) : 0.0f;
			srow[j] = wmma::__float_to_tf32(p * (prow[j] - dq_t)); /* dS */
		}
		__syncwarp();
		mm_acc<D>(acc, Sw, Ks);
		__syncwarp();
	}
	/* through shared memory (Sw's rows are free now) to scale and scatter the rows */
	float *stage = Qs + w * 16 * LD; /* this warp's own rows of Q, no longer read */
	__syncthreads();
	for (int n = 0; n < D / 16; n++)
		wmma::store_matrix_sync(stage + n * 16, acc[n], LD, wmma::mem_row_major);
	__syncwarp();
	if (tq < T) {
		const float *srow = stage + r * LD + half * (D / 2);
		float *dq = dqkv + (base + tq) * 3 * H + h * D + half * (D / 2);
		for (int j = 0; j < D / 2; j++)
			dq[j] = srow[j] * scale;
	}
}

template <int D>
__global__ void __launch_bounds__(FL_THREADS) flash_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
								const float *lse, const float *Dt, int T, int H, int nh,
								float scale)
{
	extern __shared__ __align__(32) float sm[];
	const int LD = D + 8;
	float *Ks = sm, *Vs = Ks + FL_TILE * LD, *Qs = Vs + FL_TILE * LD, *dOs = Qs + FL_TILE * LD;
	float *Ss = dOs + FL_TILE * LD, *Ps = Ss + FL_WARPS * 16 * FL_LS;
	float *lse_s = Ps + FL_WARPS * 16 * FL_LS, *dt_s = lse_s + FL_TILE;
	const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int64_t base = (int64_t)b * T, hrow = ((int64_t)b * nh + h) * T;
	const int k0 = kt * FL_TILE, nqt = (T + FL_TILE - 1) / FL_TILE;
	float *STw = Ss + w * 16 * FL_LS, *dPTw = Ps + w * 16 * FL_LS;
	load_tile<D>(Ks, qkv, base, k0, T, H, 1, h);
	load_tile<D>(Vs, qkv, base, k0, T, H, 2, h);
	/* lane pair per key row: lane r*2 + half takes 32 of the tile's query columns */
	const int r = lane >> 1, half = lane & 1, tk = k0 + w * 16 + r;
	frag_c dk[D / 16], dv[D / 16];
	for (int n = 0; n < D / 16; n++) {
		wmma::fill_fragment(dk[n], 0.0f);
		wmma::fill_fragment(dv[n], 0.0f);
	}
	for (int qt = kt; qt < nqt; qt++) {
		const int q0 = qt * FL_TILE;
		__syncthreads();
		load_tile<D>(Qs, qkv, base, q0, T, H, 0, h);
		load_rows<D>(dOs, dout, base, q0, T, H, h);
		for (int i = threadIdx.x; i < FL_TILE; i += FL_THREADS) {
			int t = q0 + i;
			lse_s[i] = t < T ? lse[hrow + t] : 0.0f;
			dt_s[i] = t < T ? Dt[hrow + t] : 0.0f;
		}
		__syncthreads();
		mm_abt<D>(STw, Ks + w * 16 * LD, Qs);  /* S^T: keys x queries */
		mm_abt<D>(dPTw, Vs + w * 16 * LD, dOs); /* dP^T */
		__syncwarp();
		float *srow = STw + r * FL_LS + half * 32, *prow = dPTw + r * FL_LS + half * 32;
		for (int j = 0; j < 32; j++) {
			int c = half * 32 + j, tq = q0 + c;
			float p = (tk <= tq && tq < T && tk < T) ? expf(srow[j] * scale - lse_s[c]) : 0.0f;
			srow[j] = wmma::__float_to_tf32(p);                       /* P^T */
			prow[j] = wmma::__float_to_tf32(p * (prow[j] - dt_s[c])); /* dS^T */
		}
		__syncwarp();
		mm_acc<D>(dv, STw, dOs);
		mm_acc<D>(dk, dPTw, Qs);
		__syncwarp();
	}
	__syncthreads();
	float *stage = Qs + w * 16 * LD; /* Q is no longer read: each warp its own 16 rows */
	for (int pass = 0; pass < 2; pass++) {
		for (int n = 0; n < D / 16; n++)
			wmma::store_matrix_sync(stage + n * 16, pass ? dv[n] : dk[n], LD, wmma::mem_row_major);
		__syncwarp();
		if (tk < T) {
			const float *srow = stage + r * LD + half * (D / 2);
			float *o = dqkv + (base + tk) * 3 * H + (pass ? 2 : 1) * H + h * D + half * (D / 2);
			float f = pass ? 1.0f : scale;
			for (int j = 0; j < D / 2; j++)
				o[j] = srow[j] * f;
		}
		__syncwarp();
	}
}

/* ---- launchers ------------------------------------------------------------------------ */

static size_t fwd_smem(int D) { return ((size_t)3 * FL_TILE * (D + 8) + FL_WARPS * 16 * FL_LS + FL_WARPS * 16 * (D + 8)) * 4; }
static size_t dq_smem(int D) { return ((size_t)4 * FL_TILE * (D + 8) + 2 * FL_WARPS * 16 * FL_LS) * 4; }
static size_t dkv_smem(int D) { return ((size_t)4 * FL_TILE * (D + 8) + 2 * FL_WARPS * 16 * FL_LS + 2 * FL_TILE) * 4; }

template <typename K> static int set_smem(K kernel, size_t bytes, const char *op, const char *name)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	return e == cudaSuccess ? QE_OK : qe__cuda_err(e, op, name);
}

template <int D>
static int fwd_launch(qe_stream *s, float *out, float *lse, const float *qkv, int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_fwd";
	size_t sm = fwd_smem(D);
	int rc = set_smem(flash_fwd_kernel<D>, sm, op, "cudaFuncSetAttribute(flash_fwd_kernel)");
	if (rc)
		return rc;
	dim3 grid((unsigned)((T + FL_TILE - 1) / FL_TILE), (unsigned)nh, (unsigned)B);
	flash_fwd_kernel<D><<<grid, FL_THREADS, sm, s->cs>>>(out, lse, qkv, T, H, nh, 1.0f / sqrtf((float)D));
	return qe__cuda_launched(op, "flash_fwd_kernel");
}

template <int D>
static int bwd_launch(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *lse, const float *Dt,
		      int64_t B, int T, int H, int nh)
{
	const char *op = "attn_flash_bwd";
	int rc;
	if ((rc = set_smem(flash_dq_kernel<D>, dq_smem(D), op, "cudaFuncSetAttribute(flash_dq_kernel)")) ||
	    (rc = set_smem(flash_dkv_kernel<D>, dkv_smem(D), op, "cudaFuncSetAttribute(flash_dkv_kernel)")))
		return rc;
	dim3 grid((unsigned)((T + FL_TILE - 1) / FL_TILE), (unsigned)nh, (unsigned)B);
	float scale = 1.0f / sqrtf((float)D);
	flash_dq_kernel<D><<<grid, FL_THREADS, dq_smem(D), s->cs>>>(dqkv, dout, qkv, lse, Dt, T, H, nh, scale);
	if ((rc = qe__cuda_launched(op, "flash_dq_kernel")))
		return rc;
	flash_dkv_kernel<D><<<grid, FL_THREADS, dkv_smem(D), s->cs>>>(dqkv, dout, qkv, lse, Dt, T, H, nh, scale);
	return qe__cuda_launched(op, "flash_dkv_kernel");
}

static int aligned16(const char *op, const char *name, const void *p)
{
	if ((uintptr_t)p & 15)
		return qe_fail(QE_EINVAL, "%s: %s at %p is not 16-byte aligned (the kernels load float4)", op, name, p);
	return QE_OK;
}

extern "C" int qe__cuda_attn_flash_fwd(qe_stream *s, float *out, float *lse, const float *qkv, int64_t B, int64_t T,
				       int64_t H, int nh)
{
	if (B * T == 0)
		return QE_OK;
	int rc = aligned16("attn_flash_fwd", "qkv", qkv);
	if (rc)
		return rc;
	if (T > INT32_MAX / 4 || 3 * H > INT32_MAX || B > 65535)
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_fwd: batch %lld x T %lld x H %lld is too large", (long long)B,
			       (long long)T, (long long)H);
	switch (H / nh) {
	case 16:
		return fwd_launch<16>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	case 32:
		return fwd_launch<32>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	case 64:
		return fwd_launch<64>(s, out, lse, qkv, B, (int)T, (int)H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "attn_flash_fwd: head dimension %lld", (long long)(H / nh));
	}
}

extern "C" int qe__cuda_attn_flash_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv,
				       const float *out, const float *lse, int64_t B, int64_t T, int64_t H, int nh)
{
	const char *op = "attn_flash_bwd";
	if (B * T == 0)
		return QE_OK;
	if (T > INT32_MAX / 4 || 3 * H > INT32_MAX || B > 65535)
		return qe_fail(QE_EUNSUPPORTED, "%s: batch %lld x T %lld x H %lld is too large", op, (long long)B,
			       (long long)T, (long long)H);
	float *Dt = NULL;
	int64_t rows = B * nh * T;
	int rc;
	if ((rc = aligned16(op, "qkv", qkv)) || (rc = aligned16(op, "dout", dout)))
		return rc;
	if ((rc = qe__cuda_scratch(s, (size_t)rows * sizeof(float), op, (void **)&Dt)))
		return rc;
	flash_dot_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, s->cs>>>(Dt, dout, out, B, (int)T, (int)H, nh);
	if ((rc = qe__cuda_launched(op, "flash_dot_kernel")))
		return rc;
	switch (H / nh) {
	case 16:
		return bwd_launch<16>(s, dqkv, dout, qkv, lse, Dt, B, (int)T, (int)H, nh);
	case 32:
		return bwd_launch<32>(s, dqkv, dout, qkv, lse, Dt, B, (int)T, (int)H, nh);
	case 64:
		return bwd_launch<64>(s, dqkv, dout, qkv, lse, Dt, B, (int)T, (int)H, nh);
	default:
		return qe_fail(QE_EUNSUPPORTED, "%s: head dimension %lld", op, (long long)(H / nh));
	}
}
