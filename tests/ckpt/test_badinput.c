/*
 * test_badinput.c - `qeffect resume` refuses what it cannot resume with a
 * clear message and the right exit status, and changes nothing on disk: every
 * file of the run directory is fingerprinted (name, size, bytes) before and
 * after each refused command.
 *
 * Cases: missing run directory, a directory without a catalog, a truncated
 * catalog, another run's catalog copied in, a different model (--preset
 * small) and other conflicting run flags (exit 2), --from a step without a
 * checkpoint, --steps behind the checkpoint, a run with no committed
 * checkpoint, a missing --run-dir, a flipped byte in a stored chunk (refused
 * naming the tensor, stage and chunk; catalog and data untouched).  Flags
 * equal to the run's values are accepted, and --help documents --from.
 */
#include "ckpt_testutil.h"

#define ENV "QE_CKPT_CHUNK_BYTES=65536"

static const char *const no_skip[] = { NULL };
/* LMDB's lock file holds reader slots, and a writer lock names its holder: opening may touch them. */
static const char *const skip_lock[] = { "lock.mdb", "lock", NULL };

/* Run resume with args on dir; expect exit status want, messages in the log, and no change under dir. */
static void refused(const char *what, const char *dir, int want, const char *msg1, const char *msg2,
		    const char *const *skip, const char *args)
{
	uint64_t before = tu_dir_fingerprint(dir, skip);
	int st = tu_qe(NULL, "resume --run-dir '%s' %s", dir, args);
	uint64_t after = tu_dir_fingerprint(dir, skip);
	int ok = st == want && (!msg1 || tu_log_has(msg1)) && (!msg2 || tu_log_has(msg2));
	CHECK(ok, "%s: exit %d (want %d), log should hold '%s' and '%s'", what, st, want, msg1 ? msg1 : "",
	      msg2 ? msg2 : "");
	CHECK(before == after, "%s: the run directory changed (%016llx -> %016llx)", what, (unsigned long long)before,
	      (unsigned long long)after);
	if (!ok || before != after)
		tu_show_log();
	else
		printf("%-28s exit %d ok\n", what, st);
}

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), fmt, a, b);
	CHECK(system(cmd) == 0, "shell: %s", cmd);
}

int main(void)
{
	tu_setup("ckpt_badinput");
	char a[400], b[400], d[400], none[400];
	snprintf(a, sizeof(a), "%s/a", tu_tmp);
	snprintf(b, sizeof(b), "%s/b", tu_tmp);
	snprintf(none, sizeof(none), "%s/none", tu_tmp);
	TU_QE_OK(ENV, "train " TU_TINY " --pp 2 --steps 3 --ckpt-every 3 --run-dir '%s'", a);
	TU_QE_OK(ENV, "train " TU_TINY " --pp 2 --steps 2 --ckpt-every 2 --seed 7 --run-dir '%s'", b);
	TU_QE_OK(NULL, "train " TU_TINY " --pp 2 --steps 2 --run-dir '%s'", none);

	/* help */
	CHECK(tu_qe(NULL, "resume --help") == 0 && tu_log_has("--from STEP") && tu_log_has("usage: qeffect resume"),
	      "resume --help");

	/* usage */
	CHECK(tu_qe(NULL, "resume --steps 4") == 2 && tu_log_has("--run-dir DIR is required"), "resume without --run-dir");
	CHECK(tu_qe(NULL, "resume --run-dir '%s' --pp 0", a) == 2 && tu_log_has("--pp"), "resume --pp 0");

	/* missing run directory */
	snprintf(d, sizeof(d), "%s/missing", tu_tmp);
	CHECK(tu_qe(NULL, "resume --run-dir '%s' --steps 4", d) == 1 && tu_log_has("does not exist"),
	      "missing run directory");
	CHECK(access(d, F_OK) != 0, "resume created the missing run directory");

	/* a file where the run directory should be: said so, not "does not exist" (issue 35) */
	snprintf(d, sizeof(d), "%s/afile", tu_tmp);
	sh("echo not a run >'%s'%s", d, "");
	CHECK(tu_qe(NULL, "resume --run-dir '%s' --steps 4", d) == 1 && tu_log_has("is not a directory") &&
		      !tu_log_has("does not exist"),
	      "a file given as the run directory");

	/* a directory without a catalog */
	snprintf(d, sizeof(d), "%s/empty", tu_tmp);
	mkdir(d, 0755);
	refused("no catalog", d, 1, "has no catalog", NULL, no_skip, "--steps 4");

	/* a truncated catalog */
	snprintf(d, sizeof(d), "%s/trunc", tu_tmp);
	sh("cp -r '%s' '%s'", a, d);
	{
		char p[500];
		snprintf(p, sizeof(p), "%s/catalog.db", d);
		CHECK(truncate(p, 3000) == 0, "truncate %s", p);
	}
	refused("truncated catalog", d, 1, "catalog.db", "QE_ECORRUPT", no_skip, "--steps 4");

	/* another run's catalog copied in */
	snprintf(d, sizeof(d), "%s/swapped", tu_tmp);
	sh("cp -r '%s' '%s'", a, d);
	sh("cp '%s/catalog.db' '%s/catalog.db'", b, d);
	refused("another run's catalog", d, 1, "belongs to run", "copied from another run directory", no_skip,
		"--steps 4");

	/* conflicting run flags: exit 2, naming the flag and both values */
	refused("--preset small", a, 2, "--preset small", "tiny", no_skip, "--steps 4 --preset small");
	refused("--amax-history 8", a, 2, "--amax-history 8", "amax history 4", no_skip, "--steps 4 --amax-history 8");
	refused("--seed 2", a, 2, "--seed 2", "seed 1", no_skip, "--steps 4 --seed 2");
	refused("--micro 8", a, 2, "--micro 8", "4 microbatches", no_skip, "--steps 4 --micro 8");
	refused("--lr 0.5", a, 2, "--lr 0.5", "learning rate", no_skip, "--steps 4 --lr 0.5");
	refused("--fp8 off", a, 2, "--fp8 off", "fp8 on", no_skip, "--steps 4 --fp8 off");
	/* --data naming a file that is not a corpus: refused naming the flag and the file (a corpus
	 * with other tokens is tests/cli/data_moved.sh) */
	char junk[460], junk_msg[520], junk_arg[560];
	snprintf(junk, sizeof(junk), "%s/not-a-corpus.txt", tu_tmp);
	sh("printf 'plain words, not JSON\\n' > '%s'%s", junk, "");
	snprintf(junk_msg, sizeof(junk_msg), "data '%s' line 1: not JSON", junk);
	snprintf(junk_arg, sizeof(junk_arg), "--steps 4 --data '%s'", junk);
	refused("--data", a, 2, "qeffect resume: --data:", junk_msg, no_skip, junk_arg);

	/* no checkpoint to resume from */
	refused("--from 5", a, 1, "no committed checkpoint at step 5", "committed steps: 3", no_skip, "--steps 6 --from 5");
	refused("--steps behind", a, 2, "before the checkpoint's step 3", NULL, no_skip, "--steps 2");
	refused("no committed checkpoint", none, 1, "has no committed checkpoint", NULL, no_skip, "--steps 4");

	/* a flipped byte in a stored chunk: refused naming the tensor; catalog and chunks untouched */
	snprintf(d, sizeof(d), "%s/corrupt", tu_tmp);
	sh("cp -r '%s' '%s'", a, d);
	long off = 0;
	CHECK(tu_flip_chunk_byte(d, 1, "params", 2, &off) == 0, "could not find chunk 2 of params of stage 1");
	refused("corrupt chunk", d, 1, "tensor 'params' of stage 1", "chunk 2 of", skip_lock, "--steps 4");
	CHECK(tu_log_has("is corrupt") && tu_log_has("QE_ECORRUPT"), "corrupt chunk: message lacks 'is corrupt'");
	CHECK(!tu_log_has("step     4"), "training ran after a failed restore");

	/* flags equal to the run's are accepted; --steps at the checkpoint only restores */
	int st = tu_qe(ENV, "resume --run-dir '%s' --steps 3 --preset tiny --amax-history 4 --micro 4 --seed 1", a);
	CHECK(st == 0 && tu_log_has("resumed from checkpoint step 3"), "resume with the run's own values exited %d", st);
	if (st)
		tu_show_log();

	tu_cleanup();
	return qe_test_done("ckpt_badinput");
}
