/*
 * ckpt_remote_pull.c - fetching a checkpoint from S3-compatible storage into
 * a run directory, so that `qeffect resume` continues it there.
 *
 * Order of a pull, and why:
 *  1. find the manifest (the remote commit) and check it completely;
 *  2. set up the run directory: a fresh one gets its catalog with the run
 *     row (the manifest's configuration, run_dir rewritten) and the store's
 *     ownership record; one that already holds the same run is added to, one
 *     that holds another run is refused;
 *  3. fetch each distinct chunk the local store lacks, re-hash it against
 *     its name and size, store it; flush the store;
 *  4. insert the checkpoint, its shards and tensor rows as 'pending' and
 *     commit it (cat_ckpt_commit, the local commit point), then record the
 *     remote copy.
 * A crash or failure before 4 commits nothing: the directory may hold a run
 * row and chunks, and pulling again finishes the job (present chunks are not
 * fetched twice).
 */
#include "ckpt/remote/ckpt_remote_int.h"
#include "ckpt/session/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* ---- what is on the remote ----------------------------------------------------- */

typedef struct remote_index {
	char runs[32][64];
	int nruns;
	int more_runs;
	const char *want_run; /* when set: collect that run's steps */
	int64_t *steps;
	size_t nsteps, cap;
} remote_index;

/* checkpoints/RUN/STEP/manifest.json */
static int on_manifest_key(void *ctx, const char *key, uint64_t size)
{
	remote_index *x = ctx;
	char run[64];
	long long step;
	int n = 0;
	if (sscanf(key, "checkpoints/%63[^/]/%lld/manifest.json%n", run, &step, &n) != 2 || key[n] || step < 0)
		return 0;
	if (x->want_run) {
		if (strcmp(run, x->want_run))
			return 0;
		if (x->nsteps == x->cap) {
			size_t cap = x->cap ? 2 * x->cap : 64;
			int64_t *s = qe_realloc(x->steps, cap * sizeof(*s));
			if (!s)
				return qe_fail(QE_ENOMEM, "out of memory");
			x->steps = s;
			x->cap = cap;
		}
		x->steps[x->nsteps++] = step;
		return 0;
	}
	for (int i = 0; i < x->nruns; i++)
		if (strcmp(x->runs[i], run) == 0)
			return 0;
	if (x->nruns == 32) {
		x->more_runs = 1;
		return 0;
	}
	snprintf(x->runs[x->nruns++], sizeof(x->runs[0]), "%s", run);
	return 0;
}

static int pick_run(store_remote *rem, const char *url, char *run_id)
{
	remote_index x;
	memset(&x, 0, sizeof(x));
	int rc = store_remote_list(rem, "checkpoints/", on_manifest_key, &x);
	if (rc)
		return rc;
	if (x.nruns == 0)
		return qe_fail(QE_ENOTFOUND, "no checkpoint under %s (no checkpoints/RUN/STEP/manifest.json)", url);
	if (x.nruns > 1) {
		char list[1200] = "";
		size_t l = 0;
		for (int i = 0; i < x.nruns && l < sizeof(list) - 70; i++)
			l += (size_t)snprintf(list + l, sizeof(list) - l, "%s%s", i ? ", " : "", x.runs[i]);
		return qe_fail(QE_EINVAL, "%s holds checkpoints of several runs (%s%s): choose one with --run-id", url, list,
			       x.more_runs ? ", ..." : "");
	}
	snprintf(run_id, 64, "%s", x.runs[0]);
	return QE_OK;
}

static int pick_step(store_remote *rem, const char *url, const char *run_id, int64_t want, int64_t *step)
{
	remote_index x;
	memset(&x, 0, sizeof(x));
	x.want_run = run_id;
	char sub[128];
	snprintf(sub, sizeof(sub), "checkpoints/%s/", run_id);
	int rc = store_remote_list(rem, sub, on_manifest_key, &x);
	if (rc) {
		free(x.steps);
		return rc;
	}
	int64_t best = -1;
	int found = 0;
	char list[600] = "";
	size_t l = 0;
	for (size_t i = 0; i < x.nsteps; i++) {
		if (x.steps[i] > best)
			best = x.steps[i];
		found |= x.steps[i] == want;
		if (l < sizeof(list) - 24)
			l += (size_t)snprintf(list + l, sizeof(list) - l, "%s%lld", i ? ", " : "", (long long)x.steps[i]);
	}
	free(x.steps);
	if (!x.nsteps)
		return qe_fail(QE_ENOTFOUND, "no checkpoint of run '%s' under %s", run_id, url);
	if (want >= 0 && !found)
		return qe_fail(QE_ENOTFOUND, "run '%s' has no checkpoint at step %lld under %s (steps there: %s)", run_id,
			       (long long)want, url, list);
	*step = want >= 0 ? want : best;
	return QE_OK;
}

/* ---- the local side ------------------------------------------------------------ */

/* The run directory's store ownership record (same format as ckpt.c writes). */
static int own_store(const char *store_dir, const char *run_id)
{
	char path[1200], tmp[1300], line[128];
	snprintf(path, sizeof(path), "%s/run_id", store_dir);
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
		line[strcspn(line, "\r\n")] = 0;
		if (line[0] && strcmp(line, run_id))
			return qe_fail(QE_EMISMATCH, "the store '%s' belongs to run '%s', not '%s'", store_dir, line, run_id);
		if (line[0])
			return QE_OK;
	} else if (errno != ENOENT) {
		return qe_fail(QE_EIO, "cannot read '%s': %s", path, strerror(errno));
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return qe_fail(QE_EIO, "cannot create '%s': %s", tmp, strerror(errno));
	int n = snprintf(line, sizeof(line), "%s\n", run_id);
	int rc = QE_OK;
	if (qe_write(fd, line, (size_t)n) != n || qe_fsync(fd))
		rc = qe_fail(QE_EIO, "cannot write '%s': %s", tmp, strerror(errno));
	close(fd);
	if (!rc && qe_rename(tmp, path))
		rc = qe_fail(QE_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
	if (rc) {
		unlink(tmp);
		return rc;
	}
	int dfd = open(store_dir, O_RDONLY | O_DIRECTORY);
	if (dfd >= 0) {
		qe_fsync(dfd);
		close(dfd);
	}
	return QE_OK;
}

/* The manifest's configuration with run_dir pointing at the new directory. */
static char *config_for(const char *config_json, const char *run_dir)
{
	json_error_t e;
	json_t *o = json_loads(config_json, 0, &e);
	if (!o)
		return NULL;
	if (json_object_get(o, "run_dir"))
		json_object_set_new(o, "run_dir", json_string(run_dir));
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

/* Open (or create) the run directory's catalog for run m->run_id. */
static int open_local(const char *run_dir, const ckpt_manifest *m, cat **c, int *created)
{
	char path[CKPT_PATH_MAX];
	int rc;
	*created = 0;
	if ((rc = ckpt_rundir_catalog(run_dir, path, sizeof(path))))
		return rc;
	if (mkdir(run_dir, 0755) && errno != EEXIST)
		return qe_fail(QE_EIO, "cannot create run directory '%s': %s", run_dir, strerror(errno));
	int fresh = access(path, F_OK) != 0;
	if ((rc = cat_open(path, fresh, c)))
		return rc;
	cat_run run = { 0 };
	rc = cat_run_get(*c, m->run_id, &run);
	cat_run_release(&run);
	if (rc == QE_ENOTFOUND) {
		char *first = NULL;
		if (cat_meta_get(*c, "run_id", &first) == QE_OK && first[0]) {
			rc = qe_fail(QE_EMISMATCH,
				     "run directory '%s' holds run '%s'; the remote checkpoint is of run '%s' (pull into "
				     "another directory)",
				     run_dir, first, m->run_id);
			free(first);
			return rc;
		}
		free(first);
		qe_clear_error();
		char *cfg = config_for(m->config_json, run_dir);
		if (!cfg)
			return qe_fail(QE_ENOMEM, "out of memory");
		rc = cat_run_create(*c, m->run_id, cfg);
		free(cfg);
		*created = !rc;
	}
	return rc;
}

typedef struct pull_ctx {
	const char *run_dir;
	const char *url;
	store_remote *rem;
	cat *cat;
	store *st;
} pull_ctx;

/* Keep in ch[0..*n) only the chunks no store of the run on this host holds (in order). */
static int missing_here(const char *run_dir, const char *run_id, cat_chunk *ch, size_t n, size_t *kept)
{
	ckpt_storeset *set = NULL;
	int rc = ckpt_storeset_open(run_dir, run_id, 0, &set);
	size_t k = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		store_hash h;
		int found = 0;
		memcpy(h.b, ch[i].hash, 16);
		for (int j = 0; !rc && !found && j < ckpt_storeset_count(set); j++)
			rc = store_has_chunk(ckpt_storeset_at(set, j), &h, &found, NULL);
		if (!found)
			ch[k++] = ch[i];
	}
	ckpt_storeset_close(set);
	*kept = k;
	return rc;
}

static int fetch_chunks(pull_ctx *p, const cat_chunk *ch, size_t n, ckpt_pull_result *res)
{
	int rc;
	for (size_t i = 0; i < n; i++) {
		store_hash h;
		memcpy(h.b, ch[i].hash, 16);
		int present = 0;
		uint64_t size = 0;
		if ((rc = store_has_chunk(p->st, &h, &present, &size)))
			return rc;
		if (present && size == ch[i].size) {
			res->chunks_present++;
			continue;
		}
		char key[64];
		ckpt__chunk_key(ch[i].hash, key, sizeof(key));
		void *data = NULL;
		size_t got = 0;
		if ((rc = store_remote_get(p->rem, key, ch[i].size ? ch[i].size : 1, &data, &got)))
			return qe_fail_ctx(rc, "pull: chunk %zu of %zu", i + 1, n);
		store_hash back;
		store_hash_of(data, got, &back);
		if (got != ch[i].size || store_hash_cmp(&back, &h)) {
			free(data);
			return qe_fail(QE_ECORRUPT,
				       "pull: remote object %s/%s does not hold the chunk its name says (%zu bytes, expected "
				       "%llu; content hash differs: %s)",
				       p->url, key, got, (unsigned long long)ch[i].size,
				       store_hash_cmp(&back, &h) ? "yes" : "no");
		}
		rc = store_put_chunk(p->st, data, got, NULL);
		free(data);
		if (rc)
			return rc;
		res->chunks_fetched++;
		res->bytes_fetched += got;
	}
	return store_sync(p->st);
}

/* 1 when run_dir already has this checkpoint committed from the same manifest. */
static int already_here(cat *c, const ckpt_manifest *m, const char *url, const char *hash, int64_t *id)
{
	cat_ckpt ck = { 0 };
	if (cat_ckpt_get(c, m->run_id, m->step, &ck))
		return 0;
	cat_remote_rows rr = { 0 };
	int same = 0;
	if (cat_remote_list(c, ck.id, &rr) == QE_OK)
		for (size_t i = 0; i < rr.n; i++)
			same |= strcmp(rr.rows[i].url, url) == 0 && strcmp(rr.rows[i].manifest_hash, hash) == 0;
	*id = ck.id;
	cat_remote_rows_free(&rr);
	cat_ckpt_release(&ck);
	return same;
}

static int insert(pull_ctx *p, const ckpt_manifest *m, ckpt_pull_result *res)
{
	int64_t id;
	int rc = cat_ckpt_begin(p->cat, m->run_id, m->step, m->e_w, m->topology, m->schedule, m->recipe, &id);
	if (rc)
		return rc;
	if ((rc = cat_begin(p->cat)))
		goto abort;
	for (size_t i = 0; i < m->shards.n && !rc; i++)
		rc = cat_ckpt_add_shard(p->cat, id, m->shards.rows[i].stage, m->shards.rows[i].rank, m->shards.rows[i].bytes);
	for (size_t i = 0; i < m->tensors.n && !rc; i++) {
		const cat_tensor *t = &m->tensors.rows[i];
		rc = cat_ckpt_add_tensor(p->cat, id, t->stage, t->name, t->dtype, t->shape, t->bytes, t->kind, t->chunks,
					 t->n_chunks);
	}
	if (rc) {
		cat_rollback(p->cat);
		goto abort;
	}
	if ((rc = cat_commit(p->cat)) || (rc = cat_ckpt_set_sizes(p->cat, id, m->bytes, m->runtime_state_bytes)))
		goto abort;
	/* The local commit point. */
	if ((rc = cat_ckpt_commit(p->cat, id)))
		goto abort;
	res->ckpt_id = id;
	if ((rc = cat_remote_add(p->cat, id, res->manifest_url, res->manifest_hash)))
		qe_fail_ctx(rc, "pull: checkpoint committed locally, but recording its remote copy failed");
	return rc;
abort : {
	char why[1800];
	snprintf(why, sizeof(why), "pull from %s failed: %.300s", res->manifest_url, qe_last_error());
	char saved[2048];
	snprintf(saved, sizeof(saved), "%s", qe_last_error());
	cat_ckpt_abort(p->cat, id, why);
	qe_fail(rc, "%s", saved);
	return rc;
}
}

int ckpt_remote_pull(const char *run_dir, const char *url, const store_remote_opts *ro, const char *run_id,
		     int64_t step, ckpt_pull_result *out)
{
	double t0 = ckpt__remote_now_ms();
	ckpt_pull_result res;
	memset(&res, 0, sizeof(res));
	pull_ctx p = { run_dir, url, NULL, NULL, NULL };
	ckpt_manifest m;
	memset(&m, 0, sizeof(m));
	cat_chunk *chunks = NULL;
	size_t nchunks = 0;
	void *text = NULL;
	size_t len = 0;
	char key[256], want_run[64] = "";
	int rc;
	if (out)
		memset(out, 0, sizeof(*out));
	if (!run_dir || !run_dir[0])
		return qe_fail(QE_EINVAL, "pull: needs a run directory");
	if (run_id && run_id[0]) {
		if (!ckpt__valid_run_id(run_id))
			return qe_fail(QE_EINVAL, "pull: '%s' is not a run id", run_id);
		snprintf(want_run, sizeof(want_run), "%s", run_id);
	} else {
		/* A directory that already holds a run pulls that run. */
		char path[CKPT_PATH_MAX];
		if (ckpt_rundir_catalog(run_dir, path, sizeof(path)))
			path[0] = 0; /* too long: taken as no run here, the pull's own open names the error */
		cat *c = NULL;
		char *id = NULL;
		if (access(path, F_OK) == 0 && cat_open(path, 0, &c) == QE_OK && cat_meta_get(c, "run_id", &id) == QE_OK &&
		    id[0])
			snprintf(want_run, sizeof(want_run), "%s", id);
		free(id);
		cat_close(c);
		qe_clear_error();
	}
	if ((rc = store_remote_open(url, ro, &p.rem)) || (rc = store_remote_check(p.rem)))
		goto out;
	if (!want_run[0] && (rc = pick_run(p.rem, url, want_run)))
		goto out;
	if ((rc = pick_step(p.rem, url, want_run, step, &res.step)) ||
	    (rc = ckpt__manifest_key(want_run, res.step, key, sizeof(key))))
		goto out;
	ckpt__remote_object_url(url, key, res.manifest_url, sizeof(res.manifest_url));
	if ((rc = store_remote_get(p.rem, key, (size_t)1 << 30, &text, &len)) ||
	    (rc = ckpt__manifest_parse(text, len, res.manifest_url, &m)))
		goto out;
	ckpt__manifest_hash(text, len, res.manifest_hash);
	if (strcmp(m.run_id, want_run) || m.step != res.step) {
		rc = qe_fail(QE_ECORRUPT, "manifest %s describes run '%s' step %lld, not what its key says", res.manifest_url,
			     m.run_id, (long long)m.step);
		goto out;
	}
	snprintf(res.run_id, sizeof(res.run_id), "%s", m.run_id);
	res.e_w = m.e_w;
	res.bytes = m.bytes;
	if ((rc = ckpt__distinct_chunks(&m.tensors, &chunks, &nchunks)))
		goto out;
	res.chunks = nchunks;

	if ((rc = open_local(run_dir, &m, &p.cat, &res.created)))
		goto out;
	int here = !res.created && already_here(p.cat, &m, res.manifest_url, res.manifest_hash, &res.ckpt_id);
	if (here) {
		/*
		 * The catalog has it; its chunks may not be (a host lost its store).  Fetch, into this
		 * host's RUN/store, what no store of the run on this host holds: restore reads a row
		 * from any store here that has all its chunks.
		 */
		size_t keep = 0;
		if ((rc = missing_here(run_dir, m.run_id, chunks, nchunks, &keep)))
			goto out;
		res.chunks_present = nchunks - keep;
		nchunks = keep;
		if (!nchunks) {
			res.up_to_date = 1;
			goto done;
		}
	}
	char store_dir[1100];
	snprintf(store_dir, sizeof(store_dir), "%s/store", run_dir);
	store_opts so = { 0 };
	so.create = 1;
	if ((rc = store_open(store_dir, &so, &p.st)) || (rc = own_store(store_dir, m.run_id)) ||
	    (rc = fetch_chunks(&p, chunks, nchunks, &res)) || (!here && (rc = insert(&p, &m, &res))))
		goto out;
done:
	res.ms = ckpt__remote_now_ms() - t0;
	if (out)
		*out = res;
out:
	free(text);
	free(chunks);
	ckpt__manifest_release(&m);
	store_close(p.st);
	cat_close(p.cat);
	store_remote_close(p.rem);
	return rc;
}

/* ---- for the distributed pull (ckpt_job_pull.c) ----------------------------------- */

int ckpt__pull_manifest(store_remote *rem, const char *url, const char *want_run, int64_t step, ckpt_manifest *m,
			char *manifest_url, size_t url_len, char hash[33])
{
	char run[64], key[256];
	int64_t at = -1;
	void *text = NULL;
	size_t len = 0;
	int rc;
	snprintf(run, sizeof(run), "%s", want_run ? want_run : "");
	if (!run[0] && (rc = pick_run(rem, url, run)))
		return rc;
	if ((rc = pick_step(rem, url, run, step, &at)) || (rc = ckpt__manifest_key(run, at, key, sizeof(key))))
		return rc;
	ckpt__remote_object_url(url, key, manifest_url, url_len);
	if ((rc = store_remote_get(rem, key, (size_t)1 << 30, &text, &len)) ||
	    (rc = ckpt__manifest_parse(text, len, manifest_url, m))) {
		free(text);
		return rc;
	}
	ckpt__manifest_hash(text, len, hash);
	free(text);
	if (strcmp(m->run_id, run) || m->step != at)
		return qe_fail(QE_ECORRUPT, "manifest %s describes run '%s' step %lld, not what its key says", manifest_url,
			       m->run_id, (long long)m->step);
	return QE_OK;
}

int ckpt__pull_open_local(const char *run_dir, const ckpt_manifest *m, cat **c, int *created)
{
	return open_local(run_dir, m, c, created);
}

int ckpt__pull_already_here(cat *c, const ckpt_manifest *m, const char *url, const char *hash, int64_t *id)
{
	return already_here(c, m, url, hash, id);
}
