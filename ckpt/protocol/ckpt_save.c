/*
 * ckpt_save.c - taking a checkpoint: the gate, the pending row, every rank's
 * chunks and tensor rows, and rank 0's single commit point.
 *
 * Order matters for crash consistency: a rank's chunks are in its own store
 * and flushed (store_sync, once per checkpoint) before it sends rank 0 the
 * rows that name them, and rank 0 writes every rank's rows and the commit in
 * one durable transaction only after every rank reported success.  With
 * --ckpt-replicas the rank's chunks also go to its replica targets as they
 * are stored, and its rows leave only after every target acknowledged a
 * flushed copy (ckpt_replica.c), so the commit records only durable copies.  A process
 * dying anywhere before that transaction leaves a 'pending' (or 'aborted')
 * row with no tensor rows, which no restore reads; dying after it leaves a
 * complete committed checkpoint.  Chunks written by a failed attempt stay in
 * the stores until gc.  ckpt_async.c builds its reports and describes its
 * row through the same functions (ckpt__report_build, ckpt__describe), so
 * both saves record alike.
 */
#include "ckpt/session/ckpt_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/protocol/ckpt_report_int.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

/* The writing side of a save's pipe: every piece into the rank's store (and to its replica targets). */
typedef struct save_job {
	ckpt_session *s;
	qe_comm *comm;
	int64_t id;
	int rank;
	const qe_pstate_item *items;
	store_chunk_list *lists;
	ckpt_pipe pipe;
} save_job;

/*
 * The helper thread: hashes and writes each piece the training thread
 * copied off the device, in order, while the next one is being copied.  A
 * tensor is one stream (store_stream_*), so its chunks are exactly those of
 * a whole-tensor put; its last piece ends the stream, and then the "chunk"
 * kill point is passed as before.
 */
static void *save_writer(void *arg)
{
	save_job *j = arg;
	store_stream *w = NULL;
	ckpt_piece *m;
	int slot;
	while ((m = ckpt__pipe_drain_wait(&j->pipe, &slot))) {
		const qe_pstate_item *it = &j->items[m->item];
		const void *src = m->in_slot ? j->s->ring.slot[slot] : (const unsigned char *)it->data + m->off;
		store_chunk_list piece = { 0, NULL };
		int rc = QE_OK;
		if (m->off == 0)
			rc = store_stream_begin(j->s->st, it->bytes, j->s->chunk_bytes, &w);
		if (!rc)
			rc = store_stream_put(w, src, m->len, &piece);
		if (!rc)
			rc = ckpt__repl_send(j->s, j->comm, j->id, src, &piece);
		else
			rc = qe_fail_ctx(rc, "checkpoint: storing '%s' of stage %d", it->name, it->stage);
		if (!rc && m->last) {
			rc = store_stream_end(w, &j->lists[m->item]);
			w = NULL;
			if (rc)
				rc = qe_fail_ctx(rc, "checkpoint: storing '%s' of stage %d", it->name, it->stage);
		}
		if (rc) {
			ckpt__pipe_fail(&j->pipe, rc);
			break;
		}
		if (m->last)
			ckpt__maybe_kill(j->s, "chunk", j->rank);
		ckpt__pipe_drain_done(&j->pipe);
	}
	store_stream_abort(w);
	return NULL;
}

/*
 * The copying side, on the training thread: every item in pieces of whole
 * chunks, device items through the ring's slots (the backend's copy, on the
 * thread that owns the device), host items handed over in place.
 */
static int copy_pieces(ckpt_session *s, qe_rank *r, const qe_pstate_item *items, int n, ckpt_pipe *p)
{
	size_t piece = s->ring.slot_bytes;
	for (int i = 0; i < n; i++) {
		const qe_pstate_item *it = &items[i];
		size_t off = 0;
		do {
			size_t len = it->bytes - off < piece ? it->bytes - off : piece;
			int slot;
			ckpt_piece *m = ckpt__pipe_fill_wait(p, &slot);
			if (!m)
				return QE_OK; /* the writer stopped: its failure is the answer */
			m->item = i;
			m->off = off;
			m->len = len;
			m->last = off + len == it->bytes;
			if (len && ckpt__device_path(it)) {
				m->in_slot = 1;
				int rc = qe_pstate_read_at(r, it, off, len, s->ring.slot[slot]);
				if (rc) {
					rc = qe_fail_ctx(rc, "checkpoint: copying '%s' of stage %d to the host", it->name, it->stage);
					ckpt__pipe_fail(p, rc);
					return rc;
				}
			}
			ckpt__pipe_fill_post(p);
			off += len;
		} while (off < it->bytes);
	}
	return QE_OK;
}

/*
 * This rank's part: every item's chunks into its own store, one flush, then
 * its rows into *rep for rank 0.  Device copies, hashing and writes overlap
 * (ckpt_pipe.c); the chunks are those a whole-tensor put makes.
 */
static int write_shard(ckpt_session *s, qe_rank *r, int64_t id, ckpt_report *rep)
{
	int rank = qe_pstate_rank(r), replica = qe_pstate_replica(r);
	qe_pstate_item *items = NULL;
	store_chunk_list *lists = NULL;
	int n = 0, rc;
	if ((rc = qe_rank_pstate(r, &items, &n)))
		return rc;
	if (!(lists = qe_calloc((size_t)n + 1, sizeof(*lists)))) {
		rc = qe_fail(QE_ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	/* Replicas other than 0 write only what may differ between replicas (FP8 meta: amax
	 * histories of inputs and gradients are per replica; small records). */
	int keep = 0;
	for (int i = 0; i < n; i++)
		if (replica == 0 || !ckpt__shared_by_replicas(&items[i]))
			items[keep++] = items[i];
	n = keep;
	if ((rc = ckpt__ring_get(s, qe_pstate_backend(r), ckpt__piece_bytes(s))))
		goto out;
	save_job j = { .s = s, .comm = qe_pstate_comm(r), .id = id, .rank = rank, .items = items, .lists = lists };
	ckpt__pipe_init(&j.pipe);
	pthread_t tid;
	if (pthread_create(&tid, NULL, save_writer, &j)) {
		ckpt__pipe_destroy(&j.pipe);
		rc = qe_fail(QE_ENOMEM, "checkpoint: rank %d could not start its writer thread", rank);
		goto out;
	}
	rc = copy_pieces(s, r, items, n, &j.pipe);
	ckpt__pipe_close(&j.pipe);
	pthread_join(tid, NULL);
	int wrc = ckpt__pipe_rc(&j.pipe);
	ckpt__pipe_destroy(&j.pipe);
	if (rc || (rc = wrc))
		goto out;
	ckpt__maybe_kill(s, "sync", rank);
	if ((rc = store_sync(s->st))) {
		rc = qe_fail_ctx(rc, "checkpoint: flushing the store");
		goto out;
	}
	ckpt__maybe_kill(s, "synced", rank);

	rc = ckpt__report_build(s, id, rank, replica, items, n, lists, rep);
out:
	if (lists)
		for (int i = 0; i < n; i++)
			store_chunk_list_free(&lists[i]);
	free(lists);
	free(items);
	return rc;
}

/* Rank 0: the outcome in *w; abort the pending row when the attempt failed. */
static void decide(ckpt_session *s, int64_t id, const ckpt_report *reps, int n, ckpt_word *w)
{
	int rc;
	if (!w->rc) {
		if (!(rc = ckpt__commit_reports(s, s->cat, id, reps, n)))
			return;
		ckpt__word_set(w, rc, "committing checkpoint %lld: %s", (long long)id, qe_last_error());
	}
	char reason[CKPT_MSG + 32];
	snprintf(reason, sizeof(reason), "save failed: %s", w->msg);
	if ((rc = cat_ckpt_abort(s->cat, id, reason)))
		qe_log(QE_LOG_WARN, "checkpoint %lld: could not mark it aborted (%s); it stays pending", (long long)id,
		       qe_last_error());
}

/*
 * Every rank hands its report to rank 0 (the gather carries any size).  OUT
 * on rank 0: reps[world] decoded and *w, the combination (first failing
 * rank's code, every failure named by rank, sizes summed).
 */
static int gather_reports(qe_rank *r, const ckpt_report *mine, ckpt_report **reps, int *nreps, ckpt_word *w)
{
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm);
	void *buf = NULL;
	size_t len = 0;
	*reps = NULL;
	*nreps = 0;
	memset(w, 0, sizeof(*w));
	w->id = mine->id;
	int rc = ckpt__report_encode(mine, &buf, &len);
	if (rc)
		return rc;
	qe_comm_blob *blobs = NULL;
	if (world > 1 && (rc = qe_pstate_gather(comm, buf, len, &blobs))) {
		free(buf);
		return qe_fail_ctx(rc, "checkpoint: gathering every rank's rows");
	}
	if (qe_pstate_rank(r) != 0) {
		free(buf);
		return QE_OK;
	}
	ckpt_report *v = qe_calloc((size_t)world, sizeof(*v));
	if (!v) {
		free(buf);
		qe_pstate_blobs_free(blobs, world);
		return qe_fail(QE_ENOMEM, "checkpoint: out of memory");
	}
	size_t mlen = 0;
	for (int i = 0; i < world; i++) {
		char from[32];
		snprintf(from, sizeof(from), "rank %d", i);
		const void *b = world > 1 ? qe_pstate_blob_data(blobs, i) : buf;
		size_t bl = world > 1 ? qe_pstate_blob_size(blobs, i) : len;
		int drc = ckpt__report_decode(b, bl, from, &v[i]);
		if (drc)
			ckpt__report_fail(&v[i], mine->id, i, drc);
		else if (!v[i].rc && v[i].id != mine->id)
			ckpt__report_fail(&v[i], mine->id, i,
					  qe_fail(QE_ECOMM, "rank %d reported checkpoint %lld, expected %lld", i,
						  (long long)v[i].id, (long long)mine->id));
		w->bytes += v[i].bytes;
		w->rt_bytes += v[i].rt_bytes;
		ckpt__word_add(w, &mlen, i, v[i].rc, v[i].msg);
	}
	free(buf);
	qe_pstate_blobs_free(blobs, world);
	*reps = v;
	*nreps = world;
	return QE_OK;
}

static void free_reports(ckpt_report *reps, int n)
{
	for (int i = 0; i < n; i++)
		ckpt__report_free(&reps[i]);
	free(reps);
}

int ckpt_save(ckpt_session *s, qe_rank *r, ckpt_result *out)
{
	double t0 = ckpt__now_ms();
	int rank = qe_pstate_rank(r), rc;
	int64_t step = qe_pstate_steps_done(r), e_w = qe_pstate_e_w(r);
	ckpt_word mine, w;
	ckpt_result res;
	memset(&res, 0, sizeof(res));
	memset(&mine, 0, sizeof(mine));
	memset(&w, 0, sizeof(w));
	res.id = -1;
	res.step = step;
	res.e_w = e_w;
	if (out)
		*out = res;
	if (s->pid != getpid())
		return qe_fail(QE_EINVAL, "checkpoint session of process %d used in process %d", (int)s->pid,
			       (int)getpid());

	/* 1. The gate, on every rank; nothing is written unless all pass. */
	rc = qe_pstate_quiescent(r);
	ckpt__word_set(&mine, rc, NULL);
	ckpt__maybe_kill(s, "gate", rank);
	if ((rc = ckpt__agree(r, "checkpoint", &mine, &w)))
		return rc;
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld refused, nothing written: %s", (long long)step, w.msg);
	/* Replica targets, agreed once per session (collective; the same answer on every rank). */
	if ((rc = ckpt__repl_setup(s, r)))
		return qe_fail_ctx(rc, "checkpoint at step %lld refused, nothing written", (long long)step);

	/* 2. Rank 0 opens the attempt: a pending row everyone writes under. */
	memset(&w, 0, sizeof(w));
	if (rank == 0) {
		char topo[64], sched[96], recipe[160];
		qe_pstate_describe(r, topo, sizeof(topo), sched, sizeof(sched), recipe, sizeof(recipe));
		rc = s->cat ? cat_ckpt_begin(s->cat, s->run_id, step, e_w, topo, sched, recipe, &w.id)
			    : qe_fail(QE_EINVAL, "checkpoint: rank 0 has no catalog open");
		ckpt__word_set(&w, rc, NULL);
		if (!rc)
			ckpt__maybe_kill(s, "begin", rank);
	}
	if ((rc = ckpt__bcast(r, "checkpoint", &w))) {
		if (rank == 0 && w.id > 0)
			cat_ckpt_abort(s->cat, w.id, "save failed: a rank did not hear the checkpoint id");
		return rc;
	}
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld: rank 0 could not start it: %s", (long long)step, w.msg);
	int64_t id = w.id;
	res.id = id;

	/* 3. Every rank: chunks into its own store, one flush, rows for rank 0. */
	ckpt_report rep;
	memset(&rep, 0, sizeof(rep));
	rc = ckpt__store(s, rank);
	if (!rc)
		rc = write_shard(s, r, id, &rep);
	/* 3b. Replicas: end the streams, keep the peers' copies, hear the targets (every rank, failure or not). */
	ckpt_copy_store *copies = NULL;
	int ncopies = 0;
	if (s->repl)
		rc = ckpt__repl_finish(s, qe_pstate_comm(r), id, rc, &copies, &ncopies);
	if (rc) {
		ckpt__report_free(&rep);
		ckpt__report_fail(&rep, id, rank, rc);
	} else {
		rep.copies = copies;
		rep.ncopies = ncopies;
	}
	rep.id = id;

	/* 4. Rank 0 gathers the rows and decides: commit when every rank succeeded, else abort. */
	ckpt_report *reps = NULL;
	int nreps = 0;
	rc = gather_reports(r, &rep, &reps, &nreps, &w);
	ckpt__report_free(&rep);
	if (!rc)
		ckpt__maybe_kill(s, "rows", rank);
	if (rc) {
		if (rank == 0) {
			/* The abort may fail too (a full disk): the gather's code and message are the answer. */
			char reason[CKPT_MSG + 32];
			snprintf(reason, sizeof(reason), "save failed: %s", qe_last_error());
			if (cat_ckpt_abort(s->cat, id, reason))
				qe_log(QE_LOG_WARN, "checkpoint %lld: could not mark it aborted (%s); it stays pending",
				       (long long)id, qe_last_error());
			qe_fail(rc, "%s", reason + strlen("save failed: "));
		}
		free_reports(reps, nreps);
		return rc;
	}
	if (rank == 0) {
		w.id = id;
		decide(s, id, reps, nreps, &w);
	}
	free_reports(reps, nreps);
	if ((rc = ckpt__bcast(r, "checkpoint", &w)))
		return rc;
	res.bytes = w.bytes;
	res.runtime_state_bytes = w.rt_bytes;
	res.ms = ckpt__now_ms() - t0;
	if (out)
		*out = res;
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld (id %lld) aborted: %s", (long long)step, (long long)id,
			       w.msg);
	/* Committed: the memory tier drops what this checkpoint replaced (ckpt_memtier.c). */
	ckpt__mem_committed(s, id);
	return QE_OK;
}
