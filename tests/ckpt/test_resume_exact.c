/*
 * test_resume_exact.c - a run interrupted at a checkpoint and resumed in
 * fresh processes continues bit for bit as if it had never stopped.
 *
 * For every schedule (interleaved, zbv) x backward (full, split) x exec
 * (eager, graph) at --pp 2 --micro 4: an uninterrupted 8-step run, and a run
 * trained to step 3 (checkpoint at 3) then `qeffect resume --steps 8`.
 * `qeffect compare --steps 4:8` must find every category equal, and the two
 * step-8 checkpoints must hold the same tensors byte for byte (read back
 * from each run's store, every chunk re-hashed).  A small chunk size
 * (QE_CKPT_CHUNK_BYTES) makes every tensor span several chunks.  Two more
 * cases add data parallelism (--pp 2 --dp 2, --pp 1 --dp 2): replicas keep
 * their own FP8 amax histories, which the checkpoint must carry.
 */
#include "ckpt_testutil.h"

#define ENV "QE_CKPT_CHUNK_BYTES=65536"

/* Uninterrupted to 8 vs trained to 3 and resumed to 8, for one set of flags. */
static void one_case(const char *tag, const char *flags)
{
	char a[400], b[400];
	snprintf(a, sizeof(a), "%s/%s_a", tu_tmp, tag);
	snprintf(b, sizeof(b), "%s/%s_b", tu_tmp, tag);
	printf("case %s: %s\n", tag, flags);
	TU_QE_OK(ENV, "train %s --steps 8 --ckpt-every 8 --run-dir '%s'", flags, a);
	TU_QE_OK(ENV, "train %s --steps 3 --ckpt-every 3 --run-dir '%s'", flags, b);
	int st = tu_qe(ENV, "resume --run-dir '%s' --steps 8 --ckpt-every 8", b);
	CHECK(st == 0 && tu_log_has("resumed from checkpoint step 3"), "%s: resume exited %d", b, st);
	if (st)
		tu_show_log();
	st = tu_qe(NULL, "compare '%s' '%s' --steps 4:8", a, b);
	CHECK(st == 0 && tu_log_has("identical: all"), "%s vs %s: compare exited %d", a, b, st);
	if (st)
		tu_show_log();
	tu_ckpt ca, cb;
	int ra = tu_load_ckpt(a, 8, &ca), rb = tu_load_ckpt(b, 8, &cb);
	CHECK(ra == 0 && rb == 0, "reading the step-8 checkpoints: %s", qe_last_error());
	if (!ra && !rb) {
		char why[300];
		CHECK(ca.n >= 4 * 5 + 4, "step-8 checkpoint has only %d tensors", ca.n);
		CHECK(tu_ckpt_equal(&ca, &cb, why, sizeof(why)), "%s: step-8 checkpoints differ: %s", b, why);
		CHECK(ca.e_w == cb.e_w && ca.bytes == cb.bytes && ca.rt_bytes == cb.rt_bytes,
		      "checkpoint rows differ: e_W %lld/%lld bytes %llu/%llu", (long long)ca.e_w, (long long)cb.e_w,
		      (unsigned long long)ca.bytes, (unsigned long long)cb.bytes);
		int multi = 0;
		for (int i = 0; i < ca.n; i++)
			multi |= ca.t[i].nchunks > 1;
		CHECK(multi, "no tensor spans several chunks at 64 KiB chunks");
	}
	tu_ckpt_free(&ca);
	tu_ckpt_free(&cb);
}

int main(void)
{
	tu_setup("resume_exact");
	const char *scheds[] = { "interleaved", "zbv" }, *bws[] = { "full", "split" }, *execs[] = { "eager", "graph" };
	for (int si = 0; si < 2; si++)
		for (int bi = 0; bi < 2; bi++)
			for (int ei = 0; ei < 2; ei++) {
				char tag[64], flags[300];
				snprintf(tag, sizeof(tag), "%s_%s_%s", scheds[si], bws[bi], execs[ei]);
				snprintf(flags, sizeof(flags), TU_TINY " --pp 2 --schedule %s --backward %s --exec %s",
					 scheds[si], bws[bi], execs[ei]);
				one_case(tag, flags);
			}
	one_case("pp2_dp2", TU_TINY " --pp 2 --dp 2");
	one_case("pp1_dp2", TU_TINY " --pp 1 --dp 2 --exec graph");
	tu_cleanup();
	return qe_test_done("ckpt_resume_exact");
}
