/*
 * cuda_grid.cuh - launch shapes the elementwise kernels share
 * (cuda_kernels.cu, the layernorm files, cuda_optim.cu): the block size, grid-stride loops, the
 * grid for n elements, and when the float4 kernels apply.
 */
#ifndef QE_CUDA_GRID_CUH
#define QE_CUDA_GRID_CUH

#include <stdint.h>

#define THREADS 256

#define GRID_STRIDE(i, n) \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static inline unsigned grid_for(int64_t n)
{
	int64_t b = (n + THREADS - 1) / THREADS;
	if (b > 65536)
		b = 65536; /* grid-stride loops cover the rest */
	return (unsigned)(b < 1 ? 1 : b);
}

/* True when every pointer is 16-byte aligned and n a multiple of 4: the float4 kernels apply. */
static inline bool vec4_ok(int64_t n, const void *a, const void *b, const void *c)
{
	return n % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

#endif
