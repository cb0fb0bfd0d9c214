/*
 * cuda_gemm.cu - the "TN" GEMM of backend.h on cuBLASLt:
 *   C[m,n] = A[m,k] . B[n,k]^T * sa * sb (+ bias[n]) (+ C)
 *
 * Row-major C is column-major C^T [n,m] = B_cm^T . A_cm, so cuBLASLt's first
 * operand is our B (k x n column-major, ld k, transposed) and its second our
 * A (k x m, ld k, not transposed), D is n x m with ld n: the "TN" layout
 * Hopper's FP8 kernels require.  FP8 operands pass their scale_inv device
 * pointers as cuBLASLt's A/B scale pointers (swapped with the operands), so
 * a graph replay reads the scale of the cast that produced the operand.
 *
 * Repeatability: the algorithm of a shape is fixed by the first heuristic
 * answer (cached per m, n, k, dtypes, process-wide), split-K reduction
 * schemes are excluded, and each stream has its own workspace, so the same
 * inputs give the same bytes.
 *
 * Accumulate (beta = 1, the accumulating gradient arena: dW of microbatch
 * m > 0 adds into the view) uses the very algorithm of the beta = 0 GEMM of
 * the same shape: the cache is not keyed by beta, whichever call asks first
 * fixes it for both.  On the H200, beta = 1 in the epilogue then gave the
 * bits of beta = 0 followed by a separate fp32 add (0 of 157M floats
 * differed for the h4096 wgrad shapes, GPU.md), so direct placement (beta =
 * 1) and the copy path (beta = 0 into scratch, then add_inplace) agree, and
 * both sum ((g0 + g1) + g2) + ... as the per-microbatch views' ordered
 * reduction does.  A heuristic asked with beta = 1 separately might have
 * picked another algorithm, whose products round differently.  The accumulation order differs from
 * the cpu's, so results agree with it within a tolerance, not bitwise.
 *
 * C in bf16 (an activation stored in bf16; no bias, no accumulate - the
 * op's rule): C and D are CUDA_R_16BF and cuBLASLt rounds its fp32 result
 * to nearest even, from FP8 or bf16 operands.
 *
 * Bias: cuBLASLt's bias epilogue wants a bf16 bias for FP8 inputs with f32
 * output, which would round our f32 bias; a small kernel adds it instead,
 * exactly as the cpu does (v + bias[j] in f32).
 *
 * Supported: FP8 x FP8 (E4M3/E5M2 combinations but E5M2 x E5M2, cuBLASLt's
 * rule) with m, n, k multiples of 16; bf16 x bf16 (CUDA_R_16BF operands,
 * fp32 C/D, CUBLAS_COMPUTE_32F: the products of bf16 values are exact in
 * fp32 and are summed in fp32) at any m, n, k - no scale pointers, bf16
 * has no scale; and f32 x f32 (CUBLAS_COMPUTE_32F, no TF32).  Any other
 * pairing (f32 x FP8, bf16 x f32, ...) is QE_EUNSUPPORTED, naming both
 * operands: the model never mixes precisions within one GEMM.  A, B and C
 * must be 16-byte aligned (the cached algorithms are chosen for that
 * alignment; the heuristic itself accounts for leading dimensions that are
 * not 16-byte multiples - a standalone cuBLASLt run on the H200 with these
 * layouts gave correct bf16 results for k = 36 and n = 81); scale pointers
 * need not be (see stage_scale).
 *
 * Accuracy: FP8 products are exact, but Hopper's FP8 tensor cores add them
 * in reduced precision before cuBLASLt promotes to fp32 (fast accumulation
 * stays off): 7e-5 (k = 32) to 3e-4 (k = 256) of max|C| from the cpu's exact
 * sums was seen on the H200, and it grows with k.  f32 GEMMs: 1.7e-7.
 * bf16 GEMMs: the exact products summed in fp32 in another order than the
 * cpu's; a standalone cuBLASLt run with these layouts on the H200 (k = 8 to
 * 1024) stayed within 1.2% of the bound tests/backend/test_cuda_ops.c
 * states, (k 2^-22 + 2^-21)(sum|a||b| + |bias|) + 2^-21 |C_old|.
 */
#include <stdlib.h>

#include "runtime/backend/cuda/cuda_int.h"

/* ---- kernels ------------------------------------------------------------------ */

/*
 * c[r, j] = c[r, j] + bias[j]: blockIdx.y walks the rows, so no thread
 * divides to find its column; with vec, c's rows and bias are 16-byte
 * aligned and n a multiple of 4, and a thread adds a float4.
 */
__global__ void add_bias_kernel(float *__restrict__ c, const float *__restrict__ bias, int64_t m, int64_t n, bool vec)
{
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
		if (vec) {
			if (j >= n / 4)
				return;
			float4 *row = (float4 *)(c + r * n);
			float4 v = row[j], b = ((const float4 *)bias)[j];
			row[j] = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
		} else if (j < n) {
			c[r * n + j] = c[r * n + j] + bias[j];
		}
	}
}

/* ---- the algorithm cache ---------------------------------------------------------- */

typedef struct algo_entry {
	int64_t m, n, k;
	int adt, bdt, cdt; /* no beta: accumulate uses the beta = 0 algorithm (file comment) */
	cublasLtMatmulAlgo_t algo;
} algo_entry;

static pthread_mutex_t g_algo_lock = PTHREAD_MUTEX_INITIALIZER;
static algo_entry *g_algos;
static int g_nalgos, g_capalgos;

extern "C" void qe__cuda_gemm_cache_clear(void)
{
	pthread_mutex_lock(&g_algo_lock);
	free(g_algos);
	g_algos = NULL;
	g_nalgos = g_capalgos = 0;
	pthread_mutex_unlock(&g_algo_lock);
}

/* ---- launcher ------------------------------------------------------------------- */

static cudaDataType_t cuda_type(qe_dtype dt)
{
	return dt == QE_E4M3 ? CUDA_R_8F_E4M3 : dt == QE_E5M2 ? CUDA_R_8F_E5M2 : dt == QE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

#define HEUR_RESULTS 8

/*
 * Ask the heuristic (with split-K reductions masked out when mask_splitk)
 * and take its first answer that does not split k: *found is 0 when none.
 */
static cublasStatus_t heuristic(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t al, cublasLtMatrixLayout_t bl,
				cublasLtMatrixLayout_t cl, int mask_splitk, cublasLtMatmulAlgo_t *out, int *found)
{
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res[HEUR_RESULTS];
	int n = 0;
	uint64_t wsb = QE_CUDA_WORKSPACE_BYTES;
	uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE, align = 16;
	const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
	};
	*found = 0;
	cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
	if (st == CUBLAS_STATUS_SUCCESS && mask_splitk)
		st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
							  sizeof(scheme));
	for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
		st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof(align));
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmulAlgoGetHeuristic(qe__cuda_lt, desc, al, bl, cl, cl, pref, HEUR_RESULTS, res, &n);
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	for (int pass = 0; pass < 2 && !*found; pass++) {
		for (int i = 0; i < n; i++) {
			int32_t splitk = 1;
			uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
			size_t written = 0;
			if (res[i].state != CUBLAS_STATUS_SUCCESS)
				continue;
			if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
								 sizeof(splitk), &written) != CUBLAS_STATUS_SUCCESS)
				splitk = 1;
			if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
								 sizeof(red), &written) != CUBLAS_STATUS_SUCCESS)
				red = CUBLASLT_REDUCTION_SCHEME_INPLACE;
			/*
			 * Pass 0: no split of k.  Pass 1 (some long-k, small-output shapes such as
			 * the head's dgrad have nothing else): a split whose partial sums are reduced
			 * by a separate kernel in a fixed order - never INPLACE, whose accumulation
			 * into the output is order-dependent.
			 */
			if (splitk <= 1 || (pass == 1 && red != CUBLASLT_REDUCTION_SCHEME_INPLACE &&
					    red != CUBLASLT_REDUCTION_SCHEME_NONE)) {
				*out = res[i].algo;
				*found = 1;
				break;
			}
		}
	}
	return CUBLAS_STATUS_SUCCESS;
}

/* The cached algorithm of this problem, asking the heuristic the first time. */
static int get_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t al, cublasLtMatrixLayout_t bl,
		    cublasLtMatrixLayout_t cl, int64_t m, int64_t n, int64_t k, qe_dtype adt, qe_dtype bdt,
		    qe_dtype cdt, cublasLtMatmulAlgo_t *out)
{
	int rc = QE_OK, found = 0;
	pthread_mutex_lock(&g_algo_lock);
	for (int i = 0; i < g_nalgos; i++) {
		algo_entry *e = &g_algos[i];
		if (e->m == m && e->n == n && e->k == k && e->adt == (int)adt && e->bdt == (int)bdt &&
		    e->cdt == (int)cdt) {
			*out = e->algo;
			pthread_mutex_unlock(&g_algo_lock);
			return QE_OK;
		}
	}
	cublasLtMatmulAlgo_t algo;
	cublasStatus_t st = heuristic(desc, al, bl, cl, 1, &algo, &found);
	/* The mask filtered everything (cuBLASLt may say NOT_SUPPORTED then): filter ourselves. */
	if ((st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED) && !found)
		st = heuristic(desc, al, bl, cl, 0, &algo, &found);
	if (st != CUBLAS_STATUS_SUCCESS) {
		rc = qe__blas_err(st, "gemm", "cublasLtMatmulAlgoGetHeuristic");
	} else if (!found) {
		rc = qe_fail(QE_EUNSUPPORTED,
			     "gemm: cuBLASLt has no algorithm without split-K for %s x %s, m=%lld n=%lld k=%lld",
			     qe_dtype_name(adt), qe_dtype_name(bdt), (long long)m, (long long)n, (long long)k);
	} else {
		if (g_nalgos == g_capalgos) {
			int nc = g_capalgos ? 2 * g_capalgos : 32;
			algo_entry *p = (algo_entry *)realloc(g_algos, (size_t)nc * sizeof(*p));
			if (p) {
				g_algos = p;
				g_capalgos = nc;
			}
		}
		if (g_nalgos < g_capalgos) {
			algo_entry *e = &g_algos[g_nalgos++];
			e->m = m;
			e->n = n;
			e->k = k;
			e->adt = (int)adt;
			e->bdt = (int)bdt;
			e->cdt = (int)cdt;
			e->algo = algo;
		} else {
			rc = qe_fail(QE_ENOMEM, "gemm: caching the algorithm of m=%lld n=%lld k=%lld", (long long)m,
				     (long long)n, (long long)k);
		}
		*out = algo;
	}
	pthread_mutex_unlock(&g_algo_lock);
	return rc;
}

extern "C" int qe__cuda_add_bias(qe_stream *s, const char *op, float *c, const float *bias, int64_t m, int64_t n)
{
	bool vec = n % 4 == 0 && ((uintptr_t)c | (uintptr_t)bias) % 16 == 0;
	int64_t cols = vec ? n / 4 : n;
	int64_t bx = (cols + 255) / 256, by = m < 65535 ? m : 65535;
	if (m == 0 || n == 0)
		return QE_OK;
	if (bx > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: bias over %lld columns", op, (long long)n);
	add_bias_kernel<<<dim3((unsigned)bx, (unsigned)by), 256, 0, s->cs>>>(c, bias, m, n, vec);
	return qe__cuda_launched(op, "add_bias_kernel");
}

/*
 * On the H200 cuBLASLt answered CUBLAS_STATUS_NOT_SUPPORTED for a scale
 * pointer 4 bytes past a 16-byte boundary and worked with aligned ones.  A
 * scale_inv inside a packed role block may be unaligned, so it is then
 * copied into an aligned word of the stream first
 * (a memcpy node under capture, so a replay still reads the scale of the
 * cast that produced the operand).
 */
static int stage_scale(qe_stream *s, const float **p, int word)
{
	if (aligned16(*p))
		return QE_OK;
	float *dst = (float *)(s->words + word);
	cudaError_t e = cudaMemcpyAsync(dst, *p, sizeof(float), cudaMemcpyDeviceToDevice, s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, "gemm", "cudaMemcpyAsync(scale_inv to an aligned word)");
	*p = dst;
	return QE_OK;
}

extern "C" int qe__cuda_gemm(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
			     int accumulate)
{
	const char *op = "gemm";
	int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
	qe_dtype adt = a->dtype, bdt = b->dtype, cdt = c->dtype;
	int fp8 = qe_dtype_is_fp8(adt);
	float *cd = (float *)c->data;
	char da[96], db[96];
	qe_tensor_describe(a, da, sizeof(da));
	qe_tensor_describe(b, db, sizeof(db));
	accumulate = accumulate ? 1 : 0;

	if (fp8 ? !qe_dtype_is_fp8(bdt) : adt != bdt)
		return qe_fail(QE_EUNSUPPORTED,
			       "gemm: mixed operands A %s, B %s: the cuda backend multiplies FP8 x FP8, bf16 x bf16 or f32 x f32",
			       da, db);
	if (cdt == QE_BF16 && adt == QE_F32)
		return qe_fail(QE_EUNSUPPORTED, "gemm: f32 A %s . B %s^T into bf16 C: the cuda backend writes bf16 from "
			       "FP8 or bf16 operands only", da, db);
	if (adt == QE_E5M2 && bdt == QE_E5M2)
		return qe_fail(QE_EUNSUPPORTED, "gemm: A %s x B %s: E5M2 x E5M2 is not supported by cuBLASLt", da, db);
	if (m == 0 || n == 0)
		return QE_OK;
	if (fp8 && (m % 16 || n % 16 || k % 16))
		return qe_fail(QE_EINVAL, "gemm: FP8 A %s . B %s^T: m=%lld, n=%lld, k=%lld must be multiples of 16", da,
			       db, (long long)m, (long long)n, (long long)k);
	if (!aligned16(a->data) || !aligned16(b->data) || !aligned16(cd))
		return qe_fail(QE_EINVAL, "gemm: A %s (%p), B %s (%p), C (%p) must be 16-byte aligned", da, a->data, db,
			       b->data, (void *)cd);
	if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "gemm: m=%lld n=%lld k=%lld exceed cuBLASLt's dimensions", (long long)m,
			       (long long)n, (long long)k);
	if (k == 0) {
		/* an empty sum: C = 0 (+C), then the bias, as the cpu's acc = 0 */
		if (!accumulate) {
			cudaError_t e = cudaMemsetAsync(cd, 0, (size_t)(m * n) * qe_dtype_size(cdt), s->cs);
			if (e != cudaSuccess)
				return qe__cuda_err(e, op, "cudaMemsetAsync(C)");
		}
		return bias ? qe__cuda_add_bias(s, "gemm", cd, bias, m, n) : QE_OK;
	}

	cublasLtMatmulDesc_t desc = NULL;
	cublasLtMatrixLayout_t al = NULL, bl = NULL, cl = NULL;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	cublasLtMatmulAlgo_t algo;
	int rc = QE_OK;
	const char *call = "cublasLtMatmulDescCreate";
	cublasStatus_t st = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (st == CUBLAS_STATUS_SUCCESS) {
		call = "cublasLtMatmulDescSetAttribute";
		st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	}
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	if (st == CUBLAS_STATUS_SUCCESS && fp8) {
		/* cuBLASLt's A is our B and its B our A: the scales swap with them */
		const float *sa_lt = b->scale_inv, *sb_lt = a->scale_inv;
		if ((rc = stage_scale(s, &sa_lt, 4)) || (rc = stage_scale(s, &sb_lt, 8)))
			goto out;
		st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa_lt, sizeof(sa_lt));
		if (st == CUBLAS_STATUS_SUCCESS)
			st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb_lt,
							    sizeof(sb_lt));
	}
	if (st == CUBLAS_STATUS_SUCCESS) {
		call = "cublasLtMatrixLayoutCreate";
		st = cublasLtMatrixLayoutCreate(&al, cuda_type(bdt), (uint64_t)k, (uint64_t)n, k);
	}
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatrixLayoutCreate(&bl, cuda_type(adt), (uint64_t)k, (uint64_t)m, k);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatrixLayoutCreate(&cl, cuda_type(cdt), (uint64_t)n, (uint64_t)m, n);
	if (st != CUBLAS_STATUS_SUCCESS) {
		rc = qe__blas_err(st, op, call);
		goto out;
	}
	if ((rc = get_algo(desc, al, bl, cl, m, n, k, adt, bdt, cdt, &algo)))
		goto out;
	{
		float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
		st = cublasLtMatmul(qe__cuda_lt, desc, &alpha, b->data, al, a->data, bl, &beta, cd, cl, cd, cl, &algo,
				    s->ws, QE_CUDA_WORKSPACE_BYTES, s->cs);
		if (st != CUBLAS_STATUS_SUCCESS) {
			char dc[96];
			qe_tensor_describe(c, dc, sizeof(dc));
			rc = qe_fail(QE_ECUDA, "gemm: cublasLtMatmul A %s . B %s^T -> C %s: %s (status %d)", da, db, dc,
				     cublasGetStatusString(st), (int)st);
			goto out;
		}
	}
	if (bias)
		rc = qe__cuda_add_bias(s, "gemm", cd, bias, m, n);
out:
	if (cl)
		cublasLtMatrixLayoutDestroy(cl);
	if (bl)
		cublasLtMatrixLayoutDestroy(bl);
	if (al)
		cublasLtMatrixLayoutDestroy(al);
	if (desc)
		cublasLtMatmulDescDestroy(desc);
	return rc;
}
