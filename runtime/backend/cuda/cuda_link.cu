/*
 * cuda_link.cu - device links between rank processes over NCCL.
 *
 * A link is its own two-member NCCL communicator used in one direction only:
 * the sender is member 0, the receiver member 1.  One communicator per
 * direction of each rank pair is what makes point-to-point safe here: NCCL
 * requires the operations of one communicator to be issued in the same order
 * by its members and forbids using it from two streams at once, while the
 * executor sends on a per-peer stream and receives on its caller stream in
 * schedule order.  With one channel per direction, the k-th send of a channel
 * always meets its k-th receive, whatever the two schedules interleave.
 *
 * Payloads move as bytes (ncclUint8): a link carries whatever the executor
 * hands it, bit for bit.  Without NCCL (QE_WITH_NCCL unset) the link ops stay
 * NULL and the executor moves messages through host memory.
 */
#include "runtime/backend/cuda/cuda_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef QE_WITH_NCCL
#include <nccl.h>

struct qe_link {
	qe_cuda_backend *be;
	ncclComm_t comm;
	int is_sender;
	int aborted;
};

static int nccl_err(ncclResult_t r, const char *op, const char *call, ncclComm_t comm)
{
	const char *last = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
	return qe_fail(QE_ENCCL, "%s: %s: %s%s%s", op, call, ncclGetErrorString(r), last && *last ? ": " : "",
		       last ? last : "");
}

static int cu_link_id(qe_backend *b, void *id)
{
	(void)b;
	static_assert(sizeof(ncclUniqueId) == QE_LINK_ID_BYTES, "QE_LINK_ID_BYTES must be NCCL's id size");
	/* NVLink multicast is never needed by two-member links, and can take a shared host's GPUs down. */
	qe_env_set("NCCL_NVLS_ENABLE", "0", 0);
	ncclUniqueId u;
	ncclResult_t r = ncclGetUniqueId(&u);
	if (r != ncclSuccess)
		return nccl_err(r, "link_id", "ncclGetUniqueId", NULL);
	memcpy(id, &u, sizeof(u));
	return QE_OK;
}

static int cu_device_key(qe_backend *b, char *key, size_t len)
{
	(void)b;
	char host[256] = "", bus[64] = "";
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), dev);
	if (e != cudaSuccess)
		return qe__cuda_err(e, "device_key", "cudaDeviceGetPCIBusId");
	if (gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "?");
	snprintf(key, len, "%s/%s", host, bus);
	return QE_OK;
}

static int cu_link_open(qe_backend *b, const void *id, int is_sender, qe_link **out)
{
	if (!b || !id || !out)
		return qe_fail(QE_EINVAL, "link_open: NULL argument");
	*out = NULL;
	qe_env_set("NCCL_NVLS_ENABLE", "0", 0);
	qe_link *l = (qe_link *)calloc(1, sizeof(*l));
	if (!l)
		return qe_fail(QE_ENOMEM, "link_open: out of host memory");
	l->be = (qe_cuda_backend *)b;
	l->is_sender = is_sender != 0;
	cudaError_t e = cudaSetDevice(l->be->device);
	if (e != cudaSuccess) {
		free(l);
		return qe__cuda_err(e, "link_open", "cudaSetDevice");
	}
	ncclUniqueId u;
	memcpy(&u, id, sizeof(u));
	ncclResult_t r = ncclCommInitRank(&l->comm, 2, u, l->is_sender ? 0 : 1);
	if (r != ncclSuccess) {
		int rc = nccl_err(r, "link_open", "ncclCommInitRank", NULL);
		free(l);
		return rc;
	}
	*out = l;
	return QE_OK;
}

/* Shared checks of send and receive: a live link, the right side, a stream that may run it. */
static int link_ready(qe_link *l, qe_stream *s, const void *buf, size_t bytes, int sending, const char *op)
{
	if (!l || !s || (!buf && bytes))
		return qe_fail(QE_EINVAL, "%s: NULL link, stream or buffer", op);
	if (l->aborted)
		return qe_fail(QE_ENCCL, "%s: the link was aborted (a peer failed)", op);
	if (l->is_sender != sending)
		return qe_fail(QE_EINVAL, "%s on the %s side of a one-way link", op, l->is_sender ? "sending" : "receiving");
	if (s->is_default)
		return qe_fail(QE_EINVAL, "%s on the default stream: it would block every other op", op);
	if (s->failed)
		return qe_fail(s->failed, "%s: cuda stream failed earlier (%s): %s", op, qe_errname(s->failed),
			       s->failmsg);
	if (s->capturing)
		return qe_fail(QE_ECAPTURE, "%s while the stream captures: links run outside graphs", op);
	return QE_OK;
}

static int cu_link_send(qe_link *l, qe_stream *s, const void *buf, size_t bytes)
{
	int rc = link_ready(l, s, buf, bytes, 1, "link_send");
	if (rc)
		return rc;
	ncclResult_t r = ncclSend(buf, bytes, ncclUint8, 1, l->comm, s->cs);
	return r == ncclSuccess ? QE_OK : nccl_err(r, "link_send", "ncclSend", l->comm);
}

static int cu_link_recv(qe_link *l, qe_stream *s, void *buf, size_t bytes)
{
	int rc = link_ready(l, s, buf, bytes, 0, "link_recv");
	if (rc)
		return rc;
	ncclResult_t r = ncclRecv(buf, bytes, ncclUint8, 0, l->comm, s->cs);
	return r == ncclSuccess ? QE_OK : nccl_err(r, "link_recv", "ncclRecv", l->comm);
}

static int cu_link_check(qe_link *l)
{
	if (!l)
		return qe_fail(QE_EINVAL, "link_check: NULL link");
	if (l->aborted)
		return qe_fail(QE_ENCCL, "link_check: the link was aborted (a peer failed)");
	ncclResult_t async = ncclSuccess;
	ncclResult_t r = ncclCommGetAsyncError(l->comm, &async);
	if (r != ncclSuccess)
		return nccl_err(r, "link_check", "ncclCommGetAsyncError", l->comm);
	if (async != ncclSuccess && async != ncclInProgress)
		return nccl_err(async, "link_check", "asynchronous NCCL error", l->comm);
	return QE_OK;
}

static void cu_link_abort(qe_link *l)
{
	if (!l || l->aborted)
		return;
	ncclCommAbort(l->comm); /* kernels waiting on the peer return; the communicator is gone */
	l->aborted = 1;
}

static void cu_link_close(qe_link *l)
{
	if (!l)
		return;
	if (!l->aborted)
		ncclCommDestroy(l->comm);
	free(l);
}

void qe__cuda_link_fill(qe_backend_ops *o)
{
	o->link_id = cu_link_id;
	o->device_key = cu_device_key;
	o->link_open = cu_link_open;
	o->link_send = cu_link_send;
	o->link_recv = cu_link_recv;
	o->link_check = cu_link_check;
	o->link_abort = cu_link_abort;
	o->link_close = cu_link_close;
}

#else

void qe__cuda_link_fill(qe_backend_ops *o)
{
	(void)o;
}

#endif
