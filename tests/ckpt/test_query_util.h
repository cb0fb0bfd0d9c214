/*
 * test_query_util.h - helpers for the tests of list/inspect/verify/gc/plot:
 * seeded data, a synthetic run directory built straight through the catalog
 * and store APIs (so the query side is tested without the training runtime),
 * and running the qeffect binary with its output captured.  The scratch
 * folder, whole-file reads and the raw LMDB rewrite that damages one chunk
 * behind the store's back come from the store tests' store_testutil.h.
 * Header-only (static functions) so each test stays one file.
 */
#ifndef QE_TEST_QUERY_UTIL_H
#define QE_TEST_QUERY_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "store/store.h"
#include "testlib.h"
#include "../store/store_testutil.h"

/* n floats in [-1, 1), reproducible from seed. */
__attribute__((unused)) static void qt_floats(float *f, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i++)
		f[i] = (float)((double)(tu_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* --- a synthetic run ------------------------------------------------------------ */

#define QT_STAGES 4
#define QT_HIST 4
#define QT_CHUNK 4096
#define QT_PARAMS(stage) (2500 + 300 * (stage)) /* floats: 3 or 4 chunks of QT_CHUNK */

/* Linears of a stage: head on the last one (DESIGN.md 5). */
static int qt_nlin(int stage)
{
	return stage == QT_STAGES - 1 ? 5 : 4;
}

/* The fp8 meta block of (step, stage): [lin][role][history, scale, scale_inv]. */
__attribute__((unused)) static void qt_fp8_meta(float *m, int64_t step, int stage)
{
	int F = QT_HIST + 2;
	for (int lin = 0; lin < qt_nlin(stage); lin++)
		for (int role = 0; role < 3; role++) {
			float *b = m + (lin * 3 + role) * F;
			for (int h = 0; h < QT_HIST; h++)
				b[h] = h == 0 ? 0.0f : 0.01f * (float)(1 + lin) * (float)(role + 1) + 0.001f * (float)h + (float)step;
			b[QT_HIST] = 448.0f / (1.0f + (float)step + (float)lin * 0.25f + (float)role);
			b[QT_HIST + 1] = 1.0f / b[QT_HIST];
		}
}

static uint64_t qt_seed(int64_t step, int stage, int which)
{
	return 0x9e5ull * 1000003ull + (uint64_t)step * 1009ull + (uint64_t)stage * 31ull + (uint64_t)which;
}

static int qt_add(cat *c, store *s, int64_t id, int stage, const char *name, const char *kind, const char *dtype,
		  const char *shape, const void *data, size_t bytes, uint64_t *total, uint64_t *runtime)
{
	store_chunk_list l = { 0 };
	int rc = store_put_tensor(s, data, bytes, QT_CHUNK, &l);
	if (rc)
		return rc;
	cat_chunk *ch = calloc(l.n ? l.n : 1, sizeof(*ch));
	for (size_t i = 0; i < l.n; i++) {
		memcpy(ch[i].hash, l.chunks[i].hash.b, 16);
		ch[i].size = l.chunks[i].size;
	}
	rc = cat_ckpt_add_tensor(c, id, stage, name, dtype, shape, bytes, kind, ch, l.n);
	free(ch);
	store_chunk_list_free(&l);
	*total += bytes;
	if (strcmp(kind, "param") && strcmp(kind, "adam_m") && strcmp(kind, "adam_v"))
		*runtime += bytes;
	return rc;
}

/* The f32 tensor `which` (0 params, 1 adam_m, 2 adam_v) of (step, stage), malloc'd. */
__attribute__((unused)) static float *qt_tensor(int64_t step, int stage, int which)
{
	float *f = malloc(QT_PARAMS(stage) * sizeof(float));
	qt_floats(f, QT_PARAMS(stage), qt_seed(step, stage, which));
	if (which == 2)
		for (int i = 0; i < QT_PARAMS(stage); i++)
			f[i] = f[i] * f[i];
	return f;
}

/*
 * A checkpoint at step laid out as ckpt_save writes it: per stage params,
 * adam_m, adam_v, fp8_meta, adam_step; run-wide records at stage 0 under
 * "run/".  status: CAT_COMMITTED, CAT_ABORTED or CAT_PENDING.  OUT *id.
 */
__attribute__((unused)) static int qt_make_ckpt(cat *c, store *s, const char *run_id, int64_t step, cat_status status,
					       int64_t *id)
{
	uint64_t total = 0, runtime = 0;
	int rc = cat_ckpt_begin(c, run_id, step, step, "pp=2 dp=1 chunks=2", "interleaved/split eager direct",
				"model=tiny fp8=hybrid history=4 margin=0 algo=max", id);
	char shape[64];
	static const char *names[] = { "params", "adam_m", "adam_v" };
	static const char *kinds[] = { "param", "adam_m", "adam_v" };
	for (int st = 0; st < QT_STAGES && !rc; st++) {
		for (int w = 0; w < 3 && !rc; w++) {
			float *f = qt_tensor(step, st, w);
			snprintf(shape, sizeof(shape), "[%d]", QT_PARAMS(st));
			rc = qt_add(c, s, *id, st, names[w], kinds[w], "f32", shape, f, QT_PARAMS(st) * sizeof(float),
				    &total, &runtime);
			free(f);
		}
		float meta[5 * 3 * (QT_HIST + 2)];
		qt_fp8_meta(meta, step, st);
		snprintf(shape, sizeof(shape), "[%d,3,%d]", qt_nlin(st), QT_HIST + 2);
		if (!rc)
			rc = qt_add(c, s, *id, st, "fp8_meta", "fp8_meta", "f32", shape, meta,
				    (size_t)qt_nlin(st) * 3 * (QT_HIST + 2) * sizeof(float), &total, &runtime);
		int64_t adam = step;
		if (!rc)
			rc = qt_add(c, s, *id, st, "adam_step", "runtime", "u8", "[8]", &adam, 8, &total, &runtime);
	}
	int64_t rec[2] = { step, step };
	uint64_t rng[2] = { 1234, (uint64_t)step };
	unsigned char cache = 0;
	if (!rc)
		rc = qt_add(c, s, *id, 0, "run/steps_done", "runtime", "u8", "[8]", &rec[0], 8, &total, &runtime);
	if (!rc)
		rc = qt_add(c, s, *id, 0, "run/e_W", "runtime", "u8", "[8]", &rec[1], 8, &total, &runtime);
	if (!rc)
		rc = qt_add(c, s, *id, 0, "run/rng", "runtime", "u8", "[16]", rng, 16, &total, &runtime);
	if (!rc)
		rc = qt_add(c, s, *id, 0, "run/cache_valid_on_restore", "runtime", "u8", "[1]", &cache, 1, &total,
			    &runtime);
	if (!rc)
		rc = cat_ckpt_set_sizes(c, *id, total, runtime);
	if (!rc)
		rc = store_sync(s);
	if (!rc && status == CAT_COMMITTED)
		rc = cat_ckpt_commit(c, *id);
	if (!rc && status == CAT_ABORTED)
		rc = cat_ckpt_abort(c, *id, "test: aborted attempt");
	return rc;
}

/*
 * A run directory DIR with catalog.db (one run, config_json) and store/ holding
 * a checkpoint per steps[i] with status[i], and loss rows for steps 1..nloss
 * (held-out every 5 steps).  Returns 0 or a QE code.
 */
__attribute__((unused)) static int qt_make_run(const char *dir, const char *config_json, const int64_t *steps,
					      const cat_status *status, int n, int nloss)
{
	char path[600];
	cat *c = NULL;
	store *s = NULL;
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	int rc = cat_open(path, 1, &c);
	if (!rc)
		rc = cat_run_create(c, "run-synthetic", config_json);
	snprintf(path, sizeof(path), "%s/store", dir);
	store_opts o = { .create = 1, .sync_mode = STORE_SYNC_NONE };
	if (!rc)
		rc = store_open(path, &o, &s);
	for (int i = 0; i < n && !rc; i++) {
		int64_t id;
		rc = qt_make_ckpt(c, s, "run-synthetic", steps[i], status[i], &id);
	}
	for (int i = 1; i <= nloss && !rc; i++) {
		cat_loss l = { i, 5.5 - 0.05 * i, i % 5 ? NAN : 5.4 - 0.05 * i, 1000.0, 10.0, 0.0, 0.0 };
		rc = cat_loss_put(c, "run-synthetic", &l, 1);
	}
	store_close(s);
	cat_close(c);
	return rc;
}

/* Run a shell command line; OUT *out: its stdout (malloc'd).  Returns the exit status (-1: not run). */
__attribute__((unused)) static int qt_run(const char *cmdline, char **out)
{
	FILE *p = popen(cmdline, "r");
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	if (!p || !buf) {
		if (p)
			pclose(p);
		free(buf);
		*out = NULL;
		return -1;
	}
	size_t r;
	while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
		n += r;
		if (cap - n < 4096) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	buf[n] = 0;
	int st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The qeffect binary the command tests run (set by the test's main). */
static char qt_bin[1024];

/* Run `qeffect ARGS`; check its exit status; return its stdout parsed as JSON (NULL when not JSON). */
__attribute__((unused)) static json_t *qt_run_json(const char *args, int want_rc)
{
	char cmd[4096], *out = NULL;
	snprintf(cmd, sizeof(cmd), "'%s' %s", qt_bin, args);
	int rc = qt_run(cmd, &out);
	CHECK(rc == want_rc, "'%s' exited %d, want %d", args, rc, want_rc);
	json_error_t err;
	json_t *j = out ? json_loads(out, 0, &err) : NULL;
	CHECK(j != NULL, "'%s' printed no JSON: %s", args, out ? out : "(nothing)");
	free(out);
	return j;
}

/* Run `qeffect ARGS`; OUT *out: stdout and stderr together (malloc'd).  Returns the exit status. */
__attribute__((unused)) static int qt_run_text(const char *args, char **out)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", qt_bin, args);
	return qt_run(cmd, out);
}

#endif
