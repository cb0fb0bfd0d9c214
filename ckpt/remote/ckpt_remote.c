/*
 * ckpt_remote.c - pushing committed checkpoints to S3-compatible storage.
 *
 * Order of a push, and why:
 *  1. one cheap signed request, so wrong credentials, a missing bucket or an
 *     unreachable endpoint fail before anything is sent;
 *  2. every distinct chunk the checkpoint references: HEAD, and upload only
 *     when absent or of the wrong size (chunks are content-addressed, so a
 *     present one of the right size is the same bytes); every chunk is read
 *     through the local store, which re-hashes it, so a damaged local chunk
 *     is never replicated;
 *  3. the manifest, last: its presence is the remote commit;
 *  4. the catalog row recording the copy (cat_remote_add).
 * A failure in 2 or 3 leaves no manifest, so the remote never shows a
 * checkpoint whose chunks are not all there.
 */
#include "ckpt/remote/ckpt_remote_int.h"
#include "ckpt/session/rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* QE_REMOTE_PAUSE=N:FILE - see ckpt_remote.h. */
typedef struct pause_hook {
	long after;
	char file[1024];
	long uploads;
} pause_hook;

static int pause_parse(pause_hook *p)
{
	memset(p, 0, sizeof(*p));
	const char *v = ckpt_opt_text(ckpt_options_get()->remote_pause);
	if (!v || !v[0])
		return QE_OK;
	int n = 0;
	if (sscanf(v, "%ld:%n", &p->after, &n) != 1 || n == 0 || p->after < 1 || !v[n] ||
	    strlen(v + n) >= sizeof(p->file))
		return qe_fail(QE_EINVAL, "QE_REMOTE_PAUSE='%s' is not N:FILE (N >= 1)", v);
	snprintf(p->file, sizeof(p->file), "%s", v + n);
	qe_log(QE_LOG_INFO, "push: test pause armed after %ld chunk uploads (%s)", p->after, p->file);
	return QE_OK;
}

static void pause_maybe(pause_hook *p)
{
	if (!p->after || ++p->uploads != p->after)
		return;
	FILE *f = fopen(p->file, "w");
	if (!f) {
		qe_log(QE_LOG_WARN, "push: test pause: cannot create '%s': %s", p->file, strerror(errno));
		return;
	}
	fclose(f);
	qe_log(QE_LOG_INFO, "push: test pause after %ld uploads: waiting for '%s' to go", p->uploads, p->file);
	for (int i = 0; i < 12000 && access(p->file, F_OK) == 0; i++)
		usleep(10000);
}

/* Hashes known to be on the remote during this push (sorted). */
typedef struct known_set {
	cat_chunk *v;
	size_t n, cap;
} known_set;

static int known_has(const known_set *k, const cat_chunk *c)
{
	size_t lo = 0, hi = k->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int d = memcmp(k->v[mid].hash, c->hash, 16);
		if (d == 0)
			return k->v[mid].size == c->size;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int known_add_sorted(known_set *k, const cat_chunk *add, size_t n)
{
	/* add is sorted; merge. */
	cat_chunk *v = qe_malloc((k->n + n + 1) * sizeof(*v));
	if (!v)
		return qe_fail(QE_ENOMEM, "out of memory");
	size_t i = 0, j = 0, m = 0;
	while (i < k->n || j < n) {
		if (j == n || (i < k->n && memcmp(k->v[i].hash, add[j].hash, 16) < 0))
			v[m++] = k->v[i++];
		else if (i == k->n || memcmp(k->v[i].hash, add[j].hash, 16) > 0)
			v[m++] = add[j++];
		else
			v[m++] = add[j++], i++;
	}
	free(k->v);
	k->v = v;
	k->n = m;
	return QE_OK;
}

typedef struct push_ctx {
	const char *run_dir;
	const char *url;
	cat *cat;
	ckpt_storeset *st; /* the run's stores on this host */
	store_remote *rem;
	cat_run run;
	known_set known;
	pause_hook pause;
	unsigned char *buf;
	size_t cap;
} push_ctx;

static int read_storeset(void *ctx, const store_hash *h, void *dst, size_t cap, uint64_t *size)
{
	return ckpt_storeset_get_chunk((ckpt_storeset *)ctx, h, dst, cap, size);
}

static int push_chunks(push_ctx *p, const cat_chunk *ch, size_t n, ckpt_push_result *res)
{
	ckpt__uploader u = { .rem = p->rem, .buf = p->buf, .cap = p->cap };
	int rc = QE_OK;
	for (size_t i = 0; i < n && !rc; i++) {
		if (known_has(&p->known, &ch[i])) { /* an earlier checkpoint of this push sent it */
			res->chunks_present++;
			continue;
		}
		uint64_t up = u.uploaded;
		if ((rc = ckpt__upload_chunk(&u, ch[i].hash, ch[i].size, read_storeset, p->st, "the run's stores")))
			qe_fail_ctx(rc, "push of step %lld: chunk %zu of %zu", (long long)res->step, i + 1, n);
		else if (u.uploaded > up)
			pause_maybe(&p->pause);
	}
	p->buf = u.buf;
	p->cap = u.cap;
	res->chunks_present += u.present;
	res->chunks_uploaded += u.uploaded;
	res->bytes_uploaded += u.bytes;
	return rc ? rc : known_add_sorted(&p->known, ch, n);
}

static int push_one(push_ctx *p, const cat_ckpt *ck, ckpt_push_result *res)
{
	double t0 = ckpt__remote_now_ms();
	cat_tensor_rows tensors = { 0 };
	cat_shard_rows shards = { 0 };
	cat_chunk *chunks = NULL;
	size_t nchunks = 0;
	char *text = NULL;
	char key[256];
	int rc;
	memset(res, 0, sizeof(*res));
	snprintf(res->run_id, sizeof(res->run_id), "%s", ck->run_id);
	res->step = ck->step;
	res->ckpt_id = ck->id;
	res->bytes = ck->bytes;
	if ((rc = ckpt__manifest_key(ck->run_id, ck->step, key, sizeof(key))) ||
	    (rc = cat_ckpt_tensors(p->cat, ck->id, &tensors)) || (rc = cat_ckpt_shards(p->cat, ck->id, &shards)) ||
	    (rc = ckpt__distinct_chunks(&tensors, &chunks, &nchunks)) ||
	    (rc = ckpt__manifest_build(ck, p->run.config_json, &shards, &tensors, &text)))
		goto out;
	res->chunks = nchunks;
	if ((rc = push_chunks(p, chunks, nchunks, res)))
		goto out;
	/* The remote commit. */
	size_t len = strlen(text);
	if ((rc = ckpt__manifest_put(p->rem, key, text, len))) {
		qe_fail_ctx(rc, "push of step %lld: writing the manifest (the remote commit)", (long long)ck->step);
		goto out;
	}
	ckpt__manifest_hash(text, len, res->manifest_hash);
	ckpt__remote_object_url(p->url, key, res->manifest_url, sizeof(res->manifest_url));
	if ((rc = cat_remote_add(p->cat, ck->id, res->manifest_url, res->manifest_hash)))
		qe_fail_ctx(rc, "push of step %lld: committed remotely at %s, but recording it in the catalog failed",
			    (long long)ck->step, res->manifest_url);
	res->ms = ckpt__remote_now_ms() - t0;
out:
	free(text);
	free(chunks);
	cat_tensor_rows_free(&tensors);
	cat_shard_rows_free(&shards);
	return rc;
}

static int open_run(const char *run_dir, cat **c, cat_run *run)
{
	char path[CKPT_PATH_MAX], *id = NULL;
	int rc;
	if ((rc = ckpt_rundir_catalog(run_dir, path, sizeof(path))))
		return rc;
	if (access(path, F_OK))
		return qe_fail(QE_ENOTFOUND, "run directory '%s' has no catalog (%s): not a qeffect run", run_dir, path);
	if ((rc = cat_open(path, 0, c)))
		return rc;
	if ((rc = cat_meta_get(*c, "run_id", &id)) || (rc = cat_run_get(*c, id, run)))
		qe_fail_ctx(rc, "catalog '%s'", path);
	free(id);
	return rc;
}

int ckpt_remote_push(const char *run_dir, const char *url, const store_remote_opts *ro, int64_t step,
		     ckpt_push_cb cb, void *cbctx)
{
	push_ctx p;
	memset(&p, 0, sizeof(p));
	p.run_dir = run_dir;
	p.url = url;
	cat_ckpt_rows all = { 0 };
	int rc;
	if ((rc = pause_parse(&p.pause)) || (rc = open_run(run_dir, &p.cat, &p.run)))
		goto out;
	if ((rc = cat_ckpt_list(p.cat, p.run.run_id, &all)))
		goto out;
	/* Which checkpoints: committed ones only. */
	size_t nsel = 0, last = (size_t)-1, at = (size_t)-1;
	char steps[400] = "";
	size_t sl = 0;
	for (size_t i = 0; i < all.n; i++) {
		if (all.rows[i].status != CAT_COMMITTED)
			continue;
		nsel++;
		last = i;
		if (all.rows[i].step == step)
			at = i;
		if (sl < sizeof(steps) - 24)
			sl += (size_t)snprintf(steps + sl, sizeof(steps) - sl, "%s%lld", nsel > 1 ? ", " : "",
					       (long long)all.rows[i].step);
	}
	if (!nsel) {
		rc = qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint to push", p.run.run_id, run_dir);
		goto out;
	}
	if (step >= 0 && at == (size_t)-1) {
		rc = qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint at step %lld (committed steps: %s)",
			     p.run.run_id, run_dir, (long long)step, steps);
		goto out;
	}
	if (!ckpt__valid_run_id(p.run.run_id)) {
		rc = qe_fail(QE_EINVAL, "run id '%s' cannot name a remote object", p.run.run_id);
		goto out;
	}
	if ((rc = ckpt_storeset_open(run_dir, p.run.run_id, 0, &p.st)))
		goto out;
	if ((rc = store_remote_open(url, ro, &p.rem)) || (rc = store_remote_check(p.rem)))
		goto out;
	for (size_t i = 0; i < all.n && !rc; i++) {
		const cat_ckpt *ck = &all.rows[i];
		if (ck->status != CAT_COMMITTED)
			continue;
		if (step == CKPT_PUSH_LATEST && i != last)
			continue;
		if (step >= 0 && i != at)
			continue;
		ckpt_push_result res;
		rc = push_one(&p, ck, &res);
		if (!rc && cb)
			rc = cb(cbctx, &res);
	}
out:
	cat_ckpt_rows_free(&all);
	cat_run_release(&p.run);
	store_remote_close(p.rem);
	ckpt_storeset_close(p.st);
	cat_close(p.cat);
	free(p.known.v);
	free(p.buf);
	return rc;
}
