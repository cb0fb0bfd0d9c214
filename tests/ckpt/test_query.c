/*
 * test_query.c - the library side of list / inspect / verify / gc
 * (ckpt/query/ckpt_query.h) on synthetic run directories built through the catalog
 * and store APIs, so every expected value is known independently:
 *  - list and select: rows, statuses, latest committed, a pending-only step,
 *    a missing step named in the error;
 *  - reading: every tensor reads back bit for bit; fp8_meta decodes to the
 *    scales, scale_invs and histories that were written (head on the last
 *    stage); value summaries (min, max, mean, rms, non-finite) of known data;
 *  - verify: a clean run has no fault and counts what it re-hashed; an orphan
 *    chunk is information, not a fault; a byte flipped in one stored chunk is
 *    a fault naming (step, stage, tensor, chunk, hash) for every checkpoint
 *    that lists the chunk; a deleted chunk is "missing";
 *  - gc: keep-last / keep-every / pins / aborted / pending (young and old)
 *    decisions; a dry run changes nothing; a real gc drops exactly the planned
 *    checkpoints, reclaims exactly the bytes of the chunks only they listed,
 *    and afterwards verify is clean and every kept tensor reads back; a grace
 *    period leaves young chunks for a later gc, which then collects them;
 *  - bad run directories fail with their path in the message and unchanged.
 */
#include <math.h>
#include <time.h>

#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "test_query_util.h"

#define CONFIG "{\"note\":\"synthetic\"}"

static void test_list_select(const char *dir)
{
	ckpt_run *r = NULL;
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	if (!r)
		return;
	CHECK(strcmp(ckpt_run_id(r), "run-synthetic") == 0, "run id %s", ckpt_run_id(r));
	CHECK(strcmp(ckpt_run_config_json(r), CONFIG) == 0, "config %s", ckpt_run_config_json(r));
	cat_ckpt_rows l = { 0 };
	CHECK_OK(ckpt_q_list(r, &l));
	/* made: 10 committed, 20 committed, 25 aborted, 30 committed, 40 pending */
	int64_t want_step[] = { 10, 20, 25, 30, 40 };
	cat_status want_st[] = { CAT_COMMITTED, CAT_COMMITTED, CAT_ABORTED, CAT_COMMITTED, CAT_PENDING };
	CHECK(l.n == 5, "list gave %zu rows, want 5", l.n);
	for (size_t i = 0; i < l.n && i < 5; i++) {
		CHECK(l.rows[i].step == want_step[i] && l.rows[i].status == want_st[i] && l.rows[i].e_w == want_step[i],
		      "row %zu: step %lld status %s e_W %lld", i, (long long)l.rows[i].step,
		      cat_status_name(l.rows[i].status), (long long)l.rows[i].e_w);
		CHECK(l.rows[i].runtime_state_bytes > 0 && l.rows[i].runtime_state_bytes < l.rows[i].bytes,
		      "row %zu: runtime %llu of %llu", i, (unsigned long long)l.rows[i].runtime_state_bytes,
		      (unsigned long long)l.rows[i].bytes);
	}
	cat_ckpt_rows_free(&l);
	cat_ckpt k;
	CHECK_OK(ckpt_q_select(r, -1, &k));
	CHECK(k.step == 30 && k.status == CAT_COMMITTED, "latest committed is step %lld", (long long)k.step);
	cat_ckpt_release(&k);
	CHECK_OK(ckpt_q_select(r, 40, &k));
	CHECK(k.step == 40 && k.status == CAT_PENDING, "step 40 gave step %lld %s", (long long)k.step,
	      cat_status_name(k.status));
	cat_ckpt_release(&k);
	int rc = ckpt_q_select(r, 35, &k);
	CHECK(rc == QE_ENOTFOUND && strstr(qe_last_error(), "step 35") && strstr(qe_last_error(), dir) &&
		      strstr(qe_last_error(), "30 (committed)"),
	      "missing step: %s: %s", qe_errname(rc), qe_last_error());
	ckpt_run_close(r);
}

static void test_read_decode(const char *dir)
{
	ckpt_run *r = NULL;
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	if (!r)
		return;
	cat_ckpt k;
	CHECK_OK(ckpt_q_select(r, 20, &k));
	cat_tensor_rows tr = { 0 };
	CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), k.id, &tr));
	CHECK(tr.n == QT_STAGES * 5 + 4, "step 20 has %zu tensors", tr.n);
	int metas = 0, params = 0;
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		void *d = NULL;
		CHECK_OK(ckpt_q_read(r, t, &d));
		if (!d)
			continue;
		if (strcmp(t->name, "params") == 0 || strcmp(t->name, "adam_v") == 0) {
			float *want = qt_tensor(20, t->stage, strcmp(t->name, "params") ? 2 : 0);
			CHECK(t->bytes == (uint64_t)QT_PARAMS(t->stage) * 4 && memcmp(d, want, t->bytes) == 0,
			      "stage %d %s does not read back bit for bit", t->stage, t->name);
			free(want);
			params++;
		}
		if (strcmp(t->kind, "fp8_meta") == 0) {
			metas++;
			float want[5 * 3 * (QT_HIST + 2)];
			qt_fp8_meta(want, 20, t->stage);
			ckpt_fp8_meta m;
			CHECK_OK(ckpt_q_fp8_meta(t, d, &m));
			CHECK(m.n == (size_t)qt_nlin(t->stage) * 3, "stage %d: %zu roles", t->stage, m.n);
			for (size_t j = 0; j < m.n; j++) {
				const ckpt_fp8_role *f = &m.rows[j];
				const float *b = want + (f->linear * 3 + f->role) * (QT_HIST + 2);
				CHECK(f->history_len == QT_HIST && memcmp(f->history, b, QT_HIST * 4) == 0 &&
					      memcmp(&f->scale, &b[QT_HIST], 4) == 0 &&
					      memcmp(&f->scale_inv, &b[QT_HIST + 1], 4) == 0,
				      "stage %d %s/%s: scale %.9g inv %.9g, want %.9g %.9g", t->stage, f->linear_name,
				      f->role_name, f->scale, f->scale_inv, b[QT_HIST], b[QT_HIST + 1]);
				CHECK(f->stage == t->stage && (size_t)(f->linear * 3 + f->role) == j,
				      "row %zu is linear %d role %d", j, f->linear, f->role);
			}
			const char *last = m.rows[m.n - 1].linear_name;
			CHECK(strcmp(last, t->stage == QT_STAGES - 1 ? "head" : "fc2") == 0 &&
				      strcmp(m.rows[m.n - 1].role_name, "grad_output") == 0,
			      "stage %d: last row %s/%s", t->stage, last, m.rows[m.n - 1].role_name);
			ckpt_fp8_meta_free(&m);
		}
		free(d);
	}
	CHECK(metas == QT_STAGES && params == 2 * QT_STAGES, "decoded %d metas, %d f32 tensors", metas, params);
	/* run-wide records by logical stage -1 */
	const cat_tensor *ew = ckpt_q_find(&tr, -1, "e_W");
	CHECK(ew && ckpt_q_stage_of(ew) == -1 && strcmp(ckpt_q_base_name(ew), "e_W") == 0, "run/e_W not found as stage -1");
	CHECK(ckpt_q_find(&tr, 2, "fp8_meta") != NULL && ckpt_q_find(&tr, 0, "e_W") == NULL, "ckpt_q_find by stage");
	if (ew) {
		void *d = NULL;
		ckpt_summary s;
		CHECK_OK(ckpt_q_read(r, ew, &d));
		CHECK_OK(ckpt_q_summarize(ew, d, &s));
		CHECK(strcmp(s.as, "i64") == 0 && s.count == 1 && s.first[0] == 20.0, "e_W summary %s %llu %g", s.as,
		      (unsigned long long)s.count, s.first[0]);
		free(d);
	}
	/* a malformed meta shape is refused */
	cat_tensor bad = tr.rows[0];
	bad.shape = "[4,2,6]";
	ckpt_fp8_meta m;
	CHECK(ckpt_q_fp8_meta(&bad, NULL, &m) == QE_ECORRUPT, "bad meta shape accepted");
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&k);
	ckpt_run_close(r);

	/* summaries of known values */
	float v[6] = { 1.0f, -3.0f, NAN, 2.0f, INFINITY, 0.0f };
	cat_tensor t = { .stage = 1, .name = "x", .dtype = "f32", .shape = "[6]", .bytes = sizeof(v), .kind = "param" };
	ckpt_summary s;
	CHECK_OK(ckpt_q_summarize(&t, v, &s));
	CHECK(s.count == 6 && s.nonfinite == 2 && s.min == -3.0 && s.max == 2.0 && s.mean == 0.0 &&
		      fabs(s.rms - sqrt(14.0 / 4.0)) < 1e-12 && s.nfirst == 6 && isnan(s.first[2]),
	      "summary: count %llu nonfinite %llu min %g max %g mean %g rms %g", (unsigned long long)s.count,
	      (unsigned long long)s.nonfinite, s.min, s.max, s.mean, s.rms);
	int64_t dims[4];
	int nd;
	CHECK(ckpt_q_parse_shape("[5,3,6]", dims, 4, &nd) == 0 && nd == 3 && dims[2] == 6, "parse [5,3,6]");
	CHECK(ckpt_q_parse_shape("[]", dims, 4, &nd) == 0 && nd == 0, "parse []");
	CHECK(ckpt_q_parse_shape("[5,x]", dims, 4, &nd) == QE_EINVAL, "parse [5,x] accepted");
}

typedef struct fault_want {
	int64_t step;
	int stage;
	const char *name;
} fault_want;

static void test_verify(const char *dir)
{
	ckpt_run *r = NULL;
	ckpt_verify_report v;
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	if (!r)
		return;
	/* clean: 3 committed (10, 20, 30), 2 skipped */
	CHECK_OK(ckpt_q_verify(r, &v));
	uint64_t per_ckpt = QT_STAGES * 5 + 4;
	CHECK(v.n_faults == 0 && v.checkpoints == 3 && v.skipped == 2 && v.tensors == 3 * per_ckpt && v.orphans == 0,
	      "clean verify: %zu faults, %llu ckpts, %llu skipped, %llu tensors, %llu orphans", v.n_faults,
	      (unsigned long long)v.checkpoints, (unsigned long long)v.skipped, (unsigned long long)v.tensors,
	      (unsigned long long)v.orphans);
	CHECK(v.chunks < v.chunk_refs && v.bytes < v.ref_bytes, "dedup: %llu distinct of %llu refs",
	      (unsigned long long)v.chunks, (unsigned long long)v.chunk_refs);
	printf("clean verify: %llu checkpoints, %llu tensors, %llu refs, %llu distinct chunks, %llu bytes\n",
	       (unsigned long long)v.checkpoints, (unsigned long long)v.tensors, (unsigned long long)v.chunk_refs,
	       (unsigned long long)v.chunks, (unsigned long long)v.bytes);
	ckpt_verify_report_free(&v);

	/* find chunk 1 of stage 2 adam_m at step 20, and the chunk of run/cache_valid_on_restore (shared by every checkpoint) */
	cat_ckpt k;
	cat_tensor_rows tr = { 0 };
	CHECK_OK(ckpt_q_select(r, 20, &k));
	CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), k.id, &tr));
	const cat_tensor *am = ckpt_q_find(&tr, 2, "adam_m"), *cv = ckpt_q_find(&tr, -1, "cache_valid_on_restore");
	CHECK(am && am->n_chunks >= 3 && cv && cv->n_chunks == 1, "layout of step 20");
	ckpt_run_close(r);
	r = NULL;
	if (!am || am->n_chunks < 3 || !cv) {
		cat_tensor_rows_free(&tr);
		cat_ckpt_release(&k);
		return;
	}
	store_hash h1, h2;
	memcpy(h1.b, am->chunks[1].hash, 16);
	memcpy(h2.b, cv->chunks[0].hash, 16);
	char sdir[600], hex1[STORE_HASH_HEX], hex2[STORE_HASH_HEX];
	store_hash_hex(&h1, hex1);
	store_hash_hex(&h2, hex2);
	snprintf(sdir, sizeof(sdir), "%s/store", dir);

	/* an orphan chunk is information only */
	store *s = NULL;
	store_opts o = { 0 };
	CHECK_OK(store_open(sdir, &o, &s));
	unsigned char junk[300];
	memset(junk, 0x5a, sizeof(junk));
	CHECK_OK(store_put_chunk(s, junk, sizeof(junk), NULL));
	store_close(s);

	CHECK(tu_raw_flip(sdir, &h1, 16 + 77, 0) == 0, "raw flip of %s", hex1);
	CHECK(tu_raw_flip(sdir, &h2, 16, 0) == 0, "raw flip of %s", hex2);
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	CHECK_OK(ckpt_q_verify(r, &v));
	/* adam_m chunk: step 20 only; cache chunk: steps 10, 20, 30 */
	fault_want want[] = { { 10, -1, "cache_valid_on_restore" },
			      { 20, 2, "adam_m" },
			      { 20, -1, "cache_valid_on_restore" },
			      { 30, -1, "cache_valid_on_restore" } };
	CHECK(v.n_faults == 4 && v.bad_tensors == 4 && v.orphans == 1 && v.orphan_bytes == sizeof(junk),
	      "damaged verify: %zu faults in %llu tensors, %llu orphans (%llu bytes)", v.n_faults,
	      (unsigned long long)v.bad_tensors, (unsigned long long)v.orphans, (unsigned long long)v.orphan_bytes);
	for (size_t w = 0; w < 4; w++) {
		int found = 0;
		for (size_t i = 0; i < v.n_faults; i++) {
			const ckpt_fault *f = &v.faults[i];
			const char *base = strncmp(f->name, "run/", 4) == 0 ? f->name + 4 : f->name;
			int st = strncmp(f->name, "run/", 4) == 0 ? -1 : f->stage;
			if (f->step == want[w].step && st == want[w].stage && strcmp(base, want[w].name) == 0) {
				found++;
				CHECK(f->kind == CKPT_FAULT_CORRUPT && f->chunk == (st < 0 ? 0 : 1) &&
					      strcmp(f->hash, st < 0 ? hex2 : hex1) == 0,
				      "fault step %lld %s: kind %s chunk %lld hash %s", (long long)f->step, f->name,
				      ckpt_fault_name(f->kind), (long long)f->chunk, f->hash);
			}
		}
		CHECK(found == 1, "no single fault for step %lld stage %d %s", (long long)want[w].step, want[w].stage,
		      want[w].name);
	}
	for (size_t i = 0; i < v.n_faults; i++)
		printf("fault: step %lld stage %d %s chunk %lld %s: %s\n", (long long)v.faults[i].step, v.faults[i].stage,
		       v.faults[i].name, (long long)v.faults[i].chunk, ckpt_fault_name(v.faults[i].kind),
		       v.faults[i].why);
	ckpt_verify_report_free(&v);
	/* reading the damaged tensor names it */
	void *d = NULL;
	int rc = ckpt_q_read(r, am, &d);
	CHECK(rc == QE_ECORRUPT && strstr(qe_last_error(), "adam_m") && strstr(qe_last_error(), "stage 2") &&
		      strstr(qe_last_error(), hex1),
	      "read of damaged adam_m: %s: %s", qe_errname(rc), qe_last_error());
	free(d);
	ckpt_run_close(r);

	/* a missing chunk */
	CHECK_OK(store_open(sdir, &o, &s));
	uint64_t rec = 0;
	CHECK_OK(store_delete_chunks(s, &h1, 1, &rec));
	store_close(s);
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE, &r));
	CHECK_OK(ckpt_q_verify(r, &v));
	int missing = 0;
	for (size_t i = 0; i < v.n_faults; i++)
		missing += v.faults[i].kind == CKPT_FAULT_MISSING && v.faults[i].step == 20 &&
			   strcmp(v.faults[i].name, "adam_m") == 0 && strcmp(v.faults[i].hash, hex1) == 0;
	CHECK(missing == 1 && v.n_faults == 4, "after delete: %d missing, %zu faults", missing, v.n_faults);
	ckpt_verify_report_free(&v);
	ckpt_run_close(r);
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&k);
}

/* Distinct chunks of a checkpoint into set; sum of their sizes added for new ones. */
static void chunks_of(cat *c, int64_t id, store_hash *set, size_t *n, size_t cap)
{
	cat_tensor_rows tr = { 0 };
	CHECK_OK(cat_ckpt_tensors(c, id, &tr));
	for (size_t i = 0; i < tr.n; i++)
		for (size_t k = 0; k < tr.rows[i].n_chunks; k++) {
			size_t j = 0;
			while (j < *n && memcmp(set[j].b, tr.rows[i].chunks[k].hash, 16))
				j++;
			if (j == *n && *n < cap)
				memcpy(set[(*n)++].b, tr.rows[i].chunks[k].hash, 16);
		}
	cat_tensor_rows_free(&tr);
}

static void list_steps(ckpt_run *r, char *buf, size_t len)
{
	cat_ckpt_rows l = { 0 };
	size_t o = 0;
	buf[0] = 0;
	CHECK_OK(ckpt_q_list(r, &l));
	for (size_t i = 0; i < l.n && o + 24 < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld%c", i ? " " : "", (long long)l.rows[i].step,
				      "pca"[l.rows[i].status]);
	cat_ckpt_rows_free(&l);
}

static void test_gc(const char *dir)
{
	/* committed 10..50, aborted 25, pending 15 (stale once old) and 60 (above the newest committed) */
	int64_t steps[] = { 10, 15, 20, 25, 30, 40, 50, 60 };
	cat_status st[] = { CAT_COMMITTED, CAT_PENDING, CAT_COMMITTED, CAT_ABORTED,
			    CAT_COMMITTED, CAT_COMMITTED, CAT_COMMITTED, CAT_PENDING };
	CHECK_OK(qt_make_run(dir, CONFIG, steps, st, 8, 0));
	ckpt_run *r = NULL;
	char sdir[600], cpath[600], before[256], after[256];
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	snprintf(cpath, sizeof(cpath), "%s/catalog.db", dir);
	CHECK_OK(ckpt_run_open(dir, CKPT_RUN_STORE | CKPT_RUN_WRITE, &r));
	if (!r)
		return;
	list_steps(r, before, sizeof(before));
	CHECK(strcmp(before, "10c 15p 20c 25a 30c 40c 50c 60p") == 0, "made %s", before);
	int64_t pins[] = { 10, 99 };
	ckpt_gc_policy p = { .keep_last = 2, .keep_every = 20, .pins = pins, .n_pins = 2, .grace_s = 0 };

	/* bad policies */
	ckpt_gc_report g;
	p.keep_last = 0;
	CHECK(ckpt_q_gc(r, &p, &g) == QE_EINVAL, "keep_last 0 accepted");
	ckpt_gc_report_free(&g);
	p.keep_last = 2;

	/* dry run, pending 15 young (now = real time, grace 1 hour): nothing changes */
	store_stats s0, s1;
	CHECK_OK(store_stats_get(ckpt_storeset_at(ckpt_run_stores(r), 0), &s0));
	p.dry_run = 1;
	p.grace_s = 3600;
	CHECK_OK(ckpt_q_gc(r, &p, &g));
	const char *want_drop_young = "25 30"; /* aborted 25, committed 30 */
	char got[128] = "";
	for (size_t i = 0, o = 0; i < g.n; i++)
		if (g.items[i].drop)
			o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%lld", o ? " " : "", (long long)g.items[i].step);
	CHECK(strcmp(got, want_drop_young) == 0, "dry run (young pending) drops '%s', want '%s'", got, want_drop_young);
	CHECK(g.n_missing_pins == 1 && g.missing_pins[0] == 99, "missing pins: %zu", g.n_missing_pins);
	CHECK(g.store.deleted == 0 && g.store.young > 0, "dry run with grace: %llu deleted, %llu young",
	      (unsigned long long)g.store.deleted, (unsigned long long)g.store.young);
	ckpt_gc_report_free(&g);

	/* dry run, pending 15 old: 15 goes too, and the chunks would be collected */
	p.now = (int64_t)time(NULL) + 7200;
	p.grace_s = 0;
	CHECK_OK(ckpt_q_gc(r, &p, &g));
	got[0] = 0;
	for (size_t i = 0, o = 0; i < g.n; i++)
		if (g.items[i].drop)
			o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%lld", o ? " " : "", (long long)g.items[i].step);
	CHECK(strcmp(got, "15 25 30") == 0, "dry run (old pending) drops '%s', want '15 25 30'", got);
	for (size_t i = 0; i < g.n; i++)
		printf("plan: step %lld %s: %s %s\n", (long long)g.items[i].step, cat_status_name(g.items[i].status),
		       g.items[i].drop ? "drop" : "keep", g.items[i].why);
	uint64_t dry_reclaim = g.store.bytes_reclaimed, dry_deleted = g.store.deleted;
	ckpt_gc_report_free(&g);
	list_steps(r, after, sizeof(after));
	CHECK_OK(store_stats_get(ckpt_storeset_at(ckpt_run_stores(r), 0), &s1));
	CHECK(strcmp(before, after) == 0 && s0.chunks == s1.chunks && s0.bytes == s1.bytes,
	      "dry run changed something: %s -> %s, chunks %llu -> %llu", before, after, (unsigned long long)s0.chunks,
	      (unsigned long long)s1.chunks);

	/* expected reclaim: chunks of the dropped minus those of the kept */
	cat_ckpt_rows l = { 0 };
	CHECK_OK(ckpt_q_list(r, &l));
	static store_hash kept[4096], dropped[4096];
	size_t nk = 0, nd = 0;
	for (size_t i = 0; i < l.n; i++) {
		int64_t s = l.rows[i].step;
		if (s == 15 || s == 25 || s == 30)
			chunks_of(ckpt_run_catalog(r), l.rows[i].id, dropped, &nd, 4096);
		else
			chunks_of(ckpt_run_catalog(r), l.rows[i].id, kept, &nk, 4096);
	}
	uint64_t want_bytes = 0, want_chunks = 0;
	for (size_t i = 0; i < nd; i++) {
		size_t j = 0;
		while (j < nk && store_hash_cmp(&kept[j], &dropped[i]))
			j++;
		if (j == nk) {
			uint64_t sz = 0;
			int present = 0;
			CHECK_OK(store_has_chunk(ckpt_storeset_at(ckpt_run_stores(r), 0), &dropped[i], &present, &sz));
			want_bytes += sz;
			want_chunks++;
		}
	}
	CHECK(dry_reclaim == want_bytes && dry_deleted == want_chunks,
	      "dry run would reclaim %llu bytes in %llu chunks, want %llu in %llu", (unsigned long long)dry_reclaim,
	      (unsigned long long)dry_deleted, (unsigned long long)want_bytes, (unsigned long long)want_chunks);

	/* the real thing, with a grace period first: rows go, young chunks stay */
	p.dry_run = 0;
	p.grace_s = 3600;
	p.now = 0;
	p.keep_every = 0;
	p.n_pins = 0;
	/* keep_last 2 without pins/every: drops 10, 20, 25, 30; 15 young pending kept */
	CHECK_OK(ckpt_q_gc(r, &p, &g));
	list_steps(r, after, sizeof(after));
	CHECK(strcmp(after, "15p 40c 50c 60p") == 0 && g.dropped == 4, "after gc with grace: %s (%llu dropped)", after,
	      (unsigned long long)g.dropped);
	CHECK(g.store.deleted == 0 && g.store.young > 0, "grace: %llu deleted, %llu young",
	      (unsigned long long)g.store.deleted, (unsigned long long)g.store.young);
	ckpt_gc_report_free(&g);
	ckpt_verify_report v;
	CHECK_OK(ckpt_q_verify(r, &v));
	CHECK(v.n_faults == 0 && v.orphans > 0, "after gc with grace: %zu faults, %llu orphans", v.n_faults,
	      (unsigned long long)v.orphans);
	uint64_t orphan_bytes = v.orphan_bytes;
	ckpt_verify_report_free(&v);

	/* a later gc without grace collects the orphans; old pending 15 goes too */
	p.grace_s = 0;
	p.now = (int64_t)time(NULL) + 7200;
	CHECK_OK(ckpt_q_gc(r, &p, &g));
	list_steps(r, after, sizeof(after));
	CHECK(strcmp(after, "40c 50c 60p") == 0, "after second gc: %s", after);
	CHECK(g.store.bytes_reclaimed > orphan_bytes && g.store.deleted > 0,
	      "second gc reclaimed %llu bytes (orphans were %llu)", (unsigned long long)g.store.bytes_reclaimed,
	      (unsigned long long)orphan_bytes);
	printf("gc: %llu chunks deleted, %llu bytes reclaimed\n", (unsigned long long)g.store.deleted,
	       (unsigned long long)g.store.bytes_reclaimed);
	ckpt_gc_report_free(&g);
	CHECK_OK(ckpt_q_verify(r, &v));
	CHECK(v.n_faults == 0 && v.orphans == 0 && v.checkpoints == 2, "after gc: %zu faults, %llu orphans, %llu ckpts",
	      v.n_faults, (unsigned long long)v.orphans, (unsigned long long)v.checkpoints);
	ckpt_verify_report_free(&v);
	/* kept tensors read back bit for bit */
	for (int s = 40; s <= 60; s += 10) {
		cat_ckpt k;
		cat_tensor_rows tr = { 0 };
		CHECK_OK(ckpt_q_select(r, s, &k));
		CHECK_OK(cat_ckpt_tensors(ckpt_run_catalog(r), k.id, &tr));
		for (size_t i = 0; i < tr.n; i++) {
			if (strcmp(tr.rows[i].name, "params"))
				continue;
			void *d = NULL;
			float *want = qt_tensor(s, tr.rows[i].stage, 0);
			CHECK_OK(ckpt_q_read(r, &tr.rows[i], &d));
			CHECK(d && memcmp(d, want, tr.rows[i].bytes) == 0, "step %d stage %d params changed by gc", s,
			      tr.rows[i].stage);
			free(d);
			free(want);
		}
		cat_tensor_rows_free(&tr);
		cat_ckpt_release(&k);
	}
	/* never below keep_last: with 2 committed and keep_last 5 nothing goes */
	p.keep_last = 5;
	CHECK_OK(ckpt_q_gc(r, &p, &g));
	CHECK(g.dropped == 0, "keep_last 5 dropped %llu", (unsigned long long)g.dropped);
	ckpt_gc_report_free(&g);
	cat_ckpt_rows_free(&l);
	ckpt_run_close(r);
}

static void test_bad_dirs(const char *root)
{
	char d[600], f[700];
	ckpt_run *r = NULL;
	snprintf(d, sizeof(d), "%s/nope", root);
	int rc = ckpt_run_open(d, 0, &r);
	CHECK(rc == QE_ENOTFOUND && !r && strstr(qe_last_error(), d), "missing dir: %s: %s", qe_errname(rc),
	      qe_last_error());
	snprintf(d, sizeof(d), "%s/empty", root);
	mkdir(d, 0755);
	rc = ckpt_run_open(d, CKPT_RUN_STORE, &r);
	CHECK(rc == QE_ENOTFOUND && strstr(qe_last_error(), "catalog.db"), "no catalog: %s: %s", qe_errname(rc),
	      qe_last_error());
	snprintf(f, sizeof(f), "%s/catalog.db", d);
	unsigned char junk[8192];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 7 + 3);
	FILE *fp = fopen(f, "wb");
	fwrite(junk, 1, sizeof(junk), fp);
	fclose(fp);
	rc = ckpt_run_open(d, CKPT_RUN_STORE | CKPT_RUN_WRITE, &r);
	size_t n = 0;
	unsigned char *after = tu_read_file(f, &n);
	CHECK(rc != 0 && !r && strstr(qe_last_error(), f), "garbage catalog: %s: %s", qe_errname(rc), qe_last_error());
	CHECK(after && n == sizeof(junk) && memcmp(after, junk, n) == 0, "garbage catalog.db was modified");
	free(after);
}

int main(void)
{
	const char *root = tu_tmpdir("ckpt_query");
	char d1[512], d2[512];
	snprintf(d1, sizeof(d1), "%s/run1", root);
	snprintf(d2, sizeof(d2), "%s/run2", root);
	printf("folder %s (synthetic data seeded by step/stage, see test_query_util.h)\n", root);
	int64_t steps[] = { 10, 20, 25, 30, 40 };
	cat_status st[] = { CAT_COMMITTED, CAT_COMMITTED, CAT_ABORTED, CAT_COMMITTED, CAT_PENDING };
	CHECK_OK(qt_make_run(d1, CONFIG, steps, st, 5, 0));
	test_list_select(d1);
	test_read_decode(d1);
	test_verify(d1);
	test_gc(d2);
	test_bad_dirs(root);
	return qe_test_done("ckpt_test_query");
}
