/*
 * ckpt_query.c - picking a checkpoint of an open run (ckpt_run_open,
 * ckpt/session/rundir.c), reading a tensor back through the store, and
 * decoding what a tensor holds (FP8 meta per linear and role, a value
 * summary).  Verify and gc live in ckpt_query_verify.c and ckpt_query_gc.c.
 *
 * The decoders take bytes, not a store, so tests can check them against
 * values they wrote themselves.
 */
#include "ckpt/query/ckpt_query_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

/* --- hash set ------------------------------------------------------------------ */

static size_t slot_of(const store_hash *h, size_t cap)
{
	uint64_t v;
	memcpy(&v, h->b, 8);
	return (size_t)(v & (cap - 1));
}

static int set_grow(ckq_set *s)
{
	size_t cap = s->cap ? s->cap * 2 : 1024;
	ckq_entry *e = qe_calloc(cap, sizeof(*e));
	if (!e)
		return QE_ENOMEM;
	for (size_t i = 0; i < s->cap; i++) {
		if (!s->e[i].used)
			continue;
		size_t j = slot_of(&s->e[i].h, cap);
		while (e[j].used)
			j = (j + 1) & (cap - 1);
		e[j] = s->e[i];
	}
	free(s->e);
	s->e = e;
	s->cap = cap;
	return QE_OK;
}

ckq_entry *ckq_set_find(const ckq_set *s, const store_hash *h)
{
	if (!s->cap)
		return NULL;
	for (size_t j = slot_of(h, s->cap);; j = (j + 1) & (s->cap - 1)) {
		if (!s->e[j].used)
			return NULL;
		if (memcmp(s->e[j].h.b, h->b, STORE_HASH_BYTES) == 0)
			return &s->e[j];
	}
}

ckq_entry *ckq_set_add(ckq_set *s, const store_hash *h, uint64_t size, int *added)
{
	ckq_entry *e = ckq_set_find(s, h);
	if (added)
		*added = !e;
	if (e)
		return e;
	if ((s->n + 1) * 2 > s->cap && set_grow(s))
		return NULL;
	size_t j = slot_of(h, s->cap);
	while (s->e[j].used)
		j = (j + 1) & (s->cap - 1);
	e = &s->e[j];
	memset(e, 0, sizeof(*e));
	e->h = *h;
	e->size = size;
	e->used = 1;
	s->n++;
	return e;
}

void ckq_set_free(ckq_set *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->e[i].why);
	free(s->e);
	memset(s, 0, sizeof(*s));
}

static int add_ref(void *ctx, const unsigned char hash[16], uint64_t size)
{
	store_hash h;
	memcpy(h.b, hash, STORE_HASH_BYTES);
	return ckq_set_add(ctx, &h, size, NULL) ? 0 : qe_fail(QE_ENOMEM, "chunk set: out of memory");
}

int ckq_set_referenced(cat *c, ckq_set *s)
{
	return cat_referenced_chunks(c, add_ref, s);
}

int64_t ckq_parse_time(const char *iso)
{
	struct tm tm;
	int Y, M, D, h, m;
	double sec;
	if (!iso || sscanf(iso, "%d-%d-%dT%d:%d:%lf", &Y, &M, &D, &h, &m, &sec) != 6)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = (int)sec;
	return (int64_t)timegm(&tm);
}

void ckq_describe_store(ckpt_run *r, const char *store_id, char *buf, size_t len)
{
	cat_store_rows l = { 0 };
	const cat_store *st = NULL;
	if (store_id && store_id[0] && cat_store_list(r->cat, r->run_id, &l) == QE_OK)
		st = cat_store_find(&l, store_id);
	if (!store_id || !store_id[0])
		snprintf(buf, len, "the shared store %s/store", r->dir);
	else if (st)
		snprintf(buf, len, "store %s of rank %d on host '%s' (%s)", store_id, st->rank, st->host, st->path);
	else
		snprintf(buf, len, "store %s", store_id);
	cat_store_rows_free(&l);
}

int ckpt_q_store_gone(ckpt_run *r, const char *store_id)
{
	if (!store_id || !store_id[0] || ckpt_storeset_find(r->stores, store_id) >= 0)
		return QE_OK;
	cat_store_rows l = { 0 };
	char host[CKPT_HOST_MAX];
	ckpt_host_name(host, sizeof(host));
	int rc = QE_OK;
	if (cat_store_list(r->cat, r->run_id, &l) == QE_OK) {
		const cat_store *st = cat_store_find(&l, store_id);
		char root[CKPT_PATH_MAX];
		if (ckpt_rundir_stores(r->dir, root, sizeof(root)))
			snprintf(root, sizeof(root), "%s/stores", r->dir);
		if (st && st->host && !strcmp(st->host, host))
			rc = qe_fail(QE_ENOTFOUND,
				     "store %s of rank %d was made on this host ('%s') at %s and is not there now (looked "
				     "in %s)",
				     store_id, st->rank, host, st->path, root);
	}
	cat_store_rows_free(&l);
	return rc;
}

/* --- list and select ------------------------------------------------------------- */

int ckpt_q_list(ckpt_run *r, cat_ckpt_rows *out)
{
	int rc = cat_ckpt_list(r->cat, r->run_id, out);
	return rc ? qe_fail_ctx(rc, "run '%s'", r->dir) : QE_OK;
}

/* "3 (committed), 6 (pending)" into buf, for messages about a missing step. */
static void describe_steps(const cat_ckpt_rows *l, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (size_t i = 0; i < l->n && o + 40 < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld (%s)", i ? ", " : "", (long long)l->rows[i].step,
				      cat_status_name(l->rows[i].status));
	if (!l->n)
		snprintf(buf, len, "none");
}

int ckpt_q_select(ckpt_run *r, int64_t step, cat_ckpt *out)
{
	memset(out, 0, sizeof(*out));
	int rc = step < 0 ? cat_ckpt_latest_committed(r->cat, r->run_id, out) : cat_ckpt_get(r->cat, r->run_id, step, out);
	if (rc != QE_ENOTFOUND)
		return rc ? qe_fail_ctx(rc, "run '%s'", r->dir) : QE_OK;
	cat_ckpt_rows l = { 0 };
	if ((rc = cat_ckpt_list(r->cat, r->run_id, &l)))
		return qe_fail_ctx(rc, "run '%s'", r->dir);
	int64_t pick = -1;
	for (size_t i = 0; step >= 0 && i < l.n; i++)
		if (l.rows[i].step == step)
			pick = l.rows[i].id; /* by step then id: the last one is the newest attempt */
	char steps[512];
	describe_steps(&l, steps, sizeof(steps));
	cat_ckpt_rows_free(&l);
	if (pick >= 0)
		return cat_ckpt_get_id(r->cat, pick, out);
	if (step < 0)
		return qe_fail(QE_ENOTFOUND, "run '%s' has no committed checkpoint (checkpoints: %s)", r->dir, steps);
	return qe_fail(QE_ENOTFOUND, "run '%s' has no checkpoint at step %lld (checkpoints: %s)", r->dir,
		       (long long)step, steps);
}

int ckpt_q_stage_of(const cat_tensor *t)
{
	return strncmp(t->name, CKPT_RUN_PREFIX, strlen(CKPT_RUN_PREFIX)) == 0 ? -1 : t->stage;
}

const char *ckpt_q_base_name(const cat_tensor *t)
{
	return ckpt_q_stage_of(t) < 0 && t->stage >= 0 ? t->name + strlen(CKPT_RUN_PREFIX) : t->name;
}

const cat_tensor *ckpt_q_find(const cat_tensor_rows *tr, int stage, const char *name)
{
	for (size_t i = 0; i < tr->n; i++)
		if (ckpt_q_stage_of(&tr->rows[i]) == stage && strcmp(ckpt_q_base_name(&tr->rows[i]), name) == 0)
			return &tr->rows[i];
	return NULL;
}

int ckpt_q_is_runtime_state(const cat_tensor *t)
{
	return strcmp(t->kind, "param") && strcmp(t->kind, "adam_m") && strcmp(t->kind, "adam_v");
}

/* --- reading ----------------------------------------------------------------------- */

int ckpt_q_read(ckpt_run *r, const cat_tensor *t, void **data)
{
	*data = NULL;
	uint64_t sum = 0;
	for (size_t i = 0; i < t->n_chunks; i++)
		sum += t->chunks[i].size;
	if (sum != t->bytes)
		return qe_fail(QE_ECORRUPT,
			       "tensor '%s' of stage %d: the catalog lists %zu chunks of %llu bytes in all, but %llu "
			       "bytes for the tensor",
			       t->name, t->stage, t->n_chunks, (unsigned long long)sum, (unsigned long long)t->bytes);
	int si = ckpt_storeset_find(r->stores, t->store_id);
	if (si < 0 && ckpt_q_store_gone(r, t->store_id))
		return qe_fail_ctx(QE_ENOTFOUND, "tensor '%s' of stage %d", t->name, t->stage);
	if (si < 0) {
		char where[400];
		ckq_describe_store(r, t->store_id, where, sizeof(where));
		return qe_fail(QE_ENOTFOUND, "tensor '%s' of stage %d: its chunks are in %s, which is not on this host",
			       t->name, t->stage, where);
	}
	if ((size_t)t->bytes != t->bytes)
		return qe_fail(QE_ENOMEM, "tensor '%s' of stage %d: too large for this machine", t->name, t->stage);
	void *buf = qe_malloc(t->bytes ? (size_t)t->bytes : 1);
	store_chunk *ch = qe_malloc((t->n_chunks ? t->n_chunks : 1) * sizeof(*ch));
	if (!buf || !ch) {
		free(buf);
		free(ch);
		return qe_fail(QE_ENOMEM, "tensor '%s' of stage %d: out of memory for %llu bytes", t->name, t->stage,
			       (unsigned long long)t->bytes);
	}
	for (size_t i = 0; i < t->n_chunks; i++) {
		memcpy(ch[i].hash.b, t->chunks[i].hash, STORE_HASH_BYTES);
		ch[i].size = t->chunks[i].size;
	}
	store_chunk_list l = { t->n_chunks, ch };
	int rc = store_get_tensor(ckpt_storeset_at(r->stores, si), &l, buf, (size_t)t->bytes);
	free(ch);
	if (rc) {
		free(buf);
		return qe_fail_ctx(rc, "tensor '%s' of stage %d", t->name, t->stage);
	}
	*data = buf;
	return QE_OK;
}

int ckpt_q_parse_shape(const char *text, int64_t *dims, int max, int *ndim)
{
	const char *p = text;
	int n = 0;
	*ndim = 0;
	if (!p || *p++ != '[')
		return qe_fail(QE_EINVAL, "shape '%s': does not start with '['", text ? text : "(null)");
	while (*p == ' ')
		p++;
	if (*p == ']' && !p[1])
		return QE_OK;
	for (;;) {
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || v < 0)
			return qe_fail(QE_EINVAL, "shape '%s': bad dimension", text);
		if (n == max)
			return qe_fail(QE_EINVAL, "shape '%s': more than %d dimensions", text, max);
		dims[n++] = v;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == ']' && !p[1])
			break;
		if (*p++ != ',')
			return qe_fail(QE_EINVAL, "shape '%s': expected ',' or a final ']'", text);
	}
	*ndim = n;
	return QE_OK;
}

int ckpt_q_fp8_meta(const cat_tensor *t, const void *data, ckpt_fp8_meta *out)
{
	const int nroles = qe_pstate_fp8_roles();
	int64_t d[4];
	int nd;
	memset(out, 0, sizeof(*out));
	if (ckpt_q_parse_shape(t->shape, d, 4, &nd) || nd != 3 || d[1] != nroles || d[2] < 3 || d[0] < 1 ||
	    strcmp(t->dtype, "f32"))
		return qe_fail(QE_ECORRUPT,
			       "fp8 meta '%s' of stage %d: shape %s dtype %s, want [linears,%d,history+2] of f32", t->name,
			       t->stage, t->shape, t->dtype, nroles);
	uint64_t floats = (uint64_t)d[0] * (uint64_t)d[1] * (uint64_t)d[2];
	if (floats * 4 != t->bytes)
		return qe_fail(QE_ECORRUPT, "fp8 meta '%s' of stage %d: shape %s needs %llu bytes, the tensor has %llu",
			       t->name, t->stage, t->shape, (unsigned long long)(floats * 4),
			       (unsigned long long)t->bytes);
	out->values = qe_malloc((size_t)t->bytes);
	out->rows = qe_calloc((size_t)(d[0] * d[1]), sizeof(*out->rows));
	if (!out->values || !out->rows) {
		ckpt_fp8_meta_free(out);
		return qe_fail(QE_ENOMEM, "fp8 meta: out of memory");
	}
	memcpy(out->values, data, (size_t)t->bytes);
	int L = (int)(d[2] - 2);
	for (int64_t lin = 0; lin < d[0]; lin++) {
		for (int role = 0; role < nroles; role++) {
			ckpt_fp8_role *row = &out->rows[out->n++];
			const float *blk = out->values + (lin * nroles + role) * d[2];
			row->stage = t->stage;
			row->linear = (int)lin;
			qe_pstate_fp8_linear_label((int)lin, (int)d[0], row->linear_name, sizeof(row->linear_name));
			row->role = role;
			row->role_name = qe_pstate_fp8_role_name(role);
			row->history_len = L;
			row->history = blk;
			row->scale = blk[L];
			row->scale_inv = blk[L + 1];
		}
	}
	return QE_OK;
}

void ckpt_fp8_meta_free(ckpt_fp8_meta *m)
{
	free(m->rows);
	free(m->values);
	memset(m, 0, sizeof(*m));
}

int ckpt_q_summarize(const cat_tensor *t, const void *data, ckpt_summary *out)
{
	memset(out, 0, sizeof(*out));
	int f32 = strcmp(t->dtype, "f32") == 0;
	int i64 = !f32 && t->bytes % 8 == 0 && t->bytes > 0 && strcmp(t->kind, "runtime") == 0;
	if (f32 && t->bytes % 4)
		return qe_fail(QE_ECORRUPT, "tensor '%s' of stage %d: %llu bytes is not a whole number of f32 values",
			       t->name, t->stage, (unsigned long long)t->bytes);
	out->as = f32 ? "f32" : i64 ? "i64" : "u8";
	uint64_t n = f32 ? t->bytes / 4 : i64 ? t->bytes / 8 : t->bytes;
	double sum = 0, sq = 0;
	uint64_t finite = 0;
	out->count = n;
	for (uint64_t i = 0; i < n; i++) {
		double v;
		if (f32) {
			float f;
			memcpy(&f, (const char *)data + i * 4, 4);
			v = f;
		} else if (i64) {
			int64_t x;
			memcpy(&x, (const char *)data + i * 8, 8);
			v = (double)x;
		} else {
			v = ((const unsigned char *)data)[i];
		}
		if (out->nfirst < CKPT_SUMMARY_FIRST)
			out->first[out->nfirst++] = v;
		if (!isfinite(v)) {
			out->nonfinite++;
			continue;
		}
		if (!finite || v < out->min)
			out->min = v;
		if (!finite || v > out->max)
			out->max = v;
		finite++;
		sum += v;
		sq += v * v;
	}
	if (finite) {
		out->mean = sum / (double)finite;
		out->rms = sqrt(sq / (double)finite);
	}
	return QE_OK;
}

int ckpt_q_redundancy(ckpt_run *r, int64_t id, ckpt_redundancy *out)
{
	memset(out, 0, sizeof(*out));
	int rc = cat_ckpt_redundancy_of(r->cat, id, CKPT_MEMORY_STORE_PREFIX, 0, &out->copies, &out->hosts);
	if (!rc)
		rc = cat_ckpt_redundancy_of(r->cat, id, CKPT_MEMORY_STORE_PREFIX, 1, &out->memory_copies, &out->memory_hosts);
	return rc;
}
