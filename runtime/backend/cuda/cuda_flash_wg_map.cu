/*
 * cuda_flash_wg_map.cu - what the wgmma flash kernels' launchers share on
 * the host (declared in cuda_flash_wg.cuh): the tensor maps the kernels
 * copy through (qe__flashwg_rows_map), encoded per launch by the driver's
 * cuTensorMapEncodeTiled, which is looked up once through the runtime, so
 * nothing links against libcuda; and the persistent kernels' grid
 * (qe__flashwg_grid).
 */
#include <cudaTypedefs.h>
#include <limits.h>
#include <pthread.h>

#include "runtime/backend/cuda/cuda_flash_wg.cuh"
#include "runtime/backend/cuda/cuda_int.h"

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

int qe__flashwg_rows_map(CUtensorMap *m, const bf16 *x, int64_t B, int T, int C, const char *op, const char *what)
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

int qe__flashwg_grid(const char *op, int64_t B, int T, int nh, int rows, int *nitems, dim3 *grid)
{
	int dev = 0, nsm = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "counting the device's SMs");
	const int64_t n = (int64_t)((T + rows - 1) / rows) * nh * B;
	if (n > INT_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: %lld work items (B %lld, %d heads, T %d) exceed the kernels' int index",
			       op, (long long)n, (long long)B, nh, T);
	*nitems = (int)n;
	*grid = dim3((unsigned)(n < nsm ? n : nsm));
	return 0;
}
