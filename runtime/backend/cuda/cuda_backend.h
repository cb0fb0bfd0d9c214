/*
 * cuda_backend.h - the fast backend: CUDA kernels, cuBLASLt FP8 GEMMs,
 * cuBLAS batched attention GEMMs, streams, events and CUDA graphs
 * (DESIGN.md sections 3-4).  Same op semantics as the cpu reference.
 *
 * Callers normally reach it through qe_backend_open("cuda", ...); these entry
 * points exist so that backend.c can dispatch without knowing the internals,
 * and so that tests can ask whether a device exists before opening one.
 * Plain C: the implementation is in the .cu files of this folder.
 *
 * Device: a backend uses the device that is current on the creating thread
 * (the rank selects it before opening the backend); threads that enqueue work
 * on its streams must have the same device current.
 */
#ifndef QE_CUDA_BACKEND_H
#define QE_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "runtime/backend/backend.h"

/*
 * Create a cuda backend on the current device.  OUT: *out, destroyed with
 * qe_cuda_backend_destroy (or qe_backend_close).  Returns QE_OK, QE_ECUDA
 * (no device, driver missing, cuBLASLt init failed; the message says which)
 * or QE_ENOMEM.
 */
int qe_cuda_backend_create(qe_backend **out);

/*
 * Free the backend itself (its cuBLASLt handle and GEMM algorithm cache).
 * Streams, events, graphs and allocations must be destroyed/freed by their
 * owners first; any still alive are reported through qe_log (warning) and
 * leaked.  NULL is a no-op.
 */
void qe_cuda_backend_destroy(qe_backend *b);

/*
 * Number of visible CUDA devices; 0 when cudaGetDeviceCount fails (no
 * driver, no device).  Never sets an error: tests use it to skip.
 */
int qe_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
