/*
 * gemm_accumulate.cu - what the accumulating arena's dW GEMM costs, algorithm by
 * algorithm (issue 33 item 5).  A standalone probe of cuBLASLt, not part of qeffect:
 *
 *   nvcc -O2 -arch=sm_90a -o gemm_accumulate bench/arena/gemm_accumulate.cu -lcublasLt
 *   ./gemm_accumulate [M N K ...]      (default: the h4096 wgrad shapes at k = 256)
 *
 * The arena's dW of microbatch m > 0 is C += A . B^T in the GEMM's epilogue (beta = 1),
 * with A E5M2 (the output gradient, transposed) and B E4M3 (the input, transposed), C fp32,
 * in qeffect's "TN" layout (runtime/backend/cuda/cuda_gemm.cu).  qeffect runs it with the
 * algorithm of the beta = 0 GEMM of that shape, so that C_old + (A . B^T) rounds as the
 * per-microbatch views' ordered sum does.
 *
 * For each shape it times, over REPS launches after a warm-up:
 *   - beta = 0 with the first heuristic answer (what per-mb runs): the floor;
 *   - beta = 1 with every answer the heuristic gives for beta = 0 and for beta = 1, each
 *     checked against C_old + D0 (D0: the beta = 0 product of the first answer, the add
 *     a separate fp32 kernel), counting the floats whose bytes differ;
 *   - beta = 0 into scratch, then a separate add kernel (the arena's copy path).
 * A row prints the algorithm's id, tile, stages, split-k and cluster ids, microseconds,
 * the bandwidth of the C traffic (read + write for beta = 1) and the differing floats.
 */
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define LK(x)                                                                                      \
	do {                                                                                       \
		cublasStatus_t s_ = (x);                                                           \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_);  \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define REPS 20
#define NRES 16
#define WS_BYTES (32u << 20)

__global__ void fill_codes(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		uint32_t h = (uint32_t)i * 2654435761u ^ seed;
		h ^= h >> 13;
		h *= 0x5bd1e995u;
		h ^= h >> 15;
		/* a small finite code of either format: sign, exponent bits kept low */
		p[i] = (uint8_t)((h & 0x80u) | (0x20u + (h >> 8) % 0x20u));
	}
}

__global__ void fill_floats(float *p, size_t n, uint32_t seed)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		uint32_t h = (uint32_t)i * 2246822519u ^ seed;
		h ^= h >> 15;
		h *= 0x27d4eb2du;
		h ^= h >> 13;
		p[i] = ((float)(h & 0xffffu) - 32768.0f) / 4096.0f;
	}
}

__global__ void add_kernel(float *y, const float *a, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = y[i] + a[i];
}

__global__ void count_diff(const float *a, const float *b, size_t n, unsigned long long *out)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n && __float_as_uint(a[i]) != __float_as_uint(b[i]))
		atomicAdd(out, 1ull);
}

static unsigned blocks(size_t n)
{
	return (unsigned)((n + 255) / 256);
}

typedef struct prob {
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t al, bl, cl;
	const void *a, *b; /* cuBLASLt's A (our B, E4M3) and B (our A, E5M2) */
	void *ws;
	cudaStream_t st;
} prob;

static int heuristics(prob *p, float beta, cublasLtMatmulHeuristicResult_t *res)
{
	(void)beta; /* the heuristic is not told beta; the answers are the same set */
	cublasLtMatmulPreference_t pref;
	uint64_t ws = WS_BYTES;
	uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE, align = 16;
	int n = 0;
	LK(cublasLtMatmulPreferenceCreate(&pref));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof(scheme)));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align)));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align)));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align)));
	LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align)));
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(p->lt, p->desc, p->al, p->bl, p->cl, p->cl, pref, NRES, res, &n);
	cublasLtMatmulPreferenceDestroy(pref);
	return s == CUBLAS_STATUS_SUCCESS ? n : 0;
}

static cublasStatus_t mm(prob *p, const cublasLtMatmulAlgo_t *algo, float beta, float *c)
{
	float alpha = 1.0f;
	return cublasLtMatmul(p->lt, p->desc, &alpha, p->a, p->al, p->b, p->bl, &beta, c, p->cl, c, p->cl, algo, p->ws,
			      WS_BYTES, p->st);
}

static void describe(const cublasLtMatmulAlgo_t *algo, char *buf, size_t len)
{
	int32_t id = -1, splitk = -1;
	uint32_t tile = 0, stages = 0, cluster = 0;
	size_t w;
	cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
	cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
	cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
	cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
	cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
	snprintf(buf, len, "id %3d tile %3u stages %3u splitk %2d cluster %2u", id, tile, stages, splitk, cluster);
}

/* microseconds per launch of f over REPS launches after two warm-ups; -1 on failure */
template <typename F> static float timed(prob *p, F f)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 2; i++)
		if (!f())
			return -1.0f;
	CK(cudaEventRecord(e0, p->st));
	for (int i = 0; i < REPS; i++)
		if (!f())
			return -1.0f;
	CK(cudaEventRecord(e1, p->st));
	CK(cudaEventSynchronize(e1));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return ms * 1000.0f / REPS;
}

static void run_shape(cublasLtHandle_t lt, cudaStream_t st, void *ws, long m, long n, long k)
{
	size_t nc = (size_t)m * n;
	uint8_t *A, *B; /* ours: A [m,k] E5M2, B [n,k] E4M3 */
	float *C0, *D0, *ref, *c, *scratch, *one;
	unsigned long long *diff;
	CK(cudaMalloc(&A, (size_t)m * k));
	CK(cudaMalloc(&B, (size_t)n * k));
	CK(cudaMalloc(&C0, nc * 4));
	CK(cudaMalloc(&D0, nc * 4));
	CK(cudaMalloc(&ref, nc * 4));
	CK(cudaMalloc(&c, nc * 4));
	CK(cudaMalloc(&scratch, nc * 4));
	CK(cudaMalloc(&one, 16));
	CK(cudaMalloc(&diff, sizeof(*diff)));
	fill_codes<<<blocks((size_t)m * k), 256, 0, st>>>(A, (size_t)m * k, 1);
	fill_codes<<<blocks((size_t)n * k), 256, 0, st>>>(B, (size_t)n * k, 2);
	fill_floats<<<blocks(nc), 256, 0, st>>>(C0, nc, 3);
	float onef = 1.0f;
	CK(cudaMemcpy(one, &onef, 4, cudaMemcpyHostToDevice));

	prob p;
	memset(&p, 0, sizeof(p));
	p.lt = lt;
	p.st = st;
	p.ws = ws;
	p.a = B;
	p.b = A;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	LK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
	LK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
	LK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof(one)));
	LK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof(one)));
	LK(cublasLtMatrixLayoutCreate(&p.al, CUDA_R_8F_E4M3, k, n, k));
	LK(cublasLtMatrixLayoutCreate(&p.bl, CUDA_R_8F_E5M2, k, m, k));
	LK(cublasLtMatrixLayoutCreate(&p.cl, CUDA_R_32F, n, m, n));

	cublasLtMatmulHeuristicResult_t res[NRES];
	int nres = heuristics(&p, 0.0f, res);
	printf("shape m %ld n %ld k %ld: %d heuristic answers; C %.0f MB\n", m, n, k, nres, nc * 4 / 1e6);
	if (nres == 0) {
		printf("  no algorithm\n");
		return;
	}
	/* D0 and the reference C0 + D0 */
	LK(mm(&p, &res[0].algo, 0.0f, D0));
	CK(cudaMemcpyAsync(ref, C0, nc * 4, cudaMemcpyDeviceToDevice, st));
	add_kernel<<<blocks(nc), 256, 0, st>>>(ref, D0, nc);
	CK(cudaStreamSynchronize(st));

	char d[128];
	describe(&res[0].algo, d, sizeof(d));
	float t0 = timed(&p, [&] { return mm(&p, &res[0].algo, 0.0f, c) == CUBLAS_STATUS_SUCCESS; });
	printf("  beta0 answer 0  %s  %8.1f us  %6.0f GB/s (C written)\n", d, t0, nc * 4 / (t0 * 1e3));
	float tc = timed(&p, [&] {
		if (mm(&p, &res[0].algo, 0.0f, scratch) != CUBLAS_STATUS_SUCCESS)
			return false;
		add_kernel<<<blocks(nc), 256, 0, st>>>(c, scratch, nc);
		return true;
	});
	printf("  copy path (beta0 + add)                                       %8.1f us\n", tc);
	for (int i = 0; i < nres; i++) {
		if (res[i].state != CUBLAS_STATUS_SUCCESS)
			continue;
		describe(&res[i].algo, d, sizeof(d));
		CK(cudaMemcpyAsync(c, C0, nc * 4, cudaMemcpyDeviceToDevice, st));
		cublasStatus_t s = mm(&p, &res[i].algo, 1.0f, c);
		if (s != CUBLAS_STATUS_SUCCESS) {
			printf("  beta1 answer %2d %s  status %d\n", i, d, (int)s);
			continue;
		}
		CK(cudaMemsetAsync(diff, 0, sizeof(*diff), st));
		count_diff<<<blocks(nc), 256, 0, st>>>(c, ref, nc, diff);
		unsigned long long nd = 0;
		CK(cudaMemcpyAsync(&nd, diff, sizeof(nd), cudaMemcpyDeviceToHost, st));
		CK(cudaStreamSynchronize(st));
		float t = timed(&p, [&] { return mm(&p, &res[i].algo, 1.0f, c) == CUBLAS_STATUS_SUCCESS; });
		printf("  beta1 answer %2d %s  %8.1f us  %6.0f GB/s  differing floats %llu%s\n", i, d, t,
		       2.0 * nc * 4 / (t * 1e3), nd, nd ? "" : " (bytes of beta0 + add)");
	}
	cublasLtMatrixLayoutDestroy(p.cl);
	cublasLtMatrixLayoutDestroy(p.bl);
	cublasLtMatrixLayoutDestroy(p.al);
	cublasLtMatmulDescDestroy(p.desc);
	cudaFree(A);
	cudaFree(B);
	cudaFree(C0);
	cudaFree(D0);
	cudaFree(ref);
	cudaFree(c);
	cudaFree(scratch);
	cudaFree(one);
	cudaFree(diff);
}

int main(int argc, char **argv)
{
	long def[] = { 12288, 4096, 256, 4096, 4096, 256, 16384, 4096, 256, 4096, 16384, 256 };
	long *v = def;
	int nv = 12;
	long *user = NULL;
	if (argc > 1) {
		if ((argc - 1) % 3) {
			fprintf(stderr, "usage: %s [M N K ...]\n", argv[0]);
			return 2;
		}
		user = (long *)malloc(sizeof(long) * (argc - 1));
		for (int i = 1; i < argc; i++)
			user[i - 1] = atol(argv[i]);
		v = user;
		nv = argc - 1;
	}
	cublasLtHandle_t lt;
	cudaStream_t st;
	void *ws;
	LK(cublasLtCreate(&lt));
	CK(cudaStreamCreate(&st));
	CK(cudaMalloc(&ws, WS_BYTES));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("%s, cuBLASLt %zu\n", prop.name, cublasLtGetVersion());
	for (int i = 0; i < nv; i += 3)
		run_shape(lt, st, ws, v[i], v[i + 1], v[i + 2]);
	free(user);
	return 0;
}
