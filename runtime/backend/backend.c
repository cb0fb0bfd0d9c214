/*
 * backend.c - opening a backend by name, so that callers (the CLI's
 * --backend cpu|cuda, tests) never name an implementation directly.
 *
 * The op table has no destructor entry, so closing dispatches on the
 * table's device: each implementation owns its own teardown.  The cuda
 * backend is compiled in only with QE_WITH_CUDA (CMakeLists.txt); without it
 * "cuda" is a clear QE_EUNSUPPORTED rather than a link error.
 */
#include "runtime/backend/backend.h"

#include <string.h>

#include "runtime/core/status.h"
#include "runtime/backend/cpu/cpu_backend.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

int qe_backend_open(const char *name, qe_backend **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "backend open: NULL out pointer");
	*out = NULL;
	if (!name)
		return qe_fail(QE_EINVAL, "backend open: NULL name");
	if (strcmp(name, "cpu") == 0)
		return qe_cpu_backend_create(out);
	if (strcmp(name, "cuda") == 0) {
#ifdef QE_WITH_CUDA
		return qe_cuda_backend_create(out);
#else
		return qe_fail(QE_EUNSUPPORTED, "backend 'cuda': this binary was built without CUDA (QE_CUDA=OFF)");
#endif
	}
	return qe_fail(QE_EINVAL, "unknown backend '%s' (expected 'cpu' or 'cuda')", name);
}

void qe_backend_close(qe_backend *b)
{
	if (!b)
		return;
#ifdef QE_WITH_CUDA
	if (b->ops && b->ops->device == QE_DEV_CUDA) {
		qe_cuda_backend_destroy(b);
		return;
	}
#endif
	qe_cpu_backend_destroy(b);
}
