/*
 * test_sched_validate.c - the validator rejects broken schedules, each with
 * QE_ESCHEDULE and a message that says what is wrong: a dropped action, a DW
 * moved before its DI, a removed RECV, a duplicated F, recvs reordered into a
 * deadlock or against the channel order, misplaced or malformed actions.
 * Exhaustive part: deleting or duplicating any single action of a valid
 * schedule must be rejected, since every action of a schedule is needed once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched.h"
#include "testlib.h"

static qe_sched *build(qe_sched_kind kind, int P, int M, qe_sched_backward bw)
{
	qe_sched_config c = { kind, P, M, 2, bw };
	qe_sched *s = NULL;
	CHECK_OK(qe_sched_build(&c, &s));
	if (s)
		CHECK_OK(qe_sched_validate(s));
	return s;
}

/* Expect rejection with a message holding both needles (a NULL needle is skipped). */
static void expect_bad(const qe_sched *s, const char *what, const char *n1, const char *n2)
{
	qe_clear_error();
	int rc = qe_sched_validate(s);
	CHECK(rc == QE_ESCHEDULE, "%s: validate returned %s, expected QE_ESCHEDULE", what, qe_errname(rc));
	const char *msg = qe_last_error();
	printf("%s -> %s\n", what, msg);
	CHECK(!n1 || strstr(msg, n1), "%s: message '%s' lacks '%s'", what, msg, n1);
	CHECK(!n2 || strstr(msg, n2), "%s: message '%s' lacks '%s'", what, msg, n2);
}

static int find(const qe_sched *s, int r, qe_action_kind k, int from)
{
	for (int i = from; i < s->ranks[r].n; i++)
		if (s->ranks[r].actions[i].kind == k)
			return i;
	return -1;
}

static int find_exact(const qe_sched *s, int r, qe_action_kind k, int stage, int mb)
{
	for (int i = 0; i < s->ranks[r].n; i++) {
		const qe_sched_action *a = &s->ranks[r].actions[i];
		if (a->kind == k && a->stage == stage && a->mb == mb)
			return i;
	}
	return -1;
}

static qe_sched *copy(const qe_sched *s)
{
	qe_sched *c = NULL;
	CHECK_OK(qe_sched_clone(s, &c));
	return c;
}

/* Move the action at `from` to position `to` (to counts in the list after removal). */
static void move(qe_sched *s, int r, int from, int to)
{
	qe_sched_action a = s->ranks[r].actions[from];
	CHECK_OK(qe_sched_remove(s, r, from));
	CHECK_OK(qe_sched_insert(s, r, to, a));
}

static void corruptions(qe_sched_kind kind)
{
	const char *kn = qe_sched_kind_name(kind);
	char what[128];
	qe_sched *base = build(kind, 2, 4, QE_BACKWARD_SPLIT);
	if (!base)
		return;
	qe_sched *s;

	/* 1. drop a DW: the step would never produce that weight gradient. */
	s = copy(base);
	int i = find(s, 1, QE_ACT_DW, 0);
	const qe_sched_action dw = s->ranks[1].actions[i];
	CHECK_OK(qe_sched_remove(s, 1, i));
	snprintf(what, sizeof(what), "%s: drop DW", kn);
	expect_bad(s, what, "no DW(stage", "rank 1");
	qe_sched_free(s);

	/* 2. swap a DW before its DI. */
	s = copy(base);
	int di = find_exact(s, 1, QE_ACT_DI, dw.stage, dw.mb);
	int w = find_exact(s, 1, QE_ACT_DW, dw.stage, dw.mb);
	CHECK(di >= 0 && w > di, "%s: DI/DW of rank 1 not found", kn);
	move(s, 1, w, di);
	snprintf(what, sizeof(what), "%s: DW before its DI", kn);
	char need[64];
	snprintf(need, sizeof(need), "no DI(stage %d, mb %d) before it", dw.stage, dw.mb);
	expect_bad(s, what, need, "DW(stage");
	qe_sched_free(s);

	/* 3. remove a RECV_ACT: the F after it has no input. */
	s = copy(base);
	i = find(s, 1, QE_ACT_RECV_ACT, 0);
	CHECK_OK(qe_sched_remove(s, 1, i));
	snprintf(what, sizeof(what), "%s: remove RECV_ACT", kn);
	expect_bad(s, what, "no RECV_ACT(stage", "before it");
	qe_sched_free(s);

	/* 3b. remove a RECV_GRAD. */
	s = copy(base);
	i = find(s, 0, QE_ACT_RECV_GRAD, 0);
	CHECK_OK(qe_sched_remove(s, 0, i));
	snprintf(what, sizeof(what), "%s: remove RECV_GRAD", kn);
	expect_bad(s, what, "no RECV_GRAD(stage", "rank 0");
	qe_sched_free(s);

	/* 3c. remove a SEND: the recv would wait forever. */
	s = copy(base);
	i = find(s, 0, QE_ACT_SEND_ACT, 0);
	CHECK_OK(qe_sched_remove(s, 0, i));
	snprintf(what, sizeof(what), "%s: remove SEND_ACT", kn);
	expect_bad(s, what, "never sends it", NULL);
	qe_sched_free(s);

	/* 4. duplicate an F. */
	s = copy(base);
	i = find(s, 0, QE_ACT_F, 0);
	CHECK_OK(qe_sched_insert(s, 0, s->ranks[0].n, s->ranks[0].actions[i]));
	snprintf(what, sizeof(what), "%s: duplicate F", kn);
	expect_bad(s, what, "duplicate of action", "F(stage");
	qe_sched_free(s);

	/* 5. deadlock: rank 0 starts by waiting for rank 1, which waits for rank 0's
	 *    first activation.  Both recvs are local-order fine; only the simulation sees it. */
	s = copy(base);
	i = find(s, 0, QE_ACT_RECV_ACT, 0);
	if (i < 0)
		i = find(s, 0, QE_ACT_RECV_GRAD, 0);
	move(s, 0, i, 0);
	i = find(s, 1, QE_ACT_RECV_ACT, 0);
	move(s, 1, i, 0);
	snprintf(what, sizeof(what), "%s: recvs first on both ranks", kn);
	expect_bad(s, what, "deadlock: 2 of 2 ranks blocked", "rank 0 action 0");
	qe_sched_free(s);

	/* 6. reverse two recvs of one channel: move the second recv before the first,
	 *    so both still precede their Fs, but the channel delivers mb 0 first and
	 *    rank 1 asks for mb 1 first. */
	s = copy(base);
	int a0 = find(s, 1, QE_ACT_RECV_ACT, 0);
	int a1 = find(s, 1, QE_ACT_RECV_ACT, a0 + 1);
	CHECK(s->ranks[1].actions[a0].stage == s->ranks[1].actions[a1].stage &&
		      s->ranks[1].actions[a0].mb + 1 == s->ranks[1].actions[a1].mb,
	      "%s: first two recvs of rank 1 are not consecutive mbs of one stage", kn);
	move(s, 1, a1, a0);
	snprintf(what, sizeof(what), "%s: recvs against channel order", kn);
	expect_bad(s, what, "out of order", "rank 1");
	qe_sched_free(s);

	/* 6b. one FIFO per pair of ranks: a recv held back to right before its
	 *     consumer, behind a message the peer sent later, breaks the order.
	 *     (ZB-V needs such early recvs; interleaved has none to move.) */
	s = copy(base);
	for (i = 0; i + 1 < s->ranks[1].n; i++) {
		const qe_sched_action *a = &s->ranks[1].actions[i], *n = &s->ranks[1].actions[i + 1];
		if (a->kind == QE_ACT_RECV_ACT && !(n->kind == QE_ACT_F && n->stage == a->stage + 1 && n->mb == a->mb))
			break;
	}
	if (i + 1 < s->ranks[1].n) {
		qe_sched_action a = s->ranks[1].actions[i];
		int f = find_exact(s, 1, QE_ACT_F, a.stage + 1, a.mb);
		move(s, 1, i, f - 1);
		snprintf(what, sizeof(what), "%s: early recv moved next to its F", kn);
		expect_bad(s, what, "out of order", "RECV_GRAD");
	} else {
		CHECK(kind == QE_SCHED_INTERLEAVED, "%s P=2 M=4: expected an early RECV_ACT on rank 1", kn);
	}
	qe_sched_free(s);

	/* 7. malformed actions. */
	s = copy(base);
	i = find(s, 1, QE_ACT_SEND_GRAD, 0);
	s->ranks[1].actions[i].peer = 1;
	snprintf(what, sizeof(what), "%s: send to itself", kn);
	expect_bad(s, what, "rank 1 action", "to its own rank");
	qe_sched_free(s);

	s = copy(base);
	i = find(s, 0, QE_ACT_F, 0);
	s->ranks[0].actions[i].stage = 1; /* stage 1 lives on rank 1 */
	snprintf(what, sizeof(what), "%s: F of another rank's stage", kn);
	expect_bad(s, what, "lives on rank 1", NULL);
	qe_sched_free(s);

	s = copy(base);
	i = find(s, 0, QE_ACT_DI, 0);
	s->ranks[0].actions[i].mb = 4;
	snprintf(what, sizeof(what), "%s: mb out of range", kn);
	expect_bad(s, what, "microbatch out of range", NULL);
	qe_sched_free(s);

	s = copy(base);
	i = find(s, 0, QE_ACT_DI, 0);
	s->ranks[0].actions[i].kind = QE_ACT_B;
	snprintf(what, sizeof(what), "%s: B in split schedule", kn);
	expect_bad(s, what, "full backward B in a split", NULL);
	qe_sched_free(s);

	/* 8. DI before its gradient arrives: move a RECV_GRAD after its DI. */
	s = copy(base);
	i = find(s, 0, QE_ACT_RECV_GRAD, 0);
	move(s, 0, i, i + 1);
	snprintf(what, sizeof(what), "%s: RECV_GRAD after its DI", kn);
	expect_bad(s, what, "no RECV_GRAD", "DI(stage");
	qe_sched_free(s);

	/* 9. full backward: a dropped B. */
	qe_sched *full = build(kind, 2, 4, QE_BACKWARD_FULL);
	if (full) {
		s = copy(full);
		i = find(s, 0, QE_ACT_B, 0);
		qe_sched_action b = s->ranks[0].actions[i];
		/* drop the B and the message it sends, so only completeness can notice */
		CHECK_OK(qe_sched_remove(s, 0, i));
		if (i < s->ranks[0].n && s->ranks[0].actions[i].kind == QE_ACT_SEND_GRAD)
			CHECK_OK(qe_sched_remove(s, 0, i));
		snprintf(what, sizeof(what), "%s: full, drop B(stage %d, mb %d)", kn, b.stage, b.mb);
		expect_bad(s, what, "B(stage", NULL);
		qe_sched_free(s);

		s = copy(full);
		i = find(s, 1, QE_ACT_B, 0);
		s->ranks[1].actions[i].kind = QE_ACT_DI;
		snprintf(what, sizeof(what), "%s: DI in a full schedule", kn);
		expect_bad(s, what, "split backward action in a full", NULL);
		qe_sched_free(s);
		qe_sched_free(full);
	}
	qe_sched_free(base);
}

/*
 * The accumulating gradient arena sums a chunk's dW in the order they run, so
 * the validator insists on ascending microbatch order per chunk: DW(mb 1)
 * moved after DW(mb 2) of the same stage (still after its DI) is refused,
 * naming both.  Every generated schedule passes (build() validates).
 */
static void dw_order(qe_sched_kind kind)
{
	const char *kn = qe_sched_kind_name(kind);
	char what[128], need[96];
	qe_sched *s = build(kind, 2, 4, QE_BACKWARD_SPLIT);
	if (!s)
		return;
	int r = 1, i1 = -1, i2 = -1, stage = -1;
	for (int i = 0; i < s->ranks[r].n && i2 < 0; i++) {
		const qe_sched_action *a = &s->ranks[r].actions[i];
		if (a->kind == QE_ACT_DW && a->mb == 1 && stage < 0) {
			stage = a->stage;
			i1 = i;
		}
		if (stage >= 0 && a->kind == QE_ACT_DW && a->stage == stage && a->mb == 2)
			i2 = i;
	}
	CHECK(i1 >= 0 && i2 > i1, "%s: DW mb 1 / mb 2 of one stage on rank 1 not found", kn);
	if (i1 >= 0 && i2 > i1) {
		move(s, r, i1, i2); /* DW(mb 1) right after DW(mb 2) */
		snprintf(what, sizeof(what), "%s: DW of mb 1 after DW of mb 2 (stage %d)", kn, stage);
		snprintf(need, sizeof(need), "dW of mb 1 after dW of mb 2 (action %d) of the same chunk", i2 - 1);
		expect_bad(s, what, need, "ascending microbatch order");
	}
	qe_sched_free(s);
	/* the generators: every P, M and backward mode they are used with */
	for (int P = 1; P <= 4; P *= 2)
		for (int M = P; M <= 16; M += P)
			for (int bw = 0; bw < 2; bw++) {
				qe_sched *g = build(kind, P, M, bw ? QE_BACKWARD_FULL : QE_BACKWARD_SPLIT);
				qe_sched_free(g);
			}
}

/* Every single deletion and every single duplication must be caught. */
static void exhaustive(qe_sched_kind kind, int P, int M, qe_sched_backward bw)
{
	qe_sched *base = build(kind, P, M, bw);
	if (!base)
		return;
	int tried = 0, missed = 0;
	for (int r = 0; r < P; r++)
		for (int i = 0; i < base->ranks[r].n; i++) {
			for (int dup = 0; dup < 2; dup++) {
				qe_sched *s = copy(base);
				if (!s)
					continue;
				if (dup)
					CHECK_OK(qe_sched_insert(s, r, s->ranks[r].n, s->ranks[r].actions[i]));
				else
					CHECK_OK(qe_sched_remove(s, r, i));
				int rc = qe_sched_validate(s);
				tried++;
				if (rc != QE_ESCHEDULE) {
					char tok[64];
					qe_sched_action_token(&base->ranks[r].actions[i], tok, sizeof(tok));
					CHECK(0, "%s P=%d M=%d: %s rank %d action %d (%s) not rejected (%s)",
					      qe_sched_kind_name(kind), P, M, dup ? "duplicating" : "deleting", r, i, tok,
					      qe_errname(rc));
					missed++;
				}
				qe_sched_free(s);
			}
		}
	printf("%s P=%d M=%d %s: %d single deletions/duplications, %d missed\n", qe_sched_kind_name(kind), P, M,
	       qe_sched_backward_name(bw), tried, missed);
	qe_sched_free(base);
}

/* A hand-made GPipe schedule (all F, then all B) through the public list API. */
static void hand_made(void)
{
	qe_sched *s = NULL;
	CHECK_OK(qe_sched_create(QE_PLACE_INTERLEAVED, 2, 1, 3, QE_BACKWARD_FULL, &s));
	if (!s)
		return;
	for (int r = 0; r < 2; r++) {
		for (int m = 0; m < 3; m++)
			CHECK_OK(qe_sched_append(s, r, (qe_sched_action){ QE_ACT_F, 0, r, m, -1 }));
		for (int m = 0; m < 3; m++)
			CHECK_OK(qe_sched_append(s, r, (qe_sched_action){ QE_ACT_B, 0, r, m, -1 }));
	}
	expect_bad(s, "gpipe without messages", "no RECV_GRAD(stage 1, mb 0) from rank 1", "rank 0 action 3");
	CHECK_OK(qe_sched_add_comm(s));
	CHECK_OK(qe_sched_validate(s));
	CHECK(qe_sched_add_comm(s) == QE_EINVAL, "adding messages twice must fail");
	CHECK(qe_sched_remove(s, 0, s->ranks[0].n) == QE_EINVAL, "remove past the end must fail");
	CHECK(qe_sched_insert(s, 2, 0, s->ranks[0].actions[0]) == QE_EINVAL, "insert into rank 2 of 2 must fail");
	qe_sched_free(s);

	/* Each rank must use its own chunk/stage pairs under the V placement too. */
	CHECK(qe_sched_create(QE_PLACE_VSHAPE, 2, 3, 4, QE_BACKWARD_SPLIT, &s) == QE_EINVAL && !s,
	      "V placement with 3 chunks must be refused");
}

int main(void)
{
	corruptions(QE_SCHED_INTERLEAVED);
	corruptions(QE_SCHED_ZBV);
	dw_order(QE_SCHED_INTERLEAVED);
	dw_order(QE_SCHED_ZBV);
	exhaustive(QE_SCHED_INTERLEAVED, 2, 4, QE_BACKWARD_SPLIT);
	exhaustive(QE_SCHED_ZBV, 2, 4, QE_BACKWARD_SPLIT);
	exhaustive(QE_SCHED_ZBV, 4, 8, QE_BACKWARD_SPLIT);
	exhaustive(QE_SCHED_INTERLEAVED, 4, 8, QE_BACKWARD_FULL);
	exhaustive(QE_SCHED_ZBV, 2, 3, QE_BACKWARD_FULL);
	hand_made();
	return qe_test_done("sched_test_sched_validate");
}
