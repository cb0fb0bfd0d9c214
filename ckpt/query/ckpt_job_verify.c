/*
 * ckpt_job_verify.c - `qeffect verify` as a job over the ranks that hold the
 * run's stores (ckpt_job.h).
 *
 * Rank 0 reads its catalog, and after the census (ckpt_job.c) gives every
 * store to one rank that sees it, with the distinct chunks that committed
 * checkpoints list there and the set of every chunk the catalog references
 * (for the orphan count).  Each rank re-hashes its stores' chunks on its own
 * disk, in parallel with the others, and answers only what is wrong (a
 * chunk missing, of another size, or corrupt, with the store's message) and
 * its counts.  Rank 0 then judges every row exactly as the one-host verify
 * does (ckq_verify_walk, with the answers standing in for the stores), so
 * both forms find the same faults; each fault names the store's rank and
 * host and the rank that checked it.
 */
#include "ckpt/query/ckpt_job_int.h"
#include "ckpt/query/ckpt_query_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

/* ---- a rank's part ---------------------------------------------------------------------- */

static int check_store(json_t *s, const ckq_set *refs, json_t *ans)
{
	const char *path = json_string_value(json_object_get(s, "path"));
	json_t *chunks = json_object_get(s, "chunks"), *bad = json_array();
	store *st = NULL;
	store_opts o = { 0 };
	o.read_only = 1;
	ckpt_verify_report v;
	memset(&v, 0, sizeof(v));
	int rc = bad ? QE_OK : qe_fail(QE_ENOMEM, "verify: out of memory");
	if (!rc && (rc = store_open(path ? path : "", &o, &st)))
		rc = qe_fail_ctx(rc, "cannot open its store '%s'", path ? path : "?");
	for (size_t i = 0; !rc && i < json_array_size(chunks); i++) {
		ckq_entry e;
		memset(&e, 0, sizeof(e));
		uint64_t listed;
		if ((rc = ckj_chunk_get(chunks, i, &e.h, &listed)))
			break;
		e.size = listed;
		if ((rc = ckq_check_chunk(st, &e, &v.chunks, &v.bytes))) {
			rc = qe_fail_ctx(rc, "reading the store '%s'", path);
			break;
		}
		if (e.state != CKQ_CHK_OK || e.size != listed) {
			char hex[STORE_HASH_HEX];
			json_array_append_new(bad, json_pack("[s,i,I,s]", store_hash_hex(&e.h, hex), e.state,
							     (json_int_t)e.size, e.why ? e.why : ""));
		}
		free(e.why);
	}
	if (!rc && (rc = ckq_count_orphans(st, refs, &v)))
		rc = qe_fail_ctx(rc, "listing the store '%s'", path);
	store_close(st);
	if (rc) {
		json_decref(bad);
		return rc;
	}
	json_array_append_new(ans, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:o}", "id",
					     json_string_value(json_object_get(s, "id")), "chunks", (json_int_t)v.chunks,
					     "bytes", (json_int_t)v.bytes, "store_chunks", (json_int_t)v.store_chunks,
					     "orphans", (json_int_t)v.orphans, "orphan_bytes", (json_int_t)v.orphan_bytes,
					     "bad", bad));
	return QE_OK;
}

static json_t *serve_verify(ckj *j, json_t *task, void *ctx)
{
	(void)j;
	(void)ctx;
	ckq_set refs = { 0 };
	json_t *ra = json_object_get(task, "refs"), *out = json_array();
	int rc = out ? QE_OK : qe_fail(QE_ENOMEM, "verify: out of memory");
	for (size_t i = 0; !rc && i < json_array_size(ra); i++) {
		store_hash h;
		uint64_t size;
		if (!(rc = ckj_chunk_get(ra, i, &h, &size)) && !ckq_set_add(&refs, &h, size, NULL))
			rc = qe_fail(QE_ENOMEM, "verify: out of memory");
	}
	json_t *stores = ckj_task_stores(task);
	for (size_t i = 0; !rc && i < json_array_size(stores); i++)
		rc = check_store(json_array_get(stores, i), &refs, out);
	ckq_set_free(&refs);
	if (rc) {
		json_decref(out);
		return ckj_failed(rc);
	}
	return json_pack("{s:o}", "stores", out);
}

/* ---- rank 0 -------------------------------------------------------------------------------- */

/* The distinct chunks every committed checkpoint lists in store k of the census: sets[k]. */
static int chunks_per_store(ckj *j, ckpt_run *r, ckq_set *sets)
{
	cat_ckpt_rows l = { 0 };
	int rc = cat_ckpt_list(ckpt_run_catalog(r), ckpt_run_id(r), &l);
	for (size_t i = 0; !rc && i < l.n; i++) {
		if (l.rows[i].status != CAT_COMMITTED)
			continue;
		cat_tensor_rows rows[2] = { { 0 }, { 0 } };
		rc = cat_ckpt_tensors(ckpt_run_catalog(r), l.rows[i].id, &rows[0]);
		if (!rc)
			rc = cat_ckpt_copies(ckpt_run_catalog(r), l.rows[i].id, &rows[1]);
		for (int c = 0; !rc && c < 2; c++)
			for (size_t t = 0; !rc && t < rows[c].n; t++) {
				const cat_tensor *tr = &rows[c].rows[t];
				ckpt_job_store *s = ckj_store_find(j, tr->store_id, NULL);
				if (!s || s->rank < 0)
					continue;
				for (size_t k = 0; !rc && k < tr->n_chunks; k++) {
					store_hash h;
					memcpy(h.b, tr->chunks[k].hash, STORE_HASH_BYTES);
					if (!ckq_set_add(&sets[s - j->rep.stores], &h, tr->chunks[k].size, NULL))
						rc = qe_fail(QE_ENOMEM, "verify: out of memory");
				}
			}
		cat_tensor_rows_free(&rows[0]);
		cat_tensor_rows_free(&rows[1]);
	}
	cat_ckpt_rows_free(&l);
	return rc;
}

static int set_to_json(const ckq_set *s, json_t *arr)
{
	int rc = QE_OK;
	for (size_t i = 0; !rc && i < s->cap; i++)
		if (s->e[i].used)
			rc = ckj_chunk_add(arr, &s->e[i].h, s->e[i].size);
	return rc;
}

static int build_tasks(ckj *j, ckpt_run *r, ckq_set *sets, json_t **tasks)
{
	ckq_set refs = { 0 };
	json_t *ra = json_array();
	int rc = ra ? ckq_set_referenced(ckpt_run_catalog(r), &refs) : qe_fail(QE_ENOMEM, "verify: out of memory");
	if (!rc)
		rc = set_to_json(&refs, ra);
	ckq_set_free(&refs);
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_array();
		if (!st || !(tasks[q] = json_pack("{s:s,s:O,s:o}", "op", "verify", "refs", ra, "stores", st))) {
			rc = qe_fail(QE_ENOMEM, "verify: out of memory");
			break;
		}
		for (size_t k = 0; !rc && k < j->rep.n; k++) {
			ckpt_job_store *s = &j->rep.stores[k];
			if (s->rank != q)
				continue;
			json_t *ch = json_array();
			rc = ch ? set_to_json(&sets[k], ch) : qe_fail(QE_ENOMEM, "verify: out of memory");
			if (!rc)
				json_array_append_new(st, json_pack("{s:s,s:s,s:o}", "id", s->store_id, "path", s->path, "chunks", ch));
		}
	}
	json_decref(ra);
	return rc;
}

/* The answers of rank q into the census's stores and their vstores' states. */
static int take_answers(ckj *j, int q, json_t *ans, ckq_vstore *vs, ckpt_verify_report *out)
{
	json_t *st = json_object_get(ans, "stores");
	for (size_t i = 0; i < json_array_size(st); i++) {
		json_t *a = json_array_get(st, i), *bad = json_object_get(a, "bad");
		const char *id = json_string_value(json_object_get(a, "id"));
		ckpt_job_store *s = id ? ckj_store_find(j, id, j->hosts[q]) : NULL;
		if (!s)
			return qe_fail(QE_ECORRUPT, "verify: rank %d answered for a store it was not given", q);
		ckq_vstore *x = &vs[s - j->rep.stores];
		s->chunks = ckj_u64(a, "chunks");
		s->bytes = ckj_u64(a, "bytes");
		s->store_chunks = ckj_u64(a, "store_chunks");
		s->orphans = ckj_u64(a, "orphans");
		s->orphan_bytes = ckj_u64(a, "orphan_bytes");
		out->chunks += s->chunks;
		out->bytes += s->bytes;
		out->store_chunks += s->store_chunks;
		out->orphans += s->orphans;
		out->orphan_bytes += s->orphan_bytes;
		for (size_t k = 0; k < json_array_size(bad); k++) {
			json_t *b = json_array_get(bad, k);
			store_hash h;
			ckq_entry *e;
			if (!json_is_string(json_array_get(b, 0)) || store_hash_parse(json_string_value(json_array_get(b, 0)), &h))
				return qe_fail(QE_ECORRUPT, "verify: rank %d's answer names a malformed chunk", q);
			if (!(e = ckq_set_find(&x->seen, &h)))
				continue;
			e->state = (int)json_integer_value(json_array_get(b, 1));
			e->size = (uint64_t)json_integer_value(json_array_get(b, 2));
			const char *why = json_string_value(json_array_get(b, 3));
			if (why && why[0] && !(e->why = qe_strdup(why)))
				return qe_fail(QE_ENOMEM, "verify: out of memory");
		}
	}
	return QE_OK;
}

static int verify_rank0(ckj *j, const char *run_dir, ckpt_verify_report *out, ckpt_job_report *where)
{
	ckpt_run *r = NULL;
	cat_store_rows known = { 0 };
	ckq_set *sets = NULL;
	ckq_vstore *vs = NULL;
	size_t n = 0;
	json_t **tasks = qe_calloc((size_t)j->world, sizeof(*tasks)), **ans = qe_calloc((size_t)j->world, sizeof(*ans));
	int rc = tasks && ans ? ckpt_run_open(run_dir, 0, &r) : qe_fail(QE_ENOMEM, "verify: out of memory");
	if (!rc && cat_store_list(ckpt_run_catalog(r), ckpt_run_id(r), &known))
		qe_clear_error(); /* a schema-2 catalog has no stores table */
	if ((rc = ckj_census(j, r ? ckpt_run_id(r) : "", rc, &known)))
		goto out;
	n = j->rep.n;
	if (!(sets = qe_calloc(n + 1, sizeof(*sets))) || !(vs = qe_calloc(n + 1, sizeof(*vs)))) {
		rc = qe_fail(QE_ENOMEM, "verify: out of memory");
		goto fail;
	}
	if ((rc = chunks_per_store(j, r, sets)) || (rc = build_tasks(j, r, sets, tasks)))
		goto fail;
	/* what each store's rank will answer about: every chunk sent is fine unless it says otherwise */
	int nvs = 0;
	for (size_t k = 0; k < n; k++) {
		ckpt_job_store *s = &j->rep.stores[k];
		ckq_vstore *x = &vs[k];
		snprintf(x->store_id, sizeof(x->store_id), "%s", s->store_id);
		snprintf(x->host, sizeof(x->host), "%s", s->host);
		snprintf(x->path, sizeof(x->path), "%s", s->path);
		x->owner = s->owner;
		x->checked_by = s->rank;
		x->seen = sets[k];
		memset(&sets[k], 0, sizeof(sets[k]));
		for (size_t i = 0; i < x->seen.cap; i++)
			if (x->seen.e[i].used)
				x->seen.e[i].state = CKQ_CHK_OK;
		if (s->rank >= 0)
			nvs = (int)k + 1;
	}
	if ((rc = ckj_round(j, tasks, ans, serve_verify, NULL)))
		goto fail;
	for (int q = 0; !rc && q < j->world; q++)
		rc = take_answers(j, q, ans[q], vs, out);
	/* stores no rank sees stay out of the walk: their rows' chunks are missing, and say where */
	ckq_vstore *seen_vs = qe_calloc(n + 1, sizeof(*seen_vs));
	int m = 0;
	if (!rc && !seen_vs)
		rc = qe_fail(QE_ENOMEM, "verify: out of memory");
	for (int k = 0; !rc && k < nvs; k++)
		if (j->rep.stores[k].rank >= 0)
			seen_vs[m++] = vs[k];
	if (!rc)
		rc = ckq_verify_walk(r, seen_vs, m, "which no rank of this job sees", out);
	free(seen_vs);
fail:
	ckj_finish(j, rc);
out:
	if (!rc && where) {
		*where = j->rep;
		memset(&j->rep, 0, sizeof(j->rep));
	}
	for (size_t k = 0; k < n; k++) {
		if (sets)
			ckq_set_free(&sets[k]);
		if (vs)
			ckq_set_free(&vs[k].seen);
	}
	free(sets);
	free(vs);
	for (int q = 0; q < j->world; q++) {
		json_decref(tasks ? tasks[q] : NULL);
		json_decref(ans ? ans[q] : NULL);
	}
	free(tasks);
	free(ans);
	cat_store_rows_free(&known);
	ckpt_run_close(r);
	return rc;
}

int ckpt_job_verify(qe_comm *comm, const char *run_dir, ckpt_verify_report *out, ckpt_job_report *where)
{
	ckj j;
	memset(out, 0, sizeof(*out));
	if (where)
		memset(where, 0, sizeof(*where));
	int rc = ckj_open(&j, comm, run_dir);
	if (!rc)
		rc = j.rank == 0 ? verify_rank0(&j, run_dir, out, where) : ckj_serve(&j, serve_verify, NULL);
	ckpt_job_report_free(&j.rep);
	ckj_close(&j);
	return rc;
}
