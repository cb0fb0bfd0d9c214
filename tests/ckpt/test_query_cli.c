/*
 * test_query_cli.c - `qeffect list / inspect / verify / gc / plot` as a user
 * and a script see them, on synthetic run directories whose every value is
 * known (test_query_util.h):
 *  - list --json rows match the checkpoints made (step, status, e_W, bytes);
 *  - inspect --json shows the default (latest committed) checkpoint, epochs,
 *    FP8 scale / scale_inv / history equal bit for bit to the values written,
 *    and a value summary equal to one computed here; missing steps and bad
 *    flags are errors with exit 1 / 2;
 *    a --stage the checkpoint lacks and an empty --run-dir are bad usage (exit 2);
 *  - verify exits 0 on a clean run, 1 after one stored chunk is damaged, and
 *    names step, stage, tensor and chunk hash; inspect of that checkpoint
 *    exits 1 naming the damaged tensor and chunk (it re-hashes all it shows);
 *  - gc drops what the policy does not keep, reports bytes reclaimed > 0, and
 *    verify passes afterwards; bad usage exits 2; a run directory that is not
 *    a run fails naming it and is left byte for byte as it was;
 *  - plot writes a non-empty PNG and SVG (one run and --vs two), errors on a
 *    bad run dir, a run without losses, a bad extension and a missing gnuplot,
 *    leaving no output file behind.
 */
#include <jansson.h>
#include <math.h>

#include "ckpt/query/ckpt_query.h"
#include "test_query_util.h"

#define CONFIG "{\"note\":\"synthetic\"}"

static void expect(const char *args, int want_rc, const char *needle)
{
	char *out = NULL;
	int rc = qt_run_text(args, &out);
	CHECK(rc == want_rc && (!needle || (out && strstr(out, needle))), "'%s' exited %d (want %d), output lacks '%s':\n%s",
	      args, rc, want_rc, needle ? needle : "", out ? out : "");
	free(out);
}

static void test_list(const char *dir)
{
	char a[700];
	snprintf(a, sizeof(a), "list --run-dir '%s' --json", dir);
	json_t *j = qt_run_json(a, 0);
	json_t *rows = json_object_get(j, "checkpoints");
	int64_t want_step[] = { 10, 20, 25, 30, 40 };
	const char *want_st[] = { "committed", "committed", "aborted", "committed", "pending" };
	CHECK(json_array_size(rows) == 5 && json_integer_value(json_object_get(j, "committed")) == 3,
	      "list --json: %zu rows", json_array_size(rows));
	/* bytes: every tensor of the synthetic layout */
	uint64_t want_bytes = 0, want_rt = 0;
	for (int st = 0; st < QT_STAGES; st++) {
		want_bytes += 3ull * QT_PARAMS(st) * 4 + (uint64_t)qt_nlin(st) * 3 * (QT_HIST + 2) * 4 + 8;
		want_rt += (uint64_t)qt_nlin(st) * 3 * (QT_HIST + 2) * 4 + 8;
	}
	want_bytes += 8 + 8 + 16 + 1;
	want_rt += 8 + 8 + 16 + 1;
	for (size_t i = 0; i < json_array_size(rows) && i < 5; i++) {
		json_t *r = json_array_get(rows, i);
		CHECK(json_integer_value(json_object_get(r, "step")) == want_step[i] &&
			      json_integer_value(json_object_get(r, "e_W")) == want_step[i] &&
			      strcmp(json_string_value(json_object_get(r, "status")), want_st[i]) == 0 &&
			      (uint64_t)json_integer_value(json_object_get(r, "bytes")) == want_bytes &&
			      (uint64_t)json_integer_value(json_object_get(r, "runtime_state_bytes")) == want_rt &&
			      strcmp(json_string_value(json_object_get(r, "topology")), "pp=2 dp=1 chunks=2") == 0,
		      "list row %zu differs", i);
	}
	json_decref(j);
	snprintf(a, sizeof(a), "list --run-dir '%s'", dir);
	char *out = NULL;
	int rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "5 checkpoints, 3 committed") && strstr(out, "aborted") &&
		      strstr(out, "pending"),
	      "list text:\n%s", out ? out : "");
	free(out);
	expect("list", 2, "--run-dir DIR is required");
	expect("list --run-dir /nonexistent/run", 1, "'/nonexistent/run' does not exist");
	expect("list --help", 0, "usage: qeffect list");
}

static void test_inspect(const char *dir)
{
	char a[800];
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --json --tensor params --stage 1", dir);
	json_t *j = qt_run_json(a, 0);
	json_t *ck = json_object_get(j, "checkpoint"), *ep = json_object_get(j, "epochs");
	CHECK(json_integer_value(json_object_get(ck, "step")) == 30 &&
		      strcmp(json_string_value(json_object_get(ck, "status")), "committed") == 0,
	      "inspect default is not the latest committed (30)");
	CHECK(json_integer_value(json_object_get(ep, "e_W")) == 30 &&
		      json_integer_value(json_object_get(ep, "steps_done")) == 30 &&
		      json_integer_value(json_object_get(ep, "cache_valid_on_restore")) == 0,
	      "inspect epochs differ");
	CHECK(json_integer_value(json_object_get(json_object_get(ep, "adam_step"), "1")) == 30, "adam_step of stage 1");
	/* with --stage 1 only stage 1's fp8 rows and tensors */
	json_t *fp8 = json_object_get(j, "fp8");
	CHECK(json_array_size(fp8) == (size_t)qt_nlin(1) * 3, "inspect --stage 1: %zu fp8 rows", json_array_size(fp8));
	float want[5 * 3 * (QT_HIST + 2)];
	qt_fp8_meta(want, 30, 1);
	int same = 0;
	for (size_t i = 0; i < json_array_size(fp8); i++) {
		json_t *e = json_array_get(fp8, i);
		int lin = (int)json_integer_value(json_object_get(e, "linear_index"));
		const char *role = json_string_value(json_object_get(e, "role"));
		int ri = strcmp(role, "input") == 0 ? 0 : strcmp(role, "weight") == 0 ? 1 : 2;
		const float *b = want + (lin * 3 + ri) * (QT_HIST + 2);
		float sc = (float)json_real_value(json_object_get(e, "scale"));
		float si = (float)json_real_value(json_object_get(e, "scale_inv"));
		json_t *h = json_object_get(e, "amax_history");
		int hist_ok = json_array_size(h) == QT_HIST;
		for (int k = 0; hist_ok && k < QT_HIST; k++)
			hist_ok = (float)json_number_value(json_array_get(h, k)) == b[k];
		same += memcmp(&sc, &b[QT_HIST], 4) == 0 && memcmp(&si, &b[QT_HIST + 1], 4) == 0 && hist_ok &&
			json_integer_value(json_object_get(e, "stage")) == 1;
	}
	CHECK(same == qt_nlin(1) * 3, "inspect: %d of %d fp8 rows equal the written values", same, qt_nlin(1) * 3);
	CHECK(json_array_size(json_object_get(j, "tensors")) == 5, "inspect --stage 1: %zu tensors",
	      json_array_size(json_object_get(j, "tensors")));
	json_t *sum = json_array_get(json_object_get(j, "summaries"), 0);
	float *p = qt_tensor(30, 1, 0);
	double mn = p[0], mx = p[0], s = 0;
	for (int i = 0; i < QT_PARAMS(1); i++) {
		mn = p[i] < mn ? p[i] : mn;
		mx = p[i] > mx ? p[i] : mx;
		s += p[i];
	}
	CHECK(sum && json_integer_value(json_object_get(sum, "count")) == QT_PARAMS(1) &&
		      json_real_value(json_object_get(sum, "min")) == mn && json_real_value(json_object_get(sum, "max")) == mx &&
		      fabs(json_real_value(json_object_get(sum, "mean")) - s / QT_PARAMS(1)) < 1e-9 &&
		      json_integer_value(json_object_get(sum, "nonfinite")) == 0 &&
		      json_real_value(json_array_get(json_object_get(sum, "first"), 0)) == p[0],
	      "inspect --tensor params summary differs");
	free(p);
	json_decref(j);

	/* text, a pending step, run-wide records */
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --step 40 --stage -1 --tensor e_W", dir);
	char *out = NULL;
	int rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "checkpoint step 40") && strstr(out, "pending") &&
		      strstr(out, "epochs: e_W 40") && strstr(out, "run/e_W") && strstr(out, "tensor 'run/e_W' of stage -1 (i64)") &&
		      !strstr(out, "adam_m"),
	      "inspect --step 40 --stage -1:\n%s", out ? out : "");
	free(out);
	snprintf(a, sizeof(a), "inspect --run-dir '%s'", dir);
	rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "fp8 scaling state") && strstr(out, "head") && strstr(out, "grad_output") &&
		      strstr(out, "runtime state"),
	      "inspect text:\n%s", out ? out : "");
	free(out);
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --step 35", dir);
	expect(a, 1, "no checkpoint at step 35");
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --tensor nosuch", dir);
	expect(a, 1, "no tensor 'nosuch'");
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --stage x", dir);
	expect(a, 2, "--stage needs an integer");
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --stage 99", dir);
	expect(a, 2, "--stage 99");
	expect("inspect --run-dir ''", 2, "--run-dir needs a file or folder name");
	expect("list --run-dir ''", 2, "--run-dir needs a file or folder name");
	expect("verify --run-dir ''", 2, "--run-dir needs a file or folder name");
	expect("train --run-dir '' --steps 1", 2, "--run-dir needs a file or folder name");
	expect("train --data '' --steps 1", 2, "--data needs a file or folder name");
}

static void test_verify(const char *dir)
{
	char a[800];
	snprintf(a, sizeof(a), "verify --run-dir '%s'", dir);
	expect(a, 0, "ok: every committed checkpoint reads back intact");
	/* damage chunk 2 of stage 3 adam_v at step 10 */
	ckpt_run *r = NULL;
	CHECK_OK(ckpt_run_open(dir, 0, &r));
	if (!r)
		return;
	cat_ckpt k;
	cat_tensor_rows tr = { 0 };
	CHECK_OK(ckpt_q_select(r, 10, &k));
	CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), k.id, &tr));
	const cat_tensor *t = ckpt_q_find(&tr, 3, "adam_v");
	store_hash h;
	char hex[STORE_HASH_HEX] = "", sdir[600];
	if (t && t->n_chunks > 2) {
		memcpy(h.b, t->chunks[2].hash, 16);
		store_hash_hex(&h, hex);
		snprintf(sdir, sizeof(sdir), "%s/store", dir);
		CHECK(tu_raw_flip(sdir, &h, 16 + 1000, 0) == 0, "raw flip");
	}
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&k);
	ckpt_run_close(r);
	char *out = NULL;
	int rc = qt_run_text(a, &out);
	char want[200];
	snprintf(want, sizeof(want), "BAD step 10 stage 3 tensor 'adam_v' chunk 2 %s: corrupt", hex);
	CHECK(rc == 1 && out && strstr(out, want) && strstr(out, "FAULTS: 1 in 1 tensors"), "verify after damage (want '%s'):\n%s",
	      want, out ? out : "");
	free(out);
	snprintf(a, sizeof(a), "verify --run-dir '%s' --json", dir);
	json_t *j = qt_run_json(a, 1);
	json_t *f = json_array_get(json_object_get(j, "faults"), 0);
	CHECK(json_is_false(json_object_get(j, "ok")) && json_array_size(json_object_get(j, "faults")) == 1 && f &&
		      strcmp(json_string_value(json_object_get(f, "tensor")), "adam_v") == 0 &&
		      json_integer_value(json_object_get(f, "stage")) == 3 &&
		      json_integer_value(json_object_get(f, "step")) == 10 &&
		      strcmp(json_string_value(json_object_get(f, "hash")), hex) == 0 &&
		      json_integer_value(json_object_get(j, "checkpoints")) == 3,
	      "verify --json after damage");
	json_decref(j);
	/* inspect of the damaged checkpoint: exit 1 naming the tensor, not a silent 0 */
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --step 10", dir);
	snprintf(want, sizeof(want), "chunk %s", hex);
	rc = qt_run_text(a, &out);
	CHECK(rc == 1 && out && strstr(out, "adam_v") && strstr(out, "stage 3") && strstr(out, hex),
	      "inspect of a damaged checkpoint exited %d (want 1 naming stage 3 'adam_v' and chunk %s):\n%s", rc, hex,
	      out ? out : "");
	free(out);
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --step 10 --stage 2", dir);
	expect(a, 0, "tensors");
	expect("verify --run-dir", 2, "missing value");
}

static void test_gc(const char *dir)
{
	char a[1024], cat_path[1100];
	snprintf(a, sizeof(a), "gc --run-dir '%s' --keep-last 1 --keep-every 20 --grace 0 --dry-run --json", dir);
	json_t *j = qt_run_json(a, 0);
	CHECK(json_integer_value(json_object_get(j, "dropped")) == 2 &&
		      json_integer_value(json_object_get(j, "bytes_reclaimed")) > 0,
	      "gc --dry-run: dropped %lld, reclaim %lld", (long long)json_integer_value(json_object_get(j, "dropped")),
	      (long long)json_integer_value(json_object_get(j, "bytes_reclaimed")));
	json_decref(j);
	snprintf(a, sizeof(a), "list --run-dir '%s' --json", dir);
	j = qt_run_json(a, 0);
	CHECK(json_array_size(json_object_get(j, "checkpoints")) == 5, "dry run dropped checkpoints");
	json_decref(j);
	/* keep the latest (30) and multiples of 20 (20): drop 10 (damaged), 25 (aborted); 40 pending stays */
	snprintf(a, sizeof(a), "gc --run-dir '%s' --keep-last 1 --keep-every 20 --grace 0 --json", dir);
	j = qt_run_json(a, 0);
	long long dropped = json_integer_value(json_object_get(j, "dropped"));
	long long reclaimed = json_integer_value(json_object_get(j, "bytes_reclaimed"));
	CHECK(dropped == 2 && reclaimed > 0, "gc: dropped %lld, reclaimed %lld", dropped, reclaimed);
	printf("gc: dropped %lld checkpoints, reclaimed %lld bytes\n", dropped, reclaimed);
	json_decref(j);
	snprintf(a, sizeof(a), "list --run-dir '%s' --json", dir);
	j = qt_run_json(a, 0);
	json_t *rows = json_object_get(j, "checkpoints");
	CHECK(json_array_size(rows) == 3 && json_integer_value(json_object_get(json_array_get(rows, 0), "step")) == 20 &&
		      json_integer_value(json_object_get(json_array_get(rows, 1), "step")) == 30 &&
		      json_integer_value(json_object_get(json_array_get(rows, 2), "step")) == 40,
	      "after gc the run holds %zu checkpoints", json_array_size(rows));
	json_decref(j);
	snprintf(a, sizeof(a), "verify --run-dir '%s'", dir);
	expect(a, 0, "ok:");
	snprintf(a, sizeof(a), "gc --run-dir '%s'", dir);
	expect(a, 2, "--keep-last N are required");
	snprintf(a, sizeof(a), "gc --run-dir '%s' --keep-last 0", dir);
	expect(a, 2, "at least 1");
	snprintf(a, sizeof(a), "gc --run-dir '%s' --keep-last 1 --pin x", dir);
	expect(a, 2, "--pin needs an integer");
	expect("gc --run-dir /nonexistent/run --keep-last 1", 1, "'/nonexistent/run' does not exist");

	/* a folder whose catalog.db is not a catalog: error naming it, file unchanged */
	snprintf(a, sizeof(a), "%s-bad", dir);
	mkdir(a, 0755);
	snprintf(cat_path, sizeof(cat_path), "%s/catalog.db", a);
	unsigned char junk[4096];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 13 + 1);
	FILE *fp = fopen(cat_path, "wb");
	fwrite(junk, 1, sizeof(junk), fp);
	fclose(fp);
	char args[2400];
	snprintf(args, sizeof(args), "gc --run-dir '%s' --keep-last 1 --grace 0", a);
	expect(args, 1, cat_path);
	snprintf(args, sizeof(args), "verify --run-dir '%s'", a);
	expect(args, 1, cat_path);
	size_t n;
	unsigned char *after = tu_read_file(cat_path, &n);
	CHECK(after && n == sizeof(junk) && memcmp(after, junk, n) == 0, "a bad catalog.db was modified");
	free(after);
}

static int is_png(const char *path, long *size)
{
	size_t n = 0;
	unsigned char *b = tu_read_file(path, &n);
	int ok = b && n > 100 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0;
	*size = (long)n;
	free(b);
	return ok;
}

static void test_plot(const char *dir, const char *dir2, const char *root)
{
	char a[3000], png[600], svg[600];
	snprintf(png, sizeof(png), "%s/loss.png", root);
	snprintf(svg, sizeof(svg), "%s/loss.svg", root);
	snprintf(a, sizeof(a), "plot --run-dir '%s' --vs '%s' -o '%s' --title \"it's a test\"", dir, dir2, png);
	expect(a, 0, "wrote");
	long sz = 0;
	CHECK(is_png(png, &sz), "plot did not write a PNG (%ld bytes)", sz);
	printf("plot: %s, %ld bytes\n", png, sz);
	snprintf(a, sizeof(a), "plot --run-dir '%s' -o '%s'", dir, svg);
	expect(a, 0, "20 train / 4 held-out points");
	size_t n = 0;
	unsigned char *b = tu_read_file(svg, &n);
	CHECK(b && n > 100 && strstr((char *)b, "<svg"), "plot did not write an SVG (%zu bytes)", n);
	free(b);
	/* errors leave no file */
	char bad[600];
	snprintf(bad, sizeof(bad), "%s/bad.png", root);
	snprintf(a, sizeof(a), "plot --run-dir '%s/nope' -o '%s'", root, bad);
	expect(a, 1, "does not exist");
	CHECK(access(bad, F_OK) != 0, "a failed plot left %s", bad);
	snprintf(a, sizeof(a), "plot --run-dir '%s' -o '%s/x.jpg'", dir, root);
	expect(a, 2, "must end in .png or .svg");
	char nolosses[600];
	snprintf(nolosses, sizeof(nolosses), "%s/nolosses", root);
	int64_t st[] = { 1 };
	cat_status cs[] = { CAT_COMMITTED };
	CHECK_OK(qt_make_run(nolosses, CONFIG, st, cs, 1, 0));
	snprintf(a, sizeof(a), "plot --run-dir '%s' -o '%s'", nolosses, bad);
	expect(a, 1, "has no recorded losses");
	snprintf(a, sizeof(a), "plot --run-dir '%s' -o '%s'", dir, bad);
	char cmd[4200], *out = NULL;
	snprintf(cmd, sizeof(cmd), "PATH=/nonexistent '%s' %s 2>&1", qt_bin, a);
	int rc = qt_run(cmd, &out);
	CHECK(rc == 1 && out && strstr(out, "gnuplot not found"), "plot without gnuplot: %d:\n%s", rc, out ? out : "");
	free(out);
	CHECK(access(bad, F_OK) != 0, "a failed plot left %s", bad);
}

int main(void)
{
	snprintf(qt_bin, sizeof(qt_bin), "%s", getenv("QEFFECT") ? getenv("QEFFECT") : QE_BIN);
	const char *root = tu_tmpdir("ckpt_query_cli");
	char d1[512], d2[512];
	snprintf(d1, sizeof(d1), "%s/run1", root);
	snprintf(d2, sizeof(d2), "%s/run2", root);
	printf("qeffect %s, folder %s\n", qt_bin, root);
	if (access(qt_bin, X_OK)) {
		CHECK(0, "no qeffect binary at %s", qt_bin);
		return qe_test_done("ckpt_test_query_cli");
	}
	int64_t steps[] = { 10, 20, 25, 30, 40 };
	cat_status st[] = { CAT_COMMITTED, CAT_COMMITTED, CAT_ABORTED, CAT_COMMITTED, CAT_PENDING };
	CHECK_OK(qt_make_run(d1, CONFIG, steps, st, 5, 20));
	CHECK_OK(qt_make_run(d2, CONFIG, steps, st, 2, 12));
	test_list(d1);
	test_inspect(d1);
	test_plot(d1, d2, root);
	test_verify(d1);
	test_gc(d1);
	return qe_test_done("ckpt_test_query_cli");
}
