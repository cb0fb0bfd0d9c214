/*
 * cuda_optim.cu - the optimizer's ops: AdamW over a parameter's gradient
 * views (summed in view order per element), AdamW over many parameters in
 * one launch (adamw_many), each segment's squared gradient norm for
 * clipping (grad_sumsq, in adamw_many's chunks), and the view sum of the data parallel replica
 * sum, operation for operation as the cpu reference (cpu_kernels.c;
 * -fmad=false, so the bits are the cpu's), with float4 loads and stores on
 * 16-byte aligned buffers.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"

typedef struct views_arg {
	const float *p[QE_CUDA_MAX_VIEWS];
} views_arg;

/* What every element of one optimizer op shares; b1c, b2c = 1 - beta^step, made on the host with the cpu's powf. */
typedef struct adamw_hyper {
	float lr, beta1, beta2, eps, b1c, b2c, grad_scale;
} adamw_hyper;

static adamw_hyper adamw_hyper_of(float lr, float beta1, float beta2, float eps, int64_t step, float grad_scale)
{
	adamw_hyper h;
	h.lr = lr;
	h.beta1 = beta1;
	h.beta2 = beta2;
	h.eps = eps;
	h.b1c = 1.0f - powf(beta1, (float)step);
	h.b2c = 1.0f - powf(beta2, (float)step);
	h.grad_scale = grad_scale;
	return h;
}

__device__ __forceinline__ float adamw1(float *pp, float *mp, float *vp, float grad, const adamw_hyper &h, float wd)
{
	float p = *pp;
	float m = h.beta1 * *mp + (1.0f - h.beta1) * grad;
	float v = h.beta2 * *vp + (1.0f - h.beta2) * grad * grad;
	float mhat = m / h.b1c;
	float vhat = v / h.b2c;
	*mp = m;
	*vp = v;
	return p - h.lr * (mhat / (sqrtf(vhat) + h.eps) + wd * p);
}

/*
 * Element i: the views summed in view order, scaled, then the update -
 * qe_cpu_adamw's order.  *acc += the scaled gradient squared, as
 * grad_sumsq_kernel adds it (unused by the kernels that do not want it).
 */
__device__ __forceinline__ void adamw_at(float *param, float *mom, float *var, const float *const *g, int nviews,
					 int64_t i, const adamw_hyper &h, float wd, float *acc)
{
	float grad = g[0][i];
	for (int vi = 1; vi < nviews; vi++)
		grad += g[vi][i];
	grad = grad * h.grad_scale;
	*acc += grad * grad;
	param[i] = adamw1(&param[i], &mom[i], &var[i], grad, h, wd);
}

/* Elements 4i..4i+3 as adamw_at does each (x, y, z, w in turn), through float4 loads and stores. */
__device__ __forceinline__ void adamw4_at(float4 *param, float4 *mom, float4 *var, const float *const *g, int nviews,
					  int64_t i, const adamw_hyper &h, float wd, float *acc)
{
	float4 gr = ((const float4 *)g[0])[i];
	for (int vi = 1; vi < nviews; vi++) {
		float4 u = ((const float4 *)g[vi])[i];
		gr = make_float4(gr.x + u.x, gr.y + u.y, gr.z + u.z, gr.w + u.w);
	}
	float x = gr.x * h.grad_scale, y = gr.y * h.grad_scale, z = gr.z * h.grad_scale, w = gr.w * h.grad_scale;
	*acc += x * x;
	*acc += y * y;
	*acc += z * z;
	*acc += w * w;
	float4 p = param[i], m = mom[i], v = var[i];
	float4 np;
	np.x = adamw1(&p.x, &m.x, &v.x, x, h, wd);
	np.y = adamw1(&p.y, &m.y, &v.y, y, h, wd);
	np.z = adamw1(&p.z, &m.z, &v.z, z, h, wd);
	np.w = adamw1(&p.w, &m.w, &v.w, w, h, wd);
	mom[i] = m;
	var[i] = v;
	param[i] = np;
}

/* __grid_constant__: the views are read where the launch put them, not copied to local memory. */
__global__ void adamw_kernel(float *param, float *mom, float *var, const __grid_constant__ views_arg g, int nviews,
			     int64_t n, adamw_hyper h, float wd)
{
	float acc = 0.0f;
	GRID_STRIDE(i, n)
	adamw_at(param, mom, var, g.p, nviews, i, h, wd, &acc);
}

__global__ void adamw4_kernel(float4 *param, float4 *mom, float4 *var, const __grid_constant__ views_arg g,
			      int nviews, int64_t n4, adamw_hyper h, float wd)
{
	float acc = 0.0f;
	GRID_STRIDE(i, n4)
	adamw4_at(param, mom, var, g.p, nviews, i, h, wd, &acc);
}

/*
 * The segments of one adamw_many launch, by value, as fp8_update_many passes
 * its role blocks: a captured graph keeps the kernel's arguments, so a replay
 * reads neither the caller's table (freed or changed by then) nor a device
 * copy of it that a later call on the stream could overwrite.  That takes
 * 24 KB of kernel parameters: over the 4 KB of drivers before CUDA 12.1,
 * within the 32764 bytes it allows from Volta on.
 *
 * Every segment has at least one block (the launcher leaves out empty ones).
 * Block b of the grid works on segment s, the last with block0[s] <= b, and
 * there on units [(b - block0[s]) * ADAMW_CHUNK, + ADAMW_CHUNK): a unit is a
 * float4 when vec[s] (param, m, v at off[s] and every view 16-byte aligned,
 * n[s] a multiple of 4), else a float.  So big and tiny segments share one
 * grid, and a block's segment costs a search of the prefix table.
 */
#define ADAMW_CHUNK (4 * THREADS)

struct adamw_batch {
	int64_t off[QE_CUDA_ADAMW_SEGS];
	int64_t n[QE_CUDA_ADAMW_SEGS];
	float wd[QE_CUDA_ADAMW_SEGS];
	int view0[QE_CUDA_ADAMW_SEGS]; /* the segment's first view in views */
	int nviews[QE_CUDA_ADAMW_SEGS];
	int vec[QE_CUDA_ADAMW_SEGS];
	int block0[QE_CUDA_ADAMW_SEGS + 1]; /* block0[nseg]: the grid */
	int seg[QE_CUDA_ADAMW_SEGS];        /* the segment's index in the op's table (grad_sumsq's out) */
	int nseg;
	const float *views[QE_CUDA_ADAMW_VIEWS];
};
static_assert(sizeof(adamw_batch) + 128 <= 32764, "adamw_many's kernel parameters exceed CUDA's 32764 bytes");

/* The batch's segment of block bx: the last with block0[s] <= bx. */
__device__ __forceinline__ int batch_segment(const adamw_batch &b, int bx)
{
	int lo = 0, hi = b.nseg - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (b.block0[mid] <= bx)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The block's threads' sums added in a fixed tree into partial[bx] (grad_sumsq_kernel's tree). */
__device__ __forceinline__ void block_partial(float acc, float *partial, int bx)
{
	__shared__ float red[THREADS];
	red[threadIdx.x] = acc;
	__syncthreads();
	for (int w = THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			red[threadIdx.x] += red[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[bx] = red[0];
}

/* SUMSQ: also the chunk's squared gradient sum into partial[bx], as grad_sumsq_kernel writes it. */
template <bool SUMSQ>
__global__ void __launch_bounds__(THREADS) adamw_many_kernel(float *param, float *mom, float *var,
							     const __grid_constant__ adamw_batch b, adamw_hyper h,
							     float *partial)
{
	int bx = (int)blockIdx.x, lo = batch_segment(b, bx);
	int64_t off = b.off[lo], first = (int64_t)(bx - b.block0[lo]) * ADAMW_CHUNK;
	const float *const *g = b.views + b.view0[lo];
	float acc = 0.0f;
	if (b.vec[lo]) {
		int64_t n4 = b.n[lo] / 4, end = first + ADAMW_CHUNK < n4 ? first + ADAMW_CHUNK : n4;
		for (int64_t i = first + threadIdx.x; i < end; i += THREADS)
			adamw4_at((float4 *)(param + off), (float4 *)(mom + off), (float4 *)(var + off), g, b.nviews[lo],
				  i, h, b.wd[lo], &acc);
	} else {
		int64_t end = first + ADAMW_CHUNK < b.n[lo] ? first + ADAMW_CHUNK : b.n[lo];
		for (int64_t i = first + threadIdx.x; i < end; i += THREADS)
			adamw_at(param + off, mom + off, var + off, g, b.nviews[lo], i, h, b.wd[lo], &acc);
	}
	if (SUMSQ)
		block_partial(acc, partial, bx);
}

/*
 * grad_sumsq, pass 1: block bx's chunk of its segment (adamw_many_kernel's
 * chunk), each element the scaled view sum adamw_at computes, squared; each
 * thread adds its elements in order (a float4's x, y, z, w), then the block
 * adds the threads' sums in a fixed tree.  partial[bx] gets the chunk's sum.
 */
__global__ void __launch_bounds__(THREADS) grad_sumsq_kernel(const __grid_constant__ adamw_batch b, float scale,
							     float *partial)
{
	int bx = (int)blockIdx.x, lo = batch_segment(b, bx);
	int64_t first = (int64_t)(bx - b.block0[lo]) * ADAMW_CHUNK;
	const float *const *g = b.views + b.view0[lo];
	int nv = b.nviews[lo];
	float acc = 0.0f;
	if (b.vec[lo]) {
		int64_t n4 = b.n[lo] / 4, end = first + ADAMW_CHUNK < n4 ? first + ADAMW_CHUNK : n4;
		for (int64_t i = first + threadIdx.x; i < end; i += THREADS) {
			float4 gr = ((const float4 *)g[0])[i];
			for (int vi = 1; vi < nv; vi++) {
				float4 u = ((const float4 *)g[vi])[i];
				gr = make_float4(gr.x + u.x, gr.y + u.y, gr.z + u.z, gr.w + u.w);
			}
			float x = gr.x * scale, y = gr.y * scale, z = gr.z * scale, w = gr.w * scale;
			acc += x * x;
			acc += y * y;
			acc += z * z;
			acc += w * w;
		}
	} else {
		int64_t end = first + ADAMW_CHUNK < b.n[lo] ? first + ADAMW_CHUNK : b.n[lo];
		for (int64_t i = first + threadIdx.x; i < end; i += THREADS) {
			float gr = g[0][i];
			for (int vi = 1; vi < nv; vi++)
				gr += g[vi][i];
			gr = gr * scale;
			acc += gr * gr;
		}
	}
	block_partial(acc, partial, bx);
}

/*
 * grad_sumsq, pass 2: block k adds segment k's chunk sums in double, thread t
 * those at t, t + THREADS, ... in order, then the threads' sums in a fixed
 * tree; out[seg[k]] = that sum as float.  (One thread a segment, adding
 * every chunk in turn, took 754 us for h4096's 71182 chunks on an H100.)
 */
__global__ void __launch_bounds__(THREADS) grad_sumsq_finish_kernel(const __grid_constant__ adamw_batch b,
								    const float *partial, float *out)
{
	__shared__ double red[THREADS];
	int k = (int)blockIdx.x;
	double t = 0;
	for (int bx = b.block0[k] + (int)threadIdx.x; bx < b.block0[k + 1]; bx += THREADS)
		t += (double)partial[bx];
	red[threadIdx.x] = t;
	__syncthreads();
	for (int w = THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			red[threadIdx.x] += red[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[b.seg[k]] = (float)red[0];
}

/* out may alias view 0: each element is read from every view before it is written. */
__global__ void sum_views_kernel(float *out, views_arg g, int nviews, int64_t n)
{
	GRID_STRIDE(i, n)
	{
		float s = g.p[0][i];
		for (int vi = 1; vi < nviews; vi++)
			s += g.p[vi][i];
		out[i] = s;
	}
}

extern "C" int qe__cuda_adamw(qe_stream *s, const qe_adamw_args *a)
{
	if (a->n == 0)
		return QE_OK;
	views_arg g;
	memset(&g, 0, sizeof(g));
	for (int i = 0; i < a->nviews; i++)
		g.p[i] = a->grads[i];
	adamw_hyper h = adamw_hyper_of(a->lr, a->beta1, a->beta2, a->eps, a->step, a->grad_scale);
	bool al = vec4_ok(a->n, a->param, a->m, a->v);
	for (int i = 0; i < a->nviews && al; i++)
		al = vec4_ok(0, g.p[i], NULL, NULL);
	if (al)
		adamw4_kernel<<<grid_for(a->n / 4), THREADS, 0, s->cs>>>((float4 *)a->param, (float4 *)a->m,
									  (float4 *)a->v, g, a->nviews, a->n / 4, h,
									  a->weight_decay);
	else
		adamw_kernel<<<grid_for(a->n), THREADS, 0, s->cs>>>(a->param, a->m, a->v, g, a->nviews, a->n, h,
								    a->weight_decay);
	return qe__cuda_launched("adamw", "adamw_kernel");
}

/*
 * Batches of a's non-empty segments: one per QE_CUDA_ADAMW_SEGS segments or
 * QE_CUDA_ADAMW_VIEWS views, whichever fills first (a segment brings at most
 * QE_CUDA_MAX_VIEWS, checked), or before the grid would pass INT_MAX / 2
 * blocks (2^40 floats: one segment never does); flush(b) launches each.
 * The segments are disjoint (checked), so neither the batching nor the
 * order of the blocks changes a bit.
 */
template <class Flush> static int for_each_batch(const qe_adamw_many_args *a, adamw_batch *b, Flush flush)
{
	int nviews = 0, rc = QE_OK;
	b->nseg = 0;
	b->block0[0] = 0;
	for (int i = 0; i < a->nseg && !rc; i++) {
		const qe_adamw_seg *g = &a->segs[i];
		if (g->n == 0)
			continue;
		bool vec = vec4_ok(g->n, a->param + g->offset, a->m + g->offset, a->v + g->offset);
		for (int j = 0; j < g->nviews && vec; j++)
			vec = vec4_ok(0, g->grads[j], NULL, NULL);
		int64_t units = vec ? g->n / 4 : g->n, blocks = (units + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
		if (b->nseg == QE_CUDA_ADAMW_SEGS || nviews + g->nviews > QE_CUDA_ADAMW_VIEWS ||
		    b->block0[b->nseg] + blocks > INT_MAX / 2) {
			if ((rc = flush(b)))
				break;
			b->nseg = 0;
			nviews = 0;
		}
		int k = b->nseg++;
		b->off[k] = g->offset;
		b->n[k] = g->n;
		b->wd[k] = g->weight_decay;
		b->view0[k] = nviews;
		b->nviews[k] = g->nviews;
		b->vec[k] = vec;
		b->seg[k] = i;
		b->block0[k + 1] = b->block0[k] + (int)blocks;
		for (int j = 0; j < g->nviews; j++)
			b->views[nviews++] = g->grads[j];
	}
	if (!rc && b->nseg > 0)
		rc = flush(b);
	return rc;
}

/*
 * One launch per batch.  Seen on an H100: GPT-2 small's 149 tensors (163M
 * floats, one view each) took 2.07 ms as 149 adamw launches and 1.53 ms as
 * one adamw_many (2.98 TB/s of the 28 bytes an element reads and writes); a
 * 53-tensor model of 237K floats 261 us and 16 us.
 */
extern "C" int qe__cuda_adamw_many(qe_stream *s, const qe_adamw_many_args *a)
{
	adamw_batch tab; /* 25 KB of stack; the launch copies it */
	adamw_hyper h = adamw_hyper_of(a->lr, a->beta1, a->beta2, a->eps, a->step, a->grad_scale);
	if (a->sumsq && a->nseg > 0) {
		cudaError_t e = cudaMemsetAsync(a->sumsq, 0, (size_t)a->nseg * sizeof(float), s->cs);
		if (e != cudaSuccess)
			return qe__cuda_err(e, "adamw_many", "cudaMemsetAsync(sumsq)");
	}
	return for_each_batch(a, &tab, [&](adamw_batch *b) {
		unsigned nblk = (unsigned)b->block0[b->nseg];
		if (!a->sumsq) {
			adamw_many_kernel<false><<<nblk, THREADS, 0, s->cs>>>(a->param, a->m, a->v, *b, h, NULL);
			return qe__cuda_launched("adamw_many", "adamw_many_kernel");
		}
		/* with the gradient norms: the chunks' sums on the way, then grad_sumsq's second pass */
		float *partial;
		int rc = qe__cuda_scratch(s, (size_t)nblk * sizeof(float), "adamw_many", (void **)&partial);
		if (rc)
			return rc;
		adamw_many_kernel<true><<<nblk, THREADS, 0, s->cs>>>(a->param, a->m, a->v, *b, h, partial);
		if ((rc = qe__cuda_launched("adamw_many", "adamw_many_kernel")))
			return rc;
		grad_sumsq_finish_kernel<<<(unsigned)b->nseg, THREADS, 0, s->cs>>>(*b, partial, a->sumsq);
		return qe__cuda_launched("adamw_many", "grad_sumsq_finish_kernel");
	});
}

/* Two launches a batch (the chunks' sums, then each segment's), after zeroing out for the empty segments. */
extern "C" int qe__cuda_grad_sumsq(qe_stream *s, const qe_adamw_many_args *a, float *out)
{
	adamw_batch tab;
	if (a->nseg == 0)
		return QE_OK;
	cudaError_t e = cudaMemsetAsync(out, 0, (size_t)a->nseg * sizeof(float), s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, "grad_sumsq", "cudaMemsetAsync(out)");
	return for_each_batch(a, &tab, [&](adamw_batch *b) {
		float *partial;
		int nblk = b->block0[b->nseg];
		int rc = qe__cuda_scratch(s, (size_t)nblk * sizeof(float), "grad_sumsq", (void **)&partial);
		if (rc)
			return rc;
		grad_sumsq_kernel<<<(unsigned)nblk, THREADS, 0, s->cs>>>(*b, a->grad_scale, partial);
		if ((rc = qe__cuda_launched("grad_sumsq", "grad_sumsq_kernel")))
			return rc;
		grad_sumsq_finish_kernel<<<(unsigned)b->nseg, THREADS, 0, s->cs>>>(*b, partial, out);
		return qe__cuda_launched("grad_sumsq", "grad_sumsq_finish_kernel");
	});
}

extern "C" int qe__cuda_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n)
{
	if (n == 0)
		return QE_OK;
	views_arg g;
	memset(&g, 0, sizeof(g));
	for (int i = 0; i < nviews; i++)
		g.p[i] = views[i];
	sum_views_kernel<<<grid_for(n), THREADS, 0, s->cs>>>(out, g, nviews, n);
	return qe__cuda_launched("sum_views", "sum_views_kernel");
}
