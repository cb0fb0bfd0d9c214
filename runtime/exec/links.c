/*
 * links.c - the rank's device links: activations and gradients go from GPU
 * to GPU (NCCL on cuda) instead of through host memory and sockets.
 *
 * One link per direction of each pipeline pair the schedule uses, opened in
 * the same global order on every rank (ids made by the sending side and
 * broadcast over the host comm), so no two ranks wait for each other's
 * opens.  A send copies the payload into a per-peer staging ring on the
 * caller stream (the source buffer may be rewritten at once, as with the host
 * path) and sends it from the ring on a per-peer send stream, so the caller
 * stream never waits for a receiver.  Reusing a ring slot makes the caller
 * stream wait for that slot's previous send; the ring holds a whole step's
 * messages to that peer, so within a step no send waits on another.  A
 * receive is enqueued on the caller stream, where the consumer runs next.
 *
 * Device work can now wait on a peer, so a dead peer must not leave a stream
 * waiting forever: qe__rank_sync polls instead of blocking, and when the host
 * comm has failed, a link reports an error, or the comm timeout passes, it
 * aborts every link (NCCL returns from the waiting kernels) and fails.
 *
 * QE_P2P=host keeps the host path (to compare the two, or where NCCL
 * misbehaves); the messages are the same bytes either way.  The executor's
 * send, recv and all-reduce (the end of this file) choose between the two.
 */
#include "runtime/exec/rank_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/rt_options.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

typedef struct link_out {
	int peer;          /* global rank */
	qe_link *link;
	qe_stream *s;      /* sends to this peer, in order */
	qe_event *ready;   /* caller -> send stream: the payload is in its slot */
	char *ring;        /* nslots * slot bytes of backend memory */
	qe_event **done;   /* [nslots]: the slot's last send completed */
	unsigned char *used;
	int nslots, next;
} link_out;

typedef struct link_in {
	int peer;
	qe_link *link;
} link_in;

struct rank_links {
	link_out *out;
	link_in *in;
	int nout, nin;
	int *order;        /* [nout + nin]: open order; out link i as i, in link i as -1 - i */
	int norder;
	int aborted;
	size_t slot;       /* largest message */
	float *gather;     /* data parallel: (D - 1) * gather_floats, the other replicas' buffers */
	size_t gather_floats;
	int64_t sends, bytes;
};

static void abort_links(qe_rank *r);

/* Send counts per (from, to) pipeline rank in one step; 0 where the schedule never sends. */
static void count_sends(const qe_sched *sc, int *counts)
{
	memset(counts, 0, sizeof(int) * (size_t)sc->P * (size_t)sc->P);
	for (int a = 0; a < sc->P; a++)
		for (int i = 0; i < sc->ranks[a].n; i++) {
			const qe_sched_action *x = &sc->ranks[a].actions[i];
			if ((x->kind == QE_ACT_SEND_ACT || x->kind == QE_ACT_SEND_GRAD) && x->peer >= 0 && x->peer != a)
				counts[a * sc->P + x->peer]++;
		}
}

static int want_links(const qe_rank *r)
{
	const qe_backend_ops *o = r->b->ops;
	if (!r->comm || (r->P < 2 && r->D < 2) || !o->link_open || !o->stream_query)
		return 0;
	const char *v = qe_rt_options_get()->p2p;
	/* cpu links are local sockets like the host path; the reference keeps the host path unless asked. */
	if (o->device == QE_DEV_CPU)
		return v && strcmp(v, "device") == 0;
	return !(v && strcmp(v, "host") == 0);
}

/* One direction of one rank pair: pipeline messages (staged, nslots > 0) or replica sums (direct). */
typedef struct channel {
	int from, to, nslots;
} channel;

static int open_out(qe_rank *r, link_out *lo, int peer, const void *id, int nslots)
{
	const qe_backend_ops *o = r->b->ops;
	int rc;
	lo->peer = peer;
	lo->nslots = nslots;
	if ((rc = o->link_open(r->b, id, 1, &lo->link)))
		return qe_fail_ctx(rc, "rank %d: opening the device link to rank %d", r->rank, peer);
	if ((rc = o->stream_create(r->b, &lo->s)) || (rc = o->event_create(r->b, &lo->ready)))
		return rc;
	if (nslots && (rc = o->alloc(r->b, (size_t)nslots * r->links->slot, (void **)&lo->ring)))
		return rc;
	/* a direct link (no ring) has one completion event, for the send in flight */
	int nev = nslots ? nslots : 1;
	lo->done = calloc((size_t)nev, sizeof(*lo->done));
	lo->used = calloc((size_t)nev, 1);
	if (!lo->done || !lo->used)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for the link to rank %d", r->rank, peer);
	for (int k = 0; k < nev; k++)
		if ((rc = o->event_create(r->b, &lo->done[k])))
			return rc;
	return QE_OK;
}

/*
 * The channels every rank opens, in one order: each replica's pipeline pairs
 * the schedule sends over (ring of a step's messages + 2), then, with data
 * parallelism, each pipeline rank's replica pairs (direct: the replica sum
 * sends its gradient buffer and waits for the send before reusing it).
 */
static int list_channels(const qe_rank *r, channel **out, int *n)
{
	int P = r->P, D = r->D, k = 0;
	int *counts = calloc((size_t)P * (size_t)P, sizeof(int));
	channel *ch = calloc((size_t)D * P * P + (size_t)P * D * D + 1, sizeof(*ch));
	if (!counts || !ch) {
		free(counts);
		free(ch);
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for device links", r->rank);
	}
	count_sends(r->sched, counts);
	for (int d = 0; d < D; d++)
		for (int a = 0; a < P; a++)
			for (int b = 0; b < P; b++)
				if (counts[a * P + b])
					ch[k++] = (channel){ d * P + a, d * P + b, counts[a * P + b] + 2 };
	for (int p = 0; D > 1 && p < P; p++)
		for (int d = 0; d < D; d++)
			for (int e = 0; e < D; e++)
				if (d != e)
					ch[k++] = (channel){ d * P + p, e * P + p, 0 };
	free(counts);
	*out = ch;
	*n = k;
	return QE_OK;
}

/*
 * Whether two ranks of the job run on one device (the backend's device_key,
 * heard from every rank in rank order, so all ranks answer alike).  OUT: the
 * first such pair.
 */
static int shared_device(qe_rank *r, int *a, int *b)
{
	const qe_backend_ops *o = r->b->ops;
	enum { KEY = 320 };
	*a = *b = -1;
	if (!o->device_key)
		return QE_OK;
	char *keys = calloc((size_t)r->world, KEY);
	if (!keys)
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for %d device keys", r->rank, r->world);
	int rc = o->device_key(r->b, keys + (size_t)r->rank * KEY, KEY - 1);
	for (int k = 0; k < r->world && !rc; k++)
		rc = qe_comm_bcast(r->comm, k, keys + (size_t)k * KEY, KEY);
	for (int i = 0; i < r->world && !rc && *a < 0; i++)
		for (int j = i + 1; j < r->world && *a < 0; j++)
			if (!strcmp(keys + (size_t)i * KEY, keys + (size_t)j * KEY)) {
				*a = i;
				*b = j;
			}
	if (!rc && *a >= 0 && r->rank == 0)
		qe_log(QE_LOG_INFO, "ranks %d and %d share one device (%s): messages go through host memory", *a, *b,
		       keys + (size_t)*a * KEY);
	free(keys);
	return rc;
}

int qe__rank_links_open(qe_rank *r, size_t max_message, size_t max_reduce_floats)
{
	if (!want_links(r))
		return QE_OK;
	int sa, sb, src = shared_device(r, &sa, &sb);
	if (src || sa >= 0)
		return src; /* nothing made yet */
	const qe_backend_ops *o = r->b->ops;
	int P = r->P, D = r->D, rc = QE_OK, nch = 0;
	channel *ch = NULL;
	if ((rc = list_channels(r, &ch, &nch)))
		return rc;
	rank_links *L = calloc(1, sizeof(*L));
	if (L) {
		L->out = calloc((size_t)(P + D), sizeof(*L->out));
		L->in = calloc((size_t)(P + D), sizeof(*L->in));
		L->order = calloc((size_t)(P + D) * 2, sizeof(int));
	}
	if (!L || !L->out || !L->in || !L->order) {
		free(ch);
		if (L) {
			free(L->out);
			free(L->in);
			free(L->order);
			free(L);
		}
		return qe_fail(QE_ENOMEM, "rank %d: out of host memory for device links", r->rank);
	}
	r->links = L;
	L->slot = (max_message + 255) / 256 * 256;
	if (D > 1) {
		L->gather_floats = (max_reduce_floats + 63) / 64 * 64;
		rc = o->alloc(r->b, (size_t)(D - 1) * L->gather_floats * sizeof(float), (void **)&L->gather);
	}
	/*
	 * The sending side makes each id and every rank hears it, in the same
	 * order everywhere.  The last byte says whether the id is good, so a
	 * sender that cannot make one fails its peer at once instead of leaving
	 * it in the broadcast.
	 */
	for (int i = 0; i < nch && !rc; i++) {
		int ga = ch[i].from, gb = ch[i].to;
		unsigned char id[QE_LINK_ID_BYTES + 1] = { 0 };
		int idrc = QE_OK;
		if (r->rank == ga) {
			idrc = o->link_id(r->b, id);
			id[QE_LINK_ID_BYTES] = idrc == QE_OK;
		}
		if ((rc = qe_comm_bcast(r->comm, ga, id, sizeof(id))))
			break;
		if (idrc) {
			rc = idrc;
			break;
		}
		if (!id[QE_LINK_ID_BYTES]) {
			rc = qe_fail(QE_ECOMM, "rank %d: rank %d could not make the id of its device link to rank %d", r->rank,
				     ga, gb);
			break;
		}
		if (r->rank == ga) {
			L->order[L->norder++] = L->nout;
			rc = open_out(r, &L->out[L->nout++], gb, id, ch[i].nslots);
		} else if (r->rank == gb) {
			L->order[L->norder++] = -1 - L->nin;
			link_in *li = &L->in[L->nin++];
			li->peer = ga;
			if ((rc = o->link_open(r->b, id, 0, &li->link)))
				rc = qe_fail_ctx(rc, "rank %d: opening the device link from rank %d", r->rank, ga);
		}
	}
	free(ch);
	if (rc) {
		abort_links(r); /* the other side of a link may never get here: do not wait for it */
		qe__rank_links_close(r);
		return qe_fail_ctx(rc, "rank %d: device links (set QE_P2P=host to move messages through host memory)",
				   r->rank);
	}
	qe_log(QE_LOG_DEBUG, "rank %d: %d outgoing and %d incoming device links, %zu-byte slots", r->rank, L->nout,
	       L->nin, L->slot);
	return QE_OK;
}

/*
 * Closing a link is collective between its two sides (NCCL tears a
 * communicator down with its peer), so links close in the order they were
 * opened, which is the same on every rank; closing them in another order
 * deadlocks two ranks each waiting for the other's link.  After a failure
 * the links are aborted instead, which waits for nobody.
 */
void qe__rank_links_close(qe_rank *r)
{
	rank_links *L = r->links;
	if (!L)
		return;
	const qe_backend_ops *o = r->b->ops;
	for (int i = 0; i < L->nout && !L->aborted; i++)
		if (L->out[i].s && qe__rank_sync(r, L->out[i].s)) /* a dead peer aborts the links here */
			qe_log(QE_LOG_WARN, "closing device links: %s", qe_last_error());
	for (int k = 0; k < L->norder; k++) {
		int i = L->order[k];
		qe_link *l = i >= 0 ? L->out[i].link : L->in[-1 - i].link;
		if (l)
			o->link_close(l);
	}
	for (int i = 0; i < L->nout; i++) {
		link_out *lo = &L->out[i];
		for (int k = 0; lo->done && k < (lo->nslots ? lo->nslots : 1); k++)
			if (lo->done[k])
				o->event_destroy(lo->done[k]);
		if (lo->ready)
			o->event_destroy(lo->ready);
		if (lo->s)
			o->stream_destroy(lo->s);
		if (lo->ring)
			o->free(r->b, lo->ring);
		free(lo->done);
		free(lo->used);
	}
	if (L->gather)
		o->free(r->b, L->gather);
	free(L->out);
	free(L->in);
	free(L->order);
	free(L);
	r->links = NULL;
}

static link_out *out_link(rank_links *L, int peer)
{
	for (int i = 0; i < L->nout; i++)
		if (L->out[i].peer == peer)
			return &L->out[i];
	return NULL;
}

static link_in *in_link(rank_links *L, int peer)
{
	for (int i = 0; i < L->nin; i++)
		if (L->in[i].peer == peer)
			return &L->in[i];
	return NULL;
}

int qe__rank_link_send(qe_rank *r, int peer, const void *src, size_t bytes)
{
	rank_links *L = r->links;
	const qe_backend_ops *o = r->b->ops;
	link_out *lo = out_link(L, peer);
	if (!lo || !lo->nslots)
		return qe_fail(QE_ESCHEDULE, "rank %d: no device link to rank %d (the schedule never sends there)", r->rank,
			       peer);
	if (bytes > L->slot)
		return qe_fail(QE_EINVAL, "rank %d: a %zu-byte message to rank %d is larger than the link slots (%zu)",
			       r->rank, bytes, peer, L->slot);
	int k = lo->next;
	lo->next = (lo->next + 1) % lo->nslots;
	char *slot = lo->ring + (size_t)k * L->slot;
	int rc;
	if (lo->used[k] && (rc = o->stream_wait(r->caller, lo->done[k])))
		return rc;
	if ((rc = o->copy(r->caller, slot, src, bytes, QE_COPY_D2D)) || (rc = o->event_record(lo->ready, r->caller)) ||
	    (rc = o->stream_wait(lo->s, lo->ready)) || (rc = o->link_send(lo->link, lo->s, slot, bytes)) ||
	    (rc = o->event_record(lo->done[k], lo->s)))
		return qe_fail_ctx(rc, "rank %d: sending %zu bytes to rank %d", r->rank, bytes, peer);
	lo->used[k] = 1;
	L->sends++;
	L->bytes += (int64_t)bytes;
	return QE_OK;
}

int qe__rank_link_recv(qe_rank *r, int peer, void *dst, size_t bytes)
{
	link_in *li = in_link(r->links, peer);
	if (!li)
		return qe_fail(QE_ESCHEDULE, "rank %d: no device link from rank %d (the schedule never receives from it)",
			       r->rank, peer);
	int rc = r->b->ops->link_recv(li->link, r->caller, dst, bytes);
	return rc ? qe_fail_ctx(rc, "rank %d: receiving %zu bytes from rank %d", r->rank, bytes, peer) : QE_OK;
}

int qe__rank_links_reduce_ready(const qe_rank *r)
{
	return r->links && r->links->gather;
}

/*
 * The replica sum over device links, bitwise the host path's: every member
 * sends its buffer to every other member and receives theirs, then sums all
 * of them in group order on its own device (sum_views starts from the first
 * view and adds the rest in order, as the host all-reduce does on the
 * group's first rank), so every replica computes the same bytes.  Sends go
 * on the per-peer streams and receives on the caller stream; the caller
 * stream then waits for this member's sends before anything may overwrite
 * buf.
 *
 * The host calls pair up: with each peer in group order, the member earlier
 * in the group sends first and the later one receives first.  NCCL may block
 * the host in a send or receive until the peer makes the matching call (it
 * connects a pair lazily, on its first operation), so two members that both
 * sent first hung on the GPU machine.  Every send's ready event is recorded
 * before any receive is enqueued, so no send waits for a receive's kernel.
 */
static int replica_send(qe_rank *r, link_out *lo, const float *buf, size_t bytes)
{
	const qe_backend_ops *o = r->b->ops;
	int rc;
	if ((rc = o->stream_wait(lo->s, lo->ready)) || (rc = o->link_send(lo->link, lo->s, buf, bytes)) ||
	    (rc = o->event_record(lo->done[0], lo->s)))
		return qe_fail_ctx(rc, "rank %d: sending a %zu-byte gradient to replica rank %d", r->rank, bytes,
				   lo->peer);
	r->links->sends++;
	r->links->bytes += (int64_t)bytes;
	return QE_OK;
}

static int replica_recv(qe_rank *r, link_in *li, float *dst, size_t bytes)
{
	int rc = r->b->ops->link_recv(li->link, r->caller, dst, bytes);
	return rc ? qe_fail_ctx(rc, "rank %d: receiving a %zu-byte gradient from replica rank %d", r->rank, bytes,
				li->peer)
		  : QE_OK;
}

int qe__rank_link_allreduce(qe_rank *r, float *buf, size_t n, const int *group, int gsize)
{
	rank_links *L = r->links;
	const qe_backend_ops *o = r->b->ops;
	const float *views[64];
	link_out *outs[64];
	link_in *ins[64];
	int me = -1, rc;
	if (gsize > 64 || n > L->gather_floats)
		return qe_fail(QE_EINVAL, "rank %d: replica sum of %zu floats over %d ranks exceeds the links' buffers",
			       r->rank, n, gsize);
	for (int j = 0; j < gsize; j++)
		if (group[j] == r->rank)
			me = j;
	if (me < 0)
		return qe_fail(QE_EINVAL, "rank %d: replica sum over a group without this rank", r->rank);
	size_t bytes = n * sizeof(float);
	for (int j = 0, slot = 0; j < gsize; j++) {
		if (j == me) {
			views[j] = buf;
			continue;
		}
		outs[j] = out_link(L, group[j]);
		ins[j] = in_link(L, group[j]);
		if (!outs[j] || outs[j]->nslots || !ins[j])
			return qe_fail(QE_ESCHEDULE, "rank %d: no replica link pair with rank %d", r->rank, group[j]);
		if ((rc = o->event_record(outs[j]->ready, r->caller)))
			return rc;
		views[j] = L->gather + (size_t)slot++ * L->gather_floats;
	}
	for (int j = 0; j < gsize; j++) {
		if (j == me)
			continue;
		float *dst = (float *)views[j];
		if (me < j)
			rc = replica_send(r, outs[j], buf, bytes);
		else
			rc = replica_recv(r, ins[j], dst, bytes);
		if (rc)
			return rc;
		if ((rc = me < j ? replica_recv(r, ins[j], dst, bytes) : replica_send(r, outs[j], buf, bytes)))
			return rc;
	}
	for (int j = 0; j < gsize; j++)
		if (j != me && (rc = o->stream_wait(r->caller, outs[j]->done[0])))
			return rc;
	/* out may be one of the views: both backends read an element of every view before writing it */
	return o->sum_views(r->caller, buf, views, gsize, (int64_t)n);
}

void qe__rank_links_counters(const qe_rank *r, int *on, int64_t *sends, int64_t *bytes)
{
	*on = r->links != NULL;
	*sends = r->links ? r->links->sends : 0;
	*bytes = r->links ? r->links->bytes : 0;
}

static void abort_links(qe_rank *r)
{
	rank_links *L = r->links;
	L->aborted = 1;
	for (int i = 0; i < L->nout; i++)
		r->b->ops->link_abort(L->out[i].link);
	for (int i = 0; i < L->nin; i++)
		r->b->ops->link_abort(L->in[i].link);
}

void qe_rank_abandon(qe_rank *r)
{
	if (r && r->links && !r->links->aborted)
		abort_links(r);
}

/* 0 while every link and the host comm are healthy; else the failure, links aborted. */
static int links_health(qe_rank *r)
{
	rank_links *L = r->links;
	const qe_backend_ops *o = r->b->ops;
	if (qe_comm_failed(r->comm)) {
		char why[512];
		abort_links(r);
		return qe_fail(QE_ECOMM, "rank %d: a peer failed while device work waited on it: %s", r->rank,
			       qe_comm_failure(r->comm, why, sizeof(why)));
	}
	for (int i = 0; i < L->nout + L->nin; i++) {
		qe_link *l = i < L->nout ? L->out[i].link : L->in[i - L->nout].link;
		int rc = o->link_check(l);
		if (rc) {
			abort_links(r);
			return qe_fail_ctx(rc, "rank %d: device link %s rank %d", r->rank, i < L->nout ? "to" : "from",
					   i < L->nout ? L->out[i].peer : L->in[i - L->nout].peer);
		}
	}
	return QE_OK;
}

int qe__rank_sync(qe_rank *r, qe_stream *s)
{
	const qe_backend_ops *o = r->b->ops;
	if (!r->links)
		return o->stream_sync(s);
	double deadline = qe__rank_now_ms() + qe_comm_env(r->comm)->timeout_ms;
	long nap_us = 2;
	for (;;) {
		int rc = o->stream_query(s);
		if (rc <= 0)
			return rc;
		if ((rc = links_health(r)))
			return rc;
		if (qe__rank_now_ms() > deadline) {
			abort_links(r);
			return qe_fail(QE_ECOMM, "rank %d: device work still waiting on a peer after %d ms", r->rank,
				       qe_comm_env(r->comm)->timeout_ms);
		}
		struct timespec ts = { 0, nap_us * 1000 };
		nanosleep(&ts, NULL);
		if (nap_us < 64)
			nap_us *= 2;
	}
}

int qe__rank_links_quiesce(qe_rank *r)
{
	rank_links *L = r->links;
	for (int i = 0; L && i < L->nout; i++) {
		int rc = qe__rank_sync(r, L->out[i].s);
		if (rc)
			return qe_fail_ctx(rc, "rank %d: sends to rank %d did not complete", r->rank, L->out[i].peer);
	}
	return QE_OK;
}

/* ---- messages: over the links, or through the host comm ------------------ */

int qe__rank_send(qe_rank *r, int peer, uint32_t tag, const void *src, size_t bytes)
{
	int rc;
	if (!r->comm)
		return qe_fail(QE_ECOMM, "rank %d: send to rank %d without a communicator", r->rank, peer);
	if (r->links)
		return qe__rank_link_send(r, peer, src, bytes);
	if (!qe__rank_host_mem(r)) {
		if ((rc = r->b->ops->copy(r->caller, r->host_buf, src, bytes, QE_COPY_D2H)) ||
		    (rc = r->b->ops->stream_sync(r->caller)))
			return rc;
		src = r->host_buf;
	}
	return qe_comm_send(r->comm, peer, tag, src, bytes);
}

int qe__rank_recv(qe_rank *r, int peer, uint32_t tag, void *dst, size_t bytes)
{
	int rc;
	if (!r->comm)
		return qe_fail(QE_ECOMM, "rank %d: receive from rank %d without a communicator", r->rank, peer);
	if (r->links)
		return qe__rank_link_recv(r, peer, dst, bytes);
	if (qe__rank_host_mem(r))
		return qe_comm_recv(r->comm, peer, tag, dst, bytes);
	if ((rc = qe_comm_recv(r->comm, peer, tag, r->host_buf, bytes)))
		return rc;
	return r->b->ops->copy(r->caller, dst, r->host_buf, bytes, QE_COPY_H2D);
}

int qe__rank_allreduce(qe_rank *r, float *buf, size_t n, const int *group, int group_size)
{
	int rc;
	if (!r->comm || (group_size == 1 && group) || r->world == 1)
		return QE_OK;
	if (qe__rank_links_reduce_ready(r) && group)
		return qe__rank_link_allreduce(r, buf, n, group, group_size);
	if (qe__rank_host_mem(r))
		return qe_comm_allreduce_sum_f32(r->comm, buf, n, group, group_size);
	if ((rc = r->b->ops->copy(r->caller, r->host_buf, buf, n * 4, QE_COPY_D2H)) ||
	    (rc = qe__rank_sync(r, r->caller)) ||
	    (rc = qe_comm_allreduce_sum_f32(r->comm, r->host_buf, n, group, group_size)))
		return rc;
	return r->b->ops->copy(r->caller, buf, r->host_buf, n * 4, QE_COPY_H2D);
}
