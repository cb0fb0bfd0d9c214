/*
 * action.c - names of the stage-action kinds and the delayed-dW rule
 * (see action.h: one definition shared by the schedule statistics, the
 * executor and the tape pool).
 */
#include "runtime/core/action.h"

const char *qe_action_name(qe_action_kind k)
{
	switch (k) {
	case QE_ACT_F:
		return "F";
	case QE_ACT_DI:
		return "dI";
	case QE_ACT_DW:
		return "dW";
	case QE_ACT_B:
		return "B";
	default:
		return "-";
	}
}

void qe_dw_rule_reset(qe_dw_rule *r)
{
	r->prev = QE_ACT_NONE;
	r->a = r->b = 0;
}

int qe_dw_rule_note(qe_dw_rule *r, qe_action_kind k, int64_t a, int64_t b)
{
	int delayed = k == QE_ACT_DW && !(r->prev == QE_ACT_DI && r->a == a && r->b == b);
	r->prev = k;
	r->a = a;
	r->b = b;
	return delayed;
}
