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
#include "ckpt/ckpt_query_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

enum { CHK_OK = 1, CHK_MISSING, CHK_SIZE, CHK_CORRUPT };

const char *ckpt_fault_name(ckpt_fault_kind k)
{
	static const char *n[] = { "missing", "size", "corrupt", "catalog" };
	return (unsigned)k < 4 ? n[k] : "?";
}

static int add_fault(ckpt_verify_report *v, ckpt_fault_kind kind, const cat_ckpt *ck, const cat_tensor *t,
		     int64_t chunk, const store_hash *h, const char *why)
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
	return QE_OK;
}

/* Check one distinct chunk against the store; sets e->state and e->size (stored size). */
static int check_chunk(store *st, ckq_entry *e, char *why, size_t len, ckpt_verify_report *v)
{
	int present = 0;
	uint64_t size = 0;
	if (!st) {
		e->state = CHK_MISSING;
		return QE_OK;
	}
	int rc = store_has_chunk(st, &e->h, &present, &size);
	if (rc)
		return rc;
	if (!present) {
		e->state = CHK_MISSING;
		return QE_OK;
	}
	rc = store_chunk_verify(st, &e->h);
	v->chunks++;
	v->bytes += size;
	if (rc == QE_ECORRUPT) {
		e->state = CHK_CORRUPT;
		snprintf(why, len, "%s", qe_last_error());
		qe_clear_error();
		return QE_OK;
	}
	if (rc == QE_ENOTFOUND) {
		e->state = CHK_MISSING;
		return QE_OK;
	}
	if (rc)
		return rc;
	e->state = CHK_OK;
	/* e->size was the listed size; keep the stored one for the size check */
	e->size = size;
	return QE_OK;
}

/*
 * seen[i]: chunks already checked in store i of the run's set; seen[count]:
 * tensors whose store is not here.  tr: the checkpoint's tensor rows, or its
 * replica copies (copy: each row names the replica's store), checked alike.
 */
static int verify_rows(ckpt_run *r, const cat_ckpt *ck, const cat_tensor_rows *trp, int copy, ckq_set *seen,
		       ckpt_verify_report *v)
{
	const cat_tensor_rows tr = *trp;
	int rc = QE_OK;
	char why[256], first[256];
	const char *pre = copy ? "replica: " : "";
	for (size_t i = 0; i < tr.n && !rc; i++) {
		const cat_tensor *t = &tr.rows[i];
		size_t before = v->n_faults;
		int si = ckpt_storeset_find(r->stores, t->store_id);
		int nset = ckpt_storeset_count(r->stores);
		store *st = si >= 0 ? ckpt_storeset_at(r->stores, si) : NULL;
		char where[400] = "";
		if (si < 0)
			ckq_describe_store(r, t->store_id, where, sizeof(where));
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
			ckq_entry *e = ckq_set_add(&seen[si >= 0 ? si : nset], &h, c->size, &added);
			if (!e) {
				rc = qe_fail(QE_ENOMEM, "verify: out of memory");
				break;
			}
			first[0] = 0;
			if (added && (rc = check_chunk(st, e, first, sizeof(first), v)))
				break;
			switch (e->state) {
			case CHK_MISSING:
				if (si < 0)
					snprintf(why, sizeof(why), "%schunk %zu of %zu (%llu bytes) is in %s, not on this host", pre,
						 k, t->n_chunks, (unsigned long long)c->size, where);
				else
					snprintf(why, sizeof(why), "%schunk %zu of %zu (%llu bytes) is not in the store %.120s", pre, k,
						 t->n_chunks, (unsigned long long)c->size,
						 ckpt_storeset_where(r->stores, si)->path);
				rc = add_fault(v, CKPT_FAULT_MISSING, ck, t, (int64_t)k, &h, why);
				break;
			case CHK_CORRUPT:
				snprintf(why, sizeof(why), "%schunk %zu of %zu: %s", pre, k, t->n_chunks,
					 first[0] ? first : "its bytes do not match its hash");
				rc = add_fault(v, CKPT_FAULT_CORRUPT, ck, t, (int64_t)k, &h, why);
				break;
			default:
				if (e->size != c->size) {
					snprintf(why, sizeof(why),
						 "%schunk %zu of %zu is stored with %llu bytes, the catalog lists %llu", pre, k,
						 t->n_chunks, (unsigned long long)e->size, (unsigned long long)c->size);
					rc = add_fault(v, CKPT_FAULT_SIZE, ck, t, (int64_t)k, &h, why);
				}
			}
		}
		if (!rc && sum != t->bytes && !copy) {
			snprintf(why, sizeof(why), "the catalog lists %zu chunks of %llu bytes in all for a tensor of %llu bytes",
				 t->n_chunks, (unsigned long long)sum, (unsigned long long)t->bytes);
			rc = add_fault(v, CKPT_FAULT_CATALOG, ck, t, -1, NULL, why);
		}
		if (v->n_faults > before)
			v->bad_tensors++;
	}
	return rc;
}

/* Every copy of every tensor of checkpoint ck: the rows' own stores, then the replicas'. */
static int verify_ckpt(ckpt_run *r, const cat_ckpt *ck, ckq_set *seen, ckpt_verify_report *v)
{
	cat_tensor_rows tr = { 0 }, cp = { 0 };
	int rc = cat_ckpt_tensors(r->cat, ck->id, &tr);
	if (!rc)
		rc = cat_ckpt_copies(r->cat, ck->id, &cp);
	if (rc)
		rc = qe_fail_ctx(rc, "run '%s': tensors of checkpoint step %lld", r->dir, (long long)ck->step);
	if (!rc)
		rc = verify_rows(r, ck, &tr, 0, seen, v);
	if (!rc)
		rc = verify_rows(r, ck, &cp, 1, seen, v);
	cat_tensor_rows_free(&tr);
	cat_tensor_rows_free(&cp);
	return rc;
}

typedef struct orphan_ctx {
	const ckq_set *refs;
	ckpt_verify_report *v;
} orphan_ctx;

static int count_orphan(void *vctx, const store_hash *h, uint64_t size, uint64_t touched)
{
	orphan_ctx *ctx = vctx;
	ctx->v->store_chunks++;
	if (!ckq_set_find(ctx->refs, h)) {
		ctx->v->orphans++;
		ctx->v->orphan_bytes += size;
	}
	return 0;
}

int ckpt_q_verify(ckpt_run *r, ckpt_verify_report *out)
{
	memset(out, 0, sizeof(*out));
	cat_ckpt_rows l = { 0 };
	ckq_set refs = { 0 };
	int nset = ckpt_storeset_count(r->stores);
	ckq_set *seen = qe_calloc((size_t)nset + 1, sizeof(*seen));
	if (!seen)
		return qe_fail(QE_ENOMEM, "verify: out of memory");
	int rc = cat_ckpt_list(r->cat, r->run_id, &l);
	if (rc) {
		rc = qe_fail_ctx(rc, "run '%s'", r->dir);
		goto out;
	}
	for (size_t i = 0; i < l.n && !rc; i++) {
		if (l.rows[i].status != CAT_COMMITTED) {
			out->skipped++;
			continue;
		}
		out->checkpoints++;
		rc = verify_ckpt(r, &l.rows[i], seen, out);
	}
	if (rc)
		goto out;
	if (nset) {
		if ((rc = ckq_set_referenced(r->cat, &refs))) {
			rc = qe_fail_ctx(rc, "run '%s': referenced chunks", r->dir);
			goto out;
		}
		orphan_ctx oc = { &refs, out };
		for (int i = 0; i < nset && !rc; i++)
			if ((rc = store_iterate_chunks(ckpt_storeset_at(r->stores, i), count_orphan, &oc)))
				rc = qe_fail_ctx(rc, "run '%s': listing the store '%s'", r->dir,
						 ckpt_storeset_where(r->stores, i)->path);
	}
out:
	cat_ckpt_rows_free(&l);
	for (int i = 0; i <= nset; i++)
		ckq_set_free(&seen[i]);
	free(seen);
	ckq_set_free(&refs);
	return rc;
}

void ckpt_verify_report_free(ckpt_verify_report *v)
{
	free(v->faults);
	memset(v, 0, sizeof(*v));
}
