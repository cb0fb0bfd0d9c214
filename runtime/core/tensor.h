/*
 * tensor.h - the tensor descriptor shared by every module.
 *
 * A qe_tensor is a plain descriptor: it never owns its memory.  Storage comes
 * from a backend allocator (backend.h) or from a slot's fixed storage, and the
 * owner of that storage frees it.  FP8 tensors carry a pointer to the
 * scale_inv that was current when they were cast (a float in the same memory
 * space as the data), so a later consumer (dW) uses the scale of the cast,
 * not the scale of today.
 */
#ifndef QE_TENSOR_H
#define QE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum qe_dtype {
	QE_F32 = 0,
	QE_BF16 = 1,
	QE_E4M3 = 2,
	QE_E5M2 = 3,
	QE_I32 = 4,
	QE_U8 = 5,
	QE_DTYPE_COUNT
} qe_dtype;

typedef enum qe_device { QE_DEV_CPU = 0, QE_DEV_CUDA = 1 } qe_device;

#define QE_MAX_DIMS 4

typedef struct qe_tensor {
	void *data;                  /* not owned */
	qe_dtype dtype;
	qe_device device;
	int ndim;
	int64_t shape[QE_MAX_DIMS];  /* row-major; shape[ndim-1] is contiguous */
	float *scale_inv;            /* FP8 only: scale_inv at cast time; not owned */
} qe_tensor;

size_t qe_dtype_size(qe_dtype dt);
const char *qe_dtype_name(qe_dtype dt);
/* Parse "f32", "bf16", "e4m3", "e5m2", "i32", "u8". Returns QE_OK or QE_EINVAL. */
int qe_dtype_parse(const char *s, qe_dtype *out);
int qe_dtype_is_fp8(qe_dtype dt);

/* A descriptor over data with the given 1..4 dims (unused dims ignored). */
qe_tensor qe_tensor_make(void *data, qe_dtype dt, qe_device dev, int ndim, int64_t d0, int64_t d1,
			 int64_t d2, int64_t d3);
static inline qe_tensor qe_tensor_2d(void *data, qe_dtype dt, qe_device dev, int64_t rows, int64_t cols)
{
	return qe_tensor_make(data, dt, dev, 2, rows, cols, 0, 0);
}
int64_t qe_tensor_numel(const qe_tensor *t);
size_t qe_tensor_nbytes(const qe_tensor *t);
/* Format "f32[64,256]@cpu" into buf; returns buf. */
char *qe_tensor_describe(const qe_tensor *t, char *buf, size_t len);
/* QE_OK when a and b agree in dtype, device and shape; else QE_ESHAPE with a message naming what. */
int qe_tensor_check_same(const qe_tensor *a, const qe_tensor *b, const char *what);

#endif
