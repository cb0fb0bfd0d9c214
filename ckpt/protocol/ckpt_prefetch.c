/*
 * ckpt_prefetch.c - keeping the disk busy during a restore: a hint thread
 * that walks the same rows, in the same order, as the restore's reader and
 * asks the kernel to read their chunks ahead (store_prefetch_chunks), never
 * more than a window of bytes beyond what the reader has consumed.
 *
 * Why: the reader preads one chunk while the kernel reads the next, then
 * hashes it; at a tensor's end, or when chunks lie out of file order, the
 * disk idles while the reader copies and hashes, and one pread at a time
 * keeps only a shallow queue on a disk that wants a deep one.  With the
 * window the disk always has up to QE_CKPT_READ_AHEAD_MIB (default 512;
 * 0 turns the thread off) of requests in flight, and the reader's preads
 * mostly copy from the page cache.
 *
 * Only a hint: nothing here can fail a restore.  The thread gets every
 * row's store from its caller, already open, so it never opens one itself.
 */
#include "ckpt/protocol/ckpt_prefetch_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/session/ckpt_options.h"

#define READ_AHEAD_DEFAULT_MIB 512

struct ckpt_prefetch {
	const own_row *rows;
	store *const *stores;
	int nrows;
	uint64_t window;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t consumed; /* bytes the reader has finished, in row order */
	int stop;
	pthread_t th;
};

uint64_t ckpt__read_ahead_bytes(void)
{
	const char *e = ckpt_opt_text(ckpt_options_get()->read_ahead_mib);
	unsigned long long mib = READ_AHEAD_DEFAULT_MIB;
	if (e && e[0]) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);
		if (!*end)
			mib = v;
	}
	return (uint64_t)mib << 20;
}

/* Wait until issuing up to `upto` bytes keeps within the window; 0 when told to stop. */
static int wait_room(ckpt_prefetch *p, uint64_t upto)
{
	pthread_mutex_lock(&p->mu);
	while (!p->stop && upto > p->consumed + p->window)
		pthread_cond_wait(&p->cv, &p->mu);
	int go = !p->stop;
	pthread_mutex_unlock(&p->mu);
	return go;
}

static void *prefetch_main(void *arg)
{
	ckpt_prefetch *p = arg;
	uint64_t issued = 0;
	for (int r = 0; r < p->nrows; r++) {
		const cat_tensor *t = p->rows[r].t;
		store_chunk *list = calloc(t->n_chunks + 1, sizeof(*list));
		if (!list)
			return NULL;
		for (size_t c = 0; c < t->n_chunks; c++) {
			memcpy(list[c].hash.b, t->chunks[c].hash, STORE_HASH_BYTES);
			list[c].size = t->chunks[c].size;
		}
		store_chunk_list l = { t->n_chunks, list };
		for (size_t c = 0; c < t->n_chunks; c++) {
			/* the first chunk ahead always goes: a chunk larger than the window still gets its hint */
			uint64_t next = issued + t->chunks[c].size;
			if (issued > 0 && !wait_room(p, next)) {
				free(list);
				return NULL;
			}
			store_prefetch_chunks(p->stores[r], &l, c, 1);
			issued = next;
		}
		free(list);
	}
	return NULL;
}

ckpt_prefetch *ckpt__prefetch_start(const own_row *rows, store *const *stores, int nrows)
{
	uint64_t window = ckpt__read_ahead_bytes();
	if (!window || nrows <= 0)
		return NULL;
	ckpt_prefetch *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->rows = rows;
	p->stores = stores;
	p->nrows = nrows;
	p->window = window;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if (pthread_create(&p->th, NULL, prefetch_main, p)) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return NULL; /* reading works without the hints */
	}
	return p;
}

void ckpt__prefetch_advance(ckpt_prefetch *p, uint64_t bytes)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->consumed += bytes;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void ckpt__prefetch_stop(ckpt_prefetch *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->th, NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
