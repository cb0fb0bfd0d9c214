/*
 * colsum.h - the summation order of the column sums (bias gradients and the
 * layernorm weight/bias gradients), shared by the cpu and cuda backends so
 * both give the same bits.
 *
 * Rows are split into QE_COLSUM_GROUPS consecutive groups; group g covers
 * rows [g*rows/G, (g+1)*rows/G).  Each group's partial sum starts from 0 and
 * adds its rows in order; the column's sum starts from 0 and adds the
 * partials in group order.  A strict row-order sum has one dependent chain of
 * `rows` loads per column, which leaves a GPU waiting on memory (67 us for
 * 256 x 4096 on an H200); G independent chains per column keep it busy.
 */
#ifndef QE_BACKEND_COLSUM_H
#define QE_BACKEND_COLSUM_H

#include <stdint.h>

#define QE_COLSUM_GROUPS 16

/* Callable from cuda kernels too. */
#ifdef __CUDACC__
#define QE_COLSUM_FN __host__ __device__ static inline
#else
#define QE_COLSUM_FN static inline
#endif

/* First row of group g (g = QE_COLSUM_GROUPS gives rows). */
QE_COLSUM_FN int64_t qe_colsum_group_start(int64_t rows, int g)
{
	return (int64_t)g * rows / QE_COLSUM_GROUPS;
}

#endif
