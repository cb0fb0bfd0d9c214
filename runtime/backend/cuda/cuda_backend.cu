/*
 * cuda_backend.cu - the cuda op table: memory, streams, events, CUDA graphs,
 * the default stream, and the op path every op wrapper takes
 * (qe__cuda_op_begin / qe__cuda_op_end; the compute ops' wrappers are in
 * cuda_ops.cu, the links' in cuda_link.cu).
 *
 * Every op goes one way: resolve the stream (NULL -> the process-wide
 * default stream, under a lock), fail fast if the stream failed earlier,
 * check the arguments, call the launcher, and on any error mark the stream
 * failed (STYLE.md 4): every later call on it returns the first error until
 * it is destroyed.  The default stream is the exception, as on cpu: an op on
 * NULL runs at once (enqueue, then synchronize) and leaves no sticky state.
 *
 * Capture uses cudaStreamCaptureModeThreadLocal: the capturing thread is
 * stopped from calling unsafe APIs (allocation, synchronization) - the bug
 * class graph mode must catch - while other threads of the rank (NCCL's
 * proxy, a checkpoint writer) keep working.  What global mode would add for
 * our own code the backend enforces itself, exactly as the cpu backend does:
 * alloc is refused while any stream of the backend captures, and NULL-stream
 * ops while any stream of the process captures.  A free requested during a
 * capture is deferred until the backend's last capture ends.
 *
 * Kernels that find bad data (token or target ids out of range) cannot
 * return a status; they set a bit in the stream's device error word, which
 * stream_sync reads, failing the stream with the op's name.
 */
#include "runtime/backend/cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_int.h"

cublasLtHandle_t qe__cuda_lt;

/* Process-wide: the default stream and the refcount of open backends. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static qe_stream *g_dflt;
static int g_backends;
static int g_capturing; /* streams capturing in this process (atomic) */

static const qe_backend_ops *cuda_table(void);

/* ---- errors ------------------------------------------------------------------ */

int qe__cuda_err(cudaError_t e, const char *op, const char *call)
{
	return qe_fail(QE_ECUDA, "%s: %s: %s (%s)", op, call, cudaGetErrorString(e), cudaGetErrorName(e));
}

int qe__blas_err(cublasStatus_t st, const char *op, const char *call)
{
	return qe_fail(QE_ECUDA, "%s: %s: %s (status %d)", op, call, cublasGetStatusString(st), (int)st);
}

int qe__cuda_launched(const char *op, const char *kernel)
{
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? QE_OK : qe__cuda_err(e, op, kernel);
}

static int stream_fail(qe_stream *s, int rc)
{
	if (s && !s->failed && !s->is_default) {
		s->failed = rc;
		snprintf(s->failmsg, sizeof(s->failmsg), "%s", qe_last_error());
	}
	return rc;
}

/* ---- streams: creation and the op path ---------------------------------------- */

static void stream_release(qe_stream *s)
{
	if (s->cs)
		cudaStreamSynchronize(s->cs); /* pending work may still use ws/scratch */
	if (s->blas)
		cublasDestroy(s->blas);
	cudaFree(s->ws);
	cudaFree(s->scratch);
	cudaFree(s->words);
	if (s->cs)
		cudaStreamDestroy(s->cs);
	free(s);
}

static int stream_new(qe_cuda_backend *be, qe_stream **out)
{
	const char *op = "stream_create";
	qe_stream *s = (qe_stream *)calloc(1, sizeof(*s));
	cudaError_t e;
	cublasStatus_t st;
	int rc;
	*out = NULL;
	if (!s)
		return qe_fail(QE_ENOMEM, "stream_create");
	s->be = be;
	if ((e = cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking)) != cudaSuccess) {
		s->cs = NULL;
		rc = qe__cuda_err(e, op, "cudaStreamCreateWithFlags");
		goto fail;
	}
	if ((e = cudaMalloc(&s->ws, QE_CUDA_WORKSPACE_BYTES)) != cudaSuccess) {
		s->ws = NULL;
		rc = qe__cuda_err(e, op, "cudaMalloc(workspace)");
		goto fail;
	}
	if ((e = cudaMalloc(&s->scratch, QE_CUDA_SCRATCH_BYTES)) != cudaSuccess) {
		s->scratch = NULL;
		rc = qe__cuda_err(e, op, "cudaMalloc(scratch)");
		goto fail;
	}
	s->scratch_bytes = QE_CUDA_SCRATCH_BYTES;
	if ((e = cudaMalloc((void **)&s->words, 256)) != cudaSuccess) {
		s->words = NULL;
		rc = qe__cuda_err(e, op, "cudaMalloc(words)");
		goto fail;
	}
	if ((e = cudaMemsetAsync(s->words, 0, 256, s->cs)) != cudaSuccess ||
	    (e = cudaStreamSynchronize(s->cs)) != cudaSuccess) {
		rc = qe__cuda_err(e, op, "clearing the error word");
		goto fail;
	}
	if ((st = cublasCreate(&s->blas)) != CUBLAS_STATUS_SUCCESS) {
		s->blas = NULL;
		rc = qe__blas_err(st, op, "cublasCreate");
		goto fail;
	}
	/* A workspace we own: cuBLAS then never allocates, which capture forbids. */
	if ((st = cublasSetStream(s->blas, s->cs)) != CUBLAS_STATUS_SUCCESS ||
	    (st = cublasSetWorkspace(s->blas, s->ws, QE_CUDA_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS ||
	    (st = cublasSetMathMode(s->blas, CUBLAS_PEDANTIC_MATH)) != CUBLAS_STATUS_SUCCESS) {
		rc = qe__blas_err(st, op, "binding the cuBLAS handle");
		goto fail;
	}
	*out = s;
	return QE_OK;
fail:
	stream_release(s);
	return rc;
}

/*
 * Resolve and check the stream of an op.  NULL becomes the default stream,
 * locked until op_end; refused while any stream of the process captures.
 */
int qe__cuda_op_begin(qe_stream **ps, const char *what)
{
	qe_stream *s = *ps;
	if (!s) {
		int n = __atomic_load_n(&g_capturing, __ATOMIC_SEQ_CST);
		if (n > 0)
			return qe_fail(QE_ECAPTURE, "%s on the default (NULL) stream while %d cuda stream(s) capture",
				       what, n);
		pthread_mutex_lock(&g_lock);
		if (!g_dflt) {
			pthread_mutex_unlock(&g_lock);
			return qe_fail(QE_EINVAL, "%s on the default (NULL) stream: no cuda backend is open", what);
		}
		g_dflt->failed = 0;
		*ps = g_dflt;
		return QE_OK;
	}
	if (s->failed)
		return qe_fail(s->failed, "%s: cuda stream failed earlier (%s): %s", what, qe_errname(s->failed),
			       s->failmsg);
	return QE_OK;
}

/* Read (and report) the stream's device error word; the stream must be idle. */
static int check_error_word(qe_stream *s, const char *what)
{
	unsigned w = 0;
	cudaError_t e = cudaMemcpyAsync(&w, s->words + 1, sizeof(w), cudaMemcpyDeviceToHost, s->cs);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, what, "reading the device error word");
	if (w & QE_CUDA_ERR_TOKEN)
		return qe_fail(QE_EINVAL, "%s: embed_bwd met a token outside the vocabulary (found on the device)", what);
	if (w & QE_CUDA_ERR_TARGET)
		return qe_fail(QE_EINVAL, "%s: xent met a target outside the vocabulary (found on the device)", what);
	return QE_OK;
}

/* Finish an op: the default stream runs it to completion and unlocks; others stay failed on error. */
int qe__cuda_op_end(qe_stream *s, int rc, const char *what)
{
	if (s->is_default) {
		if (!rc) {
			cudaError_t e = cudaStreamSynchronize(s->cs);
			rc = e != cudaSuccess ? qe__cuda_err(e, what, "cudaStreamSynchronize(default stream)")
					      : check_error_word(s, what);
			if (rc)
				cudaMemsetAsync(s->words, 0, 256, s->cs); /* the default stream keeps no failure */
		}
		pthread_mutex_unlock(&g_lock);
		return rc;
	}
	return rc ? stream_fail(s, rc) : QE_OK;
}

/* Grow s's scratch to at least bytes (rounded to MiB); never while capturing. */
static int grow_scratch(qe_stream *s, size_t bytes, const char *op)
{
	size_t nb = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
	cudaError_t e = cudaStreamSynchronize(s->cs);
	if (e != cudaSuccess)
		return qe__cuda_err(e, op, "cudaStreamSynchronize before growing the scratch");
	void *p = NULL;
	if ((e = cudaMalloc(&p, nb)) != cudaSuccess)
		return qe__cuda_err(e, op, "cudaMalloc(scratch)");
	cudaFree(s->scratch);
	s->scratch = p;
	s->scratch_bytes = nb;
	return QE_OK;
}

int qe__cuda_scratch(qe_stream *s, size_t bytes, const char *op, void **out)
{
	if (s->be) {
		/* remembered for capture_begin, which grows a stream's scratch to what any stream needed */
		size_t high = __atomic_load_n(&s->be->scratch_high, __ATOMIC_RELAXED);
		while (bytes > high &&
		       !__atomic_compare_exchange_n(&s->be->scratch_high, &high, bytes, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			;
	}
	if (bytes <= s->scratch_bytes) {
		*out = s->scratch;
		return QE_OK;
	}
	if (s->capturing)
		return qe_fail(QE_ECAPTURE,
			       "%s needs %zu bytes of stream scratch (have %zu) while capturing: run it once on this "
			       "stream before capture_begin",
			       op, bytes, s->scratch_bytes);
	int rc = grow_scratch(s, bytes, op);
	if (rc)
		return rc;
	*out = s->scratch;
	return QE_OK;
}

/* ---- memory ------------------------------------------------------------------ */

static int cu_alloc(qe_backend *b, size_t bytes, void **out)
{
	qe_cuda_backend *be = (qe_cuda_backend *)b;
	if (!out)
		return qe_fail(QE_EINVAL, "alloc: NULL out pointer");
	*out = NULL;
	int ncap = __atomic_load_n(&be->capturing, __ATOMIC_SEQ_CST);
	if (ncap > 0)
		return qe_fail(QE_ECAPTURE, "alloc of %zu bytes while %d cuda stream(s) capture: allocate before capture_begin",
			       bytes, ncap);
	size_t sz = bytes ? (bytes + 255) & ~(size_t)255 : 256;
	if (sz < bytes)
		return qe_fail(QE_ENOMEM, "alloc: %zu bytes", bytes);
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, sz);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* an out-of-memory is not sticky: clear it */
		return qe_fail(e == cudaErrorMemoryAllocation ? QE_ENOMEM : QE_ECUDA, "alloc: cudaMalloc(%zu): %s", sz,
			       cudaGetErrorString(e));
	}
	qe_stream *s = NULL;
	int rc = qe__cuda_op_begin(&s, "alloc");
	if (rc) {
		cudaFree(p);
		return rc;
	}
	e = cudaMemsetAsync(p, 0, sz, s->cs);
	rc = e != cudaSuccess ? qe__cuda_err(e, "alloc", "cudaMemsetAsync(zero fill)") : QE_OK;
	rc = qe__cuda_op_end(s, rc, "alloc");
	if (rc) {
		cudaFree(p);
		return rc;
	}
	__atomic_fetch_add(&be->live_allocs, 1, __ATOMIC_SEQ_CST);
	*out = p;
	return QE_OK;
}

static void flush_deferred(qe_cuda_backend *be)
{
	pthread_mutex_lock(&be->lock);
	if (__atomic_load_n(&be->capturing, __ATOMIC_SEQ_CST) == 0) {
		for (int i = 0; i < be->ndeferred; i++)
			cudaFree(be->deferred[i]);
		be->ndeferred = 0;
	}
	pthread_mutex_unlock(&be->lock);
}

static void cu_free(qe_backend *b, void *p)
{
	qe_cuda_backend *be = (qe_cuda_backend *)b;
	if (!p)
		return;
	__atomic_fetch_sub(&be->live_allocs, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&be->lock);
	if (__atomic_load_n(&be->capturing, __ATOMIC_SEQ_CST) > 0) {
		/* cudaFree synchronizes, which would invalidate the capture: do it when the capture ends */
		qe_log(QE_LOG_WARN, "cuda backend: free while capturing (deferred); a captured op may still point at %p", p);
		if (be->ndeferred == be->capdeferred) {
			int nc = be->capdeferred ? 2 * be->capdeferred : 16;
			void **q = (void **)realloc(be->deferred, (size_t)nc * sizeof(*q));
			if (!q) {
				pthread_mutex_unlock(&be->lock);
				qe_log(QE_LOG_WARN, "cuda backend: out of host memory deferring a free; leaking %p", p);
				return;
			}
			be->deferred = q;
			be->capdeferred = nc;
		}
		be->deferred[be->ndeferred++] = p;
		pthread_mutex_unlock(&be->lock);
		return;
	}
	pthread_mutex_unlock(&be->lock);
	cudaFree(p);
}

static int cu_copy(qe_stream *s, void *dst, const void *src, size_t bytes, qe_copy_kind kind)
{
	int rc = qe__cuda_op_begin(&s, "copy");
	if (rc)
		return rc;
	static const cudaMemcpyKind kinds[3] = { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
						 cudaMemcpyDeviceToDevice };
	rc = qe__check_copy(dst, src, bytes, kind);
	if (!rc && bytes) {
		cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[kind], s->cs);
		if (e != cudaSuccess)
			rc = qe__cuda_err(e, "copy", "cudaMemcpyAsync");
	}
	return qe__cuda_op_end(s, rc, "copy");
}

static int cu_fill(qe_stream *s, void *dst, uint8_t byte, size_t bytes)
{
	int rc = qe__cuda_op_begin(&s, "fill");
	if (rc)
		return rc;
	rc = qe__check_fill(dst, bytes);
	if (!rc && bytes) {
		cudaError_t e = cudaMemsetAsync(dst, byte, bytes, s->cs);
		if (e != cudaSuccess)
			rc = qe__cuda_err(e, "fill", "cudaMemsetAsync");
	}
	return qe__cuda_op_end(s, rc, "fill");
}

/* ---- streams, events, graphs ------------------------------------------------ */

static int cu_stream_create(qe_backend *b, qe_stream **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "stream_create: NULL out pointer");
	qe_cuda_backend *be = (qe_cuda_backend *)b;
	int rc = stream_new(be, out);
	if (!rc)
		__atomic_fetch_add(&be->live_streams, 1, __ATOMIC_SEQ_CST);
	return rc;
}

static void end_capture_state(qe_stream *s)
{
	s->capturing = 0;
	__atomic_fetch_sub(&s->be->capturing, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_sub(&g_capturing, 1, __ATOMIC_SEQ_CST);
	flush_deferred(s->be);
}

static void cu_stream_destroy(qe_stream *s)
{
	if (!s || s->is_default)
		return;
	if (s->capturing) {
		cudaGraph_t g = NULL;
		if (cudaStreamEndCapture(s->cs, &g) == cudaSuccess && g)
			cudaGraphDestroy(g);
		cudaGetLastError();
		end_capture_state(s);
	}
	qe_cuda_backend *be = s->be;
	stream_release(s);
	__atomic_fetch_sub(&be->live_streams, 1, __ATOMIC_SEQ_CST);
}

static int cu_stream_sync(qe_stream *s)
{
	int rc = qe__cuda_op_begin(&s, "stream_sync");
	if (rc)
		return rc;
	if (s->capturing) {
		/* CUDA would invalidate the capture; we fail the stream so the bug shows at once */
		rc = qe_fail(QE_ECAPTURE, "stream_sync on a capturing stream invalidates the capture");
	} else {
		cudaError_t e = cudaStreamSynchronize(s->cs);
		rc = e != cudaSuccess ? qe__cuda_err(e, "stream_sync", "cudaStreamSynchronize")
				      : check_error_word(s, "stream_sync");
	}
	return qe__cuda_op_end(s, rc, "stream_sync");
}

static int cu_host_alloc(qe_backend *b, size_t bytes, void **out)
{
	(void)b;
	if (!out)
		return qe_fail(QE_EINVAL, "host_alloc: NULL out pointer");
	*out = NULL;
	cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault);
	if (e != cudaSuccess) {
		cudaGetLastError();
		*out = NULL;
		return qe_fail(e == cudaErrorMemoryAllocation ? QE_ENOMEM : QE_ECUDA, "host_alloc: cudaHostAlloc(%zu): %s",
			       bytes, cudaGetErrorString(e));
	}
	return QE_OK;
}

static void cu_host_free(qe_backend *b, void *p)
{
	(void)b;
	if (p)
		cudaFreeHost(p);
}

/* The current device's free and total bytes (every process's use counted). */
static int cu_mem_info(qe_backend *b, size_t *free_bytes, size_t *total_bytes)
{
	(void)b;
	int rc = qe__check_mem_info(free_bytes, total_bytes);
	if (rc)
		return rc;
	cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return qe__cuda_err(e, "mem_info", "cudaMemGetInfo");
	}
	return QE_OK;
}

static int cu_stream_query(qe_stream *s)
{
	if (!s)
		return qe_fail(QE_EINVAL, "stream_query: the default stream is always idle between ops");
	if (s->failed)
		return qe_fail(s->failed, "stream_query: cuda stream failed earlier (%s): %s", qe_errname(s->failed),
			       s->failmsg);
	cudaError_t e = cudaStreamQuery(s->cs);
	if (e == cudaErrorNotReady)
		return 1;
	if (e != cudaSuccess)
		return stream_fail(s, qe__cuda_err(e, "stream_query", "cudaStreamQuery"));
	int rc = check_error_word(s, "stream_query");
	return rc ? stream_fail(s, rc) : QE_OK;
}

static int cu_event_create(qe_backend *b, qe_event **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "event_create: NULL out pointer");
	*out = NULL;
	qe_event *e = (qe_event *)calloc(1, sizeof(*e));
	if (!e)
		return qe_fail(QE_ENOMEM, "event_create");
	cudaError_t ce = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
	if (ce != cudaSuccess) {
		free(e);
		return qe__cuda_err(ce, "event_create", "cudaEventCreateWithFlags");
	}
	e->be = (qe_cuda_backend *)b;
	__atomic_fetch_add(&e->be->live_events, 1, __ATOMIC_SEQ_CST);
	*out = e;
	return QE_OK;
}

static void cu_event_destroy(qe_event *e)
{
	if (!e)
		return;
	cudaEventDestroy(e->ev);
	__atomic_fetch_sub(&e->be->live_events, 1, __ATOMIC_SEQ_CST);
	free(e);
}

static int cu_event_record(qe_event *ev, qe_stream *s)
{
	int rc = qe__cuda_op_begin(&s, "event_record");
	if (rc)
		return rc;
	if (!ev)
		rc = qe_fail(QE_EINVAL, "event_record: NULL event");
	else if (!s->is_default && ev->be != s->be)
		rc = qe_fail(QE_EINVAL, "event_record: event and stream belong to different backends");
	else {
		cudaError_t e = cudaEventRecord(ev->ev, s->cs);
		if (e != cudaSuccess)
			rc = qe__cuda_err(e, "event_record", "cudaEventRecord");
	}
	return qe__cuda_op_end(s, rc, "event_record");
}

/* Waiting on an event never recorded is a no-op (CUDA's rule, and the cpu's). */
static int cu_stream_wait(qe_stream *s, qe_event *ev)
{
	int rc = qe__cuda_op_begin(&s, "stream_wait");
	if (rc)
		return rc;
	if (!ev)
		rc = qe_fail(QE_EINVAL, "stream_wait: NULL event");
	else if (!s->is_default && ev->be != s->be)
		rc = qe_fail(QE_EINVAL, "stream_wait: event and stream belong to different backends");
	else {
		cudaError_t e = cudaStreamWaitEvent(s->cs, ev->ev, 0);
		if (e != cudaSuccess)
			rc = qe__cuda_err(e, "stream_wait", "cudaStreamWaitEvent");
	}
	return qe__cuda_op_end(s, rc, "stream_wait");
}

static int cu_capture_begin(qe_stream *s)
{
	if (!s)
		return qe_fail(QE_EINVAL, "capture_begin: the default (NULL) stream cannot capture");
	int rc = qe__cuda_op_begin(&s, "capture_begin");
	if (rc)
		return rc;
	if (s->capturing)
		return stream_fail(s, qe_fail(QE_ECAPTURE, "capture_begin: the stream is already capturing"));
	/* A graph's ops were run eagerly before, maybe on another stream: give this one as much
	 * scratch as any stream needed, since it cannot grow while capturing. */
	size_t high = __atomic_load_n(&s->be->scratch_high, __ATOMIC_SEQ_CST);
	if (high > s->scratch_bytes && (rc = grow_scratch(s, high, "capture_begin")))
		return stream_fail(s, rc);
	cudaError_t e = cudaStreamBeginCapture(s->cs, cudaStreamCaptureModeThreadLocal);
	if (e != cudaSuccess)
		return stream_fail(s, qe__cuda_err(e, "capture_begin", "cudaStreamBeginCapture"));
	s->capturing = 1;
	__atomic_fetch_add(&s->be->capturing, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&g_capturing, 1, __ATOMIC_SEQ_CST);
	return QE_OK;
}

static int cu_capture_end(qe_stream *s, qe_graph **out)
{
	if (!s || !out)
		return qe_fail(QE_EINVAL, "capture_end: NULL %s", s ? "out pointer" : "stream");
	*out = NULL;
	if (s->is_default)
		return qe_fail(QE_EINVAL, "capture_end: the default (NULL) stream cannot capture");
	if (!s->capturing) {
		int rc = qe__cuda_op_begin(&s, "capture_end");
		return rc ? rc : stream_fail(s, qe_fail(QE_EINVAL, "capture_end: the stream is not capturing"));
	}
	cudaGraph_t g = NULL;
	cudaError_t e = cudaStreamEndCapture(s->cs, &g);
	end_capture_state(s);
	if (s->failed) {
		if (g)
			cudaGraphDestroy(g);
		cudaGetLastError();
		return qe_fail(s->failed, "capture_end: capture invalidated by an earlier failure (%s): %s",
			       qe_errname(s->failed), s->failmsg);
	}
	if (e != cudaSuccess) {
		if (g)
			cudaGraphDestroy(g);
		return stream_fail(s, qe__cuda_err(e, "capture_end", "cudaStreamEndCapture"));
	}
	qe_graph *gr = (qe_graph *)calloc(1, sizeof(*gr));
	if (!gr) {
		cudaGraphDestroy(g);
		return qe_fail(QE_ENOMEM, "capture_end");
	}
	size_t nodes = 0;
	if ((e = cudaGraphGetNodes(g, NULL, &nodes)) != cudaSuccess ||
	    (e = cudaGraphInstantiate(&gr->exec, g, 0)) != cudaSuccess) {
		cudaGraphDestroy(g);
		free(gr);
		return stream_fail(s, qe__cuda_err(e, "capture_end", "cudaGraphInstantiate"));
	}
	gr->be = s->be;
	gr->graph = g;
	gr->nodes = (int)nodes;
	__atomic_fetch_add(&s->be->live_graphs, 1, __ATOMIC_SEQ_CST);
	*out = gr;
	return QE_OK;
}

static int cu_graph_launch(qe_graph *g, qe_stream *s)
{
	int rc = qe__cuda_op_begin(&s, "graph_launch");
	if (rc)
		return rc;
	if (!g)
		rc = qe_fail(QE_EINVAL, "graph_launch: NULL graph");
	else if (!s->is_default && g->be != s->be)
		rc = qe_fail(QE_EINVAL, "graph_launch: graph and stream belong to different backends");
	else {
		cudaError_t e = cudaGraphLaunch(g->exec, s->cs);
		if (e != cudaSuccess)
			rc = qe__cuda_err(e, "graph_launch", "cudaGraphLaunch");
	}
	return qe__cuda_op_end(s, rc, "graph_launch");
}

static void cu_graph_destroy(qe_graph *g)
{
	if (!g)
		return;
	cudaGraphExecDestroy(g->exec);
	cudaGraphDestroy(g->graph);
	__atomic_fetch_sub(&g->be->live_graphs, 1, __ATOMIC_SEQ_CST);
	free(g);
}

static int cu_graph_op_count(const qe_graph *g)
{
	return g ? g->nodes : 0;
}

/* ---- the table and the backend ---------------------------------------------- */

static qe_backend_ops g_ops;
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;

/* Filled at run time: C++17 (nvcc's default) has no designated initializers. */
static void fill_table(void)
{
	qe_backend_ops *o = &g_ops;
	o->name = "cuda";
	o->device = QE_DEV_CUDA;
	o->alloc = cu_alloc;
	o->free = cu_free;
	o->copy = cu_copy;
	o->fill = cu_fill;
	o->stream_create = cu_stream_create;
	o->stream_destroy = cu_stream_destroy;
	o->stream_sync = cu_stream_sync;
	o->stream_query = cu_stream_query;
	o->host_alloc = cu_host_alloc;
	o->host_free = cu_host_free;
	o->mem_info = cu_mem_info;
	o->event_create = cu_event_create;
	o->event_destroy = cu_event_destroy;
	o->event_record = cu_event_record;
	o->stream_wait = cu_stream_wait;
	o->capture_begin = cu_capture_begin;
	o->capture_end = cu_capture_end;
	o->graph_launch = cu_graph_launch;
	o->graph_destroy = cu_graph_destroy;
	o->graph_op_count = cu_graph_op_count;
	qe__cuda_ops_fill(o);
	qe__cuda_link_fill(o);
}

static const qe_backend_ops *cuda_table(void)
{
	pthread_once(&g_ops_once, fill_table);
	return &g_ops;
}

int qe_cuda_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

int qe_cuda_backend_create(qe_backend **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "cuda backend: NULL out pointer");
	*out = NULL;
	int n = 0, dev = 0, rc;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return qe__cuda_err(e, "cuda backend", "cudaGetDeviceCount");
	}
	if (n < 1)
		return qe_fail(QE_ECUDA, "cuda backend: no CUDA device");
	/* One process per GPU: a rank uses device LOCAL_RANK (modulo the devices present). */
	const char *lr = qe_launch_var("LOCAL_RANK");
	if (lr && *lr) {
		int want = atoi(lr) % n;
		if ((e = cudaSetDevice(want)) != cudaSuccess)
			return qe__cuda_err(e, "cuda backend", "cudaSetDevice(LOCAL_RANK)");
	}
	if ((e = cudaGetDevice(&dev)) != cudaSuccess)
		return qe__cuda_err(e, "cuda backend", "cudaGetDevice");
	qe_cuda_backend *be = (qe_cuda_backend *)calloc(1, sizeof(*be));
	if (!be)
		return qe_fail(QE_ENOMEM, "cuda backend");
	be->pub.ops = cuda_table();
	be->pub.impl = be;
	be->device = dev;
	pthread_mutex_init(&be->lock, NULL);

	pthread_mutex_lock(&g_lock);
	if (g_backends == 0) {
		cublasStatus_t st = cublasLtCreate(&qe__cuda_lt);
		if (st != CUBLAS_STATUS_SUCCESS) {
			pthread_mutex_unlock(&g_lock);
			pthread_mutex_destroy(&be->lock);
			free(be);
			return qe__blas_err(st, "cuda backend", "cublasLtCreate");
		}
		if ((rc = stream_new(NULL, &g_dflt))) {
			cublasLtDestroy(qe__cuda_lt);
			qe__cuda_lt = NULL;
			pthread_mutex_unlock(&g_lock);
			pthread_mutex_destroy(&be->lock);
			free(be);
			return qe_fail_ctx(rc, "cuda backend: default stream");
		}
		g_dflt->is_default = 1;
	}
	g_backends++;
	pthread_mutex_unlock(&g_lock);
	*out = &be->pub;
	return QE_OK;
}

void qe_cuda_backend_destroy(qe_backend *b)
{
	if (!b)
		return;
	qe_cuda_backend *be = (qe_cuda_backend *)b;
	long a = be->live_allocs, s = be->live_streams, e = be->live_events, g = be->live_graphs;
	if (a || s || e || g)
		qe_log(QE_LOG_WARN,
		       "cuda backend closed with %ld allocation(s), %ld stream(s), %ld event(s), %ld graph(s) alive", a,
		       s, e, g);
	for (int i = 0; i < be->ndeferred; i++)
		cudaFree(be->deferred[i]);
	free(be->deferred);
	pthread_mutex_destroy(&be->lock);
	free(be);

	pthread_mutex_lock(&g_lock);
	if (--g_backends == 0) {
		stream_release(g_dflt);
		g_dflt = NULL;
		qe__cuda_gemm_cache_clear();
		cublasLtDestroy(qe__cuda_lt);
		qe__cuda_lt = NULL;
	}
	pthread_mutex_unlock(&g_lock);
}
