/*
 * cuda_layernorm_bwd.cu - the layernorm backward and the column sums of
 * colsum.h (bias gradients, and the layernorm's weight and bias gradients);
 * the forward is in cuda_layernorm.cu, what both use in cuda_layernorm.cuh.
 *
 * Same formulas as the cpu reference (cpu_kernels.c), written operation for
 * operation in the same order under -fmad=false (CMakeLists.txt): the
 * column sums (bias_grad, the layernorm's weight and bias gradients) give
 * the cpu's bits; the rows' means of dx's terms are fixed-shape trees,
 * repeatable to the bit and within rounding of the cpu.  No atomics where
 * order matters: column sums follow colsum.h's groups and runs.
 *
 * x, dx and the residual are of the residual stream's type (f32 or bf16)
 * and dy of its own: a bf16 value is widened exactly as it is read, the
 * arithmetic is f32, and a bf16 dx is rounded once as it is stored.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "runtime/backend/colsum.h"
#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"
#include "runtime/backend/cuda/cuda_layernorm.cuh"
#include "runtime/backend/cuda/cuda_reduce.cuh"

/* Column sums: a block covers 32 columns, one thread per (column, row group of colsum.h). */
#define COL_THREADS 32

/*
 * Column sums in colsum.h's order, in two kernels.  colsum_part_kernel:
 * thread (x, y) of block (bx, by) sums row group g = by*8 + y of column
 * j = bx*32 + x (a warp reads 32 neighbouring floats of a row) into
 * part[g*cols + j], in runs of `run` rows (0: the group is one run);
 * db's partial is the sum of dy, dw's (when asked for) the
 * sum of the layernorm weight gradient's nrm * dy with nrm = (x - mean) *
 * rstd - the cpu's expressions.  colsum_fin_kernel (below) adds column j's
 * partials in group order from 0.  dy and x are each f32 or bf16 (DY, X).
 */
#define COL_GROUPS_PER_BLOCK 8
template <typename DY, typename X>
__global__ void colsum_part_kernel(float *__restrict__ pw, float *__restrict__ pb, const DY *__restrict__ dy,
				   const X *__restrict__ x, const float *__restrict__ mean,
				   const float *__restrict__ rstd, int64_t rows, int64_t cols, int64_t groups, int run)
{
	int64_t j = (int64_t)blockIdx.x * COL_THREADS + threadIdx.x;
	int64_t g = (int64_t)blockIdx.y * COL_GROUPS_PER_BLOCK + threadIdx.y;
	if (j >= cols || g >= groups)
		return;
	float aw = 0.0f, ab = 0.0f, rw = 0.0f, rb = 0.0f;
	int64_t r0 = qe_colsum_group_start(rows, g), r1 = qe_colsum_group_start(rows, g + 1);
	int left = run > 0 ? run : QE_COLSUM_ROWS; /* rows left in the run */
#pragma unroll 4
	for (int64_t r = r0; r < r1; r++) {
		float v = ld1(dy, r * cols + j);
		rb += v;
		if (pw) {
			float nrm = (ld1(x, r * cols + j) - mean[r]) * rstd[r];
			rw += nrm * v;
		}
		if (--left == 0 || r + 1 == r1) { /* the run ends */
			aw += rw;
			ab += rb;
			rw = rb = 0.0f;
			left = run > 0 ? run : QE_COLSUM_ROWS;
		}
	}
	if (pw)
		pw[g * cols + j] = aw;
	pb[g * cols + j] = ab;
}

/*
 * colsum_fin_kernel: block (32 columns) x (32 loaders).  The partials of a
 * chunk of up to FIN_CHUNK groups are loaded by all 1024 threads at once into
 * shared memory (one thread, one group: every load in flight together), then
 * the column's thread of row 0 adds them in group order onto its running sum
 * from 0.  One thread a column walking the groups itself (the kernel before
 * this one) waited on a dependent chain of loads: 9 us a call at 128 groups
 * with 6 blocks busy.
 */
#define FIN_CHUNK 128
#define FIN_BATCH 16
__global__ void __launch_bounds__(1024) colsum_fin_kernel(float *__restrict__ dw, float *__restrict__ db,
							  const float *__restrict__ pw, const float *__restrict__ pb,
							  int64_t cols, int64_t groups)
{
	__shared__ float sb[FIN_CHUNK][COL_THREADS], sw[FIN_CHUNK][COL_THREADS];
	const int x = threadIdx.x, y = threadIdx.y;
	int64_t j = (int64_t)blockIdx.x * COL_THREADS + x;
	float accb = 0.0f, accw = 0.0f;
	for (int64_t g0 = 0; g0 < groups; g0 += FIN_CHUNK) {
		int n = groups - g0 < FIN_CHUNK ? (int)(groups - g0) : FIN_CHUNK;
		if (j < cols)
			for (int u = y; u < n; u += COL_THREADS) {
				sb[u][x] = pb[(g0 + u) * cols + j];
				if (pw)
					sw[u][x] = pw[(g0 + u) * cols + j];
			}
		__syncthreads();
		if (y == 0 && j < cols) {
			/*
			 * FIN_BATCH partials read before they are added (in the same order): one
			 * shared-memory load waited on per add made the sum a chain of loads
			 */
			int u = 0;
			for (; u + FIN_BATCH <= n; u += FIN_BATCH) {
				float b[FIN_BATCH], w[FIN_BATCH];
#pragma unroll
				for (int k = 0; k < FIN_BATCH; k++) {
					b[k] = sb[u + k][x];
					w[k] = pw ? sw[u + k][x] : 0.0f;
				}
#pragma unroll
				for (int k = 0; k < FIN_BATCH; k++) {
					accb += b[k];
					if (pw)
						accw += w[k];
				}
			}
			for (; u < n; u++) {
				accb += sb[u][x];
				if (pw)
					accw += sw[u][x];
			}
		}
		__syncthreads();
	}
	if (y == 0 && j < cols) {
		if (dw)
			dw[j] = accw;
		if (db)
			db[j] = accb;
	}
}

/*
 * dx of one row per block (+ the residual's gradient, when given, as add
 * would).  dx and residual are of x's type X, the residual stream's: the
 * sum is f32 and a bf16 dx is rounded once, as it is stored.  residual may
 * be dx: each element is read before the same thread writes it.
 */
template <typename DY, typename X>
__global__ void layernorm_bwd_dx_kernel(X *dx, const DY *dy, const X *x, const float *mean, const float *rstd,
					const float *w, const X *residual, int64_t cols)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const DY *dyr = dy + r * cols;
	const X *xr = x + r * cols;
	X *dxr = dx + r * cols;
	float m = mean[r], s = rstd[r];
	float p1 = 0.0f, p2 = 0.0f;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
		float nrm = (ld1(xr, i) - m) * s;
		float dn = w[i] * ld1(dyr, i);
		p1 += dn;
		p2 += dn * nrm;
	}
	float dnorm_mean = block_sum(p1, sh) / (float)cols;
	float dnorm_norm_mean = block_sum(p2, sh) / (float)cols;
	for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
		float nrm = (ld1(xr, i) - m) * s;
		float dn = w[i] * ld1(dyr, i);
		float dval = dn - dnorm_mean - nrm * dnorm_norm_mean;
		float g = dval * s;
		st1(dxr, i, residual ? ld1(residual, r * cols + i) + g : g);
	}
}

/* a float4 of a row's layernorm backward terms: nrm = (x - mean) rstd and w dy (the cpu's expressions) */
__device__ __forceinline__ void ln_bwd_terms(float4 xv, float4 g, float4 wv, float m, float s, float4 *nv, float4 *dv)
{
	*nv = make_float4((xv.x - m) * s, (xv.y - m) * s, (xv.z - m) * s, (xv.w - m) * s);
	*dv = make_float4(wv.x * g.x, wv.y * g.y, wv.z * g.z, wv.w * g.w);
}

/* dx of a float4 from its terms and the row's means of w dy (dm) and of w dy nrm (dnm) */
__device__ __forceinline__ float4 ln_bwd_dx4(float4 dv, float4 nv, float dm, float dnm, float s)
{
	return make_float4((dv.x - dm - nv.x * dnm) * s, (dv.y - dm - nv.y * dnm) * s, (dv.z - dm - nv.z * dnm) * s,
			   (dv.w - dm - nv.w * dnm) * s);
}

/*
 * Float4 i of row r's dx from its terms, plus the residual's (row r of
 * residual, of type X, when not NULL) in f32, stored at dxr once, rounded
 * when X is bf16.
 */
template <typename X>
__device__ __forceinline__ void ln_bwd_put4(X *dxr, const X *residual, int64_t r, int64_t c4, int64_t i, float4 dv,
					    float4 nv, float dm, float dnm, float s, bool al)
{
	float4 o = ln_bwd_dx4(dv, nv, dm, dnm, s);
	if (residual) {
		float4 q = ld4(residual + r * c4 * 4, i, al);
		o = make_float4(q.x + o.x, q.y + o.y, q.z + o.z, q.w + o.w);
	}
	put4(dxr, i, o, al);
}

/*
 * dx of one row per block, nrm and w * dy held in registers as in the
 * forward; dx and residual of type X as in layernorm_bwd_dx_kernel (put4
 * stores a bf16 float4 as one 8-byte word when al; the value it returns,
 * the stored one widened, is not needed here).
 */
template <typename DY, typename X>
__global__ void layernorm_bwd_dx_vec_kernel(X *dx, const DY *dy, const X *x, const float *mean, const float *rstd,
					    const float *w, const X *residual, int64_t c4, bool al)
{
	__shared__ float sh[32];
	int64_t r = blockIdx.x;
	const DY *dyr = dy + r * c4 * 4;
	const X *xr = x + r * c4 * 4;
	X *dxr = dx + r * c4 * 4;
	float m = mean[r], s = rstd[r];
	float cols = (float)(c4 * 4);
	float4 nv[LN_VEC_MAX], dv[LN_VEC_MAX];
	float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4) {
			float4 g = ld4(dyr, i, al);
			ln_bwd_terms(ld4(xr, i, al), g, ld4(w, i, al), m, s, &nv[k], &dv[k]);
			p1 = sum4(p1, dv[k]);
			p2 = sum4(p2, make_float4(dv[k].x * nv[k].x, dv[k].y * nv[k].y, dv[k].z * nv[k].z,
						  dv[k].w * nv[k].w));
		}
	}
	float dnorm_mean = block_sum(p1, sh) / cols;
	float dnorm_norm_mean = block_sum(p2, sh) / cols;
#pragma unroll
	for (int k = 0; k < LN_VEC_MAX; k++) {
		int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
		if (i < c4)
			ln_bwd_put4(dxr, residual, r, c4, i, dv[k], nv[k], dnorm_mean, dnorm_norm_mean, s, al);
	}
}

/*
 * layernorm_bwd's dx a warp a row, nrm and w * dy in registers (+ the
 * residual's gradient, when given), and a block a row group of colsum.h:
 * warp u takes the group's run u (QE_COLSUM_RUN rows, in order).  With pb
 * (and pw for dw), each lane also sums its columns' dy (and nrm * dy) over
 * its warp's run as the rows go by, and the block adds its runs in order
 * through shared memory into the group's partials (colsum_fin_kernel adds
 * the groups): the column sums take no second pass over dy and x, which
 * cost a gpt2 batch-16 step 25 x 39 us.  A lane holds float4s lane,
 * lane + 32, ... of a row (K of them at most, c4 in all).  dx and residual
 * are of type X as in layernorm_bwd_dx_kernel (residual may be dx: a lane
 * reads its float4 of residual before it stores that float4 of dx).
 */
#define LN_BWD_WARPS (QE_COLSUM_ROWS / QE_COLSUM_RUN)
template <int K, typename DY, typename X>
__global__ void __launch_bounds__(32 * LN_BWD_WARPS)
	layernorm_bwd_warp_kernel(X *dx, float *pw, float *pb, const DY *dy, const X *x, const float *mean,
				  const float *rstd, const float *w, const X *residual, int64_t rows, int64_t c4,
				  bool al)
{
	extern __shared__ float4 run_sums[]; /* [2][LN_BWD_WARPS][c4]: the runs' sums of nrm * dy, then of dy */
	const int lane = threadIdx.x & 31, u = threadIdx.x >> 5;
	const int64_t g = blockIdx.x, r0 = g * QE_COLSUM_ROWS + (int64_t)u * QE_COLSUM_RUN;
	const float cols = (float)(c4 * 4);
	float4 sw[K], sb[K];
#pragma unroll
	for (int k = 0; k < K; k++)
		sw[k] = sb[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int64_t r = r0; r < r0 + QE_COLSUM_RUN && r < rows; r++) {
		const DY *dyr = dy + r * c4 * 4;
		const X *xr = x + r * c4 * 4;
		X *dxr = dx + r * c4 * 4;
		float m = mean[r], s = rstd[r];
		float4 nv[K], dv[K];
		float p1 = 0.0f, p2 = 0.0f;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int64_t i = lane + 32 * k;
			if (i < c4) {
				float4 gv = ld4(dyr, i, al);
				ln_bwd_terms(ld4(xr, i, al), gv, ld4(w, i, al), m, s, &nv[k], &dv[k]);
				p1 = sum4(p1, dv[k]);
				p2 = sum4(p2, make_float4(dv[k].x * nv[k].x, dv[k].y * nv[k].y, dv[k].z * nv[k].z,
							  dv[k].w * nv[k].w));
				sb[k] = make_float4(sb[k].x + gv.x, sb[k].y + gv.y, sb[k].z + gv.z, sb[k].w + gv.w);
				sw[k] = make_float4(sw[k].x + nv[k].x * gv.x, sw[k].y + nv[k].y * gv.y,
						    sw[k].z + nv[k].z * gv.z, sw[k].w + nv[k].w * gv.w);
			}
		}
		float dnorm_mean = warp_sum(p1) / cols;
		float dnorm_norm_mean = warp_sum(p2) / cols;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int64_t i = lane + 32 * k;
			if (i < c4)
				ln_bwd_put4(dxr, residual, r, c4, i, dv[k], nv[k], dnorm_mean, dnorm_norm_mean, s, al);
		}
	}
	if (!pb)
		return; /* the whole block */
	float4 *rw = run_sums + u * c4, *rb = run_sums + (LN_BWD_WARPS + u) * c4;
#pragma unroll
	for (int k = 0; k < K; k++) {
		int64_t i = lane + 32 * k;
		if (i < c4) {
			rw[i] = sw[k];
			rb[i] = sb[k];
		}
	}
	__syncthreads();
	/* the group's runs that hold rows, added in order from 0 */
	int64_t in_group = rows - g * QE_COLSUM_ROWS < QE_COLSUM_ROWS ? rows - g * QE_COLSUM_ROWS : QE_COLSUM_ROWS;
	int nrun = (int)((in_group + QE_COLSUM_RUN - 1) / QE_COLSUM_RUN);
	const float *fw = (const float *)run_sums, *fb = fw + LN_BWD_WARPS * c4 * 4;
	for (int64_t j = threadIdx.x; j < c4 * 4; j += blockDim.x) {
		float aw = 0.0f, ab = 0.0f;
		for (int v = 0; v < nrun; v++) {
			aw += fw[v * c4 * 4 + j];
			ab += fb[v * c4 * 4 + j];
		}
		if (pw)
			pw[g * c4 * 4 + j] = aw;
		pb[g * c4 * 4 + j] = ab;
	}
}

/*
 * Column sums of dy into db and (x != NULL) of the layernorm weight
 * gradient into dw, in colsum.h's order; the partials live in the stream's
 * scratch.
 */
template <typename DY, typename X>
static int colsum_run(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
		      const float *mean, const float *rstd, int64_t rows, int64_t cols, float *part, int run);

template <typename DY, typename X>
static int colsum_launch(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
			 const float *mean, const float *rstd, int64_t rows, int64_t cols, int run)
{
	int64_t groups = qe_colsum_groups(rows);
	float *part = NULL;
	int rc = qe__cuda_scratch(s, (size_t)(x ? 2 : 1) * (size_t)(groups * cols) * sizeof(float), op, (void **)&part);
	if (rc)
		return rc;
	return colsum_run(s, op, dw, db, dy, x, mean, rstd, rows, cols, part, run);
}

extern "C" int qe__cuda_colsum_with(qe_stream *s, const char *op, float *db, const float *dy, int64_t rows,
				    int64_t cols, float *part)
{
	if (cols == 0)
		return QE_OK;
	return colsum_run<float, float>(s, op, NULL, db, dy, NULL, NULL, NULL, rows, cols, part, 0);
}

/* colsum_launch's kernels over the partials buffer part (groups x cols floats, twice with x); runs of run rows */
template <typename DY, typename X>
static int colsum_run(qe_stream *s, const char *op, float *dw, float *db, const DY *dy, const X *x,
		      const float *mean, const float *rstd, int64_t rows, int64_t cols, float *part, int run)
{
	int rc;
	int64_t groups = qe_colsum_groups(rows);
	if ((cols + COL_THREADS - 1) / COL_THREADS > INT32_MAX ||
	    (groups + COL_GROUPS_PER_BLOCK - 1) / COL_GROUPS_PER_BLOCK > 65535)
		return qe_fail(QE_EUNSUPPORTED, "%s: column sums of %lld x %lld", op, (long long)rows, (long long)cols);
	float *pb = part, *pw = x ? part + groups * cols : NULL;
	dim3 grid((unsigned)((cols + COL_THREADS - 1) / COL_THREADS),
		  (unsigned)((groups + COL_GROUPS_PER_BLOCK - 1) / COL_GROUPS_PER_BLOCK));
	colsum_part_kernel<<<grid, dim3(COL_THREADS, COL_GROUPS_PER_BLOCK), 0, s->cs>>>(pw, pb, dy, x, mean, rstd, rows,
											   cols, groups, run);
	if ((rc = qe__cuda_launched(op, "colsum_part_kernel")))
		return rc;
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(dw, db, pw, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

extern "C" int qe__cuda_colsum_finish(qe_stream *s, const char *op, float *db, const float *pb, int64_t groups,
				      int64_t cols)
{
	if ((cols + COL_THREADS - 1) / COL_THREADS > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: column sums over %lld columns", op, (long long)cols);
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(NULL, db, NULL, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

extern "C" int qe__cuda_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols)
{
	if (cols == 0)
		return QE_OK;
	return colsum_launch<float, float>(s, "bias_grad", NULL, db, dy, NULL, NULL, NULL, rows, cols, 0);
}

/*
 * layernorm_bwd for rows of k float4s a lane at most (1 <= k <= 8): dx and,
 * when dw or db is asked for, the groups' partials in one kernel, then
 * colsum_fin_kernel over them.
 */
template <typename DY, typename X>
static int ln_bwd_warp(qe_stream *s, X *dx, float *dw, float *db, const DY *dy, const X *x, const float *mean,
		       const float *rstd, const float *w, int64_t rows, int64_t cols, const X *residual, int k)
{
	const char *op = "layernorm_bwd";
	int64_t groups = qe_colsum_groups(rows);
	float *part = NULL;
	size_t smem = 0;
	int rc;
	if (dw || db) {
		if ((rc = qe__cuda_scratch(s, (size_t)(2 * groups * cols) * sizeof(float), op, (void **)&part)))
			return rc;
		smem = (size_t)(2 * LN_BWD_WARPS * cols) * sizeof(float);
	}
	float *pb = part, *pw = part && dw ? part + groups * cols : NULL;
	bool al = al4(dx) && al4(dy) && al4(x) && al4(w) && al4(residual);
	cudaError_t e = cudaSuccess;
#define LN_BWD_CASE(KK)                                                                                        \
	case KK:                                                                                               \
		e = cudaFuncSetAttribute(layernorm_bwd_warp_kernel<KK, DY, X>,                                \
					 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);              \
		if (e == cudaSuccess)                                                                          \
			layernorm_bwd_warp_kernel<KK, DY, X><<<(unsigned)groups, 32 * LN_BWD_WARPS, smem, s->cs>>>( \
				dx, pw, pb, dy, x, mean, rstd, w, residual, rows, cols / 4, al);                 \
		break;
	switch (k) {
		LN_BWD_CASE(1)
		LN_BWD_CASE(2)
		LN_BWD_CASE(3)
		LN_BWD_CASE(4)
		LN_BWD_CASE(5)
		LN_BWD_CASE(6)
		LN_BWD_CASE(7)
		LN_BWD_CASE(8)
	}
#undef LN_BWD_CASE
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaFuncSetAttribute(layernorm_bwd_warp_kernel)");
	if ((rc = qe__cuda_launched(op, "layernorm_bwd_warp_kernel")) || !part)
		return rc;
	colsum_fin_kernel<<<(unsigned)((cols + COL_THREADS - 1) / COL_THREADS), dim3(COL_THREADS, COL_THREADS), 0,
			    s->cs>>>(dw, db, pw, pb, cols, groups);
	return qe__cuda_launched(op, "colsum_fin_kernel");
}

/*
 * layernorm_bwd with dy of type DY and x of type X (each float, or bf16
 * widened as it is read); dx and residual are X's too.  al4 of dx and
 * residual is X's alignment, so a bf16 dx takes the four-wide path when
 * 8-byte aligned.
 */
template <typename DY, typename X>
static int ln_bwd(qe_stream *s, X *dx, float *dw, float *db, const DY *dy, const X *x, const float *mean,
		  const float *rstd, const float *w, int64_t rows, int64_t cols, const X *residual)
{
	const char *op = "layernorm_bwd";
	int rc;
	if (rows > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "layernorm_bwd: %lld rows", (long long)rows);
	if (rows > 0 && cols > 0) {
		unsigned lt;
		int k = cols % 4 == 0 ? (int)((cols / 4 + 31) / 32) : 0; /* float4s a lane, when a row is whole float4s */
		if (k >= 1 && k <= 8)
			return ln_bwd_warp<DY, X>(s, dx, dw, db, dy, x, mean, rstd, w, rows, cols, residual, k);
		if (ln_vec_threads(cols, &lt)) {
			bool al = al4(dx) && al4(dy) && al4(x) && al4(w) && al4(residual);
			layernorm_bwd_dx_vec_kernel<DY, X><<<(unsigned)rows, lt, 0, s->cs>>>(dx, dy, x, mean, rstd, w,
											    residual, cols / 4, al);
			rc = qe__cuda_launched(op, "layernorm_bwd_dx_vec_kernel");
		} else {
			layernorm_bwd_dx_kernel<DY, X><<<(unsigned)rows, row_threads(cols), 0, s->cs>>>(
				dx, dy, x, mean, rstd, w, residual, cols);
			rc = qe__cuda_launched(op, "layernorm_bwd_dx_kernel");
		}
		if (rc)
			return rc;
	}
	if (cols > 0 && (dw || db))
		return colsum_launch<DY, X>(s, op, dw, db, dy, dw ? x : NULL, mean, rstd, rows, cols, QE_COLSUM_RUN);
	return QE_OK;
}

/* layernorm_bwd with dy of type DY; x, dx and residual of x_dt */
template <typename DY>
static int ln_bwd_x(qe_stream *s, void *dx, float *dw, float *db, const DY *dy, const void *x, qe_dtype x_dt,
		    const float *mean, const float *rstd, const float *w, int64_t rows, int64_t cols,
		    const void *residual)
{
	if (x_dt == QE_BF16)
		return ln_bwd(s, (__nv_bfloat16 *)dx, dw, db, dy, (const __nv_bfloat16 *)x, mean, rstd, w, rows, cols,
			      (const __nv_bfloat16 *)residual);
	return ln_bwd(s, (float *)dx, dw, db, dy, (const float *)x, mean, rstd, w, rows, cols, (const float *)residual);
}

extern "C" int qe__cuda_layernorm_bwd(qe_stream *s, void *dx, float *dw, float *db, const void *dy, qe_dtype dy_dt,
				      const void *x, qe_dtype x_dt, const float *mean, const float *rstd,
				      const float *w, int64_t rows, int64_t cols, const void *residual)
{
	if (dy_dt == QE_BF16)
		return ln_bwd_x(s, dx, dw, db, (const __nv_bfloat16 *)dy, x, x_dt, mean, rstd, w, rows, cols, residual);
	return ln_bwd_x(s, dx, dw, db, (const float *)dy, x, x_dt, mean, rstd, w, rows, cols, residual);
}
