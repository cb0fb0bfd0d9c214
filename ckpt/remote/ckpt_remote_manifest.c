/*
 * ckpt_remote_manifest.c - the manifest of a remote checkpoint: written from
 * the local catalog rows at push, read back and checked at pull.
 *
 * The manifest is JSON so that people and other tools (aws s3 cp ... -) can
 * read it.  Keys are sorted and nothing time-dependent about the push goes
 * in, so pushing the same checkpoint twice writes the same bytes (and the
 * catalog's manifest hash stays the same).  A reader checks every field
 * before using any: a manifest is input from the network.
 */
#include "ckpt/remote/ckpt_remote_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "runtime/core/fault.h"
#include "runtime/core/status.h"

double ckpt__remote_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int ckpt__valid_run_id(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n > 63 || id[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)id[i]) || id[i] == '.' || id[i] == '_' || id[i] == '-'))
			return 0;
	return 1;
}

int ckpt__manifest_key(const char *run_id, int64_t step, char *buf, size_t len)
{
	if (!ckpt__valid_run_id(run_id))
		return qe_fail(QE_EINVAL, "run id '%s' cannot name a remote object (1..63 of A-Z a-z 0-9 . _ -)",
			       run_id ? run_id : "");
	if ((size_t)snprintf(buf, len, "checkpoints/%s/%lld/manifest.json", run_id, (long long)step) >= len)
		return qe_fail(QE_EINVAL, "manifest key too long for run '%s'", run_id);
	return QE_OK;
}

void ckpt__chunk_key(const unsigned char hash[16], char *buf, size_t len)
{
	store_hash h;
	char hex[STORE_HASH_HEX];
	memcpy(h.b, hash, 16);
	snprintf(buf, len, "chunks/%s", store_hash_hex(&h, hex));
}

void ckpt__remote_object_url(const char *url, const char *key, char *buf, size_t len)
{
	size_t ul = strlen(url);
	while (ul > 5 && url[ul - 1] == '/')
		ul--;
	snprintf(buf, len, "%.*s/%s", (int)ul, url, key);
}

void ckpt__manifest_hash(const void *data, size_t len, char out[33])
{
	store_hash h;
	store_hash_of(data, len, &h);
	store_hash_hex(&h, out);
}

static int cmp_chunk(const void *a, const void *b)
{
	return memcmp(((const cat_chunk *)a)->hash, ((const cat_chunk *)b)->hash, 16);
}

int ckpt__distinct_chunks(const cat_tensor_rows *t, cat_chunk **out, size_t *n)
{
	size_t total = 0;
	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < t->n; i++)
		total += t->rows[i].n_chunks;
	cat_chunk *all = qe_calloc(total + 1, sizeof(*all));
	if (!all)
		return qe_fail(QE_ENOMEM, "out of memory listing %zu chunks", total);
	size_t k = 0;
	for (size_t i = 0; i < t->n; i++)
		for (size_t j = 0; j < t->rows[i].n_chunks; j++)
			all[k++] = t->rows[i].chunks[j];
	qsort(all, k, sizeof(*all), cmp_chunk);
	size_t m = 0;
	for (size_t i = 0; i < k; i++)
		if (m == 0 || cmp_chunk(&all[m - 1], &all[i]))
			all[m++] = all[i];
	*out = all;
	*n = m;
	return QE_OK;
}

/* ---- writing ---------------------------------------------------------------- */

int ckpt__manifest_build(const cat_ckpt *ck, const char *config_json, const cat_shard_rows *shards,
			 const cat_tensor_rows *tensors, char **text)
{
	*text = NULL;
	json_error_t jerr;
	json_t *config = json_loads(config_json && config_json[0] ? config_json : "{}", 0, &jerr);
	if (!config)
		return qe_fail(QE_ECORRUPT, "run '%s': its configuration in the catalog is not JSON: %s", ck->run_id,
			       jerr.text);
	json_t *m = json_object(), *sh = json_array(), *ts = json_array();
	int bad = !m || !sh || !ts;
	for (size_t i = 0; !bad && i < shards->n; i++)
		bad |= json_array_append_new(sh, json_pack("{s:i,s:i,s:I}", "stage", shards->rows[i].stage, "rank",
							   shards->rows[i].rank, "bytes", (json_int_t)shards->rows[i].bytes));
	for (size_t i = 0; !bad && i < tensors->n; i++) {
		const cat_tensor *t = &tensors->rows[i];
		json_t *ch = json_array();
		bad |= !ch;
		for (size_t j = 0; !bad && j < t->n_chunks; j++) {
			store_hash h;
			char hex[STORE_HASH_HEX];
			memcpy(h.b, t->chunks[j].hash, 16);
			bad |= json_array_append_new(ch, json_pack("{s:s,s:I}", "hash", store_hash_hex(&h, hex), "size",
								   (json_int_t)t->chunks[j].size));
		}
		if (bad) {
			json_decref(ch);
			break;
		}
		/* "store": the store that held the chunks when pushed (information; a pull names its own). */
		bad |= json_array_append_new(ts, json_pack("{s:i,s:s,s:s,s:s,s:s,s:I,s:o,s:s}", "stage", t->stage, "name",
							   t->name, "kind", t->kind, "dtype", t->dtype, "shape", t->shape,
							   "bytes", (json_int_t)t->bytes, "chunks", ch, "store",
							   t->store_id ? t->store_id : ""));
	}
	if (!bad) {
		bad |= json_object_set_new(m, "format", json_string(CKPT_MANIFEST_FORMAT));
		bad |= json_object_set_new(m, "version", json_integer(CKPT_MANIFEST_VERSION));
		bad |= json_object_set_new(m, "run_id", json_string(ck->run_id));
		bad |= json_object_set_new(m, "step", json_integer(ck->step));
		bad |= json_object_set_new(m, "e_w", json_integer(ck->e_w));
		bad |= json_object_set_new(m, "created", json_string(ck->created ? ck->created : ""));
		bad |= json_object_set_new(m, "committed_at", json_string(ck->committed_at ? ck->committed_at : ""));
		bad |= json_object_set_new(m, "topology", json_string(ck->topology ? ck->topology : ""));
		bad |= json_object_set_new(m, "schedule", json_string(ck->schedule ? ck->schedule : ""));
		bad |= json_object_set_new(m, "recipe", json_string(ck->recipe ? ck->recipe : ""));
		bad |= json_object_set_new(m, "bytes", json_integer((json_int_t)ck->bytes));
		bad |= json_object_set_new(m, "runtime_state_bytes", json_integer((json_int_t)ck->runtime_state_bytes));
		bad |= json_object_set(m, "config", config);
		bad |= json_object_set(m, "shards", sh);
		bad |= json_object_set(m, "tensors", ts);
	}
	if (!bad)
		*text = json_dumps(m, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_decref(m);
	json_decref(sh);
	json_decref(ts);
	json_decref(config);
	if (!*text)
		return qe_fail(QE_ENOMEM, "checkpoint %lld of run '%s': building its manifest failed (out of memory?)",
			       (long long)ck->step, ck->run_id);
	return QE_OK;
}

/* ---- reading ------------------------------------------------------------------ */

void ckpt__manifest_release(ckpt_manifest *m)
{
	if (!m)
		return;
	free(m->run_id);
	free(m->created);
	free(m->committed_at);
	free(m->topology);
	free(m->schedule);
	free(m->recipe);
	free(m->config_json);
	cat_shard_rows_free(&m->shards);
	cat_tensor_rows_free(&m->tensors);
	memset(m, 0, sizeof(*m));
}

static int get_str(json_t *o, const char *key, char **out, const char *where, const char *ctx)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v))
		return qe_fail(QE_ECORRUPT, "manifest %s: %s%s'%s' is missing or not a string", where, ctx,
			       ctx[0] ? ": " : "", key);
	if (!(*out = qe_strdup(json_string_value(v))))
		return qe_fail(QE_ENOMEM, "out of memory");
	return QE_OK;
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t *out, const char *where, const char *ctx)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < lo)
		return qe_fail(QE_ECORRUPT, "manifest %s: %s%s'%s' is missing or not an integer >= %lld", where, ctx,
			       ctx[0] ? ": " : "", key, (long long)lo);
	*out = (int64_t)json_integer_value(v);
	return QE_OK;
}

static int parse_tensor(json_t *o, size_t i, const char *where, cat_tensor *t)
{
	char ctx[64];
	int64_t v = 0;
	int rc;
	snprintf(ctx, sizeof(ctx), "tensor %zu", i);
	if (!json_is_object(o))
		return qe_fail(QE_ECORRUPT, "manifest %s: %s is not an object", where, ctx);
	if ((rc = get_int(o, "stage", 0, &v, where, ctx)))
		return rc;
	t->stage = (int)v;
	if ((rc = get_str(o, "name", &t->name, where, ctx)) || (rc = get_str(o, "kind", &t->kind, where, ctx)) ||
	    (rc = get_str(o, "dtype", &t->dtype, where, ctx)) || (rc = get_str(o, "shape", &t->shape, where, ctx)) ||
	    (rc = get_int(o, "bytes", 0, &v, where, ctx)))
		return rc;
	t->bytes = (uint64_t)v;
	/* optional (manifests before per-rank stores have none) */
	json_t *so = json_object_get(o, "store");
	if (!(t->store_id = qe_strdup(json_is_string(so) ? json_string_value(so) : "")))
		return qe_fail(QE_ENOMEM, "out of memory");
	json_t *ch = json_object_get(o, "chunks");
	if (!json_is_array(ch))
		return qe_fail(QE_ECORRUPT, "manifest %s: tensor '%s' (stage %d): 'chunks' is not an array", where, t->name,
			       t->stage);
	t->n_chunks = json_array_size(ch);
	t->chunks = qe_calloc(t->n_chunks + 1, sizeof(cat_chunk));
	if (!t->chunks)
		return qe_fail(QE_ENOMEM, "out of memory");
	uint64_t sum = 0;
	for (size_t j = 0; j < t->n_chunks; j++) {
		json_t *c = json_array_get(ch, j), *h = json_object_get(c, "hash"), *s = json_object_get(c, "size");
		store_hash sh;
		if (!json_is_string(h) || store_hash_parse(json_string_value(h), &sh) || strlen(json_string_value(h)) != 32 ||
		    !json_is_integer(s) || json_integer_value(s) < 0)
			return qe_fail(QE_ECORRUPT, "manifest %s: tensor '%s' (stage %d): chunk %zu is not {hash: 32 hex, size}",
				       where, t->name, t->stage, j);
		memcpy(t->chunks[j].hash, sh.b, 16);
		t->chunks[j].size = (uint64_t)json_integer_value(s);
		sum += t->chunks[j].size;
	}
	if (sum != t->bytes)
		return qe_fail(QE_ECORRUPT, "manifest %s: tensor '%s' (stage %d): chunks add up to %llu bytes, not %llu",
			       where, t->name, t->stage, (unsigned long long)sum, (unsigned long long)t->bytes);
	return QE_OK;
}

int ckpt__manifest_parse(const char *text, size_t len, const char *where, ckpt_manifest *out)
{
	memset(out, 0, sizeof(*out));
	json_error_t jerr;
	json_t *m = json_loadb(text, len, 0, &jerr);
	if (!m)
		return qe_fail(QE_ECORRUPT, "manifest %s is not JSON: %s (line %d)", where, jerr.text, jerr.line);
	int rc = QE_OK;
	int64_t v = 0;
	json_t *fmt = json_object_get(m, "format");
	if (!json_is_object(m) || !json_is_string(fmt) || strcmp(json_string_value(fmt), CKPT_MANIFEST_FORMAT)) {
		rc = qe_fail(QE_ECORRUPT, "%s is not a qeffect checkpoint manifest (format is not '%s')", where,
			     CKPT_MANIFEST_FORMAT);
		goto done;
	}
	if ((rc = get_int(m, "version", 1, &v, where, "")))
		goto done;
	if (v > CKPT_MANIFEST_VERSION) {
		rc = qe_fail(QE_EUNSUPPORTED, "manifest %s has version %lld; this build reads up to %d", where, (long long)v,
			     CKPT_MANIFEST_VERSION);
		goto done;
	}
	if ((rc = get_str(m, "run_id", &out->run_id, where, "")) || (rc = get_int(m, "step", 0, &out->step, where, "")) ||
	    (rc = get_int(m, "e_w", 0, &out->e_w, where, "")) || (rc = get_str(m, "created", &out->created, where, "")) ||
	    (rc = get_str(m, "committed_at", &out->committed_at, where, "")) ||
	    (rc = get_str(m, "topology", &out->topology, where, "")) ||
	    (rc = get_str(m, "schedule", &out->schedule, where, "")) ||
	    (rc = get_str(m, "recipe", &out->recipe, where, "")) || (rc = get_int(m, "bytes", 0, &v, where, "")))
		goto done;
	out->bytes = (uint64_t)v;
	if ((rc = get_int(m, "runtime_state_bytes", 0, &v, where, "")))
		goto done;
	out->runtime_state_bytes = (uint64_t)v;
	if (!ckpt__valid_run_id(out->run_id)) {
		rc = qe_fail(QE_ECORRUPT, "manifest %s: run id '%s' is not a valid run id", where, out->run_id);
		goto done;
	}
	json_t *cfg = json_object_get(m, "config");
	if (!json_is_object(cfg)) {
		rc = qe_fail(QE_ECORRUPT, "manifest %s: 'config' is missing or not an object", where);
		goto done;
	}
	if (!(out->config_json = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS))) {
		rc = qe_fail(QE_ENOMEM, "out of memory");
		goto done;
	}
	json_t *sh = json_object_get(m, "shards"), *ts = json_object_get(m, "tensors");
	if (!json_is_array(sh) || !json_is_array(ts)) {
		rc = qe_fail(QE_ECORRUPT, "manifest %s: 'shards' or 'tensors' is missing or not an array", where);
		goto done;
	}
	out->shards.n = json_array_size(sh);
	out->shards.rows = qe_calloc(out->shards.n + 1, sizeof(cat_shard));
	out->tensors.rows = qe_calloc(json_array_size(ts) + 1, sizeof(cat_tensor));
	if (!out->shards.rows || !out->tensors.rows) {
		rc = qe_fail(QE_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < out->shards.n; i++) {
		json_t *s = json_array_get(sh, i);
		int64_t st, rk, by;
		if ((rc = get_int(s, "stage", 0, &st, where, "shard")) || (rc = get_int(s, "rank", 0, &rk, where, "shard")) ||
		    (rc = get_int(s, "bytes", 0, &by, where, "shard")))
			goto done;
		out->shards.rows[i] = (cat_shard){ (int)st, (int)rk, (uint64_t)by };
	}
	uint64_t total = 0;
	for (size_t i = 0; i < json_array_size(ts); i++) {
		out->tensors.n = i + 1; /* so a failure frees what was filled */
		if ((rc = parse_tensor(json_array_get(ts, i), i, where, &out->tensors.rows[i])))
			goto done;
		total += out->tensors.rows[i].bytes;
	}
	if (total != out->bytes) {
		rc = qe_fail(QE_ECORRUPT, "manifest %s: tensors add up to %llu bytes, the manifest says %llu", where,
			     (unsigned long long)total, (unsigned long long)out->bytes);
		goto done;
	}
done:
	json_decref(m);
	if (rc)
		ckpt__manifest_release(out);
	return rc;
}

int ckpt__manifest_put(store_remote *rem, const char *key, const char *text, size_t len)
{
	int rc = store_remote_put(rem, key, text, len);
	if (rc)
		return rc;
	void *back = NULL;
	size_t n = 0;
	if ((rc = store_remote_get(rem, key, len + 1, &back, &n)))
		return qe_fail_ctx(rc, "reading the manifest %s back", key);
	int same = n == len && !memcmp(back, text, len);
	free(back);
	if (!same)
		return qe_fail(QE_ESTORE,
			       "the manifest %s read back from %s is not the one written (%zu bytes, %zu read back): the "
			       "remote did not store it, and no remote copy is recorded",
			       key, store_remote_url(rem), len, n);
	return QE_OK;
}
