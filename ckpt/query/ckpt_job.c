/*
 * ckpt_job.c - the frame of the jobs over a run's stores (ckpt_job.h):
 * rounds of tasks from rank 0 and answers from every rank on the comm's
 * service lane, and the first round, the census, in which every rank says
 * which host it is on and which stores of the run that host's disk holds.
 *
 * Rank 0 drives; the other ranks only answer (ckj_serve), so every decision
 * - which store a rank works on, which chunks a store keeps - is rank 0's,
 * made from the catalog only rank 0 has.  A store seen by several ranks (two
 * ranks on one host see each other's stores) goes to exactly one of them:
 * its owner when the owner is in the job and sees it, else the lowest rank
 * that sees it.  Rank 0 serves its own task while the others serve theirs,
 * so the ranks' disks work in parallel.  A rank that fails sends its error
 * as its answer; one that dies or stops answering fails the comm, and the
 * round's error names that rank and its host as the census heard it.
 */
#include "ckpt/query/ckpt_job_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

void ckpt_job_report_free(ckpt_job_report *j)
{
	if (!j)
		return;
	free(j->stores);
	memset(j, 0, sizeof(*j));
}

int ckj_open(ckj *j, qe_comm *comm, const char *run_dir)
{
	memset(j, 0, sizeof(*j));
	j->comm = comm;
	j->rank = comm ? qe_pstate_comm_rank(comm) : 0;
	j->world = comm ? qe_pstate_comm_world(comm) : 1;
	j->run_dir = run_dir;
	j->rep.world = j->world;
	ckpt_host_name(j->host, sizeof(j->host));
	if (j->rank == 0 && !(j->hosts = qe_calloc((size_t)j->world, CKPT_HOST_MAX)))
		return qe_fail(QE_ENOMEM, "job: out of memory");
	for (int q = 0; j->hosts && q < j->world; q++)
		snprintf(j->hosts[q], CKPT_HOST_MAX, "%s", q == 0 ? j->host : "?");
	return QE_OK;
}

void ckj_close(ckj *j)
{
	free(j->hosts);
	j->hosts = NULL;
}

const char *ckj_who(const ckj *j, int q, char *buf, size_t len)
{
	const char *h = q == j->rank ? j->host : (j->hosts && q >= 0 && q < j->world ? j->hosts[q] : "?");
	if (strcmp(h, "?") == 0)
		snprintf(buf, len, "rank %d (host not yet known)", q);
	else
		snprintf(buf, len, "rank %d on host '%s'", q, h);
	return buf;
}

json_t *ckj_failed(int rc)
{
	const char *m = qe_last_error();
	return json_pack("{s:i,s:s}", "rc", rc ? rc : QE_EIO, "msg", m && m[0] ? m : qe_strerror(rc));
}

json_t *ckj_task_stores(json_t *task)
{
	json_t *a = json_object_get(task, "stores");
	return json_is_array(a) ? a : NULL;
}

uint64_t ckj_u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

int ckj_chunk_add(json_t *arr, const store_hash *h, uint64_t size)
{
	char hex[STORE_HASH_HEX];
	json_t *e = json_pack("[s,I]", store_hash_hex(h, hex), (json_int_t)size);
	if (!e || json_array_append_new(arr, e))
		return qe_fail(QE_ENOMEM, "job: out of memory");
	return QE_OK;
}

int ckj_chunk_get(json_t *arr, size_t i, store_hash *h, uint64_t *size)
{
	json_t *e = json_array_get(arr, i);
	json_t *hx = json_array_get(e, 0), *sz = json_array_get(e, 1);
	if (!json_is_string(hx) || store_hash_parse(json_string_value(hx), h) || !json_is_integer(sz) ||
	    json_integer_value(sz) < 0)
		return qe_fail(QE_ECORRUPT, "job: chunk %zu of a task is not [hash, size]", i);
	*size = (uint64_t)json_integer_value(sz);
	return QE_OK;
}

int ckj_store_lock(const char *path, const char *store_id, const char *what, ckpt_lock **out)
{
	*out = NULL;
	if (!store_id[0])
		return QE_OK; /* the schema-2 shared store is written by no rank: RUN/lock covers it */
	char lock[CKPT_PATH_MAX + 8];
	snprintf(lock, sizeof(lock), "%s/lock", path);
	return ckpt_lock_take(lock, what, out);
}

ckpt_job_store *ckj_store_find(ckj *j, const char *store_id, const char *host)
{
	for (size_t i = 0; i < j->rep.n; i++) {
		ckpt_job_store *s = &j->rep.stores[i];
		if (strcmp(s->store_id, store_id) == 0 && (store_id[0] || !host || strcmp(s->host, host) == 0))
			return s;
	}
	return NULL;
}

/* ---- messages ----------------------------------------------------------------------- */

static int send_json(ckj *j, int peer, uint32_t tag, json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);
	if (!text)
		return qe_fail(QE_ENOMEM, "job: out of memory");
	int rc = qe_pstate_svc_send(j->comm, peer, tag, text, strlen(text));
	free(text);
	return rc;
}

static int recv_json(ckj *j, int peer, uint32_t tag, json_t **out)
{
	void *buf = NULL;
	size_t n = 0;
	*out = NULL;
	int rc = qe_pstate_svc_recv(j->comm, peer, tag, &buf, &n);
	if (rc)
		return rc;
	json_error_t e;
	*out = json_loadb(buf, n, 0, &e);
	free(buf);
	if (!*out || !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return qe_fail(QE_ECORRUPT, "job: a message from rank %d is not a JSON object (%s)", peer, e.text);
	}
	return QE_OK;
}

/* ---- the census ------------------------------------------------------------------------ */

static json_t *census_answer(ckj *j, json_t *task)
{
	const char *id = json_string_value(json_object_get(task, "run_id"));
	snprintf(j->run_id, sizeof(j->run_id), "%s", id ? id : "");
	ckpt_local_store *v = NULL;
	int n = 0, rc = ckpt_local_stores_scan(j->run_dir, j->run_id, &v, &n);
	if (rc)
		return ckj_failed(qe_fail_ctx(rc, "listing the stores of run '%s' under '%s'", j->run_id, j->run_dir));
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		json_array_append_new(a, json_pack("{s:s,s:i,s:s,s:s}", "id", v[i].id.store_id, "owner",
						   v[i].id.store_id[0] ? v[i].id.rank : -1, "host", v[i].id.host, "path",
						   v[i].path));
	free(v);
	return json_pack("{s:s,s:o}", "host", j->host, "stores", a ? a : json_array());
}

static int add_store(ckj *j, const char *id, int owner, const char *host, const char *path, int rank)
{
	ckpt_job_store *v = qe_realloc(j->rep.stores, (j->rep.n + 1) * sizeof(*v));
	if (!v)
		return qe_fail(QE_ENOMEM, "job: out of memory");
	j->rep.stores = v;
	ckpt_job_store *s = &v[j->rep.n++];
	memset(s, 0, sizeof(*s));
	snprintf(s->store_id, sizeof(s->store_id), "%s", id);
	s->owner = owner;
	s->rank = rank;
	snprintf(s->host, sizeof(s->host), "%s", host);
	snprintf(s->path, sizeof(s->path), "%s", path);
	return QE_OK;
}

int ckj_census(ckj *j, const char *run_id, int rc0, const cat_store_rows *known)
{
	if (rc0) {
		ckj_finish(j, rc0);
		return rc0;
	}
	snprintf(j->run_id, sizeof(j->run_id), "%s", run_id);
	json_t **tasks = qe_calloc((size_t)j->world, sizeof(*tasks)), **ans = qe_calloc((size_t)j->world, sizeof(*ans));
	int rc = tasks && ans ? QE_OK : qe_fail(QE_ENOMEM, "job: out of memory");
	for (int q = 0; !rc && q < j->world; q++)
		if (!(tasks[q] = json_pack("{s:s,s:s}", "op", "census", "run_id", run_id)))
			rc = qe_fail(QE_ENOMEM, "job: out of memory");
	if (!rc)
		rc = ckj_round(j, tasks, ans, NULL, NULL);
	/* each store to one rank: its owner when that rank sees it, else the lowest that does */
	for (int q = 0; !rc && q < j->world; q++) {
		json_t *st = json_object_get(ans[q], "stores");
		for (size_t i = 0; !rc && i < json_array_size(st); i++) {
			json_t *e = json_array_get(st, i);
			const char *id = json_string_value(json_object_get(e, "id"));
			const char *host = json_string_value(json_object_get(e, "host"));
			const char *path = json_string_value(json_object_get(e, "path"));
			int owner = (int)json_integer_value(json_object_get(e, "owner"));
			if (!id || !host || !path) {
				rc = qe_fail(QE_ECORRUPT, "job: the census answer of rank %d is malformed", q);
				break;
			}
			ckpt_job_store *s = ckj_store_find(j, id, j->hosts[q]);
			if (!s)
				rc = add_store(j, id, owner, host, path, q);
			else if (owner == q && s->rank != owner) {
				s->rank = q;
				snprintf(s->path, sizeof(s->path), "%s", path);
			}
		}
	}
	/* the stores the catalog knows that no rank of the job sees */
	for (size_t i = 0; !rc && known && i < known->n; i++)
		if (!ckj_store_find(j, known->rows[i].store_id, NULL))
			rc = add_store(j, known->rows[i].store_id, known->rows[i].rank, known->rows[i].host,
				       known->rows[i].path, -1);
	for (int q = 0; q < j->world; q++) {
		json_decref(tasks ? tasks[q] : NULL);
		json_decref(ans ? ans[q] : NULL);
	}
	free(tasks);
	free(ans);
	if (rc)
		ckj_finish(j, rc);
	return rc;
}

/* ---- rounds ------------------------------------------------------------------------------ */

/* QE_JOB_KILL=OP:RANK (ckpt_job.h): this rank dies on receiving task OP, as a crashed host would. */
static void maybe_die(const ckj *j, const char *op)
{
	const char *v = ckpt_opt_text(ckpt_options_get()->job_kill);
	char want[32];
	int rank = -1;
	if (!v || !op || sscanf(v, "%31[^:]:%d", want, &rank) != 2 || strcmp(want, op) || rank != j->rank)
		return;
	qe_log(QE_LOG_WARN, "job: QE_JOB_KILL: rank %d dies at task '%s'", j->rank, op);
	raise(SIGKILL);
}

static json_t *serve_one(ckj *j, json_t *task, ckj_serve_fn fn, void *ctx)
{
	const char *op = json_string_value(json_object_get(task, "op"));
	maybe_die(j, op);
	if (op && strcmp(op, "census") == 0)
		return census_answer(j, task);
	if (!fn)
		return ckj_failed(qe_fail(QE_EINVAL, "job: task '%s' has no server", op ? op : "?"));
	return fn(j, task, ctx);
}

/* Turn an answer's {"rc","msg"} into text naming the rank; 0 when it succeeded. */
static int answer_rc(ckj *j, int q, json_t *a, char *msgs, size_t len, size_t *used)
{
	int rc = (int)json_integer_value(json_object_get(a, "rc"));
	if (!rc)
		return 0;
	const char *m = json_string_value(json_object_get(a, "msg"));
	char who[CKPT_HOST_MAX + 48];
	if (*used < len - 1)
		*used += (size_t)snprintf(msgs + *used, len - *used, "%s%s: %s", *used ? "; " : "", ckj_who(j, q, who, sizeof(who)),
					  m ? m : qe_strerror(rc));
	return rc;
}

int ckj_round(ckj *j, json_t **tasks, json_t **answers, ckj_serve_fn fn, void *ctx)
{
	int first = 0;
	char msgs[4096] = "", who[CKPT_HOST_MAX + 48];
	size_t used = 0;
	for (int q = 1; q < j->world; q++) {
		int rc = send_json(j, q, CKJ_SVC_TASK, tasks[q]);
		if (rc) {
			char cause[1024];
			snprintf(cause, sizeof(cause), "%s", qe_last_error());
			return qe_fail(rc, "job: %s cannot be given its task: %s", ckj_who(j, q, who, sizeof(who)), cause);
		}
	}
	answers[0] = serve_one(j, tasks[0], fn, ctx);
	if (!answers[0])
		answers[0] = ckj_failed(qe_fail(QE_ENOMEM, "job: out of memory"));
	for (int q = 1; q < j->world; q++) {
		int rc = recv_json(j, q, CKJ_SVC_ANSWER, &answers[q]);
		if (rc) {
			char cause[1024];
			snprintf(cause, sizeof(cause), "%s", qe_last_error());
			return qe_fail(rc, "job: %s did not answer: %s", ckj_who(j, q, who, sizeof(who)), cause);
		}
		const char *h = json_string_value(json_object_get(answers[q], "host"));
		if (h && j->hosts)
			snprintf(j->hosts[q], CKPT_HOST_MAX, "%s", h);
	}
	for (int q = 0; q < j->world; q++) {
		int rc = answer_rc(j, q, answers[q], msgs, sizeof(msgs), &used);
		if (rc && !first)
			first = rc;
	}
	return first ? qe_fail(first, "%s", msgs) : QE_OK;
}

void ckj_finish(ckj *j, int rc)
{
	if (j->rank != 0 || !j->comm)
		return;
	char saved[2048];
	snprintf(saved, sizeof(saved), "%s", qe_last_error());
	json_t *t = rc ? json_pack("{s:s,s:i}", "op", "abort", "rc", rc) : json_pack("{s:s}", "op", "done");
	for (int q = 1; t && q < j->world && !qe_pstate_comm_failed(j->comm); q++)
		send_json(j, q, CKJ_SVC_TASK, t);
	json_decref(t);
	if (!qe_pstate_comm_failed(j->comm))
		qe_pstate_flush(j->comm);
	if (rc)
		qe_fail(rc, "%s", saved);
	else
		qe_clear_error();
}

int ckj_serve(ckj *j, ckj_serve_fn fn, void *ctx)
{
	char who[CKPT_HOST_MAX + 48];
	for (;;) {
		json_t *task = NULL;
		int rc = recv_json(j, 0, CKJ_SVC_TASK, &task);
		if (rc) {
			char cause[1024];
			snprintf(cause, sizeof(cause), "%s", qe_last_error());
			return qe_fail(rc, "job: %s lost rank 0: %s", ckj_who(j, j->rank, who, sizeof(who)), cause);
		}
		const char *op = json_string_value(json_object_get(task, "op"));
		if (op && (strcmp(op, "done") == 0 || strcmp(op, "abort") == 0)) {
			json_decref(task);
			return QE_OK; /* rank 0 reports how the job ended */
		}
		json_t *a = serve_one(j, task, fn, ctx);
		json_decref(task);
		if (!a)
			a = ckj_failed(qe_fail(QE_ENOMEM, "job: out of memory"));
		if (!json_object_get(a, "host"))
			json_object_set_new(a, "host", json_string(j->host));
		rc = send_json(j, 0, CKJ_SVC_ANSWER, a);
		json_decref(a);
		if (rc)
			return qe_fail_ctx(rc, "job: %s answering rank 0", ckj_who(j, j->rank, who, sizeof(who)));
	}
}
