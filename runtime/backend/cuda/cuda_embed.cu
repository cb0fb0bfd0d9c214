/*
 * cuda_embed.cu - the token and position embedding (backend.h embed_fwd,
 * embed_bwd), bit for bit as the cpu reference (cpu_kernels.c): the
 * forward gathers rows (for a batch of sequences, into an f32 or bf16
 * residual stream), the backward sums each token's rows in position
 * order in one thread (no atomics), so both backends give the same bytes;
 * its dout, the residual stream's gradient, may be bf16 too (widened
 * exactly as it is read, so it gives the bytes of its f32 widening).
 */
#include <cub/cub.cuh>
#include <cuda_bf16.h>

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

/*
 * out[r, :] = wte[tok[r], :] + wpe[r % T, :] (wpe NULL: the token row alone)
 * over rows of a batch of sequences, stored as O: f32, or bf16 rounded to
 * nearest even - the cpu's f32 sum, then its rounding.  ROWS_COLS's walk
 * over (sequence, position) pairs: block z strides over the sequences
 * starting at row s0, block y over the positions t of one, so row s0 + t
 * is at position t with no division.  A 64-bit r % T in each thread (the
 * grid has a thread an element) took 76.5 us for gpt2's 16384 x 768 rows of
 * T 1024 on an H100, this walk 54.5.
 */
__device__ __forceinline__ void embed_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void embed_put(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename O>
__global__ void embed_fwd_kernel(O *out, const int32_t *tok, const float *wte, const float *wpe, int64_t rows,
				 int64_t T, int64_t H)
{
	for (int64_t s0 = (int64_t)blockIdx.z * T; s0 < rows; s0 += (int64_t)gridDim.z * T)
		for (int64_t t = blockIdx.y; t < T && s0 + t < rows; t += gridDim.y) {
			int64_t r = s0 + t;
			const float *e = wte + (int64_t)tok[r] * H, *p = wpe ? wpe + t * H : NULL;
			O *o = out + r * H;
			for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < H;
			     c += (int64_t)gridDim.x * blockDim.x)
				embed_put(o + c, p ? e[c] + p[c] : e[c]);
		}
}

/* one dout value as f32: bf16 widened exactly */
__device__ __forceinline__ float embed_get(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float embed_get(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }

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
 * element (t, c), row t of the batch, writes at a head that token's
 * row: its occurrences' dout summed along the run, i.e. in t order from 0
 * (the cpu's scatter order).  The sort replaced a scan of the tokens after
 * each position for its next occurrence, which took 470 us for 16384 tokens
 * (a rare token scans to the end).  The run is read RUN_BATCH positions at a
 * time, their dout loads all in flight before the adds: walking a chain of
 * next-pointers, one dependent load per occurrence, took 335 us a gpt2 batch
 * 16 step on an H100 (the most frequent token's walk), batches of 16 188 us.
 * On an H200 batches of 8, 16 and 32 took 210, 195 and 245 us (64: 570).
 *
 * The position gradient is a kernel of its own, embed_pos_kernel: element
 * (t, c) sums column c of position t over the seqs sequences, from 0 in
 * sequence order, RUN_BATCH loads in flight before the adds as above - the
 * cpu's fill and one add per sequence in one pass, with no atomics and a
 * fixed order.  (Riding on embed_bwd_kernel's grid, only the first T rows'
 * blocks did that work while the rest waited: 355 us for the two a gpt2
 * batch-16 step, against 180 us for the token rows alone; H100, ncu.)
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

/* Column c of position t's gradient: d[t] + d[T + t] + ... over seqs sequences of T rows, from 0 in order. */
template <typename D>
__device__ __forceinline__ float embed_pos_sum(const D *dout, int64_t t, int64_t c, int64_t T, int64_t H,
					       int64_t seqs)
{
	const D *d = dout + t * H + c;
	int64_t stride = T * H;
	float acc = 0.0f;
	for (int64_t s0 = 0; s0 < seqs; s0 += RUN_BATCH) {
		float v[RUN_BATCH];
#pragma unroll
		for (int q = 0; q < RUN_BATCH; q++)
			v[q] = s0 + q < seqs ? embed_get(d, (s0 + q) * stride) : 0.0f;
#pragma unroll
		for (int q = 0; q < RUN_BATCH; q++)
			if (s0 + q < seqs)
				acc += v[q];
	}
	return acc;
}

/* dwpe [T, H] from seqs sequences of T rows of dout (of type D) */
template <typename D>
__global__ void embed_pos_kernel(float *dwpe, const D *dout, int64_t T, int64_t seqs, int64_t H)
{
	ROWS_COLS(t, c, T, H)
	dwpe[t * H + c] = embed_pos_sum(dout, t, c, T, H, seqs);
}

/* the token rows of dwte from the rows of dout (of type D) and tok */
template <typename D>
__global__ void embed_bwd_kernel(float *dwte, const int32_t *tok, const D *dout, const int32_t *keys,
				 const int32_t *pos, const int32_t *head, int64_t rows, int64_t H, int64_t V,
				 unsigned *err, int32_t *rows_written, int accumulate)
{
	ROWS_COLS(t, c, rows, H)
	{
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
				bool in = j < rows && keys[j] == tk;
				v[q] = in ? embed_get(dout, (int64_t)pos[j] * H + c) : 0.0f;
				more = more && in; /* stays true only while the whole batch is the run's */
			}
#pragma unroll
			for (int q = 0; q < RUN_BATCH; q++) {
				int64_t j = j0 + q;
				if (j < rows && keys[j] == tk) /* in order, the run's positions only */
					acc += v[q];
			}
		}
		float *e = dwte + (int64_t)tk * H + c;
		*e = accumulate ? *e + acc : acc;
	}
}

extern "C" int qe__cuda_embed_fwd(qe_stream *s, void *out, qe_dtype out_dt, const int32_t *tok, const float *wte,
				  const float *wpe, int64_t rows, int64_t T, int64_t H)
{
	if (rows * H == 0)
		return QE_OK;
	if (!wpe || T > rows)
		T = rows; /* the same positions (none, or r itself): one sequence */
	int64_t seqs = (rows + T - 1) / T;
	dim3 grid = rows_cols_grid(T, H);
	grid.z = (unsigned)(seqs > 65535 ? 65535 : seqs);
	if (out_dt == QE_BF16)
		embed_fwd_kernel<<<grid, THREADS, 0, s->cs>>>((__nv_bfloat16 *)out, tok, wte, wpe, rows, T, H);
	else
		embed_fwd_kernel<<<grid, THREADS, 0, s->cs>>>((float *)out, tok, wte, wpe, rows, T, H);
	return qe__cuda_launched("embed_fwd", "embed_fwd_kernel");
}

/*
 * The sort and the runs are over all rows of the batch (a token's rows
 * in row order, whatever sequence they are in); the position sums over
 * its sequences.  rows == 0 still overwrites dwpe: a sum over no
 * sequences is 0, as the cpu's fill leaves it.
 */
extern "C" int qe__cuda_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const void *dout,
				  qe_dtype dout_dt, int64_t rows, int64_t T, int64_t H, int64_t V,
				  int32_t *rows_written, int accumulate)
{
	const char *op = "embed_bwd";
	if (accumulate) {
		/* nothing cleared: the rows tok names are added to */
	} else if (rows_written) {
		if (rows * H > 0) {
			clear_rows_kernel<<<rows_cols_grid(rows, H), THREADS, 0, s->cs>>>(dwte, rows_written, rows, H,
											  V);
			int rc = qe__cuda_launched(op, "clear_rows_kernel");
			if (rc)
				return rc;
		}
	} else if (V * H > 0) {
		cudaError_t e = cudaMemsetAsync(dwte, 0, (size_t)(V * H) * sizeof(float), s->cs);
		if (e != cudaSuccess)
			return qe__cuda_err(e, op, "cudaMemsetAsync(dwte)");
	}
	if (rows == 0 && dwpe && T * H > 0) {
		cudaError_t e = cudaMemsetAsync(dwpe, 0, (size_t)(T * H) * sizeof(float), s->cs);
		if (e != cudaSuccess)
			return qe__cuda_err(e, op, "cudaMemsetAsync(dwpe)");
	}
	if (rows * H == 0)
		return QE_OK;
	if (rows > INT32_MAX)
		return qe_fail(QE_EUNSUPPORTED, "%s: %lld tokens", op, (long long)rows);
	/* head, keys and positions before and after the sort, then cub's temporary storage */
	int bits = 1;
	while (bits < 31 && ((int64_t)1 << bits) <= V)
		bits++;
	size_t temp_bytes = 0;
	cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int32_t *)NULL, (int32_t *)NULL,
							(const int32_t *)NULL, (int32_t *)NULL, (int)rows, 0, bits,
							s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cub::DeviceRadixSort::SortPairs (temporary storage size)");
	size_t ints = qe__cuda_align256((size_t)rows * sizeof(int32_t));
	int32_t *head = NULL;
	int rc = qe__cuda_scratch(s, 5 * ints + temp_bytes, op, (void **)&head);
	if (rc)
		return rc;
	char *base = (char *)head;
	int32_t *keys = (int32_t *)(base + ints), *pos = (int32_t *)(base + 2 * ints);
	int32_t *keys_sorted = (int32_t *)(base + 3 * ints), *pos_sorted = (int32_t *)(base + 4 * ints);
	void *temp = base + 5 * ints;
	embed_keys_kernel<<<grid_for(rows), THREADS, 0, s->cs>>>(keys, pos, tok, rows, V);
	if ((rc = qe__cuda_launched(op, "embed_keys_kernel")))
		return rc;
	e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, pos, pos_sorted, (int)rows, 0, bits,
					    s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cub::DeviceRadixSort::SortPairs");
	embed_head_kernel<<<grid_for(rows), THREADS, 0, s->cs>>>(head, keys_sorted, pos_sorted, rows, V);
	if ((rc = qe__cuda_launched(op, "embed_head_kernel")))
		return rc;
	dim3 grid = rows_cols_grid(rows, H);
	if (dout_dt == QE_BF16)
		embed_bwd_kernel<<<grid, THREADS, 0, s->cs>>>(dwte, tok, (const __nv_bfloat16 *)dout, keys_sorted,
							      pos_sorted, head, rows, H, V, s->words + 1, rows_written,
							      accumulate);
	else
		embed_bwd_kernel<<<grid, THREADS, 0, s->cs>>>(dwte, tok, (const float *)dout, keys_sorted, pos_sorted,
							      head, rows, H, V, s->words + 1, rows_written, accumulate);
	if ((rc = qe__cuda_launched(op, "embed_bwd_kernel")) || !dwpe)
		return rc;
	int64_t seqs = rows / T; /* the check made rows a multiple of T >= 1 */
	if (dout_dt == QE_BF16)
		embed_pos_kernel<<<rows_cols_grid(T, H), THREADS, 0, s->cs>>>(dwpe, (const __nv_bfloat16 *)dout, T, seqs,
									       H);
	else
		embed_pos_kernel<<<rows_cols_grid(T, H), THREADS, 0, s->cs>>>(dwpe, (const float *)dout, T, seqs, H);
	return qe__cuda_launched(op, "embed_pos_kernel");
}
