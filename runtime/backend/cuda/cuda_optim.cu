/*
 * cuda_optim.cu - the optimizer's ops: AdamW over a parameter's gradient
 * views (summed in view order per element) and the view sum of the data
 * parallel replica sum, operation for operation as the cpu reference
 * (cpu_kernels.c; -fmad=false, so the bits are the cpu's), with float4
 * kernels on 16-byte aligned buffers.
 */
#include <math.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"

typedef struct views_arg {
	const float *p[QE_CUDA_MAX_VIEWS];
} views_arg;

__device__ __forceinline__ float adamw1(float *pp, float *mp, float *vp, float grad, float lr, float beta1,
					float beta2, float eps, float wd, float b1c, float b2c)
{
	float p = *pp;
	float m = beta1 * *mp + (1.0f - beta1) * grad;
	float v = beta2 * *vp + (1.0f - beta2) * grad * grad;
	float mhat = m / b1c;
	float vhat = v / b2c;
	*mp = m;
	*vp = v;
	return p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

__global__ void adamw_kernel(float *param, float *mom, float *var, views_arg g, int nviews, int64_t n, float lr,
			     float beta1, float beta2, float eps, float wd, float b1c, float b2c, float grad_scale)
{
	GRID_STRIDE(i, n)
	{
		float grad = g.p[0][i];
		for (int vi = 1; vi < nviews; vi++)
			grad += g.p[vi][i];
		param[i] = adamw1(&param[i], &mom[i], &var[i], grad * grad_scale, lr, beta1, beta2, eps, wd, b1c, b2c);
	}
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

/* adamw_kernel on float4s: the views are summed in view order per element, as there. */
__global__ void adamw4_kernel(float4 *param, float4 *mom, float4 *var, views_arg g, int nviews, int64_t n4, float lr,
			      float beta1, float beta2, float eps, float wd, float b1c, float b2c, float grad_scale)
{
	GRID_STRIDE(i, n4)
	{
		float4 gr = ((const float4 *)g.p[0])[i];
		for (int vi = 1; vi < nviews; vi++) {
			float4 u = ((const float4 *)g.p[vi])[i];
			gr = make_float4(gr.x + u.x, gr.y + u.y, gr.z + u.z, gr.w + u.w);
		}
		float4 p = param[i], m = mom[i], v = var[i];
		float4 np;
		np.x = adamw1(&p.x, &m.x, &v.x, gr.x * grad_scale, lr, beta1, beta2, eps, wd, b1c, b2c);
		np.y = adamw1(&p.y, &m.y, &v.y, gr.y * grad_scale, lr, beta1, beta2, eps, wd, b1c, b2c);
		np.z = adamw1(&p.z, &m.z, &v.z, gr.z * grad_scale, lr, beta1, beta2, eps, wd, b1c, b2c);
		np.w = adamw1(&p.w, &m.w, &v.w, gr.w * grad_scale, lr, beta1, beta2, eps, wd, b1c, b2c);
		mom[i] = m;
		var[i] = v;
		param[i] = np;
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
	/* bias corrections on the host with the cpu's powf, so both use the same bits */
	float b1c = 1.0f - powf(a->beta1, (float)a->step);
	float b2c = 1.0f - powf(a->beta2, (float)a->step);
	bool al = vec4_ok(a->n, a->param, a->m, a->v);
	for (int i = 0; i < a->nviews && al; i++)
		al = vec4_ok(0, g.p[i], NULL, NULL);
	if (al)
		adamw4_kernel<<<grid_for(a->n / 4), THREADS, 0, s->cs>>>(
			(float4 *)a->param, (float4 *)a->m, (float4 *)a->v, g, a->nviews, a->n / 4, a->lr, a->beta1,
			a->beta2, a->eps, a->weight_decay, b1c, b2c, a->grad_scale);
	else
		adamw_kernel<<<grid_for(a->n), THREADS, 0, s->cs>>>(a->param, a->m, a->v, g, a->nviews, a->n, a->lr,
								    a->beta1, a->beta2, a->eps, a->weight_decay,
								    b1c, b2c, a->grad_scale);
	return qe__cuda_launched("adamw", "adamw_kernel");
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
