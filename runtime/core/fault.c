/*
 * fault.c - the counters and the trigger behind fault.h: one counter per
 * kind, the configured N per kind from QE_FAULT, and the per-thread record of
 * a fired fault that the next qe_fail message mentions.
 *
 * The configuration is read once (pthread_once), counters are atomics, and
 * a fork handler sets the child's counters back to zero, so "the Nth call"
 * means the same thing in a forked rank as in a single process.
 */
#include "runtime/core/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/rt_options.h"
#include "runtime/core/status.h"

static const char *const kind_names[QE_FAULT_KINDS] = {
#define QE_FAULT_NAME_(e, name, where) name,
	QE_FAULT_LIST(QE_FAULT_NAME_)
#undef QE_FAULT_NAME_
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc;
static char init_msg[600];
static uint64_t target[QE_FAULT_KINDS]; /* 0: never fail */
static _Atomic uint64_t calls[QE_FAULT_KINDS];
static _Atomic int fired_kind = -1;
static _Atomic uint64_t fired_n;
static _Atomic int reported;
static char count_dest[512]; /* "" off, "-" stderr, else a file */

static _Thread_local int pending_kind = -1;
static _Thread_local uint64_t pending_n;

const char *qe_fault_name(qe_fault_kind kind)
{
	return kind >= 0 && kind < QE_FAULT_KINDS ? kind_names[kind] : "?";
}

static void after_fork_child(void)
{
	for (int k = 0; k < QE_FAULT_KINDS; k++)
		atomic_store(&calls[k], 0);
	atomic_store(&fired_kind, -1);
	atomic_store(&reported, 0);
	pending_kind = -1;
}

static int parse(const char *spec)
{
	char buf[512];
	if (strlen(spec) >= sizeof(buf))
		return qe_fail(QE_EINVAL, "QE_FAULT='%.40s...': too long", spec);
	strcpy(buf, spec);
	char *save = NULL;
	for (char *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(e, ':'), *end = NULL;
		if (!colon)
			return qe_fail(QE_EINVAL, "QE_FAULT entry '%s': expected KIND:N", e);
		*colon = '\0';
		int k = 0;
		while (k < QE_FAULT_KINDS && strcmp(kind_names[k], e))
			k++;
		if (k == QE_FAULT_KINDS)
			return qe_fail(QE_EINVAL, "QE_FAULT entry '%s:%s': unknown kind '%s' (alloc, lmdb_put, lmdb_commit, "
						  "lmdb_sync, sqlite_step, sqlite_commit, write, fsync, rename, copy, s3)",
				       e, colon + 1, e);
		errno = 0;
		unsigned long long n = strtoull(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || n == 0 || colon[1] == '-')
			return qe_fail(QE_EINVAL, "QE_FAULT entry '%s:%s': N must be a whole number from 1", e, colon + 1);
		target[k] = n;
	}
	return QE_OK;
}

static void init_once(void)
{
	const qe_rt_options *o = qe_rt_options_get();
	const char *spec = o->fault, *cnt = o->fault_count;
	if (cnt && cnt[0] && strcmp(cnt, "0"))
		snprintf(count_dest, sizeof(count_dest), "%s", strcmp(cnt, "1") ? cnt : "-");
	if (spec && spec[0] && (init_rc = parse(spec))) {
		snprintf(init_msg, sizeof(init_msg), "%s", qe_last_error());
		memset(target, 0, sizeof(target));
	}
	pthread_atfork(NULL, NULL, after_fork_child);
	if (count_dest[0])
		atexit(qe_fault_report);
}

int qe_fault_init(void)
{
	pthread_once(&once, init_once);
	return init_rc ? qe_fail(init_rc, "%s", init_msg) : QE_OK;
}

int qe_fault_hit(qe_fault_kind kind)
{
	pthread_once(&once, init_once);
	uint64_t n = atomic_fetch_add(&calls[kind], 1) + 1;
	if (!target[kind] || n != target[kind])
		return 0;
	int none = -1;
	if (atomic_compare_exchange_strong(&fired_kind, &none, (int)kind))
		atomic_store(&fired_n, n);
	pending_kind = kind;
	pending_n = n;
	errno = kind == QE_FAULT_ALLOC ? ENOMEM : kind == QE_FAULT_WRITE ? ENOSPC : EIO;
	return 1;
}

void qe_fault__annotate(char *msg, size_t cap)
{
	if (pending_kind < 0)
		return;
	size_t l = strnlen(msg, cap);
	if (l < cap)
		snprintf(msg + l, cap - l, " (injected fault: %s #%llu)", kind_names[pending_kind],
			 (unsigned long long)pending_n);
	pending_kind = -1;
}

void qe_fault_report(void)
{
	if (!count_dest[0] || atomic_exchange(&reported, 1))
		return;
	char line[1024];
	int len = snprintf(line, sizeof(line), "fault counts (pid %d):", (int)getpid());
	for (int k = 0; k < QE_FAULT_KINDS && len < (int)sizeof(line); k++)
		len += snprintf(line + len, sizeof(line) - (size_t)len, " %s=%llu", kind_names[k],
				(unsigned long long)atomic_load(&calls[k]));
	int fk = atomic_load(&fired_kind);
	if (len < (int)sizeof(line)) {
		if (fk >= 0)
			len += snprintf(line + len, sizeof(line) - (size_t)len, " fired=%s#%llu\n", kind_names[fk],
					(unsigned long long)atomic_load(&fired_n));
		else
			len += snprintf(line + len, sizeof(line) - (size_t)len, " fired=none\n");
	}
	if (len >= (int)sizeof(line))
		len = (int)sizeof(line) - 1;
	int fd = strcmp(count_dest, "-") ? open(count_dest, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
	if (fd < 0)
		return;
	ssize_t w = write(fd, line, (size_t)len);
	(void)w;
	if (fd != 2)
		close(fd);
}

/* --- the wrapped calls ---------------------------------------------------------- */

void *qe_malloc(size_t n)
{
	return qe_fault_hit(QE_FAULT_ALLOC) ? NULL : malloc(n);
}

void *qe_calloc(size_t n, size_t size)
{
	return qe_fault_hit(QE_FAULT_ALLOC) ? NULL : calloc(n, size);
}

void *qe_realloc(void *p, size_t n)
{
	return qe_fault_hit(QE_FAULT_ALLOC) ? NULL : realloc(p, n);
}

char *qe_strdup(const char *s)
{
	return qe_fault_hit(QE_FAULT_ALLOC) ? NULL : strdup(s);
}

ssize_t qe_write(int fd, const void *buf, size_t n)
{
	return qe_fault_hit(QE_FAULT_WRITE) ? -1 : write(fd, buf, n);
}

ssize_t qe_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return qe_fault_hit(QE_FAULT_WRITE) ? -1 : pwrite(fd, buf, n, off);
}

int qe_fsync(int fd)
{
	return qe_fault_hit(QE_FAULT_FSYNC) ? -1 : fsync(fd);
}

int qe_fdatasync(int fd)
{
	return qe_fault_hit(QE_FAULT_FSYNC) ? -1 : fdatasync(fd);
}

int qe_rename(const char *from, const char *to)
{
	return qe_fault_hit(QE_FAULT_RENAME) ? -1 : rename(from, to);
}
