/*
 * ckpt_remote_gc.c - retention on the remote side: `qeffect gc --remote`
 * drops the manifests the policy does not keep, then the chunk objects no
 * remaining manifest lists.
 *
 * The decision is local gc's (ckq_gc_plan in ckpt_query_gc.c), applied per
 * run to its manifests as if they were committed checkpoints, so a policy
 * keeps the same steps on both sides.
 *
 * The order is what keeps a failure or a crash harmless, and mirrors local
 * gc: every manifest is read and checked before anything goes (one we cannot
 * read might list any chunk); the dropped manifests go first, so no remaining
 * manifest ever points at a deleted chunk; the chunks are listed, then the
 * manifests are listed again so that one a push committed meanwhile keeps its
 * chunks; only then do unreferenced chunks go, and only those older than the
 * grace period (a push uploads its chunks before its manifest).  Anything cut
 * short leaves orphan chunks, which the next gc collects.
 */
#include "ckpt/query/ckpt_query_int.h"
#include "ckpt/remote/ckpt_remote_int.h"
#include "ckpt/session/rundir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* Manifests are small; this only bounds what a damaged object can make us read. */
#define MAX_MANIFEST_BYTES ((size_t)256 << 20)

/* One manifest object under checkpoints/. */
typedef struct rman {
	char key[200];
	char run_id[64];
	int64_t step;
	uint64_t size; /* the object */
	uint64_t bytes;
	char *created;
	cat_chunk *chunks; /* distinct, hash order */
	size_t nchunks;
	int read;
} rman;

typedef struct rman_list {
	rman *v;
	size_t n, cap;
	uint64_t foreign;
} rman_list;

/* One chunk object under chunks/. */
typedef struct robj {
	store_hash h;
	uint64_t size;
	int64_t mtime;
} robj;

typedef struct robj_list {
	robj *v;
	size_t n, cap;
	uint64_t foreign;
} robj_list;

static void rman_list_free(rman_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].created);
		free(l->v[i].chunks);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int grow(void **v, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return QE_OK;
	size_t c = *cap ? 2 * *cap : 64;
	void *p = qe_realloc(*v, c * elem);
	if (!p)
		return qe_fail(QE_ENOMEM, "remote gc: out of memory listing %zu objects", n);
	*v = p;
	*cap = c;
	return QE_OK;
}

/* checkpoints/RUN/STEP/manifest.json; anything else there is someone else's. */
static int on_manifest(void *ctx, const store_remote_obj *o)
{
	rman_list *l = ctx;
	char run[64];
	long long step;
	int n = 0;
	if (strlen(o->key) >= sizeof(l->v[0].key) ||
	    sscanf(o->key, "checkpoints/%63[^/]/%lld/manifest.json%n", run, &step, &n) != 2 || o->key[n] || step < 0 ||
	    !ckpt__valid_run_id(run)) {
		l->foreign++;
		return 0;
	}
	int rc = grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v));
	if (rc)
		return rc;
	rman *m = &l->v[l->n++];
	memset(m, 0, sizeof(*m));
	snprintf(m->key, sizeof(m->key), "%s", o->key);
	snprintf(m->run_id, sizeof(m->run_id), "%s", run);
	m->step = step;
	m->size = o->size;
	return 0;
}

/* chunks/<32 hex>. */
static int on_chunk(void *ctx, const store_remote_obj *o)
{
	robj_list *l = ctx;
	store_hash h;
	if (strncmp(o->key, "chunks/", 7) || strlen(o->key) != 7 + 32 || store_hash_parse(o->key + 7, &h)) {
		l->foreign++;
		return 0;
	}
	int rc = grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v));
	if (rc)
		return rc;
	l->v[l->n++] = (robj){ h, o->size, o->mtime };
	return 0;
}

/* Download, check and keep what gc needs of manifest m: its chunk list. */
static int read_manifest(store_remote *rem, const char *url, rman *m)
{
	char where[1400];
	void *data = NULL;
	size_t size = 0;
	ckpt_manifest man;
	ckpt__remote_object_url(url, m->key, where, sizeof(where));
	int rc = store_remote_get(rem, m->key, MAX_MANIFEST_BYTES, &data, &size);
	if (rc)
		return qe_fail_ctx(rc, "remote gc: reading manifest %s", where);
	rc = ckpt__manifest_parse(data, size, where, &man);
	free(data);
	if (rc)
		return qe_fail_ctx(rc, "remote gc: nothing was deleted; repair or delete that manifest by hand (its chunks "
				       "are unknown)");
	if (strcmp(man.run_id, m->run_id) || man.step != m->step) {
		rc = qe_fail(QE_ECORRUPT,
			     "remote gc: manifest %s describes run '%s' step %lld, not what its key says; nothing was "
			     "deleted",
			     where, man.run_id, (long long)man.step);
		goto out;
	}
	m->bytes = man.bytes;
	if (!(m->created = qe_strdup(man.created))) {
		rc = qe_fail(QE_ENOMEM, "remote gc: out of memory");
		goto out;
	}
	rc = ckpt__distinct_chunks(&man.tensors, &m->chunks, &m->nchunks);
	m->read = !rc;
out:
	ckpt__manifest_release(&man);
	return rc;
}

static int cmp_rman(const void *a, const void *b)
{
	const rman *x = a, *y = b;
	int d = strcmp(x->run_id, y->run_id);
	if (d)
		return d;
	return x->step < y->step ? -1 : x->step > y->step;
}

static int add_chunks(ckq_set *keep, const rman *m)
{
	for (size_t k = 0; k < m->nchunks; k++) {
		store_hash h;
		memcpy(h.b, m->chunks[k].hash, STORE_HASH_BYTES);
		if (!ckq_set_add(keep, &h, m->chunks[k].size, NULL))
			return qe_fail(QE_ENOMEM, "remote gc: out of memory");
	}
	return QE_OK;
}

/* Apply the shared policy to each run's manifests [b, e) of l (sorted by run then step). */
static int decide(const rman_list *l, const char *only_run, const ckpt_gc_policy *p, ckpt_remote_gc_report *g)
{
	for (size_t b = 0; b < l->n;) {
		size_t e = b + 1;
		while (e < l->n && strcmp(l->v[e].run_id, l->v[b].run_id) == 0)
			e++;
		g->runs++;
		if (only_run && strcmp(only_run, l->v[b].run_id)) {
			for (size_t i = b; i < e; i++)
				snprintf(g->items[i].why, sizeof(g->items[i].why), "another run (not --run-id)");
			b = e;
			continue;
		}
		cat_ckpt_rows rows = { e - b, qe_calloc(e - b, sizeof(cat_ckpt)) };
		if (!rows.rows)
			return qe_fail(QE_ENOMEM, "remote gc: out of memory");
		for (size_t i = b; i < e; i++)
			rows.rows[i - b] = (cat_ckpt){ .id = (int64_t)i,
						       .run_id = l->v[i].run_id,
						       .step = l->v[i].step,
						       .status = CAT_COMMITTED, /* a manifest is the remote commit */
						       .created = l->v[i].created,
						       .bytes = l->v[i].bytes };
		ckpt_gc_report r = { 0 };
		int rc = ckq_gc_plan(&rows, p, &r);
		free(rows.rows); /* strings are borrowed from l */
		for (size_t k = 0; !rc && k < r.n; k++) {
			ckpt_remote_gc_item *it = &g->items[r.items[k].id];
			it->drop = r.items[k].drop;
			snprintf(it->why, sizeof(it->why), "%s", r.items[k].why);
		}
		ckpt_gc_report_free(&r);
		if (rc)
			return rc;
		b = e;
	}
	for (size_t i = 0; i < l->n; i++) {
		if (g->items[i].drop) {
			g->dropped++;
			g->dropped_bytes += g->items[i].bytes;
		} else {
			g->kept++;
		}
	}
	for (size_t k = 0; k < p->n_pins; k++) {
		int found = 0;
		for (size_t i = 0; i < l->n && !found; i++)
			found = l->v[i].step == p->pins[k] && (!only_run || strcmp(only_run, l->v[i].run_id) == 0);
		if (!found)
			g->missing_pins[g->n_missing_pins++] = p->pins[k];
	}
	return QE_OK;
}

/* "s3://BUCKET/PREFIX/KEY" spelled one way, whatever slashes the user typed. */
static int canonical_url(const char *url, const char *key, char *buf, size_t len)
{
	char bucket[64], prefix[1024];
	int rc = store_remote_parse_url(url, bucket, sizeof(bucket), prefix, sizeof(prefix));
	if (rc)
		return rc;
	snprintf(buf, len, "s3://%s/%s%s%s", bucket, prefix, prefix[0] && key[0] ? "/" : "", key);
	return QE_OK;
}

/*
 * The local catalog forgets the copies gc dropped (all in one transaction).
 * A dry run only counts the rows it would drop.
 */
static int forget_copies(cat *c, const char *local_run, const char *url, const rman_list *l, int dry,
			 ckpt_remote_gc_report *g)
{
	cat_ckpt_rows ck = { 0 };
	int rc = cat_ckpt_list(c, local_run, &ck);
	if (rc)
		return rc;
	if (!dry && (rc = cat_begin(c)))
		goto out;
	for (size_t i = 0; !rc && i < l->n; i++) {
		if (!g->items[i].drop || strcmp(l->v[i].run_id, local_run))
			continue;
		char want[1400];
		if ((rc = canonical_url(url, l->v[i].key, want, sizeof(want))))
			break;
		for (size_t j = 0; !rc && j < ck.n; j++) {
			if (ck.rows[j].step != l->v[i].step)
				continue;
			cat_remote_rows rr = { 0 };
			if ((rc = cat_remote_list(c, ck.rows[j].id, &rr)))
				break;
			for (size_t k = 0; !rc && k < rr.n; k++) {
				char have[1400];
				if (canonical_url(rr.rows[k].url, "", have, sizeof(have))) {
					qe_clear_error(); /* a row we cannot parse is not this copy */
					continue;
				}
				if (strcmp(have, want))
					continue;
				int del = 1;
				if (!dry)
					rc = cat_remote_delete(c, ck.rows[j].id, rr.rows[k].url, &del);
				g->items[i].catalog_rows += del;
				g->catalog_rows += (uint64_t)del;
			}
			cat_remote_rows_free(&rr);
		}
	}
	if (!dry) {
		if (rc) {
			int keep = rc;
			cat_rollback(c);
			rc = keep;
		} else {
			rc = cat_commit(c);
		}
	}
out:
	cat_ckpt_rows_free(&ck);
	return rc;
}

static int open_local(const char *run_dir, cat **c, char **run_id)
{
	char path[CKPT_PATH_MAX];
	int rc = ckpt_rundir_catalog(run_dir, path, sizeof(path));
	if (rc)
		return rc;
	rc = cat_open(path, 0, c);
	if (!rc && (rc = cat_meta_get(*c, "run_id", run_id)))
		rc = qe_fail_ctx(rc, "catalog '%s'", path);
	return rc;
}

int ckpt_remote_gc(const char *url, const store_remote_opts *ro, const char *run_dir, const char *run_id,
		   const ckpt_gc_policy *p, ckpt_remote_gc_report *out)
{
	double t0 = ckpt__remote_now_ms();
	memset(out, 0, sizeof(*out));
	if (p->keep_last < 1)
		return qe_fail(QE_EINVAL, "remote gc: keep-last must be at least 1 (gc never drops the latest checkpoint)");
	if (p->keep_every < 0)
		return qe_fail(QE_EINVAL, "remote gc: keep-every must be >= 0, got %lld", (long long)p->keep_every);
	if (run_id && !ckpt__valid_run_id(run_id))
		return qe_fail(QE_EINVAL, "remote gc: '%s' is not a run id", run_id);
	int64_t now = p->now ? p->now : (int64_t)time(NULL);
	store_remote *rem = NULL;
	cat *c = NULL;
	char *local_run = NULL;
	rman_list man = { 0 }, again = { 0 };
	robj_list ch = { 0 };
	ckq_set keep = { 0 };
	int rc;
	if (run_dir && (rc = open_local(run_dir, &c, &local_run)))
		goto out;
	if ((rc = store_remote_open(url, ro, &rem)) || (rc = store_remote_check(rem))) {
		qe_fail_ctx(rc, "nothing was deleted");
		goto out;
	}

	/* 1. every manifest, read and checked before anything is deleted.  The
	 * listing is believed only as a complete ListBucketResult (store/remote.h):
	 * a manifest missing from it would leave its chunks unreferenced. */
	if ((rc = store_remote_list_objs(rem, "checkpoints/", on_manifest, &man))) {
		qe_fail_ctx(rc, "nothing was deleted");
		goto out;
	}
	for (size_t i = 0; i < man.n; i++)
		if ((rc = read_manifest(rem, url, &man.v[i])))
			goto out;
	if (man.n)
		qsort(man.v, man.n, sizeof(*man.v), cmp_rman);
	out->foreign = man.foreign;
	if (run_id) {
		int found = 0;
		for (size_t i = 0; i < man.n && !found; i++)
			found = strcmp(man.v[i].run_id, run_id) == 0;
		if (!found) {
			rc = qe_fail(QE_ENOTFOUND, "remote gc: no checkpoint of run '%s' under %s", run_id, url);
			goto out;
		}
	}

	/* 2. the decision */
	out->items = qe_calloc(man.n + 1, sizeof(*out->items));
	out->missing_pins = qe_calloc(p->n_pins + 1, sizeof(int64_t));
	if (!out->items || !out->missing_pins) {
		rc = qe_fail(QE_ENOMEM, "remote gc: out of memory");
		goto out;
	}
	out->n = man.n;
	for (size_t i = 0; i < man.n; i++) {
		ckpt_remote_gc_item *it = &out->items[i];
		snprintf(it->run_id, sizeof(it->run_id), "%s", man.v[i].run_id);
		it->step = man.v[i].step;
		it->bytes = man.v[i].bytes;
		it->manifest_bytes = man.v[i].size;
	}
	if ((rc = decide(&man, run_id, p, out)))
		goto out;

	/* 3. the dropped manifests: after this no manifest lists a chunk we delete below */
	for (size_t i = 0; i < man.n; i++) {
		if (!out->items[i].drop)
			continue;
		if (!p->dry_run && (rc = store_remote_delete(rem, man.v[i].key))) {
			qe_fail_ctx(rc, "remote gc: deleting manifest of run '%s' step %lld (no chunk was deleted; run gc "
					"again)",
				    man.v[i].run_id, (long long)man.v[i].step);
			goto out;
		}
		out->manifest_bytes_deleted += man.v[i].size;
		out->bytes_reclaimed += man.v[i].size;
	}
	if (c && (rc = forget_copies(c, local_run, url, &man, p->dry_run, out))) {
		qe_fail_ctx(rc, "remote gc: the dropped manifests are %s, but the catalog of '%s' still records them",
			    p->dry_run ? "still there" : "deleted", run_dir);
		goto out;
	}

	/* 4. the chunks there, then the manifests there now: a push that committed
	 * meanwhile keeps its chunks; one still uploading has young chunks */
	if ((rc = store_remote_list_objs(rem, "chunks/", on_chunk, &ch))) {
		qe_fail_ctx(rc, "no chunk was deleted%s; run gc again", p->dry_run ? "" : " (the dropped manifests are gone)");
		goto out;
	}
	out->foreign += ch.foreign;
	out->chunks_listed = ch.n;
	if ((rc = store_remote_list_objs(rem, "checkpoints/", on_manifest, &again))) {
		qe_fail_ctx(rc, "no chunk was deleted%s; run gc again", p->dry_run ? "" : " (the dropped manifests are gone)");
		goto out;
	}
	for (size_t i = 0; i < man.n; i++)
		if (!out->items[i].drop && (rc = add_chunks(&keep, &man.v[i])))
			goto out;
	for (size_t j = 0; j < again.n; j++) {
		int known = 0;
		for (size_t i = 0; i < man.n && !known; i++)
			known = strcmp(man.v[i].key, again.v[j].key) == 0 && (!out->items[i].drop || p->dry_run);
		if (known)
			continue;
		/* New since step 1, or a dropped one pushed again since step 3. */
		if ((rc = read_manifest(rem, url, &again.v[j])))
			goto out;
		out->manifests_late++;
		if ((rc = add_chunks(&keep, &again.v[j])))
			goto out;
	}
	out->chunks_referenced = keep.n;

	/* 5. unreferenced chunks older than the grace */
	for (size_t i = 0; i < ch.n; i++) {
		ckq_entry *e = ckq_set_find(&keep, &ch.v[i].h);
		if (e) {
			e->state = 1;
			continue;
		}
		if (ch.v[i].mtime < 0 || now - ch.v[i].mtime < (int64_t)p->grace_s) {
			out->chunks_young++;
			out->young_bytes += ch.v[i].size;
			continue;
		}
		if (!p->dry_run) {
			char key[64], hex[STORE_HASH_HEX];
			snprintf(key, sizeof(key), "chunks/%s", store_hash_hex(&ch.v[i].h, hex));
			if ((rc = store_remote_delete(rem, key))) {
				qe_fail_ctx(rc, "remote gc: deleting unreferenced chunk %zu of %zu (the dropped manifests are "
						"gone; run gc again)",
					    i + 1, ch.n);
				goto out;
			}
		}
		out->chunks_deleted++;
		out->chunk_bytes_deleted += ch.v[i].size;
		out->bytes_reclaimed += ch.v[i].size;
	}
	for (size_t i = 0; i < keep.cap; i++)
		if (keep.e[i].used && !keep.e[i].state)
			out->chunks_missing++;
	if (out->chunks_missing)
		qe_log(QE_LOG_WARN, "remote gc: %llu chunks that remaining manifests list are not under %s",
		       (unsigned long long)out->chunks_missing, url);
out:
	if (rem) {
		store_remote_stats st;
		store_remote_get_stats(rem, &st);
		out->requests = st.requests;
	}
	out->ms = ckpt__remote_now_ms() - t0;
	ckq_set_free(&keep);
	free(ch.v);
	rman_list_free(&again);
	rman_list_free(&man);
	store_remote_close(rem);
	free(local_run);
	cat_close(c);
	return rc;
}

void ckpt_remote_gc_report_free(ckpt_remote_gc_report *g)
{
	if (!g)
		return;
	free(g->items);
	free(g->missing_pins);
	memset(g, 0, sizeof(*g));
}
