/*
 * action.c - the names of the stage-action kinds (from QE_ACTION_KINDS, their
 * one table) and the delayed-dW rule
 * (see action.h: one definition shared by the schedule statistics, the
 * executor and the tape pool).
 */
#include "runtime/core/action.h"

#define NAME(k, name, listing, label, what) name,
#define LISTING(k, name, listing, label, what) listing,
#define LABEL(k, name, listing, label, what) label,
static const char *const names[QE_ACT_NKINDS] = { QE_ACTION_KINDS(NAME) };
static const char *const listings[QE_ACT_NKINDS] = { QE_ACTION_KINDS(LISTING) };
static const char *const labels[QE_ACT_NKINDS] = { QE_ACTION_KINDS(LABEL) };
#undef NAME
#undef LISTING
#undef LABEL

const char *qe_action_name(qe_action_kind k)
{
	return (int)k >= 0 && k < QE_ACT_NKINDS ? names[k] : "-";
}

const char *qe_action_listing(qe_action_kind k)
{
	return (int)k >= 0 && k < QE_ACT_NKINDS ? listings[k] : "?";
}

const char *qe_action_label(qe_action_kind k)
{
	return (int)k >= 0 && k < QE_ACT_NKINDS ? labels[k] : "?";
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
