/*
 * ckpt_save.c - taking a checkpoint: the gate, the pending row, every rank's
 * chunks and tensor rows, and rank 0's single commit point.
 *
 * Order matters for crash consistency: a rank's chunks are in the store and
 * flushed (store_sync) before its tensor rows name them, and rank 0 commits
 * only after every rank reported that both are durable.  A process dying
 * anywhere before the commit leaves a 'pending' (or 'aborted') row that no
 * restore reads; dying after it leaves a complete committed checkpoint.
 * Chunks written by a failed attempt stay in the store until gc.
 * ckpt_async.c writes its rows and describes its row through the same
 * functions (ckpt__write_rows, ckpt__describe), so both saves record alike.
 */
#include "ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"

int ckpt__is_runtime_state(qe_pstate_kind k)
{
	return k != QE_PSTATE_PARAM && k != QE_PSTATE_ADAM_M && k != QE_PSTATE_ADAM_V;
}

void ckpt__describe(const qe_rank *r, char *topo, size_t tl, char *sched, size_t sl, char *recipe, size_t rl)
{
	const qe_train_config *c = qe_rank_config(r);
	snprintf(topo, tl, "pp=%d dp=%d chunks=%d", c->pp, c->dp, c->chunks);
	snprintf(sched, sl, "%s/%s %s %s", qe_sched_kind_name(c->schedule), qe_sched_backward_name(c->backward),
		 qe_exec_name(c->exec), qe_grad_name(c->grad));
	if (c->prec.fp8)
		snprintf(recipe, rl, "model=%s fp8=%s history=%d margin=%d algo=%s head=%s", c->model.preset,
			 qe_fp8_format_name(c->prec.recipe.format), c->prec.recipe.history_len, c->prec.recipe.margin,
			 qe_amax_algo_name(c->prec.recipe.algo), c->prec.head_current ? "current" : "delayed");
	else
		snprintf(recipe, rl, "model=%s fp8=off", c->model.preset);
}

int ckpt__write_rows(ckpt_session *s, cat *c, int64_t id, int rank, int replica, const qe_pstate_item *items, int n,
		     const store_chunk_list *lists)
{
	int rc = cat_begin(c);
	if (rc)
		return rc;
	for (int i = 0; i < n && !rc; i++) {
		const qe_pstate_item *it = &items[i];
		char name[64], shape[96];
		int stage;
		ckpt__catalog_key(it, replica, &stage, name, sizeof(name));
		ckpt__shape_text(it, shape, sizeof(shape));
		cat_chunk *ch = calloc(lists[i].n + 1, sizeof(*ch));
		if (!ch) {
			rc = qe_fail(QE_ENOMEM, "checkpoint: out of memory");
			break;
		}
		for (size_t k = 0; k < lists[i].n; k++) {
			memcpy(ch[k].hash, lists[i].chunks[k].hash.b, sizeof(ch[k].hash));
			ch[k].size = lists[i].chunks[k].size;
		}
		rc = cat_ckpt_add_tensor(c, id, stage, name, qe_dtype_name(it->dtype), shape, it->bytes,
					 qe_pstate_kind_name(it->kind), ch, lists[i].n);
		free(ch);
		if (rc)
			rc = qe_fail_ctx(rc, "checkpoint: recording '%s' of stage %d", name, stage);
		else
			ckpt__maybe_kill(s, "row", rank);
	}
	/* One shard row per pipeline stage, by the replica 0 rank that holds it. */
	for (int i = 0; i < n && replica == 0 && !rc; i++) {
		if (items[i].stage < 0 || (i > 0 && items[i - 1].stage == items[i].stage))
			continue;
		uint64_t sb = 0;
		for (int j = 0; j < n; j++)
			if (items[j].stage == items[i].stage)
				sb += items[j].bytes;
		rc = cat_ckpt_add_shard(c, id, items[i].stage, rank, sb);
	}
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	if ((rc = cat_commit(c)))
		return rc;
	ckpt__maybe_kill(s, "rows", rank);
	return QE_OK;
}

/*
 * This rank's part: every item's chunks into the store, one flush, then every
 * item's row in one catalog transaction.  OUT *bytes, *rt_bytes: what it wrote.
 */
static int write_shard(ckpt_session *s, qe_rank *r, int64_t id, uint64_t *bytes, uint64_t *rt_bytes)
{
	int rank = qe_rank_index(r), replica = qe_rank_replica(r);
	qe_pstate_item *items = NULL;
	store_chunk_list *lists = NULL;
	int n = 0, rc;
	*bytes = *rt_bytes = 0;
	if ((rc = qe_rank_pstate(r, &items, &n)))
		return rc;
	if (!(lists = calloc((size_t)n + 1, sizeof(*lists)))) {
		rc = qe_fail(QE_ENOMEM, "checkpoint: out of memory");
		goto out;
	}
	qe_backend *b = qe_rank_backend(r);
	/* Replicas other than 0 write only what may differ between replicas (FP8 meta: amax
	 * histories of inputs and gradients are per replica; small records). */
	int keep = 0;
	for (int i = 0; i < n; i++)
		if (replica == 0 || !ckpt__shared_by_replicas(&items[i]))
			items[keep++] = items[i];
	n = keep;
	for (int i = 0; i < n; i++) {
		qe_pstate_item *it = &items[i];
		const void *host = it->data;
		void *copy = NULL;
		if (it->on_device && it->bytes) {
			if (!(copy = malloc(it->bytes))) {
				rc = qe_fail(QE_ENOMEM, "checkpoint: no host memory for '%s' of stage %d (%zu bytes)",
					     it->name, it->stage, it->bytes);
				goto out;
			}
			if ((rc = b->ops->copy(NULL, copy, it->data, it->bytes, QE_COPY_D2H))) {
				free(copy);
				rc = qe_fail_ctx(rc, "checkpoint: copying '%s' of stage %d to the host", it->name,
						 it->stage);
				goto out;
			}
			host = copy;
		}
		rc = store_put_tensor(s->st, host, it->bytes, s->chunk_bytes, &lists[i]);
		free(copy);
		if (rc) {
			rc = qe_fail_ctx(rc, "checkpoint: storing '%s' of stage %d", it->name, it->stage);
			goto out;
		}
		*bytes += it->bytes;
		if (ckpt__is_runtime_state(it->kind))
			*rt_bytes += it->bytes;
		ckpt__maybe_kill(s, "chunk", rank);
	}
	ckpt__maybe_kill(s, "sync", rank);
	if ((rc = store_sync(s->st))) {
		rc = qe_fail_ctx(rc, "checkpoint: flushing the store");
		goto out;
	}
	ckpt__maybe_kill(s, "synced", rank);

	rc = ckpt__write_rows(s, s->cat, id, rank, replica, items, n, lists);
out:
	if (lists)
		for (int i = 0; i < n; i++)
			store_chunk_list_free(&lists[i]);
	free(lists);
	free(items);
	return rc;
}

/* Rank 0: the outcome in *w; abort the pending row when the attempt failed. */
static void decide(ckpt_session *s, int64_t id, ckpt_word *w)
{
	int rc;
	if (!w->rc) {
		ckpt__maybe_kill(s, "commit", 0);
		if (!(rc = cat_ckpt_set_sizes(s->cat, id, w->bytes, w->rt_bytes)))
			rc = cat_ckpt_commit(s->cat, id);
		if (!rc) {
			ckpt__maybe_kill(s, "committed", 0);
			return;
		}
		ckpt__word_set(w, rc, "committing checkpoint %lld: %s", (long long)id, qe_last_error());
	}
	char reason[CKPT_MSG + 32];
	snprintf(reason, sizeof(reason), "save failed: %s", w->msg);
	if ((rc = cat_ckpt_abort(s->cat, id, reason)))
		qe_log(QE_LOG_WARN, "checkpoint %lld: could not mark it aborted (%s); it stays pending", (long long)id,
		       qe_last_error());
}

int ckpt_save(ckpt_session *s, qe_rank *r, ckpt_result *out)
{
	double t0 = ckpt__now_ms();
	int rank = qe_rank_index(r), rc;
	int64_t step = qe_rank_steps_done(r), e_w = qe_rank_epochs(r)->e_W;
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
	rc = qe_rank_quiescent(r);
	ckpt__word_set(&mine, rc, NULL);
	ckpt__maybe_kill(s, "gate", rank);
	if ((rc = ckpt__gather(r, &mine, &w)))
		return rc;
	if ((rc = ckpt__bcast(r, &w)))
		return rc;
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld refused, nothing written: %s", (long long)step, w.msg);

	/* 2. Rank 0 opens the attempt: a pending row everyone writes under. */
	memset(&w, 0, sizeof(w));
	if (rank == 0) {
		char topo[64], sched[96], recipe[160];
		ckpt__describe(r, topo, sizeof(topo), sched, sizeof(sched), recipe, sizeof(recipe));
		rc = ckpt__store(s, 1);
		if (!rc)
			rc = cat_ckpt_begin(s->cat, s->run_id, step, e_w, topo, sched, recipe, &w.id);
		ckpt__word_set(&w, rc, NULL);
		if (!rc)
			ckpt__maybe_kill(s, "begin", rank);
	}
	if ((rc = ckpt__bcast(r, &w))) {
		if (rank == 0 && w.id > 0)
			cat_ckpt_abort(s->cat, w.id, "save failed: a rank did not hear the checkpoint id");
		return rc;
	}
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld: rank 0 could not start it: %s", (long long)step, w.msg);
	int64_t id = w.id;
	res.id = id;

	/* 3. Every rank: chunks, flush, rows. */
	memset(&mine, 0, sizeof(mine));
	mine.id = id;
	rc = ckpt__store(s, 0);
	if (!rc)
		rc = write_shard(s, r, id, &mine.bytes, &mine.rt_bytes);
	ckpt__word_set(&mine, rc, NULL);

	/* 4. Rank 0 decides: commit when every rank succeeded, else abort. */
	memset(&w, 0, sizeof(w));
	if ((rc = ckpt__gather(r, &mine, &w))) {
		if (rank == 0) {
			char reason[CKPT_MSG + 32];
			snprintf(reason, sizeof(reason), "save failed: %s", qe_last_error());
			cat_ckpt_abort(s->cat, id, reason);
		}
		return rc;
	}
	if (rank == 0) {
		w.id = id;
		decide(s, id, &w);
	}
	if ((rc = ckpt__bcast(r, &w)))
		return rc;
	res.bytes = w.bytes;
	res.runtime_state_bytes = w.rt_bytes;
	res.ms = ckpt__now_ms() - t0;
	if (out)
		*out = res;
	if (w.rc)
		return qe_fail((int)w.rc, "checkpoint at step %lld (id %lld) aborted: %s", (long long)step, (long long)id,
			       w.msg);
	return QE_OK;
}
