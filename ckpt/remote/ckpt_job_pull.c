/*
 * ckpt_job_pull.c - `qeffect pull` as a job: a pushed checkpoint lands in
 * the per-rank stores of the ranks that will load it, and its catalog rows
 * on rank 0 (ckpt_job.h).
 *
 * Order, as the one-host pull's (ckpt_remote_pull.c), whose manifest and
 * catalog helpers it uses:
 *  1. rank 0 finds the manifest (the remote commit), checks it, and opens or
 *     creates the run directory's catalog (a directory of another run is
 *     refused);
 *  2. the census; then every tensor goes to the rank that saved its stage
 *     (the manifest's shards, modulo the job's size: the rank that loads it
 *     when the run resumes with the same mapping);
 *  3. each rank opens its own store STORES/rank-R (created with its identity
 *     when missing, its lock held) and fetches what it lacks, re-hashing
 *     every chunk against its name, then syncs the store;
 *  4. rank 0 inserts the checkpoint with each row naming the store that now
 *     holds it, records those stores, and commits (the local commit point),
 *     then records the remote copy.
 * When the checkpoint is already committed here, only the tensors whose
 * store (and every copy's) no rank of the job sees are fetched - a host lost
 * its store - each into the store of its rank, and rank 0 points their rows
 * at those stores in one durable transaction: the run is whole again for
 * this job's hosts (the lost store's chunks, should it come back, are
 * orphans that gc collects).
 * A failure before 4 commits nothing; fetched chunks stay for a retry or gc.
 */
#include "ckpt/query/ckpt_job_int.h"
#include "ckpt/query/ckpt_query_int.h"
#include "ckpt/remote/ckpt_remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

typedef struct pull_job {
	const char *url;
	const store_remote_opts *ro;
	store_remote *rem;
} pull_job;

/* ---- a rank's part -------------------------------------------------------------------------- */

static int fetch(pull_job *pj, store *st, ckq_entry *e, uint64_t *fetched, uint64_t *bytes, uint64_t *present)
{
	int has = 0;
	uint64_t size = 0;
	int rc = store_has_chunk(st, &e->h, &has, &size);
	if (rc)
		return rc;
	if (has && size == e->size) {
		(*present)++;
		return QE_OK;
	}
	char key[64];
	ckpt__chunk_key(e->h.b, key, sizeof(key));
	void *data = NULL;
	size_t got = 0;
	if ((rc = store_remote_get(pj->rem, key, e->size ? e->size : 1, &data, &got)))
		return rc;
	store_hash back;
	store_hash_of(data, got, &back);
	if (got != e->size || store_hash_cmp(&back, &e->h)) {
		free(data);
		return qe_fail(QE_ECORRUPT,
			       "pull: remote object %s/%s does not hold the chunk its name says (%zu bytes, expected %llu)",
			       pj->url, key, got, (unsigned long long)e->size);
	}
	rc = store_put_chunk(st, data, got, NULL);
	free(data);
	if (!rc) {
		(*fetched)++;
		*bytes += got;
	}
	return rc;
}

static json_t *serve_pull(ckj *j, json_t *task, void *ctx)
{
	pull_job *pj = ctx;
	json_t *ch = json_object_get(task, "chunks");
	ckq_set want = { 0 };
	uint64_t fetched = 0, bytes = 0, present = 0;
	char dir[CKPT_PATH_MAX], what[128];
	ckpt_store_identity id;
	ckpt_lock *lock = NULL;
	store *st = NULL;
	store_opts o = { 0 };
	o.create = 1;
	int rc = QE_OK;
	for (size_t i = 0; !rc && i < json_array_size(ch); i++) {
		store_hash h;
		uint64_t size;
		if (!(rc = ckj_chunk_get(ch, i, &h, &size)) && !ckq_set_add(&want, &h, size, NULL))
			rc = qe_fail(QE_ENOMEM, "pull: out of memory");
	}
	snprintf(what, sizeof(what), "qeffect pull (rank %d)", j->rank);
	if (!rc && !(rc = ckpt_rundir_rank_store(j->run_dir, j->rank, dir, sizeof(dir))) &&
	    !(rc = ckpt_fs_check(dir, "the store of rank")) &&
	    !(rc = ckpt_store_identity_ensure(dir, j->run_id, j->rank, &id)) &&
	    !(rc = ckj_store_lock(dir, id.store_id, what, &lock)))
		rc = store_open(dir, &o, &st);
	if (!rc && !pj->rem && want.n)
		rc = store_remote_open(pj->url, pj->ro, &pj->rem);
	for (size_t i = 0; !rc && i < want.cap; i++)
		if (want.e[i].used && !want.e[i].state)
			rc = fetch(pj, st, &want.e[i], &fetched, &bytes, &present);
	if (!rc && st)
		rc = store_sync(st);
	store_close(st);
	ckpt_unlock(lock);
	ckq_set_free(&want);
	if (rc)
		return ckj_failed(rc);
	return json_pack("{s:s,s:s,s:s,s:I,s:I,s:I}", "store_id", id.store_id, "path", dir, "host", j->host, "fetched",
			 (json_int_t)fetched, "present", (json_int_t)present, "bytes", (json_int_t)bytes);
}

/* ---- rank 0 ------------------------------------------------------------------------------------- */

/* The rank that saved stage (the manifest's shards); 0 when none did. */
static int saver(const ckpt_manifest *m, int stage)
{
	for (size_t i = 0; i < m->shards.n; i++)
		if (m->shards.rows[i].stage == stage)
			return m->shards.rows[i].rank;
	return 0;
}

/* Rows naming the stores that now hold them (receiver[t]: the rank of tensor t), committed. */
static int insert(cat *c, ckpt_manifest *m, char (*store_of)[CKPT_STORE_ID_MAX], const int *receiver,
		  ckpt_pull_result *res)
{
	int64_t id;
	int rc = cat_ckpt_begin(c, m->run_id, m->step, m->e_w, m->topology, m->schedule, m->recipe, &id);
	if (rc)
		return rc;
	if ((rc = cat_begin(c)))
		goto abort;
	for (size_t i = 0; i < m->shards.n && !rc; i++)
		rc = cat_ckpt_add_shard(c, id, m->shards.rows[i].stage, m->shards.rows[i].rank, m->shards.rows[i].bytes);
	for (size_t i = 0; i < m->tensors.n && !rc; i++) {
		const cat_tensor *t = &m->tensors.rows[i];
		rc = cat_ckpt_add_tensor_in(c, id, store_of[receiver[i]], t->stage, t->name, t->dtype, t->shape, t->bytes,
					    t->kind, t->chunks, t->n_chunks);
	}
	if (rc) {
		cat_rollback(c);
		goto abort;
	}
	if ((rc = cat_commit(c)) || (rc = cat_ckpt_set_sizes(c, id, m->bytes, m->runtime_state_bytes)))
		goto abort;
	/* The local commit point. */
	if ((rc = cat_ckpt_commit(c, id)))
		goto abort;
	res->ckpt_id = id;
	if ((rc = cat_remote_add(c, id, res->manifest_url, res->manifest_hash)))
		qe_fail_ctx(rc, "pull: checkpoint committed locally, but recording its remote copy failed");
	return rc;
abort : {
	char saved[2048];
	snprintf(saved, sizeof(saved), "%s", qe_last_error());
	char why[1800];
	snprintf(why, sizeof(why), "pull from %s failed: %.300s", res->manifest_url, saved);
	cat_ckpt_abort(c, id, why);
	return qe_fail(rc, "%s", saved);
}
}

/*
 * The checkpoint is committed here already: tensor t is lost when no rank of
 * the job sees the store its row names, nor a copy's (a host lost its store,
 * or the run moved to other hosts).
 */
static int lost(ckj *j, cat *c, int64_t id, const cat_tensor *mt, const cat_tensor_rows *local)
{
	const cat_tensor *t = NULL;
	for (size_t i = 0; i < local->n && !t; i++)
		if (local->rows[i].stage == mt->stage && strcmp(local->rows[i].name, mt->name) == 0)
			t = &local->rows[i];
	if (!t)
		return 0; /* the manifest and the catalog disagree: ckpt__pull_already_here matched them */
	const char *sid = t->store_id ? t->store_id : "";
	ckpt_job_store *s = ckj_store_find(j, sid, NULL);
	if (s && s->rank >= 0)
		return 0;
	cat_tensor_rows cp = { 0 };
	int reach = 0;
	if (cat_ckpt_copies(c, id, &cp) == QE_OK)
		for (size_t i = 0; i < cp.n && !reach; i++)
			if (cp.rows[i].stage == t->stage && strcmp(cp.rows[i].name, t->name) == 0) {
				ckpt_job_store *x = ckj_store_find(j, cp.rows[i].store_id, NULL);
				reach = x && x->rank >= 0;
			}
	qe_clear_error();
	cat_tensor_rows_free(&cp);
	return !reach;
}

/*
 * The lost tensors were fetched again into the stores of the ranks they went
 * to: their rows now name those stores, in one durable transaction.
 */
static int move_rows(cat *c, const ckpt_manifest *m, int64_t id, char (*store_of)[CKPT_STORE_ID_MAX],
		     const int *receiver)
{
	int rc = cat_begin_durable(c);
	for (size_t i = 0; !rc && i < m->tensors.n; i++)
		if (receiver[i] >= 0)
			rc = cat_ckpt_move_tensor(c, id, m->tensors.rows[i].stage, m->tensors.rows[i].name,
						  store_of[receiver[i]]);
	if (rc) {
		char saved[2048];
		snprintf(saved, sizeof(saved), "%s", qe_last_error());
		cat_rollback(c);
		return qe_fail(rc, "pull: pointing the fetched tensors at their new stores: %s", saved);
	}
	return cat_commit(c);
}

/* The run a pull without --run-id fills: run_dir's own when it has one. */
static void run_of_dir(const char *run_dir, char *want, size_t len)
{
	char path[CKPT_PATH_MAX];
	cat *c = NULL;
	char *id = NULL;
	if (!ckpt_rundir_catalog(run_dir, path, sizeof(path)) && access(path, F_OK) == 0 && cat_open(path, 0, &c) == QE_OK &&
	    cat_meta_get(c, "run_id", &id) == QE_OK && id[0])
		snprintf(want, len, "%s", id);
	free(id);
	cat_close(c);
	qe_clear_error();
}

static int pull_rank0(ckj *j, pull_job *pj, const char *run_dir, const char *run_id, int64_t step,
		      ckpt_pull_result *res, ckpt_job_report *where)
{
	double t0 = ckpt__remote_now_ms();
	ckpt_manifest m;
	memset(&m, 0, sizeof(m));
	cat *c = NULL;
	char want[64] = "";
	ckq_set *sets = qe_calloc((size_t)j->world, sizeof(*sets));
	int *receiver = NULL;
	char(*store_of)[CKPT_STORE_ID_MAX] = qe_calloc((size_t)j->world, CKPT_STORE_ID_MAX);
	json_t **tasks = qe_calloc((size_t)j->world, sizeof(*tasks)), **ans = qe_calloc((size_t)j->world, sizeof(*ans));
	int rc = sets && store_of && tasks && ans ? QE_OK : qe_fail(QE_ENOMEM, "pull: out of memory"), here = 0;
	size_t nlost = 0;
	cat_tensor_rows local = { 0 }; /* the catalog's rows, when the checkpoint is already here */
	if (run_id && run_id[0]) {
		if (!ckpt__valid_run_id(run_id))
			rc = qe_fail(QE_EINVAL, "pull: '%s' is not a run id", run_id);
		snprintf(want, sizeof(want), "%s", run_id);
	} else {
		run_of_dir(run_dir, want, sizeof(want));
	}
	if (!rc && !(rc = store_remote_open(pj->url, pj->ro, &pj->rem)) && !(rc = store_remote_check(pj->rem)))
		rc = ckpt__pull_manifest(pj->rem, pj->url, want, step, &m, res->manifest_url, sizeof(res->manifest_url),
					 res->manifest_hash);
	if (!rc) {
		snprintf(res->run_id, sizeof(res->run_id), "%s", m.run_id);
		res->step = m.step;
		res->e_w = m.e_w;
		res->bytes = m.bytes;
		rc = ckpt__pull_open_local(run_dir, &m, &c, &res->created);
	}
	if (!rc)
		here = !res->created && ckpt__pull_already_here(c, &m, res->manifest_url, res->manifest_hash, &res->ckpt_id);
	if (!rc && !(receiver = qe_calloc(m.tensors.n + 1, sizeof(int))))
		rc = qe_fail(QE_ENOMEM, "pull: out of memory");
	if ((rc = ckj_census(j, m.run_id ? m.run_id : "", rc, NULL)))
		goto out;
	/* every tensor to the rank that saved its stage; each rank's distinct chunks */
	ckq_set all = { 0 };
	if (here && (rc = cat_ckpt_tensors(c, res->ckpt_id, &local)))
		goto fail;
	for (size_t i = 0; !rc && i < m.tensors.n; i++) {
		const cat_tensor *t = &m.tensors.rows[i];
		receiver[i] = saver(&m, t->stage) % j->world;
		if (here && !lost(j, c, res->ckpt_id, t, &local)) {
			receiver[i] = -1; /* its store is in reach: nothing to fetch */
			continue;
		}
		nlost += here;
		for (size_t k = 0; !rc && k < t->n_chunks; k++) {
			store_hash h;
			memcpy(h.b, t->chunks[k].hash, STORE_HASH_BYTES);
			ckq_set_add(&all, &h, t->chunks[k].size, NULL);
			if (!ckq_set_add(&sets[receiver[i]], &h, t->chunks[k].size, NULL))
				rc = qe_fail(QE_ENOMEM, "pull: out of memory");
		}
	}
	res->chunks = all.n;
	ckq_set_free(&all);
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *ch = json_array();
		for (size_t i = 0; !rc && ch && i < sets[q].cap; i++)
			if (sets[q].e[i].used)
				rc = ckj_chunk_add(ch, &sets[q].e[i].h, sets[q].e[i].size);
		if (!ch || !(tasks[q] = json_pack("{s:s,s:o}", "op", "pull", "chunks", ch)))
			rc = qe_fail(QE_ENOMEM, "pull: out of memory");
	}
	if (!rc && (rc = ckj_round(j, tasks, ans, serve_pull, pj)))
		rc = qe_fail_ctx(rc, "pull of step %lld", (long long)m.step);
	for (int q = 0; !rc && q < j->world; q++) {
		const char *sid = json_string_value(json_object_get(ans[q], "store_id"));
		const char *path = json_string_value(json_object_get(ans[q], "path"));
		const char *host = json_string_value(json_object_get(ans[q], "host"));
		snprintf(store_of[q], CKPT_STORE_ID_MAX, "%s", sid ? sid : "");
		res->chunks_fetched += ckj_u64(ans[q], "fetched");
		res->bytes_fetched += ckj_u64(ans[q], "bytes");
		ckpt_job_store *s = ckj_store_find(j, store_of[q], NULL);
		if (!s && sid) {
			ckpt_job_store *v = qe_realloc(j->rep.stores, (j->rep.n + 1) * sizeof(*v));
			if (!v) {
				rc = qe_fail(QE_ENOMEM, "pull: out of memory");
				break;
			}
			j->rep.stores = v;
			s = &v[j->rep.n++];
			memset(s, 0, sizeof(*s));
			snprintf(s->store_id, sizeof(s->store_id), "%s", sid);
			snprintf(s->path, sizeof(s->path), "%s", path ? path : "");
			snprintf(s->host, sizeof(s->host), "%s", host ? host : "");
			s->owner = q;
		}
		if (s) {
			s->rank = q;
			s->chunks = ckj_u64(ans[q], "fetched");
			s->bytes = ckj_u64(ans[q], "bytes");
			s->present = ckj_u64(ans[q], "present");
		}
		/* the catalog knows every store that holds a row */
		if (sid && sets[q].n &&
		    (rc = cat_store_put(c, sid, m.run_id, q, host ? host : "", path ? path : "")))
			rc = qe_fail_ctx(rc, "pull: recording the store of rank %d", q);
	}
	res->chunks_present = res->chunks >= res->chunks_fetched ? res->chunks - res->chunks_fetched : 0;
	if (!rc && here) {
		res->up_to_date = nlost == 0;
		if (nlost)
			rc = move_rows(c, &m, res->ckpt_id, store_of, receiver);
	} else if (!rc) {
		rc = insert(c, &m, store_of, receiver, res);
	}
	if (!rc)
		res->ms = ckpt__remote_now_ms() - t0;
fail:
	ckj_finish(j, rc);
out:
	if (!rc && where) {
		*where = j->rep;
		memset(&j->rep, 0, sizeof(j->rep));
	}
	for (int q = 0; q < j->world; q++) {
		if (sets)
			ckq_set_free(&sets[q]);
		json_decref(tasks ? tasks[q] : NULL);
		json_decref(ans ? ans[q] : NULL);
	}
	free(sets);
	free(store_of);
	free(receiver);
	free(tasks);
	free(ans);
	ckpt__manifest_release(&m);
	cat_tensor_rows_free(&local);
	cat_close(c);
	return rc;
}

int ckpt_job_pull(qe_comm *comm, const char *run_dir, const char *url, const store_remote_opts *ro,
		  const char *run_id, int64_t step, ckpt_pull_result *out, ckpt_job_report *where)
{
	ckj j;
	pull_job pj = { url, ro, NULL };
	ckpt_pull_result res;
	memset(&res, 0, sizeof(res));
	if (out)
		memset(out, 0, sizeof(*out));
	if (where)
		memset(where, 0, sizeof(*where));
	if (!run_dir || !run_dir[0])
		return qe_fail(QE_EINVAL, "pull: needs a run directory");
	int rc = ckj_open(&j, comm, run_dir);
	if (!rc)
		rc = j.rank == 0 ? pull_rank0(&j, &pj, run_dir, run_id, step, &res, where) : ckj_serve(&j, serve_pull, &pj);
	if (!rc && out && j.rank == 0)
		*out = res;
	store_remote_close(pj.rem);
	ckpt_job_report_free(&j.rep);
	ckj_close(&j);
	return rc;
}
