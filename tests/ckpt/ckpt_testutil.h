/*
 * ckpt_testutil.h - helpers the checkpoint tests share: run the qeffect
 * binary (QE_BIN) with a log, read a run's checkpoint tensors straight from
 * its catalog and store (every chunk re-hashed), compare two checkpoints
 * byte for byte, check a run directory for consistency after a crash, and
 * fingerprint every file of a run directory to prove nothing changed.
 */
#ifndef CKPT_TESTUTIL_H
#define CKPT_TESTUTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "store/store.h"
#include "ckpt/session/rundir.h"
#include "testlib.h"

#ifndef QE_BIN
#define QE_BIN "qeffect"
#endif

/* Options every test run shares: small and quick. */
#define TU_TINY "--preset tiny --micro 4 --amax-history 4 --quiet"

static char tu_tmp[256];
static char tu_log[300];

/* A fresh temporary folder for the test (removed by tu_cleanup unless QE_KEEP_TMP is set). */
static inline void tu_setup(const char *name)
{
	snprintf(tu_tmp, sizeof(tu_tmp), "/tmp/qe_%s_XXXXXX", name);
	if (!mkdtemp(tu_tmp)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(tu_log, sizeof(tu_log), "%s/cmd.log", tu_tmp);
	printf("%s: binary %s, temp %s\n", name, QE_BIN, tu_tmp);
}

static inline void tu_cleanup(void)
{
	char cmd[400];
	if (getenv("QE_KEEP_TMP") || !tu_tmp[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tu_tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tu_tmp);
}

/* Print the last command's log (stdout and stderr together). */
static inline void tu_show_log(void)
{
	char line[1024];
	FILE *f = fopen(tu_log, "r");
	if (!f)
		return;
	fprintf(stderr, "---- log ----\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "-------------\n");
	fclose(f);
}

/* 1 when the last command's log holds s. */
static inline int tu_log_has(const char *s)
{
	char buf[65536];
	FILE *f = fopen(tu_log, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return strstr(buf, s) != NULL;
}

/*
 * Run `sh -c "<env> QE_BIN <args>"` with output into the log.  Returns the
 * exit status, or 128 + signal.  env may be NULL or e.g. "QE_CKPT_KILL=...".
 * Returns only when every process the command started has exited: each
 * inherits the write end of a pipe, and the read end sees EOF when the last
 * one is gone.  (A rank SIGKILLed inside fsync finishes the fsync first; a
 * check that ran before it is gone would read a half-finished catalog.)
 */
static inline int tu_qe(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tu_qe(const char *env, const char *fmt, ...)
{
	char args[2048], cmd[3000];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s '%s' %s >'%s' 2>&1", env ? env : "", QE_BIN, args, tu_log);
	fflush(stdout);
	fflush(stderr);
	int p[2];
	if (pipe(p))
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	struct pollfd pf = { p[0], POLLIN, 0 };
	char c;
	for (;;) {
		int r = poll(&pf, 1, 120000);
		if (r == 0) {
			fprintf(stderr, "tu_qe: processes of '%s' still running after 120 s\n", cmd);
			break;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || read(p[0], &c, 1) <= 0)
			break;
	}
	close(p[0]);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* Like tu_qe but a failure to exit 0 is a test failure (with the log shown). */
#define TU_QE_OK(env, ...)                                                              \
	do {                                                                            \
		int st_ = tu_qe(env, __VA_ARGS__);                                      \
		CHECK(st_ == 0, "qeffect %s exited %d", #__VA_ARGS__, st_);            \
		if (st_ != 0)                                                           \
			tu_show_log();                                                  \
	} while (0)

/* ---- checkpoints read directly ------------------------------------------- */

typedef struct tu_tensor {
	int stage;
	char name[64], dtype[16], shape[64], kind[16];
	uint64_t bytes;
	size_t nchunks;
	store_chunk *chunks;
	char store_path[CKPT_PATH_MAX]; /* the folder of the store that holds it, when read */
	void *data; /* NULL unless read */
} tu_tensor;

typedef struct tu_ckpt {
	int64_t id, step, e_w;
	uint64_t bytes, rt_bytes;
	int n;
	tu_tensor *t;
} tu_ckpt;

static inline void tu_ckpt_free(tu_ckpt *c)
{
	for (int i = 0; i < c->n; i++) {
		free(c->t[i].chunks);
		free(c->t[i].data);
	}
	free(c->t);
	memset(c, 0, sizeof(*c));
}

static inline int tu_open(const char *run_dir, cat **c, char *run_id, size_t len)
{
	char path[600], *id = NULL;
	snprintf(path, sizeof(path), "%s/catalog.db", run_dir);
	int rc = cat_open(path, 0, c);
	if (rc)
		return rc;
	if ((rc = cat_meta_get(*c, "run_id", &id))) {
		cat_close(*c);
		*c = NULL;
		return rc;
	}
	snprintf(run_id, len, "%s", id);
	free(id);
	return QE_OK;
}

/* The rows of checkpoint id (read = 1: and every tensor's bytes, re-hashed, from the store of the set that holds it). */
static inline int tu_ckpt_rows(cat *c, ckpt_storeset *st, const cat_ckpt *ck, int read, tu_ckpt *out)
{
	cat_tensor_rows rows = { 0 };
	memset(out, 0, sizeof(*out));
	out->id = ck->id;
	out->step = ck->step;
	out->e_w = ck->e_w;
	out->bytes = ck->bytes;
	out->rt_bytes = ck->runtime_state_bytes;
	int rc = cat_ckpt_tensors(c, ck->id, &rows);
	if (rc)
		return rc;
	out->t = calloc(rows.n + 1, sizeof(tu_tensor));
	for (size_t i = 0; i < rows.n && !rc; i++) {
		const cat_tensor *r = &rows.rows[i];
		tu_tensor *t = &out->t[out->n++];
		t->stage = r->stage;
		snprintf(t->name, sizeof(t->name), "%s", r->name);
		snprintf(t->dtype, sizeof(t->dtype), "%s", r->dtype);
		snprintf(t->shape, sizeof(t->shape), "%s", r->shape);
		snprintf(t->kind, sizeof(t->kind), "%s", r->kind);
		t->bytes = r->bytes;
		t->nchunks = r->n_chunks;
		t->chunks = calloc(r->n_chunks + 1, sizeof(store_chunk));
		for (size_t k = 0; k < r->n_chunks; k++) {
			memcpy(t->chunks[k].hash.b, r->chunks[k].hash, 16);
			t->chunks[k].size = r->chunks[k].size;
		}
		if (read) {
			store_chunk_list l = { t->nchunks, t->chunks };
			int si = ckpt_storeset_find(st, r->store_id);
			t->data = malloc(t->bytes + 1);
			if (si < 0) {
				rc = qe_fail(QE_ENOTFOUND, "tensor '%s' of stage %d: its store '%s' is not here", t->name,
					     t->stage, r->store_id);
			} else {
				snprintf(t->store_path, sizeof(t->store_path), "%s", ckpt_storeset_where(st, si)->path);
				rc = store_get_tensor(ckpt_storeset_at(st, si), &l, t->data, t->bytes);
				if (rc)
					rc = qe_fail_ctx(rc, "tensor '%s' of stage %d", t->name, t->stage);
			}
		}
	}
	cat_tensor_rows_free(&rows);
	return rc;
}

/* The committed checkpoint of run_dir at step (-1: latest), every tensor read and re-hashed. */
static inline int tu_load_ckpt(const char *run_dir, int64_t step, tu_ckpt *out)
{
	cat *c = NULL;
	ckpt_storeset *st = NULL;
	char run_id[64];
	cat_ckpt ck = { 0 };
	memset(out, 0, sizeof(*out));
	int rc = tu_open(run_dir, &c, run_id, sizeof(run_id));
	if (rc)
		return rc;
	rc = step < 0 ? cat_ckpt_latest_committed(c, run_id, &ck) : cat_ckpt_get(c, run_id, step, &ck);
	if (!rc)
		rc = ckpt_storeset_open(run_dir, run_id, 0, &st);
	if (!rc)
		rc = tu_ckpt_rows(c, st, &ck, 1, out);
	cat_ckpt_release(&ck);
	ckpt_storeset_close(st);
	cat_close(c);
	return rc;
}

/* Same tensors (stage, name, dtype, shape, bytes) with the same bytes. */
static inline int tu_ckpt_equal(const tu_ckpt *a, const tu_ckpt *b, char *why, size_t len)
{
	if (a->n != b->n) {
		snprintf(why, len, "%d tensors vs %d", a->n, b->n);
		return 0;
	}
	for (int i = 0; i < a->n; i++) {
		const tu_tensor *x = &a->t[i], *y = &b->t[i];
		if (x->stage != y->stage || strcmp(x->name, y->name) || strcmp(x->dtype, y->dtype) ||
		    strcmp(x->shape, y->shape) || x->bytes != y->bytes) {
			snprintf(why, len, "tensor %d: stage %d '%s' %s %s vs stage %d '%s' %s %s", i, x->stage, x->name,
				 x->dtype, x->shape, y->stage, y->name, y->dtype, y->shape);
			return 0;
		}
		if (x->data && y->data && memcmp(x->data, y->data, x->bytes)) {
			size_t k = 0;
			while (((const unsigned char *)x->data)[k] == ((const unsigned char *)y->data)[k])
				k++;
			snprintf(why, len, "tensor '%s' of stage %d differs first at byte %zu of %llu", x->name, x->stage,
				 k, (unsigned long long)x->bytes);
			return 0;
		}
	}
	return 1;
}

/* ---- a run directory, file by file ---------------------------------------- */

/* XXH3-64 over every file's relative name, size and bytes under dir (sorted), skipping names in skip (NULL-terminated). */
static inline uint64_t tu_dir_fingerprint(const char *dir, const char *const *skip)
{
	char cmd[700], line[1200];
	snprintf(cmd, sizeof(cmd), "cd '%s' 2>/dev/null && find . -type f | LC_ALL=C sort", dir);
	FILE *p = popen(cmd, "r");
	XXH3_state_t *h = XXH3_createState();
	XXH3_64bits_reset(h);
	if (!p) {
		XXH3_freeState(h);
		return 0;
	}
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = 0;
		const char *base = strrchr(line, '/') ? strrchr(line, '/') + 1 : line;
		int skipped = 0;
		for (int i = 0; skip && skip[i]; i++)
			skipped |= strcmp(base, skip[i]) == 0;
		if (skipped)
			continue;
		XXH3_64bits_update(h, line, strlen(line) + 1);
		char path[2000];
		snprintf(path, sizeof(path), "%s/%s", dir, line);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		char buf[65536];
		size_t n;
		while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
			XXH3_64bits_update(h, buf, n);
		fclose(f);
	}
	pclose(p);
	uint64_t v = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	return v;
}

/* ---- corruption ---------------------------------------------------------------- */

/* The folder of the store with store_id among STORES/rank-0..63 of run_dir ("" the schema-2 RUN/store). */
static inline void tu_store_dir(const char *run_dir, const char *store_id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/store", run_dir);
	for (int r = 0; store_id && store_id[0] && r < 64; r++) {
		char d[CKPT_PATH_MAX];
		ckpt_store_identity id;
		if (ckpt_rundir_rank_store(run_dir, r, d, sizeof(d)) == 0 && ckpt_store_identity_read(d, &id) == 0 &&
		    strcmp(id.store_id, store_id) == 0) {
			snprintf(buf, len, "%s", d);
			return;
		}
	}
}

/* The data.mdb the last tu_flip_chunk_byte changed (tu_flip_back undoes it). */
static char tu_flipped[CKPT_PATH_MAX + 16];

/* Flip one byte inside the stored bytes of chunk k of tensor (stage, name) of run_dir's latest checkpoint. */
static inline int tu_flip_chunk_byte(const char *run_dir, int stage, const char *name, size_t k, long *off_out)
{
	tu_ckpt ck;
	if (tu_load_ckpt(run_dir, -1, &ck))
		return -1;
	const tu_tensor *t = NULL;
	for (int i = 0; i < ck.n; i++)
		if (ck.t[i].stage == stage && strcmp(ck.t[i].name, name) == 0)
			t = &ck.t[i];
	int rc = -1;
	if (t && k < t->nchunks && t->chunks[k].size >= 512) {
		size_t at = 0;
		for (size_t j = 0; j < k; j++)
			at += t->chunks[j].size;
		const unsigned char *needle = (const unsigned char *)t->data + at;
		char path[CKPT_PATH_MAX + 16];
		snprintf(path, sizeof(path), "%s/data.mdb", t->store_path);
		snprintf(tu_flipped, sizeof(tu_flipped), "%s", path);
		FILE *f = fopen(path, "rb");
		if (f) {
			fseek(f, 0, SEEK_END);
			long sz = ftell(f);
			unsigned char *buf = malloc((size_t)sz);
			fseek(f, 0, SEEK_SET);
			if (fread(buf, 1, (size_t)sz, f) == (size_t)sz) {
				unsigned char *hit = memmem(buf, (size_t)sz, needle, 256);
				if (hit) {
					long off = (long)(hit - buf) + 300;
					int fd = open(path, O_WRONLY);
					unsigned char v = buf[off] ^ 0x40;
					if (fd >= 0 && pwrite(fd, &v, 1, off) == 1)
						rc = 0;
					if (fd >= 0)
						close(fd);
					*off_out = off;
				}
			}
			free(buf);
			fclose(f);
		}
	}
	tu_ckpt_free(&ck);
	return rc;
}

static inline void tu_flip_back(const char *run_dir, long off)
{
	(void)run_dir;
	const char *path = tu_flipped;
	int fd = open(path, O_RDWR);
	unsigned char v;
	if (fd >= 0 && pread(fd, &v, 1, off) == 1) {
		v ^= 0x40;
		if (pwrite(fd, &v, 1, off) != 1)
			fprintf(stderr, "flip back failed\n");
	}
	if (fd >= 0)
		close(fd);
}

#endif
