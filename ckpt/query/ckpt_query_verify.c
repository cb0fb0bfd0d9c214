/*
 * ckpt_query_verify.c - `qeffect verify`: does every committed checkpoint read
 * back bit for bit?  Each chunk a committed checkpoint lists must be in the
 * store with the listed size and its bytes must match its hash; each tensor's
 * chunk sizes must add up to its bytes.  A chunk shared by several tensors or
 * checkpoints (dedup) is re-hashed once, but a fault is reported against
 * every tensor that lists it, because the user needs to know which
 * checkpoints are damaged.  With replicas (--ckpt-replicas) every copy is
 * checked in its own store, and its faults say "replica".  Chunks no checkpoint lists are counted as
 * orphans: information (gc collects them), never a fault.
 */
#include "ckpt/query/ckpt_query_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

const char *ckpt_fault_name(ckpt_fault_kind k)
{
	static const char *n[] = { "missing", "size", "corrupt", "catalog" };
	return (unsigned)k < 4 ? n[k] : "?";
}

/* Where a fault is: the store's owner rank and host, and the job rank that checked it. */
typedef struct fault_at {
	int rank;
	const char *host;
	int checked_by;
} fault_at;

static int add_fault(ckpt_verify_report *v, ckpt_fault_kind kind, const cat_ckpt *ck, const cat_tensor *t,
		     int64_t chunk, const store_hash *h, const char *why, const fault_at *at)
{
	if ((v->n_faults & (v->n_faults - 1)) == 0) {
		/* capacity doubles each time the count reaches a power of two */
		size_t cap = v->n_faults ? v->n_faults * 2 : 1;
		ckpt_fault *f = qe_realloc(v->faults, cap * sizeof(*f));
		if (!f)
			return qe_fail(QE_ENOMEM, "verify: out of memory");
		v->faults = f;
	}
	ckpt_fault *f = &v->faults[v->n_faults++];
	memset(f, 0, sizeof(*f));
	f->kind = kind;
	f->ckpt_id = ck->id;
	f->step = ck->step;
	f->stage = t->stage;
	snprintf(f->name, sizeof(f->name), "%s", t->name);
	f->chunk = chunk;
	if (h)
		store_hash_hex(h, f->hash);
	snprintf(f->why, sizeof(f->why), "%s", why);
	f->rank = at->rank;
	snprintf(f->host, sizeof(f->host), "%s", at->host ? at->host : "");
	f->checked_by = at->checked_by;
	return QE_OK;
}

int ckq_check_chunk(store *st, ckq_entry *e, uint64_t *chunks, uint64_t *bytes)
{
	int present = 0;
	uint64_t size = 0;
	if (!st) {
		e->state = CKQ_CHK_MISSING;
		return QE_OK;
	}
	int rc = store_has_chunk(st, &e->h, &present, &size);
	if (rc)
		return rc;
	if (!present) {
		e->state = CKQ_CHK_MISSING;
		return QE_OK;
	}
	rc = store_chunk_verify(st, &e->h);
	(*chunks)++;
	*bytes += size;
	if (rc == QE_ECORRUPT) {
		e->state = CKQ_CHK_CORRUPT;
		free(e->why);
		e->why = qe_strdup(qe_last_error());
		qe_clear_error();
		return QE_OK;
	}
	if (rc == QE_ENOTFOUND) {
		e->state = CKQ_CHK_MISSING;
		return QE_OK;
	}
	if (rc)
		return rc;
	e->state = CKQ_CHK_OK;
	/* e->size was the listed size; keep the stored one for the size check */
	e->size = size;
	return QE_OK;
}

static int vstore_find(ckq_vstore *vs, int nvs, const char *store_id)
{
	for (int i = 0; i < nvs; i++)
		if (strcmp(vs[i].store_id, store_id) == 0)
			return i;
	return -1;
}

/*
 * unseen: chunks of rows whose store is not among vs.  tr: the checkpoint's
 * tensor rows, or its replica copies (copy: each row names the replica's
 * store), checked alike.
 */
static int verify_rows(ckpt_run *r, const cat_ckpt *ck, const cat_tensor_rows *trp, int copy, ckq_vstore *vs,
		       int nvs, ckq_set *unseen, const cat_store_rows *known, const char *not_here,
		       ckpt_verify_report *v)
{
	const cat_tensor_rows tr = *trp;
	int rc = QE_OK;
	char why[256];
	const char *pre = copy ? "replica: " : "";
	for (size_t i = 0; i < tr.n && !rc; i++) {
		const cat_tensor *t = &tr.rows[i];
		size_t before = v->n_faults;
		int si = vstore_find(vs, nvs, t->store_id);
		ckq_vstore *x = si >= 0 ? &vs[si] : NULL;
		if (!x && copy && ckpt_store_id_is_memory(t->store_id) && !ckpt_memory_dir()) {
			v->memory_unchecked++; /* said in the report, with how to check them */
			continue;
		}
		char where[400] = "";
		fault_at at = { -1, "", -1 };
		if (x) {
			at.rank = x->owner;
			at.host = x->host;
			at.checked_by = x->checked_by;
		} else {
			const cat_store *cs = t->store_id[0] ? cat_store_find(known, t->store_id) : NULL;
			if (cs) {
				at.rank = cs->rank;
				at.host = cs->host;
			}
			ckq_describe_store(r, t->store_id, where, sizeof(where));
		}
		uint64_t sum = 0;
		v->tensors++;
		for (size_t k = 0; k < t->n_chunks && !rc; k++) {
			const cat_chunk *c = &t->chunks[k];
			store_hash h;
			memcpy(h.b, c->hash, STORE_HASH_BYTES);
			sum += c->size;
			v->chunk_refs++;
			v->ref_bytes += c->size;
			int added;
			ckq_entry *e = ckq_set_add(x ? &x->seen : unseen, &h, c->size, &added);
			if (!e) {
				rc = qe_fail(QE_ENOMEM, "verify: out of memory");
				break;
			}
			/* a store checked by another rank reported every chunk it was given: a new one is missing */
			if (added && (rc = ckq_check_chunk(x ? x->st : NULL, e, &v->chunks, &v->bytes)))
				break;
			switch (e->state) {
			case CKQ_CHK_MISSING:
				if (!x)
					snprintf(why, sizeof(why), "%schunk %zu of %zu (%llu bytes) is in %.160s, %s", pre, k,
						 t->n_chunks, (unsigned long long)c->size, where, not_here);
				else
					snprintf(why, sizeof(why), "%schunk %zu of %zu (%llu bytes) is not in the store %.120s", pre, k,
						 t->n_chunks, (unsigned long long)c->size, x->path);
				rc = add_fault(v, CKPT_FAULT_MISSING, ck, t, (int64_t)k, &h, why, &at);
				break;
			case CKQ_CHK_CORRUPT:
				snprintf(why, sizeof(why), "%schunk %zu of %zu: %s", pre, k, t->n_chunks,
					 e->why ? e->why : "its bytes do not match its hash");
				rc = add_fault(v, CKPT_FAULT_CORRUPT, ck, t, (int64_t)k, &h, why, &at);
				break;
			default:
				if (e->size != c->size) {
					snprintf(why, sizeof(why),
						 "%schunk %zu of %zu is stored with %llu bytes, the catalog lists %llu", pre, k,
						 t->n_chunks, (unsigned long long)e->size, (unsigned long long)c->size);
					rc = add_fault(v, CKPT_FAULT_SIZE, ck, t, (int64_t)k, &h, why, &at);
				}
			}
		}
		if (!rc && sum != t->bytes && !copy) {
			fault_at none = { -1, "", -1 };
			snprintf(why, sizeof(why), "the catalog lists %zu chunks of %llu bytes in all for a tensor of %llu bytes",
				 t->n_chunks, (unsigned long long)sum, (unsigned long long)t->bytes);
			rc = add_fault(v, CKPT_FAULT_CATALOG, ck, t, -1, NULL, why, &none);
		}
		if (v->n_faults > before)
			v->bad_tensors++;
	}
	return rc;
}

int ckq_verify_walk(ckpt_run *r, ckq_vstore *vs, int nvs, const char *not_here, ckpt_verify_report *out)
{
	cat_ckpt_rows l = { 0 };
	cat_store_rows known = { 0 };
	ckq_set unseen = { 0 };
	int rc = cat_ckpt_list(r->cat, r->run_id, &l);
	if (!rc && (rc = cat_store_list(r->cat, r->run_id, &known)))
		qe_clear_error(), rc = QE_OK; /* a schema-2 catalog has no stores table to describe */
	if (rc) {
		rc = qe_fail_ctx(rc, "run '%s'", r->dir);
		goto out;
	}
	for (size_t i = 0; i < l.n && !rc; i++) {
		const cat_ckpt *ck = &l.rows[i];
		if (ck->status != CAT_COMMITTED) {
			out->skipped++;
			continue;
		}
		out->checkpoints++;
		/* every copy of every tensor: the rows' own stores, then the replicas' */
		cat_tensor_rows tr = { 0 }, cp = { 0 };
		rc = cat_ckpt_tensors(r->cat, ck->id, &tr);
		if (!rc)
			rc = cat_ckpt_copies(r->cat, ck->id, &cp);
		if (rc)
			rc = qe_fail_ctx(rc, "run '%s': tensors of checkpoint step %lld", r->dir, (long long)ck->step);
		if (!rc)
			rc = verify_rows(r, ck, &tr, 0, vs, nvs, &unseen, &known, not_here, out);
		if (!rc)
			rc = verify_rows(r, ck, &cp, 1, vs, nvs, &unseen, &known, not_here, out);
		cat_tensor_rows_free(&tr);
		cat_tensor_rows_free(&cp);
	}
out:
	cat_ckpt_rows_free(&l);
	cat_store_rows_free(&known);
	ckq_set_free(&unseen);
	return rc;
}

typedef struct orphan_ctx {
	const ckq_set *refs;
	ckpt_verify_report *v;
} orphan_ctx;

static int count_orphan(void *vctx, const store_hash *h, uint64_t size, uint64_t touched)
{
	orphan_ctx *ctx = vctx;
	(void)touched;
	ctx->v->store_chunks++;
	if (!ckq_set_find(ctx->refs, h)) {
		ctx->v->orphans++;
		ctx->v->orphan_bytes += size;
	}
	return 0;
}

int ckq_count_orphans(store *st, const ckq_set *refs, ckpt_verify_report *v)
{
	orphan_ctx oc = { refs, v };
	return store_iterate_chunks(st, count_orphan, &oc);
}

int ckpt_q_verify(ckpt_run *r, ckpt_verify_report *out)
{
	memset(out, 0, sizeof(*out));
	ckq_set refs = { 0 };
	int nset = ckpt_storeset_count(r->stores), rc = QE_OK;
	ckq_vstore *vs = qe_calloc((size_t)nset + 1, sizeof(*vs));
	if (!vs)
		return qe_fail(QE_ENOMEM, "verify: out of memory");
	for (int i = 0; i < nset; i++) {
		const ckpt_local_store *w = ckpt_storeset_where(r->stores, i);
		snprintf(vs[i].store_id, sizeof(vs[i].store_id), "%s", w->id.store_id);
		snprintf(vs[i].host, sizeof(vs[i].host), "%s", w->id.host);
		snprintf(vs[i].path, sizeof(vs[i].path), "%s", w->path);
		vs[i].owner = w->id.store_id[0] ? w->id.rank : -1;
		vs[i].checked_by = -1;
		vs[i].st = ckpt_storeset_at(r->stores, i);
	}
	/* a missing store: say where this host looked, so a forgotten --local-dir does not read as damage */
	char root[CKPT_PATH_MAX], why[CKPT_PATH_MAX + 64];
	if (ckpt_rundir_stores(r->dir, root, sizeof(root)))
		snprintf(root, sizeof(root), "%s/stores", r->dir);
	snprintf(why, sizeof(why), "not on this host (looked in %s)", root);
	if ((rc = ckq_verify_walk(r, vs, nset, why, out)))
		goto out;
	if (nset) {
		if ((rc = ckq_set_referenced(r->cat, &refs))) {
			rc = qe_fail_ctx(rc, "run '%s': referenced chunks", r->dir);
			goto out;
		}
		for (int i = 0; i < nset && !rc; i++)
			if ((rc = ckq_count_orphans(ckpt_storeset_at(r->stores, i), &refs, out)))
				rc = qe_fail_ctx(rc, "run '%s': listing the store '%s'", r->dir,
						 ckpt_storeset_where(r->stores, i)->path);
	}
out:
	for (int i = 0; i < nset; i++)
		ckq_set_free(&vs[i].seen);
	free(vs);
	ckq_set_free(&refs);
	return rc;
}

void ckpt_verify_report_free(ckpt_verify_report *v)
{
	free(v->faults);
	memset(v, 0, sizeof(*v));
}
