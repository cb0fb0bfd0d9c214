/*
 * action.h - the kinds of stage action, once for every layer: the schedule's
 * per-rank lists (runtime/sched), the stage contracts that bracket each
 * compute action (runtime/contract), and the executor's captured graphs and
 * profile (runtime/exec).  Core holds it because sched and contract are
 * siblings that both need it (DESIGN.md section 2).
 *
 * Also here: the one definition of a *delayed dW* (DESIGN.md section 7), the
 * number the schedule statistics predict, the executor counts per step and
 * the tape pool counts per pool.
 */
#ifndef QE_ACTION_H
#define QE_ACTION_H

#include <stdint.h>

/*
 * Every kind once: X(KIND, name, listing, label, what).  name is how contract
 * and executor messages spell a compute kind ("-" for the others:
 * qe_action_name), listing is the schedule's spelling (qe_sched_action_name,
 * `qeffect schedule`), label the profile's row.  The compute kinds come
 * first and in this order (F, DI, DW index the executor's graphs; the
 * schedule's JSON counts walk 0..QE_ACT_NKINDS-1).
 */
#define QE_ACTION_KINDS(X)                                                                                        \
	X(F, "F", "F", "F", "forward; retains the tape of (stage, mb)")                                           \
	X(DI, "dI", "DI", "dI", "input gradient (critical path)")                                                  \
	X(DW, "dW", "DW", "dW", "weight gradient (may be deferred)")                                               \
	X(B, "B", "B", "B", "full backward = DI + DW, reference only")                                             \
	X(SEND_ACT, "-", "SEND_ACT", "send act", "send F's output of `stage` to `peer`")                           \
	X(RECV_ACT, "-", "RECV_ACT", "recv act", "receive F's output of `stage` from `peer`")                      \
	X(SEND_GRAD, "-", "SEND_GRAD", "send grad", "send the input gradient made by DI/B of `stage` to `peer`")  \
	X(RECV_GRAD, "-", "RECV_GRAD", "recv grad", "receive the input gradient made by DI/B of `stage` from `peer`")

/* QE_ACT_NONE is no action: a stage contract with nothing in flight. */
typedef enum qe_action_kind {
	QE_ACT_NONE = -1,
#define QE_ACTION_ENUM(k, name, listing, label, what) QE_ACT_##k,
	QE_ACTION_KINDS(QE_ACTION_ENUM)
#undef QE_ACTION_ENUM
	QE_ACT_NKINDS
} qe_action_kind;

/* 1 for F, DI, DW and B. */
static inline int qe_action_is_compute(qe_action_kind k)
{
	return k >= QE_ACT_F && k <= QE_ACT_B;
}

/* "F", "dI", "dW", "B" for the compute kinds, "-" for any other: how contract
 * and executor messages spell them.  Static string. */
const char *qe_action_name(qe_action_kind k);
/* The schedule's spelling ("F", "DI", ..., "RECV_GRAD"); "?" outside the kinds.  Static string. */
const char *qe_action_listing(qe_action_kind k);
/* The profile's row label ("F", "dI", ..., "send act"); "?" outside the kinds.  Static string. */
const char *qe_action_label(qe_action_kind k);

/*
 * The delayed-dW rule: a dW is delayed unless the compute action right
 * before it, among the actions one counter sees, was the dI of the same
 * work.  dI immediately followed by its dW, and a full B, are not delayed;
 * this counts exactly the dW that ZB-V defers into bubbles.  What "the same
 * work" is depends on the counter: (stage, mb) for a schedule's rank list,
 * (local chunk, mb) for the executor, (slot, generation) of the tape for a
 * tape pool, which sees consumer commits only.
 *
 * Use: qe_dw_rule_reset() at the start, then qe_dw_rule_note() for every
 * compute action in order; it returns 1 for a delayed dW.
 */
typedef struct qe_dw_rule {
	qe_action_kind prev; /* the previous compute action, QE_ACT_NONE before the first */
	int64_t a, b;        /* the work it named */
} qe_dw_rule;

void qe_dw_rule_reset(qe_dw_rule *r);
int qe_dw_rule_note(qe_dw_rule *r, qe_action_kind k, int64_t a, int64_t b);

#endif
