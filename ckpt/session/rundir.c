/*
 * rundir.c - where a run's files are (see rundir.h for the layout), the
 * identity every store carries, the writer locks, the refusal of network
 * filesystems, and the one opener of a run directory (ckpt_run_open), which
 * the checkpoint commands and cli's resume and compare share.
 *
 * Identities are small text files written the durable way (temp file, fsync,
 * rename, fsync of the folder), so a crash leaves either no identity or a
 * whole one.  The store id is random, not derived from the rank or the path:
 * two hosts that each hold a STORES/rank-1 (a remapped resume) must never be
 * taken for one another.
 */
#include "ckpt/session/rundir_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* --- paths -------------------------------------------------------------------- */

static int join(char *buf, size_t len, const char *a, const char *b)
{
	if ((size_t)snprintf(buf, len, "%s/%s", a, b) >= len)
		return qe_fail(QE_EINVAL, "path too long: '%s/%s'", a, b);
	return QE_OK;
}

int ckpt_rundir_catalog(const char *run_dir, char *buf, size_t len)
{
	return join(buf, len, run_dir, "catalog.db");
}

int ckpt_rundir_stores(const char *run_dir, char *buf, size_t len)
{
	const char *local = ckpt_options_get()->local_dir;
	return join(buf, len, local[0] ? local : run_dir, "stores");
}

/* ROOT/rank-R, a rank's store in a folder of stores. */
static int rank_store_in(const char *root, int rank, char *buf, size_t len)
{
	char leaf[32];
	snprintf(leaf, sizeof(leaf), "rank-%d", rank);
	return join(buf, len, root, leaf);
}

int ckpt_rundir_rank_store(const char *run_dir, int rank, char *buf, size_t len)
{
	char root[CKPT_PATH_MAX];
	int rc = ckpt_rundir_stores(run_dir, root, sizeof(root));
	return rc ? rc : rank_store_in(root, rank, buf, len);
}

int ckpt_rundir_legacy_store(const char *run_dir, char *buf, size_t len)
{
	return join(buf, len, run_dir, "store");
}

void ckpt_host_name(char *buf, size_t len)
{
	if (gethostname(buf, len) || !buf[0])
		snprintf(buf, len, "unknown");
	buf[len - 1] = 0;
}

int ckpt_mkdirs(const char *dir)
{
	char p[CKPT_PATH_MAX];
	if ((size_t)snprintf(p, sizeof(p), "%s", dir) >= sizeof(p))
		return qe_fail(QE_EINVAL, "path too long: '%s'", dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) && errno != EEXIST)
			return qe_fail(qe_errno_status(errno), "cannot create folder '%s': %s", p, strerror(errno));
		*s = '/';
	}
	if (mkdir(p, 0755) && errno != EEXIST)
		return qe_fail(qe_errno_status(errno), "cannot create folder '%s': %s", p, strerror(errno));
	return QE_OK;
}

/* --- identity ----------------------------------------------------------------- */

int ckpt_store_identity_read(const char *store_dir, ckpt_store_identity *out)
{
	char path[CKPT_PATH_MAX], line[400];
	int rc;
	memset(out, 0, sizeof(*out));
	out->rank = -1;
	if ((rc = join(path, sizeof(path), store_dir, "identity")))
		return rc;
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? qe_fail(QE_ENOTFOUND, "store '%s' has no identity file", store_dir)
				       : qe_fail(QE_EIO, "cannot read '%s': %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq++ = 0;
		if (strcmp(line, "run_id") == 0)
			snprintf(out->run_id, sizeof(out->run_id), "%s", eq);
		else if (strcmp(line, "rank") == 0)
			out->rank = atoi(eq);
		else if (strcmp(line, "store_id") == 0)
			snprintf(out->store_id, sizeof(out->store_id), "%s", eq);
		else if (strcmp(line, "host") == 0)
			snprintf(out->host, sizeof(out->host), "%s", eq);
	}
	fclose(f);
	if (!out->run_id[0] || out->rank < 0 || !out->store_id[0])
		return qe_fail(QE_ECORRUPT, "store identity '%s' is incomplete (needs run_id, rank and store_id)", path);
	return QE_OK;
}

/* Durable small file: temp, fsync, rename, fsync the folder. */
static int write_durable(const char *dir, const char *name, const char *text)
{
	char path[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX + 32];
	int rc = join(path, sizeof(path), dir, name);
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return qe_fail(qe_errno_status(errno), "cannot create '%s': %s", tmp, strerror(errno));
	size_t n = strlen(text);
	if (qe_write(fd, text, n) != (ssize_t)n || qe_fsync(fd)) {
		rc = qe_fail(qe_errno_status(errno), "cannot write '%s': %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return rc;
	}
	close(fd);
	if (qe_rename(tmp, path)) {
		rc = qe_fail(qe_errno_status(errno), "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
		unlink(tmp);
		return rc;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	if (dfd >= 0) {
		qe_fsync(dfd);
		close(dfd);
	}
	return QE_OK;
}

static int identity_ensure(const char *store_dir, const char *run_id, int rank, char tier, ckpt_store_identity *out)
{
	int rc = ckpt_store_identity_read(store_dir, out);
	if (rc == QE_OK) {
		if (strcmp(out->run_id, run_id))
			return qe_fail(QE_EMISMATCH,
				       "the store '%s' belongs to run '%s', not to run '%s' (a folder of another run?)",
				       store_dir, out->run_id, run_id);
		return QE_OK;
	}
	if (rc != QE_ENOTFOUND)
		return rc;
	if ((rc = ckpt_mkdirs(store_dir)))
		return rc;
	unsigned char rnd[8];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t v = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
		memcpy(rnd, &v, sizeof(rnd));
	}
	memset(out, 0, sizeof(*out));
	snprintf(out->run_id, sizeof(out->run_id), "%s", run_id);
	out->rank = rank;
	snprintf(out->store_id, sizeof(out->store_id), "%c%d-%02x%02x%02x%02x%02x%02x%02x%02x", tier, rank, rnd[0], rnd[1],
		 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	ckpt_host_name(out->host, sizeof(out->host));
	char text[512];
	snprintf(text, sizeof(text), "run_id=%s\nrank=%d\nstore_id=%s\nhost=%s\n", out->run_id, out->rank,
		 out->store_id, out->host);
	return write_durable(store_dir, "identity", text);
}

int ckpt_store_identity_ensure(const char *store_dir, const char *run_id, int rank, ckpt_store_identity *out)
{
	return identity_ensure(store_dir, run_id, rank, 'r', out);
}

int ckpt_store_identity_ensure_memory(const char *store_dir, const char *run_id, int rank, ckpt_store_identity *out)
{
	return identity_ensure(store_dir, run_id, rank, CKPT_MEMORY_STORE_PREFIX[0], out);
}

/* --- the memory tier ------------------------------------------------------------ */

const char *ckpt_memory_dir(void)
{
	const char *m = ckpt_options_get()->memory_dir;
	return m[0] ? m : NULL;
}

int ckpt_store_id_is_memory(const char *store_id)
{
	return store_id && strncmp(store_id, CKPT_MEMORY_STORE_PREFIX, strlen(CKPT_MEMORY_STORE_PREFIX)) == 0;
}

/* MEM/<run_id>: the folder of a run's memory stores on this host. */
static int memory_run_dir(const char *run_id, char *buf, size_t len)
{
	const char *mem = ckpt_memory_dir();
	if (!mem)
		return QE_ENOTFOUND;
	return join(buf, len, mem, run_id);
}

int ckpt_rundir_memory_store(const char *run_id, int rank, char *buf, size_t len)
{
	char root[CKPT_PATH_MAX];
	int rc = memory_run_dir(run_id, root, sizeof(root));
	return rc ? rc : rank_store_in(root, rank, buf, len);
}

/* The schema-2 store's owner: RUN/store/run_id. */
static int legacy_owner(const char *store_dir, char *owner, size_t len)
{
	char path[CKPT_PATH_MAX];
	owner[0] = 0;
	if (join(path, sizeof(path), store_dir, "run_id"))
		return 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(owner, (int)len, f))
		owner[0] = 0;
	fclose(f);
	owner[strcspn(owner, "\r\n")] = 0;
	return owner[0] != 0;
}

static int push_store(ckpt_local_store **v, int *n, int *cap, const ckpt_store_identity *id, const char *path)
{
	if (*n == *cap) {
		int nc = *cap ? 2 * *cap : 8;
		ckpt_local_store *p = qe_realloc(*v, (size_t)nc * sizeof(*p));
		if (!p)
			return qe_fail(QE_ENOMEM, "store scan: out of memory");
		*v = p;
		*cap = nc;
	}
	ckpt_local_store *s = &(*v)[(*n)++];
	s->id = *id;
	snprintf(s->path, sizeof(s->path), "%s", path);
	return QE_OK;
}

/* Every ROOT/rank-* store with an identity of run_id, appended to *v. */
static int scan_root(const char *root, const char *run_id, ckpt_local_store **v, int *cnt, int *cap)
{
	char path[CKPT_PATH_MAX];
	int rc = QE_OK;
	DIR *d = opendir(root);
	if (!d && errno != ENOENT)
		return qe_fail(QE_EIO, "cannot list the stores folder '%s': %s", root, strerror(errno));
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "rank-", 5))
			continue;
		if ((rc = join(path, sizeof(path), root, e->d_name)))
			break;
		ckpt_store_identity id;
		int irc = ckpt_store_identity_read(path, &id);
		if (irc == QE_ENOTFOUND)
			continue; /* created, never written: nothing to serve */
		if (irc) {
			qe_log(QE_LOG_WARN, "skipping store '%s': %s", path, qe_last_error());
			continue;
		}
		if (strcmp(id.run_id, run_id)) {
			qe_log(QE_LOG_WARN, "skipping store '%s': it belongs to run '%s', not '%s'", path, id.run_id,
			       run_id);
			continue;
		}
		if ((rc = push_store(v, cnt, cap, &id, path)))
			break;
	}
	if (d)
		closedir(d);
	return rc;
}

int ckpt_local_stores_scan(const char *run_dir, const char *run_id, ckpt_local_store **out, int *n)
{
	char root[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
	ckpt_local_store *v = NULL;
	int cnt = 0, cap = 0, rc;
	*out = NULL;
	*n = 0;
	if ((rc = ckpt_rundir_stores(run_dir, root, sizeof(root))))
		return rc;
	rc = scan_root(root, run_id, &v, &cnt, &cap);
	if (!rc && ckpt_memory_dir() && !(rc = memory_run_dir(run_id, root, sizeof(root))))
		rc = scan_root(root, run_id, &v, &cnt, &cap);
	char owner[128];
	/* The schema-2 store: its run_id file names its run (older ones have none). */
	struct stat sb;
	if (!rc && !(rc = ckpt_rundir_legacy_store(run_dir, path, sizeof(path))) && stat(path, &sb) == 0 &&
	    S_ISDIR(sb.st_mode) && (!legacy_owner(path, owner, sizeof(owner)) || strcmp(owner, run_id) == 0)) {
		ckpt_store_identity id;
		memset(&id, 0, sizeof(id));
		snprintf(id.run_id, sizeof(id.run_id), "%s", run_id);
		ckpt_host_name(id.host, sizeof(id.host));
		rc = push_store(&v, &cnt, &cap, &id, path);
	}
	if (rc) {
		free(v);
		return rc;
	}
	/* Sorted by path, so every scan of one disk lists the stores alike. */
	for (int i = 1; i < cnt; i++)
		for (int j = i; j > 0 && strcmp(v[j - 1].path, v[j].path) > 0; j--) {
			ckpt_local_store t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*out = v;
	*n = cnt;
	return QE_OK;
}

/* --- open store sets ---------------------------------------------------------------- */

struct ckpt_storeset {
	int n;
	ckpt_local_store *where;
	store **st;
};

int ckpt_storeset_open(const char *run_dir, const char *run_id, int writable, ckpt_storeset **out)
{
	*out = NULL;
	ckpt_storeset *s = qe_calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "stores: out of memory");
	int rc = ckpt_local_stores_scan(run_dir, run_id, &s->where, &s->n);
	if (!rc && !(s->st = qe_calloc((size_t)s->n + 1, sizeof(store *))))
		rc = qe_fail(QE_ENOMEM, "stores: out of memory");
	for (int i = 0; !rc && i < s->n; i++) {
		store_opts o = { 0 };
		o.read_only = !writable;
		if ((rc = ckpt_fs_check(s->where[i].path, "a store")))
			break;
		rc = store_open(s->where[i].path, &o, &s->st[i]);
		if (rc == QE_ENOTFOUND) {
			/* Its creation never finished (the first write failed): it holds nothing. */
			qe_log(QE_LOG_DEBUG, "skipping store '%s': %s", s->where[i].path, qe_last_error());
			memmove(&s->where[i], &s->where[i + 1], (size_t)(s->n - i - 1) * sizeof(*s->where));
			s->n--;
			i--;
			rc = QE_OK;
		}
	}
	if (rc) {
		ckpt_storeset_close(s);
		return rc;
	}
	*out = s;
	return QE_OK;
}

void ckpt_storeset_close(ckpt_storeset *s)
{
	if (!s)
		return;
	for (int i = 0; s->st && i < s->n; i++)
		store_close(s->st[i]);
	free(s->st);
	free(s->where);
	free(s);
}

int ckpt_storeset_count(const ckpt_storeset *s) { return s ? s->n : 0; }
store *ckpt_storeset_at(ckpt_storeset *s, int i) { return s->st[i]; }
const ckpt_local_store *ckpt_storeset_where(const ckpt_storeset *s, int i) { return &s->where[i]; }

int ckpt_storeset_find(const ckpt_storeset *s, const char *store_id)
{
	for (int i = 0; s && i < s->n; i++)
		if (strcmp(s->where[i].id.store_id, store_id ? store_id : "") == 0)
			return i;
	return -1;
}

int ckpt_storeset_get_chunk(ckpt_storeset *s, const store_hash *h, void *dst, size_t cap, uint64_t *size)
{
	for (int i = 0; s && i < s->n; i++) {
		int present = 0, rc = store_has_chunk(s->st[i], h, &present, NULL);
		if (rc)
			return rc;
		if (present)
			return store_get_chunk(s->st[i], h, dst, cap, size);
	}
	char hex[STORE_HASH_HEX];
	return qe_fail(QE_ENOTFOUND, "chunk %s is in no store of this host", store_hash_hex(h, hex));
}

/* --- locks ---------------------------------------------------------------------- */

/*
 * flock conflicts between two open files even in one process, so a process
 * that takes a lock it already holds (two sessions of one rank in a test)
 * shares the first: one entry per locked file, counted.
 */
struct ckpt_lock {
	int fd;
	pid_t pid;
	dev_t dev;
	ino_t ino;
	int refs;
	struct ckpt_lock *next;
};

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static ckpt_lock *held;

static ckpt_lock *held_find(dev_t dev, ino_t ino)
{
	for (ckpt_lock *l = held; l; l = l->next)
		if (l->dev == dev && l->ino == ino && l->pid == getpid())
			return l;
	return NULL;
}

int ckpt_lock_take(const char *path, const char *command, ckpt_lock **out)
{
	*out = NULL;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return qe_fail(errno == ENOENT ? QE_ENOTFOUND : qe_errno_status(errno), "cannot open the lock '%s': %s", path,
			       strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb)) {
		int err = errno;
		close(fd);
		return qe_fail(QE_EIO, "cannot stat the lock '%s': %s", path, strerror(err));
	}
	pthread_mutex_lock(&held_mu);
	ckpt_lock *have = held_find(sb.st_dev, sb.st_ino);
	if (have) {
		have->refs++;
		pthread_mutex_unlock(&held_mu);
		close(fd);
		*out = have;
		return QE_OK;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int err = errno;
		pthread_mutex_unlock(&held_mu);
		char who[300] = "";
		ssize_t got = pread(fd, who, sizeof(who) - 1, 0);
		close(fd);
		if (got > 0)
			who[got] = 0;
		for (char *p = who; *p; p++)
			if (*p == '\n')
				*p = ' ';
		if (err == EWOULDBLOCK)
			return qe_fail(QE_EBUSY, "'%s' is held by another writer (%s): one writer at a time", path,
				       who[0] ? who : "holder unknown");
		return qe_fail(QE_EIO, "cannot lock '%s': %s", path, strerror(err));
	}
	char host[CKPT_HOST_MAX], text[600];
	ckpt_host_name(host, sizeof(host));
	int n = snprintf(text, sizeof(text), "pid %d on %s: %s\n", (int)getpid(), host, command ? command : "qeffect");
	if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n)
		qe_log(QE_LOG_WARN, "lock '%s': could not record the holder: %s", path, strerror(errno));
	ckpt_lock *l = qe_calloc(1, sizeof(*l));
	if (!l) {
		pthread_mutex_unlock(&held_mu);
		close(fd);
		return qe_fail(QE_ENOMEM, "lock: out of memory");
	}
	l->fd = fd;
	l->pid = getpid();
	l->dev = sb.st_dev;
	l->ino = sb.st_ino;
	l->refs = 1;
	l->next = held;
	held = l;
	pthread_mutex_unlock(&held_mu);
	*out = l;
	return QE_OK;
}

int ckpt_rundir_lock(const char *run_dir, const char *command, ckpt_lock **out)
{
	char path[CKPT_PATH_MAX];
	int rc = join(path, sizeof(path), run_dir, "lock");
	if (rc)
		return rc;
	rc = ckpt_lock_take(path, command, out);
	if (rc == QE_EBUSY)
		return qe_fail_ctx(QE_EBUSY, "run directory '%s' is in use", run_dir); /* the lock's message after it */
	return rc;
}

void ckpt_unlock(ckpt_lock *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&held_mu);
	if (l->pid == getpid() && --l->refs > 0) {
		pthread_mutex_unlock(&held_mu);
		return;
	}
	for (ckpt_lock **p = &held; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&held_mu);
	/* A forked child closes its copy without releasing the parent's lock. */
	close(l->fd);
	free(l);
}

/* --- filesystems ---------------------------------------------------------------- */

static const char *network_fs_name(long type)
{
	switch ((unsigned long)type) {
	case 0x6969: return "NFS";
	case 0xFF534D42: return "CIFS";
	case 0xFE534D42: return "SMB2";
	case 0x517B: return "SMB";
	case 0x0BD00BD0: return "Lustre";
	case 0x47504653: return "GPFS";
	case 0x00C36400: return "CephFS";
	case 0x65735546: return "FUSE";
	case 0x013111A8: return "IBRIX";
	case 0x564C: return "NCP";
	case 0x6B414653: return "AFS";
	case 0x5346414F: return "OpenAFS";
	case 0x19830326: return "fhgfs/BeeGFS";
	case 0x01021997: return "9p";
	default: return NULL;
	}
}

/* statfs of path, or of its nearest existing parent (the filesystem a new file there will be on). */
static int statfs_nearest(const char *path, struct statfs *sf)
{
	char p[CKPT_PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	while (statfs(p, sf)) {
		char *slash = strrchr(p, '/');
		if (errno != ENOENT || !slash)
			return -1;
		if (slash == p)
			slash[1] = 0;
		else
			*slash = 0;
	}
	return 0;
}

int ckpt_memory_fs_check(const char *dir)
{
	struct statfs sf;
	if (statfs_nearest(dir, &sf))
		return qe_fail(QE_EINVAL, "the memory tier's folder '%s' cannot be examined: %s", dir, strerror(errno));
	unsigned long t = (unsigned long)sf.f_type;
	if (t == 0x01021994ul /* tmpfs */ || t == 0x858458f6ul /* ramfs */)
		return QE_OK;
	const char *net = network_fs_name((long)sf.f_type);
	const char *name = net ? net
		: t == 0xEF53ul ? "ext2/3/4"
		: t == 0x58465342ul ? "XFS"
		: t == 0x9123683Eul ? "Btrfs"
		: t == 0x794C7630ul ? "overlayfs"
		: "a disk filesystem";
	return qe_fail(QE_EINVAL,
		       "the memory tier's folder '%s' is on %s (type 0x%lx), not in memory: --ckpt-memory needs a tmpfs or "
		       "ramfs folder such as /dev/shm/qeffect (a copy on disk is what --ckpt-replicas already keeps)",
		       dir, name, t);
}

int ckpt_fs_check(const char *path, const char *what)
{
	if (ckpt_options_get()->allow_network_fs)
		return QE_OK;
	struct statfs sf;
	if (statfs_nearest(path, &sf))
		return QE_OK; /* nothing to judge by; opening will say what is wrong */
	const char *fs = network_fs_name((long)sf.f_type);
	if (fs)
		return qe_fail(QE_EUNSUPPORTED,
			       "%s would live on '%s', a %s network filesystem: LMDB and SQLite need node-local storage "
			       "(use --local-dir for the stores; --allow-network-fs or QE_ALLOW_NETWORK_FS=1 if you know "
			       "this filesystem is safe)",
			       what, path, fs);
	return QE_OK;
}

/* A catalog copied in from another run directory names another run than the stores here. */
int ckpt_rundir_check_owner(const char *run_dir, const char *run_id, const char *catalog_path)
{
	char root[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 300], owner[128];
	int rc = ckpt_rundir_legacy_store(run_dir, root, sizeof(root));
	if (rc)
		return rc;
	if (legacy_owner(root, owner, sizeof(owner)) && strcmp(owner, run_id))
		return qe_fail(QE_EMISMATCH,
			       "the store '%s' belongs to run '%s' but the catalog '%s' is of run '%s' (was catalog.db "
			       "copied from another run directory?)",
			       root, owner, catalog_path, run_id);
	if ((rc = ckpt_rundir_stores(run_dir, root, sizeof(root))))
		return rc;
	DIR *d = opendir(root);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "rank-", 5))
			continue;
		ckpt_store_identity id;
		snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
		if (ckpt_store_identity_read(path, &id) == QE_OK && strcmp(id.run_id, run_id)) {
			closedir(d);
			return qe_fail(QE_EMISMATCH,
				       "the store '%s' belongs to run '%s' but the catalog '%s' is of run '%s' (was catalog.db "
				       "copied from another run directory?)",
				       path, id.run_id, catalog_path, run_id);
		}
	}
	if (d)
		closedir(d);
	return QE_OK;
}

/* --- a run, open: the one opener of a run directory (the commands, cli's too) ------------ */

int ckpt_run_open(const char *dir, int flags, ckpt_run **out)
{
	struct stat sb;
	char *path = NULL;
	int rc;
	*out = NULL;
	if (!dir || !*dir)
		return qe_fail(QE_EINVAL, "no run directory given");
	if (stat(dir, &sb))
		return qe_fail(QE_ENOTFOUND, "run directory '%s' does not exist", dir);
	if (!S_ISDIR(sb.st_mode))
		return qe_fail(QE_EINVAL, "run directory '%s' is not a directory", dir);
	ckpt_run *r = qe_calloc(1, sizeof(*r));
	size_t plen = CKPT_PATH_MAX;
	if (!r || !(path = qe_malloc(plen)) || !(r->dir = qe_strdup(dir))) {
		rc = qe_fail(QE_ENOMEM, "run '%s': out of memory", dir);
		goto fail;
	}
	r->flags = flags;
	if ((rc = ckpt_rundir_catalog(dir, path, plen)))
		goto fail;
	if (stat(path, &sb)) {
		rc = qe_fail(QE_ENOTFOUND, "run directory '%s' has no catalog (%s): not a qeffect run (or not rank 0's host)",
			     dir, path);
		goto fail;
	}
	/* Readers open the catalog read-only (a run on a read-only disk lists and
	 * verifies); one of an older schema is reopened writable, to be migrated. */
	cat_opts co = { .read_only = !(flags & CKPT_RUN_WRITE) };
	int version = CAT_SCHEMA_VERSION;
	if ((rc = cat_open_ex(path, &co, &r->cat)) || (rc = cat_schema_version(r->cat, &version)))
		goto fail;
	if (version < CAT_SCHEMA_VERSION) {
		cat_close(r->cat);
		r->cat = NULL;
		if ((rc = cat_open(path, 0, &r->cat)))
			goto fail;
	}
	cat_run run = { 0 };
	if (!(rc = cat_meta_get(r->cat, "run_id", &r->run_id)) && !r->run_id[0]) {
		rc = qe_fail(QE_ENOTFOUND,
			     "run directory '%s' has no run yet: its catalog (%s) was made, but the command that made it "
			     "failed before it recorded the run; 'qeffect train --run-dir %s' starts it",
			     dir, path, dir);
		goto fail;
	}
	if (rc || (rc = cat_run_get(r->cat, r->run_id, &run))) {
		rc = qe_fail_ctx(rc, "catalog '%s'", path);
		goto fail;
	}
	/* another run's stores beside this catalog: refused before any command reads or changes a thing */
	if ((rc = ckpt_rundir_check_owner(dir, r->run_id, path))) {
		cat_run_release(&run);
		goto fail;
	}
	r->config_json = run.config_json;
	r->created = run.created;
	run.config_json = run.created = NULL;
	cat_run_release(&run);
	if ((flags & CKPT_RUN_STORE) &&
	    (rc = ckpt_storeset_open(dir, r->run_id, (flags & CKPT_RUN_WRITE) != 0, &r->stores)))
		goto fail;
	free(path);
	*out = r;
	return QE_OK;
fail:
	free(path);
	ckpt_run_close(r);
	return rc;
}

void ckpt_run_close(ckpt_run *r)
{
	if (!r)
		return;
	ckpt_storeset_close(r->stores);
	cat_close(r->cat);
	free(r->dir);
	free(r->run_id);
	free(r->config_json);
	free(r->created);
	free(r);
}

const char *ckpt_run_dir(const ckpt_run *r) { return r->dir; }
const char *ckpt_run_id(const ckpt_run *r) { return r->run_id; }
const char *ckpt_run_config_json(const ckpt_run *r) { return r->config_json ? r->config_json : "{}"; }
const char *ckpt_run_created(const ckpt_run *r) { return r->created ? r->created : ""; }
cat *ckpt_run_catalog(ckpt_run *r) { return r->cat; }
ckpt_storeset *ckpt_run_stores(ckpt_run *r) { return r->stores; }
