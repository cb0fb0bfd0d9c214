/*
 * ckpt_query_gc.c - `qeffect gc`: drop old checkpoints, then the chunks no
 * remaining checkpoint lists.
 *
 * The order is what keeps a crash harmless: catalog rows first (one
 * transaction), chunks after.  Deleting chunks first could leave a committed
 * checkpoint pointing at missing chunks; deleting rows first can at worst
 * leave orphan chunks, which the next gc collects.  The chunk keep set is read
 * from the catalog after the delete, so a checkpoint committed meanwhile by a
 * running training keeps its chunks; one still being written is protected by
 * the store's grace period (its chunks are stored, and touched again when
 * deduplicated, before the catalog lists them).
 */
#include "ckpt/query/ckpt_query_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

/*
 * The catalog runs WAL with synchronous=NORMAL outside checkpoint commits, so
 * a committed delete may sit unsynced in catalog.db-wal.  Chunks must not go
 * before the delete is durable (a power loss would bring back a committed
 * checkpoint whose chunks are gone): flush the WAL and the database file.
 */
static int sync_catalog(const char *dir)
{
	char db[4200], wal[4208];
	int rc = ckpt_rundir_catalog(dir, db, sizeof(db));
	if (rc)
		return rc;
	snprintf(wal, sizeof(wal), "%s-wal", db);
	const char *paths[] = { wal, db };
	for (int i = 0; i < 2; i++) {
		const char *path = paths[i];
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT && i == 0)
				continue; /* no WAL: the last connection checkpointed and synced it */
			return qe_fail(QE_EIO, "gc: cannot open '%s' to flush it: %s", path, strerror(errno));
		}
		rc = qe_fsync(fd);
		int e = errno;
		close(fd);
		if (rc)
			return qe_fail(qe_errno_status(e), "gc: fsync '%s': %s", path, strerror(e));
	}
	return QE_OK;
}

static int pinned(const ckpt_gc_policy *p, int64_t step)
{
	for (size_t i = 0; i < p->n_pins; i++)
		if (p->pins[i] == step)
			return 1;
	return 0;
}

/* Decide, per checkpoint, keep or drop and why (also remote gc's decision). */
int ckq_gc_plan(const cat_ckpt_rows *l, const ckpt_gc_policy *p, ckpt_gc_report *g)
{
	int64_t now = p->now ? p->now : (int64_t)time(NULL);
	int64_t newest = -1;
	size_t ncommitted = 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->rows[i].status == CAT_COMMITTED) {
			ncommitted++;
			if (l->rows[i].step > newest)
				newest = l->rows[i].step;
		}
	g->items = qe_calloc(l->n ? l->n : 1, sizeof(*g->items));
	g->missing_pins = qe_calloc(p->n_pins ? p->n_pins : 1, sizeof(int64_t));
	if (!g->items || !g->missing_pins)
		return qe_fail(QE_ENOMEM, "gc: out of memory");
	/* Rows come by step then id, and at most one committed per step: the
	 * committed ones seen so far give each its rank from the oldest. */
	size_t seen_committed = 0;
	for (size_t i = 0; i < l->n; i++) {
		const cat_ckpt *c = &l->rows[i];
		ckpt_gc_item *it = &g->items[g->n++];
		it->id = c->id;
		it->step = c->step;
		it->status = c->status;
		it->bytes = c->bytes;
		it->drop = 0;
		if (c->status == CAT_COMMITTED) {
			size_t from_newest = ncommitted - 1 - seen_committed++;
			if (pinned(p, c->step))
				snprintf(it->why, sizeof(it->why), "pinned");
			else if (from_newest < (size_t)p->keep_last)
				snprintf(it->why, sizeof(it->why), "one of the %d latest committed", p->keep_last);
			else if (p->keep_every > 0 && c->step % p->keep_every == 0)
				snprintf(it->why, sizeof(it->why), "step is a multiple of %lld", (long long)p->keep_every);
			else {
				it->drop = 1;
				snprintf(it->why, sizeof(it->why), "older than the %d latest committed", p->keep_last);
			}
		} else if (pinned(p, c->step)) {
			snprintf(it->why, sizeof(it->why), "pinned");
		} else if (c->status == CAT_ABORTED) {
			it->drop = 1;
			snprintf(it->why, sizeof(it->why), "aborted: never loadable");
		} else {
			int64_t t = ckq_parse_time(c->created);
			int old = t >= 0 && now - t >= (int64_t)p->grace_s;
			if (newest >= 0 && c->step < newest && old) {
				it->drop = 1;
				snprintf(it->why, sizeof(it->why), "pending, below the newest committed step %lld, older than %llus",
					 (long long)newest, (unsigned long long)p->grace_s);
			} else {
				snprintf(it->why, sizeof(it->why), "pending: may still be in progress");
			}
		}
		if (it->drop) {
			g->dropped++;
			g->dropped_bytes += c->bytes;
		} else {
			g->kept++;
		}
	}
	for (size_t k = 0; k < p->n_pins; k++) {
		int found = 0;
		for (size_t i = 0; i < l->n && !found; i++)
			found = l->rows[i].step == p->pins[k];
		if (!found)
			g->missing_pins[g->n_missing_pins++] = p->pins[k];
	}
	return QE_OK;
}

/* The chunks of every checkpoint the plan keeps (for a dry run, where the
 * catalog is left as it is). */
static int planned_keep_set(ckpt_run *r, const ckpt_gc_report *g, ckq_set *keep)
{
	for (size_t i = 0; i < g->n; i++) {
		if (g->items[i].drop)
			continue;
		cat_tensor_rows tr = { 0 };
		int rc = cat_ckpt_tensors(r->cat, g->items[i].id, &tr);
		for (size_t t = 0; !rc && t < tr.n; t++)
			for (size_t k = 0; !rc && k < tr.rows[t].n_chunks; k++) {
				store_hash h;
				memcpy(h.b, tr.rows[t].chunks[k].hash, STORE_HASH_BYTES);
				if (!ckq_set_add(keep, &h, tr.rows[t].chunks[k].size, NULL))
					rc = qe_fail(QE_ENOMEM, "gc: out of memory");
			}
		cat_tensor_rows_free(&tr);
		if (rc)
			return rc;
	}
	return QE_OK;
}

int ckq_gc_catalog(ckpt_run *r, const ckpt_gc_policy *p, ckpt_gc_report *out, ckq_set *keep)
{
	memset(out, 0, sizeof(*out));
	if (p->keep_last < 1)
		return qe_fail(QE_EINVAL, "gc: keep-last must be at least 1 (gc never drops the latest committed checkpoint)");
	if (p->keep_every < 0)
		return qe_fail(QE_EINVAL, "gc: keep-every must be >= 0, got %lld", (long long)p->keep_every);
	cat_ckpt_rows l = { 0 };
	int rc = cat_ckpt_list(r->cat, r->run_id, &l);
	if (rc) {
		rc = qe_fail_ctx(rc, "run '%s'", r->dir);
		goto out;
	}
	if ((rc = ckq_gc_plan(&l, p, out)))
		goto out;
	if (!p->dry_run && out->dropped) {
		/* 1. catalog rows, all or nothing */
		if ((rc = cat_begin(r->cat)))
			goto catalog_failed;
		for (size_t i = 0; i < out->n && !rc; i++)
			if (out->items[i].drop)
				rc = cat_ckpt_delete(r->cat, out->items[i].id);
		if (rc) {
			int keep_rc = rc;
			cat_rollback(r->cat);
			rc = keep_rc;
			goto catalog_failed;
		}
		if ((rc = cat_commit(r->cat)))
			goto catalog_failed;
		if ((rc = sync_catalog(r->dir)))
			goto out; /* rows are gone, chunks stay: the next gc collects them */
	}
	/* 2. what every store keeps: whatever the catalog still lists */
	rc = p->dry_run ? planned_keep_set(r, out, keep) : ckq_set_referenced(r->cat, keep);
	if (rc)
		rc = qe_fail_ctx(rc, "run '%s': chunks to keep", r->dir);
	else
		out->keep_chunks = keep->n;
	goto out;
catalog_failed:
	rc = qe_fail_ctx(rc, "run '%s': dropping checkpoints from the catalog (nothing was dropped)", r->dir);
out:
	cat_ckpt_rows_free(&l);
	return rc;
}

static int compact_all(ckpt_run *r, ckpt_gc_report *out);

int ckpt_q_gc(ckpt_run *r, const ckpt_gc_policy *p, ckpt_gc_report *out)
{
	if (!p->dry_run && ckpt_storeset_count(r->stores) && !(r->flags & CKPT_RUN_WRITE)) {
		memset(out, 0, sizeof(*out));
		return qe_fail(QE_EINVAL, "gc: run '%s' was opened without CKPT_RUN_WRITE", r->dir);
	}
	ckq_set keep = { 0 };
	store_hash *arr = NULL;
	int rc = ckq_gc_catalog(r, p, out, &keep);
	if (rc || !ckpt_storeset_count(r->stores))
		goto out; /* no store here: nothing to collect */
	arr = qe_malloc((keep.n ? keep.n : 1) * sizeof(*arr));
	if (!arr) {
		rc = qe_fail(QE_ENOMEM, "gc: out of memory for %zu hashes", keep.n);
		goto out;
	}
	size_t n = 0;
	for (size_t i = 0; i < keep.cap; i++)
		if (keep.e[i].used)
			arr[n++] = keep.e[i].h;
	/* Every store here keeps whatever any checkpoint lists, whichever store it names. */
	for (int i = 0; i < ckpt_storeset_count(r->stores) && !rc; i++) {
		store_gc_result one;
		memset(&one, 0, sizeof(one));
		if ((rc = store_gc(ckpt_storeset_at(r->stores, i), arr, n, p->grace_s, p->dry_run, &one))) {
			rc = qe_fail_ctx(rc, "run '%s': deleting unreferenced chunks of '%s' (the catalog is already "
					     "updated; run gc again)",
					 r->dir, ckpt_storeset_where(r->stores, i)->path);
			break;
		}
		out->store.examined += one.examined;
		out->store.kept += one.kept;
		out->store.young += one.young;
		out->store.deleted += one.deleted;
		out->store.bytes_reclaimed += one.bytes_reclaimed;
	}
	if (!rc && p->compact && !p->dry_run)
		rc = compact_all(r, out);
out:
	free(arr);
	ckq_set_free(&keep);
	return rc;
}

int ckq_compact_store(const char *path, const char *store_id, int held, const char *what, store_compact_result *out)
{
	ckpt_lock *lock = NULL;
	char lp[CKPT_PATH_MAX + 8];
	int rc = 0;
	if (!held && store_id[0]) {
		snprintf(lp, sizeof(lp), "%s/lock", path);
		if ((rc = ckpt_lock_take(lp, what, &lock)))
			return qe_fail_ctx(rc, "compacting the store '%s'", path);
	}
	rc = store_compact(path, out);
	ckpt_unlock(lock);
	return rc;
}

/* Close the run's stores, then compact each (ckpt_q_gc with policy.compact). */
static int compact_all(ckpt_run *r, ckpt_gc_report *out)
{
	int n = ckpt_storeset_count(r->stores), rc = 0;
	ckpt_local_store *where = qe_calloc(n ? (size_t)n : 1, sizeof(*where));
	if (!where)
		return qe_fail(QE_ENOMEM, "gc: out of memory");
	for (int i = 0; i < n; i++)
		where[i] = *ckpt_storeset_where(r->stores, i);
	ckpt_storeset_close(r->stores);
	r->stores = NULL;
	for (int i = 0; i < n && !rc; i++) {
		store_compact_result c;
		if ((rc = ckq_compact_store(where[i].path, where[i].id.store_id, 0, "qeffect gc --compact", &c))) {
			rc = qe_fail_ctx(rc, "run '%s': gc --compact (the chunks are collected; %d of %d stores compacted)",
					 r->dir, out->compacted, n);
			break;
		}
		out->compacted++;
		out->compact.disk_before += c.disk_before;
		out->compact.disk_after += c.disk_after;
		out->compact.length_before += c.length_before;
		out->compact.length_after += c.length_after;
		out->compact.chunks += c.chunks;
	}
	free(where);
	return rc;
}

void ckpt_gc_report_free(ckpt_gc_report *g)
{
	free(g->items);
	free(g->missing_pins);
	memset(g, 0, sizeof(*g));
}
