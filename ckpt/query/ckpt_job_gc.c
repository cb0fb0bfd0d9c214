/*
 * ckpt_job_gc.c - `qeffect gc` as a job over the ranks that hold the run's
 * stores (ckpt_job.h).
 *
 * The order of the one-host gc holds across hosts: the census first (a rank
 * that is missing fails the job before anything changes), then rank 0 drops
 * the catalog rows in one transaction and flushes the catalog
 * (ckq_gc_catalog), then it sends every rank the set of chunks the catalog
 * still lists, and each rank collects the stores it was given with the grace
 * period (store_gc), holding each store's lock so no training writes it
 * meanwhile.  A store on a host without the catalog is collected from rank
 * 0's keep set, never from a rank's own guess.  A crash after the rows went
 * leaves orphans, which the next gc collects; a store no rank of the job
 * sees keeps its orphans until a job that reaches it runs.
 */
#include "ckpt/query/ckpt_job_int.h"
#include "ckpt/query/ckpt_query_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

static int gc_store(ckj *j, json_t *s, const store_hash *keep, size_t nkeep, uint64_t grace, int dry, int compact,
		    json_t *out)
{
	const char *id = json_string_value(json_object_get(s, "id"));
	const char *path = json_string_value(json_object_get(s, "path"));
	if (!id || !path)
		return qe_fail(QE_ECORRUPT, "gc: a store of the task has no id or path");
	ckpt_lock *lock = NULL;
	store *st = NULL;
	store_opts o = { 0 };
	o.read_only = dry;
	char what[128];
	snprintf(what, sizeof(what), "qeffect gc (rank %d)", j->rank);
	int rc = dry ? QE_OK : ckj_store_lock(path, id, what, &lock);
	if (rc)
		return qe_fail_ctx(rc, "its store '%s'", path);
	if ((rc = store_open(path, &o, &st)))
		rc = qe_fail_ctx(rc, "cannot open its store '%s'", path);
	store_gc_result g;
	memset(&g, 0, sizeof(g));
	if (!rc && (rc = store_gc(st, keep, nkeep, grace, dry, &g)))
		rc = qe_fail_ctx(rc, "deleting unreferenced chunks of '%s' (the catalog is already updated; run gc again)",
				 path);
	store_close(st);
	/* closed first: a store is compacted while no process, this one included, has it open */
	store_compact_result c;
	memset(&c, 0, sizeof(c));
	if (!rc && compact && !dry && (rc = ckq_compact_store(path, id, 1, what, &c)))
		rc = qe_fail_ctx(rc, "gc --compact (its chunks are collected)");
	ckpt_unlock(lock);
	if (!rc)
		json_array_append_new(out, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:b,s:I,s:I,s:I,s:I}", "id", id, "examined",
						     (json_int_t)g.examined, "kept", (json_int_t)g.kept, "young",
						     (json_int_t)g.young, "deleted", (json_int_t)g.deleted, "bytes",
						     (json_int_t)g.bytes_reclaimed, "compacted", compact && !dry,
						     "disk_before", (json_int_t)c.disk_before, "disk_after",
						     (json_int_t)c.disk_after, "length_before", (json_int_t)c.length_before,
						     "length_after", (json_int_t)c.length_after));
	return rc;
}

static json_t *serve_gc(ckj *j, json_t *task, void *ctx)
{
	(void)ctx;
	json_t *ka = json_object_get(task, "keep"), *out = json_array(), *stores = ckj_task_stores(task);
	size_t nkeep = json_array_size(ka);
	store_hash *keep = qe_malloc((nkeep + 1) * sizeof(*keep));
	int rc = keep && out ? QE_OK : qe_fail(QE_ENOMEM, "gc: out of memory");
	for (size_t i = 0; !rc && i < nkeep; i++) {
		uint64_t size;
		rc = ckj_chunk_get(ka, i, &keep[i], &size);
	}
	uint64_t grace = ckj_u64(task, "grace_s");
	int dry = json_is_true(json_object_get(task, "dry_run"));
	int compact = json_is_true(json_object_get(task, "compact"));
	for (size_t i = 0; !rc && i < json_array_size(stores); i++)
		rc = gc_store(j, json_array_get(stores, i), keep, nkeep, grace, dry, compact, out);
	free(keep);
	if (rc) {
		json_decref(out);
		return ckj_failed(rc);
	}
	return json_pack("{s:o}", "stores", out);
}

static int gc_rank0(ckj *j, const char *run_dir, const ckpt_gc_policy *p, ckpt_gc_report *out,
		    ckpt_job_report *where)
{
	ckpt_run *r = NULL;
	cat_store_rows known = { 0 };
	ckq_set keep = { 0 };
	json_t **tasks = qe_calloc((size_t)j->world, sizeof(*tasks)), **ans = qe_calloc((size_t)j->world, sizeof(*ans));
	json_t *ka = json_array();
	int rc = tasks && ans && ka ? ckpt_run_open(run_dir, p->dry_run ? 0 : CKPT_RUN_WRITE, &r)
				    : qe_fail(QE_ENOMEM, "gc: out of memory");
	if (!rc && cat_store_list(ckpt_run_catalog(r), ckpt_run_id(r), &known))
		qe_clear_error();
	if ((rc = ckj_census(j, r ? ckpt_run_id(r) : "", rc, &known)))
		goto out;
	/* 1. the catalog rows (rank 0 alone), 2. what every store keeps */
	if ((rc = ckq_gc_catalog(r, p, out, &keep)))
		goto fail;
	for (size_t i = 0; !rc && i < keep.cap; i++)
		if (keep.e[i].used)
			rc = ckj_chunk_add(ka, &keep.e[i].h, keep.e[i].size);
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_array();
		if (!st || !(tasks[q] = json_pack("{s:s,s:O,s:I,s:b,s:b,s:o}", "op", "gc", "keep", ka, "grace_s",
						  (json_int_t)p->grace_s, "dry_run", p->dry_run, "compact", p->compact,
						  "stores", st))) {
			rc = qe_fail(QE_ENOMEM, "gc: out of memory");
			break;
		}
		for (size_t k = 0; k < j->rep.n; k++)
			if (j->rep.stores[k].rank == q)
				json_array_append_new(st, json_pack("{s:s,s:s}", "id", j->rep.stores[k].store_id, "path",
								     j->rep.stores[k].path));
	}
	/* 3. the chunks, every rank on its own disk */
	if (!rc && (rc = ckj_round(j, tasks, ans, serve_gc, NULL)))
		rc = qe_fail_ctx(rc, "gc: the catalog is updated, but not every store was collected (run gc again)");
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_object_get(ans[q], "stores");
		for (size_t i = 0; i < json_array_size(st); i++) {
			json_t *a = json_array_get(st, i);
			const char *id = json_string_value(json_object_get(a, "id"));
			ckpt_job_store *s = id ? ckj_store_find(j, id, j->hosts[q]) : NULL;
			if (!s)
				continue;
			s->gc.examined = ckj_u64(a, "examined");
			s->gc.kept = ckj_u64(a, "kept");
			s->gc.young = ckj_u64(a, "young");
			s->gc.deleted = ckj_u64(a, "deleted");
			s->gc.bytes_reclaimed = ckj_u64(a, "bytes");
			s->compacted = json_is_true(json_object_get(a, "compacted"));
			s->compact.disk_before = ckj_u64(a, "disk_before");
			s->compact.disk_after = ckj_u64(a, "disk_after");
			s->compact.length_before = ckj_u64(a, "length_before");
			s->compact.length_after = ckj_u64(a, "length_after");
			out->compacted += s->compacted;
			out->compact.disk_before += s->compact.disk_before;
			out->compact.disk_after += s->compact.disk_after;
			out->compact.length_before += s->compact.length_before;
			out->compact.length_after += s->compact.length_after;
			out->store.examined += s->gc.examined;
			out->store.kept += s->gc.kept;
			out->store.young += s->gc.young;
			out->store.deleted += s->gc.deleted;
			out->store.bytes_reclaimed += s->gc.bytes_reclaimed;
		}
	}
fail:
	ckj_finish(j, rc);
out:
	if (!rc && where) {
		*where = j->rep;
		memset(&j->rep, 0, sizeof(j->rep));
	}
	for (int q = 0; q < j->world; q++) {
		json_decref(tasks ? tasks[q] : NULL);
		json_decref(ans ? ans[q] : NULL);
	}
	free(tasks);
	free(ans);
	json_decref(ka);
	ckq_set_free(&keep);
	cat_store_rows_free(&known);
	ckpt_run_close(r);
	return rc;
}

int ckpt_job_gc(qe_comm *comm, const char *run_dir, const ckpt_gc_policy *p, ckpt_gc_report *out,
		ckpt_job_report *where)
{
	ckj j;
	memset(out, 0, sizeof(*out));
	if (where)
		memset(where, 0, sizeof(*where));
	int rc = ckj_open(&j, comm, run_dir);
	if (!rc)
		rc = j.rank == 0 ? gc_rank0(&j, run_dir, p, out, where) : ckj_serve(&j, serve_gc, NULL);
	ckpt_job_report_free(&j.rep);
	ckj_close(&j);
	return rc;
}
