/*
 * ckpt_job_push.c - `qeffect push` as a job over the ranks that hold the
 * run's stores (ckpt_job.h).
 *
 * The remote layout and the commit are ckpt_remote.c's: content-addressed
 * chunks first, the manifest last (its presence is the remote commit), then
 * the catalog row recording the copy.  What changes is who uploads: after
 * the census, rank 0 gives every distinct chunk of a checkpoint to one rank
 * that sees a store holding it (the store its row names, else a replica's),
 * and the ranks upload from their own disks in parallel - HEAD first, so a
 * chunk already there is not sent, and every chunk read through the store,
 * which re-hashes it, so a damaged chunk is never replicated.  Only when
 * every rank answered that its part is on the remote does rank 0 write the
 * manifest.  A chunk no rank of the job can read fails the push before the
 * manifest, naming the tensor and the store's rank and host.
 */
#include "ckpt/query/ckpt_job_int.h"
#include "ckpt/query/ckpt_query_int.h"
#include "ckpt/remote/ckpt_remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

typedef struct push_job {
	const char *url;
	const store_remote_opts *ro;
	store_remote *rem; /* opened on first use on each rank */
	unsigned char *buf;
	size_t cap;
} push_job;

/* ---- a rank's part ------------------------------------------------------------------------ */

static int read_store(void *ctx, const store_hash *h, void *dst, size_t cap, uint64_t *size)
{
	return store_get_chunk((store *)ctx, h, dst, cap, size);
}

static int upload_store(push_job *pj, json_t *s, json_t *out)
{
	const char *id = json_string_value(json_object_get(s, "id"));
	const char *path = json_string_value(json_object_get(s, "path"));
	json_t *chunks = json_object_get(s, "chunks");
	store *st = NULL;
	store_opts o = { 0 };
	o.read_only = 1;
	int rc = id && path ? store_open(path, &o, &st) : qe_fail(QE_ECORRUPT, "push: a store of the task has no path");
	if (rc)
		return qe_fail_ctx(rc, "cannot open its store '%s'", path ? path : "?");
	char where[CKPT_PATH_MAX + 16];
	snprintf(where, sizeof(where), "its store '%s'", path);
	/* the job's buffer lives across stores and tasks: lend it to the uploader and take it back */
	ckpt__uploader u = { .rem = pj->rem, .buf = pj->buf, .cap = pj->cap };
	for (size_t i = 0; !rc && i < json_array_size(chunks); i++) {
		store_hash h;
		uint64_t size;
		if (!(rc = ckj_chunk_get(chunks, i, &h, &size)))
			rc = ckpt__upload_chunk(&u, h.b, size, read_store, st, where);
	}
	pj->buf = u.buf;
	pj->cap = u.cap;
	store_close(st);
	if (!rc)
		json_array_append_new(out, json_pack("{s:s,s:I,s:I,s:I}", "id", id, "uploaded", (json_int_t)u.uploaded,
						     "present", (json_int_t)u.present, "bytes", (json_int_t)u.bytes));
	return rc;
}

static json_t *serve_push(ckj *j, json_t *task, void *ctx)
{
	(void)j;
	push_job *pj = ctx;
	json_t *out = json_array(), *stores = ckj_task_stores(task);
	int rc = out ? QE_OK : qe_fail(QE_ENOMEM, "push: out of memory");
	if (!rc && json_array_size(stores) && !pj->rem && (rc = store_remote_open(pj->url, pj->ro, &pj->rem)))
		pj->rem = NULL;
	for (size_t i = 0; !rc && i < json_array_size(stores); i++)
		rc = upload_store(pj, json_array_get(stores, i), out);
	if (rc) {
		json_decref(out);
		return ckj_failed(rc);
	}
	return json_pack("{s:o}", "stores", out);
}

/* ---- rank 0 ----------------------------------------------------------------------------------- */

/* Which committed checkpoints (ckpt_remote_push's choice): *first..*last of all.rows, or one at *at. */
static int choose(const cat_ckpt_rows *all, const char *run_id, const char *run_dir, int64_t step, int *pick)
{
	size_t nsel = 0, last = (size_t)-1, at = (size_t)-1, sl = 0;
	char steps[400] = "";
	for (size_t i = 0; i < all->n; i++) {
		if (all->rows[i].status != CAT_COMMITTED)
			continue;
		nsel++;
		last = i;
		if (all->rows[i].step == step)
			at = i;
		if (sl < sizeof(steps) - 24)
			sl += (size_t)snprintf(steps + sl, sizeof(steps) - sl, "%s%lld", nsel > 1 ? ", " : "",
					       (long long)all->rows[i].step);
	}
	if (!nsel)
		return qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint to push", run_id, run_dir);
	if (step >= 0 && at == (size_t)-1)
		return qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint at step %lld (committed steps: %s)",
			       run_id, run_dir, (long long)step, steps);
	for (size_t i = 0; i < all->n; i++)
		pick[i] = all->rows[i].status == CAT_COMMITTED &&
			  (step == CKPT_PUSH_ALL || (step == CKPT_PUSH_LATEST && i == last) || (step >= 0 && i == at));
	return QE_OK;
}

/* Every distinct chunk of the checkpoint to one store a rank sees: sets[k] per census store k. */
static int assign_chunks(ckj *j, ckpt_run *r, const cat_tensor_rows *rows, const cat_tensor_rows *copies,
			 ckq_set *sets, int64_t step)
{
	ckq_set all = { 0 };
	int rc = QE_OK;
	const cat_tensor_rows *lists[2] = { rows, copies };
	for (int c = 0; c < 2 && !rc; c++)
		for (size_t t = 0; !rc && t < lists[c]->n; t++) {
			const cat_tensor *tr = &lists[c]->rows[t];
			ckpt_job_store *s = ckj_store_find(j, tr->store_id, NULL);
			int k = s && s->rank >= 0 ? (int)(s - j->rep.stores) : -1;
			for (size_t i = 0; !rc && i < tr->n_chunks; i++) {
				store_hash h;
				memcpy(h.b, tr->chunks[i].hash, STORE_HASH_BYTES);
				ckq_entry *e = ckq_set_add(&all, &h, tr->chunks[i].size, NULL);
				if (!e) {
					rc = qe_fail(QE_ENOMEM, "push: out of memory");
					break;
				}
				if (e->state > 0 || k < 0)
					continue;
				e->state = k + 1;
				if (!ckq_set_add(&sets[k], &h, tr->chunks[i].size, NULL))
					rc = qe_fail(QE_ENOMEM, "push: out of memory");
			}
		}
	/* a chunk no store of the job holds: name its first tensor and where its store was */
	for (size_t t = 0; !rc && t < rows->n; t++)
		for (size_t i = 0; !rc && i < rows->rows[t].n_chunks; i++) {
			store_hash h;
			memcpy(h.b, rows->rows[t].chunks[i].hash, STORE_HASH_BYTES);
			ckq_entry *e = ckq_set_find(&all, &h);
			if (e && e->state == 0) {
				char where[400];
				ckq_describe_store(r, rows->rows[t].store_id, where, sizeof(where));
				rc = qe_fail(QE_ENOTFOUND,
					     "push of step %lld: tensor '%s' of stage %d is in %s, which no rank of this job "
					     "sees; nothing was committed remotely for this step",
					     (long long)step, rows->rows[t].name, rows->rows[t].stage, where);
			}
		}
	ckq_set_free(&all);
	return rc;
}

static int push_one(ckj *j, ckpt_run *r, push_job *pj, const cat_ckpt *ck, ckpt_push_result *res)
{
	double t0 = ckpt__remote_now_ms();
	cat *c = ckpt_run_catalog(r);
	cat_tensor_rows tensors = { 0 }, copies = { 0 };
	cat_shard_rows shards = { 0 };
	cat_chunk *chunks = NULL;
	size_t nchunks = 0, n = j->rep.n;
	char *text = NULL, key[256];
	ckq_set *sets = qe_calloc(n + 1, sizeof(*sets));
	json_t **tasks = qe_calloc((size_t)j->world, sizeof(*tasks)), **ans = qe_calloc((size_t)j->world, sizeof(*ans));
	int rc = sets && tasks && ans ? QE_OK : qe_fail(QE_ENOMEM, "push: out of memory");
	memset(res, 0, sizeof(*res));
	snprintf(res->run_id, sizeof(res->run_id), "%s", ck->run_id);
	res->step = ck->step;
	res->ckpt_id = ck->id;
	res->bytes = ck->bytes;
	if (rc || (rc = ckpt__manifest_key(ck->run_id, ck->step, key, sizeof(key))) ||
	    (rc = cat_ckpt_tensors(c, ck->id, &tensors)) || (rc = cat_ckpt_copies(c, ck->id, &copies)) ||
	    (rc = cat_ckpt_shards(c, ck->id, &shards)) || (rc = ckpt__distinct_chunks(&tensors, &chunks, &nchunks)) ||
	    (rc = ckpt__manifest_build(ck, ckpt_run_config_json(r), &shards, &tensors, &text)) ||
	    (rc = assign_chunks(j, r, &tensors, &copies, sets, ck->step)))
		goto out;
	res->chunks = nchunks;
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_array();
		if (!st || !(tasks[q] = json_pack("{s:s,s:o}", "op", "push", "stores", st))) {
			rc = qe_fail(QE_ENOMEM, "push: out of memory");
			break;
		}
		for (size_t k = 0; !rc && k < n; k++) {
			if (j->rep.stores[k].rank != q || !sets[k].n)
				continue;
			json_t *ch = json_array();
			for (size_t i = 0; !rc && ch && i < sets[k].cap; i++)
				if (sets[k].e[i].used)
					rc = ckj_chunk_add(ch, &sets[k].e[i].h, sets[k].e[i].size);
			if (!ch)
				rc = qe_fail(QE_ENOMEM, "push: out of memory");
			else
				json_array_append_new(st, json_pack("{s:s,s:s,s:o}", "id", j->rep.stores[k].store_id, "path",
								     j->rep.stores[k].path, "chunks", ch));
		}
	}
	if (!rc && (rc = ckj_round(j, tasks, ans, serve_push, pj))) {
		rc = qe_fail_ctx(rc, "push of step %lld (nothing was committed remotely for it)", (long long)ck->step);
		goto out;
	}
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_object_get(ans[q], "stores");
		for (size_t i = 0; i < json_array_size(st); i++) {
			json_t *a = json_array_get(st, i);
			const char *id = json_string_value(json_object_get(a, "id"));
			ckpt_job_store *s = id ? ckj_store_find(j, id, j->hosts[q]) : NULL;
			uint64_t up = ckj_u64(a, "uploaded"), pr = ckj_u64(a, "present"), b = ckj_u64(a, "bytes");
			res->chunks_uploaded += up;
			res->chunks_present += pr;
			res->bytes_uploaded += b;
			if (s) {
				s->chunks += up;
				s->present += pr;
				s->bytes += b;
			}
		}
	}
	/* The remote commit, once every rank's chunks are there. */
	size_t len = strlen(text);
	if ((rc = ckpt__manifest_put(pj->rem, key, text, len))) {
		qe_fail_ctx(rc, "push of step %lld: writing the manifest (the remote commit)", (long long)ck->step);
		goto out;
	}
	ckpt__manifest_hash(text, len, res->manifest_hash);
	ckpt__remote_object_url(pj->url, key, res->manifest_url, sizeof(res->manifest_url));
	if ((rc = cat_remote_add(c, ck->id, res->manifest_url, res->manifest_hash)))
		qe_fail_ctx(rc, "push of step %lld: committed remotely at %s, but recording it in the catalog failed",
			    (long long)ck->step, res->manifest_url);
	res->ms = ckpt__remote_now_ms() - t0;
out:
	for (size_t k = 0; sets && k < n; k++)
		ckq_set_free(&sets[k]);
	free(sets);
	for (int q = 0; q < j->world; q++) {
		json_decref(tasks ? tasks[q] : NULL);
		json_decref(ans ? ans[q] : NULL);
	}
	free(tasks);
	free(ans);
	free(text);
	free(chunks);
	cat_tensor_rows_free(&tensors);
	cat_tensor_rows_free(&copies);
	cat_shard_rows_free(&shards);
	return rc;
}

static int push_rank0(ckj *j, push_job *pj, const char *run_dir, int64_t step, ckpt_push_cb cb, void *cbctx,
		      ckpt_job_report *where)
{
	ckpt_run *r = NULL;
	cat_store_rows known = { 0 };
	cat_ckpt_rows all = { 0 };
	int *pick = NULL;
	int rc = ckpt_run_open(run_dir, CKPT_RUN_WRITE, &r);
	if (!rc && cat_store_list(ckpt_run_catalog(r), ckpt_run_id(r), &known))
		qe_clear_error();
	if (!rc && (rc = cat_ckpt_list(ckpt_run_catalog(r), ckpt_run_id(r), &all)))
		rc = qe_fail_ctx(rc, "run '%s'", run_dir);
	if (!rc && !(pick = qe_calloc(all.n + 1, sizeof(int))))
		rc = qe_fail(QE_ENOMEM, "push: out of memory");
	if (!rc)
		rc = choose(&all, ckpt_run_id(r), run_dir, step, pick);
	if (!rc && !ckpt__valid_run_id(ckpt_run_id(r)))
		rc = qe_fail(QE_EINVAL, "run id '%s' cannot name a remote object", ckpt_run_id(r));
	/* one cheap signed request first: wrong credentials or endpoint fail before any rank sends */
	if (!rc && !(rc = store_remote_open(pj->url, pj->ro, &pj->rem)))
		rc = store_remote_check(pj->rem);
	if ((rc = ckj_census(j, r ? ckpt_run_id(r) : "", rc, &known)))
		goto out;
	for (size_t i = 0; !rc && i < all.n; i++) {
		if (!pick[i])
			continue;
		ckpt_push_result res;
		rc = push_one(j, r, pj, &all.rows[i], &res);
		if (!rc && cb)
			rc = cb(cbctx, &res);
	}
	ckj_finish(j, rc);
out:
	if (!rc && where) {
		*where = j->rep;
		memset(&j->rep, 0, sizeof(j->rep));
	}
	free(pick);
	cat_ckpt_rows_free(&all);
	cat_store_rows_free(&known);
	ckpt_run_close(r);
	return rc;
}

int ckpt_job_push(qe_comm *comm, const char *run_dir, const char *url, const store_remote_opts *ro, int64_t step,
		  ckpt_push_cb cb, void *ctx, ckpt_job_report *where)
{
	ckj j;
	push_job pj = { url, ro, NULL, NULL, 0 };
	if (where)
		memset(where, 0, sizeof(*where));
	int rc = ckj_open(&j, comm, run_dir);
	if (!rc)
		rc = j.rank == 0 ? push_rank0(&j, &pj, run_dir, step, cb, ctx, where) : ckj_serve(&j, serve_push, &pj);
	store_remote_close(pj.rem);
	free(pj.buf);
	ckpt_job_report_free(&j.rep);
	ckj_close(&j);
	return rc;
}
