/*
 * ckpt_restore.c - loading a committed checkpoint into fresh rank processes.
 *
 * Two phases so that a failure changes nothing: every rank first reads all of
 * its items from the store into host memory and checks them (same dtype,
 * shape and size as the rank's own item; every chunk re-hashed by the store),
 * then the ranks agree, and only then does each copy into its state and
 * rebuild process-local objects.  Items are found by (global stage, name), so
 * the pipeline mapping of the checkpoint does not matter.
 */
#include "ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

static const cat_tensor *find_row(const cat_tensor_rows *rows, int stage, const char *name)
{
	for (size_t i = 0; i < rows->n; i++)
		if (rows->rows[i].stage == stage && strcmp(rows->rows[i].name, name) == 0)
			return &rows->rows[i];
	return NULL;
}

/* Consistency of the run-wide records with the catalog row and this run. */
static int check_record(const qe_rank *r, const qe_pstate_item *it, const void *buf, int64_t step)
{
	int64_t v[2];
	if (it->stage >= 0)
		return QE_OK;
	if (strcmp(it->name, "steps_done") == 0 && it->bytes == sizeof(int64_t)) {
		memcpy(v, buf, sizeof(int64_t));
		if (v[0] != step)
			return qe_fail(QE_ECORRUPT, "record 'run/steps_done' says %lld steps, the catalog says step %lld",
				       (long long)v[0], (long long)step);
	}
	if (strcmp(it->name, "rng") == 0 && it->bytes == 2 * sizeof(uint64_t)) {
		memcpy(v, buf, sizeof(v));
		if ((uint64_t)v[0] != qe_rank_config(r)->seed)
			return qe_fail(QE_EMISMATCH, "the checkpoint's data/initialization seed is %llu, this run's is %llu",
				       (unsigned long long)v[0], (unsigned long long)qe_rank_config(r)->seed);
	}
	return QE_OK;
}

/* Read and check every item of the rank into host buffers.  OUT *bufs[i] per item (caller frees). */
static int read_items(ckpt_session *s, qe_rank *r, int64_t id, int64_t step, const qe_pstate_item *items, int n,
		      void **bufs)
{
	cat_tensor_rows rows = { 0 };
	int rc = ckpt__store(s, 0);
	if (rc)
		return rc;
	if ((rc = cat_ckpt_tensors(s->cat, id, &rows)))
		return rc;
	for (int i = 0; i < n && !rc; i++) {
		const qe_pstate_item *it = &items[i];
		char name[64], shape[96];
		int stage;
		ckpt__catalog_key(it, qe_rank_replica(r), &stage, name, sizeof(name));
		ckpt__shape_text(it, shape, sizeof(shape));
		const cat_tensor *t = find_row(&rows, stage, name);
		if (!t && qe_rank_replica(r) > 0) {
			/* Saved with fewer replicas: start from replica 0's copy. */
			ckpt__catalog_key(it, 0, &stage, name, sizeof(name));
			t = find_row(&rows, stage, name);
		}
		if (!t) {
			rc = qe_fail(QE_EMISMATCH,
				     "checkpoint step %lld has no tensor '%s' of stage %d (saved with another model or "
				     "number of stages?)",
				     (long long)step, name, stage);
			break;
		}
		if (strcmp(t->dtype, qe_dtype_name(it->dtype)) || strcmp(t->shape, shape) || t->bytes != it->bytes) {
			rc = qe_fail(QE_EMISMATCH,
				     "tensor '%s' of stage %d: the checkpoint holds %s %s (%llu bytes), this run needs %s %s "
				     "(%zu bytes): the model or recipe differs",
				     name, stage, t->dtype, t->shape, (unsigned long long)t->bytes,
				     qe_dtype_name(it->dtype), shape, it->bytes);
			break;
		}
		if (!(bufs[i] = malloc(it->bytes ? it->bytes : 1))) {
			rc = qe_fail(QE_ENOMEM, "restore: no host memory for '%s' of stage %d (%zu bytes)", name, stage,
				     it->bytes);
			break;
		}
		store_chunk_list list = { t->n_chunks, calloc(t->n_chunks + 1, sizeof(store_chunk)) };
		if (!list.chunks) {
			rc = qe_fail(QE_ENOMEM, "restore: out of memory");
			break;
		}
		for (size_t k = 0; k < t->n_chunks; k++) {
			memcpy(list.chunks[k].hash.b, t->chunks[k].hash, STORE_HASH_BYTES);
			list.chunks[k].size = t->chunks[k].size;
		}
		rc = store_get_tensor(s->st, &list, bufs[i], it->bytes);
		free(list.chunks);
		if (rc) {
			rc = qe_fail_ctx(rc, "tensor '%s' of stage %d (%zu chunks) of checkpoint step %lld", name, stage,
					 t->n_chunks, (long long)step);
			break;
		}
		if ((rc = check_record(r, it, bufs[i], step)))
			break;
		ckpt__maybe_kill(s, "read", qe_rank_index(r));
	}
	cat_tensor_rows_free(&rows);
	return rc;
}

/* Copy the checked host buffers into the rank's state. */
static int load_items(qe_rank *r, const qe_pstate_item *items, int n, void **bufs)
{
	qe_backend *b = qe_rank_backend(r);
	for (int i = 0; i < n; i++) {
		const qe_pstate_item *it = &items[i];
		if (!it->bytes)
			continue;
		if (it->on_device) {
			int rc = b->ops->copy(NULL, it->data, bufs[i], it->bytes, QE_COPY_H2D);
			if (rc)
				return qe_fail_ctx(rc, "restore: copying '%s' of stage %d to the device", it->name,
						   it->stage);
		} else {
			memcpy(it->data, bufs[i], it->bytes);
		}
	}
	return QE_OK;
}

/* Rank 0, after a successful restore: attempts a crashed writer left pending will never commit. */
static void abandon_pending(ckpt_session *s, int64_t step)
{
	cat_ckpt_rows all = { 0 };
	if (cat_ckpt_list(s->cat, s->run_id, &all))
		return;
	for (size_t i = 0; i < all.n; i++) {
		if (all.rows[i].status != CAT_PENDING)
			continue;
		char note[160];
		snprintf(note, sizeof(note), "abandoned: its writer stopped before the commit (found when resuming from step %lld)",
			 (long long)step);
		if (cat_ckpt_abort(s->cat, all.rows[i].id, note))
			qe_log(QE_LOG_WARN, "restore: could not mark pending checkpoint %lld aborted: %s",
			       (long long)all.rows[i].id, qe_last_error());
	}
	cat_ckpt_rows_free(&all);
}

int ckpt_restore(ckpt_session *s, qe_rank *r, int64_t step, ckpt_result *out)
{
	double t0 = ckpt__now_ms();
	int rank = qe_rank_index(r), rc, n = 0;
	qe_pstate_item *items = NULL;
	void **bufs = NULL;
	ckpt_word w, mine;
	memset(&w, 0, sizeof(w));
	memset(&mine, 0, sizeof(mine));
	if (out) {
		memset(out, 0, sizeof(*out));
		out->id = -1;
	}
	if (s->pid != getpid())
		return qe_fail(QE_EINVAL, "checkpoint session of process %d used in process %d", (int)s->pid,
			       (int)getpid());

	/* 1. Rank 0 picks the checkpoint. */
	if (rank == 0) {
		cat_ckpt ck;
		rc = ckpt_find(s->run_dir, s->cat, s->run_id, step, &ck);
		ckpt__word_set(&w, rc, NULL);
		if (!rc) {
			w.id = ck.id;
			w.step = ck.step;
			w.e_w = ck.e_w;
			w.bytes = ck.bytes;
			w.rt_bytes = ck.runtime_state_bytes;
			cat_ckpt_release(&ck);
		}
	}
	if ((rc = ckpt__bcast(r, &w)))
		return rc;
	if (w.rc)
		return qe_fail((int)w.rc, "restore: %s", w.msg);
	int64_t id = w.id;
	ckpt_word found = w;

	/* 2. Every rank reads and checks everything it will load, touching nothing yet. */
	if ((rc = qe_rank_pstate(r, &items, &n)))
		return rc;
	if (!(bufs = calloc((size_t)n + 1, sizeof(void *)))) {
		free(items);
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	}
	rc = read_items(s, r, id, found.step, items, n, bufs);
	ckpt__word_set(&mine, rc, NULL);
	if ((rc = ckpt__gather(r, &mine, &w)))
		goto out;
	if ((rc = ckpt__bcast(r, &w)))
		goto out;
	if (w.rc) {
		rc = qe_fail((int)w.rc, "restore of checkpoint step %lld refused, nothing loaded: %s",
			     (long long)found.step, w.msg);
		goto out;
	}

	/* 3. Everyone read everything: load, then rebuild process-local state. */
	if ((rc = load_items(r, items, n, bufs)))
		goto out;
	if ((rc = qe_rank_pstate_loaded(r)))
		goto out;
	if (qe_rank_steps_done(r) != found.step) {
		rc = qe_fail(QE_ECORRUPT, "restore: the rank is at step %lld after loading checkpoint step %lld",
			     (long long)qe_rank_steps_done(r), (long long)found.step);
		goto out;
	}
	if (rank == 0)
		abandon_pending(s, found.step);
	if (out) {
		out->id = id;
		out->step = found.step;
		out->e_w = found.e_w;
		out->bytes = found.bytes;
		out->runtime_state_bytes = found.rt_bytes;
		out->ms = ckpt__now_ms() - t0;
	}
out:
	for (int i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(items);
	return rc;
}
