/*
 * test_crash.c - crash consistency of checkpoint saves.
 *
 * Each trial trains a fresh --pp 2 run to step 8 with a checkpoint every 2
 * steps and kills it somewhere inside a save: four of five trials use the
 * QE_CKPT_KILL hook (SIGKILL of rank 0, rank 1 or both at a chosen phase -
 * gate, begin, chunk, sync, synced, rows (rows in flight to rank 0), row
 * (rank 0 inside the commit transaction), commit, committed - of a
 * chosen checkpoint, cycling through the phases), the fifth kills the whole
 * job at a random time with `timeout -s KILL`.  After each trial:
 *  - every committed checkpoint is complete, every chunk it lists is stored
 *    and re-hashes (read directly), and it equals the uninterrupted reference
 *    run's checkpoint at the same step byte for byte; and
 *    `qeffect verify` agrees when that command exists;
 *  - for hook trials, the latest committed checkpoint is exactly the one the
 *    kill point allows (the previous one, or this one when killed after the
 *    commit point);
 *  - `qeffect resume --steps 8` from it succeeds (or, when nothing was ever
 *    committed, refuses with "no committed checkpoint"), its traces equal the
 *    uninterrupted reference run's, its step-8 checkpoint equals the
 *    reference's byte for byte, and no attempt is left pending.
 * QE_CRASH_TRIALS (default 50) and QE_CRASH_SEED (default 20241129) are knobs.
 */
#include "ckpt_testutil.h"

#define ENV "QE_CKPT_CHUNK_BYTES=65536"
#define RUN "train " TU_TINY " --pp 2 --steps 8 --ckpt-every 2"

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

enum { NPHASES = 9 };
static const char *phases[NPHASES] = { "gate", "begin", "chunk", "sync", "synced", "rows", "row", "commit", "committed" };
/* Items per checkpoint written by each rank of --pp 2 tiny: 2 stages x 5, plus rank 0's 4 run-wide records. */
static const int items_of_rank[2] = { 14, 10 };

/* The reference run's checkpoints at steps 2, 4, 6, 8 (index step / 2). */
static tu_ckpt refs[5];

/* Every committed checkpoint complete, readable and equal to the reference's at its step; returns the latest committed step or -1. */
static int64_t check_run(const char *dir, int trial)
{
	cat *c = NULL;
	ckpt_storeset *st = NULL;
	char run_id[64];
	int64_t latest = -1;
	char cpath[600];
	snprintf(cpath, sizeof(cpath), "%s/catalog.db", dir);
	if (access(cpath, F_OK) != 0)
		return -1; /* killed before it created its catalog: not a run, nothing to check */
	int orc = tu_open(dir, &c, run_id, sizeof(run_id));
	if (orc) {
		/*
		 * Killed while `train` created its catalog: each schema step is one
		 * transaction, so the file is empty or holds a schema without the run row.
		 * That is not a run (resume refuses it); anything else is a damaged catalog.
		 */
		const char *msg = qe_last_error();
		if (orc == QE_ENOTFOUND || strstr(msg, "empty database"))
			return -1;
		CHECK(0, "trial %d: catalog unreadable after the crash: %s", trial, msg);
		return -2;
	}
	cat_ckpt_rows rows = { 0 };
	CHECK_OK(cat_ckpt_list(c, run_id, &rows));
	int have_store = ckpt_storeset_open(dir, run_id, 0, &st) == 0 && ckpt_storeset_count(st) > 0;
	for (size_t i = 0; i < rows.n; i++) {
		const cat_ckpt *ck = &rows.rows[i];
		if (ck->status != CAT_COMMITTED)
			continue;
		for (size_t k = i + 1; k < rows.n; k++)
			CHECK(rows.rows[k].step != ck->step || rows.rows[k].status != CAT_COMMITTED,
			      "trial %d: two committed checkpoints at step %lld", trial, (long long)ck->step);
		CHECK(have_store, "trial %d: committed checkpoint at step %lld but no store", trial, (long long)ck->step);
		if (!have_store)
			continue;
		tu_ckpt t;
		int rc = tu_ckpt_rows(c, st, ck, 1, &t);
		CHECK(rc == 0, "trial %d: committed checkpoint step %lld does not read back: %s", trial,
		      (long long)ck->step, qe_last_error());
		char why[300];
		int ok_step = ck->step >= 2 && ck->step <= 8 && ck->step % 2 == 0;
		CHECK(ok_step, "trial %d: committed checkpoint at unexpected step %lld", trial, (long long)ck->step);
		if (ok_step)
			CHECK(tu_ckpt_equal(&refs[ck->step / 2], &t, why, sizeof(why)),
			      "trial %d: committed checkpoint step %lld differs from the reference's: %s", trial,
			      (long long)ck->step, why);
		uint64_t sum = 0;
		for (int k = 0; k < t.n; k++)
			sum += t.t[k].bytes;
		CHECK(sum == ck->bytes, "trial %d: step %lld: tensors add up to %llu bytes, row says %llu", trial,
		      (long long)ck->step, (unsigned long long)sum, (unsigned long long)ck->bytes);
		tu_ckpt_free(&t);
		if (ck->step > latest)
			latest = ck->step;
	}
	cat_ckpt_rows_free(&rows);
	ckpt_storeset_close(st);
	cat_close(c);
	return latest;
}

static int pending_count(const char *dir)
{
	cat *c = NULL;
	char run_id[64];
	int n = 0;
	if (tu_open(dir, &c, run_id, sizeof(run_id)))
		return -1;
	cat_ckpt_rows rows = { 0 };
	if (!cat_ckpt_list(c, run_id, &rows))
		for (size_t i = 0; i < rows.n; i++)
			n += rows.rows[i].status == CAT_PENDING;
	cat_ckpt_rows_free(&rows);
	cat_close(c);
	return n;
}

int main(void)
{
	tu_setup("ckpt_crash");
	int trials = getenv("QE_CRASH_TRIALS") ? atoi(getenv("QE_CRASH_TRIALS")) : 50;
	uint64_t seed = getenv("QE_CRASH_SEED") ? strtoull(getenv("QE_CRASH_SEED"), NULL, 10) : 20241129;
	rng_state = seed ? seed : 1;
	printf("crash trials: %d, seed %llu (QE_CRASH_TRIALS, QE_CRASH_SEED)\n", trials, (unsigned long long)seed);

	char ref[400];
	snprintf(ref, sizeof(ref), "%s/ref", tu_tmp);
	TU_QE_OK(ENV, RUN " --run-dir '%s'", ref);
	for (int k = 1; k <= 4; k++)
		CHECK_OK(tu_load_ckpt(ref, 2 * k, &refs[k]));
	tu_ckpt *ref8 = &refs[4];
	CHECK(ref8->n == items_of_rank[0] + items_of_rank[1], "reference checkpoint has %d tensors, expected %d", ref8->n,
	      items_of_rank[0] + items_of_rank[1]);
	int have_verify = tu_qe(NULL, "verify --help") == 0;
	printf("qeffect verify %s\n", have_verify ? "found: run after every trial" : "not built: own checks only");

	int per_phase[NPHASES] = { 0 }, timeouts = 0, none_committed = 0, kill_trials = 0;
	for (int trial = 0; trial < trials; trial++) {
		char dir[400], env[200];
		snprintf(dir, sizeof(dir), "%s/t%d", tu_tmp, trial);
		int64_t expect = -3; /* -3: no expectation (timeout trial) */
		char what[160];
		int st;
		if (trial % 5 == 4) {
			double delay = 0.03 + (double)(rnd() % 1000) / 1000.0 * 0.35;
			snprintf(what, sizeof(what), "timeout -s KILL %.3f", delay);
			char targs[64];
			snprintf(targs, sizeof(targs), "timeout -s KILL %.3f", delay);
			snprintf(env, sizeof(env), "%s %s", ENV, targs);
			st = tu_qe(env, RUN " --run-dir '%s'", dir);
			timeouts++;
		} else {
			int p = kill_trials++ % NPHASES;
			const char *ph = phases[p];
			int rank_only0 = !strcmp(ph, "begin") || !strcmp(ph, "row") || !strcmp(ph, "commit") ||
					 !strcmp(ph, "committed");
			int rank = rank_only0 ? 0 : (int)(rnd() % 3) - 1; /* -1: both */
			int j = 1 + (int)(rnd() % 4);                      /* which checkpoint (steps 2, 4, 6, 8) */
			int count = j, dies_at = j;
			if (!strcmp(ph, "row")) {
				/* rank 0 writes every rank's rows in the commit transaction */
				int per = items_of_rank[0] + items_of_rank[1];
				count = (j - 1) * per + 1 + (int)(rnd() % per);
				dies_at = j;
			} else if (!strcmp(ph, "chunk")) {
				int per = rank < 0 ? items_of_rank[1] : items_of_rank[rank];
				count = (j - 1) * per + 1 + (int)(rnd() % per);
				dies_at = 1000;
				for (int k = 0; k < 2; k++)
					if (rank < 0 || rank == k) {
						int jk = (count - 1) / items_of_rank[k] + 1;
						if (jk <= 4 && jk < dies_at)
							dies_at = jk;
					}
			}
			expect = 2 * (int64_t)(!strcmp(ph, "committed") ? dies_at : dies_at - 1);
			if (expect == 0)
				expect = -1;
			snprintf(what, sizeof(what), "QE_CKPT_KILL=%s:%s:%d (checkpoint %d)", ph, rank < 0 ? "*" : rank ? "1" : "0",
				 count, dies_at);
			snprintf(env, sizeof(env), "%s QE_CKPT_KILL=%s:%s:%d", ENV, ph, rank < 0 ? "'*'" : rank ? "1" : "0",
				 count);
			st = tu_qe(env, RUN " --run-dir '%s'", dir);
			per_phase[p]++;
			CHECK(st != 0, "trial %d (%s): the run was not killed", trial, what);
		}
		int64_t latest = check_run(dir, trial);
		if (expect != -3)
			CHECK(latest == expect, "trial %d (%s): latest committed step %lld, expected %lld", trial, what,
			      (long long)latest, (long long)expect);
		if (have_verify && latest >= 0) {
			int vs = tu_qe(NULL, "verify --run-dir '%s'", dir);
			CHECK(vs == 0, "trial %d (%s): qeffect verify exited %d", trial, what, vs);
			if (vs)
				tu_show_log();
		}
		if (latest < 0) {
			none_committed++;
			int rs = tu_qe(NULL, "resume --run-dir '%s' --steps 8", dir);
			/* A job killed before it created its catalog is not a run at all. */
			CHECK(rs == 1 && (tu_log_has("no committed checkpoint") || tu_log_has("has no catalog") ||
					  tu_log_has("does not exist") || tu_log_has("empty database") ||
					  tu_log_has("run_id") || tu_log_has("has no run yet")),
			      "trial %d (%s): resume with nothing committed exited %d", trial, what, rs);
			if (rs != 1)
				tu_show_log();
		} else if (latest >= 0) {
			int rs = tu_qe(ENV, "resume --run-dir '%s' --steps 8 --ckpt-every 2 --quiet", dir);
			CHECK(rs == 0, "trial %d (%s): resume from step %lld exited %d", trial, what, (long long)latest, rs);
			if (rs)
				tu_show_log();
			if (latest < 8) {
				int cs = tu_qe(NULL, "compare '%s' '%s' --steps %lld:8", ref, dir, (long long)latest + 1);
				CHECK(cs == 0, "trial %d (%s): traces after resuming from %lld differ from the reference", trial,
				      what, (long long)latest);
				if (cs)
					tu_show_log();
			}
			tu_ckpt got;
			int rc = tu_load_ckpt(dir, 8, &got);
			char why[300] = "";
			CHECK(rc == 0 && tu_ckpt_equal(ref8, &got, why, sizeof(why)),
			      "trial %d (%s): step-8 checkpoint after resume differs from the reference: %s %s", trial, what,
			      why, rc ? qe_last_error() : "");
			tu_ckpt_free(&got);
			CHECK(pending_count(dir) == 0, "trial %d (%s): attempts left pending after resume", trial, what);
		}
		printf("trial %2d: %-44s latest committed %3lld\n", trial, what, (long long)latest);
		char rm[500];
		snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
		if (!qe_test_failures && system(rm) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	printf("kill points per phase:");
	for (int p = 0; p < NPHASES; p++)
		printf(" %s %d", phases[p], per_phase[p]);
	printf("; random-time kills %d; trials with nothing committed %d\n", timeouts, none_committed);
	for (int k = 1; k <= 4; k++)
		tu_ckpt_free(&refs[k]);
	if (!qe_test_failures)
		tu_cleanup();
	return qe_test_done("ckpt_crash");
}
