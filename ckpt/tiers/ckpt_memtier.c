/*
 * ckpt_memtier.c - the memory tier (--ckpt-memory MEM): a replica target's
 * copies of the latest committed checkpoint, kept in memory as well as on
 * its disk, so that ranks restarted while their hosts live restore without
 * reading any disk.
 *
 * The memory store is an ordinary chunk store under MEM/<run id>/rank-R on
 * a tmpfs or ramfs of the target's host (rundir.h), so it outlives the rank
 * processes but not the host, and everything that reads stores (restore,
 * verify, the jobs) reads it like any other; its store id begins with 'm'.
 *
 * What it holds, and why that is safe:
 *   1. While a checkpoint's copies arrive (ckpt_replica.c) every chunk goes
 *      into the disk store and the memory store, and the memory store
 *      remembers which chunks it took for that checkpoint (the keep list).
 *   2. The target's acknowledgement names the memory store only when every
 *      chunk of every source reached it; a full tmpfs costs the memory copy
 *      of that checkpoint (a warning), never the checkpoint.
 *   3. Rank 0's commit transaction records the memory copies of the new
 *      checkpoint and drops those stores' copy rows of every older one
 *      (cat_copies_drop_store_except): from then on the catalog claims
 *      only the newest checkpoint in memory.
 *   4. Once the rank knows the commit happened (ckpt__mem_committed: the
 *      decision broadcast of a synchronous save, the next boundary's
 *      agreement of an async one, or the ranks' agreement at the end of
 *      the run, ckpt_async_finish) it deletes every chunk not on the keep
 *      list.  Before that moment the older checkpoint is still the one the
 *      catalog claims, so nothing it needs is deleted; a crash between the
 *      commit and the deletion leaves extra chunks, deleted at the next one.
 *
 * Cost: the memory store holds the copies of the ranks this rank backs (R
 * copies of every rank's shard across the job), and up to twice that between
 * a commit and the deletion, since LMDB reuses freed pages but never gives
 * the file's size back to tmpfs.
 */
#include "ckpt/session/ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* Smaller write transactions than a disk store's: the store allocates a transaction's bytes ahead. */
#define MEM_TXN_BYTES ((size_t)64 << 20)

int ckpt__mem_open(ckpt_session *s, int rank)
{
	if (s->mem_st || !ckpt_memory_dir())
		return QE_OK;
	int rc;
	if ((rc = ckpt_rundir_memory_store(s->run_id, rank, s->mem_dir, sizeof(s->mem_dir))) ||
	    (rc = ckpt_memory_fs_check(s->mem_dir)) ||
	    (rc = ckpt_store_identity_ensure_memory(s->mem_dir, s->run_id, rank, &s->mem_ident)))
		return qe_fail_ctx(rc, "memory tier: rank %d on '%s'", rank, s->host);
	store_opts o = { 0 };
	o.create = 1;
	o.txn_bytes = MEM_TXN_BYTES;
	if ((rc = store_open(s->mem_dir, &o, &s->mem_st)))
		return qe_fail_ctx(rc, "memory tier: rank %d on '%s'", rank, s->host);
	s->mem_id = -1;
	qe_log(QE_LOG_INFO, "memory tier: rank %d on '%s' keeps the copies it holds in '%s' too", rank, s->host,
	       s->mem_dir);
	return QE_OK;
}

int ckpt__mem_active(const ckpt_session *s)
{
	return s->mem_st != NULL;
}

void ckpt__mem_begin(ckpt_session *s, int64_t id)
{
	if (!s->mem_st || s->mem_id == id)
		return;
	s->mem_id = id;
	s->mem_nkeep = 0;
	s->mem_failed = 0;
}

int ckpt__mem_put(ckpt_session *s, const void *data, size_t size, const store_hash *h)
{
	if (!s->mem_st || s->mem_failed)
		return QE_OK;
	if (s->mem_nkeep == s->mem_cap) {
		size_t cap = s->mem_cap ? 2 * s->mem_cap : 256;
		store_hash *v = realloc(s->mem_keep, cap * sizeof(*v));
		if (!v) {
			s->mem_failed = 1;
			qe_log(QE_LOG_WARN, "memory tier: rank %d on '%s': out of memory for the keep list; checkpoint %lld "
			       "keeps no copy in memory", s->mem_ident.rank, s->host, (long long)s->mem_id);
			return QE_OK;
		}
		s->mem_keep = v;
		s->mem_cap = cap;
	}
	int rc = store_put_chunk(s->mem_st, data, size, NULL);
	if (rc) {
		/* A full tmpfs costs this checkpoint's memory copy, not the checkpoint (the disk copy stands). */
		s->mem_failed = 1;
		qe_log(QE_LOG_WARN, "memory tier: rank %d on '%s' could not keep checkpoint %lld in '%s', which keeps no "
		       "copy in memory: %s", s->mem_ident.rank, s->host, (long long)s->mem_id, s->mem_dir, qe_last_error());
		qe_clear_error();
		return QE_OK;
	}
	s->mem_keep[s->mem_nkeep++] = *h;
	return QE_OK;
}

int ckpt__mem_finish(ckpt_session *s, int64_t id, ckpt_copy_store *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->mem_st || s->mem_id != id || s->mem_failed || s->mem_nkeep == 0)
		return 0;
	int rc = store_sync(s->mem_st);
	if (rc) {
		s->mem_failed = 1;
		qe_log(QE_LOG_WARN, "memory tier: rank %d on '%s': flushing '%s': %s", s->mem_ident.rank, s->host, s->mem_dir,
		       qe_last_error());
		qe_clear_error();
		return 0;
	}
	out->id = s->mem_ident;
	snprintf(out->path, sizeof(out->path), "%s", s->mem_dir);
	return 1;
}

void ckpt__mem_committed(ckpt_session *s, int64_t id)
{
	if (!s->mem_st || s->mem_id != id || s->mem_failed || s->mem_nkeep == 0)
		return;
	ckpt__maybe_kill(s, "memgc", s->mem_ident.rank);
	store_gc_result g;
	int rc = store_gc(s->mem_st, s->mem_keep, s->mem_nkeep, 0, 0, &g);
	if (rc) {
		qe_log(QE_LOG_WARN, "memory tier: rank %d on '%s': dropping what checkpoint %lld replaced from '%s': %s",
		       s->mem_ident.rank, s->host, (long long)id, s->mem_dir, qe_last_error());
		qe_clear_error();
	} else if (g.deleted) {
		qe_log(QE_LOG_DEBUG, "memory tier: rank %d dropped %llu chunks (%llu bytes) older than checkpoint %lld",
		       s->mem_ident.rank, (unsigned long long)g.deleted, (unsigned long long)g.bytes_reclaimed, (long long)id);
	}
	s->mem_id = -1;
	s->mem_nkeep = 0;
}

void ckpt__mem_forget(ckpt_session *s)
{
	s->mem_id = -1;
	s->mem_nkeep = 0;
}

void ckpt__mem_close(ckpt_session *s)
{
	store_close(s->mem_st);
	s->mem_st = NULL;
	free(s->mem_keep);
	s->mem_keep = NULL;
	s->mem_nkeep = s->mem_cap = 0;
}
