/*
 * cpu_gemm.c - the reference "TN" GEMM: C[m,n] = A[m,k] . B[n,k]^T, each of
 * A and B f32, bf16 or FP8, the narrow ones widened exactly to fp32 first.
 *
 * The result is a contract, not an approximation: every C[i,j] is
 *   acc = 0.0f; for k ascending: acc = acc + (a[i,k] * b[j,k]);   (fp32, no FMA)
 *   C[i,j] = ((acc * sa) * sb + bias[j]) + C_old[i,j]
 * (bias and C_old terms only when given; sa, sb = 1 for f32 and bf16, so a
 * bf16 operand gives exactly the f32 GEMM of its values: the products of two
 * bf16 values are exact in fp32, and only the chain rounds, as on cuBLASLt
 * with bf16 operands and CUBLAS_COMPUTE_32F).  Tests and other backends can
 * reproduce it with a three-line loop.  Speed comes from doing many
 * (i,j) chains at once, never from reordering a chain: B is packed into
 * panels of NR columns laid out k-major, and a register tile of MR rows x NR
 * columns advances all its chains by one k per step.  The lanes of the GCC
 * vector type are independent IEEE operations, so each lane is exactly the
 * scalar chain above; -ffp-contract=off (CMakeLists.txt) keeps mul and add
 * separate.  The tile is also compiled for AVX2 (picked at load time by
 * target_clones); that changes only how many lanes one instruction holds,
 * never the operations of a lane, so both builds give the same bytes.
 */
#include "runtime/backend/cpu/cpu_int.h"

#include <string.h>

#include "runtime/core/status.h"
#include "runtime/fp8/bf16.h"

#define NR 8   /* columns per panel = lanes of one vector */
#define MR 4   /* rows per register tile */
#define NC 64  /* columns packed at once (NR multiple): 64*k floats */
#define MC 64  /* rows of A widened at once when A is bf16 or FP8 */

typedef float v8f __attribute__((vector_size(NR * sizeof(float))));

/* Decode table of an FP8 operand (f32 and bf16 operands need none). */
static void build_lut(float lut[256], qe_dtype dt)
{
	for (int c = 0; c < 256; c++)
		lut[c] = qe_fp8_decode((uint8_t)c, dt);
}

/*
 * Pack columns j0..j0+nc-1 of B (rows of the [n,k] operand) into panels:
 * panel p holds, for each kk, the NR values B[j0+p*NR+jj, kk]; columns past
 * n are zero and never stored back.
 */
static void pack_b(float *dst, const qe_tensor *b, const float *lut, int64_t j0, int64_t nc, int64_t n, int64_t k)
{
	int64_t npanels = (nc + NR - 1) / NR;
	for (int64_t p = 0; p < npanels; p++) {
		float *pd = dst + p * k * NR;
		for (int jj = 0; jj < NR; jj++) {
			int64_t j = j0 + p * NR + jj;
			if (j >= n || j >= j0 + nc) {
				for (int64_t kk = 0; kk < k; kk++)
					pd[kk * NR + jj] = 0.0f;
			} else if (b->dtype == QE_F32) {
				const float *row = (const float *)b->data + j * k;
				for (int64_t kk = 0; kk < k; kk++)
					pd[kk * NR + jj] = row[kk];
			} else if (b->dtype == QE_BF16) {
				const uint16_t *row = (const uint16_t *)b->data + j * k;
				for (int64_t kk = 0; kk < k; kk++)
					pd[kk * NR + jj] = qe_bf16_to_f32(row[kk]);
			} else {
				const uint8_t *row = (const uint8_t *)b->data + j * k;
				for (int64_t kk = 0; kk < k; kk++)
					pd[kk * NR + jj] = lut[row[kk]];
			}
		}
	}
}

/* MR x NR tile: rows a0..a3 (stride lda), panel bp; rows past mr alias row 0 and are dropped. */
__attribute__((target_clones("avx2", "default"))) static void tile(v8f acc[MR], const float *a, int64_t lda, int mr, const float *bp, int64_t k)
{
	const float *a0 = a;
	const float *a1 = mr > 1 ? a + lda : a;
	const float *a2 = mr > 2 ? a + 2 * lda : a;
	const float *a3 = mr > 3 ? a + 3 * lda : a;
	v8f c0 = { 0 }, c1 = { 0 }, c2 = { 0 }, c3 = { 0 };
	for (int64_t kk = 0; kk < k; kk++) {
		v8f bv = *(const v8f *)(bp + kk * NR);
		v8f p0 = a0[kk] * bv, p1 = a1[kk] * bv, p2 = a2[kk] * bv, p3 = a3[kk] * bv;
		c0 = c0 + p0;
		c1 = c1 + p1;
		c2 = c2 + p2;
		c3 = c3 + p3;
	}
	acc[0] = c0;
	acc[1] = c1;
	acc[2] = c2;
	acc[3] = c3;
}

int qe_cpu_gemm(qe_cpu_scratch *sc, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		int accumulate)
{
	int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
	float sa = qe_dtype_is_fp8(a->dtype) ? *a->scale_inv : 1.0f;
	float sb = qe_dtype_is_fp8(b->dtype) ? *b->scale_inv : 1.0f;
	float *cd = (float *)c->data;
	uint16_t *c16 = c->dtype == QE_BF16 ? (uint16_t *)c->data : NULL; /* results rounded to bf16 */
	float lut_a[256], lut_b[256];
	if (m == 0 || n == 0)
		return QE_OK;
	if (qe_dtype_is_fp8(a->dtype))
		build_lut(lut_a, a->dtype);
	if (qe_dtype_is_fp8(b->dtype))
		build_lut(lut_b, b->dtype);

	int64_t nc_max = n < NC ? n : NC;
	int64_t panels_max = (nc_max + NR - 1) / NR;
	float *bpack = qe_cpu_scratch_get(sc, 0, (size_t)(panels_max * NR * (k > 0 ? k : 1)));
	if (!bpack)
		return qe_fail_ctx(QE_ENOMEM, "gemm: pack B [%lld,%lld]", (long long)n, (long long)k);
	float *ablock = NULL;
	if (a->dtype != QE_F32) {
		int64_t mc = m < MC ? m : MC;
		ablock = qe_cpu_scratch_get(sc, 1, (size_t)(mc * (k > 0 ? k : 1)));
		if (!ablock)
			return qe_fail_ctx(QE_ENOMEM, "gemm: widen A [%lld,%lld]", (long long)m, (long long)k);
	}

	for (int64_t j0 = 0; j0 < n; j0 += NC) {
		int64_t nc = n - j0 < NC ? n - j0 : NC;
		int64_t npanels = (nc + NR - 1) / NR;
		pack_b(bpack, b, lut_b, j0, nc, n, k);
		for (int64_t i0 = 0; i0 < m; i0 += MC) {
			int64_t mc = m - i0 < MC ? m - i0 : MC;
			const float *ab;
			if (a->dtype == QE_F32) {
				ab = (const float *)a->data + i0 * k;
			} else if (a->dtype == QE_BF16) {
				const uint16_t *src = (const uint16_t *)a->data + i0 * k;
				for (int64_t x = 0; x < mc * k; x++)
					ablock[x] = qe_bf16_to_f32(src[x]);
				ab = ablock;
			} else {
				const uint8_t *src = (const uint8_t *)a->data + i0 * k;
				for (int64_t x = 0; x < mc * k; x++)
					ablock[x] = lut_a[src[x]];
				ab = ablock;
			}
			for (int64_t p = 0; p < npanels; p++) {
				const float *bp = bpack + p * k * NR;
				int64_t jb = j0 + p * NR;
				int nr = (int)(nc - p * NR < NR ? nc - p * NR : NR);
				for (int64_t ii = 0; ii < mc; ii += MR) {
					int mr = (int)(mc - ii < MR ? mc - ii : MR);
					v8f acc[MR];
					tile(acc, ab + ii * k, k, mr, bp, k);
					for (int r = 0; r < mr; r++) {
						int64_t at = (i0 + ii + r) * n + jb;
						float *crow = c16 ? NULL : cd + at;
						for (int jj = 0; jj < nr; jj++) {
							float v = acc[r][jj];
							v = v * sa;
							v = v * sb;
							if (bias)
								v = v + bias[jb + jj];
							if (c16) { /* neither bias nor accumulate (checked) */
								c16[at + jj] = qe_bf16_from_f32(v);
								continue;
							}
							if (accumulate)
								v = v + crow[jj];
							crow[jj] = v;
						}
					}
				}
			}
		}
	}
	return QE_OK;
}
