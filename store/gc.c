/*
 * gc.c - collect chunks no checkpoint refers to any more.
 *
 * The store does not know which chunks the catalog lists; the caller (ckpt)
 * passes the referenced set.  Chunks are written before the catalog lists
 * them, so a checkpoint in progress has chunks that look unreferenced: the
 * grace period (the time since a chunk was last put) keeps them.  A put that
 * finds a chunk already present refreshes its put time, so an old orphan that
 * a new checkpoint reuses is protected too.
 */
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_hash(const void *a, const void *b)
{
	return memcmp(a, b, STORE_HASH_BYTES);
}

struct gc_ctx {
	const store_hash *keep; /* sorted */
	size_t n_keep;
	uint64_t cutoff; /* put at or after this time: young */
	store_gc_result *res;
	store_hash *doomed;
	size_t n_doomed, cap_doomed;
	int oom;
};

static int gc_visit(void *vctx, const store_hash *h, uint64_t size, uint64_t touched)
{
	struct gc_ctx *c = vctx;
	c->res->examined++;
	if (c->n_keep && bsearch(h, c->keep, c->n_keep, sizeof(*h), cmp_hash)) {
		c->res->kept++;
		return 0;
	}
	if (touched >= c->cutoff) {
		c->res->young++;
		return 0;
	}
	if (c->n_doomed == c->cap_doomed) {
		size_t ncap = c->cap_doomed ? 2 * c->cap_doomed : 256;
		store_hash *nd = qe_realloc(c->doomed, ncap * sizeof(*nd));
		if (!nd)
			return c->oom = 1, QE_ENOMEM;
		c->doomed = nd;
		c->cap_doomed = ncap;
	}
	c->doomed[c->n_doomed++] = *h;
	c->res->deleted++;
	c->res->bytes_reclaimed += size;
	return 0;
}

int store_gc(store *s, const store_hash *keep, size_t n_keep, uint64_t grace_s, int dry_run, store_gc_result *out)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (!out || (n_keep && !keep))
		return qe_fail(QE_EINVAL, "store '%s': gc: NULL argument", s->path);
	memset(out, 0, sizeof(*out));
	store_hash *sorted = NULL;
	if (n_keep) {
		sorted = qe_malloc(n_keep * sizeof(*sorted));
		if (!sorted)
			return qe_fail(QE_ENOMEM, "store '%s': gc: keep set of %zu hashes", s->path, n_keep);
		memcpy(sorted, keep, n_keep * sizeof(*sorted));
		qsort(sorted, n_keep, sizeof(*sorted), cmp_hash);
	}
	uint64_t now = (uint64_t)time(NULL);
	struct gc_ctx c = { .keep = sorted, .n_keep = n_keep, .res = out,
			    .cutoff = grace_s >= now ? 0 : now - grace_s };
	/* grace 0 means "everything unreferenced", even chunks put this second */
	if (grace_s == 0)
		c.cutoff = UINT64_MAX;
	rc = store_iterate_chunks(s, gc_visit, &c);
	if (rc && c.oom)
		rc = qe_fail(QE_ENOMEM, "store '%s': gc: list of chunks to delete", s->path);
	if (!rc && !dry_run && c.n_doomed) {
		uint64_t reclaimed = 0;
		rc = store_delete_chunks(s, c.doomed, c.n_doomed, &reclaimed);
		if (!rc)
			out->bytes_reclaimed = reclaimed;
	}
	if (!rc)
		qe_log(QE_LOG_INFO, "store '%s': gc%s: %llu chunks examined, %llu kept, %llu young, %llu deleted (%llu bytes)",
		       s->path, dry_run ? " (dry run)" : "", (unsigned long long)out->examined,
		       (unsigned long long)out->kept, (unsigned long long)out->young, (unsigned long long)out->deleted,
		       (unsigned long long)out->bytes_reclaimed);
	free(sorted);
	free(c.doomed);
	return rc;
}
