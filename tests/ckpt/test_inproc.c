/*
 * test_inproc.c - the checkpoint service called directly on ranks built in
 * this process (one rank) and in forked rank processes (2 and 4 ranks).
 *
 *  - gate: a checkpoint asked for with a live tape (qe_rank_forward_only_for_test)
 *    is refused with QE_EPREMATURE naming the stage and what is pending,
 *    and nothing is written (no checkpoint row, no store); with 2 ranks the
 *    quiescent rank is refused too, naming the other rank;
 *  - round trip: save after 2 steps, restore into a fresh rank: every item
 *    byte-identical, and the next step gives bitwise the same loss and state;
 *    a re-save at the same step supersedes the earlier one;
 *  - a flipped byte inside a stored chunk: QE_ECORRUPT naming the tensor,
 *    stage and chunk, and the rank's state untouched;
 *  - another recipe (amax history 8): QE_EMISMATCH naming fp8_meta and both
 *    shapes, state untouched; a missing --from step lists the committed ones;
 *  - malformed QE_CKPT_KILL / QE_CKPT_CHUNK_BYTES are refused;
 *  - another mapping: a --pp 2 checkpoint (written by qeffect train) restored
 *    under pp 1, pp 4 (chunks 1) and pp 2 x dp 2 loads every stage's items
 *    byte-identical to the stored tensors; and `qeffect resume` of it for one
 *    step under --pp 1, --pp 2, --pp 4 and zbv --pp 2 writes step-4
 *    checkpoints that are byte-identical to each other.
 */
#include "ckpt_testutil.h" /* first: it defines _GNU_SOURCE */

#include "ckpt/session/ckpt.h"
#include "ckpt/session/ckpt_options.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/pstate.h"
#include "runtime/exec/rank.h"
#include "runtime/job/config.h"
#include "runtime/job/data.h"

/* The checkpoint options QE_CKPT_CHUNK_BYTES and QE_CKPT_KILL set through cli, here set directly ("" unsets). */
static void set_chunk_bytes(const char *v)
{
	ckpt_options o = *ckpt_options_get();
	snprintf(o.chunk_bytes, sizeof(o.chunk_bytes), "%s", v);
	ckpt_options_set(&o);
}

static void set_kill(const char *v)
{
	ckpt_options o = *ckpt_options_get();
	snprintf(o.kill, sizeof(o.kill), "%s", v);
	ckpt_options_set(&o);
}

static qe_data g_data;

static void tiny_config(qe_train_config *c, int pp, int dp, int chunks, int history)
{
	qe_train_config_default(c);
	c->prec.recipe.history_len = history;
	c->micro = 4;
	c->pp = pp;
	c->dp = dp;
	c->chunks = chunks ? chunks : c->model.layers / pp;
}

static int make_run(const char *dir, const qe_train_config *cfg, const char *run_id)
{
	char path[600];
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	cat *c;
	int rc = cat_open(path, 1, &c);
	if (rc)
		return rc;
	char *json = qe_train_config_to_json(cfg);
	rc = cat_run_create(c, run_id, json);
	free(json);
	cat_close(c);
	return rc;
}

typedef struct world {
	qe_backend *b;
	qe_comm *comm;
	qe_rank *r;
	cat *c;
	ckpt_session *s;
} world;

static int world_open(world *w, const qe_train_config *cfg, const char *dir, const char *run_id)
{
	char path[600];
	qe_dist_env env;
	int rc;
	memset(w, 0, sizeof(*w));
	if ((rc = qe_dist_env_from_environ(&env)))
		return rc;
	if (env.world_size > 1 && (rc = qe_comm_open(&env, 0, &w->comm)))
		return rc;
	if ((rc = qe_backend_open("cpu", &w->b)) || (rc = qe_rank_create(cfg, w->b, w->comm, &w->r)))
		return rc;
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	if ((rc = cat_open(path, 0, &w->c)))
		return rc;
	return ckpt_session_open(dir, run_id, w->c, &w->s);
}

static void world_close(world *w)
{
	ckpt_session_close(w->s);
	cat_close(w->c);
	qe_rank_free(w->r);
	if (w->b)
		qe_backend_close(w->b);
	qe_comm_close(w->comm);
	memset(w, 0, sizeof(*w));
}

/* A malloc'd copy of every item's bytes (cpu backend: items are host memory). */
static void **snapshot(qe_rank *r, int *n)
{
	qe_pstate_item *it;
	if (qe_rank_pstate(r, &it, n))
		return NULL;
	void **s = calloc((size_t)*n, sizeof(void *));
	for (int i = 0; i < *n; i++) {
		s[i] = malloc(it[i].bytes);
		memcpy(s[i], it[i].data, it[i].bytes);
	}
	free(it);
	return s;
}

/* Number of items of r whose bytes differ from snap. */
static int differing(qe_rank *r, void **snap, int n, char *first, size_t len)
{
	qe_pstate_item *it;
	int m, bad = 0;
	if (qe_rank_pstate(r, &it, &m) || m != n)
		return -1;
	for (int i = 0; i < n; i++)
		if (memcmp(snap[i], it[i].data, it[i].bytes)) {
			if (!bad)
				snprintf(first, len, "'%s' of stage %d", it[i].name, it[i].stage);
			bad++;
		}
	free(it);
	return bad;
}

static void free_snap(void **s, int n)
{
	for (int i = 0; s && i < n; i++)
		free(s[i]);
	free(s);
}

static void test_single(void)
{
	char dir[400];
	qe_train_config cfg, other;
	world w1, w2, w3;
	tiny_config(&cfg, 1, 1, 0, 4);
	snprintf(dir, sizeof(dir), "%s/solo", tu_tmp);
	CHECK_OK(make_run(dir, &cfg, "solo-run"));
	set_chunk_bytes("65536");

	/* gate */
	CHECK_OK(world_open(&w1, &cfg, dir, "solo-run"));
	CHECK_OK(qe_rank_forward_only_for_test(w1.r, &g_data));
	ckpt_result res;
	int rc = ckpt_save(w1.s, w1.r, &res);
	printf("gate refusal: %s\n", qe_last_error());
	CHECK(rc == QE_EPREMATURE, "save with a live tape: %s, expected QE_EPREMATURE", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "stage 0") && strstr(qe_last_error(), "nothing written"),
	      "refusal does not name the stage: %s", qe_last_error());
	CHECK(strstr(qe_last_error(), "tape"), "refusal does not say what is pending: %s", qe_last_error());
	cat_ckpt_rows rows = { 0 };
	CHECK_OK(cat_ckpt_list(w1.c, "solo-run", &rows));
	CHECK(rows.n == 0, "a refused checkpoint left %zu rows", rows.n);
	cat_ckpt_rows_free(&rows);
	char sd[500];
	snprintf(sd, sizeof(sd), "%s/stores", dir);
	CHECK(access(sd, F_OK) != 0, "a refused checkpoint created a store");
	world_close(&w1);

	/* gate: no live tape, but the arena holds a microbatch the optimizer has not reduced */
	CHECK_OK(world_open(&w1, &cfg, dir, "solo-run"));
	CHECK_OK(qe_rank_microbatch_for_test(w1.r, &g_data, 0));
	rc = ckpt_save(w1.s, w1.r, &res);
	printf("gate refusal (arena): %s\n", qe_last_error());
	CHECK(rc == QE_EPREMATURE, "save with a partly written arena: %s, expected QE_EPREMATURE", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "arena") && !strstr(qe_last_error(), "live tape"),
	      "refusal does not name the arena writes (and only them): %s", qe_last_error());
	rows.n = 0;
	CHECK_OK(cat_ckpt_list(w1.c, "solo-run", &rows));
	CHECK(rows.n == 0, "a refused checkpoint left %zu rows", rows.n);
	cat_ckpt_rows_free(&rows);
	world_close(&w1);

	/* round trip */
	CHECK_OK(world_open(&w1, &cfg, dir, "solo-run"));
	float l1, l2;
	for (int i = 0; i < 2; i++)
		CHECK_OK(qe_rank_step(w1.r, &g_data, &l1));
	CHECK_OK(ckpt_save(w1.s, w1.r, &res));
	CHECK(res.step == 2 && res.bytes > res.runtime_state_bytes && res.runtime_state_bytes > 0 && res.ms >= 0,
	      "result: step %lld bytes %llu runtime %llu", (long long)res.step, (unsigned long long)res.bytes,
	      (unsigned long long)res.runtime_state_bytes);
	int64_t first_id = res.id;
	CHECK_OK(ckpt_save(w1.s, w1.r, &res));
	CHECK(res.id != first_id, "re-save reused id %lld", (long long)first_id);
	cat_ckpt ck = { 0 };
	CHECK_OK(cat_ckpt_get_id(w1.c, first_id, &ck));
	CHECK(ck.status == CAT_ABORTED, "superseded checkpoint is %s", cat_status_name(ck.status));
	cat_ckpt_release(&ck);
	CHECK_OK(cat_ckpt_latest_committed(w1.c, "solo-run", &ck));
	CHECK(ck.id == res.id && ck.step == 2, "latest committed is id %lld step %lld", (long long)ck.id,
	      (long long)ck.step);
	cat_ckpt_release(&ck);

	CHECK_OK(world_open(&w2, &cfg, dir, "solo-run"));
	int n1;
	void **snap1 = snapshot(w1.r, &n1);
	CHECK_OK(ckpt_restore(w2.s, w2.r, -1, &res));
	char first[128] = "";
	CHECK(differing(w2.r, snap1, n1, first, sizeof(first)) == 0, "restored state differs: %s", first);
	CHECK(qe_rank_steps_done(w2.r) == 2, "restored rank at step %lld", (long long)qe_rank_steps_done(w2.r));
	CHECK_OK(qe_rank_step(w1.r, &g_data, &l1));
	CHECK_OK(qe_rank_step(w2.r, &g_data, &l2));
	CHECK(memcmp(&l1, &l2, sizeof(l1)) == 0, "step 3 loss %.9g (original) vs %.9g (restored)", l1, l2);
	free_snap(snap1, n1);
	snap1 = snapshot(w1.r, &n1);
	CHECK(differing(w2.r, snap1, n1, first, sizeof(first)) == 0, "state after step 3 differs: %s", first);
	free_snap(snap1, n1);
	world_close(&w1);
	world_close(&w2);

	/* corruption: state untouched, error names tensor, stage and chunk */
	long off = 0;
	CHECK(tu_flip_chunk_byte(dir, 0, "params", 1, &off) == 0, "could not find chunk 1 of params in data.mdb");
	CHECK_OK(world_open(&w3, &cfg, dir, "solo-run"));
	int n3;
	void **snap3 = snapshot(w3.r, &n3);
	rc = ckpt_restore(w3.s, w3.r, -1, &res);
	printf("corrupt chunk: %s\n", qe_last_error());
	CHECK(rc == QE_ECORRUPT, "restore of a corrupt chunk: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "'params' of stage 0") && strstr(qe_last_error(), "chunk"),
	      "message does not name tensor/stage/chunk: %s", qe_last_error());
	CHECK(differing(w3.r, snap3, n3, first, sizeof(first)) == 0, "a failed restore modified %s", first);
	CHECK(qe_rank_steps_done(w3.r) == 0, "a failed restore moved the step");
	tu_flip_back(dir, off);
	world_close(&w3);

	/* another recipe */
	tiny_config(&other, 1, 1, 0, 8);
	CHECK_OK(world_open(&w3, &other, dir, "solo-run"));
	free_snap(snap3, n3);
	snap3 = snapshot(w3.r, &n3);
	rc = ckpt_restore(w3.s, w3.r, -1, &res);
	printf("mismatch: %s\n", qe_last_error());
	CHECK(rc == QE_EMISMATCH, "restore under amax history 8: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "'fp8_meta' of stage 0") && strstr(qe_last_error(), "[4,3,6]") &&
		      strstr(qe_last_error(), "[4,3,10]"),
	      "mismatch message lacks the tensor or shapes: %s", qe_last_error());
	CHECK(differing(w3.r, snap3, n3, first, sizeof(first)) == 0, "a refused restore modified %s", first);
	free_snap(snap3, n3);
	world_close(&w3);

	/* a step without a checkpoint */
	CHECK_OK(world_open(&w3, &cfg, dir, "solo-run"));
	rc = ckpt_restore(w3.s, w3.r, 7, &res);
	CHECK(rc == QE_ENOTFOUND && strstr(qe_last_error(), "committed steps: 2"), "--from 7: %s: %s", qe_errname(rc),
	      qe_last_error());
	/* the corrupt byte was put back: the checkpoint loads again */
	CHECK_OK(ckpt_restore(w3.s, w3.r, 2, &res));
	world_close(&w3);

	/* malformed options (the variables QE_CKPT_KILL and QE_CKPT_CHUNK_BYTES) */
	const char *bad_kill[] = { "nonsense", "chunk:0:0", "flush:0:1", "chunk:x:1", "chunk:0:1:2" };
	for (size_t i = 0; i < sizeof(bad_kill) / sizeof(bad_kill[0]); i++) {
		set_kill(bad_kill[i]);
		cat *c;
		char path[600];
		snprintf(path, sizeof(path), "%s/catalog.db", dir);
		CHECK_OK(cat_open(path, 0, &c));
		ckpt_session *s = NULL;
		rc = ckpt_session_open(dir, "solo-run", c, &s);
		CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "QE_CKPT_KILL"), "QE_CKPT_KILL=%s: %s", bad_kill[i],
		      qe_errname(rc));
		ckpt_session_close(s);
		cat_close(c);
	}
	set_kill("");
	set_chunk_bytes("12x");
	{
		cat *c;
		char path[600];
		snprintf(path, sizeof(path), "%s/catalog.db", dir);
		CHECK_OK(cat_open(path, 0, &c));
		ckpt_session *s = NULL;
		rc = ckpt_session_open(dir, "solo-run", c, &s);
		CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "QE_CKPT_CHUNK_BYTES"), "bad chunk bytes: %s",
		      qe_errname(rc));
		ckpt_session_close(s);
		cat_close(c);
	}
	set_chunk_bytes("");
}

/* ---- forked ranks ----------------------------------------------------------- */

typedef struct job {
	const char *dir;
	const char *run_id;
	qe_train_config cfg;
	const tu_ckpt *ref; /* remap: the stored tensors to compare against */
	int64_t ref_step;
} job;

static int gate_rank(void *arg)
{
	job *j = arg;
	world w;
	CHECK_OK(world_open(&w, &j->cfg, j->dir, j->run_id));
	if (qe_rank_index(w.r) == 0)
		CHECK_OK(qe_rank_forward_only_for_test(w.r, &g_data));
	ckpt_result res;
	int rc = ckpt_save(w.s, w.r, &res);
	if (qe_rank_index(w.r) == 1)
		printf("2-rank gate refusal on rank 1: %s\n", qe_last_error());
	CHECK(rc == QE_EPREMATURE, "rank %d: save with a live tape on rank 0: %s", qe_rank_index(w.r), qe_errname(rc));
	CHECK(strstr(qe_last_error(), "rank 0 stage 0"),
	      "rank %d: refusal does not name rank 0 and its stage: %s", qe_rank_index(w.r), qe_last_error());
	if (qe_rank_index(w.r) == 0) {
		cat_ckpt_rows rows = { 0 };
		CHECK_OK(cat_ckpt_list(w.c, j->run_id, &rows));
		CHECK(rows.n == 0, "refused checkpoint left %zu rows", rows.n);
		cat_ckpt_rows_free(&rows);
	}
	world_close(&w);
	return qe_test_failures ? 1 : 0;
}

static int remap_rank(void *arg)
{
	job *j = arg;
	world w;
	ckpt_result res;
	CHECK_OK(world_open(&w, &j->cfg, j->dir, j->run_id));
	CHECK_OK(ckpt_restore(w.s, w.r, -1, &res));
	CHECK(qe_rank_steps_done(w.r) == j->ref_step, "rank %d at step %lld after restore", qe_rank_index(w.r),
	      (long long)qe_rank_steps_done(w.r));
	qe_pstate_item *it;
	int n = 0, matched = 0;
	CHECK_OK(qe_rank_pstate(w.r, &it, &n));
	for (int i = 0; i < n; i++) {
		char name[64];
		int stage = it[i].stage < 0 ? 0 : it[i].stage;
		snprintf(name, sizeof(name), "%s%s", it[i].stage < 0 ? "run/" : "", it[i].name);
		for (int k = 0; k < j->ref->n; k++) {
			const tu_tensor *t = &j->ref->t[k];
			if (t->stage != stage || strcmp(t->name, name))
				continue;
			matched++;
			/* Run-wide records the rank rewrites while listing (rng, cache) are compared too:
			 * they must equal what was saved. */
			CHECK(t->bytes == it[i].bytes && memcmp(t->data, it[i].data, t->bytes) == 0,
			      "pp %d dp %d rank %d: '%s' of stage %d differs from the stored tensor", j->cfg.pp, j->cfg.dp,
			      qe_rank_index(w.r), name, stage);
		}
	}
	CHECK(matched == n, "rank %d: %d of %d items found in the checkpoint", qe_rank_index(w.r), matched, n);
	free(it);
	world_close(&w);
	return qe_test_failures ? 1 : 0;
}

static void test_two_rank_gate(void)
{
	char dir[400];
	job j = { 0 };
	tiny_config(&j.cfg, 2, 1, 0, 4);
	snprintf(dir, sizeof(dir), "%s/gate2", tu_tmp);
	CHECK_OK(make_run(dir, &j.cfg, "gate2-run"));
	j.dir = dir;
	j.run_id = "gate2-run";
	qe_launch_result lr;
	int rc = qe_launch_local(2, gate_rank, &j, NULL, 0, &lr);
	CHECK(rc == 0, "2-rank gate test: %s", qe_last_error());
}

static void test_remap(void)
{
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/pp2", tu_tmp);
	TU_QE_OK("QE_CKPT_CHUNK_BYTES=100000", "train " TU_TINY " --pp 2 --steps 3 --ckpt-every 3 --run-dir '%s'", dir);
	tu_ckpt ref;
	CHECK_OK(tu_load_ckpt(dir, 3, &ref));
	cat *c;
	char run_id[64];
	qe_train_config saved;
	CHECK_OK(tu_open(dir, &c, run_id, sizeof(run_id)));
	cat_run run = { 0 };
	CHECK_OK(cat_run_get(c, run_id, &run));
	CHECK_OK(qe_train_config_from_json(run.config_json, &saved));
	cat_run_release(&run);
	cat_close(c);
	struct {
		int pp, dp, chunks;
	} maps[] = { { 1, 1, 0 }, { 4, 1, 1 }, { 2, 2, 0 } };
	for (size_t m = 0; m < sizeof(maps) / sizeof(maps[0]); m++) {
		job j = { 0 };
		j.cfg = saved;
		j.cfg.pp = maps[m].pp;
		j.cfg.dp = maps[m].dp;
		j.cfg.chunks = maps[m].chunks ? maps[m].chunks : saved.model.layers / maps[m].pp;
		j.dir = dir;
		j.run_id = run_id;
		j.ref = &ref;
		j.ref_step = 3;
		printf("restore the pp 2 checkpoint under pp %d dp %d chunks %d\n", j.cfg.pp, j.cfg.dp, j.cfg.chunks);
		qe_launch_result lr;
		int world = j.cfg.pp * j.cfg.dp;
		int rc = world == 1 ? remap_rank(&j) : qe_launch_local(world, remap_rank, &j, NULL, 0, &lr);
		CHECK(rc == 0, "restore under pp %d dp %d failed: %s", j.cfg.pp, j.cfg.dp, qe_last_error());
	}
	tu_ckpt_free(&ref);

	/* Through the command: resume the same checkpoint under four mappings for one step;
	 * every step-4 checkpoint must be the same bytes. */
	const char *mapflags[] = { "--pp 1", "--pp 2", "--pp 4 --schedule interleaved --chunks 1", "--pp 2 --schedule zbv" };
	tu_ckpt first = { 0 };
	for (int m = 0; m < 4; m++) {
		char copy[450], cmd[1000];
		snprintf(copy, sizeof(copy), "%s/map%d", tu_tmp, m);
		snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", dir, copy);
		CHECK(system(cmd) == 0, "%s", cmd);
		int st = tu_qe("QE_CKPT_CHUNK_BYTES=100000", "resume --run-dir '%s' --steps 4 --ckpt-every 4 --quiet %s", copy,
			       mapflags[m]);
		CHECK(st == 0, "resume %s exited %d", mapflags[m], st);
		if (st)
			tu_show_log();
		tu_ckpt got;
		CHECK_OK(tu_load_ckpt(copy, 4, &got));
		char why[300];
		if (m == 0)
			first = got;
		else {
			CHECK(tu_ckpt_equal(&first, &got, why, sizeof(why)), "step 4 after resuming with %s differs from --pp 1: %s",
			      mapflags[m], why);
			tu_ckpt_free(&got);
		}
		printf("resumed the pp 2 checkpoint with %s: step-4 checkpoint %s\n", mapflags[m], m ? "equal" : "taken");
	}
	tu_ckpt_free(&first);
}

int main(void)
{
	tu_setup("ckpt_inproc");
	char path[512];
	const char *data = qe_test_shared_path("data/brown.jsonl", path, sizeof(path));
	CHECK_OK(qe_data_load(data ? data : "", &g_data));
	test_single();
	test_two_rank_gate();
	test_remap();
	qe_data_free(&g_data);
	tu_cleanup();
	return qe_test_done("ckpt_inproc");
}
