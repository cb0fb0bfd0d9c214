/*
 * ckpt_persist_push.c - the push of one committed checkpoint to S3, on each
 * rank's background thread (ckpt_persist.c decides when, and what).
 *
 * Rank 0 plans which chunks each rank uploads from its own store (no other
 * process can read it), sends every rank its plan, uploads its own, hears
 * every rank's report and writes the manifest last, so a failure at any
 * moment leaves a complete remote checkpoint or none.  While a rank works
 * it sends rank 0 its progress at least every quarter of the comm's
 * time-out, on its report's tag, so the time-out bounds silence, not the
 * push (see ckpt_persist.c).
 */
#include "ckpt/tiers/ckpt_persist_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/remote/ckpt_remote_int.h"
#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define PLAN_MSG 512
/* Rank 0 logs a push's progress at most this often. */
#define PROGRESS_LOG_MS 30000.0

/* The head of a plan (rank 0 to rank q), followed by n x (16-byte hash, 8-byte size). */
typedef struct plan_head {
	int64_t id;
	int64_t step;
	int64_t rc; /* non-zero: rank 0 could not plan; nothing to upload, answer at once */
	uint64_t n;
	char msg[PLAN_MSG];
} plan_head;

/*
 * What a rank's thread sends rank 0 on CKPT_SVC_PERSIST_REPORT: progress
 * messages while it works, then exactly one report.  Both start with kind.
 */
enum { REPORT_PROGRESS = 1, REPORT_DONE = 2 };

typedef struct progress_msg {
	int64_t kind; /* REPORT_PROGRESS */
	int64_t id;
	uint64_t bytes, chunks; /* of its plan, done so far (uploaded or already there) */
} progress_msg;

/* A rank's answer to its plan. */
typedef struct done_msg {
	int64_t kind; /* REPORT_DONE */
	int64_t id;
	int64_t rc;
	uint64_t uploaded, present, bytes;
	char msg[CKPT_MSG];
} done_msg;

static void opts_of(const ckpt_persist *p, store_remote_opts *ro)
{
	memset(ro, 0, sizeof(*ro));
	ro->retries = -1;
	ro->endpoint = p->has_endpoint ? p->endpoint : NULL;
}
/* ---- small message helpers ----------------------------------------------------- */

static void set_progress(ckpt_persist *p, const char *phase, uint64_t total, uint64_t done, int ranks_done)
{
	pthread_mutex_lock(&p->mu);
	p->prog.phase = phase;
	p->prog.chunks_total = total;
	p->prog.chunks_done = done;
	p->prog.ranks_done = ranks_done;
	p->prog.bytes_done = p->own_bytes + p->heard_bytes;
	pthread_mutex_unlock(&p->mu);
}

/* Rank 0's thread: the push's progress in the log, now and then (a push may take hours). */
static void progress_log(ckpt_persist *p)
{
	double now = ckpt__now_ms();
	if (now - p->last_log < PROGRESS_LOG_MS)
		return;
	p->last_log = now;
	pthread_mutex_lock(&p->mu);
	ckpt_persist_progress pr = p->prog;
	pthread_mutex_unlock(&p->mu);
	qe_log(QE_LOG_INFO, "persist: step %lld: %llu of %llu bytes done, %d of %d ranks done (%s, %.0f s)",
	       (long long)pr.step, (unsigned long long)pr.bytes_done, (unsigned long long)pr.bytes_total, pr.ranks_done,
	       pr.ranks_total, pr.phase ? pr.phase : "starting", (now - p->t0) / 1000.0);
}

/* A quarter of the comm's time-out: the longest a waiting rank goes without word from a live one. */
int ckpt__persist_beat_ms(const ckpt_persist *p)
{
	int t = qe_pstate_comm_timeout_ms(p->comm);
	return t / 4 > 0 ? t / 4 : 1;
}

/* QE_CKPT_PERSIST_SLOW_MS=N[:RANK] (see ckpt_persist.h): this rank's sleep before each chunk, 0 when none. */
static int slow_ms(int rank)
{
	const char *v = ckpt_opt_text(ckpt_options_get()->persist_slow_ms);
	char *end = NULL;
	long who = -1;
	if (!v || !v[0])
		return 0;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (!errno && end != v && *end == ':') {
		const char *r = end + 1;
		who = strtol(r, &end, 10);
		if (end == r)
			who = -2;
	}
	if (errno || end == v || *end || n < 0 || n > 600000 || who < -1) {
		qe_log(QE_LOG_WARN,
		       "persist: test hook QE_CKPT_PERSIST_SLOW_MS='%s' is not N[:RANK] (N in 0..600000 ms): ignored", v);
		return 0;
	}
	return who < 0 || who == rank ? (int)n : 0;
}

/*
 * The progress messages of a rank other than 0: a thread that sends rank 0
 * what this rank's push thread has done, every beat_ms, until stopped.  It
 * is stopped before the report goes out, so the report is the last message
 * of the push on its tag.
 */
typedef struct beat {
	ckpt_persist *p;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	int stop, ms, running;
} beat;

static void *beat_main(void *arg)
{
	beat *b = arg;
	ckpt_persist *p = b->p;
	pthread_mutex_lock(&b->mu);
	while (!b->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += b->ms / 1000;
		ts.tv_nsec += (long)(b->ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		while (!b->stop && pthread_cond_timedwait(&b->cv, &b->mu, &ts) != ETIMEDOUT)
			;
		if (b->stop)
			break;
		pthread_mutex_unlock(&b->mu);
		progress_msg m = { .kind = REPORT_PROGRESS, .id = p->id };
		pthread_mutex_lock(&p->mu);
		m.bytes = p->own_bytes;
		m.chunks = p->own_chunks;
		pthread_mutex_unlock(&p->mu);
		int rc = qe_pstate_svc_send(p->comm, 0, CKPT_SVC_PERSIST_REPORT, &m, sizeof(m));
		pthread_mutex_lock(&b->mu);
		if (rc)
			break; /* the comm failed: the push thread's report fails the same way */
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

static void beat_start(beat *b, ckpt_persist *p)
{
	memset(b, 0, sizeof(*b));
	b->p = p;
	b->ms = ckpt__persist_beat_ms(p);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&b->mu, NULL);
	int rc = pthread_create(&b->th, NULL, beat_main, b);
	if (rc)
		qe_log(QE_LOG_WARN,
		       "persist: rank %d cannot start its progress thread (%s): a push longer than QE_COMM_TIMEOUT_MS "
		       "will fail",
		       p->rank, strerror(rc));
	b->running = !rc;
}

static void beat_stop(beat *b)
{
	if (b->running) {
		pthread_mutex_lock(&b->mu);
		b->stop = 1;
		pthread_cond_signal(&b->cv);
		pthread_mutex_unlock(&b->mu);
		pthread_join(b->th, NULL);
	}
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
}

/*
 * Upload chunks[0..n) (each 24 bytes: hash, size little-endian) from this
 * rank's own store.  OUT counters.
 */
static int read_own_store(void *ctx, const store_hash *h, void *dst, size_t cap, uint64_t *size)
{
	return store_get_chunk((store *)ctx, h, dst, cap, size);
}

static int upload(ckpt_persist *p, store_remote *rem, const unsigned char *chunks, uint64_t n, uint64_t *uploaded,
		  uint64_t *present, uint64_t *bytes)
{
	ckpt_session *s = p->s;
	ckpt__uploader u = { .rem = rem };
	char where[320];
	int rc = QE_OK;
	if (!s->st && n)
		return qe_fail(QE_EINVAL, "persist: rank %d has no store open", p->rank);
	snprintf(where, sizeof(where), "the store of rank %d on host '%s'", p->rank, s->host);
	int slow = slow_ms(p->rank);
	for (uint64_t i = 0; i < n && !rc; i++) {
		const unsigned char *c = chunks + 24 * i;
		uint64_t size = ckpt__get64(c + 16);
		/* a failed comm fails the push anyway: stop uploading instead of finishing for nothing */
		if (p->comm && qe_pstate_comm_failed(p->comm)) {
			char why[768];
			rc = qe_fail(QE_ECOMM, "persist: rank %d on host '%s' stopped its uploads: %s", p->rank,
				     s->host, qe_pstate_comm_failure(p->comm, why, sizeof(why)));
			break;
		}
		if (slow)
			usleep((useconds_t)slow * 1000);
		rc = ckpt__upload_chunk(&u, c, size, read_own_store, s->st, where);
		pthread_mutex_lock(&p->mu);
		p->own_bytes += size;
		p->own_chunks++;
		pthread_mutex_unlock(&p->mu);
		if (p->rank == 0) {
			set_progress(p, "uploading", n, i + 1, 0);
			progress_log(p);
		}
	}
	*uploaded += u.uploaded;
	*present += u.present;
	*bytes += u.bytes;
	ckpt__uploader_release(&u);
	return rc;
}

int ckpt__persist_remote(ckpt_persist *p, store_remote **rem)
{
	store_remote_opts ro;
	opts_of(p, &ro);
	int rc = store_remote_open(p->url, &ro, rem);
	if (!rc)
		rc = store_remote_check(*rem);
	return rc;
}

/* ---- rank 0's plan -------------------------------------------------------------- */

typedef struct rank_chunks {
	unsigned char *v; /* n x 24 bytes */
	uint64_t n, cap;
	uint64_t bytes; /* the sizes of the n chunks */
	uint64_t heard; /* the bytes its progress messages said are done */
	const char *host; /* the host of its store (points into the plan's store rows); NULL: unknown */
} rank_chunks;

static int chunk_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 16);
}

static int rank_chunks_add(rank_chunks *rc, const cat_chunk *c)
{
	if (rc->n == rc->cap) {
		uint64_t cap = rc->cap ? 2 * rc->cap : 64;
		unsigned char *nv = qe_realloc(rc->v, cap * 24);
		if (!nv)
			return qe_fail(QE_ENOMEM, "persist: out of memory");
		rc->v = nv;
		rc->cap = cap;
	}
	unsigned char *e = rc->v + 24 * rc->n++;
	memcpy(e, c->hash, 16);
	ckpt__put64(e + 16, c->size);
	return QE_OK;
}

/* Sort and drop duplicates (identical chunks are stored once per store). */
static void rank_chunks_unique(rank_chunks *rc)
{
	if (!rc->n)
		return;
	qsort(rc->v, rc->n, 24, chunk_cmp);
	uint64_t m = 1;
	for (uint64_t i = 1; i < rc->n; i++)
		if (memcmp(rc->v + 24 * i, rc->v + 24 * (m - 1), 16))
			memmove(rc->v + 24 * m++, rc->v + 24 * i, 24);
	rc->n = m;
}

/* Every rank's chunks of checkpoint id: each row's chunks go to the rank whose store the row names. */
static int plan_ranks(ckpt_persist *p, const cat_tensor_rows *tensors, const cat_store_rows *stores, rank_chunks *per)
{
	for (size_t t = 0; t < tensors->n; t++) {
		const cat_tensor *row = &tensors->rows[t];
		const cat_store *st = cat_store_find(stores, row->store_id);
		if (!st || st->rank < 0 || st->rank >= p->world)
			return qe_fail(QE_ENOTFOUND,
				       "persist of step %lld: tensor '%s' of stage %d is in store %s, which no rank of this "
				       "job writes (push it with 'qeffect push')",
				       (long long)p->step, row->name, row->stage, row->store_id[0] ? row->store_id : "RUN/store");
		per[st->rank].host = st->host;
		for (size_t k = 0; k < row->n_chunks; k++) {
			int rc = rank_chunks_add(&per[st->rank], &row->chunks[k]);
			if (rc)
				return rc;
		}
	}
	for (int q = 0; q < p->world; q++) {
		rank_chunks_unique(&per[q]);
		for (uint64_t i = 0; i < per[q].n; i++)
			per[q].bytes += ckpt__get64(per[q].v + 24 * i + 16);
	}
	return QE_OK;
}

/* The host of rank q's store, for messages: the one this checkpoint's rows name, else any of that rank's. */
static const char *host_of(const rank_chunks *per, const cat_store_rows *stores, int q)
{
	if (per && per[q].host)
		return per[q].host;
	for (size_t i = stores->n; i-- > 0;)
		if (stores->rows[i].rank == q && stores->rows[i].host)
			return stores->rows[i].host;
	return "?";
}

static int send_plan(ckpt_persist *p, int q, int rc, const char *why, const rank_chunks *rcq)
{
	uint64_t n = rc ? 0 : rcq->n;
	size_t len = sizeof(plan_head) + 24 * n;
	unsigned char *buf = qe_malloc(len);
	if (!buf)
		return qe_fail(QE_ENOMEM, "persist: out of memory");
	plan_head h;
	memset(&h, 0, sizeof(h));
	h.id = p->id;
	h.step = p->step;
	h.rc = rc;
	h.n = n;
	snprintf(h.msg, sizeof(h.msg), "%s", why ? why : "");
	memcpy(buf, &h, sizeof(h));
	if (n)
		memcpy(buf + sizeof(h), rcq->v, 24 * n);
	int src = qe_pstate_svc_send(p->comm, q, CKPT_SVC_PERSIST_PLAN, buf, len);
	free(buf);
	return src;
}

/* QE_CKPT_PERSIST_PAUSE=STEP:FILE (see ckpt_persist.h). */
static void pause_maybe(int64_t step)
{
	const char *v = ckpt_opt_text(ckpt_options_get()->persist_pause);
	long long at = -1;
	int n = 0;
	if (!v || sscanf(v, "%lld:%n", &at, &n) != 1 || !n || at != step || !v[n])
		return;
	FILE *f = fopen(v + n, "w");
	if (!f) {
		qe_log(QE_LOG_WARN, "persist: test pause: cannot create '%s': %s", v + n, strerror(errno));
		return;
	}
	fclose(f);
	qe_log(QE_LOG_INFO, "persist: test pause before the manifest of step %lld: waiting for '%s' to go", (long long)step, v + n);
	for (int i = 0; i < 30000 && access(v + n, F_OK) == 0; i++)
		usleep(10000);
}

/*
 * Rank 0's thread: rank q's report, after any number of progress messages -
 * each one proof that q lives, so the comm's time-out bounds q's silence,
 * not its uploads.  OUT *d: the report, or a failed one saying why.
 * Returns the comm's failure (then the comm is failed), else QE_OK.
 */
static int hear_report(ckpt_persist *p, int q, rank_chunks *rq, done_msg *d)
{
	memset(d, 0, sizeof(*d));
	for (;;) {
		void *buf = NULL;
		size_t len = 0;
		int64_t kind = 0;
		int rrc = qe_pstate_svc_recv(p->comm, q, CKPT_SVC_PERSIST_REPORT, &buf, &len);
		if (rrc) {
			d->rc = rrc;
			snprintf(d->msg, sizeof(d->msg), "no report: %s", qe_last_error());
			return rrc;
		}
		if (len >= sizeof(kind))
			memcpy(&kind, buf, sizeof(kind));
		if (kind == REPORT_PROGRESS && len == sizeof(progress_msg)) {
			progress_msg m;
			memcpy(&m, buf, sizeof(m));
			free(buf);
			/* (progress of another push cannot come: each stream is read up to its report) */
			if (m.id == p->id && rq && m.bytes > rq->heard) {
				pthread_mutex_lock(&p->mu);
				p->heard_bytes += m.bytes - rq->heard;
				pthread_mutex_unlock(&p->mu);
				rq->heard = m.bytes;
			}
			set_progress(p, "waiting for ranks", p->prog.chunks_total, p->prog.chunks_done, q);
			progress_log(p);
			continue;
		}
		if (kind != REPORT_DONE || len != sizeof(*d)) {
			d->rc = QE_ECOMM;
			snprintf(d->msg, sizeof(d->msg), "a report of %zu bytes (kind %lld)", len, (long long)kind);
		} else {
			memcpy(d, buf, sizeof(*d));
			d->msg[sizeof(d->msg) - 1] = 0;
			if (d->id != p->id) {
				d->rc = QE_ECOMM;
				snprintf(d->msg, sizeof(d->msg), "a report for checkpoint %lld", (long long)d->id);
			}
		}
		free(buf);
		return QE_OK;
	}
}

/* Rank 0's thread: plan, own uploads, every rank's report, manifest, catalog, remote retention. */
static int push_rank0(ckpt_persist *p)
{
	cat_ckpt ck = { 0 };
	cat_run run = { 0 };
	cat_tensor_rows tensors = { 0 };
	cat_shard_rows shards = { 0 };
	cat_store_rows stores = { 0 };
	store_remote *rem = NULL;
	rank_chunks *per = qe_calloc((size_t)p->world, sizeof(*per));
	char *text = NULL;
	char key[256];
	int rc = per ? QE_OK : qe_fail(QE_ENOMEM, "persist: out of memory");
	set_progress(p, "planning", 0, 0, 0);
	if (!rc && !p->bg_cat)
		rc = cat_open(p->cat_path, 0, &p->bg_cat);
	if (!rc)
		rc = cat_ckpt_get_id(p->bg_cat, p->id, &ck);
	if (!rc && ck.status != CAT_COMMITTED)
		rc = qe_fail(QE_EINVAL, "persist: checkpoint %lld (step %lld) is not committed", (long long)p->id,
			     (long long)p->step);
	if (!rc && !(rc = cat_run_get(p->bg_cat, p->s->run_id, &run)) && !(rc = cat_ckpt_tensors(p->bg_cat, p->id, &tensors)) &&
	    !(rc = cat_ckpt_shards(p->bg_cat, p->id, &shards)) && !(rc = cat_store_list(p->bg_cat, p->s->run_id, &stores)) &&
	    !(rc = plan_ranks(p, &tensors, &stores, per)) && !(rc = ckpt__manifest_key(ck.run_id, ck.step, key, sizeof(key))))
		rc = ckpt__manifest_build(&ck, run.config_json, &shards, &tensors, &text);
	/* Every rank hears a plan (a failed one too), so every rank answers. */
	char why[PLAN_MSG];
	snprintf(why, sizeof(why), "%s", rc ? qe_last_error() : "");
	int comm_rc = QE_OK;
	for (int q = 1; q < p->world && !comm_rc; q++)
		comm_rc = send_plan(p, q, rc, why, &per[q]);
	for (int q = 0; q < p->world && per; q++) {
		p->chunks += per[q].n;
		pthread_mutex_lock(&p->mu);
		p->prog.bytes_total += per[q].bytes;
		pthread_mutex_unlock(&p->mu);
	}
	if (!rc && !comm_rc)
		rc = ckpt__persist_remote(p, &rem);
	uint64_t present = 0;
	if (!rc && !comm_rc)
		rc = upload(p, rem, per[0].v, per[0].n, &p->uploaded, &present, &p->bytes_up);
	char msg[1024];
	size_t mlen = (size_t)snprintf(msg, sizeof(msg), "%s", rc ? qe_last_error() : "");
	/* Every other rank's report, whatever happened here. */
	set_progress(p, "waiting for ranks", per ? per[0].n : 0, per ? per[0].n : 0, 1);
	for (int q = 1; q < p->world && !comm_rc; q++) {
		done_msg d;
		const char *host = host_of(per, &stores, q);
		comm_rc = hear_report(p, q, per ? &per[q] : NULL, &d);
		if (comm_rc)
			qe_log(QE_LOG_ERROR,
			       "persist: step %lld: rank %d on host '%s' fell silent or died during the push: %s",
			       (long long)p->step, q, host, d.msg);
		if (d.rc && !rc) {
			rc = (int)d.rc;
			mlen = 0;
		}
		if (d.rc && mlen < sizeof(msg) - 1)
			mlen += (size_t)snprintf(msg + mlen, sizeof(msg) - mlen, "%srank %d on host '%s': %s",
						 mlen ? "; " : "", q, host, d.msg);
		if (!d.rc && per && per[q].bytes > per[q].heard) {
			pthread_mutex_lock(&p->mu);
			p->heard_bytes += per[q].bytes - per[q].heard;
			pthread_mutex_unlock(&p->mu);
			per[q].heard = per[q].bytes;
		}
		p->uploaded += d.uploaded;
		p->bytes_up += d.bytes;
		set_progress(p, "waiting for ranks", per ? per[0].n : 0, per ? per[0].n : 0, q + 1);
	}
	if (comm_rc && !rc) {
		rc = comm_rc;
		snprintf(msg, sizeof(msg), "%s", qe_last_error());
	}
	if (rc) {
		qe_fail(rc, "%s", msg);
		goto out;
	}
	/* The remote commit, then the local record of it. */
	set_progress(p, "manifest", per[0].n, per[0].n, p->world);
	pause_maybe(p->step);
	size_t tlen = strlen(text);
	char hash[33];
	if ((rc = ckpt__manifest_put(rem, key, text, tlen))) {
		qe_fail_ctx(rc, "writing the manifest (the remote commit)");
		goto out;
	}
	ckpt__manifest_hash(text, tlen, hash);
	ckpt__remote_object_url(p->url, key, p->done_url, sizeof(p->done_url));
	if ((rc = cat_remote_add(p->bg_cat, p->id, p->done_url, hash))) {
		qe_fail_ctx(rc, "committed remotely at %s, but recording it in the catalog failed", p->done_url);
		goto out;
	}
	if (p->keep > 0) {
		set_progress(p, "retention", per[0].n, per[0].n, p->world);
		ckpt_gc_policy pol = { .keep_last = p->keep, .grace_s = p->grace_s };
		ckpt_remote_gc_report g;
		store_remote_opts ro;
		opts_of(p, &ro);
		int grc = ckpt_remote_gc(p->url, &ro, p->s->run_dir, p->s->run_id, &pol, &g);
		if (grc)
			qe_log(QE_LOG_WARN, "persist: step %lld pushed to %s, but the remote retention (keep %d) failed: %s",
			       (long long)p->step, p->done_url, p->keep, qe_last_error());
		else
			p->remote_dropped = (int)g.dropped;
		ckpt_remote_gc_report_free(&g);
	}
out:
	if (per)
		for (int q = 0; q < p->world; q++)
			free(per[q].v);
	free(per);
	free(text);
	store_remote_close(rem);
	cat_ckpt_release(&ck);
	cat_run_release(&run);
	cat_tensor_rows_free(&tensors);
	cat_shard_rows_free(&shards);
	cat_store_rows_free(&stores);
	return rc;
}

/* Another rank's thread: its plan, its uploads with progress, exactly one report. */
static int push_rank(ckpt_persist *p)
{
	void *buf = NULL;
	size_t len = 0;
	done_msg d;
	memset(&d, 0, sizeof(d));
	d.kind = REPORT_DONE;
	d.id = p->id;
	beat b;
	beat_start(&b, p);
	int rc = qe_pstate_svc_recv(p->comm, 0, CKPT_SVC_PERSIST_PLAN, &buf, &len);
	if (rc) {
		beat_stop(&b);
		return qe_fail_ctx(rc, "persist: waiting for rank 0's plan");
	}
	plan_head h;
	if (len < sizeof(h)) {
		free(buf);
		rc = qe_fail(QE_ECOMM, "persist: rank 0's plan is %zu bytes", len);
	} else {
		memcpy(&h, buf, sizeof(h));
		h.msg[sizeof(h.msg) - 1] = 0;
		if (len != sizeof(h) + 24 * h.n || h.id != p->id)
			rc = qe_fail(QE_ECOMM, "persist: rank 0's plan is garbled (%zu bytes, checkpoint %lld)", len,
				     (long long)h.id);
		else if (h.rc)
			rc = qe_fail((int)h.rc, "rank 0: %s", h.msg);
	}
	store_remote *rem = NULL;
	uint64_t present = 0;
	if (!rc && !(rc = ckpt__persist_remote(p, &rem)))
		rc = upload(p, rem, (unsigned char *)buf + sizeof(h), h.n, &d.uploaded, &present, &d.bytes);
	store_remote_close(rem);
	free(buf);
	d.rc = rc;
	d.present = present;
	snprintf(d.msg, sizeof(d.msg), "%s", rc ? qe_last_error() : "");
	p->uploaded = d.uploaded;
	p->bytes_up = d.bytes;
	beat_stop(&b);
	int src = qe_pstate_svc_send(p->comm, 0, CKPT_SVC_PERSIST_REPORT, &d, sizeof(d));
	if (rc)
		return qe_fail(rc, "%s", d.msg);
	return src;
}

void *ckpt__persist_thread(void *arg)
{
	ckpt_persist *p = arg;
	int rc = p->rank == 0 ? push_rank0(p) : push_rank(p);
	pthread_mutex_lock(&p->mu);
	p->rc = rc;
	snprintf(p->msg, sizeof(p->msg), "%s", rc ? qe_last_error() : "");
	p->ms = ckpt__now_ms() - p->t0;
	p->finished = 1;
	pthread_mutex_unlock(&p->mu);
	return NULL;
}
