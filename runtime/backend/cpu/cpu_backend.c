/*
 * cpu_backend.c - the cpu op table and the backend behind it: creating and
 * destroying the backend, and its memory.
 *
 * The table's entries live in three files: cpu_stream.c (streams, events,
 * capture/replay), cpu_ops.c (every op a stream runs or records, one entry
 * of the op list in cpu_ops.h each; their table entries are generated from
 * that list below) and cpu_link.c (device links over local sockets, so the
 * executor's device-link path runs without a GPU).  Memory is here because
 * its one rule is the backend's: no allocation while any of its streams
 * captures, exactly as CUDA refuses it.
 */
#include "runtime/backend/cpu/cpu_backend.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "runtime/backend/backend_check.h"
#include "runtime/backend/cpu/cpu_link.h"
#include "runtime/backend/cpu/cpu_ops.h"
#include "runtime/backend/cpu/cpu_stream.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* ---- memory ------------------------------------------------------------------ */

static int cpu_alloc(qe_backend *b, size_t bytes, void **out)
{
	qe_cpu_backend *be = (qe_cpu_backend *)b;
	if (!out)
		return qe_fail(QE_EINVAL, "alloc: NULL out pointer");
	*out = NULL;
	int ncap = atomic_load(&be->capturing);
	if (ncap > 0)
		return qe_fail(QE_ECAPTURE, "alloc of %zu bytes while %d cpu stream(s) capture: allocate before capture_begin",
			       bytes, ncap);
	/* 256-byte alignment, as cudaMalloc gives, so arena views line up the same on both backends */
	size_t sz = bytes ? (bytes + 255) & ~(size_t)255 : 256;
	if (sz < bytes)
		return qe_fail(QE_ENOMEM, "alloc: %zu bytes", bytes);
	void *p = aligned_alloc(256, sz);
	if (!p)
		return qe_fail(QE_ENOMEM, "alloc: %zu bytes", bytes);
	memset(p, 0, sz);
	atomic_fetch_add(&be->live_allocs, 1);
	*out = p;
	return QE_OK;
}

static void cpu_free(qe_backend *b, void *p)
{
	qe_cpu_backend *be = (qe_cpu_backend *)b;
	if (!p)
		return;
	if (atomic_load(&be->capturing) > 0)
		qe_log(QE_LOG_WARN, "cpu backend: free while capturing; a recorded op may still point at %p", p);
	atomic_fetch_sub(&be->live_allocs, 1);
	free(p);
}

static int cpu_host_alloc(qe_backend *b, size_t bytes, void **out)
{
	(void)b;
	if (!out)
		return qe_fail(QE_EINVAL, "host_alloc: NULL out pointer");
	*out = malloc(bytes ? bytes : 1);
	return *out ? QE_OK : qe_fail(QE_ENOMEM, "host_alloc: %zu bytes", bytes);
}

static void cpu_host_free(qe_backend *b, void *p)
{
	(void)b;
	free(p);
}

/* The host's RAM: what sysinfo reports free and in total. */
static int cpu_mem_info(qe_backend *b, size_t *free_bytes, size_t *total_bytes)
{
	(void)b;
	int rc = qe__check_mem_info(free_bytes, total_bytes);
	if (rc)
		return rc;
	struct sysinfo si;
	if (sysinfo(&si) != 0)
		return qe_fail(QE_EIO, "mem_info: sysinfo: %s", strerror(errno));
	*free_bytes = (size_t)si.freeram * si.mem_unit;
	*total_bytes = (size_t)si.totalram * si.mem_unit;
	return QE_OK;
}

/* ---- the table ---------------------------------------------------------------- */

static const qe_backend_ops cpu_ops = {
	.name = "cpu",
	.device = QE_DEV_CPU,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.mem_info = cpu_mem_info,
	.stream_create = qe__cpu_stream_create,
	.stream_destroy = qe__cpu_stream_destroy,
	.stream_sync = qe__cpu_stream_sync,
	.event_create = qe__cpu_event_create,
	.event_destroy = qe__cpu_event_destroy,
	.capture_begin = qe__cpu_capture_begin,
	.capture_end = qe__cpu_capture_end,
	.graph_launch = qe__cpu_graph_launch,
	.graph_destroy = qe__cpu_graph_destroy,
	.graph_op_count = qe__cpu_graph_op_count,
	.stream_query = qe__cpu_stream_query,
	.link_id = qe__cpu_link_id,
	.link_open = qe__cpu_link_open,
	.link_send = qe__cpu_link_send,
	.link_recv = qe__cpu_link_recv,
	.link_check = qe__cpu_link_check,
	.link_abort = qe__cpu_link_abort,
	.link_close = qe__cpu_link_close,
	/* every op of the list: .copy = qe__cpu_enqueue_copy, ..., .event_record, .stream_wait */
#define QE_CPU_OP_ENTRY_(NAME, name) .name = qe__cpu_enqueue_##name,
	QE_CPU_OPS(QE_CPU_OP_ENTRY_)
#undef QE_CPU_OP_ENTRY_
};

int qe_cpu_backend_create(qe_backend **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "cpu backend: NULL out pointer");
	*out = NULL;
	qe_cpu_backend *be = calloc(1, sizeof(*be));
	if (!be)
		return qe_fail(QE_ENOMEM, "cpu backend");
	be->pub.ops = &cpu_ops;
	be->pub.impl = be;
	atomic_init(&be->capturing, 0);
	atomic_init(&be->live_allocs, 0);
	atomic_init(&be->live_streams, 0);
	atomic_init(&be->live_events, 0);
	atomic_init(&be->live_graphs, 0);
	*out = &be->pub;
	return QE_OK;
}

void qe_cpu_backend_destroy(qe_backend *b)
{
	if (!b)
		return;
	qe_cpu_backend *be = (qe_cpu_backend *)b;
	qe__cpu_link_forget(b);
	long a = atomic_load(&be->live_allocs), s = atomic_load(&be->live_streams);
	long e = atomic_load(&be->live_events), g = atomic_load(&be->live_graphs);
	if (a || s || e || g)
		qe_log(QE_LOG_WARN, "cpu backend closed with %ld allocation(s), %ld stream(s), %ld event(s), %ld graph(s) alive",
		       a, s, e, g);
	free(be);
}
