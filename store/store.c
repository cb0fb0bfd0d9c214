/*
 * store.c - the store's LMDB environment: open and validate it, map LMDB
 * codes to ours, and run write transactions that survive a full map.
 *
 * LMDB maps the whole database into memory with a fixed size.  Checkpoint
 * sizes are not known up front, so the map starts modest and grows: a write
 * that finds the map full (MDB_MAP_FULL) is aborted, the map enlarged with
 * mdb_env_set_mapsize, and the write run again from the start.  Another
 * process that grew the map shows up as MDB_MAP_RESIZED when a transaction
 * begins; we then adopt its size.  Both need "no transaction active in this
 * process", which is why every transaction of a handle runs under its mutex.
 *
 * Speed (issue 16): a writable handle maps data.mdb writable (MDB_WRITEMAP),
 * so LMDB hands out pages of the file itself and never keeps its own copy of
 * a chunk.  chunk.c writes each payload with pwrite at its page's place in
 * the file (the page cache the map shows; no page faults) and starts its
 * writeback at once (sync_file_range), so the disk writes while the next
 * chunk is hashed and copied; the flush at a commit then waits only for what
 * is still in flight.  With WRITEMAP, LMDB sizes the file to the map
 * (ftruncate: a sparse file whose length is the map size) each time the map
 * is set, which brings two hazards we close here:
 *  - a process that sets a smaller map than another's would shrink the file
 *    under the other's map, and the other would fault (SIGBUS) writing past
 *    the end.  Every resize of a writable handle runs under flock on
 *    data.mdb and never sets a size below the file's length;
 *  - a write into a hole of a full disk faults (SIGBUS) instead of failing.
 *    Before each write transaction the pages it may use are allocated with
 *    fallocate, so a full disk is an error (QE_ENOSPC), not a crash.
 * A truncated data.mdb is detected before the writable open would extend it
 * (a read-only probe of the environment, check_file_size).
 */
#define _GNU_SOURCE
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define DEFAULT_INITIAL_MAP (64 * MIB)
#define DEFAULT_MAX_MAP ((size_t)16 << 40)
#define DEFAULT_TXN_BYTES (1024 * MIB)
/* pwrite pieces: writeback of each starts as soon as it is in the page cache. */
#define WRITE_PIECE (8 * MIB)
/* A write that keeps finding the map full after this many grows is a bug or a
 * race we do not understand; stop rather than loop. */
#define MAX_TXN_ATTEMPTS 48

void store_put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t store_get_u64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

int store_mdb_fail(store *s, int mdb_rc, const char *what)
{
	int code = QE_ESTORE;
	switch (mdb_rc) {
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		code = QE_ECORRUPT;
		break;
	case MDB_NOTFOUND:
		code = QE_ENOTFOUND;
		break;
	case ENOMEM:
		code = QE_ENOMEM;
		break;
	case ENOSPC:
	case EDQUOT:
		code = QE_ENOSPC;
		break;
	case MDB_PANIC:
		/* LMDB refuses every later transaction on this environment. */
		s->failed = 1;
		break;
	}
	return qe_fail(code, "store '%s': %s: %s", s->path, what, mdb_strerror(mdb_rc));
}

int store__mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags)
{
	return qe_fault_hit(QE_FAULT_LMDB_PUT) ? EIO : mdb_put(txn, dbi, k, v, flags);
}

int store__txn_commit(MDB_txn *txn)
{
	if (qe_fault_hit(QE_FAULT_LMDB_COMMIT)) {
		mdb_txn_abort(txn);
		return EIO;
	}
	return mdb_txn_commit(txn);
}

int store_check(store *s)
{
	if (!s)
		return qe_fail(QE_EINVAL, "store: NULL handle");
	if (getpid() != s->pid)
		return qe_fail(QE_EINVAL,
			       "store '%s': handle opened by process %d used in process %d; open the store after fork",
			       s->path, (int)s->pid, (int)getpid());
	if (s->failed)
		return qe_fail(QE_ESTORE, "store '%s': the environment failed earlier (LMDB panic); close and reopen it",
			       s->path);
	return 0;
}

const char *store_path(const store *s)
{
	return s ? s->path : "";
}

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* Pages in use up to the highest one ever written (free pages included). */
static size_t used_bytes(store *s, MDB_envinfo *info)
{
	return ((size_t)info->me_last_pgno + 1) * s->page_size;
}

/* Serialize map resizes with other processes (WRITEMAP: each one sizes the file). */
static void resize_lock(store *s)
{
	if (s->lock_fd >= 0)
		while (flock(s->lock_fd, LOCK_EX) != 0 && errno == EINTR)
			;
}

static void resize_unlock(store *s)
{
	if (s->lock_fd >= 0)
		flock(s->lock_fd, LOCK_UN);
}

/* Length of data.mdb, or 0 when it cannot be read. */
static size_t file_length(store *s)
{
	struct stat st;
	if (s->data_fd < 0 || fstat(s->data_fd, &st) != 0)
		return 0;
	return (size_t)st.st_size;
}

/* Set the map to size (0: the size recorded by the last writer), never below
 * the file's length with WRITEMAP, so that the file never shrinks under
 * another process's map. */
static int set_map(store *s, size_t size, const char *what)
{
	resize_lock(s);
	if (s->writemap) {
		MDB_envinfo info;
		size_t len = round_up(file_length(s), s->page_size);
		mdb_env_info(s->env, &info);
		/* size 0 adopts the recorded size, which only a file that long can hold */
		if (size == 0 && len > info.me_mapsize)
			size = len;
		if (size && size < len)
			size = len;
	}
	int rc = mdb_env_set_mapsize(s->env, size);
	resize_unlock(s);
	return rc ? store_mdb_fail(s, rc, what) : 0;
}

/*
 * Allocate the file's blocks for the pages a write transaction of about
 * want bytes (values of up to max_value bytes each) may take past the end of
 * the used pages, so a full disk fails here rather than faulting in a write
 * into the map.  When the whole of want does not fit, the pages LMDB will
 * reuse from its free list (freelist.c) are left out: after a gc on a
 * full disk, a save fits in the pages the gc freed.  Call with s->mu held
 * and no transaction open.
 */
static int reserve_blocks(store *s, size_t want, size_t max_value)
{
	if (!s->writemap || s->no_fallocate)
		return 0;
	MDB_envinfo info;
	int rc = mdb_env_info(s->env, &info);
	if (rc)
		return store_mdb_fail(s, rc, "read environment info");
	size_t from = used_bytes(s, &info), to = from + want;
	if (to > info.me_mapsize)
		to = info.me_mapsize;
	if (to <= from)
		return 0;
	if (fallocate(s->data_fd, 0, (off_t)from, (off_t)(to - from)) == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) {
		s->no_fallocate = 1; /* this file system cannot: writes into holes stay unchecked */
		return 0;
	}
	if (errno == ENOSPC) {
		size_t reuse = store__reusable_pages(s, max_value) * s->page_size;
		if (reuse >= to - from)
			return 0;
		if (reuse > 0 && fallocate(s->data_fd, 0, (off_t)from, (off_t)(to - from - reuse)) == 0)
			return 0;
		errno = ENOSPC;
	}
	return qe_fail(qe_errno_status(errno), "store '%s': allocate %zu bytes of data.mdb for a write: %s", s->path, to - from,
		       strerror(errno));
}


int store_value_offset(store *s, const void *val, size_t len, uint64_t *off)
{
	const unsigned char *page = (const unsigned char *)val - LMDB_PAGEHDR;
	if (sizeof(size_t) != 8 || !s->db_page_size || (uintptr_t)page % s->db_page_size)
		return -1;
	lmdb_page_head h = lmdb_page_head_at(page);
	if (!(h.flags & LMDB_P_OVERFLOW) || (uint64_t)h.pages * s->db_page_size < LMDB_PAGEHDR + len)
		return -1;
	*off = h.pgno * s->db_page_size + LMDB_PAGEHDR;
	return 0;
}

int store_write_at(store *s, const void *data, size_t size, uint64_t off)
{
	const unsigned char *p = data;
	while (size) {
		size_t n = size < WRITE_PIECE ? size : WRITE_PIECE;
		ssize_t w = qe_pwrite(s->data_fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return qe_fail(w < 0 ? qe_errno_status(errno) : QE_EIO,
				       "store '%s': write %zu bytes at offset %llu of data.mdb: %s", s->path, n,
				       (unsigned long long)off, w < 0 ? strerror(errno) : "nothing written");
		/* start the writeback now; the commit's or store_sync's flush waits for it */
		if (s->sync_mode != STORE_SYNC_NONE)
			sync_file_range(s->data_fd, (off_t)off, w, SYNC_FILE_RANGE_WRITE);
		p += w;
		off += (uint64_t)w;
		size -= (size_t)w;
	}
	return 0;
}

int store_read_at(store *s, void *dst, size_t size, uint64_t off)
{
	unsigned char *p = dst;
	while (size) {
		ssize_t r = pread(s->data_fd, p, size, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return qe_fail(QE_EIO, "store '%s': read %zu bytes at offset %llu of data.mdb: %s", s->path, size,
				       (unsigned long long)off, r < 0 ? strerror(errno) : "end of file");
		p += r;
		off += (uint64_t)r;
		size -= (size_t)r;
	}
	return 0;
}

/* Enlarge the map so that at least need_free bytes lie beyond the last used
 * page: double it, or more when one write needs more.  Call with s->mu held
 * and no transaction open. */
static int grow_map(store *s, size_t need_free)
{
	MDB_envinfo info;
	int rc = mdb_env_info(s->env, &info);
	if (rc)
		return store_mdb_fail(s, rc, "read environment info");
	size_t cur = info.me_mapsize;
	size_t fit = used_bytes(s, &info) + need_free + need_free / 4 + MIB;
	size_t target = cur * 2 > fit ? cur * 2 : fit;
	target = round_up(target, MIB);
	if (target > s->max_map_size)
		target = s->max_map_size;
	if (target <= cur)
		return qe_fail(QE_ESTORE,
			       "store '%s' is full: the map reached its limit of %zu bytes (raise store_opts.max_map_size)",
			       s->path, s->max_map_size);
	rc = set_map(s, target, "grow the map");
	if (rc)
		return rc;
	s->grows++;
	qe_log(QE_LOG_DEBUG, "store '%s': map grown from %zu to %zu bytes", s->path, cur, target);
	return 0;
}

/* Grow before a write that would not fit, so large writes rarely run twice. */
static int ensure_room(store *s, size_t expect_bytes)
{
	MDB_envinfo info;
	if (expect_bytes == 0)
		return 0; /* small bookkeeping writes: MDB_MAP_FULL and a retry suffice */
	int rc = mdb_env_info(s->env, &info);
	if (rc)
		return store_mdb_fail(s, rc, "read environment info");
	size_t used = used_bytes(s, &info);
	size_t want = expect_bytes + expect_bytes / 8 + MIB;
	if (info.me_mapsize > used && info.me_mapsize - used >= want)
		return 0;
	/* At the limit the estimate may be pessimistic: let the write try. */
	if (info.me_mapsize >= s->max_map_size)
		return 0;
	return grow_map(s, want);
}

/* Another process grew the map past ours: adopt its recorded size. */
static int adopt_map(store *s)
{
	return set_map(s, 0, "adopt the map size grown by another process");
}

size_t store__map_room(store *s)
{
	MDB_envinfo info;
	if (mdb_env_info(s->env, &info))
		return 0;
	size_t used = used_bytes(s, &info);
	return info.me_mapsize > used ? info.me_mapsize - used : 0;
}

int store__write_begin(store *s, size_t expect_bytes, size_t max_value, MDB_txn **txn)
{
	int qrc;
	*txn = NULL;
	if (s->read_only)
		return qe_fail(QE_EINVAL, "store '%s': write: the store is open read-only", s->path);
	for (int attempt = 0; attempt < MAX_TXN_ATTEMPTS; attempt++) {
		/* Always the up-front grow (even for grow_on_full_only): a transaction that stays
		 * open over several pieces cannot be run again after MDB_MAP_FULL. */
		if ((qrc = ensure_room(s, expect_bytes)))
			return qrc;
		if ((qrc = reserve_blocks(s, expect_bytes + expect_bytes / 8 + MIB, max_value)))
			return qrc;
		int rc = mdb_txn_begin(s->env, NULL, 0, txn);
		if (rc == MDB_MAP_RESIZED) {
			s->adopts++;
			if ((qrc = adopt_map(s)))
				return qrc;
			continue;
		}
		if (rc) {
			*txn = NULL;
			return store_mdb_fail(s, rc, "begin a write transaction");
		}
		return 0;
	}
	return qe_fail(QE_ESTORE, "store '%s': the map keeps being resized; gave up", s->path);
}

int store_read_begin(store *s, MDB_txn **txn)
{
	for (int i = 0; i < MAX_TXN_ATTEMPTS; i++) {
		int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
		if (rc == MDB_MAP_RESIZED) {
			s->adopts++;
			int qrc = adopt_map(s);
			if (qrc)
				return qrc;
			continue;
		}
		return rc ? store_mdb_fail(s, rc, "begin a read transaction") : 0;
	}
	return qe_fail(QE_ESTORE, "store '%s': the map keeps being resized; gave up", s->path);
}

int store_write_txn(store *s, size_t expect_bytes, size_t max_value, store_txn_fn fn, void *ctx, const char *what)
{
	if (s->read_only)
		return qe_fail(QE_EINVAL, "store '%s': %s: the store is open read-only", s->path, what);
	int qrc = 0;
	pthread_mutex_lock(&s->mu);
	for (int attempt = 0;; attempt++) {
		if (attempt >= MAX_TXN_ATTEMPTS) {
			qrc = qe_fail(QE_ESTORE, "store '%s': %s: the map stayed full after %d grows", s->path, what,
				      attempt);
			break;
		}
		if (!s->grow_on_full_only && (qrc = ensure_room(s, expect_bytes)))
			break;
		if ((qrc = reserve_blocks(s, expect_bytes + expect_bytes / 8 + MIB, max_value)))
			break;
		MDB_txn *txn = NULL;
		int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
		if (rc == MDB_MAP_RESIZED) {
			s->adopts++;
			qrc = adopt_map(s);
			if (qrc)
				break;
			continue;
		}
		if (rc) {
			qrc = store_mdb_fail(s, rc, "begin a write transaction");
			break;
		}
		int mdb_rc = 0;
		qrc = fn(s, txn, ctx, &mdb_rc);
		if (qrc == 0) {
			/* commit frees the transaction even when it fails */
			mdb_rc = store__txn_commit(txn);
			if (mdb_rc == 0)
				break;
			qrc = store_mdb_fail(s, mdb_rc, "commit");
		} else {
			mdb_txn_abort(txn);
		}
		if (mdb_rc != MDB_MAP_FULL)
			break;
		qrc = grow_map(s, expect_bytes);
		if (qrc)
			break;
	}
	pthread_mutex_unlock(&s->mu);
	return qrc;
}

/* --- open ------------------------------------------------------------------------ */

static int mkdir_p(const char *dir)
{
	char *p = qe_strdup(dir);
	if (!p)
		return qe_fail(QE_ENOMEM, "store: copy path '%s'", dir);
	int rc = 0;
	for (char *c = p + 1;; c++) {
		if (*c != '/' && *c != '\0')
			continue;
		char saved = *c;
		*c = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST) {
			rc = qe_fail(qe_errno_status(errno), "store: create folder '%s': %s", p, strerror(errno));
			break;
		}
		*c = saved;
		if (saved == '\0')
			break;
	}
	free(p);
	return rc;
}

/* Open (creating when allowed) the three databases and check the format. */
struct open_ctx {
	int create;
};

static int open_dbs_body(store *s, MDB_txn *txn, void *vctx, int *mdb_rc)
{
	struct open_ctx *ctx = vctx;
	unsigned flags = ctx->create ? MDB_CREATE : 0;
	MDB_dbi main_dbi;
	MDB_stat st;
	int rc;

	/* A non-empty environment without our meta database is someone else's. */
	rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
	if (!rc)
		rc = mdb_stat(txn, main_dbi, &st);
	if (rc)
		return *mdb_rc = rc, store_mdb_fail(s, rc, "open the main database");
	MDB_dbi probe;
	rc = mdb_dbi_open(txn, "meta", 0, &probe);
	/* An empty environment is a store whose creation did not finish (its first
	 * write transaction failed): a new store for a writer, none for a reader. */
	if (rc == MDB_NOTFOUND && st.ms_entries == 0 && !ctx->create)
		return qe_fail(QE_ENOTFOUND, "store: no store at '%s' (an empty LMDB environment: its creation did not finish)",
			       s->path);
	if (rc == MDB_NOTFOUND && (st.ms_entries > 0 || !ctx->create))
		return qe_fail(QE_EUNSUPPORTED, "store '%s': not a qeffect store (an LMDB environment without its meta database)",
			       s->path);
	if (rc && rc != MDB_NOTFOUND)
		return *mdb_rc = rc, store_mdb_fail(s, rc, "open the meta database");

	if ((rc = mdb_dbi_open(txn, "meta", flags, &s->dbi_meta)) ||
	    (rc = mdb_dbi_open(txn, "chunks", flags, &s->dbi_chunks)) ||
	    (rc = mdb_dbi_open(txn, "touch", flags, &s->dbi_touch)))
		return *mdb_rc = rc, store_mdb_fail(s, rc, "open the chunk databases");

	MDB_val k = { 6, "format" }, v;
	rc = mdb_get(txn, s->dbi_meta, &k, &v);
	if (rc == MDB_NOTFOUND && ctx->create) {
		v.mv_size = strlen(STORE_FORMAT);
		v.mv_data = (void *)STORE_FORMAT;
		rc = store__mdb_put(txn, s->dbi_meta, &k, &v, 0);
		if (rc)
			return *mdb_rc = rc, store_mdb_fail(s, rc, "write the store format");
		return 0;
	}
	if (rc)
		return *mdb_rc = rc, store_mdb_fail(s, rc, "read the store format");
	if (v.mv_size != strlen(STORE_FORMAT) || memcmp(v.mv_data, STORE_FORMAT, v.mv_size) != 0)
		return qe_fail(QE_EUNSUPPORTED, "store '%s': format '%.*s' is not the supported '%s'", s->path,
			       (int)(v.mv_size > 64 ? 64 : v.mv_size), (const char *)v.mv_data, STORE_FORMAT);
	return 0;
}

static int open_dbs(store *s, int create)
{
	struct open_ctx ctx = { create };
	if (!s->read_only)
		return store_write_txn(s, 0, 0, open_dbs_body, &ctx, "open");
	MDB_txn *txn;
	int rc = store_read_begin(s, &txn);
	if (rc)
		return rc;
	int mdb_rc = 0;
	rc = open_dbs_body(s, txn, &ctx, &mdb_rc);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	/* Committing (not aborting) keeps the database handles open. */
	mdb_rc = mdb_txn_commit(txn);
	return mdb_rc ? store_mdb_fail(s, mdb_rc, "open the chunk databases") : 0;
}

/* A torn or truncated data.mdb whose meta pages survived would let LMDB map
 * pages past the end of the file and fault on first touch (SIGBUS).  Refuse it.
 * A writable open (WRITEMAP) would extend the file to the map first and hide
 * the damage, so for it the check reads a read-only probe environment, opened
 * and closed before the real one (closing an environment drops the process's
 * locks on lock.mdb, so the two must not overlap). */
static int check_env_size(store *s, MDB_env *env, const char *datafile)
{
	MDB_envinfo info;
	struct stat st;
	int rc = mdb_env_info(env, &info);
	if (rc)
		return store_mdb_fail(s, rc, "read environment info");
	if (stat(datafile, &st) != 0)
		return qe_fail(QE_EIO, "store '%s': stat '%s': %s", s->path, datafile, strerror(errno));
	size_t need = used_bytes(s, &info);
	if ((size_t)st.st_size < need)
		return qe_fail(QE_ECORRUPT, "store '%s': '%s' is truncated: its pages need %zu bytes but the file has %lld",
			       s->path, datafile, need, (long long)st.st_size);
	return 0;
}

static int check_file_size(store *s, const char *datafile)
{
	if (!s->writemap)
		return check_env_size(s, s->env, datafile);
	struct stat st;
	if (stat(datafile, &st) != 0 || st.st_size == 0)
		return 0; /* a new environment */
	MDB_env *probe = NULL;
	int rc = mdb_env_create(&probe);
	if (rc)
		return store_mdb_fail(s, rc, "create the environment handle");
	mdb_env_set_maxdbs(probe, 4);
	rc = mdb_env_open(probe, s->path, MDB_RDONLY | MDB_NOTLS, 0644);
	int qrc = rc ? store_mdb_fail(s, rc, "open the LMDB environment (data.mdb)") : check_env_size(s, probe, datafile);
	/* Refuse another application's or format's environment before the
	 * writable open extends its file: the same check open_dbs makes. */
	MDB_txn *txn = NULL;
	if (!qrc && (rc = mdb_txn_begin(probe, NULL, MDB_RDONLY, &txn)))
		qrc = store_mdb_fail(s, rc, "begin a read transaction");
	if (!qrc) {
		MDB_dbi main_dbi;
		MDB_stat st0;
		rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
		if (!rc)
			rc = mdb_stat(txn, main_dbi, &st0);
		if (rc) {
			qrc = store_mdb_fail(s, rc, "open the main database");
		} else if (st0.ms_entries > 0) {
			struct open_ctx ctx = { 0 };
			int mdb_rc = 0;
			qrc = open_dbs_body(s, txn, &ctx, &mdb_rc);
		}
	}
	if (txn)
		mdb_txn_abort(txn);
	mdb_env_close(probe);
	return qrc;
}

int store_open(const char *dir, const store_opts *opts, store **out)
{
	store_opts o = { 0 };
	struct stat st;
	char *datafile = NULL;
	int rc;

	if (!out)
		return qe_fail(QE_EINVAL, "store_open: NULL out");
	*out = NULL;
	if (!dir || !*dir)
		return qe_fail(QE_EINVAL, "store_open: empty folder path");
	if (opts)
		o = *opts;
	if (!o.initial_map_size)
		o.initial_map_size = DEFAULT_INITIAL_MAP;
	if (!o.max_map_size)
		o.max_map_size = DEFAULT_MAX_MAP;
	if (o.initial_map_size > o.max_map_size)
		o.initial_map_size = o.max_map_size;
	if (!o.txn_bytes)
		o.txn_bytes = DEFAULT_TXN_BYTES;
	if (o.read_only)
		o.create = 0;

	if (stat(dir, &st) != 0) {
		if (errno != ENOENT)
			return qe_fail(QE_EIO, "store: stat '%s': %s", dir, strerror(errno));
		if (!o.create)
			return qe_fail(QE_ENOTFOUND, "store: no store at '%s' (folder missing)", dir);
		if ((rc = mkdir_p(dir)))
			return rc;
	} else if (!S_ISDIR(st.st_mode)) {
		return qe_fail(QE_EINVAL, "store: '%s' is not a folder", dir);
	}

	store *s = qe_calloc(1, sizeof(*s));
	size_t dlen = strlen(dir);
	datafile = qe_malloc(dlen + sizeof("/data.mdb"));
	if (!s || !datafile || !(s->path = qe_strdup(dir))) {
		rc = qe_fail(QE_ENOMEM, "store: allocate handle for '%s'", dir);
		goto fail_alloc;
	}
	memcpy(datafile, dir, dlen);
	memcpy(datafile + dlen, "/data.mdb", sizeof("/data.mdb"));
	if (stat(datafile, &st) != 0 && !o.create) {
		rc = qe_fail(QE_ENOTFOUND, "store: no store at '%s' (data.mdb missing)", dir);
		goto fail_alloc;
	}
	/* LMDB trusts its pages; this process reads them only after a child has (check.c) */
	if ((rc = store__check_pages(dir, datafile)))
		goto fail_alloc;
	s->pid = getpid();
	s->max_map_size = o.max_map_size;
	s->txn_bytes = o.txn_bytes;
	s->read_only = o.read_only;
	s->grow_on_full_only = o.grow_on_full_only;
	s->page_size = (size_t)sysconf(_SC_PAGESIZE);
	s->sync_mode = o.sync_mode;
	s->writemap = !o.read_only;
	s->data_fd = -1;
	s->lock_fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	/* Before the environment exists: LMDB would extend a truncated file. */
	if (s->writemap && (rc = check_file_size(s, datafile)))
		goto fail_mutex;
	if (s->writemap && (s->lock_fd = open(datafile, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		rc = qe_fail(QE_EIO, "store '%s': open '%s': %s", dir, datafile, strerror(errno));
		goto fail_mutex;
	}

	if ((rc = mdb_env_create(&s->env))) {
		rc = store_mdb_fail(s, rc, "create the environment handle");
		goto fail_mutex;
	}
	/* Sizes a new environment; an existing one's recorded size is adopted below.
	 * With WRITEMAP the open sizes the file to the map: never below its length. */
	resize_lock(s);
	{
		size_t len = 0;
		struct stat fst;
		if (s->lock_fd >= 0 && fstat(s->lock_fd, &fst) == 0)
			len = round_up((size_t)fst.st_size, s->page_size);
		size_t want = round_up(o.initial_map_size, s->page_size);
		mdb_env_set_mapsize(s->env, want > len ? want : len);
	}
	mdb_env_set_maxdbs(s->env, 4);
	mdb_env_set_maxreaders(s->env, 512);
	/* NOTLS: a read transaction belongs to the handle, not to a thread. */
	unsigned flags = MDB_NOTLS;
	if (o.read_only)
		flags |= MDB_RDONLY;
	if (s->writemap)
		flags |= MDB_WRITEMAP;
	if (o.sync_mode == STORE_SYNC_META)
		flags |= MDB_NOMETASYNC;
	else if (o.sync_mode == STORE_SYNC_NONE)
		flags |= MDB_NOSYNC;
	rc = mdb_env_open(s->env, dir, flags, 0644);
	if (rc == EACCES && o.read_only) {
		/* A reader without write permission on lock.mdb (a run directory made
		 * read-only): no reader table then, which is safe because nobody
		 * without that permission can write either, and nobody else may be
		 * writing a store that is being read without the lock file. */
		mdb_env_close(s->env);
		s->env = NULL;
		if ((rc = mdb_env_create(&s->env))) {
			resize_unlock(s);
			rc = store_mdb_fail(s, rc, "create the environment handle");
			goto fail_mutex;
		}
		mdb_env_set_mapsize(s->env, round_up(o.initial_map_size, s->page_size));
		mdb_env_set_maxdbs(s->env, 4);
		rc = mdb_env_open(s->env, dir, flags | MDB_NOLOCK, 0644);
		if (!rc)
			qe_log(QE_LOG_DEBUG, "store '%s': lock.mdb is not writable: reading without LMDB's lock file", dir);
	}
	resize_unlock(s);
	if (rc) {
		rc = store_mdb_fail(s, rc, "open the LMDB environment (data.mdb)");
		goto fail_env;
	}
	mdb_filehandle_t fd;
	if ((rc = mdb_env_get_fd(s->env, &fd))) {
		rc = store_mdb_fail(s, rc, "get the data file's descriptor");
		goto fail_env;
	}
	/* Our own descriptor for pread/pwrite: its readahead state is not
	 * disturbed by faults on LMDB's map (which share LMDB's descriptor). */
	if (s->lock_fd >= 0) {
		s->data_fd = s->lock_fd;
	} else if ((s->data_fd = open(datafile, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = qe_fail(QE_EIO, "store '%s': open '%s': %s", dir, datafile, strerror(errno));
		goto fail_env;
	} else {
		s->own_read_fd = 1;
	}
	posix_fadvise(s->data_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	(void)fd;
	MDB_stat est;
	if (mdb_env_stat(s->env, &est) == 0)
		s->db_page_size = est.ms_psize;
	int dead = 0;
	mdb_reader_check(s->env, &dead);
	if (dead)
		qe_log(QE_LOG_INFO, "store '%s': cleared %d reader slots of dead processes", dir, dead);

	MDB_envinfo info;
	if (!s->writemap && (rc = check_file_size(s, datafile)))
		goto fail_env;
	/* Take the size recorded by the last writer, then at least the initial size. */
	if ((rc = adopt_map(s)))
		goto fail_env;
	mdb_env_info(s->env, &info);
	if (info.me_mapsize < o.initial_map_size &&
	    (rc = set_map(s, round_up(o.initial_map_size, s->page_size), "set the map size")))
		goto fail_env;
	if ((rc = open_dbs(s, o.create)))
		goto fail_env;
	free(datafile);
	*out = s;
	return 0;

fail_env:
	/* a failed open still needs close */
	mdb_env_close(s->env);
	if (s->own_read_fd)
		close(s->data_fd);
fail_mutex:
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_mutex_destroy(&s->mu);
fail_alloc:
	free(datafile);
	if (s)
		free(s->path);
	free(s);
	return rc;
}

void store_close(store *s)
{
	if (!s)
		return;
	/* An environment inherited through fork must not be closed in the child:
	 * mdb_env_close would release the reader slots of the parent's pid. */
	if (getpid() == s->pid)
		mdb_env_close(s->env);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->own_read_fd)
		close(s->data_fd);
	pthread_mutex_destroy(&s->mu);
	free(s->path);
	free(s);
}

int store_sync(store *s)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	if (s->read_only)
		return 0;
	/* With WRITEMAP: msync of the map, which covers the pages chunk.c wrote
	 * with pwrite (one page cache); the fdatasync makes that explicit. */
	rc = qe_fault_hit(QE_FAULT_LMDB_SYNC) ? EIO : mdb_env_sync(s->env, 1);
	if (rc)
		return store_mdb_fail(s, rc, "sync to disk");
	if (s->writemap && qe_fdatasync(s->data_fd) != 0)
		return qe_fail(qe_errno_status(errno), "store '%s': sync data.mdb to disk: %s", s->path, strerror(errno));
	return 0;
}

int store_stats_get(store *s, store_stats *out)
{
	int rc = store_check(s);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->mu);
	MDB_txn *txn;
	rc = store_read_begin(s, &txn);
	if (rc)
		goto out_unlock;
	MDB_stat st;
	int mrc = mdb_stat(txn, s->dbi_chunks, &st);
	if (mrc) {
		mdb_txn_abort(txn);
		rc = store_mdb_fail(s, mrc, "read chunk statistics");
		goto out_unlock;
	}
	out->chunks = st.ms_entries;
	MDB_val k = { 5, "bytes" }, v;
	if (mdb_get(txn, s->dbi_meta, &k, &v) == 0 && v.mv_size == 8)
		out->bytes = store_get_u64(v.mv_data);
	mdb_txn_abort(txn);
	MDB_envinfo info;
	mdb_env_info(s->env, &info);
	out->map_size = info.me_mapsize;
	out->used_bytes = used_bytes(s, &info);
	out->grows = s->grows;
	out->adopts = s->adopts;
	char buf[4096];
	struct stat fst;
	snprintf(buf, sizeof(buf), "%s/data.mdb", s->path);
	if (stat(buf, &fst) == 0)
		out->file_bytes = (uint64_t)fst.st_blocks * 512; /* allocated: with WRITEMAP the file is sparse */
out_unlock:
	pthread_mutex_unlock(&s->mu);
	return rc;
}
