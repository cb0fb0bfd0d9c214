/*
 * ckpt_report.c - what a rank tells rank 0 about its part of a checkpoint,
 * and rank 0's single commit transaction.
 *
 * Only rank 0 opens the catalog (its host may be the only one that has it),
 * so every other rank sends its rows - tensor, stage, dtype, shape, chunk
 * hashes and sizes, the store that holds them - as bytes over the comm.  The
 * format is private to one job (both ends are the same binary) but checked
 * all the same: a magic, a version, every length bounded by what is left, so
 * a garbled message is QE_ECORRUPT naming its sender, never a crash.
 *
 * All integers little-endian; strings as u32 length + bytes.
 */
#include "ckpt/protocol/ckpt_report_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* Persistent state other than parameters and AdamW moments (a report's rt_bytes). */
int ckpt__is_runtime_state(qe_pstate_kind k)
{
	return k != QE_PSTATE_PARAM && k != QE_PSTATE_ADAM_M && k != QE_PSTATE_ADAM_V;
}

#define REPORT_MAGIC 0x50524551u /* "QERP" */
#define ROWS_MAGIC 0x57524551u   /* "QERW" */
#define WIRE_VERSION 2 /* 2: a report lists the peers' stores holding copies of its rows */

/* --- bytes ---------------------------------------------------------------------- */

typedef struct wbuf {
	unsigned char *p;
	size_t n, cap;
	int oom;
} wbuf;

static void w_put(wbuf *w, const void *src, size_t n)
{
	if (w->oom)
		return;
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->n + n)
			cap *= 2;
		unsigned char *p = qe_realloc(w->p, cap);
		if (!p) {
			w->oom = 1;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->n, src, n);
	w->n += n;
}

static void w_u64(wbuf *w, uint64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	w_put(w, b, 8);
}

static void w_str(wbuf *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	w_u64(w, n);
	w_put(w, s ? s : "", n);
}

typedef struct rbuf {
	const unsigned char *p;
	size_t n, off;
	int bad;
} rbuf;

static uint64_t r_u64(rbuf *r)
{
	if (r->bad || r->n - r->off < 8) {
		r->bad = 1;
		return 0;
	}
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)r->p[r->off + i] << (8 * i);
	r->off += 8;
	return v;
}

/* Copy a string into dst (cap bytes): too long for it is a bad message. */
static void r_strbuf(rbuf *r, char *dst, size_t cap)
{
	uint64_t n = r_u64(r);
	if (r->bad || n >= cap || n > r->n - r->off) {
		r->bad = 1;
		dst[0] = 0;
		return;
	}
	memcpy(dst, r->p + r->off, (size_t)n);
	dst[n] = 0;
	r->off += (size_t)n;
}

static char *r_strdup(rbuf *r)
{
	uint64_t n = r_u64(r);
	if (r->bad || n > r->n - r->off) {
		r->bad = 1;
		return NULL;
	}
	char *s = qe_malloc((size_t)n + 1);
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, r->p + r->off, (size_t)n);
	s[n] = 0;
	r->off += (size_t)n;
	return s;
}

/* --- tensor rows ---------------------------------------------------------------- */

static void put_rows(wbuf *w, const cat_tensor_rows *rows)
{
	w_u64(w, rows->n);
	for (size_t i = 0; i < rows->n; i++) {
		const cat_tensor *t = &rows->rows[i];
		w_u64(w, (uint64_t)(int64_t)t->stage);
		w_str(w, t->name);
		w_str(w, t->dtype);
		w_str(w, t->shape);
		w_str(w, t->kind);
		w_str(w, t->store_id);
		w_u64(w, t->bytes);
		w_u64(w, t->n_chunks);
		for (size_t k = 0; k < t->n_chunks; k++) {
			w_put(w, t->chunks[k].hash, 16);
			w_u64(w, t->chunks[k].size);
		}
	}
}

static int get_rows(rbuf *r, cat_tensor_rows *rows)
{
	uint64_t n = r_u64(r);
	memset(rows, 0, sizeof(*rows));
	/* every row takes at least 64 bytes on the wire */
	if (r->bad || n > (r->n - r->off) / 64 + 1)
		return r->bad = 1, QE_ECORRUPT;
	if (!(rows->rows = qe_calloc((size_t)n + 1, sizeof(cat_tensor))))
		return QE_ENOMEM;
	for (uint64_t i = 0; i < n && !r->bad; i++) {
		cat_tensor *t = &rows->rows[rows->n++];
		t->stage = (int)(int64_t)r_u64(r);
		t->name = r_strdup(r);
		t->dtype = r_strdup(r);
		t->shape = r_strdup(r);
		t->kind = r_strdup(r);
		t->store_id = r_strdup(r);
		t->bytes = r_u64(r);
		uint64_t nc = r_u64(r);
		if (r->bad || nc > (r->n - r->off) / 24) {
			r->bad = 1;
			break;
		}
		if (!(t->chunks = qe_calloc((size_t)nc + 1, sizeof(cat_chunk)))) {
			r->bad = 1;
			break;
		}
		for (uint64_t k = 0; k < nc; k++) {
			memcpy(t->chunks[k].hash, r->p + r->off, 16);
			r->off += 16;
			t->chunks[k].size = r_u64(r);
		}
		t->n_chunks = (size_t)nc;
	}
	return r->bad ? QE_ECORRUPT : QE_OK;
}

int ckpt__rows_encode(const cat_tensor_rows *rows, void **buf, size_t *len)
{
	wbuf w = { 0 };
	w_u64(&w, ROWS_MAGIC | (uint64_t)WIRE_VERSION << 32);
	put_rows(&w, rows);
	if (w.oom) {
		free(w.p);
		return qe_fail(QE_ENOMEM, "checkpoint rows: out of memory");
	}
	*buf = w.p;
	*len = w.n;
	return QE_OK;
}

int ckpt__rows_decode(const void *buf, size_t len, const char *from, cat_tensor_rows *rows)
{
	rbuf r = { buf, len, 0, 0 };
	memset(rows, 0, sizeof(*rows));
	if (r_u64(&r) != (ROWS_MAGIC | (uint64_t)WIRE_VERSION << 32))
		return qe_fail(QE_ECORRUPT, "checkpoint rows from %s: not a row table (%zu bytes)", from, len);
	int rc = get_rows(&r, rows);
	if (!rc && r.off != len)
		rc = QE_ECORRUPT;
	if (rc) {
		cat_tensor_rows_free(rows);
		return rc == QE_ENOMEM ? qe_fail(rc, "checkpoint rows from %s: out of memory", from)
				       : qe_fail(rc, "checkpoint rows from %s: truncated or garbled (%zu bytes)", from, len);
	}
	return QE_OK;
}

/* --- reports ---------------------------------------------------------------------- */

int ckpt__report_build(ckpt_session *s, int64_t id, int rank, int replica, const qe_pstate_item *items, int n,
		       const store_chunk_list *lists, ckpt_report *rep)
{
	memset(rep, 0, sizeof(*rep));
	rep->id = id;
	rep->rank = rank;
	rep->store = s->ident;
	snprintf(rep->store_path, sizeof(rep->store_path), "%s", s->store_dir);
	if (!(rep->rows.rows = qe_calloc((size_t)n + 1, sizeof(cat_tensor))) ||
	    !(rep->shards = qe_calloc((size_t)n + 1, sizeof(cat_shard))))
		goto oom;
	for (int i = 0; i < n; i++) {
		const qe_pstate_item *it = &items[i];
		cat_tensor *t = &rep->rows.rows[rep->rows.n++];
		char name[64], shape[96];
		ckpt__catalog_key(it, replica, &t->stage, name, sizeof(name));
		ckpt__shape_text(it, shape, sizeof(shape));
		t->name = qe_strdup(name);
		t->dtype = qe_strdup(qe_dtype_name(it->dtype));
		t->shape = qe_strdup(shape);
		t->kind = qe_strdup(qe_pstate_kind_name(it->kind));
		t->store_id = qe_strdup(s->ident.store_id);
		t->bytes = it->bytes;
		t->chunks = qe_calloc(lists[i].n + 1, sizeof(cat_chunk));
		if (!t->name || !t->dtype || !t->shape || !t->kind || !t->store_id || !t->chunks)
			goto oom;
		for (size_t k = 0; k < lists[i].n; k++) {
			memcpy(t->chunks[k].hash, lists[i].chunks[k].hash.b, 16);
			t->chunks[k].size = lists[i].chunks[k].size;
		}
		t->n_chunks = lists[i].n;
		rep->bytes += it->bytes;
		if (ckpt__is_runtime_state(it->kind))
			rep->rt_bytes += it->bytes;
	}
	/* One shard row per pipeline stage, by the replica 0 rank that holds it. */
	for (int i = 0; i < n && replica == 0; i++) {
		if (items[i].stage < 0 || (i > 0 && items[i - 1].stage == items[i].stage))
			continue;
		cat_shard *sh = &rep->shards[rep->nshards++];
		sh->stage = items[i].stage;
		sh->rank = rank;
		for (int j = 0; j < n; j++)
			if (items[j].stage == items[i].stage)
				sh->bytes += items[j].bytes;
	}
	return QE_OK;
oom:
	ckpt__report_free(rep);
	return qe_fail(QE_ENOMEM, "checkpoint: out of memory building the rows of rank %d", rank);
}

void ckpt__report_fail(ckpt_report *rep, int64_t id, int rank, int rc)
{
	memset(rep, 0, sizeof(*rep));
	rep->id = id;
	rep->rank = rank;
	rep->rc = rc;
	const char *e = qe_last_error();
	snprintf(rep->msg, sizeof(rep->msg), "%s", rc ? (e && e[0] ? e : qe_strerror(rc)) : "");
}

int ckpt__report_encode(const ckpt_report *rep, void **buf, size_t *len)
{
	wbuf w = { 0 };
	w_u64(&w, REPORT_MAGIC | (uint64_t)WIRE_VERSION << 32);
	w_u64(&w, (uint64_t)rep->id);
	w_u64(&w, (uint64_t)rep->rc);
	w_str(&w, rep->msg);
	w_u64(&w, rep->bytes);
	w_u64(&w, rep->rt_bytes);
	w_u64(&w, (uint64_t)(int64_t)rep->rank);
	w_str(&w, rep->store.run_id);
	w_u64(&w, (uint64_t)(int64_t)rep->store.rank);
	w_str(&w, rep->store.store_id);
	w_str(&w, rep->store.host);
	w_str(&w, rep->store_path);
	put_rows(&w, &rep->rows);
	w_u64(&w, (uint64_t)rep->nshards);
	for (int i = 0; i < rep->nshards; i++) {
		w_u64(&w, (uint64_t)(int64_t)rep->shards[i].stage);
		w_u64(&w, (uint64_t)(int64_t)rep->shards[i].rank);
		w_u64(&w, rep->shards[i].bytes);
	}
	w_u64(&w, (uint64_t)rep->ncopies);
	for (int i = 0; i < rep->ncopies; i++) {
		const ckpt_copy_store *c = &rep->copies[i];
		w_str(&w, c->id.run_id);
		w_u64(&w, (uint64_t)(int64_t)c->id.rank);
		w_str(&w, c->id.store_id);
		w_str(&w, c->id.host);
		w_str(&w, c->path);
	}
	if (w.oom) {
		free(w.p);
		return qe_fail(QE_ENOMEM, "checkpoint report: out of memory");
	}
	*buf = w.p;
	*len = w.n;
	return QE_OK;
}

int ckpt__report_decode(const void *buf, size_t len, const char *from, ckpt_report *rep)
{
	rbuf r = { buf, len, 0, 0 };
	memset(rep, 0, sizeof(*rep));
	if (r_u64(&r) != (REPORT_MAGIC | (uint64_t)WIRE_VERSION << 32))
		return qe_fail(QE_ECORRUPT, "checkpoint report from %s: not a report (%zu bytes)", from, len);
	rep->id = (int64_t)r_u64(&r);
	rep->rc = (int64_t)r_u64(&r);
	r_strbuf(&r, rep->msg, sizeof(rep->msg));
	rep->bytes = r_u64(&r);
	rep->rt_bytes = r_u64(&r);
	rep->rank = (int)(int64_t)r_u64(&r);
	r_strbuf(&r, rep->store.run_id, sizeof(rep->store.run_id));
	rep->store.rank = (int)(int64_t)r_u64(&r);
	r_strbuf(&r, rep->store.store_id, sizeof(rep->store.store_id));
	r_strbuf(&r, rep->store.host, sizeof(rep->store.host));
	r_strbuf(&r, rep->store_path, sizeof(rep->store_path));
	int rc = r.bad ? QE_ECORRUPT : get_rows(&r, &rep->rows);
	uint64_t ns = rc ? 0 : r_u64(&r);
	if (!rc && (r.bad || ns > (r.n - r.off) / 24))
		rc = QE_ECORRUPT;
	if (!rc && !(rep->shards = qe_calloc((size_t)ns + 1, sizeof(cat_shard))))
		rc = QE_ENOMEM;
	for (uint64_t i = 0; !rc && i < ns; i++) {
		rep->shards[i].stage = (int)(int64_t)r_u64(&r);
		rep->shards[i].rank = (int)(int64_t)r_u64(&r);
		rep->shards[i].bytes = r_u64(&r);
		rep->nshards++;
	}
	uint64_t nc = rc ? 0 : r_u64(&r);
	if (!rc && (r.bad || nc > CKPT_MAX_REPLICAS))
		rc = QE_ECORRUPT;
	if (!rc && !(rep->copies = calloc((size_t)nc + 1, sizeof(ckpt_copy_store))))
		rc = QE_ENOMEM;
	for (uint64_t i = 0; !rc && i < nc; i++) {
		ckpt_copy_store *c = &rep->copies[i];
		r_strbuf(&r, c->id.run_id, sizeof(c->id.run_id));
		c->id.rank = (int)(int64_t)r_u64(&r);
		r_strbuf(&r, c->id.store_id, sizeof(c->id.store_id));
		r_strbuf(&r, c->id.host, sizeof(c->id.host));
		r_strbuf(&r, c->path, sizeof(c->path));
		rep->ncopies++;
	}
	if (!rc && (r.bad || r.off != len))
		rc = QE_ECORRUPT;
	if (rc) {
		ckpt__report_free(rep);
		return rc == QE_ENOMEM ? qe_fail(rc, "checkpoint report from %s: out of memory", from)
				       : qe_fail(rc, "checkpoint report from %s: truncated or garbled (%zu bytes)", from,
						 len);
	}
	rep->msg[sizeof(rep->msg) - 1] = 0;
	return QE_OK;
}

void ckpt__report_free(ckpt_report *rep)
{
	if (!rep)
		return;
	cat_tensor_rows_free(&rep->rows);
	free(rep->shards);
	rep->shards = NULL;
	rep->nshards = 0;
	free(rep->copies);
	rep->copies = NULL;
	rep->ncopies = 0;
}

/* --- the commit ------------------------------------------------------------------- */

static int add_report(ckpt_session *s, cat *c, int64_t id, const ckpt_report *rep)
{
	int rc = QE_OK;
	if (rep->store.store_id[0])
		rc = cat_store_put(c, rep->store.store_id, s->run_id, rep->store.rank, rep->store.host,
				   rep->store_path);
	for (size_t i = 0; i < rep->rows.n && !rc; i++) {
		const cat_tensor *t = &rep->rows.rows[i];
		rc = cat_ckpt_add_tensor_in(c, id, t->store_id, t->stage, t->name, t->dtype, t->shape, t->bytes,
					    t->kind, t->chunks, t->n_chunks);
		if (rc)
			rc = qe_fail_ctx(rc, "checkpoint: recording '%s' of stage %d from rank %d", t->name, t->stage,
					 rep->rank);
		else
			ckpt__maybe_kill(s, "row", 0);
	}
	/* The peers' stores that acknowledged a durable copy of every row (--ckpt-replicas). */
	for (int j = 0; j < rep->ncopies && !rc; j++) {
		const ckpt_copy_store *cp = &rep->copies[j];
		rc = cat_store_put(c, cp->id.store_id, s->run_id, cp->id.rank, cp->id.host, cp->path);
		/* A memory-tier store keeps only the newest checkpoint: its claim moves here (ckpt_memtier.c). */
		if (!rc && ckpt_store_id_is_memory(cp->id.store_id) &&
		    (rc = cat_copies_drop_store_except(c, cp->id.store_id, id, NULL)))
			rc = qe_fail_ctx(rc, "checkpoint: moving the memory copy in store %s of rank %d on '%s' to checkpoint "
					 "%lld", cp->id.store_id, cp->id.rank, cp->id.host, (long long)id);
		for (size_t i = 0; i < rep->rows.n && !rc; i++) {
			const cat_tensor *t = &rep->rows.rows[i];
			if ((rc = cat_ckpt_add_copy(c, id, t->stage, t->name, cp->id.store_id)))
				rc = qe_fail_ctx(rc, "checkpoint: recording the copy of '%s' of stage %d from rank %d in "
						     "store %s of rank %d on '%s'",
						 t->name, t->stage, rep->rank, cp->id.store_id, cp->id.rank, cp->id.host);
		}
	}
	for (int i = 0; i < rep->nshards && !rc; i++)
		rc = cat_ckpt_add_shard(c, id, rep->shards[i].stage, rep->shards[i].rank, rep->shards[i].bytes);
	return rc;
}

int ckpt__commit_reports(ckpt_session *s, cat *c, int64_t id, const ckpt_report *reps, int n)
{
	uint64_t bytes = 0, rt = 0;
	for (int i = 0; i < n; i++) {
		bytes += reps[i].bytes;
		rt += reps[i].rt_bytes;
	}
	ckpt__maybe_kill(s, "commit", 0);
	int rc = cat_begin_durable(c);
	if (rc)
		return rc;
	for (int i = 0; i < n && !rc; i++)
		rc = add_report(s, c, id, &reps[i]);
	if (!rc)
		rc = cat_ckpt_set_sizes(c, id, bytes, rt);
	if (!rc)
		rc = cat_ckpt_commit(c, id);
	if (rc) {
		cat_rollback(c);
		return rc;
	}
	if ((rc = cat_commit(c)))
		return rc;
	ckpt__maybe_kill(s, "committed", 0);
	return QE_OK;
}
