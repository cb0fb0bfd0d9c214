/*
 * ckpt.c - the checkpoint session of one rank process: where the run's store
 * is, the chunk size, which run owns the store, finding a checkpoint, and the
 * catalog keys of items.  The crash-test kill hook is in ckpt_kill.c, the
 * words ranks exchange in ckpt_words.c; saving and restoring live in
 * ckpt/protocol/.
 *
 * Stores: each rank writes its own, STORES/rank-R (ckpt/session/rundir.h), which
 * carries an identity (run id, rank, store id, host) and a lock held by the
 * writing process.  A restore also reads every other store of the run this
 * host can see.  A catalog copied in from another run directory names
 * another run than the stores beside it, and is refused instead of reading
 * or writing chunks of the wrong run.
 */
#include "ckpt/session/ckpt_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

double ckpt__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- session -------------------------------------------------------------- */

static void forget_seen(ckpt_session *s)
{
	for (int i = 0; i < s->nseen; i++)
		if (s->seen[i].st && s->seen[i].st != s->st)
			store_close(s->seen[i].st);
	free(s->seen);
	s->seen = NULL;
	s->nseen = 0;
}

int ckpt_session_open(const char *run_dir, const char *run_id, cat *catalog, ckpt_session **out)
{
	*out = NULL;
	if (!run_dir || !run_dir[0] || !run_id)
		return qe_fail(QE_EINVAL, "checkpoint session: needs a run directory and a run id");
	ckpt_session *s = qe_calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "checkpoint session: out of memory");
	if ((size_t)snprintf(s->run_dir, sizeof(s->run_dir), "%s", run_dir) >= sizeof(s->run_dir) ||
	    (size_t)snprintf(s->run_id, sizeof(s->run_id), "%s", run_id) >= sizeof(s->run_id)) {
		free(s);
		return qe_fail(QE_EINVAL, "checkpoint session: run directory or id too long: '%s'", run_dir);
	}
	s->cat = catalog;
	s->rank = -1;
	ckpt_host_name(s->host, sizeof(s->host));
	s->pid = getpid();
	s->chunk_bytes = STORE_DEFAULT_CHUNK;
	const char *cb = ckpt_opt_text(ckpt_options_get()->chunk_bytes);
	if (cb && cb[0]) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(cb, &end, 10);
		if (errno || *end || v < 64 || v > STORE_MAX_CHUNK) {
			free(s);
			return qe_fail(QE_EINVAL, "QE_CKPT_CHUNK_BYTES='%s' is not a byte count in 64..%zu", cb,
				       (size_t)STORE_MAX_CHUNK);
		}
		s->chunk_bytes = (size_t)v;
	}
	int rrc = ckpt__repl_config(s);
	if (rrc) {
		free(s);
		return rrc;
	}
	const char *kill = ckpt_opt_text(ckpt_options_get()->kill);
	if (kill && kill[0]) {
		int rc = ckpt__kills_parse(s, kill);
		if (rc) {
			free(s);
			return rc;
		}
		qe_log(QE_LOG_INFO, "checkpoint: fault injection armed: QE_CKPT_KILL=%s", kill);
	}
	*out = s;
	return QE_OK;
}

void ckpt_session_close(ckpt_session *s)
{
	if (!s)
		return;
	if (s->pid == getpid()) {
		forget_seen(s);
		ckpt__repl_free(s);
		ckpt__mem_close(s);
		ckpt__ring_free(&s->ring);
		store_close(s->st);
		ckpt_unlock(s->store_lock);
	}
	free(s);
}

/* ---- the rank's own store, and the others this host sees ------------------------ */

int ckpt__store(ckpt_session *s, int rank)
{
	if (s->pid != getpid())
		return qe_fail(QE_EINVAL, "checkpoint session of process %d used in process %d (open it after fork)",
			       (int)s->pid, (int)getpid());
	if (s->st) {
		if (rank != s->rank)
			return qe_fail(QE_EINVAL, "checkpoint session of rank %d used by rank %d", s->rank, rank);
		return QE_OK;
	}
	int rc;
	char lock[CKPT_PATH_MAX + 8];
	if ((rc = ckpt_rundir_rank_store(s->run_dir, rank, s->store_dir, sizeof(s->store_dir))) ||
	    (rc = ckpt_fs_check(s->store_dir, "the store of rank")) ||
	    (rc = ckpt_store_identity_ensure(s->store_dir, s->run_id, rank, &s->ident)))
		return qe_fail_ctx(rc, "rank %d on %s", rank, s->host);
	snprintf(lock, sizeof(lock), "%s/lock", s->store_dir);
	char what[96];
	snprintf(what, sizeof(what), "rank %d of run %s", rank, s->run_id);
	if (!s->store_lock && (rc = ckpt_lock_take(lock, what, &s->store_lock)))
		return qe_fail_ctx(rc, "rank %d on %s: its store", rank, s->host);
	store_opts o = { 0 };
	o.create = 1;
	if ((rc = store_open(s->store_dir, &o, &s->st))) {
		ckpt_unlock(s->store_lock);
		s->store_lock = NULL;
		return qe_fail_ctx(rc, "rank %d on %s, run '%s'", rank, s->host, s->run_id);
	}
	s->rank = rank;
	return QE_OK;
}

int ckpt__scan(ckpt_session *s)
{
	ckpt_local_store *v = NULL;
	int n = 0;
	forget_seen(s);
	int rc = ckpt_local_stores_scan(s->run_dir, s->run_id, &v, &n);
	if (rc)
		return rc;
	if (!(s->seen = qe_calloc((size_t)n + 1, sizeof(*s->seen)))) {
		free(v);
		return qe_fail(QE_ENOMEM, "checkpoint: out of memory");
	}
	for (int i = 0; i < n; i++) {
		s->seen[i].where = v[i];
		if (s->st && strcmp(v[i].path, s->store_dir) == 0)
			s->seen[i].st = s->st;
	}
	s->nseen = n;
	free(v);
	return QE_OK;
}

int ckpt__seen_open(ckpt_session *s, int i, store **out)
{
	ckpt_seen_store *e = &s->seen[i];
	if (!e->st) {
		store_opts o = { 0 };
		o.read_only = 1;
		int rc = store_open(e->where.path, &o, &e->st);
		if (rc)
			return qe_fail_ctx(rc, "rank %d on %s: opening store '%s'", s->rank, s->host, e->where.path);
	}
	*out = e->st;
	return QE_OK;
}

int ckpt_store_check_owner(ckpt_session *s, qe_rank *r)
{
	int rank = qe_pstate_rank(r), rc;
	char dir[CKPT_PATH_MAX];
	ckpt_store_identity id;
	if ((rc = ckpt_rundir_rank_store(s->run_dir, rank, dir, sizeof(dir))))
		return rc;
	rc = ckpt_store_identity_read(dir, &id);
	if (rc == QE_ENOTFOUND)
		return QE_OK; /* the store comes with the first checkpoint */
	if (rc)
		return qe_fail_ctx(rc, "rank %d on %s: its store", rank, s->host);
	if (strcmp(id.run_id, s->run_id))
		return qe_fail(QE_EMISMATCH,
			       "rank %d on %s: the store '%s' belongs to run '%s', not to this run '%s': the catalog of "
			       "that run is gone or another run shares the stores' folder; move the store away or choose "
			       "another --run-dir (or --local-dir)",
			       rank, s->host, dir, id.run_id, s->run_id);
	return QE_OK;
}

int ckpt_store_clear(ckpt_session *s, qe_rank *r, uint64_t *chunks, uint64_t *bytes)
{
	int rank = qe_pstate_rank(r), rc;
	char dir[CKPT_PATH_MAX];
	ckpt_store_identity id;
	if (chunks)
		*chunks = 0;
	if (bytes)
		*bytes = 0;
	if ((rc = ckpt_rundir_rank_store(s->run_dir, rank, dir, sizeof(dir))))
		return rc;
	rc = ckpt_store_identity_read(dir, &id);
	if (rc == QE_ENOTFOUND)
		return QE_OK; /* never written */
	if (rc)
		return qe_fail_ctx(rc, "rank %d on %s: clearing its store for the run that starts over", rank, s->host);
	if ((rc = ckpt__store(s, rank)))
		return qe_fail_ctx(rc, "clearing the store for the run that starts over");
	store_gc_result g;
	if ((rc = store_gc(s->st, NULL, 0, 0, 0, &g)))
		return qe_fail_ctx(rc, "rank %d on %s: clearing its store for the run that starts over", rank, s->host);
	if (chunks)
		*chunks = g.deleted;
	if (bytes)
		*bytes = g.bytes_reclaimed;
	return QE_OK;
}

/* ---- finding a checkpoint ------------------------------------------------- */

int ckpt_find(const char *run_dir, cat *c, const char *run_id, int64_t step, cat_ckpt *out)
{
	memset(out, 0, sizeof(*out));
	int rc = ckpt_rundir_check_owner(run_dir, run_id, cat_path(c));
	if (rc)
		return rc;
	rc = step < 0 ? cat_ckpt_latest_committed(c, run_id, out) : cat_ckpt_get(c, run_id, step, out);
	if (rc != QE_ENOTFOUND)
		return rc;
	/* Say what there is instead. */
	cat_ckpt_rows all = { 0 };
	char list[600] = "";
	size_t len = 0;
	int ncommitted = 0, nother = 0;
	if (cat_ckpt_list(c, run_id, &all) == QE_OK) {
		for (size_t i = 0; i < all.n; i++) {
			if (all.rows[i].status != CAT_COMMITTED) {
				nother++;
				continue;
			}
			if (len < sizeof(list) - 24)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%lld", ncommitted ? ", " : "",
							(long long)all.rows[i].step);
			ncommitted++;
		}
		cat_ckpt_rows_free(&all);
	}
	char other[96] = "";
	if (nother)
		snprintf(other, sizeof(other), "; %d pending or aborted attempt%s", nother, nother == 1 ? "" : "s");
	if (step < 0)
		return qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint%s", run_id, run_dir, other);
	if (!ncommitted)
		return qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint at step %lld: it has none at all%s",
			       run_id, run_dir, (long long)step, other);
	return qe_fail(QE_ENOTFOUND, "run '%s' in '%s' has no committed checkpoint at step %lld (committed steps: %s)",
		       run_id, run_dir, (long long)step, list);
}

/* ---- item keys ------------------------------------------------------------- */

void ckpt__shape_text(const qe_pstate_item *it, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < it->ndim && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? "," : "", (long long)it->shape[d]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
}

int ckpt__shared_by_replicas(const qe_pstate_item *it)
{
	return it->kind == QE_PSTATE_PARAM || it->kind == QE_PSTATE_ADAM_M || it->kind == QE_PSTATE_ADAM_V;
}

void ckpt__catalog_key(const qe_pstate_item *it, int replica, int *stage, char *name, size_t len)
{
	*stage = it->stage < 0 ? 0 : it->stage;
	if (it->stage < 0)
		snprintf(name, len, "run/%s", it->name);
	else if (replica > 0 && !ckpt__shared_by_replicas(it))
		snprintf(name, len, "dp%d/%s", replica, it->name);
	else
		snprintf(name, len, "%s", it->name);
}
