/*
 * ckpt_async.c - asynchronous checkpoints: a collective host snapshot at the
 * quiescent boundary, then store writes, rows and the commit in a background
 * thread (see ckpt_async.h for the protocol and its guarantees).
 *
 * The background threads talk only on the comm's service lane, which is
 * matched by tag and never touches training's messages or collectives: each
 * rank's thread, once its chunks are durable in its own store, sends rank 0
 * exactly one report (its rows, or why it failed); rank 0's thread waits for
 * every report and writes all rows and the commit in one durable
 * transaction on its own catalog handle (the training thread keeps writing
 * traces on the other).  Rows are built by ckpt_report.c, as a synchronous
 * save builds them; only the chunks come from host copies taken at the
 * boundary instead of the live state.
 */
#include "ckpt/protocol/ckpt_async.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/protocol/ckpt_report_int.h"
#include "ckpt/session/ckpt_int.h"
#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

struct ckpt_async {
	ckpt_session *s;
	char cat_path[1100];
	ckpt_async_mode mode;
	int rank;
	/* the write in flight */
	pthread_t th;
	int running; /* a thread was started and not joined */
	pthread_mutex_t mu;
	int finished; /* set by the thread under mu */
	int64_t id, step, e_w;
	int replica;
	qe_pstate_item *items;
	void **copies;       /* [n]: each item's host copy, carved from pool */
	int n;
	/*
	 * The snapshot's host memory (pinned on cuda), kept from one checkpoint to
	 * the next: the state has the same size every time, and page-locked
	 * memory is both what makes the device copies fast and slow to allocate.
	 */
	void *pool;
	size_t pool_bytes;
	qe_backend *pool_b;
	qe_comm *comm; /* the rank's comm: the thread uses only its service lane */
	char topo[64], sched[96], recipe[160];
	double t_start;
	/* its outcome */
	int rc;
	char msg[CKPT_MSG];
	double ms;
	cat *bg_cat; /* rank 0: the thread's own catalog handle */
};

const char *ckpt_async_mode_name(ckpt_async_mode m)
{
	return m == CKPT_ASYNC_WAIT ? "wait" : m == CKPT_ASYNC_SKIP ? "skip" : "off";
}

static void free_copies(ckpt_async *a)
{
	free(a->copies); /* the copies themselves live in the pool */
	free(a->items);
	a->copies = NULL;
	a->items = NULL;
	a->n = 0;
}

int ckpt_async_open(ckpt_session *s, const char *catalog_path, ckpt_async_mode mode, ckpt_async **out)
{
	*out = NULL;
	if (!s || mode == CKPT_ASYNC_OFF)
		return qe_fail(QE_EINVAL, "async checkpoints: needs a session and a mode");
	if (!catalog_path)
		catalog_path = "";
	ckpt_async *a = qe_calloc(1, sizeof(*a));
	if (!a)
		return qe_fail(QE_ENOMEM, "async checkpoints: out of memory");
	if ((size_t)snprintf(a->cat_path, sizeof(a->cat_path), "%s", catalog_path) >= sizeof(a->cat_path)) {
		free(a);
		return qe_fail(QE_EINVAL, "catalog path too long: '%s'", catalog_path);
	}
	a->s = s;
	a->mode = mode;
	pthread_mutex_init(&a->mu, NULL);
	*out = a;
	return QE_OK;
}

/* ---- the background write ---------------------------------------------------- */

/*
 * Rank 0's thread: every other rank's report from the service lane (each
 * rank's thread sends exactly one per checkpoint, success or failure), then
 * the commit of all of them, or the abort.  Returns the outcome.
 */
static int collect_and_commit(ckpt_async *a, ckpt_report *own)
{
	int world = ckpt__comm_world(a->comm), rc = QE_OK;
	ckpt_report *reps = qe_calloc((size_t)world, sizeof(*reps));
	if (!reps)
		return qe_fail(QE_ENOMEM, "async checkpoint: out of memory");
	reps[0] = *own;
	memset(own, 0, sizeof(*own));
	ckpt_word all; /* the outcome: the first failure's code, every failing rank named */
	memset(&all, 0, sizeof(all));
	size_t mlen = 0;
	ckpt__word_add(&all, &mlen, 0, reps[0].rc, reps[0].msg);
	for (int q = 1; q < world; q++) {
		void *buf = NULL;
		size_t len = 0;
		char from[32];
		snprintf(from, sizeof(from), "rank %d", q);
		if ((rc = qe_pstate_svc_recv(a->comm, q, CKPT_SVC_ASYNC_REPORT, &buf, &len)))
			rc = qe_fail_ctx(rc, "async checkpoint at step %lld: waiting for the rows of rank %d", (long long)a->step, q);
		else
			rc = ckpt__report_decode(buf, len, from, &reps[q]);
		free(buf);
		if (rc)
			ckpt__report_fail(&reps[q], a->id, q, rc);
		else if (reps[q].id != a->id)
			ckpt__report_fail(&reps[q], a->id, q,
					  qe_fail(QE_ECOMM, "rank %d reported checkpoint %lld, expected %lld", q,
						  (long long)reps[q].id, (long long)a->id));
		ckpt__word_add(&all, &mlen, q, reps[q].rc, reps[q].msg);
		if (rc && a->comm && qe_pstate_comm_failed(a->comm))
			break; /* nobody else can be heard either */
	}
	if (!all.rc)
		rc = ckpt__commit_reports(a->s, a->bg_cat, a->id, reps, world);
	else
		rc = qe_fail((int)all.rc, "%s", all.msg);
	for (int q = 0; q < world; q++)
		ckpt__report_free(&reps[q]);
	free(reps);
	return rc;
}

/* QE_CKPT_ASYNC_TEST_DELAY_MS: the tests' way to keep a write in flight. */
static void test_delay(void)
{
	const char *v = ckpt_opt_text(ckpt_options_get()->async_test_delay_ms);
	long ms = v && v[0] ? atol(v) : 0;
	if (ms > 0)
		usleep((useconds_t)(ms * 1000));
}

static void *bg_main(void *arg)
{
	ckpt_async *a = arg;
	ckpt_session *s = a->s;
	store_chunk_list *lists = qe_calloc((size_t)a->n + 1, sizeof(*lists));
	ckpt_report rep;
	memset(&rep, 0, sizeof(rep));
	int rc = lists ? QE_OK : qe_fail(QE_ENOMEM, "checkpoint: out of memory");
	if (!rc && a->rank == 0 && !a->bg_cat)
		rc = cat_open(a->cat_path, 0, &a->bg_cat);
	for (int i = 0; i < a->n && !rc; i++) {
		qe_pstate_item *it = &a->items[i];
		rc = store_put_tensor(s->st, a->copies[i], it->bytes, s->chunk_bytes, &lists[i]);
		if (rc)
			qe_fail_ctx(rc, "checkpoint: storing '%s' of stage %d", it->name, it->stage);
		else if (!(rc = ckpt__repl_send(s, a->comm, a->id, a->copies[i], &lists[i])))
			ckpt__maybe_kill(s, "chunk", a->rank);
	}
	if (!rc) {
		ckpt__maybe_kill(s, "sync", a->rank);
		if ((rc = store_sync(s->st)))
			qe_fail_ctx(rc, "checkpoint: flushing the store");
		else
			ckpt__maybe_kill(s, "synced", a->rank);
	}
	if (!rc)
		test_delay();
	/* Replicas: the same exchange as a synchronous save, between the ranks' background threads. */
	ckpt_copy_store *copies = NULL;
	int ncopies = 0;
	if (s->repl)
		rc = ckpt__repl_finish(s, a->comm, a->id, rc, &copies, &ncopies);
	if (!rc)
		rc = ckpt__report_build(s, a->id, a->rank, a->replica, a->items, a->n, lists, &rep);
	if (rc) {
		free(copies);
		ckpt__report_fail(&rep, a->id, a->rank, rc);
	} else {
		rep.copies = copies;
		rep.ncopies = ncopies;
	}
	if (a->rank == 0) {
		rc = collect_and_commit(a, &rep);
		if (rc && a->bg_cat) {
			char reason[CKPT_MSG + 64];
			snprintf(reason, sizeof(reason), "background save failed: %s", qe_last_error());
			int arc = cat_ckpt_abort(a->bg_cat, a->id, reason);
			if (arc)
				qe_log(QE_LOG_WARN, "checkpoint %lld: could not mark it aborted (%s)", (long long)a->id,
				       qe_last_error());
			qe_fail(rc, "%s", reason + strlen("background save failed: "));
		}
	} else {
		/* Exactly one report per checkpoint, success or not: rank 0's thread waits for it. */
		void *buf = NULL;
		size_t len = 0;
		char why[CKPT_MSG];
		snprintf(why, sizeof(why), "%s", rc ? qe_last_error() : "");
		int erc = ckpt__report_encode(&rep, &buf, &len);
		if (!erc)
			erc = qe_pstate_svc_send(a->comm, 0, CKPT_SVC_ASYNC_REPORT, buf, len);
		free(buf);
		if (!erc)
			ckpt__maybe_kill(s, "rows", a->rank);
		if (!rc && erc)
			rc = erc;
		else if (rc)
			qe_fail(rc, "%s", why);
	}
	char msg[CKPT_MSG];
	snprintf(msg, sizeof(msg), "%s", rc ? qe_last_error() : "");
	ckpt__report_free(&rep);
	for (int i = 0; lists && i < a->n; i++)
		store_chunk_list_free(&lists[i]);
	free(lists);
	free_copies(a);
	pthread_mutex_lock(&a->mu);
	a->rc = rc;
	snprintf(a->msg, sizeof(a->msg), "%s", msg);
	a->ms = ckpt__now_ms() - a->t_start;
	a->finished = 1;
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* Join the thread (if any).  Returns its outcome, which done_step and done_ms describe. */
static int join(ckpt_async *a, int64_t *done_step, double *done_ms)
{
	if (!a->running)
		return QE_OK;
	pthread_join(a->th, NULL);
	a->running = 0;
	if (done_step)
		*done_step = a->step;
	if (done_ms)
		*done_ms = a->ms;
	if (a->rc)
		return qe_fail(a->rc, "background write of the checkpoint at step %lld failed: %s", (long long)a->step,
			       a->msg);
	return QE_OK;
}

static int finished(ckpt_async *a)
{
	pthread_mutex_lock(&a->mu);
	int f = a->finished;
	pthread_mutex_unlock(&a->mu);
	return f;
}

/* ---- the collective part ------------------------------------------------------- */

/* The pool holds at least the snapshot of these items (each 256-byte aligned). */
static int pool_reserve(ckpt_async *a, qe_backend *b, const qe_pstate_item *items, int n)
{
	size_t need = 0;
	for (int i = 0; i < n; i++)
		need += (items[i].bytes + 255) / 256 * 256;
	if (need <= a->pool_bytes && b == a->pool_b)
		return QE_OK;
	if (a->pool)
		qe_pstate_host_free(a->pool_b, a->pool);
	a->pool = NULL;
	a->pool_bytes = 0;
	int rc = qe_pstate_host_alloc(b, need, &a->pool);
	if (rc)
		return qe_fail_ctx(rc, "async checkpoint: no host memory for the snapshot (%zu bytes)", need);
	a->pool_bytes = need;
	a->pool_b = b;
	return QE_OK;
}

int ckpt_async_prepare(ckpt_async *a, qe_rank *r)
{
	qe_pstate_item *items = NULL;
	int n = 0, rc;
	if (!a || !r)
		return qe_fail(QE_EINVAL, "ckpt_async_prepare: NULL argument");
	if (a->running)
		return QE_OK; /* the pool is in use; the next snapshot sizes it */
	if ((rc = qe_rank_pstate(r, &items, &n)))
		return rc;
	int keep = 0;
	for (int i = 0; i < n; i++)
		if (qe_pstate_replica(r) == 0 || !ckpt__shared_by_replicas(&items[i]))
			items[keep++] = items[i];
	rc = pool_reserve(a, qe_pstate_backend(r), items, keep);
	free(items);
	return rc;
}

/* Copy this rank's items into host memory. */
static int snapshot(ckpt_async *a, qe_rank *r, uint64_t *bytes, uint64_t *rt_bytes)
{
	qe_pstate_item *items = NULL;
	int n = 0, rc;
	*bytes = *rt_bytes = 0;
	if ((rc = qe_rank_pstate(r, &items, &n)))
		return rc;
	int keep = 0;
	for (int i = 0; i < n; i++)
		if (a->replica == 0 || !ckpt__shared_by_replicas(&items[i]))
			items[keep++] = items[i];
	a->items = items;
	a->n = keep;
	if (!(a->copies = qe_calloc((size_t)keep + 1, sizeof(void *))))
		return qe_fail(QE_ENOMEM, "async checkpoint: out of memory");
	qe_backend *b = qe_pstate_backend(r);
	if ((rc = pool_reserve(a, b, items, keep)))
		return rc;
	size_t off = 0;
	for (int i = 0; i < keep; i++) {
		qe_pstate_item *it = &items[i];
		a->copies[i] = (char *)a->pool + off;
		off += (it->bytes + 255) / 256 * 256;
		if (it->on_device && it->bytes) {
			if ((rc = qe_pstate_read(r, it, a->copies[i])))
				return qe_fail_ctx(rc, "async checkpoint: copying '%s' of stage %d to the host", it->name,
						   it->stage);
		} else if (it->bytes) {
			memcpy(a->copies[i], it->data, it->bytes);
		}
		*bytes += it->bytes;
		if (ckpt__is_runtime_state(it->kind))
			*rt_bytes += it->bytes;
	}
	return QE_OK;
}

int ckpt_async_save(ckpt_async *a, qe_rank *r, ckpt_async_result *out)
{
	double t0 = ckpt__now_ms();
	ckpt_async_result res;
	memset(&res, 0, sizeof(res));
	res.id = -1;
	res.done_step = -1;
	res.step = qe_pstate_steps_done(r);
	res.e_w = qe_pstate_e_w(r);
	if (out)
		*out = res;
	ckpt_session *s = a->s;
	if (s->pid != getpid())
		return qe_fail(QE_EINVAL, "checkpoint session of process %d used in process %d", (int)s->pid, (int)getpid());
	a->rank = qe_pstate_rank(r);
	int rank = a->rank, rc;

	/* 1. The write in flight: wait for it, or see whether it is done. */
	ckpt_word mine, all;
	memset(&mine, 0, sizeof(mine));
	if (a->running && (a->mode == CKPT_ASYNC_WAIT || finished(a))) {
		double tw = ckpt__now_ms();
		rc = join(a, &res.done_step, &res.done_ms);
		res.wait_ms = ckpt__now_ms() - tw;
		if (rc)
			ckpt__word_set(&mine, rc, NULL);
	}
	mine.busy = a->running;
	/* 2. The gate, on every rank. */
	if (!mine.rc && !mine.busy) {
		rc = qe_pstate_quiescent(r);
		if (rc)
			ckpt__word_set(&mine, rc, NULL);
		ckpt__maybe_kill(s, "gate", rank);
	}
	if ((rc = ckpt__agree(r, "async checkpoint", &mine, &all)))
		return rc;
	/* The memory tier (ckpt_memtier.c): with no write in flight anywhere and no failure reported, the
	 * last write committed, so what it replaced in memory goes; after a failure memory keeps everything. */
	if (all.rc)
		ckpt__mem_forget(s);
	else if (!all.busy && s->mem_id >= 0)
		ckpt__mem_committed(s, s->mem_id);
	if (all.rc) {
		if (out)
			*out = res;
		return qe_fail((int)all.rc, "checkpoint at step %lld refused, nothing written: %s", (long long)res.step,
			       all.msg);
	}
	if (all.busy) {
		res.skipped = 1;
		res.stall_ms = ckpt__now_ms() - t0;
		if (out)
			*out = res;
		return QE_OK;
	}

	/* Replica targets, agreed once per session on the training thread (collective). */
	if ((rc = ckpt__repl_setup(s, r)))
		return qe_fail_ctx(rc, "checkpoint at step %lld refused, nothing written", (long long)res.step);

	/* 3. Rank 0 opens the attempt. */
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	if (rank == 0) {
		qe_pstate_describe(r, a->topo, sizeof(a->topo), a->sched, sizeof(a->sched), a->recipe, sizeof(a->recipe));
		rc = s->cat ? cat_ckpt_begin(s->cat, s->run_id, res.step, res.e_w, a->topo, a->sched, a->recipe, &w.id)
			    : qe_fail(QE_EINVAL, "async checkpoint: rank 0 has no catalog open");
		ckpt__word_set(&w, rc, NULL);
		if (!rc)
			ckpt__maybe_kill(s, "begin", rank);
	}
	if ((rc = ckpt__bcast(r, "checkpoint", &w))) {
		if (rank == 0 && w.id > 0)
			cat_ckpt_abort(s->cat, w.id, "async save failed: a rank did not hear the checkpoint id");
		return rc;
	}
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld: rank 0 could not start it: %s", (long long)res.step,
			       w.msg);
	a->id = res.id = w.id;
	a->step = res.step;
	a->e_w = res.e_w;
	a->replica = qe_pstate_replica(r);

	/* 4. Every rank: the host snapshot. */
	double ts = ckpt__now_ms();
	memset(&mine, 0, sizeof(mine));
	rc = ckpt__store(s, rank);
	if (!rc)
		rc = snapshot(a, r, &mine.bytes, &mine.rt_bytes);
	if (rc)
		ckpt__word_set(&mine, rc, NULL);
	res.snapshot_ms = ckpt__now_ms() - ts;
	if ((rc = ckpt__agree(r, "async checkpoint", &mine, &all))) {
		free_copies(a);
		return rc;
	}
	if (all.rc) {
		free_copies(a);
		if (rank == 0) {
			char reason[CKPT_MSG + 32];
			snprintf(reason, sizeof(reason), "async save failed: %s", all.msg);
			cat_ckpt_abort(s->cat, a->id, reason);
		}
		return qe_fail((int)all.rc, "checkpoint at step %lld (id %lld) aborted: %s", (long long)res.step,
			       (long long)a->id, all.msg);
	}
	a->comm = qe_pstate_comm(r);
	res.bytes = all.bytes;

	/* 5. The rest in the background. */
	a->finished = 0;
	a->rc = 0;
	a->msg[0] = 0;
	a->t_start = ts;
	if ((rc = pthread_create(&a->th, NULL, bg_main, a))) {
		free_copies(a);
		/* The other ranks' threads run; this rank's rows never come, so rank 0 times out or this abort stops it. */
		char reason[128];
		snprintf(reason, sizeof(reason), "async save failed on rank %d: cannot start a thread", rank);
		cat_ckpt_abort(s->cat, a->id, reason);
		return qe_fail(QE_ENOMEM, "async checkpoint: cannot start the background thread: %s", strerror(rc));
	}
	a->running = 1;
	res.stall_ms = ckpt__now_ms() - t0;
	if (out)
		*out = res;
	return QE_OK;
}

int ckpt_async_drain(ckpt_async *a, ckpt_async_result *out)
{
	if (out) {
		memset(out, 0, sizeof(*out));
		out->id = -1;
		out->done_step = -1;
	}
	if (!a)
		return QE_OK;
	int64_t step = -1;
	double ms = 0;
	int rc = join(a, &step, &ms);
	if (out) {
		out->done_step = step;
		out->done_ms = ms;
	}
	return rc;
}

int ckpt_async_finish(ckpt_async *a, qe_rank *r, ckpt_async_result *out)
{
	int rc = ckpt_async_drain(a, out);
	if (!a)
		return rc;
	ckpt_word mine, all;
	memset(&mine, 0, sizeof(mine));
	if (rc)
		ckpt__word_set(&mine, rc, NULL);
	char first[1024];
	snprintf(first, sizeof(first), "%s", rc ? qe_last_error() : "");
	int arc = ckpt__agree(r, "async checkpoint", &mine, &all);
	if (rc) {
		qe_fail(rc, "%s", first); /* this rank's own failure stays the one reported */
		if (!arc)
			ckpt__mem_forget(a->s);
		return rc;
	}
	if (arc)
		return arc;
	if (all.rc)
		ckpt__mem_forget(a->s);
	else if (a->s->mem_id >= 0)
		ckpt__mem_committed(a->s, a->s->mem_id);
	return QE_OK;
}

void ckpt_async_close(ckpt_async *a)
{
	if (!a)
		return;
	if (ckpt_async_drain(a, NULL))
		qe_log(QE_LOG_WARN, "%s", qe_last_error());
	if (a->pool)
		qe_pstate_host_free(a->pool_b, a->pool);
	cat_close(a->bg_cat);
	pthread_mutex_destroy(&a->mu);
	free(a);
}
