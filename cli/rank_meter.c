/*
 * rank_meter.c - allocator bytes and a memory probe for one rank process
 * (see rank_meter.h for what each counts).
 *
 * The counting table is a copy of the backend's own with alloc and free
 * wrapped; the backend's functions still receive the same qe_backend pointer,
 * so implementations that cast it to their private struct are unaffected.
 * Live blocks are kept in a small array (a rank allocates a few dozen).
 */
#include "cli/rank_meter.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/core/status.h"

typedef struct block {
	void *p;
	size_t bytes;
} block;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const qe_backend_ops *orig;
static qe_backend_ops counting;
static qe_backend *metered;
static block *blocks;
static size_t nblocks, capblocks;
static cli_alloc_stats st;

static int counting_alloc(qe_backend *b, size_t bytes, void **out)
{
	int rc = orig->alloc(b, bytes, out);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	if (nblocks == capblocks) {
		size_t cap = capblocks ? 2 * capblocks : 64;
		block *nb = realloc(blocks, cap * sizeof(*nb));
		if (nb) {
			blocks = nb;
			capblocks = cap;
		}
	}
	/* Without room the block is counted as live for good (its free is not matched). */
	if (nblocks < capblocks)
		blocks[nblocks++] = (block){ *out, bytes };
	st.live += bytes;
	if (st.live > st.peak)
		st.peak = st.live;
	st.allocs++;
	pthread_mutex_unlock(&mu);
	return QE_OK;
}

static void counting_free(qe_backend *b, void *p)
{
	if (p) {
		pthread_mutex_lock(&mu);
		for (size_t i = 0; i < nblocks; i++)
			if (blocks[i].p == p) {
				st.live -= blocks[i].bytes;
				st.frees++;
				blocks[i] = blocks[--nblocks];
				break;
			}
		pthread_mutex_unlock(&mu);
	}
	orig->free(b, p);
}

int cli_rank_meter_attach(qe_backend *b)
{
	if (metered)
		return qe_fail(QE_EINVAL, "rank meter: a backend is already metered in this process");
	orig = b->ops;
	counting = *orig;
	counting.alloc = counting_alloc;
	counting.free = counting_free;
	b->ops = &counting;
	metered = b;
	return QE_OK;
}

void cli_rank_meter_detach(qe_backend *b)
{
	if (!b || b != metered)
		return;
	b->ops = orig;
	metered = NULL;
}

void cli_rank_meter_get(cli_alloc_stats *out)
{
	pthread_mutex_lock(&mu);
	*out = st;
	pthread_mutex_unlock(&mu);
}

static int probe_rss(size_t *used)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, resident = 0;
	int ok = f && fscanf(f, "%lu %lu", &size, &resident) == 2;
	if (f)
		fclose(f);
	if (!ok)
		return -1;
	*used = (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
	return 0;
}

int cli_rank_meter_probe(qe_backend *b, size_t *used, const char **what)
{
	*used = 0;
	*what = "rss";
	if (b && b->ops->device == QE_DEV_CUDA) {
		size_t free_b = 0, total = 0;
		*what = "cuda_used";
		if (b->ops->mem_info(b, &free_b, &total) != QE_OK)
			return -1;
		*used = total - free_b;
		return 0;
	}
	return probe_rss(used);
}
