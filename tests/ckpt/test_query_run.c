/*
 * test_query_run.c - list / inspect / verify / gc / plot on real runs made by
 * `qeffect train --ckpt-every` (tiny, pp 2, 4 microbatches, amax history 4,
 * 6 steps, checkpoints at 3 and 6):
 *  - list --json: two committed rows (3, 6), e_W = step, and bytes and
 *    runtime-state bytes equal to the sums over the catalog's tensor rows;
 *  - inspect --json: e_W and steps done 6; every FP8 scale, scale_inv and
 *    amax history equal bit for bit to the fp8_meta tensors read here
 *    independently (catalog chunk list + store_get_tensor, decoded by offset);
 *  - a byte flipped in a chunk of stage 1 params of checkpoint 3: verify
 *    exits 1 naming step 3, stage 1, 'params' and the chunk hash;
 *  - gc --keep-last 1 drops checkpoint 3 and reclaims bytes; verify is clean
 *    afterwards and checkpoint 6 still inspects;
 *  - plot of this run --vs a ZB-V run: a non-empty PNG.
 */
#include <jansson.h>

#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "test_query_util.h"

/* The folder of the run's store that holds tensor t (its store_id), "" when none here. */
static void store_dir_of(ckpt_run *r, const cat_tensor *t, char *buf, size_t len)
{
	ckpt_storeset *set = NULL;
	buf[0] = 0;
	if (ckpt_storeset_open(ckpt_run_dir(r), ckpt_run_id(r), 0, &set) == 0) {
		int i = ckpt_storeset_find(set, t->store_id);
		if (i >= 0)
			snprintf(buf, len, "%s", ckpt_storeset_where(set, i)->path);
	}
	ckpt_storeset_close(set);
}

static int train(const char *dir, const char *extra)
{
	char a[1200], *out = NULL;
	snprintf(a, sizeof(a),
		 "train --preset tiny --pp 2 --micro 4 --amax-history 4 --steps 6 --ckpt-every 3 --run-dir '%s' %s", dir,
		 extra);
	int rc = qt_run_text(a, &out);
	CHECK(rc == 0, "train %s exited %d:\n%s", extra, rc, out ? out : "");
	free(out);
	return rc;
}

/* Read the fp8_meta of (checkpoint id, stage) without ckpt_query: catalog + store. */
static float *read_meta(const char *dir, int64_t id, int stage, int64_t *nlin)
{
	ckpt_run *r = NULL;
	void *buf = NULL;
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	cat_tensor_rows tr = { 0 };
	if (r)
		CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), id, &tr));
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		if (t->stage != stage || strcmp(t->name, "fp8_meta"))
			continue;
		CHECK_OK(ckpt_q_read(r, t, &buf));
		*nlin = (int64_t)(t->bytes / 4 / 3 / 6);
	}
	cat_tensor_rows_free(&tr);
	ckpt_run_close(r);
	return buf;
}

int main(void)
{
	snprintf(qt_bin, sizeof(qt_bin), "%s", getenv("QEFFECT") ? getenv("QEFFECT") : QE_BIN);
	const char *root = tu_tmpdir("ckpt_query_run");
	char d1[512], d2[512], a[3000];
	snprintf(d1, sizeof(d1), "%s/a", root);
	snprintf(d2, sizeof(d2), "%s/b", root);
	printf("qeffect %s, folder %s\n", qt_bin, root);
	if (train(d1, "--schedule interleaved") || train(d2, "--schedule zbv"))
		return qe_test_done("ckpt_test_query_run");

	/* list */
	snprintf(a, sizeof(a), "list --run-dir '%s' --json", d1);
	json_t *j = qt_run_json(a, 0);
	json_t *rows = json_object_get(j, "checkpoints");
	CHECK(json_array_size(rows) == 2, "list: %zu checkpoints, want 2", json_array_size(rows));
	ckpt_run *r = NULL;
	CHECK_OK(ckpt_run_open(d1, 0, &r));
	int64_t id3 = -1, id6 = -1;
	for (size_t i = 0; r && i < json_array_size(rows); i++) {
		json_t *e = json_array_get(rows, i);
		int64_t step = json_integer_value(json_object_get(e, "step")), id = json_integer_value(json_object_get(e, "id"));
		CHECK(step == 3 * (int64_t)(i + 1) && json_integer_value(json_object_get(e, "e_W")) == step &&
			      strcmp(json_string_value(json_object_get(e, "status")), "committed") == 0,
		      "list row %zu: step %lld", i, (long long)step);
		cat_tensor_rows tr = { 0 };
		CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), id, &tr));
		uint64_t total = 0, rt = 0;
		for (size_t k = 0; k < tr.n; k++) {
			total += tr.rows[k].bytes;
			rt += ckpt_q_is_runtime_state(&tr.rows[k]) ? tr.rows[k].bytes : 0;
		}
		CHECK((uint64_t)json_integer_value(json_object_get(e, "bytes")) == total &&
			      (uint64_t)json_integer_value(json_object_get(e, "runtime_state_bytes")) == rt && rt > 0 &&
			      rt < total / 100,
		      "list row %zu: bytes %lld runtime %lld, tensors say %llu and %llu", i,
		      (long long)json_integer_value(json_object_get(e, "bytes")),
		      (long long)json_integer_value(json_object_get(e, "runtime_state_bytes")), (unsigned long long)total,
		      (unsigned long long)rt);
		printf("checkpoint step %lld: %llu bytes, %llu runtime-state bytes\n", (long long)step,
		       (unsigned long long)total, (unsigned long long)rt);
		cat_tensor_rows_free(&tr);
		if (step == 3)
			id3 = id;
		if (step == 6)
			id6 = id;
	}
	ckpt_run_close(r);
	json_decref(j);

	/* inspect: scales against an independent read */
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --json", d1);
	j = qt_run_json(a, 0);
	json_t *ep = json_object_get(j, "epochs"), *fp8 = json_object_get(j, "fp8");
	CHECK(json_integer_value(json_object_get(ep, "e_W")) == 6 && json_integer_value(json_object_get(ep, "steps_done")) == 6,
	      "inspect epochs: e_W %lld steps %lld", (long long)json_integer_value(json_object_get(ep, "e_W")),
	      (long long)json_integer_value(json_object_get(ep, "steps_done")));
	size_t rows_checked = 0, rows_same = 0, nontrivial = 0;
	for (int stage = 0; stage < 4; stage++) {
		int64_t nlin = 0;
		float *m = read_meta(d1, id6, stage, &nlin);
		if (!m)
			continue;
		CHECK(nlin == (stage == 3 ? 5 : 4), "stage %d has %lld linears", stage, (long long)nlin);
		for (size_t i = 0; i < json_array_size(fp8); i++) {
			json_t *e = json_array_get(fp8, i);
			if (json_integer_value(json_object_get(e, "stage")) != stage)
				continue;
			int lin = (int)json_integer_value(json_object_get(e, "linear_index"));
			const char *role = json_string_value(json_object_get(e, "role"));
			int ri = strcmp(role, "input") == 0 ? 0 : strcmp(role, "weight") == 0 ? 1 : 2;
			const float *b = m + (lin * 3 + ri) * 6;
			float sc = (float)json_real_value(json_object_get(e, "scale"));
			float si = (float)json_real_value(json_object_get(e, "scale_inv"));
			json_t *h = json_object_get(e, "amax_history");
			int same = memcmp(&sc, &b[4], 4) == 0 && memcmp(&si, &b[5], 4) == 0 && json_array_size(h) == 4;
			for (int k = 0; same && k < 4; k++)
				same = (float)json_number_value(json_array_get(h, k)) == b[k];
			rows_checked++;
			rows_same += same;
			nontrivial += sc != 1.0f;
		}
		free(m);
	}
	CHECK(rows_checked == 3 * 17 && rows_same == rows_checked && nontrivial == rows_checked,
	      "inspect fp8: %zu rows, %zu equal the independent read, %zu with a scale != 1", rows_checked, rows_same,
	      nontrivial);
	printf("inspect: %zu fp8 role rows equal the independent read\n", rows_same);
	json_decref(j);

	/* verify, then damage checkpoint 3's stage-1 params */
	snprintf(a, sizeof(a), "verify --run-dir '%s'", d1);
	char *out = NULL;
	int rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "ok:"), "verify of a fresh run:\n%s", out ? out : "");
	free(out);
	CHECK_OK(ckpt_run_open(d1, 0, &r));
	cat_tensor_rows tr = { 0 };
	if (r)
		CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), id3, &tr));
	const cat_tensor *t = ckpt_q_find(&tr, 1, "params");
	char hex[STORE_HASH_HEX] = "?", sdir[CKPT_PATH_MAX] = "";
	if (t)
		store_dir_of(r, t, sdir, sizeof(sdir));
	if (t && t->n_chunks) {
		store_hash h;
		memcpy(h.b, t->chunks[0].hash, 16);
		store_hash_hex(&h, hex);
		CHECK(tu_raw_flip(sdir, &h, 16 + 4 * 100 + 2, 0) == 0, "raw flip");
	}
	cat_tensor_rows_free(&tr);
	ckpt_run_close(r);
	rc = qt_run_text(a, &out);
	char want[200];
	snprintf(want, sizeof(want), "BAD step 3 stage 1 tensor 'params' chunk 0 %s: corrupt", hex);
	CHECK(rc == 1 && out && strstr(out, want), "verify after damage (want '%s'):\n%s", want, out ? out : "");
	free(out);

	/* gc drops checkpoint 3 (and its damaged chunk) */
	snprintf(a, sizeof(a), "gc --run-dir '%s' --keep-last 1 --grace 0 --json", d1);
	j = qt_run_json(a, 0);
	long long reclaimed = json_integer_value(json_object_get(j, "bytes_reclaimed"));
	CHECK(json_integer_value(json_object_get(j, "dropped")) == 1 && reclaimed > 0, "gc: dropped %lld, reclaimed %lld",
	      (long long)json_integer_value(json_object_get(j, "dropped")), reclaimed);
	printf("gc: reclaimed %lld bytes\n", reclaimed);
	json_decref(j);
	snprintf(a, sizeof(a), "verify --run-dir '%s'", d1);
	rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "verified 1 committed") && strstr(out, "0 orphans"), "verify after gc:\n%s",
	      out ? out : "");
	free(out);
	snprintf(a, sizeof(a), "inspect --run-dir '%s' --tensor params --stage 2", d1);
	rc = qt_run_text(a, &out);
	CHECK(rc == 0 && out && strstr(out, "checkpoint step 6") && strstr(out, "non-finite 0"), "inspect after gc:\n%s",
	      out ? out : "");
	free(out);

	/* plot */
	char png[600];
	snprintf(png, sizeof(png), "%s/loss.png", root);
	snprintf(a, sizeof(a), "plot --run-dir '%s' --vs '%s' -o '%s'", d1, d2, png);
	rc = qt_run_text(a, &out);
	size_t n = 0;
	unsigned char *b = tu_read_file(png, &n);
	CHECK(rc == 0 && b && n > 1000 && memcmp(b, "\x89PNG", 4) == 0, "plot: exit %d, %zu bytes:\n%s", rc, n,
	      out ? out : "");
	free(b);
	free(out);
	return qe_test_done("ckpt_test_query_run");
}
