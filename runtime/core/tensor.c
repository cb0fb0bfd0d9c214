/*
 * tensor.c - dtype tables and descriptor helpers.
 */
#include "runtime/core/tensor.h"
#include "runtime/core/status.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	size_t size;
} dtype_info[QE_DTYPE_COUNT] = {
	[QE_F32] = { "f32", 4 }, [QE_BF16] = { "bf16", 2 }, [QE_E4M3] = { "e4m3", 1 },
	[QE_E5M2] = { "e5m2", 1 }, [QE_I32] = { "i32", 4 },  [QE_U8] = { "u8", 1 },
};

size_t qe_dtype_size(qe_dtype dt)
{
	return (unsigned)dt < QE_DTYPE_COUNT ? dtype_info[dt].size : 0;
}

const char *qe_dtype_name(qe_dtype dt)
{
	return (unsigned)dt < QE_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

int qe_dtype_parse(const char *s, qe_dtype *out)
{
	for (int i = 0; i < QE_DTYPE_COUNT; i++) {
		if (strcmp(s, dtype_info[i].name) == 0) {
			*out = (qe_dtype)i;
			return QE_OK;
		}
	}
	return qe_fail(QE_EINVAL, "unknown dtype '%s'", s);
}

int qe_dtype_is_fp8(qe_dtype dt)
{
	return dt == QE_E4M3 || dt == QE_E5M2;
}

qe_tensor qe_tensor_make(void *data, qe_dtype dt, qe_device dev, int ndim, int64_t d0, int64_t d1,
			 int64_t d2, int64_t d3)
{
	qe_tensor t;
	memset(&t, 0, sizeof(t));
	t.data = data;
	t.dtype = dt;
	t.device = dev;
	t.ndim = ndim;
	int64_t d[QE_MAX_DIMS] = { d0, d1, d2, d3 };
	for (int i = 0; i < ndim && i < QE_MAX_DIMS; i++)
		t.shape[i] = d[i];
	return t;
}

int64_t qe_tensor_numel(const qe_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t qe_tensor_nbytes(const qe_tensor *t)
{
	return (size_t)qe_tensor_numel(t) * qe_dtype_size(t->dtype);
}

char *qe_tensor_describe(const qe_tensor *t, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%s[", qe_dtype_name(t->dtype));
	for (int i = 0; i < t->ndim && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
	if (n < len)
		snprintf(buf + n, len - n, "]@%s", t->device == QE_DEV_CUDA ? "cuda" : "cpu");
	return buf;
}

int qe_tensor_check_same(const qe_tensor *a, const qe_tensor *b, const char *what)
{
	int same = a->dtype == b->dtype && a->device == b->device && a->ndim == b->ndim;
	for (int i = 0; same && i < a->ndim; i++)
		same = a->shape[i] == b->shape[i];
	if (same)
		return QE_OK;
	char da[96], db[96];
	return qe_fail(QE_ESHAPE, "%s: expected %s, got %s", what, qe_tensor_describe(a, da, sizeof(da)),
		       qe_tensor_describe(b, db, sizeof(db)));
}
