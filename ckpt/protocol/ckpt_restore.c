/*
 * ckpt_restore.c - loading a committed checkpoint into fresh rank processes.
 *
 * Only rank 0 has the catalog, and no two ranks need share a disk, so a
 * restore is planned: rank 0 sends every rank the checkpoint's rows; each
 * rank matches its items with rows (same dtype, shape and size) and tells
 * rank 0 which stores it sees on its own disk; rank 0 decides who reads each
 * row - the rank that loads it when it sees the row's store or a replica's
 * (--ckpt-replicas: the catalog's copies), else the lowest rank that sees
 * the row's store, else the lowest that sees a replica - and refuses, naming the tensors and the rank and host
 * whose store held them, when no rank can reach a row.  Then every rank
 * reads what it serves and sends it on the comm's service lane, and reads or
 * receives its own rows; every chunk is re-hashed by the store that reads
 * it, and again by the rank that receives it.
 *
 * Nothing is loaded until every rank has every byte in host memory and the
 * ranks agree, so a failure anywhere leaves every rank as it was.  Items are
 * found by (global stage, name), so the pipeline mapping of the checkpoint
 * does not matter.
 */
#include "ckpt/session/ckpt_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/protocol/ckpt_report_int.h"
#include "ckpt/protocol/ckpt_restore_read_int.h"
#include "ckpt/protocol/ckpt_restore_s3_int.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

/* ---- the restore's small messages ------------------------------------------------- */

/* What a rank asks for: its outcome so far, the stores it sees, the rows it needs. */
typedef struct ask {
	ckpt_word w;
	int nseen;
	char (*seen)[CKPT_STORE_ID_MAX];
	int nneed;
	int64_t *need; /* row index per item */
} ask;

/* The plan: for every row a rank loads, which rank reads it (src) for which rank (dst). */
typedef struct xfer {
	int64_t row;
	int src, dst;
} xfer;

static int find_row_index(const cat_tensor_rows *rows, int stage, const char *name)
{
	for (size_t i = 0; i < rows->n; i++)
		if (rows->rows[i].stage == stage && strcmp(rows->rows[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Match every item of the rank with its row (dtype, shape and size checked).  OUT need[i]. */
static int match_items(qe_rank *r, const cat_tensor_rows *rows, int64_t step, const qe_pstate_item *items, int n,
		       int64_t *need)
{
	for (int i = 0; i < n; i++) {
		const qe_pstate_item *it = &items[i];
		char name[64], shape[96];
		int stage;
		ckpt__catalog_key(it, qe_pstate_replica(r), &stage, name, sizeof(name));
		ckpt__shape_text(it, shape, sizeof(shape));
		int k = find_row_index(rows, stage, name);
		if (k < 0 && qe_pstate_replica(r) > 0) {
			/* Saved with fewer replicas: start from replica 0's copy. */
			ckpt__catalog_key(it, 0, &stage, name, sizeof(name));
			k = find_row_index(rows, stage, name);
		}
		if (k < 0)
			return qe_fail(QE_EMISMATCH,
				       "checkpoint step %lld has no tensor '%s' of stage %d (saved with another model or "
				       "number of stages?)",
				       (long long)step, name, stage);
		const cat_tensor *t = &rows->rows[k];
		if (strcmp(t->dtype, qe_dtype_name(it->dtype)) || strcmp(t->shape, shape) || t->bytes != it->bytes)
			return qe_fail(QE_EMISMATCH,
				       "tensor '%s' of stage %d: the checkpoint holds %s %s (%llu bytes), this run needs %s %s "
				       "(%zu bytes): the model or recipe differs",
				       name, stage, t->dtype, t->shape, (unsigned long long)t->bytes,
				       qe_dtype_name(it->dtype), shape, it->bytes);
		need[i] = k;
	}
	return QE_OK;
}

static void *ask_encode(const ask *a, size_t *len)
{
	*len = sizeof(a->w) + 16 + (size_t)a->nseen * CKPT_STORE_ID_MAX + (size_t)a->nneed * 8;
	unsigned char *b = qe_malloc(*len), *p = b;
	if (!b)
		return NULL;
	memcpy(p, &a->w, sizeof(a->w));
	p += sizeof(a->w);
	ckpt__put64(p, (uint64_t)a->nseen);
	ckpt__put64(p + 8, (uint64_t)a->nneed);
	p += 16;
	for (int i = 0; i < a->nseen; i++, p += CKPT_STORE_ID_MAX)
		memcpy(p, a->seen[i], CKPT_STORE_ID_MAX);
	for (int i = 0; i < a->nneed; i++, p += 8)
		ckpt__put64(p, (uint64_t)a->need[i]);
	return b;
}

/* A view into the gathered bytes (seen and need point into buf). */
static int ask_decode(const void *buf, size_t len, int from, size_t nrows, ask *a)
{
	const unsigned char *p = buf;
	memset(a, 0, sizeof(*a));
	if (len < sizeof(a->w) + 16)
		return qe_fail(QE_ECOMM, "restore: rank %d sent %zu bytes, too few for its request", from, len);
	memcpy(&a->w, p, sizeof(a->w));
	a->w.msg[sizeof(a->w.msg) - 1] = 0;
	uint64_t ns = ckpt__get64(p + sizeof(a->w)), nn = ckpt__get64(p + sizeof(a->w) + 8);
	if (ns > 1 << 20 || nn > 1 << 24 || len != sizeof(a->w) + 16 + ns * CKPT_STORE_ID_MAX + nn * 8)
		return qe_fail(QE_ECOMM, "restore: the request of rank %d is garbled (%zu bytes)", from, len);
	a->nseen = (int)ns;
	a->nneed = (int)nn;
	a->seen = (char (*)[CKPT_STORE_ID_MAX])(p + sizeof(a->w) + 16);
	a->need = qe_malloc((nn + 1) * sizeof(int64_t));
	if (!a->need)
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	const unsigned char *q = p + sizeof(a->w) + 16 + ns * CKPT_STORE_ID_MAX;
	for (uint64_t i = 0; i < nn; i++) {
		a->need[i] = (int64_t)ckpt__get64(q + 8 * i);
		if (a->need[i] < 0 || (size_t)a->need[i] >= nrows) {
			free(a->need);
			a->need = NULL;
			return qe_fail(QE_ECOMM, "restore: rank %d asked for row %lld of %zu", from, (long long)a->need[i],
				       nrows);
		}
	}
	for (int i = 0; i < a->nseen; i++)
		((char *)a->seen[i])[CKPT_STORE_ID_MAX - 1] = 0;
	return QE_OK;
}

static int sees(const ask *a, const char *store_id)
{
	for (int i = 0; i < a->nseen; i++)
		if (strcmp(a->seen[i], store_id) == 0)
			return 1;
	return 0;
}

/* Where a store lived, for messages about missing chunks. */
static void describe_store(const cat_store_rows *stores, const char *store_id, char *buf, size_t len)
{
	const cat_store *st = store_id[0] ? cat_store_find(stores, store_id) : NULL;
	if (!store_id[0])
		snprintf(buf, len, "the shared store RUN/store of a schema-2 run, on rank 0's host");
	else if (st)
		snprintf(buf, len, "store %s of rank %d on host '%s' (%s)", store_id, st->rank, st->host, st->path);
	else
		snprintf(buf, len, "store %s (not described in the catalog)", store_id);
}

/* Whether rank a sees any copy of t: its own store's, or a replica's (copies: the checkpoint's copy rows). */
static int sees_copy(const ask *a, const cat_tensor *t, const cat_tensor_rows *copies)
{
	if (sees(a, t->store_id))
		return 1;
	for (size_t i = 0; copies && i < copies->n; i++)
		if (copies->rows[i].stage == t->stage && strcmp(copies->rows[i].name, t->name) == 0 &&
		    sees(a, copies->rows[i].store_id))
			return 1;
	return 0;
}

/* Whether rank a sees a memory-tier copy of t (--ckpt-memory), which is read before any disk. */
static int sees_memory_copy(const ask *a, const cat_tensor *t, const cat_tensor_rows *copies)
{
	for (size_t i = 0; copies && i < copies->n; i++)
		if (ckpt_store_id_is_memory(copies->rows[i].store_id) && copies->rows[i].stage == t->stage &&
		    strcmp(copies->rows[i].name, t->name) == 0 && sees(a, copies->rows[i].store_id))
			return 1;
	return 0;
}

/* Where the replicas of t lived, for the refusal: "; copies in store X of rank R on host 'H'". */
static size_t describe_copies(const cat_store_rows *stores, const cat_tensor *t, const cat_tensor_rows *copies,
			      char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (size_t i = 0; copies && i < copies->n && n < len - 1; i++) {
		const cat_tensor *c = &copies->rows[i];
		if (c->stage != t->stage || strcmp(c->name, t->name))
			continue;
		char where[400];
		describe_store(stores, c->store_id, where, sizeof(where));
		n += (size_t)snprintf(buf + n, len - n, ", and a replica in %s", where);
	}
	return n;
}


/*
 * Rank 0: who reads what.  Every row a rank needs is read by that rank when
 * it sees the row's store, else by the lowest rank that sees it and sent
 * over; a row whose store no rank sees but whose chunks all lie in some
 * store of rank 0's host (pulled from S3 by `resume --remote`) is read by
 * rank 0.  A row no rank can reach fails the plan, naming it and where its
 * store lived.  OUT *plan (malloc'd), *nplan.
 */
static int make_plan(ckpt_session *s, const cat_tensor_rows *rows, const cat_tensor_rows *copies,
		     const cat_store_rows *stores, const ask *asks, int world, int64_t step, int s3, xfer **plan,
		     int *nplan)
{
	int total = 0;
	for (int q = 0; q < world; q++)
		total += asks[q].nneed;
	xfer *v = qe_calloc((size_t)total + 1, sizeof(*v));
	if (!v)
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	char missing[CKPT_MSG] = "";
	size_t mlen = 0;
	int nmissing = 0, k = 0;
	for (int q = 0; q < world; q++)
		for (int i = 0; i < asks[q].nneed; i++) {
			const cat_tensor *t = &rows->rows[asks[q].need[i]];
			/* A memory-tier copy first (the loading rank's, else the lowest rank's), so that ranks restarted
			 * on live hosts read no disk; then the rank that loads it, else the lowest that sees its own
			 * store, else the lowest that sees a replica. */
			int src = sees_memory_copy(&asks[q], t, copies) ? q : -1;
			for (int h = 0; h < world && src < 0; h++)
				if (sees_memory_copy(&asks[h], t, copies))
					src = h;
			if (src < 0 && sees_copy(&asks[q], t, copies))
				src = q;
			for (int h = 0; h < world && src < 0; h++)
				if (sees(&asks[h], t->store_id))
					src = h;
			for (int h = 0; h < world && src < 0; h++)
				if (sees_copy(&asks[h], t, copies))
					src = h;
			store *any;
			if (src < 0 && ckpt__store_of(s, t, &any) == QE_OK)
				src = 0; /* every chunk is in some store of rank 0's host (pulled from S3) */
			qe_clear_error();
			if (src < 0 && s3)
				src = CKPT_SRC_S3; /* the loading rank fetches it from the pushed copy (ckpt_restore_s3.c) */
			if (src == -1) {
				if (nmissing++ < 4 && mlen < sizeof(missing) - 1) {
					char where[400], reps[600];
					describe_store(stores, t->store_id, where, sizeof(where));
					describe_copies(stores, t, copies, reps, sizeof(reps));
					mlen += (size_t)snprintf(missing + mlen, sizeof(missing) - mlen,
								 "%stensor '%s' of stage %d (%zu chunks, needed by rank %d) "
								 "is in %s%s, which no rank of this job can read",
								 mlen ? "; " : "", t->name, t->stage, t->n_chunks, q, where, reps);
				}
				continue;
			}
			v[k].row = asks[q].need[i];
			v[k].src = src;
			v[k].dst = q;
			k++;
		}
	if (nmissing) {
		free(v);
		return qe_fail(QE_ENOTFOUND,
			       "checkpoint step %lld cannot be restored, nothing loaded: %d tensor%s unreachable: %s%s "
			       "(start ranks on the hosts that hold those stores, or pull the run from S3)",
			       (long long)step, nmissing, nmissing == 1 ? " is" : "s are", missing,
			       nmissing > 4 ? "; ..." : "");
	}
	*plan = v;
	*nplan = k;
	return QE_OK;
}

/* Re-hash what came over the comm against the row's chunk list. */
static int check_received(const cat_tensor *t, const unsigned char *data, int from)
{
	size_t off = 0;
	for (size_t k = 0; k < t->n_chunks; k++) {
		store_hash h;
		store_hash_of(data + off, (size_t)t->chunks[k].size, &h);
		if (memcmp(h.b, t->chunks[k].hash, STORE_HASH_BYTES)) {
			char hex[STORE_HASH_HEX];
			memcpy(h.b, t->chunks[k].hash, STORE_HASH_BYTES);
			return qe_fail(QE_ECORRUPT, "tensor '%s' of stage %d: chunk %zu (%s) from rank %d does not match its hash",
				       t->name, t->stage, k, store_hash_hex(&h, hex), from);
		}
		off += (size_t)t->chunks[k].size;
	}
	return QE_OK;
}

/* A rank's serving: every row it reads for another rank, sent on the service lane (a failure too). */
static int serve(ckpt_session *s, qe_comm *comm, int me, const cat_tensor_rows *rows, const xfer *plan, int nplan,
		 int64_t step)
{
	int first = QE_OK, served = 0;
	uint64_t served_bytes = 0;
	char why[CKPT_MSG] = "";
	for (int k = 0; k < nplan; k++) {
		if (plan[k].src != me || plan[k].dst == me)
			continue;
		const cat_tensor *t = &rows->rows[plan[k].row];
		size_t len = 16 + (size_t)t->bytes;
		unsigned char *buf = qe_malloc(len > CKPT_MSG + 16 ? len : CKPT_MSG + 16);
		if (!buf)
			return qe_fail(QE_ENOMEM, "restore: no host memory to serve '%s' of stage %d", t->name, t->stage);
		ckpt__put64(buf, (uint64_t)plan[k].row);
		/* After a failure every later destination still hears why, so nobody waits for a timeout. */
		int rc = first ? first : ckpt__read_row(s, t, buf + 16, step);
		ckpt__put64(buf + 8, (uint64_t)(int64_t)rc);
		if (rc && !first) {
			first = rc;
			snprintf(why, sizeof(why), "%s", qe_last_error());
		}
		if (rc)
			len = 16 + (size_t)snprintf((char *)buf + 16, CKPT_MSG, "%s", why);
		int src = qe_pstate_svc_send(comm, plan[k].dst, CKPT_SVC_XFER, buf, len);
		free(buf);
		if (src)
			return qe_fail_ctx(src, "restore: sending '%s' of stage %d to rank %d", t->name, t->stage,
					   plan[k].dst);
		if (!rc) {
			served++;
			served_bytes += t->bytes;
			ckpt__maybe_kill(s, "serve", me);
		}
	}
	if (served)
		qe_log(QE_LOG_INFO, "restore: rank %d on %s served %d tensors (%llu bytes) to other ranks", me, s->host, served,
		       (unsigned long long)served_bytes);
	return first ? qe_fail(first, "%s", why) : QE_OK;
}

/* The rank's own rows: first those read here (ckpt_pipe.c), then those received from the ranks that read them. */
static int fetch(ckpt_session *s, qe_rank *r, const cat_tensor_rows *rows, const xfer *plan, int nplan,
		 const qe_pstate_item *items, const int64_t *need, int n, staging *g, int64_t step, const char *s3_url)
{
	int me = qe_pstate_rank(r), rc = QE_OK, nown = 0;
	int dev = ckpt__want_device_staging(r);
	store_remote *s3 = NULL; /* opened at the first row fetched from S3 */
	g->r = r;
	g->n = n;
	if (!(g->buf = qe_calloc((size_t)n + 1, sizeof(void *))) || !(g->on_dev = qe_calloc((size_t)n + 1, 1)) ||
	    !(g->mapped = qe_calloc((size_t)n + 1, sizeof(size_t))))
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	own_row *own = qe_calloc((size_t)nplan + 1, sizeof(*own));
	int *item_of = qe_calloc((size_t)nplan + 1, sizeof(int));
	if (!own || !item_of) {
		free(own);
		free(item_of);
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	}
	for (int k = 0; k < nplan && !rc; k++) {
		item_of[k] = -1;
		if (plan[k].dst != me)
			continue;
		int i = 0;
		while (i < n && need[i] != plan[k].row)
			i++;
		if (i == n) {
			rc = qe_fail(QE_ECOMM, "restore: the plan gives rank %d row %lld it did not ask for", me,
				     (long long)plan[k].row);
			break;
		}
		item_of[k] = i;
		if (g->buf[i]) {
			rc = qe_fail(QE_ECOMM, "restore: the plan gives rank %d row %lld twice", me, (long long)plan[k].row);
			break;
		}
		rc = ckpt__stage_alloc(g, i, &items[i], dev && plan[k].src == me);
		if (!rc && plan[k].src == me) {
			own[nown].t = &rows->rows[plan[k].row];
			own[nown++].item = i;
		}
	}
	if (!rc && nown)
		rc = ckpt__read_own(s, r, own, nown, items, g, step);
	for (int k = 0; k < nplan && !rc; k++) {
		if (plan[k].dst != me || plan[k].src == me)
			continue;
		int i = item_of[k];
		const qe_pstate_item *it = &items[i];
		const cat_tensor *t = &rows->rows[plan[k].row];
		if (plan[k].src == CKPT_SRC_S3) { /* host staging (stage_alloc above), filled from the pushed copy */
			rc = ckpt__s3_read_row(s, s3_url, &s3, t, g->buf[i], step);
			if (!rc)
				rc = ckpt__check_record(r, it, g->buf[i], step);
			if (!rc)
				ckpt__maybe_kill(s, "read", me);
			continue;
		}
		void *msg = NULL;
		size_t len = 0;
		if ((rc = qe_pstate_svc_recv(qe_pstate_comm(r), plan[k].src, CKPT_SVC_XFER, &msg, &len))) {
			rc = qe_fail_ctx(rc, "restore: receiving '%s' of stage %d from rank %d", t->name, t->stage, plan[k].src);
			break;
		}
		const unsigned char *p = msg;
		int64_t got_row = len >= 16 ? (int64_t)ckpt__get64(p) : -1, their = len >= 16 ? (int64_t)ckpt__get64(p + 8) : 0;
		if (got_row != plan[k].row)
			rc = qe_fail(QE_ECOMM, "restore: rank %d sent row %lld, expected '%s' of stage %d", plan[k].src,
				     (long long)got_row, t->name, t->stage);
		else if (their)
			rc = qe_fail((int)their, "rank %d could not read '%s' of stage %d for rank %d: %.*s", plan[k].src,
				     t->name, t->stage, me, (int)(len - 16), (const char *)p + 16);
		else if (len - 16 != t->bytes)
			rc = qe_fail(QE_ECOMM, "restore: rank %d sent %zu bytes of '%s' of stage %d, expected %llu", plan[k].src,
				     len - 16, t->name, t->stage, (unsigned long long)t->bytes);
		else if (!(rc = check_received(t, p + 16, plan[k].src)))
			memcpy(g->buf[i], p + 16, (size_t)t->bytes);
		free(msg);
		if (!rc)
			rc = ckpt__check_record(r, it, g->buf[i], step);
		if (!rc)
			ckpt__maybe_kill(s, "read", me);
	}
	store_remote_close(s3);
	free(own);
	free(item_of);
	return rc;
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

/* Rank 0's blob to every rank (a world of one keeps its own bytes). */
static int share_blob(qe_rank *r, void *mine, size_t len, void **out, size_t *out_len)
{
	qe_comm *comm = qe_pstate_comm(r);
	if (ckpt__comm_world(comm) == 1) {
		*out = mine;
		*out_len = len;
		return QE_OK;
	}
	int rc = qe_pstate_bcast_blob(comm, mine, len, out, out_len);
	free(mine);
	return rc;
}

/* Rank 0: the checkpoint's rows, and every rank's request turned into a plan (with a word on failure). */
static void *plan_blob(ckpt_session *s, qe_rank *r, int64_t id, int64_t step, const cat_tensor_rows *rows,
		       const qe_comm_blob *blobs, const ask *mine_ask, size_t *len)
{
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm);
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	ask *asks = qe_calloc((size_t)world, sizeof(*asks));
	xfer *plan = NULL;
	int nplan = 0, rc = asks ? QE_OK : qe_fail(QE_ENOMEM, "restore: out of memory");
	size_t mlen = 0;
	for (int q = 0; q < world && !rc; q++) {
		if (world == 1) {
			asks[0] = *mine_ask;
			asks[0].need = qe_malloc(((size_t)mine_ask->nneed + 1) * sizeof(int64_t));
			if (!asks[0].need) {
				rc = qe_fail(QE_ENOMEM, "restore: out of memory");
				break;
			}
			if (mine_ask->nneed) /* need is NULL then: memcpy from NULL is undefined even for 0 bytes */
				memcpy(asks[0].need, mine_ask->need, (size_t)mine_ask->nneed * sizeof(int64_t));
		} else if ((rc = ask_decode(qe_pstate_blob_data(blobs, q), qe_pstate_blob_size(blobs, q), q, rows->n,
					   &asks[q]))) {
			break;
		}
		ckpt__word_add(&w, &mlen, q, asks[q].w.rc, asks[q].w.msg);
	}
	if (rc)
		ckpt__word_set(&w, rc, NULL);
	if (!w.rc) {
		cat_store_rows stores = { 0 };
		if (cat_store_list(s->cat, s->run_id, &stores))
			qe_log(QE_LOG_WARN, "restore: cannot list the run's stores: %s", qe_last_error());
		cat_tensor_rows copies = { 0 };
		if (cat_ckpt_copies(s->cat, id, &copies))
			qe_log(QE_LOG_WARN, "restore: cannot list the checkpoint's replica copies: %s", qe_last_error());
		rc = make_plan(s, rows, &copies, &stores, asks, world, step, 0, &plan, &nplan);
		cat_remote_rows remotes = { 0 };
		if (rc == QE_ENOTFOUND && !cat_remote_list(s->cat, id, &remotes) && remotes.n) {
			/* No copy in reach, but the checkpoint was pushed: fetch what is missing from there, or say why not. */
			char why[CKPT_MSG], base[1024], s3err[CKPT_MSG];
			snprintf(why, sizeof(why), "%s", qe_last_error());
			int prc = ckpt__s3_probe(&remotes, base, sizeof(base), s3err, sizeof(s3err));
			if (!prc) {
				qe_clear_error();
				rc = make_plan(s, rows, &copies, &stores, asks, world, step, 1, &plan, &nplan);
				if (!rc)
					snprintf(w.msg, sizeof(w.msg), "%s", base); /* every rank fetches from there */
			} else {
				/* S3's answer first: the list of what is missing is long and the message is bounded. */
				rc = qe_fail(rc, "no store or replica in reach, and the pushed copy %s cannot serve it either (%s); %s",
					     remotes.rows[0].url, s3err, why);
			}
		}
		cat_tensor_rows_free(&copies);
		cat_remote_rows_free(&remotes);
		cat_store_rows_free(&stores);
		if (rc)
			ckpt__word_set(&w, rc, NULL);
	}
	for (int q = 0; asks && q < world; q++)
		free(asks[q].need);
	free(asks);
	w.id = id;
	*len = sizeof(w) + 8 + (size_t)nplan * 24;
	unsigned char *b = qe_malloc(*len);
	if (!b) {
		free(plan);
		return NULL;
	}
	memcpy(b, &w, sizeof(w));
	ckpt__put64(b + sizeof(w), (uint64_t)nplan);
	for (int k = 0; k < nplan; k++) {
		ckpt__put64(b + sizeof(w) + 8 + 24 * k, (uint64_t)plan[k].row);
		ckpt__put64(b + sizeof(w) + 16 + 24 * k, (uint64_t)plan[k].src);
		ckpt__put64(b + sizeof(w) + 24 + 24 * k, (uint64_t)plan[k].dst);
	}
	free(plan);
	return b;
}

static int plan_decode(const void *buf, size_t len, int world, size_t nrows, ckpt_word *w, xfer **plan, int *nplan)
{
	const unsigned char *p = buf;
	*plan = NULL;
	*nplan = 0;
	if (len < sizeof(*w) + 8)
		return qe_fail(QE_ECOMM, "restore: rank 0's plan is %zu bytes, too short", len);
	memcpy(w, p, sizeof(*w));
	w->msg[sizeof(w->msg) - 1] = 0;
	uint64_t n = ckpt__get64(p + sizeof(*w));
	if (n > (len - sizeof(*w) - 8) / 24 || len != sizeof(*w) + 8 + n * 24)
		return qe_fail(QE_ECOMM, "restore: rank 0's plan is garbled (%zu bytes)", len);
	xfer *v = qe_calloc((size_t)n + 1, sizeof(*v));
	if (!v)
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	for (uint64_t k = 0; k < n; k++) {
		v[k].row = (int64_t)ckpt__get64(p + sizeof(*w) + 8 + 24 * k);
		v[k].src = (int)ckpt__get64(p + sizeof(*w) + 16 + 24 * k);
		v[k].dst = (int)ckpt__get64(p + sizeof(*w) + 24 + 24 * k);
		if (v[k].row < 0 || (size_t)v[k].row >= nrows || (v[k].src < 0 && v[k].src != CKPT_SRC_S3) ||
		    v[k].src >= world || v[k].dst < 0 ||
		    v[k].dst >= world) {
			int rc = qe_fail(QE_ECOMM, "restore: rank 0's plan names row %lld from rank %d to rank %d",
					 (long long)v[k].row, v[k].src, v[k].dst);
			free(v); /* after the message, which reads v (it read freed memory) */
			return rc;
		}
	}
	*plan = v;
	*nplan = (int)n;
	return QE_OK;
}

int ckpt_restore(ckpt_session *s, qe_rank *r, int64_t step, ckpt_result *out)
{
	double t0 = ckpt__now_ms();
	int rank = qe_pstate_rank(r), rc, n = 0, nplan = 0;
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm);
	qe_pstate_item *items = NULL;
	void *blob = NULL;
	staging g;
	memset(&g, 0, sizeof(g));
	size_t blob_len = 0;
	int64_t *need = NULL;
	xfer *plan = NULL;
	cat_tensor_rows rows = { 0 };
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
		rc = s->cat ? ckpt_find(s->run_dir, s->cat, s->run_id, step, &ck)
			    : qe_fail(QE_EINVAL, "restore: rank 0 has no catalog open");
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
	if ((rc = ckpt__bcast(r, "checkpoint", &w)))
		return rc;
	if (w.rc)
		return qe_fail((int)w.rc, "restore: %s", w.msg);
	int64_t id = w.id;
	ckpt_word found = w;

	/* 2. Rank 0 sends every rank the checkpoint's rows. */
	if (rank == 0) {
		rc = cat_ckpt_tensors(s->cat, id, &rows);
		if (!rc)
			rc = ckpt__rows_encode(&rows, &blob, &blob_len);
		cat_tensor_rows_free(&rows);
		if (rc) {
			/* An empty table still goes out, so nobody waits; the gather below says why. */
			ckpt__word_set(&mine, rc, NULL);
			cat_tensor_rows empty = { 0 };
			ckpt__rows_encode(&empty, &blob, &blob_len);
		}
	}
	void *got = NULL;
	size_t got_len = 0;
	if ((rc = share_blob(r, blob, blob_len, &got, &got_len)))
		return qe_fail_ctx(rc, "restore: hearing the checkpoint's rows from rank 0");
	blob = NULL;
	rc = got ? ckpt__rows_decode(got, got_len, "rank 0", &rows) : qe_fail(QE_ENOMEM, "restore: out of memory");
	free(got);

	/* 3. Every rank: its items matched with rows, the stores it sees, its request to rank 0. */
	ask me;
	memset(&me, 0, sizeof(me));
	if (!rc && !mine.rc)
		rc = qe_rank_pstate(r, &items, &n);
	if (!rc && !mine.rc && !(need = qe_calloc((size_t)n + 1, 8)))
		rc = qe_fail(QE_ENOMEM, "restore: out of memory");
	if (!rc && !mine.rc)
		rc = match_items(r, &rows, found.step, items, n, need);
	if (!rc && !mine.rc && !(rc = ckpt__store(s, rank)))
		rc = ckpt__scan(s);
	if (!rc && !mine.rc && s->nseen && !(me.seen = qe_calloc((size_t)s->nseen, CKPT_STORE_ID_MAX)))
		rc = qe_fail(QE_ENOMEM, "restore: out of memory");
	if (rc && !mine.rc)
		ckpt__word_set(&mine, rc, NULL);
	me.w = mine;
	if (!mine.rc) {
		me.nseen = s->nseen;
		for (int i = 0; i < s->nseen; i++)
			snprintf(me.seen[i], CKPT_STORE_ID_MAX, "%s", s->seen[i].where.id.store_id);
		me.nneed = n;
		me.need = need;
	}
	size_t alen = 0;
	void *abuf = ask_encode(&me, &alen);
	if (!abuf) {
		free(me.seen);
		rc = qe_fail(QE_ENOMEM, "restore: out of memory");
		goto out;
	}
	qe_comm_blob *blobs = NULL;
	if (world > 1 && (rc = qe_pstate_gather(comm, abuf, alen, &blobs))) {
		free(abuf);
		free(me.seen);
		rc = qe_fail_ctx(rc, "restore: gathering every rank's request");
		goto out;
	}
	/* 4. Rank 0 plans who reads what; everyone hears the plan (or why there is none). */
	if (rank == 0 && !(blob = plan_blob(s, r, id, found.step, &rows, blobs, &me, &blob_len)))
		rc = qe_fail(QE_ENOMEM, "restore: out of memory");
	free(me.seen);
	free(abuf);
	qe_pstate_blobs_free(blobs, world);
	if (rc) {
		free(blob); /* rank 0's plan, built even when its own part failed (LeakSanitizer) */
		goto out;
	}
	if ((rc = share_blob(r, blob, blob_len, &got, &got_len))) {
		rc = qe_fail_ctx(rc, "restore: hearing rank 0's plan");
		goto out;
	}
	rc = plan_decode(got, got_len, world, rows.n, &w, &plan, &nplan);
	free(got);
	if (rc)
		goto out;
	if (w.rc) {
		rc = qe_fail((int)w.rc, "restore of checkpoint step %lld refused, nothing loaded: %s", (long long)found.step,
			     w.msg);
		goto out;
	}

	/* 5. Every rank serves what others read from its disk, then reads and checks its own; nothing loads yet. */
	memset(&mine, 0, sizeof(mine));
	s->read_bytes[0] = s->read_bytes[1] = 0;
	double t_read = ckpt__now_ms();
	rc = world > 1 ? serve(s, comm, rank, &rows, plan, nplan, found.step) : QE_OK;
	if (!rc)
		rc = fetch(s, r, &rows, plan, nplan, items, need, n, &g, found.step, w.msg);
	ckpt__word_set(&mine, rc, NULL);
	double t_agree = ckpt__now_ms();
	if ((rc = ckpt__agree(r, "checkpoint", &mine, &w)))
		goto out;
	if (w.rc) {
		rc = qe_fail((int)w.rc, "restore of checkpoint step %lld refused, nothing loaded: %s",
			     (long long)found.step, w.msg);
		goto out;
	}

	/* 6. Everyone read everything: load, then rebuild process-local state. */
	double t_load = ckpt__now_ms();
	if ((rc = ckpt__load_items(r, items, n, &g)))
		goto out;
	{
		uint64_t staged = 0, on_dev = 0;
		for (int i = 0; i < n; i++) {
			staged += items[i].bytes;
			on_dev += g.on_dev[i] ? items[i].bytes : 0;
		}
		qe_log(QE_LOG_INFO,
		       "restore: rank %d on %s: %llu bytes (%llu staged on the device) planned in %.0f ms, read and checked "
		       "in %.0f ms, agreed in %.0f ms, loaded in %.0f ms; this host's stores gave %llu bytes from disk, "
		       "%llu from memory",
		       rank, s->host, (unsigned long long)staged, (unsigned long long)on_dev, t_read - t0, t_agree - t_read,
		       t_load - t_agree, ckpt__now_ms() - t_load, (unsigned long long)s->read_bytes[0],
		       (unsigned long long)s->read_bytes[1]);
	}
	if ((rc = qe_rank_pstate_loaded(r)))
		goto out;
	if (qe_pstate_steps_done(r) != found.step) {
		rc = qe_fail(QE_ECORRUPT, "restore: the rank is at step %lld after loading checkpoint step %lld",
			     (long long)qe_pstate_steps_done(r), (long long)found.step);
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
		out->read_disk_bytes = s->read_bytes[0];
		out->read_memory_bytes = s->read_bytes[1];
	}
out:
	ckpt__stage_free(&g);
	free(need);
	free(plan);
	free(items);
	cat_tensor_rows_free(&rows);
	return rc;
}
