/*
 * test_concurrent.c - the catalog shared by processes, as rank processes and
 * a monitoring command share it.  Two writer children (each opening after
 * fork) record traces, losses and checkpoints for their own run in many small
 * transactions while a reader child lists them; WAL lets the reader go on
 * and busy_timeout makes the writers take turns.  No call may fail, and the
 * parent then finds every row.
 */
#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "testutil.h"
#include "testlib.h"

#include <math.h>
#include <sys/wait.h>

#define STEPS 40
#define CATS 8
#define EVERY 5

static uint64_t fp(int w, int step, int k)
{
	uint64_t s = ((uint64_t)w << 40) ^ ((uint64_t)step << 8) ^ (uint64_t)k;
	return tu_next(&s);
}

static int writer(const char *path, int w)
{
	static const char *cats[CATS] = { "loss", "f_out", "di_out", "dw_out", "grads", "params", "adam_m", "amax" };
	char run[16];
	cat *c = NULL;
	snprintf(run, sizeof(run), "run-%d", w);
	CHECK_OK(cat_open(path, 0, &c));
	if (!c)
		return 1;
	for (int step = 0; step < STEPS; step++) {
		cat_trace tr[CATS];
		for (int k = 0; k < CATS; k++) {
			tr[k].step = step;
			tr[k].stage = k % 2;
			tr[k].category = cats[k];
			tr[k].fingerprint = fp(w, step, k);
		}
		CHECK_OK(cat_trace_put(c, run, tr, CATS));
		cat_loss l = { step, 5.0 - step * 0.01, NAN, 1000.0 + w, 10.0, 1e-3, NAN };
		CHECK_OK(cat_loss_put(c, run, &l, 1));
		if (step % EVERY == EVERY - 1) {
			int64_t id;
			cat_chunk ch[2];
			tu_fill(ch, sizeof(ch), (uint64_t)(w * 1000 + step));
			ch[0].size = ch[1].size = 32;
			CHECK_OK(cat_ckpt_begin(c, run, step + 1, step + 1, "pp=2 dp=1", "zbv", "", &id));
			CHECK_OK(cat_begin(c));
			CHECK_OK(cat_ckpt_add_shard(c, id, 0, 0, 64));
			CHECK_OK(cat_ckpt_add_tensor(c, id, 0, "w", "f32", "[16]", 64, "param", ch, 2));
			CHECK_OK(cat_commit(c));
			CHECK_OK(cat_ckpt_set_sizes(c, id, 64, 0));
			CHECK_OK(cat_ckpt_commit(c, id));
		}
	}
	cat_close(c);
	return qe_test_failures ? 1 : 0;
}

static int reader(const char *path)
{
	cat *c = NULL;
	CHECK_OK(cat_open(path, 0, &c));
	if (!c)
		return 1;
	size_t last = 0;
	for (int i = 0; i < 200; i++) {
		cat_trace_rows tl;
		cat_ckpt_rows cl;
		CHECK_OK(cat_trace_get(c, "run-0", &tl));
		CHECK(tl.n >= last && tl.n % CATS == 0, "reader saw %zu trace rows after %zu (torn batch?)", tl.n, last);
		last = tl.n;
		cat_trace_rows_free(&tl);
		CHECK_OK(cat_ckpt_list(c, "run-1", &cl));
		cat_ckpt_rows_free(&cl);
		if (last == STEPS * CATS)
			break;
	}
	cat_close(c);
	return qe_test_failures ? 1 : 0;
}

int main(void)
{
	const char *dir = tu_tmpdir("cat_conc");
	char path[512];
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	printf("catalog %s: 2 writers, 1 reader, %d steps\n", path, STEPS);

	cat *c = NULL;
	CHECK_OK(cat_open(path, 1, &c));
	if (!c)
		return qe_test_done("catalog_test_concurrent");
	CHECK_OK(cat_run_create(c, "run-0", "{}"));
	CHECK_OK(cat_run_create(c, "run-1", "{}"));
	/* a handle inherited through fork is refused in the child; closing it
	 * there leaves the parent's connection working */
	fflush(NULL);
	pid_t kid = fork();
	if (kid == 0) {
		cat_trace_rows tl;
		int rc = cat_trace_get(c, "run-0", &tl);
		int ok = rc == QE_EINVAL && strstr(qe_last_error(), "after fork") != NULL;
		cat_close(c);
		_exit(ok ? 0 : 1);
	}
	int kst = 0;
	waitpid(kid, &kst, 0);
	CHECK(WIFEXITED(kst) && WEXITSTATUS(kst) == 0, "inherited catalog handle was not refused in the child");
	cat_loss l0 = { 0, 1.0, NAN, 0, 0, 1e-3, NAN };
	CHECK_OK(cat_loss_put(c, "run-0", &l0, 1));
	cat_close(c); /* children open their own after fork */

	fflush(NULL);
	pid_t pids[3];
	for (int i = 0; i < 3; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			int rc = i < 2 ? writer(path, i) : reader(path);
			fflush(NULL);
			_exit(rc);
		}
		CHECK(pids[i] > 0, "fork");
	}
	for (int i = 0; i < 3; i++) {
		int status = 0;
		if (pids[i] > 0)
			waitpid(pids[i], &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status 0x%x)", i, status);
	}

	c = NULL;
	cat_opts o = { .quick_check = 1 };
	CHECK_OK(cat_open_ex(path, &o, &c));
	if (!c)
		return qe_test_done("catalog_test_concurrent");
	for (int w = 0; w < 2; w++) {
		char run[16];
		snprintf(run, sizeof(run), "run-%d", w);
		cat_trace_rows tl;
		CHECK_OK(cat_trace_get(c, run, &tl));
		CHECK(tl.n == STEPS * CATS, "%s: %zu trace rows, want %d", run, tl.n, STEPS * CATS);
		for (size_t i = 0; i < tl.n; i++) {
			/* rows come back ordered by step, stage, category; find each by its key */
			int step = (int)tl.rows[i].step, found = 0;
			for (int k = 0; k < CATS; k++)
				if (tl.rows[i].fingerprint == fp(w, step, k))
					found = 1;
			if (!found) {
				CHECK(0, "%s: trace row %zu (step %d, %s) has an unknown fingerprint", run, i, step,
				      tl.rows[i].category);
				break;
			}
		}
		cat_trace_rows_free(&tl);
		cat_loss_rows ll;
		CHECK_OK(cat_loss_get(c, run, &ll));
		CHECK(ll.n == STEPS && ll.rows[STEPS - 1].tokens_per_s == 1000.0 + w, "%s: %zu loss rows", run, ll.n);
		cat_loss_rows_free(&ll);
		cat_ckpt_rows cl;
		CHECK_OK(cat_ckpt_list(c, run, &cl));
		CHECK(cl.n == STEPS / EVERY, "%s: %zu checkpoints, want %d", run, cl.n, STEPS / EVERY);
		for (size_t i = 0; i < cl.n; i++)
			CHECK(cl.rows[i].status == CAT_COMMITTED && cl.rows[i].bytes == 64, "%s: checkpoint %zu is %s", run,
			      i, cat_status_name(cl.rows[i].status));
		cat_ckpt_rows_free(&cl);
		cat_ckpt row;
		CHECK_OK(cat_ckpt_latest_committed(c, run, &row));
		CHECK(row.step == STEPS, "%s: latest step %lld", run, (long long)row.step);
		cat_ckpt_release(&row);
	}
	cat_close(c);
	return qe_test_done("catalog_test_concurrent");
}
