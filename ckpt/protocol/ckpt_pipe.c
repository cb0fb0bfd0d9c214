/*
 * ckpt_pipe.c - the ring of reused host buffers a save and a restore move
 * bytes through, and the hand-off between the training thread and one
 * helper thread.
 *
 * A save copies each piece of an item off the device into the next slot on
 * the training thread (qe_pstate_read_at: device copies stay on the
 * thread that owns the device) while a helper thread hashes and writes the previous slot into
 * the store; a restore is the mirror image: the helper reads and re-hashes
 * chunks into a slot while the training thread copies the previous slot to
 * the device.  The slots come from qe_pstate_host_alloc (page-locked on
 * cuda, so device copies run at full speed and need no bounce buffer;
 * plain memory on cpu) and live as long as the session, so no checkpoint
 * pays for pinning again.
 *
 * The hand-off is a FIFO of CKPT_RING_SLOTS messages: message m travels in
 * slot m % CKPT_RING_SLOTS, the filling side waits while every slot is
 * taken, the draining side while none is filled.  Either side may stop the
 * pipe (a failure); the other then sees no more messages and gives up too.
 */
#include "ckpt/session/ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/status.h"

/* Piece size: 64 MiB by default (QE_CKPT_PIECE_BYTES for tests), rounded to whole chunks. */
#define CKPT_PIECE_DEFAULT ((size_t)64 << 20)

int ckpt__device_path(const qe_pstate_item *it)
{
	if (it->on_device)
		return 1;
	const char *e = ckpt_opt_text(ckpt_options_get()->staging);
	return e && strcmp(e, "device") == 0 && it->stage >= 0 && it->kind != QE_PSTATE_RUNTIME;
}

size_t ckpt__piece_bytes(const ckpt_session *s)
{
	size_t want = CKPT_PIECE_DEFAULT;
	const char *e = ckpt_opt_text(ckpt_options_get()->piece_bytes);
	if (e && e[0]) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);
		if (!*end && v > 0)
			want = (size_t)v;
	}
	size_t c = s->chunk_bytes ? s->chunk_bytes : STORE_DEFAULT_CHUNK;
	return want < c ? c : want / c * c;
}

void ckpt__ring_free(ckpt_ring *g)
{
	for (int i = 0; i < CKPT_RING_SLOTS; i++)
		if (g->slot[i])
			qe_pstate_host_free(g->b, g->slot[i]);
	memset(g, 0, sizeof(*g));
}

int ckpt__ring_get(ckpt_session *s, qe_backend *b, size_t slot_bytes)
{
	ckpt_ring *g = &s->ring;
	if (g->b == b && g->slot_bytes >= slot_bytes)
		return QE_OK;
	ckpt__ring_free(g);
	g->b = b;
	for (int i = 0; i < CKPT_RING_SLOTS; i++) {
		int rc = qe_pstate_host_alloc(b, slot_bytes, &g->slot[i]);
		if (rc) {
			g->slot[i] = NULL;
			ckpt__ring_free(g);
			return qe_fail_ctx(rc, "checkpoint: rank %d: %d host buffers of %zu bytes for device copies", s->rank,
					   CKPT_RING_SLOTS, slot_bytes);
		}
	}
	g->slot_bytes = slot_bytes;
	return QE_OK;
}

void ckpt__pipe_init(ckpt_pipe *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
}

void ckpt__pipe_destroy(ckpt_pipe *p)
{
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
}

ckpt_piece *ckpt__pipe_fill_wait(ckpt_pipe *p, int *slot)
{
	pthread_mutex_lock(&p->mu);
	while (!p->stop && p->filled - p->drained >= CKPT_RING_SLOTS)
		pthread_cond_wait(&p->cv, &p->mu);
	ckpt_piece *m = p->stop ? NULL : &p->msg[p->filled % CKPT_RING_SLOTS];
	if (m) {
		memset(m, 0, sizeof(*m));
		*slot = (int)(p->filled % CKPT_RING_SLOTS);
	}
	pthread_mutex_unlock(&p->mu);
	return m;
}

void ckpt__pipe_fill_post(ckpt_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	p->filled++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void ckpt__pipe_close(ckpt_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	p->closed = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

ckpt_piece *ckpt__pipe_drain_wait(ckpt_pipe *p, int *slot)
{
	pthread_mutex_lock(&p->mu);
	while (!p->stop && !p->closed && p->drained == p->filled)
		pthread_cond_wait(&p->cv, &p->mu);
	ckpt_piece *m = p->stop || p->drained == p->filled ? NULL : &p->msg[p->drained % CKPT_RING_SLOTS];
	if (m)
		*slot = (int)(p->drained % CKPT_RING_SLOTS);
	pthread_mutex_unlock(&p->mu);
	return m;
}

void ckpt__pipe_drain_done(ckpt_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	p->drained++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void ckpt__pipe_fail(ckpt_pipe *p, int rc)
{
	pthread_mutex_lock(&p->mu);
	if (!p->rc) {
		p->rc = rc;
		snprintf(p->msg_text, sizeof(p->msg_text), "%s", qe_last_error());
	}
	p->stop = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

int ckpt__pipe_rc(ckpt_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	int rc = p->rc;
	pthread_mutex_unlock(&p->mu);
	if (rc)
		qe_fail(rc, "%s", p->msg_text);
	return rc;
}
