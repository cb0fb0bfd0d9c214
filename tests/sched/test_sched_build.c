/*
 * test_sched_build.c - the generators make valid schedules of the right shape:
 * the P x M grid of the issue (and a wider sweep) passes the validator in
 * split and full backward, the full reference keeps the split F/DI order,
 * interleaved P=2 V=2 M=4 matches an order derived by hand from Megatron's
 * rule, ZB-V defers DW out of LIFO order, and the timing proxy reproduces the
 * textbook 1F1B makespan.  Bad configurations are refused with QE_EINVAL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched.h"
#include "testlib.h"

static qe_sched *build(qe_sched_kind kind, int P, int M, int V, qe_sched_backward bw)
{
	qe_sched_config c = { kind, P, M, V, bw };
	qe_sched *s = NULL;
	int rc = qe_sched_build(&c, &s);
	CHECK(rc == 0, "build %s P=%d M=%d V=%d %s: %s: %s", qe_sched_kind_name(kind), P, M, V,
	      qe_sched_backward_name(bw), qe_errname(rc), qe_last_error());
	return s;
}

static int count_kind(const qe_sched *s, int r, qe_action_kind k)
{
	int n = 0;
	for (int i = 0; i < s->ranks[r].n; i++)
		n += s->ranks[r].actions[i].kind == k;
	return n;
}

/* Validate one schedule and check per-rank compute counts. */
static void check_valid(qe_sched_kind kind, int P, int M, int V, qe_sched_backward bw, int verbose)
{
	qe_sched *s = build(kind, P, M, V, bw);
	if (!s)
		return;
	int rc = qe_sched_validate(s);
	CHECK(rc == 0, "validate %s P=%d M=%d V=%d %s: %s: %s", qe_sched_kind_name(kind), P, M, V,
	      qe_sched_backward_name(bw), qe_errname(rc), qe_last_error());
	for (int r = 0; r < P; r++) {
		int f = count_kind(s, r, QE_ACT_F);
		CHECK(f == V * M, "%s P=%d M=%d rank %d: %d F, expected %d", qe_sched_kind_name(kind), P, M, r, f, V * M);
		if (bw == QE_BACKWARD_SPLIT)
			CHECK(count_kind(s, r, QE_ACT_DI) == V * M && count_kind(s, r, QE_ACT_DW) == V * M &&
				      count_kind(s, r, QE_ACT_B) == 0,
			      "%s P=%d M=%d rank %d: split counts wrong", qe_sched_kind_name(kind), P, M, r);
		else
			CHECK(count_kind(s, r, QE_ACT_B) == V * M && count_kind(s, r, QE_ACT_DI) == 0 &&
				      count_kind(s, r, QE_ACT_DW) == 0,
			      "%s P=%d M=%d rank %d: full counts wrong", qe_sched_kind_name(kind), P, M, r);
	}
	if (verbose) {
		qe_sched_rank_stats st[8];
		char *txt = NULL;
		CHECK_OK(qe_sched_stats(s, st));
		if (qe_sched_stats_format(s, st, &txt) == 0)
			printf("%s P=%d M=%d V=%d %s\n%s", qe_sched_kind_name(kind), P, M, V, qe_sched_backward_name(bw),
			       txt);
		free(txt);
	}
	qe_sched_free(s);
}

/* The F/DI order of split equals the F/B order of full, on every rank. */
static void check_reference_order(qe_sched_kind kind, int P, int M, int V)
{
	qe_sched *a = build(kind, P, M, V, QE_BACKWARD_SPLIT), *b = build(kind, P, M, V, QE_BACKWARD_FULL);
	if (!a || !b)
		goto out;
	for (int r = 0; r < P; r++) {
		int i = 0, j = 0, pos = 0;
		for (;;) {
			while (i < a->ranks[r].n && a->ranks[r].actions[i].kind != QE_ACT_F &&
			       a->ranks[r].actions[i].kind != QE_ACT_DI)
				i++;
			while (j < b->ranks[r].n && b->ranks[r].actions[j].kind != QE_ACT_F &&
			       b->ranks[r].actions[j].kind != QE_ACT_B)
				j++;
			if (i == a->ranks[r].n || j == b->ranks[r].n) {
				CHECK(i == a->ranks[r].n && j == b->ranks[r].n,
				      "%s P=%d M=%d rank %d: split and full differ in length at compute %d",
				      qe_sched_kind_name(kind), P, M, r, pos);
				break;
			}
			const qe_sched_action *x = &a->ranks[r].actions[i], *y = &b->ranks[r].actions[j];
			int same = x->stage == y->stage && x->mb == y->mb && x->chunk == y->chunk &&
				   (x->kind == QE_ACT_F) == (y->kind == QE_ACT_F);
			CHECK(same, "%s P=%d M=%d rank %d compute %d: split %s(s%d,m%d) vs full %s(s%d,m%d)",
			      qe_sched_kind_name(kind), P, M, r, pos, qe_sched_action_name(x->kind), x->stage, x->mb,
			      qe_sched_action_name(y->kind), y->stage, y->mb);
			if (!same)
				break;
			i++, j++, pos++;
		}
	}
out:
	qe_sched_free(a);
	qe_sched_free(b);
}

/*
 * Interleaved, P=2, V=2, M=4, worked by hand from the Megatron rule.
 * Groups of P*V = 4 forwards: k -> (chunk (k%4)/2, mb (k/4)*2 + k%2):
 *   F: k0 c0m0, k1 c0m1, k2 c1m0, k3 c1m1, k4 c0m2, k5 c0m3, k6 c1m2, k7 c1m3
 * backwards use chunk V-1-(k%4)/2 with the same mb:
 *   B: k0 c1m0, k1 c1m1, k2 c0m0, k3 c0m1, k4 c1m2, k5 c1m3, k6 c0m2, k7 c0m3
 * Rank 0: warmup min(2*(2-0-1) + (2-1)*2, 8) = 4 forwards F(k0..k3); then
 *   F(k4) B(k0), F(k5) B(k1), F(k6) B(k2), F(k7) B(k3); then B(k4..k7).
 * Rank 1: warmup min(0 + 2, 8) = 2 forwards F(k0) F(k1); then
 *   F(k2) B(k0), F(k3) B(k1), F(k4) B(k2), F(k5) B(k3), F(k6) B(k4), F(k7) B(k5);
 *   then B(k6) B(k7).
 * Each B is I then W in split mode.  Tokens are chunk.mb.
 */
static const char *const interleaved_2_2_4[2] = {
	"rank 0: F0.0 F0.1 F1.0 F1.1 F0.2 I1.0 W1.0 F0.3 I1.1 W1.1 F1.2 I0.0 W0.0 F1.3 I0.1 W0.1"
	" I1.2 W1.2 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3\n",
	"rank 1: F0.0 F0.1 F1.0 I1.0 W1.0 F1.1 I1.1 W1.1 F0.2 I0.0 W0.0 F0.3 I0.1 W0.1 F1.2 I1.2 W1.2"
	" F1.3 I1.3 W1.3 I0.2 W0.2 I0.3 W0.3\n",
};

static void check_interleaved_by_hand(void)
{
	qe_sched *s = build(QE_SCHED_INTERLEAVED, 2, 4, 2, QE_BACKWARD_SPLIT);
	if (!s)
		return;
	for (int r = 0; r < 2; r++) {
		char *txt = NULL;
		CHECK_OK(qe_sched_format_rank(s, r, QE_SCHED_FMT_COMPUTE_ONLY, &txt));
		CHECK(txt && strcmp(txt, interleaved_2_2_4[r]) == 0, "interleaved P=2 V=2 M=4 rank %d:\n got      %s expected %s",
		      r, txt ? txt : "(null)", interleaved_2_2_4[r]);
		free(txt);
	}
	/* Placement: chunk c of rank r is stage c*P + r. */
	CHECK(qe_sched_stage_of(s, 1, 1) == 3 && qe_sched_rank_of(s, 2) == 0 && qe_sched_chunk_of(s, 2) == 1,
	      "interleaved placement wrong");
	qe_sched_free(s);
}

/* ZB-V, P=2, M=4: some DW runs after a later DI of the same rank (deferred) and
 * is not the most recent pending one (non-LIFO). */
static void check_zbv_deferred(void)
{
	qe_sched *s = build(QE_SCHED_ZBV, 2, 4, 2, QE_BACKWARD_SPLIT);
	if (!s)
		return;
	CHECK(qe_sched_stage_of(s, 0, 1) == 3 && qe_sched_stage_of(s, 1, 1) == 2 && qe_sched_rank_of(s, 3) == 0,
	      "V placement wrong: the last stage must be chunk 1 of rank 0");
	int non_lifo = 0;
	for (int r = 0; r < s->P; r++) {
		int pend_stage[64], pend_mb[64], np = 0;
		for (int i = 0; i < s->ranks[r].n; i++) {
			const qe_sched_action *a = &s->ranks[r].actions[i];
			if (a->kind == QE_ACT_DI && np < 64) {
				pend_stage[np] = a->stage;
				pend_mb[np++] = a->mb;
			} else if (a->kind == QE_ACT_DW) {
				int k;
				for (k = 0; k < np; k++)
					if (pend_stage[k] == a->stage && pend_mb[k] == a->mb)
						break;
				CHECK(k < np, "zbv rank %d action %d: DW with no pending DI", r, i);
				if (k < np - 1) {
					if (!non_lifo)
						printf("zbv P=2 M=4 rank %d action %d: DW(stage %d, mb %d) runs while "
						       "DI(stage %d, mb %d) is newer (non-LIFO)\n",
						       r, i, a->stage, a->mb, pend_stage[np - 1], pend_mb[np - 1]);
					non_lifo++;
				}
				for (; k + 1 < np; k++) {
					pend_stage[k] = pend_stage[k + 1];
					pend_mb[k] = pend_mb[k + 1];
				}
				if (k < np)
					np--;
			}
		}
	}
	CHECK(non_lifo > 0, "zbv P=2 M=4: expected non-LIFO deferred DW, found none");

	qe_sched_rank_stats st[2];
	CHECK_OK(qe_sched_stats(s, st));
	int delayed = st[0].delayed_dw + st[1].delayed_dw;
	CHECK(delayed > 0 && st[1].max_pending_dw > 1, "zbv P=2 M=4: delayed %d, max pending on rank 1 %d", delayed,
	      st[1].max_pending_dw);
	char *txt = NULL;
	if (qe_sched_format(s, 0, &txt) == 0)
		printf("%s", txt);
	free(txt);
	if (qe_sched_stats_format(s, st, &txt) == 0)
		printf("%s", txt);
	free(txt);
	qe_sched_free(s);
}

/* Timing and memory proxies against closed forms. */
static void check_stats_closed_forms(void)
{
	for (int P = 1; P <= 6; P++)
		for (int M = 1; M <= 12; M++) {
			qe_sched_rank_stats st[8];
			/* plain 1F1B with full backward: makespan (M + P - 1) * (1 + 2); rank r keeps min(P-r, M) tapes. */
			qe_sched *s = build(QE_SCHED_INTERLEAVED, P, M, 1, QE_BACKWARD_FULL);
			if (s && qe_sched_stats(s, st) == 0) {
				CHECK(st[0].makespan == 3L * (M + P - 1), "1F1B P=%d M=%d makespan %ld, expected %d", P, M,
				      st[0].makespan, 3 * (M + P - 1));
				for (int r = 0; r < P; r++)
					CHECK(st[r].peak_live_tapes == (P - r < M ? P - r : M),
					      "1F1B P=%d M=%d rank %d peak tapes %d", P, M, r, st[r].peak_live_tapes);
			}
			qe_sched_free(s);
			/* interleaved split: DW always right after its DI. */
			if (M % P == 0) {
				s = build(QE_SCHED_INTERLEAVED, P, M, 2, QE_BACKWARD_SPLIT);
				if (s && qe_sched_stats(s, st) == 0)
					for (int r = 0; r < P; r++)
						CHECK(st[r].delayed_dw == 0 && st[r].max_pending_dw == 1,
						      "interleaved P=%d M=%d rank %d: delayed %d pending %d", P, M, r,
						      st[r].delayed_dw, st[r].max_pending_dw);
				qe_sched_free(s);
			}
			/* ZB-V keeps at most 2P chunk tapes, the activation memory of 1F1B. */
			s = build(QE_SCHED_ZBV, P, M, 2, QE_BACKWARD_SPLIT);
			if (s && qe_sched_stats(s, st) == 0)
				for (int r = 0; r < P; r++)
					CHECK(st[r].peak_live_tapes <= 2 * P, "zbv P=%d M=%d rank %d peak tapes %d > %d", P,
					      M, r, st[r].peak_live_tapes, 2 * P);
			qe_sched_free(s);
		}
}

static void check_refusals(void)
{
	struct {
		qe_sched_config c;
		const char *needle;
	} bad[] = {
		{ { QE_SCHED_INTERLEAVED, 2, 3, 2, QE_BACKWARD_SPLIT }, "multiple" },
		{ { QE_SCHED_INTERLEAVED, 4, 6, 3, QE_BACKWARD_FULL }, "multiple" },
		{ { QE_SCHED_ZBV, 2, 4, 3, QE_BACKWARD_SPLIT }, "2 chunks" },
		{ { QE_SCHED_ZBV, 2, 4, 1, QE_BACKWARD_SPLIT }, "2 chunks" },
		{ { QE_SCHED_ZBV, 0, 4, 2, QE_BACKWARD_SPLIT }, ">= 1" },
		{ { QE_SCHED_INTERLEAVED, 2, 0, 1, QE_BACKWARD_SPLIT }, ">= 1" },
		{ { QE_SCHED_INTERLEAVED, 2, 4, 2, (qe_sched_backward)7 }, "backward" },
		{ { (qe_sched_kind)9, 2, 4, 2, QE_BACKWARD_SPLIT }, "kind" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		qe_sched *s = (qe_sched *)1;
		qe_clear_error();
		int rc = qe_sched_build(&bad[i].c, &s);
		CHECK(rc == QE_EINVAL && s == NULL, "bad config %zu: rc %s", i, qe_errname(rc));
		CHECK(strstr(qe_last_error(), bad[i].needle) != NULL, "bad config %zu: message '%s' lacks '%s'", i,
		      qe_last_error(), bad[i].needle);
		if (rc == 0)
			qe_sched_free(s);
	}
	/* Interleaved with V = 1 is plain 1F1B and takes any M. */
	qe_sched *s = build(QE_SCHED_INTERLEAVED, 4, 3, 1, QE_BACKWARD_SPLIT);
	if (s)
		CHECK_OK(qe_sched_validate(s));
	qe_sched_free(s);

	qe_sched_kind k;
	qe_sched_backward b;
	CHECK(qe_sched_kind_parse("zbv", &k) == 0 && k == QE_SCHED_ZBV, "parse zbv");
	CHECK(qe_sched_kind_parse("1f1b", &k) == QE_EINVAL, "parse 1f1b must fail");
	CHECK(qe_sched_backward_parse("full", &b) == 0 && b == QE_BACKWARD_FULL, "parse full");
	CHECK(qe_sched_backward_parse("half", &b) == QE_EINVAL, "parse half must fail");
}

/* Recvs sit right before their consumer unless the channel's FIFO order needs
 * them earlier: never in interleaved, sometimes in ZB-V. */
static int early_recvs(const qe_sched *s)
{
	int early = 0;
	for (int r = 0; r < s->P; r++)
		for (int i = 0; i < s->ranks[r].n; i++) {
			const qe_sched_action *a = &s->ranks[r].actions[i];
			if (a->kind != QE_ACT_RECV_ACT && a->kind != QE_ACT_RECV_GRAD)
				continue;
			const qe_sched_action *n = i + 1 < s->ranks[r].n ? &s->ranks[r].actions[i + 1] : NULL;
			int grad = a->kind == QE_ACT_RECV_GRAD;
			int right = n && n->mb == a->mb && n->stage == (grad ? a->stage - 1 : a->stage + 1) &&
				    (grad ? n->kind == QE_ACT_DI || n->kind == QE_ACT_B : n->kind == QE_ACT_F);
			early += !right;
		}
	return early;
}

static void check_recv_placement(void)
{
	for (int P = 1; P <= 4; P++)
		for (int M = P; M <= 16; M += P) {
			qe_sched *s = build(QE_SCHED_INTERLEAVED, P, M, 2, QE_BACKWARD_SPLIT);
			if (s)
				CHECK(early_recvs(s) == 0, "interleaved P=%d M=%d: %d recvs not right before their consumer",
				      P, M, early_recvs(s));
			qe_sched_free(s);
		}
	qe_sched *s = build(QE_SCHED_ZBV, 2, 4, 2, QE_BACKWARD_SPLIT);
	if (s) {
		int e = early_recvs(s);
		printf("zbv P=2 M=4: %d recvs placed early to keep the per-peer FIFO order\n", e);
		CHECK(e > 0, "zbv P=2 M=4: expected early recvs");
	}
	qe_sched_free(s);
}

/* P = 1: everything is local, so no messages at all. */
static void check_single_rank(void)
{
	qe_sched *s = build(QE_SCHED_ZBV, 1, 4, 2, QE_BACKWARD_SPLIT);
	if (!s)
		return;
	CHECK_OK(qe_sched_validate(s));
	CHECK(s->ranks[0].n == 3 * 2 * 4, "zbv P=1 M=4: %d actions, expected 24 (no messages)", s->ranks[0].n);
	qe_sched_free(s);
}

int main(void)
{
	static const int Ps[] = { 1, 2, 4 }, Ms[] = { 2, 4, 8, 16 };
	for (int bw = 0; bw < 2; bw++)
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 4; j++) {
				int P = Ps[i], M = Ms[j];
				int verbose = bw == 0 && P == 4 && M == 8;
				if (M % P == 0)
					check_valid(QE_SCHED_INTERLEAVED, P, M, 2, (qe_sched_backward)bw, verbose);
				check_valid(QE_SCHED_INTERLEAVED, P, M, 1, (qe_sched_backward)bw, 0);
				check_valid(QE_SCHED_ZBV, P, M, 2, (qe_sched_backward)bw, verbose);
			}
	/* Wider sweep, including M < 2P - 1 where ZB-V drops microbatches, and V = 3. */
	for (int bw = 0; bw < 2; bw++)
		for (int P = 1; P <= 8; P++)
			for (int M = 1; M <= 20; M++) {
				check_valid(QE_SCHED_ZBV, P, M, 2, (qe_sched_backward)bw, 0);
				check_valid(QE_SCHED_INTERLEAVED, P, M, 1, (qe_sched_backward)bw, 0);
				if (M % P == 0) {
					check_valid(QE_SCHED_INTERLEAVED, P, M, 2, (qe_sched_backward)bw, 0);
					check_valid(QE_SCHED_INTERLEAVED, P, M, 3, (qe_sched_backward)bw, 0);
				}
			}
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++) {
			if (Ms[j] % Ps[i] == 0)
				check_reference_order(QE_SCHED_INTERLEAVED, Ps[i], Ms[j], 2);
			check_reference_order(QE_SCHED_ZBV, Ps[i], Ms[j], 2);
		}
	check_interleaved_by_hand();
	check_zbv_deferred();
	check_stats_closed_forms();
	check_refusals();
	check_single_rank();
	check_recv_placement();
	return qe_test_done("sched_test_sched_build");
}
