/*
 * check.c - a store's pages read in a child process before this process
 * trusts them (issue 35).
 *
 * LMDB trusts its pages: one flipped bit in a page header or a node's flags
 * (a chunk entry marked F_DUPDATA, a child page number past the end of the
 * file) makes mdb_get or a cursor follow a wild pointer, and the process dies
 * by SIGSEGV.  So before a process opens an existing store, a forked child
 * opens it read-only without the lock file and walks every page a reader can
 * reach: the main database, each named database (meta, chunks, touch) with a
 * cursor over every entry, and for each value checks that it lies inside
 * data.mdb (a value past the end would fault when it is hashed).  The parent
 * waits: a child that dies by a signal, or meets an LMDB error, means the
 * store is damaged, and the open fails with QE_ECORRUPT naming data.mdb and
 * what the child met - the process itself never touches the bad page.
 *
 * Why a child rather than a structural check in process: LMDB's page format
 * is not a public interface, and a checker of our own would have to know
 * every way a page can be wrong; the child needs to know none, and reads the
 * pages exactly as the real reader will (the same library, the same walk).
 * Values on overflow pages are not read: their bytes are checked against the
 * chunk's content hash on every read.
 *
 * A walk costs a fork and a pass over the store's branch and leaf pages
 * (tens of milliseconds for a store of thousands of chunks); a process checks
 * each data.mdb once for a given size and modification time.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/core/status.h"

/* Exit codes of the child. */
#define CHECK_OK 0
#define CHECK_DAMAGED 3

/* The child's report to the parent, through a pipe. */
static void say(int fd, const char *fmt, const char *a, const char *b)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), fmt, a, b);
	if (n > 0 && write(fd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1) < 0)
		return;
}

/*
 * A value must lie where its node says: inside its leaf page (inline), or,
 * on overflow pages (the value starts right after a page header, LMDB_PAGEHDR
 * bytes into a page), inside the pages that header counts, all of them inside
 * data.mdb.  Reading the header may fault on a wild page number: in the child
 * that is the answer.
 */
static int value_ok(const MDB_val *v, size_t psize, size_t file_len)
{
	size_t off = (uintptr_t)v->mv_data % psize;
	if (off != LMDB_PAGEHDR)
		return off + v->mv_size <= psize;
	lmdb_page_head h = lmdb_page_head_at((const unsigned char *)v->mv_data - LMDB_PAGEHDR);
	if (!(h.flags & LMDB_P_OVERFLOW))
		return v->mv_size <= psize - LMDB_PAGEHDR;
	return h.pgno < file_len / psize && h.pages <= file_len / psize - h.pgno &&
	       LMDB_PAGEHDR + v->mv_size <= (size_t)h.pages * psize;
}

/* Every entry of dbi, each value where its node says (value_ok). */
static int walk_db(MDB_txn *txn, MDB_dbi dbi, const char *name, size_t psize, size_t len, int fd)
{
	MDB_cursor *cur;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc) {
		say(fd, "database '%s': %s", name, mdb_strerror(rc));
		return CHECK_DAMAGED;
	}
	MDB_val k, v;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (!value_ok(&v, psize, len)) {
			mdb_cursor_close(cur);
			say(fd, "database '%s': a value %s", name, "outside the pages its node names");
			return CHECK_DAMAGED;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND) {
		say(fd, "database '%s': %s", name, mdb_strerror(rc));
		return CHECK_DAMAGED;
	}
	return CHECK_OK;
}

/* The child: open dir read-only, without the lock file, and walk it; the exit code says. */
static int child_walk(const char *dir, const char *datafile, size_t file_len, int fd)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi main_dbi;
	int rc = mdb_env_create(&env);
	if (!rc)
		rc = mdb_env_set_maxdbs(env, 8);
	if (!rc)
		rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
	if (!rc)
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
	if (!rc)
		rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
	if (rc) {
		say(fd, "opening it: %s%s", mdb_strerror(rc), "");
		return CHECK_DAMAGED;
	}
	MDB_stat est;
	if ((rc = mdb_env_stat(env, &est))) {
		say(fd, "reading its statistics: %s%s", mdb_strerror(rc), "");
		return CHECK_DAMAGED;
	}
	size_t psize = est.ms_psize;
	/*
	 * Every page of the snapshot this transaction reads was written before its
	 * meta page: the file is at least that long now.  A writer of another
	 * process may have grown it since the parent measured it.
	 */
	struct stat now;
	if (stat(datafile, &now) == 0 && (size_t)now.st_size > file_len)
		file_len = (size_t)now.st_size;
	static const char *const names[] = { "meta", "chunks", "touch" };
	if (walk_db(txn, main_dbi, "(main)", psize, file_len, fd))
		return CHECK_DAMAGED;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		MDB_dbi dbi;
		rc = mdb_dbi_open(txn, names[i], 0, &dbi);
		if (rc == MDB_NOTFOUND)
			continue; /* a store without it: open_dbs says what that means */
		if (rc) {
			say(fd, "database '%s': %s", names[i], mdb_strerror(rc));
			return CHECK_DAMAGED;
		}
		if (walk_db(txn, dbi, names[i], psize, file_len, fd))
			return CHECK_DAMAGED;
	}
	return CHECK_OK;
}

/* What this process has checked already: one entry per data.mdb state. */
typedef struct checked {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
} checked;

#define CHECKED_MAX 64
static checked g_checked[CHECKED_MAX];
static int g_nchecked;
static pthread_mutex_t g_checked_mu = PTHREAD_MUTEX_INITIALIZER;

static int seen(const struct stat *st, int add)
{
	int found = 0;
	pthread_mutex_lock(&g_checked_mu);
	for (int i = 0; i < g_nchecked && !found; i++)
		found = g_checked[i].dev == st->st_dev && g_checked[i].ino == st->st_ino &&
			g_checked[i].size == st->st_size && g_checked[i].mtime.tv_sec == st->st_mtim.tv_sec &&
			g_checked[i].mtime.tv_nsec == st->st_mtim.tv_nsec;
	if (!found && add) {
		checked *c = &g_checked[g_nchecked < CHECKED_MAX ? g_nchecked++ : 0];
		c->dev = st->st_dev;
		c->ino = st->st_ino;
		c->size = st->st_size;
		c->mtime = st->st_mtim;
	}
	pthread_mutex_unlock(&g_checked_mu);
	return found;
}

/* One walk of dir's pages in a forked child (child_walk); QE_ECORRUPT naming what it met. */
static int walk_in_child(const char *dir, const char *datafile, const struct stat *st)
{
	int pfd[2];
	if (pipe(pfd) != 0)
		return qe_fail(QE_EIO, "store '%s': check its pages: pipe: %s", dir, strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		return qe_fail(QE_EIO, "store '%s': check its pages: fork: %s", dir, strerror(e));
	}
	if (pid == 0) {
		close(pfd[0]);
		/* quiet: what it meets goes through the pipe (a sanitizer's report of the fault too far) */
		int dn = open("/dev/null", O_WRONLY);
		if (dn >= 0)
			dup2(dn, STDERR_FILENO);
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		int code = child_walk(dir, datafile, (size_t)st->st_size, pfd[1]);
		_exit(code);
	}
	close(pfd[1]);
	char msg[256] = "";
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(msg) - 1 && ((n = read(pfd[0], msg + got, sizeof(msg) - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			got += (size_t)n;
	msg[got] = '\0';
	close(pfd[0]);
	int status;
	pid_t w;
	while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (w < 0)
		return qe_fail(QE_EIO, "store '%s': check its pages: waitpid: %s", dir, strerror(errno));
	if (WIFSIGNALED(status))
		return qe_fail(QE_ECORRUPT,
			       "store '%s': data.mdb is damaged: reading its pages killed the checking process (signal "
			       "%d, %s)",
			       dir, WTERMSIG(status), strsignal(WTERMSIG(status)));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != CHECK_OK)
		return qe_fail(QE_ECORRUPT, "store '%s': data.mdb is damaged: %s", dir,
			       msg[0] ? msg : "its pages could not be read");
	return QE_OK;
}

int store__check_pages(const char *dir, const char *datafile)
{
	struct stat st;
	if (stat(datafile, &st) != 0)
		return QE_OK; /* no store yet: nothing to check */
	long psz = sysconf(_SC_PAGESIZE);
	if (st.st_size < 2 * (off_t)(psz > 4096 ? psz : 4096)) {
		char ident[4096];
		snprintf(ident, sizeof(ident), "%s/identity", dir);
		if (access(ident, F_OK) == 0)
			return qe_fail(QE_ECORRUPT,
				       "store '%s': data.mdb is %lld bytes, shorter than LMDB's two meta pages, though the "
				       "store exists (its identity is there): the store is damaged",
				       dir, (long long)st.st_size);
		return QE_OK; /* a creation that did not finish: store_open decides */
	}
	if (seen(&st, 0))
		return QE_OK;
	/*
	 * The child reads without a place in LMDB's reader table (MDB_NOLOCK), so
	 * a writer in another process may reuse the pages of its snapshot while it
	 * walks them.  A damage report is believed when data.mdb did not change
	 * during the walk; otherwise the walk runs again (a few times: a store
	 * written that often is alive, and its next check comes at the next open).
	 */
	int rc = QE_OK;
	for (int attempt = 0; attempt < 5; attempt++) {
		struct stat after;
		rc = walk_in_child(dir, datafile, &st);
		if (rc != QE_ECORRUPT || stat(datafile, &after) != 0 || (after.st_size == st.st_size &&
		    after.st_mtim.tv_sec == st.st_mtim.tv_sec && after.st_mtim.tv_nsec == st.st_mtim.tv_nsec))
			break;
		st = after;
	}
	if (rc)
		return rc;
	seen(&st, 1);
	return QE_OK;
}
