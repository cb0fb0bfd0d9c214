/*
 * test_basic.c - the catalog's rows round trip: runs, the checkpoint life
 * cycle (begin, shards, tensors with chunk lists, sizes, commit, abort,
 * re-save at a committed step, delete with cascade), latest/get/list,
 * referenced chunks for gc, caller transactions, foreign keys, traces with
 * full 64-bit fingerprints, losses with NaN, remote copies, reopen.
 */
#include "catalog/catalog.h"
#include "runtime/core/status.h"
#include "testutil.h"
#include "testlib.h"

#include <math.h>

#define SEED 0x5eedca01ull

static void make_chunks(cat_chunk *ch, size_t n, uint64_t seed, uint64_t size)
{
	for (size_t i = 0; i < n; i++) {
		tu_fill(ch[i].hash, 16, seed + i);
		ch[i].size = size;
	}
}

struct refs {
	size_t n;
	uint64_t bytes;
	cat_chunk seen[64];
};

static int ref_cb(void *ctx, const unsigned char hash[16], uint64_t size)
{
	struct refs *r = ctx;
	if (r->n < 64)
		memcpy(r->seen[r->n].hash, hash, 16);
	r->n++;
	r->bytes += size;
	return 0;
}

static int has_ref(const struct refs *r, const unsigned char hash[16])
{
	for (size_t i = 0; i < r->n && i < 64; i++)
		if (memcmp(r->seen[i].hash, hash, 16) == 0)
			return 1;
	return 0;
}

int main(void)
{
	const char *dir = tu_tmpdir("cat_basic");
	char path[512];
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	printf("seed 0x%llx, catalog %s\n", (unsigned long long)SEED, path);

	cat *c = NULL;
	int rc = cat_open(path, 0, &c);
	CHECK(rc == QE_ENOTFOUND && !c, "open of a missing catalog without create gave %s", qe_errname(rc));
	CHECK_OK(cat_open(path, 1, &c));
	if (!c)
		return qe_test_done("catalog_test_basic");
	int version = 0;
	CHECK_OK(cat_schema_version(c, &version));
	CHECK(version == CAT_SCHEMA_VERSION, "schema version %d", version);
	char *v = NULL;
	CHECK_OK(cat_meta_get(c, "application", &v));
	CHECK(v && strcmp(v, "qeffect-catalog") == 0, "meta application '%s'", v ? v : "");
	free(v);
	CHECK(cat_meta_get(c, "nope", &v) == QE_ENOTFOUND, "missing meta key found");

	/* runs */
	const char *cfg = "{\"model\":\"tiny\",\"pp\":2,\"dp\":1,\"recipe\":{\"margin\":0,\"history\":4}}";
	CHECK_OK(cat_run_create(c, "run-a", cfg));
	CHECK_OK(cat_run_create(c, "run-b", NULL));
	rc = cat_run_create(c, "run-a", "{}");
	CHECK(rc == QE_EEXIST, "duplicate run gave %s", qe_errname(rc));
	rc = cat_run_create(c, "run-c", "{not json");
	CHECK(rc == QE_EINVAL, "invalid JSON gave %s: %s", qe_errname(rc), qe_last_error());
	cat_run run;
	CHECK_OK(cat_run_get(c, "run-a", &run));
	CHECK(run.config_json && strcmp(run.config_json, cfg) == 0, "config differs: %s", run.config_json);
	CHECK(run.created && strlen(run.created) >= 20, "created '%s'", run.created);
	cat_run_release(&run);
	CHECK(cat_run_get(c, "run-z", &run) == QE_ENOTFOUND, "unknown run found");
	CHECK_OK(cat_meta_get(c, "run_id", &v));
	CHECK(v && strcmp(v, "run-a") == 0, "meta run_id '%s'", v ? v : "");
	free(v);

	/* a checkpoint: begin, shards and tensors in a caller transaction, sizes, commit */
	int64_t id10 = -1;
	CHECK_OK(cat_ckpt_begin(c, "run-a", 10, 10, "pp=2 dp=1", "zbv", "hybrid m0 L4", &id10));
	cat_ckpt row;
	rc = cat_ckpt_latest_committed(c, "run-a", &row);
	CHECK(rc == QE_ENOTFOUND, "pending checkpoint counted as committed (%s)", qe_errname(rc));
	cat_chunk w0[3], w1[2], shared[1];
	make_chunks(w0, 3, SEED, 1000);
	w0[2].size = 24;
	make_chunks(w1, 2, SEED + 100, 512);
	make_chunks(shared, 1, SEED + 200, 64);
	/* the top bit set in hashes must survive (BLOBs, not text) */
	w0[0].hash[0] = 0xff;
	w0[0].hash[15] = 0x00;
	CHECK_OK(cat_begin(c));
	CHECK_OK(cat_ckpt_add_shard(c, id10, 0, 0, 2024 + 64));
	CHECK_OK(cat_ckpt_add_tensor(c, id10, 0, "blocks.0.qkv.w", "f32", "[192,64]", 2024, "param", w0, 3));
	CHECK_OK(cat_ckpt_add_tensor(c, id10, 0, "rng", "u64", "[2]", 64, "runtime", shared, 1));
	rc = cat_ckpt_add_tensor(c, id10, 0, "rng", "u64", "[2]", 64, "runtime", shared, 1);
	CHECK(rc == QE_EEXIST, "duplicate tensor gave %s", qe_errname(rc));
	rc = cat_ckpt_add_tensor(c, id10, 0, "bad", "f32", "[3]", 99, "param", shared, 1);
	CHECK(rc == QE_EINVAL, "chunk sizes not adding up gave %s", qe_errname(rc));
	rc = cat_ckpt_commit(c, id10);
	CHECK(rc == QE_EINVAL, "commit inside a caller transaction gave %s", qe_errname(rc));
	CHECK_OK(cat_commit(c));
	CHECK_OK(cat_ckpt_add_shard(c, id10, 1, 1, 1024));
	CHECK_OK(cat_ckpt_add_tensor(c, id10, 1, "blocks.1.fc1.w", "f32", "[256,64]", 1024, "adam_m", w1, 2));
	CHECK_OK(cat_ckpt_add_tensor(c, id10, 1, "empty", "f32", "[0]", 0, "param", NULL, 0));
	/* a rolled-back caller transaction leaves nothing */
	CHECK_OK(cat_begin(c));
	CHECK_OK(cat_ckpt_add_tensor(c, id10, 1, "ghost", "f32", "[1]", 64, "param", shared, 1));
	CHECK_OK(cat_rollback(c));
	CHECK_OK(cat_ckpt_set_sizes(c, id10, 2024 + 64 + 1024, 64));
	CHECK_OK(cat_ckpt_commit(c, id10));
	CHECK_OK(cat_ckpt_commit(c, id10)); /* again: no-op */
	rc = cat_ckpt_add_tensor(c, id10, 1, "late", "f32", "[1]", 64, "param", shared, 1);
	CHECK(rc == QE_EINVAL, "tensor added to a committed checkpoint gave %s", qe_errname(rc));
	rc = cat_ckpt_abort(c, id10, "no");
	CHECK(rc == QE_EINVAL, "abort of a committed checkpoint gave %s", qe_errname(rc));

	CHECK_OK(cat_ckpt_latest_committed(c, "run-a", &row));
	CHECK(row.id == id10 && row.step == 10 && row.e_w == 10 && row.status == CAT_COMMITTED &&
		      row.bytes == 3112 && row.runtime_state_bytes == 64 && strcmp(row.topology, "pp=2 dp=1") == 0 &&
		      strcmp(row.schedule, "zbv") == 0 && strcmp(row.recipe, "hybrid m0 L4") == 0 &&
		      row.committed_at[0] != '\0',
	      "latest: id %lld step %lld status %s bytes %llu topo '%s'", (long long)row.id, (long long)row.step,
	      cat_status_name(row.status), (unsigned long long)row.bytes, row.topology);
	cat_ckpt_release(&row);

	cat_tensor_rows tl;
	CHECK_OK(cat_ckpt_tensors(c, id10, &tl));
	CHECK(tl.n == 4, "%zu tensors, want 4", tl.n);
	if (tl.n == 4) {
		/* by stage, then name */
		CHECK(strcmp(tl.rows[0].name, "blocks.0.qkv.w") == 0 && strcmp(tl.rows[1].name, "rng") == 0 &&
			      strcmp(tl.rows[2].name, "blocks.1.fc1.w") == 0 && strcmp(tl.rows[3].name, "empty") == 0,
		      "tensor order: %s %s %s %s", tl.rows[0].name, tl.rows[1].name, tl.rows[2].name, tl.rows[3].name);
		CHECK(tl.rows[0].n_chunks == 3 && memcmp(tl.rows[0].chunks, w0, sizeof(w0)) == 0,
		      "chunk list of blocks.0.qkv.w differs");
		CHECK(tl.rows[2].n_chunks == 2 && memcmp(tl.rows[2].chunks, w1, sizeof(w1)) == 0,
		      "chunk list of blocks.1.fc1.w differs");
		CHECK(tl.rows[3].n_chunks == 0 && tl.rows[3].bytes == 0, "empty tensor has chunks");
		CHECK(strcmp(tl.rows[0].dtype, "f32") == 0 && strcmp(tl.rows[0].shape, "[192,64]") == 0 &&
			      strcmp(tl.rows[0].kind, "param") == 0 && tl.rows[0].stage == 0 && tl.rows[0].bytes == 2024,
		      "tensor fields differ");
		CHECK(strcmp(tl.rows[2].kind, "adam_m") == 0 && tl.rows[2].stage == 1, "kind/stage of fc1");
	}
	cat_tensor_rows_free(&tl);
	cat_shard_rows sl;
	CHECK_OK(cat_ckpt_shards(c, id10, &sl));
	CHECK(sl.n == 2 && sl.rows[0].stage == 0 && sl.rows[1].rank == 1 && sl.rows[1].bytes == 1024, "shards: %zu",
	      sl.n);
	cat_shard_rows_free(&sl);

	/* an aborted attempt, a pending one, a later committed one */
	int64_t id20a = -1, id20b = -1, id30 = -1;
	CHECK_OK(cat_ckpt_begin(c, "run-a", 20, 20, "pp=2 dp=1", "zbv", "", &id20a));
	CHECK_OK(cat_ckpt_add_tensor(c, id20a, 0, "blocks.0.qkv.w", "f32", "[192,64]", 2024, "param", w0, 3));
	CHECK_OK(cat_ckpt_abort(c, id20a, "rank 1 failed"));
	CHECK_OK(cat_ckpt_abort(c, id20a, "again"));
	rc = cat_ckpt_commit(c, id20a);
	CHECK(rc == QE_EINVAL, "commit of an aborted checkpoint gave %s", qe_errname(rc));
	CHECK_OK(cat_ckpt_begin(c, "run-a", 20, 20, "pp=2 dp=1", "zbv", "", &id20b));
	CHECK_OK(cat_ckpt_begin(c, "run-a", 30, 30, "pp=2 dp=1", "zbv", "", &id30));
	CHECK_OK(cat_ckpt_commit(c, id30));
	CHECK_OK(cat_ckpt_latest_committed(c, "run-a", &row));
	CHECK(row.id == id30 && row.step == 30, "latest is %lld at step %lld", (long long)row.id, (long long)row.step);
	cat_ckpt_release(&row);
	rc = cat_ckpt_get(c, "run-a", 20, &row);
	CHECK(rc == QE_ENOTFOUND, "step 20 has no committed checkpoint, got %s", qe_errname(rc));
	CHECK_OK(cat_ckpt_get(c, "run-a", 10, &row));
	CHECK(row.id == id10, "get step 10 gave %lld", (long long)row.id);
	cat_ckpt_release(&row);
	CHECK_OK(cat_ckpt_get_id(c, id20a, &row));
	CHECK(row.status == CAT_ABORTED && strcmp(row.note, "rank 1 failed") == 0, "aborted row: %s '%s'",
	      cat_status_name(row.status), row.note);
	cat_ckpt_release(&row);

	/* re-save at committed step 10: the new one supersedes the old in one commit */
	int64_t id10b = -1;
	CHECK_OK(cat_ckpt_begin(c, "run-a", 10, 10, "pp=1 dp=2", "interleaved", "", &id10b));
	CHECK_OK(cat_ckpt_get(c, "run-a", 10, &row));
	CHECK(row.id == id10, "the old checkpoint must stay loadable until the new commits");
	cat_ckpt_release(&row);
	CHECK_OK(cat_ckpt_commit(c, id10b));
	CHECK_OK(cat_ckpt_get(c, "run-a", 10, &row));
	CHECK(row.id == id10b && strcmp(row.topology, "pp=1 dp=2") == 0, "step 10 now %lld", (long long)row.id);
	cat_ckpt_release(&row);
	CHECK_OK(cat_ckpt_get_id(c, id10, &row));
	CHECK(row.status == CAT_ABORTED && strstr(row.note, "superseded"), "old step 10: %s '%s'",
	      cat_status_name(row.status), row.note);
	cat_ckpt_release(&row);

	cat_ckpt_rows cl;
	CHECK_OK(cat_ckpt_list(c, "run-a", &cl));
	CHECK(cl.n == 5, "%zu checkpoints listed, want 5", cl.n);
	if (cl.n == 5)
		CHECK(cl.rows[0].id == id10 && cl.rows[1].id == id10b && cl.rows[2].id == id20a &&
			      cl.rows[3].id == id20b && cl.rows[4].id == id30 && cl.rows[3].status == CAT_PENDING,
		      "list order/status wrong");
	cat_ckpt_rows_free(&cl);
	CHECK_OK(cat_ckpt_list(c, "run-b", &cl));
	CHECK(cl.n == 0, "run-b lists %zu", cl.n);
	cat_ckpt_rows_free(&cl);

	/* referenced chunks: distinct hashes of every checkpoint still listed */
	struct refs r = { 0 };
	CHECK_OK(cat_referenced_chunks(c, ref_cb, &r));
	CHECK(r.n == 6 && r.bytes == 2024 + 64 + 1024, "%zu referenced chunks, %llu bytes", r.n,
	      (unsigned long long)r.bytes);
	/* delete cascades: step 10's old checkpoint and the aborted 20 go */
	CHECK_OK(cat_ckpt_delete(c, id10));
	rc = cat_ckpt_delete(c, id10);
	CHECK(rc == QE_ENOTFOUND, "second delete gave %s", qe_errname(rc));
	CHECK_OK(cat_ckpt_tensors(c, id10, &tl));
	CHECK(tl.n == 0, "deleted checkpoint still has %zu tensors", tl.n);
	cat_tensor_rows_free(&tl);
	CHECK_OK(cat_ckpt_shards(c, id10, &sl));
	CHECK(sl.n == 0, "deleted checkpoint still has %zu shards", sl.n);
	cat_shard_rows_free(&sl);
	memset(&r, 0, sizeof(r));
	CHECK_OK(cat_referenced_chunks(c, ref_cb, &r));
	CHECK(r.n == 3 && has_ref(&r, w0[0].hash) && !has_ref(&r, w1[0].hash),
	      "after delete: %zu referenced (w0 kept by the aborted 20, w1 released)", r.n);
	CHECK_OK(cat_ckpt_delete(c, id20a));
	memset(&r, 0, sizeof(r));
	CHECK_OK(cat_referenced_chunks(c, ref_cb, &r));
	CHECK(r.n == 0, "after deleting every tensor: %zu referenced", r.n);

	/* foreign keys */
	int64_t bad = -1;
	rc = cat_ckpt_begin(c, "no-such-run", 1, 1, "", "", "", &bad);
	CHECK(rc == QE_ECATALOG && strstr(qe_last_error(), "FOREIGN KEY") && strstr(qe_last_error(), path),
	      "checkpoint of an unknown run gave %s: %s", qe_errname(rc), qe_last_error());
	cat_trace tr0 = { 1, 0, "loss", 1 };
	rc = cat_trace_put(c, "no-such-run", &tr0, 1);
	CHECK(rc == QE_ECATALOG && strstr(qe_last_error(), "FOREIGN KEY"), "trace of an unknown run gave %s: %s",
	      qe_errname(rc), qe_last_error());
	rc = cat_ckpt_add_tensor(c, 99999, 0, "x", "f32", "[1]", 64, "param", shared, 1);
	CHECK(rc == QE_ENOTFOUND, "tensor of an unknown checkpoint gave %s", qe_errname(rc));
	rc = cat_remote_add(c, 99999, "s3://b/x", "abc");
	CHECK(rc == QE_ENOTFOUND, "remote of an unknown checkpoint gave %s", qe_errname(rc));

	/* a failing call inside a caller transaction keeps the calls before it */
	CHECK_OK(cat_begin(c));
	CHECK_OK(cat_ckpt_add_tensor(c, id20b, 0, "a", "f32", "[1]", 64, "param", shared, 1));
	rc = cat_ckpt_add_tensor(c, id20b, 0, "a", "f32", "[1]", 64, "param", shared, 1);
	CHECK(rc == QE_EEXIST, "duplicate inside a transaction gave %s", qe_errname(rc));
	CHECK_OK(cat_ckpt_add_tensor(c, id20b, 0, "b", "f32", "[1]", 64, "param", shared, 1));
	CHECK_OK(cat_commit(c));
	CHECK_OK(cat_ckpt_tensors(c, id20b, &tl));
	CHECK(tl.n == 2, "%zu tensors after a transaction with a failed call, want 2", tl.n);
	cat_tensor_rows_free(&tl);
	CHECK(cat_commit(c) == QE_EINVAL, "commit without begin accepted");

	/* traces: full 64-bit fingerprints, replace on the same key, ordered */
	cat_trace tr[6] = {
		{ 2, 1, "params", 0xffffffffffffffffull }, { 1, 0, "loss", 0x8000000000000000ull },
		{ 1, 0, "amax", 0x0123456789abcdefull },   { 1, 1, "loss", 0 },
		{ 2, 0, "loss", 42 },                      { 1, 0, "loss", 0xfedcba9876543210ull },
	};
	CHECK_OK(cat_trace_put(c, "run-a", tr, 6));
	cat_trace_rows tl2;
	CHECK_OK(cat_trace_get(c, "run-a", &tl2));
	CHECK(tl2.n == 5, "%zu trace rows, want 5 (one replaced)", tl2.n);
	if (tl2.n == 5) {
		CHECK(tl2.rows[0].step == 1 && strcmp(tl2.rows[0].category, "amax") == 0 &&
			      tl2.rows[0].fingerprint == 0x0123456789abcdefull,
		      "trace row 0");
		CHECK(strcmp(tl2.rows[1].category, "loss") == 0 && tl2.rows[1].fingerprint == 0xfedcba9876543210ull,
		      "replaced trace row: %016llx", (unsigned long long)tl2.rows[1].fingerprint);
		CHECK(tl2.rows[4].step == 2 && tl2.rows[4].stage == 1 && tl2.rows[4].fingerprint == 0xffffffffffffffffull,
		      "trace row 4: %016llx", (unsigned long long)tl2.rows[4].fingerprint);
	}
	cat_trace_rows_free(&tl2);
	CHECK_OK(cat_trace_get(c, "run-b", &tl2));
	CHECK(tl2.n == 0, "run-b has %zu trace rows", tl2.n);
	cat_trace_rows_free(&tl2);

	/* losses: NaN survives, eval_loss and grad_norm may be absent; lr and grad_norm round-trip */
	cat_loss ls[3] = { { 1, 5.5, NAN, 1000.0, 12.5, 1e-3, 2.5 },
			   { 2, 5.25, 5.4, 1001.0, 12.25, 6e-4, NAN },
			   { 3, NAN, NAN, 0, 0, 0, 0 } };
	CHECK_OK(cat_loss_put(c, "run-a", ls, 3));
	cat_loss_rows ll;
	CHECK_OK(cat_loss_get(c, "run-a", &ll));
	CHECK(ll.n == 3, "%zu loss rows", ll.n);
	if (ll.n == 3) {
		CHECK(ll.rows[0].loss == 5.5 && isnan(ll.rows[0].eval_loss) && ll.rows[0].ms_per_step == 12.5, "loss row 0");
		CHECK(ll.rows[1].eval_loss == 5.4 && ll.rows[1].tokens_per_s == 1001.0, "loss row 1");
		CHECK(isnan(ll.rows[2].loss), "NaN loss read back as %g", ll.rows[2].loss);
		CHECK(ll.rows[0].lr == 1e-3 && ll.rows[0].grad_norm == 2.5 && ll.rows[1].lr == 6e-4 &&
			      isnan(ll.rows[1].grad_norm),
		      "lr and grad_norm read back as %g %g, %g %g", ll.rows[0].lr, ll.rows[0].grad_norm, ll.rows[1].lr,
		      ll.rows[1].grad_norm);
	}
	cat_loss_rows_free(&ll);

	/* remote copies */
	CHECK_OK(cat_remote_add(c, id30, "s3://bucket/run-a/30", "h1"));
	CHECK_OK(cat_remote_add(c, id30, "s3://bucket/run-a/30", "h2"));
	CHECK_OK(cat_remote_add(c, id30, "file:///backup/30", "h3"));
	cat_remote_rows rl;
	CHECK_OK(cat_remote_list(c, id30, &rl));
	CHECK(rl.n == 2 && strcmp(rl.rows[0].url, "file:///backup/30") == 0 && strcmp(rl.rows[1].manifest_hash, "h2") == 0,
	      "remotes: %zu", rl.n);
	cat_remote_rows_free(&rl);
	cat_close(c);

	/* reopen: everything is there */
	c = NULL;
	cat_opts o = { .quick_check = 1 };
	CHECK_OK(cat_open_ex(path, &o, &c));
	if (c) {
		CHECK_OK(cat_ckpt_latest_committed(c, "run-a", &row));
		CHECK(row.id == id30, "after reopen latest is %lld", (long long)row.id);
		cat_ckpt_release(&row);
		CHECK_OK(cat_ckpt_get(c, "run-a", 10, &row));
		CHECK(row.id == id10b, "after reopen step 10 is %lld", (long long)row.id);
		cat_ckpt_release(&row);
		CHECK_OK(cat_trace_get(c, "run-a", &tl2));
		CHECK(tl2.n == 5, "after reopen %zu trace rows", tl2.n);
		cat_trace_rows_free(&tl2);
		cat_close(c);
	}
	return qe_test_done("catalog_test_basic");
}
