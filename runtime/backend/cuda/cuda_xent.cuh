/*
 * cuda_xent.cuh - the softmax cross-entropy's gradient of one logit, and the
 * conversions between the logits' type and f32 around it.  Shared by xent
 * (cuda_xent.cu), which stores the gradient, and the cast's pre_xent
 * prologue (cuda_fp8.cu), which makes it from the logits and the rows'
 * statistics as it loads them: one definition, so that the fused cast sees
 * the very bits xent would have stored (the directory is built with
 * -fmad=false, so the inlined expression is the same instructions in both).
 */
#ifndef QE_CUDA_XENT_CUH
#define QE_CUDA_XENT_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* E = float or __nv_bfloat16: widen to f32 exactly, round back to nearest even */
__device__ __forceinline__ float xent_widen(float v)
{
	return v;
}
__device__ __forceinline__ float xent_widen(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}
template <typename E> __device__ __forceinline__ E xent_narrow(float v);
template <> __device__ __forceinline__ float xent_narrow<float>(float v)
{
	return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 xent_narrow<__nv_bfloat16>(float v)
{
	return __float2bfloat16_rn(v);
}

/*
 * The gradient of logit lv in a valid column of a row whose valid max is
 * maxv and whose 1 / sum of exp(l - maxv) is inv: (p - onehot) * g, tgt
 * saying whether the column is the row's target.  Split from xent_grad so
 * that the cast's four-wide prologue can decide the column's kind once for
 * four columns and still run this very arithmetic.
 */
__device__ __forceinline__ float xent_grad_valid(float lv, bool tgt, float maxv, float inv, float g)
{
	float p = __expf(lv - maxv) * inv;
	return (p - (tgt ? 1.0f : 0.0f)) * g;
}

/* The gradient of logit lv in column c: xent_grad_valid's, and +0 in the padding (c >= nvalid), lv unread. */
__device__ __forceinline__ float xent_grad(float lv, int64_t c, int64_t nvalid, int32_t tg, float maxv, float inv,
					   float g)
{
	if (c >= nvalid)
		return 0.0f;
	return xent_grad_valid(lv, c == tg, maxv, inv, g);
}

/* The gradient d as xent stores it in logits of type E (XB: bf16, else f32), widened back: what a cast of it loads. */
template <bool XB> __device__ __forceinline__ float xent_stored(float d)
{
	if constexpr (XB)
		return xent_widen(xent_narrow<__nv_bfloat16>(d));
	else
		return d;
}

#endif
