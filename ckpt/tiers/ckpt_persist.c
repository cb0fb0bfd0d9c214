/*
 * ckpt_persist.c - the background push of every K2-th committed checkpoint
 * to S3 (`--ckpt-persist-every`; protocol and guarantees in ckpt_persist.h).
 *
 * Why the pieces are where they are: the choice of what to push is rank 0's
 * alone, read from its catalog, so a push only ever starts for a checkpoint
 * that is committed there; the broadcast of that choice is the only thing
 * training waits for.  Each rank uploads from its own store because no other
 * process can read it (stores are on the ranks' own disks).  The manifest is
 * written by rank 0 after every rank said its uploads are done - the same
 * ordering as `qeffect push`, so a crash or a failure at any moment leaves
 * either a complete remote checkpoint or none.  The threads talk only on
 * the comm's service lane, and every rank's thread answers rank 0 exactly
 * once per push, so a push that failed on one rank never leaves another
 * waiting for a message that will not come.
 *
 * A push may last far longer than the comm's time-out (tens of GB to a slow
 * S3), and every comm wait is bounded by it.  So the time-out bounds
 * silence, not the push: while its thread runs, a rank sends rank 0 a
 * progress message (the bytes it has done) at least every quarter of the
 * time-out, on the same tag as its report, and rank 0 in the final wait
 * does the same for the other ranks, which wait for it there.  A process
 * that dies still closes its connections (the comm fails at once), and one
 * that hangs or loses its host falls silent and times out as before.
 *
 * The push itself is ckpt_persist_push.c; the state both files share is
 * ckpt_persist_int.h.
 */
#include "ckpt/tiers/ckpt_persist_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/remote/ckpt_remote_int.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* Rank 0 to the others in the final wait (CKPT_SVC_PERSIST_WAIT): its push still runs, or finished. */
typedef struct wait_msg {
	int64_t finished;
	int64_t step; /* the push's (every rank has it from the point's broadcast) */
} wait_msg;

int ckpt_persist_open(ckpt_session *s, const ckpt_persist_opts *o, ckpt_persist **out)
{
	*out = NULL;
	char bucket[128], prefix[1024];
	if (!s || !o || !o->url || o->every < 1)
		return qe_fail(QE_EINVAL, "persist: needs a session, a URL and a period >= 1");
	int rc = store_remote_parse_url(o->url, bucket, sizeof(bucket), prefix, sizeof(prefix));
	if (rc)
		return rc;
	if (o->keep < 0)
		return qe_fail(QE_EINVAL, "persist: remote retention keeps at least 1 checkpoint (0: all), got %d", o->keep);
	ckpt_persist *p = qe_calloc(1, sizeof(*p));
	if (!p)
		return qe_fail(QE_ENOMEM, "persist: out of memory");
	if ((size_t)snprintf(p->url, sizeof(p->url), "%s", o->url) >= sizeof(p->url) ||
	    (o->endpoint && (size_t)snprintf(p->endpoint, sizeof(p->endpoint), "%s", o->endpoint) >= sizeof(p->endpoint)) ||
	    (size_t)snprintf(p->cat_path, sizeof(p->cat_path), "%s", o->catalog_path ? o->catalog_path : "") >=
		    sizeof(p->cat_path)) {
		free(p);
		return qe_fail(QE_EINVAL, "persist: URL, endpoint or catalog path too long");
	}
	p->has_endpoint = o->endpoint && o->endpoint[0];
	p->s = s;
	p->every = o->every;
	p->keep = o->keep;
	p->grace_s = o->grace_s;
	p->min_step = o->min_step;
	p->step = -1;
	p->failed_step = -1;
	p->pushed_upto = -1;
	p->reported = 1;
	pthread_mutex_init(&p->mu, NULL);
	/* The endpoint and the credentials, checked now: a bad one fails the run before step 1, where it
	 * used to fail every background push and leave a run that exited 0. */
	store_remote *rem = NULL;
	if ((rc = ckpt__persist_remote(p, &rem))) {
		pthread_mutex_destroy(&p->mu);
		free(p);
		return qe_fail_ctx(rc, "the remote %s, checked before training", o->url);
	}
	store_remote_close(rem);
	*out = p;
	return QE_OK;
}
/* ---- the collective part ------------------------------------------------------ */

int ckpt_persist_busy(ckpt_persist *p)
{
	if (!p || !p->running)
		return 0;
	pthread_mutex_lock(&p->mu);
	int f = p->finished;
	pthread_mutex_unlock(&p->mu);
	return !f;
}

int64_t ckpt_persist_inflight(ckpt_persist *p)
{
	return p && p->running ? p->step : -1;
}

/* A step whose push failed twice in this job is left for `qeffect push`. */
static int given_up(const ckpt_persist *p, int64_t step)
{
	for (int i = 0; i < p->ngiven_up; i++)
		if (p->given_up[i] == step)
			return 1;
	return 0;
}

static void join(ckpt_persist *p)
{
	if (!p->running)
		return;
	pthread_join(p->th, NULL);
	p->running = 0;
	p->reported = 0;
	if (p->rank == 0 && !p->rc && p->step > p->pushed_upto)
		p->pushed_upto = p->step;
	if (p->rank != 0 || !p->rc)
		return;
	if (p->failed_step == p->step) {
		if (p->ngiven_up < (int)(sizeof(p->given_up) / sizeof(p->given_up[0])))
			p->given_up[p->ngiven_up++] = p->step;
		qe_log(QE_LOG_WARN, "persist: the push of step %lld failed twice; it is left for 'qeffect push'",
		       (long long)p->step);
	}
	p->failed_step = p->step;
}

static void take_event(ckpt_persist *p, ckpt_persist_event *ev)
{
	if (p->reported)
		return;
	p->reported = 1;
	ev->done = 1;
	ev->done_step = p->step;
	ev->done_rc = p->rc;
	snprintf(ev->done_msg, sizeof(ev->done_msg), "%s", p->msg);
	snprintf(ev->done_url, sizeof(ev->done_url), "%s", p->rc ? p->url : p->done_url);
	ev->chunks = p->chunks;
	ev->chunks_uploaded = p->uploaded;
	ev->bytes_uploaded = p->bytes_up;
	ev->remote_dropped = p->remote_dropped;
	ev->done_ms = p->ms;
}

/*
 * Rank 0: the oldest committed checkpoint of this job due for the remote and
 * not there yet, so that pushes that fall behind (or failed once) catch up
 * in order; retention keeps it meanwhile (ckpt_persist_due).
 */
static int choose(ckpt_persist *p, ckpt_word *w)
{
	cat_ckpt_rows all = { 0 };
	int rc = cat_ckpt_list(p->s->cat, p->s->run_id, &all);
	if (rc)
		return rc;
	for (size_t i = 0; i < all.n && !w->id; i++) {
		const cat_ckpt *c = &all.rows[i];
		/* older than what this job pushed: the remote retention may have dropped it since */
		if (c->status != CAT_COMMITTED || c->step <= p->min_step || c->step <= p->pushed_upto ||
		    c->step % p->every || given_up(p, c->step) ||
		    (p->running && c->step == p->step))
			continue;
		cat_remote_rows rem = { 0 };
		char key[256], url[1400];
		int there = 0;
		if ((rc = cat_remote_list(p->s->cat, c->id, &rem)))
			break;
		if (!ckpt__manifest_key(c->run_id, c->step, key, sizeof(key))) {
			ckpt__remote_object_url(p->url, key, url, sizeof(url));
			for (size_t k = 0; k < rem.n; k++)
				there |= strcmp(rem.rows[k].url, url) == 0;
		}
		cat_remote_rows_free(&rem);
		if (!there) {
			w->id = c->id;
			w->step = c->step;
		}
	}
	cat_ckpt_rows_free(&all);
	return rc;
}

int64_t ckpt_persist_due(ckpt_persist *p)
{
	if (!p || !p->s->cat)
		return -1;
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	if (choose(p, &w))
		return -1;
	return w.id ? w.step : -1;
}

static void bind_rank(ckpt_persist *p, qe_rank *r)
{
	p->rank = qe_pstate_rank(r);
	p->comm = qe_pstate_comm(r);
	p->world = ckpt__world(r);
}

/* final: the end of training, where a push that just failed is not followed by another. */
static int point(ckpt_persist *p, qe_rank *r, ckpt_persist_event *ev, int final)
{
	memset(ev, 0, sizeof(*ev));
	ev->step = ev->done_step = -1;
	bind_rank(p, r);
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	if (p->rank == 0) {
		if (ckpt_persist_busy(p)) {
			w.busy = 1;
		} else {
			join(p);
			int just_failed = !p->reported && p->rc;
			if (!(final && just_failed) && choose(p, &w)) {
				qe_log(QE_LOG_WARN, "persist: cannot read the catalog to choose a checkpoint: %s", qe_last_error());
				memset(&w, 0, sizeof(w));
			}
		}
		take_event(p, ev);
	}
	/* Rank 0's word: id (0: nothing to push), step, busy (its push still runs). */
	int rc = ckpt__bcast(r, "persist", &w);
	if (rc)
		return rc;
	ev->busy = (int)w.busy;
	if (w.busy || !w.id)
		return QE_OK;
	/* Rank 0's thread finishes last (it waits for every report): the others' are done or about to be. */
	join(p);
	if (p->rank != 0)
		p->reported = 1;
	p->id = w.id;
	p->step = w.step;
	p->finished = 0;
	p->rc = 0;
	p->msg[0] = p->done_url[0] = 0;
	p->chunks = p->uploaded = p->bytes_up = 0;
	p->own_bytes = p->own_chunks = p->heard_bytes = 0;
	p->remote_dropped = 0;
	memset(&p->prog, 0, sizeof(p->prog));
	p->prog.step = w.step;
	p->prog.ranks_total = p->world;
	p->t0 = p->last_log = ckpt__now_ms();
	rc = pthread_create(&p->th, NULL, ckpt__persist_thread, p);
	if (rc) {
		/* A thread that never started never answers: rank 0's wait (or this rank's, for the plan) ends
		 * at the comm's time-out, which fails the comm and so the job - as a rank out of threads would. */
		qe_log(QE_LOG_WARN, "persist: rank %d cannot start the push thread of step %lld: %s", p->rank,
		       (long long)w.step, strerror(rc));
		return QE_OK;
	}
	p->running = 1;
	ev->started = 1;
	ev->step = w.step;
	return QE_OK;
}

int ckpt_persist_point(ckpt_persist *p, qe_rank *r, ckpt_persist_event *ev)
{
	ckpt_persist_event dummy;
	return point(p, r, ev ? ev : &dummy, 0);
}

/* Rank 0 in the final wait: tell every other rank that its push still runs (finished = 0) or is over. */
static int tell_ranks(ckpt_persist *p, int finished)
{
	wait_msg m = { .finished = finished, .step = p->step };
	for (int q = 1; q < p->world; q++) {
		int rc = qe_pstate_svc_send(p->comm, q, CKPT_SVC_PERSIST_WAIT, &m, sizeof(m));
		if (rc)
			return qe_fail_ctx(rc, "persist: the final wait for the push of step %lld", (long long)p->step);
	}
	return QE_OK;
}

/* Another rank in the final wait: rank 0's word until its push is over, each word proof that it lives. */
static int hear_rank0(ckpt_persist *p)
{
	for (;;) {
		void *buf = NULL;
		size_t len = 0;
		wait_msg m;
		int rc = qe_pstate_svc_recv(p->comm, 0, CKPT_SVC_PERSIST_WAIT, &buf, &len);
		if (rc)
			return qe_fail_ctx(rc, "persist: the final wait for rank 0's push");
		if (len != sizeof(m)) {
			free(buf);
			return qe_fail(QE_ECOMM, "persist: the final wait: rank 0 sent %zu bytes, expected %zu", len,
				       sizeof(m));
		}
		memcpy(&m, buf, sizeof(m));
		free(buf);
		if (m.step != p->step)
			return qe_fail(QE_ECOMM,
				       "persist: the final wait: rank 0 waits for the push of step %lld, this rank for %lld",
				       (long long)m.step, (long long)p->step);
		if (m.finished)
			return QE_OK;
	}
}

/*
 * The final wait for the push in flight: rank 0 tells cb about once a
 * second, and every other rank - which waits for it in the next point -
 * every beat_ms that it still waits; this rank's own thread needs no word.
 */
static int wait_push(ckpt_persist *p, ckpt_persist_progress_cb cb, void *ctx)
{
	int tell = p->rank == 0 && p->world > 1;
	int ms = tell ? ckpt__persist_beat_ms(p) : 0;
	double told = ckpt__now_ms();
	for (int i = 0; p->running && ckpt_persist_busy(p); i++) {
		if (cb && p->rank == 0 && i % 20 == 0 && i) {
			ckpt_persist_progress pr;
			pthread_mutex_lock(&p->mu);
			pr = p->prog;
			pthread_mutex_unlock(&p->mu);
			if (!pr.phase)
				pr.phase = "starting";
			cb(ctx, &pr);
		}
		if (tell && ckpt__now_ms() - told >= ms) {
			int rc = tell_ranks(p, 0);
			if (rc)
				return rc;
			told = ckpt__now_ms();
		}
		usleep(50000);
	}
	if (p->world == 1)
		return QE_OK;
	return p->rank == 0 ? tell_ranks(p, 1) : hear_rank0(p);
}

int ckpt_persist_finish(ckpt_persist *p, qe_rank *r, ckpt_persist_progress_cb cb, void *ctx,
			ckpt_persist_event_cb on_event, void *ev_ctx)
{
	bind_rank(p, r);
	for (;;) {
		ckpt_persist_event ev;
		int rc = wait_push(p, cb, ctx);
		if (rc)
			return rc;
		rc = point(p, r, &ev, 1);
		if (rc)
			return rc;
		if (on_event)
			on_event(ev_ctx, &ev);
		if (!ev.started)
			break;
	}
	return QE_OK;
}

void ckpt_persist_close(ckpt_persist *p)
{
	if (!p)
		return;
	join(p);
	cat_close(p->bg_cat);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
