/*
 * compact.c - give a store's free pages back to the disk (store.h,
 * store_compact).
 *
 * gc deletes chunks, and LMDB keeps the freed pages inside data.mdb for
 * later writes: the file does not shrink.  Compaction writes LMDB's
 * compacting copy (live pages only) beside the store and renames it over
 * data.mdb, in Redis's durable order (tmp, fsync, rename, fsync the
 * folder), so a crash at any moment leaves one whole store, old or new.
 *
 * Nobody may use the old file meanwhile: a writer would write into a file
 * about to be replaced, and a reader that opens the new file with the old
 * file's reader table (lock.mdb) would pick a meta page by the old
 * transaction id.  Every LMDB opener holds a shared fcntl lock on byte 0 of
 * lock.mdb (and tries an exclusive one first, to know it is alone); we take
 * that byte exclusively with an open-file-description lock, which conflicts
 * with every other process's lock and with this process's own (so a handle
 * still open here is found too).  Holding it, we read the store with LMDB's
 * lock file off (MDB_NOLOCK), swap the files, and empty lock.mdb: the next
 * opener is then alone, takes the exclusive lock and builds a fresh reader
 * table from the new file's meta pages.  One that queued for the lock while
 * we held it finds the empty lock file and fails its open, rather than read
 * the new file with the old table.
 */
#define _GNU_SOURCE
#include "store/store_int.h"

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_NAME "data.mdb.compact"

/* Chunks in the "chunks" database of the environment at path (flags: MDB_NOSUBDIR for a file). */
static int count_chunks(const char *dir, const char *path, unsigned flags, uint64_t *out)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_dbi dbi;
	MDB_stat st;
	int rc = mdb_env_create(&env);
	if (!rc)
		rc = mdb_env_set_maxdbs(env, 4);
	if (!rc)
		rc = mdb_env_open(env, path, flags | MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
	if (!rc)
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
	if (!rc)
		rc = mdb_dbi_open(txn, "chunks", 0, &dbi);
	if (!rc)
		rc = mdb_stat(txn, dbi, &st);
	if (txn)
		mdb_txn_abort(txn);
	mdb_env_close(env);
	if (rc)
		return qe_fail(rc == MDB_NOTFOUND ? QE_ECORRUPT : QE_ESTORE, "store '%s': reading '%s': %s", dir, path,
			       mdb_strerror(rc));
	*out = st.ms_entries;
	return 0;
}

/* LMDB's compacting copy of the store in dir into fd.  The environment is opened without its lock file. */
static int copy_compact(const char *dir, int fd, const char *tmp)
{
	MDB_env *env = NULL;
	int rc = mdb_env_create(&env);
	if (!rc)
		rc = mdb_env_set_maxdbs(env, 4);
	if (!rc)
		rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
	if (rc) {
		mdb_env_close(env);
		return qe_fail(QE_ESTORE, "store '%s': open the LMDB environment to copy it: %s", dir, mdb_strerror(rc));
	}
	if (qe_fault_hit(QE_FAULT_WRITE))
		rc = ENOSPC; /* as a full disk fails the copy's writes */
	else
		rc = mdb_env_copyfd2(env, fd, MDB_CP_COMPACT);
	mdb_env_close(env);
	if (rc)
		return qe_fail(rc == ENOSPC || rc == EDQUOT ? QE_ENOSPC : rc > 0 ? QE_EIO : QE_ESTORE,
			       "store '%s': writing the compacted copy '%s': %s", dir, tmp,
			       rc > 0 ? strerror(rc) : mdb_strerror(rc));
	return 0;
}

/* Take byte 0 of lock.mdb for ourselves (lfd open on it), or say who has the store open. */
static int take_alone(const char *dir, int lfd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	if (fcntl(lfd, F_OFD_SETLK, &fl) == 0)
		return 0;
	int e = errno;
	if (e != EAGAIN && e != EACCES)
		return qe_fail(QE_EIO, "store '%s': locking lock.mdb: %s", dir, strerror(e));
	struct flock who = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	char pid[48] = "";
	if (fcntl(lfd, F_OFD_GETLK, &who) == 0 && who.l_type != F_UNLCK && who.l_pid > 0)
		snprintf(pid, sizeof(pid), " (pid %ld)", (long)who.l_pid);
	return qe_fail(QE_EBUSY,
		       "store '%s' is open in another process%s: compaction needs it alone (stop the training, "
		       "resume or reader that has it open, then compact again)",
		       dir, pid);
}

int store_compact(const char *dir, store_compact_result *out)
{
	char data[PATH_MAX], tmp[PATH_MAX], lockf[PATH_MAX];
	struct stat st;
	store_compact_result r;
	uint64_t n = 0;
	int lfd, tfd = -1, dfd, renamed = 0;
	memset(&r, 0, sizeof(r));
	if (out)
		memset(out, 0, sizeof(*out));
	if (!dir || !dir[0])
		return qe_fail(QE_EINVAL, "store_compact: empty folder path");
	if ((size_t)snprintf(data, sizeof(data), "%s/data.mdb", dir) >= sizeof(data) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/" TMP_NAME, dir) >= sizeof(tmp) ||
	    (size_t)snprintf(lockf, sizeof(lockf), "%s/lock.mdb", dir) >= sizeof(lockf))
		return qe_fail(QE_EINVAL, "store '%s': path too long", dir);

	/* The store's own open checks it (format, pages, size) and counts its chunks. */
	store *s = NULL;
	store_opts o = { .read_only = 1 };
	store_stats ss;
	int rc = store_open(dir, &o, &s);
	if (!rc)
		rc = store_stats_get(s, &ss);
	store_close(s);
	if (rc)
		return rc;
	r.chunks = ss.chunks;

	lfd = open(lockf, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lfd < 0)
		return qe_fail(qe_errno_status(errno), "store '%s': open '%s': %s", dir, lockf, strerror(errno));
	if ((rc = take_alone(dir, lfd)))
		goto close_lock;
	if (stat(data, &st) != 0) {
		rc = qe_fail(qe_errno_status(errno), "store '%s': stat '%s': %s", dir, data, strerror(errno));
		goto close_lock;
	}
	r.disk_before = (uint64_t)st.st_blocks * 512;
	r.length_before = (uint64_t)st.st_size;

	/* 1. the copy, flushed */
	tfd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
	if (tfd < 0) {
		rc = qe_fail(qe_errno_status(errno), "store '%s': create '%s': %s", dir, tmp, strerror(errno));
		goto close_lock;
	}
	if ((rc = copy_compact(dir, tfd, tmp)))
		goto remove_tmp;
	if (qe_fsync(tfd) != 0) {
		rc = qe_fail(qe_errno_status(errno), "store '%s': fsync '%s': %s", dir, tmp, strerror(errno));
		goto remove_tmp;
	}
	rc = close(tfd);
	tfd = -1;
	if (rc != 0) {
		rc = qe_fail(qe_errno_status(errno), "store '%s': close '%s': %s", dir, tmp, strerror(errno));
		goto remove_tmp;
	}
	/* 2. the copy holds what the store does */
	if ((rc = count_chunks(dir, tmp, MDB_NOSUBDIR, &n)))
		goto remove_tmp;
	if (n != r.chunks) {
		rc = qe_fail(QE_ECORRUPT, "store '%s': the compacted copy holds %llu chunks, the store %llu: not used", dir,
			     (unsigned long long)n, (unsigned long long)r.chunks);
		goto remove_tmp;
	}
	/* 3. into place, durably */
	if (qe_rename(tmp, data) != 0) {
		rc = qe_fail(qe_errno_status(errno), "store '%s': rename '%s' to '%s': %s", dir, tmp, data,
			     strerror(errno));
		goto remove_tmp;
	}
	renamed = 1;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || qe_fsync(dfd) != 0) {
		/* the new file is whole and flushed; only the rename may not survive a crash */
		rc = qe_fail(qe_errno_status(errno),
			     "store '%s': compacted, but the fsync of the folder failed (a crash may bring back the old file, "
			     "also a whole store): %s",
			     dir, strerror(errno));
	}
	if (dfd >= 0)
		close(dfd);
	/* 4. a fresh reader table for the new file (see the top of this file) */
	if (ftruncate(lfd, 0) != 0)
		qe_log(QE_LOG_WARN, "store '%s': emptying lock.mdb after compaction: %s", dir, strerror(errno));
	if (stat(data, &st) == 0) {
		r.disk_after = (uint64_t)st.st_blocks * 512;
		r.length_after = (uint64_t)st.st_size;
	}
	goto close_lock;
remove_tmp:
	if (tfd >= 0)
		close(tfd);
	unlink(tmp);
close_lock:
	close(lfd); /* drops the lock */
	if (out && (renamed || !rc))
		*out = r;
	return rc;
}
