/*
 * cuda_embed.cu - the token and position embedding (backend.h embed_fwd,
 * embed_bwd), bit for bit as the cpu reference (cpu_kernels.c): the
 * forward gathers rows, the backward sums each token's rows in position
 * order in one thread (no atomics), so both backends give the same bytes.
 */
#include <cub/cub.cuh>

#include "runtime/backend/cuda/cuda_grid.cuh"
#include "runtime/backend/cuda/cuda_int.h"

/*
 * Element (t, c) of a [T, H] walk, with no division: a block row covers
 * columns, grid rows stride over t.  Without the 64-bit i / H per element,
 * clear_rows_kernel went from 77.5 to 62.5 us a gpt2 batch-16 step and
 * embed_bwd_kernel from 189 to 180 (H100, ncu, base clocks).
 */
#define ROWS_COLS(t, c, T, H)                                                   \
	for (int64_t t = blockIdx.y; t < (T); t += gridDim.y)                  \
		for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < (H); \
		     c += (int64_t)gridDim.x * blockDim.x)

/* the grid of a ROWS_COLS walk */
static dim3 rows_cols_grid(int64_t T, int64_t H)
{
	int64_t x = (H + THREADS - 1) / THREADS, y = T;
	return dim3((unsigned)(x > 65535 ? 65535 : x), (unsigned)(y > 65535 ? 65535 : y));
}

__global__ void embed_fwd_kernel(float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t T,
				 int64_t H)
{
	ROWS_COLS(t, c, T, H)
	{
		int64_t i = t * H + c;
		float e = wte[(int64_t)tok[t] * H + c];
		out[i] = wpe ? e + wpe[i] : e;
	}
}

/* The rows of dwte the previous embed_bwd on it wrote (ids outside [0, V) skipped) become zero. */
__global__ void clear_rows_kernel(float *dwte, const int32_t *rows, int64_t T, int64_t H, int64_t V)
{
	ROWS_COLS(t, c, T, H)
	{
		int32_t id = rows[t];
		if (id >= 0 && id < V)
			dwte[(int64_t)id * H + c] = 0.0f;
	}
}

/*
 * The token embedding's gradient without atomics, over the runs of equal
 * tokens: the positions are sorted by token (cub's radix sort is stable, so
 * each token's positions stay in ascending order and a token's occurrences
 * are one run of the sorted arrays); embed_head_kernel marks the first
 * position of each run a head, with where its run starts; embed_bwd_kernel's
 * element (t, c) writes the position gradient and, at a head, that token's
 * row: its occurrences' dout summed along the run, i.e. in t order from 0
 * (the cpu's scatter order).  The sort replaced a scan of the tokens after
 * each position for its next occurrence, which took 470 us for 16384 tokens
 * (a rare token scans to the end).  The run is read RUN_BATCH positions at a
 * time, their dout loads all in flight before the adds: walking a chain of
 * next-pointers, one dependent load per occurrence, took 335 us a gpt2 batch
 * 16 step on an H100 (the most frequent token's walk), batches of 16 188 us.
 * On an H200 batches of 8, 16 and 32 took 210, 195 and 245 us (64: 570).
 */

/* key: the token, or V for an id outside [0, V) (sorted last, in no chain); value: the position */
__global__ void embed_keys_kernel(int32_t *keys, int32_t *pos, const int32_t *tok, int64_t T, int64_t V)
{
	GRID_STRIDE(t, T)
	{
		int32_t tk = tok[t];
		keys[t] = tk >= 0 && tk < V ? tk : (int32_t)V;
		pos[t] = (int32_t)t;
	}
}

/* head[p]: 1 + the sorted index where position p's run starts when p is its token's first, else 0 */
__global__ void embed_head_kernel(int32_t *head, const int32_t *keys, const int32_t *pos, int64_t T, int64_t V)
{
	GRID_STRIDE(i, T)
	{
		int32_t k = keys[i];
		head[pos[i]] = k < V && (i == 0 || keys[i - 1] != k) ? (int32_t)i + 1 : 0;
	}
}

#define RUN_BATCH 16

__global__ void embed_bwd_kernel(float *dwte, float *dwpe, const int32_t *tok, const float *dout,
				 const int32_t *keys, const int32_t *pos, const int32_t *head, int64_t T, int64_t H,
				 int64_t V, unsigned *err, int32_t *rows_written, int accumulate)
{
	ROWS_COLS(t, c, T, H)
	{
		int64_t i = t * H + c;
		if (dwpe)
			dwpe[i] = 0.0f + dout[i];
		int32_t tk = tok[t];
		if (rows_written && c == 0)
			rows_written[t] = tk; /* clear_rows_kernel, which read it, has finished */
		if (tk < 0 || tk >= V) {
			if (c == 0)
				atomicOr(err, QE_CUDA_ERR_TOKEN);
			continue;
		}
		int32_t h = head[t];
		if (!h)
			continue;
		float acc = 0.0f;
		bool more = true;
		for (int64_t j0 = h - 1; more; j0 += RUN_BATCH) {
			float v[RUN_BATCH];
#pragma unroll
			for (int q = 0; q < RUN_BATCH; q++) {
				int64_t j = j0 + q;
				bool in = j < T && keys[j] == tk;
				v[q] = in ? dout[(int64_t)pos[j] * H + c] : 0.0f;
				more = more && in; /* stays true only while the whole batch is the run's */
			}
#pragma unroll
			for (int q = 0; q < RUN_BATCH; q++) {
				int64_t j = j0 + q;
				if (j < T && keys[j] == tk) /* in order, the run's positions only */
					acc += v[q];
			}
		}
		float *e = dwte + (int64_t)tk * H + c;
		*e = accumulate ? *e + acc : acc;
	}
}

extern "C" int qe__cuda_embed_fwd(qe_stream *s, float *out, const int32_t *tok, const float *wte, const float *wpe,
				  int64_t T, int64_t H)
{
	if (T * H == 0)
		return QE_OK;
	embed_fwd_kernel<<<rows_cols_grid(T, H), THREADS, 0, s->cs>>>(out, tok, wte, wpe, T, H);
	return qe__cuda_launched("embed_fwd", "embed_fwd_kernel");
}

extern "C" int qe__cuda_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const float *dout,
				  int64_t T, int64_t H, int64_t V, int32_t *rows_written, int accumulate)
{
	const char *op = "embed_bwd";
	if (accumulate) {
		/* nothing cleared: the rows tok names are added to */
	} else if (rows_written) {
		if (T * H > 0) {
			clear_rows_kernel<<<rows_cols_grid(T, H), THREADS, 0, s->cs>>>(dwte, rows_written, T, H, V);
			int rc = qe__cuda_launched(op, "clear_rows_kernel");
			if (rc)
				return rc;
		}
	} else if (V * H > 0) {
		cudaError_t e = cudaMemsetAsync(dwte, 0, (size_t)(V * H) * sizeof(float), s->cs);
		if (e != cudaSuccess)
			return qe__cuda_err(e, op, "cudaMemsetAsync(dwte)");
	}
	if (T * H == 0)
		return QE_OK;
	if (T > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: %lld tokens", op, (long long)T);
	/* head, keys and positions before and after the sort, then cub's temporary storage */
	int bits = 1;
	while (bits < 31 && ((int64_t)1 << bits) <= V)
		bits++;
	size_t temp_bytes = 0;
	cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int32_t *)NULL, (int32_t *)NULL,
							(const int32_t *)NULL, (int32_t *)NULL, (int)T, 0, bits, s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cub::DeviceRadixSort::SortPairs (temporary storage size)");
	size_t ints = qe__cuda_align256((size_t)T * sizeof(int32_t));
	int32_t *head = NULL;
	int rc = qe__cuda_scratch(s, 5 * ints + temp_bytes, op, (void **)&head);
	if (rc)
		return rc;
	char *base = (char *)head;
	int32_t *keys = (int32_t *)(base + ints), *pos = (int32_t *)(base + 2 * ints);
	int32_t *keys_sorted = (int32_t *)(base + 3 * ints), *pos_sorted = (int32_t *)(base + 4 * ints);
	void *temp = base + 5 * ints;
	embed_keys_kernel<<<grid_for(T), THREADS, 0, s->cs>>>(keys, pos, tok, T, V);
	if ((rc = qe__cuda_launched(op, "embed_keys_kernel")))
		return rc;
	e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, pos, pos_sorted, (int)T, 0, bits, s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cub::DeviceRadixSort::SortPairs");
	embed_head_kernel<<<grid_for(T), THREADS, 0, s->cs>>>(head, keys_sorted, pos_sorted, T, V);
	if ((rc = qe__cuda_launched(op, "embed_head_kernel")))
		return rc;
	embed_bwd_kernel<<<rows_cols_grid(T, H), THREADS, 0, s->cs>>>(dwte, dwpe, tok, dout, keys_sorted, pos_sorted, head,
								 T, H, V, s->words + 1, rows_written, accumulate);
	return qe__cuda_launched(op, "embed_bwd_kernel");
}
