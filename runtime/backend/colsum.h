/*
 * colsum.h - the summation order of the column sums (bias gradients and the
 * layernorm weight/bias gradients), shared by the cpu and cuda backends so
 * both give the same bits.
 *
 * Rows are split into groups of QE_COLSUM_ROWS consecutive rows (the last
 * one may be shorter): group g covers rows [g*R, min((g+1)*R, rows)).  Each
 * group's partial sum starts from 0 and adds its rows in order; the column's
 * sum starts from 0 and adds the partials in group order.  A strict row-order
 * sum has one dependent chain of `rows` loads per column, which leaves a GPU
 * waiting on memory; groups of a fixed height give as many independent
 * chains as the rows allow (8192 rows x 768 columns: 128 x 768 of them, where
 * 16 groups a column kept 24 of 132 SMs busy for 87 us a call).
 */
#ifndef QE_BACKEND_COLSUM_H
#define QE_BACKEND_COLSUM_H

#include <stdint.h>

#define QE_COLSUM_ROWS 64

/*
 * Layernorm's weight and bias gradients split each group further, into runs
 * of QE_COLSUM_RUN consecutive rows (the group's last run may be shorter):
 * a run's sum starts from 0 and adds its rows in order, and the group's
 * partial starts from 0 and adds its runs in order.  With a warp a row, a
 * block of QE_COLSUM_ROWS / QE_COLSUM_RUN warps then makes a group's
 * partials from values its warps already hold: cuda's layernorm backward
 * writes dx and them in one pass instead of reading dy and x again.  (A run
 * of the whole group is the plain order above: 0 plus a sum that started
 * from 0 is that sum.)
 */
#define QE_COLSUM_RUN 8

/* Callable from cuda kernels too. */
#ifdef __CUDACC__
#define QE_COLSUM_FN __host__ __device__ static inline
#else
#define QE_COLSUM_FN static inline
#endif

/* Number of row groups (at least 1, so an empty column sums to 0 through one empty group). */
QE_COLSUM_FN int64_t qe_colsum_groups(int64_t rows)
{
	return rows > QE_COLSUM_ROWS ? (rows + QE_COLSUM_ROWS - 1) / QE_COLSUM_ROWS : 1;
}

/* First row of group g (g = qe_colsum_groups(rows) gives rows). */
QE_COLSUM_FN int64_t qe_colsum_group_start(int64_t rows, int64_t g)
{
	int64_t r = g * QE_COLSUM_ROWS;
	return r < rows ? r : rows;
}

#endif
