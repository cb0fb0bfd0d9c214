/*
 * cmd_schedule.c - `qeffect schedule`: show the action list every rank would
 * run for a pipeline schedule, after the validator has accepted it.
 *
 * The schedules are generated up front (runtime/sched), so looking at one
 * needs no model and no ranks: this is how one checks what `train` would do,
 * how far ZB-V defers DW, or what the full-backward reference looks like.
 * --json is for scripts and carries every field of every action.
 */
#include "cli/cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/flags.h"
#include "runtime/core/status.h"
#include "runtime/sched/sched.h"

static const char schedule_usage[] =
	"usage: qeffect schedule --pp P --micro M --schedule interleaved|zbv\n"
	"                        [--chunks V] [--backward split|full] [--stats] [--json]\n"
	"                        [--compute-only]\n"
	"\n"
	"Print each pipeline rank's action list for one optimizer step, after checking\n"
	"it (dependencies, matching sends and recvs, no deadlock).\n"
	"\n"
	"  --pp P            pipeline ranks (>= 1)\n"
	"  --micro M         microbatches per step (>= 1)\n"
	"  --schedule NAME   interleaved: Megatron interleaved 1F1B, chunk c of rank r is\n"
	"                    stage c*P + r; M must be a multiple of P when V > 1 (V = 1 is\n"
	"                    plain 1F1B).  zbv: the Zero Bubble V schedule, rank r holds\n"
	"                    stages r and 2P-1-r (the loss is on rank 0); needs V = 2.\n"
	"  --chunks V        model chunks (virtual stages) per rank (default 2)\n"
	"  --backward MODE   split: DI and DW as separate actions (default); full: one B\n"
	"                    at each DI position, no DW (the reference of the schedule)\n"
	"  --stats           per-rank counts, peak live tapes, deferred DW, and a\n"
	"                    unit-cost bubble estimate (F, DI, DW = 1, B = 2)\n"
	"  --json            one JSON object: config, placement, every action with\n"
	"                    kind, chunk, stage, mb, peer, token (and stats with --stats)\n"
	"  --compute-only    leave sends and recvs out of the text listing\n"
	"\n"
	"Exit status: 0 ok, 1 the schedule failed validation, 2 bad usage or an\n"
	"impossible combination (named in the message).\n"
	"Example: qeffect schedule --pp 2 --micro 4 --schedule zbv --stats\n";

typedef struct sched_opts {
	long pp, micro, chunks;
	const char *kind, *backward;
	int json, stats, compute_only;
} sched_opts;

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "qeffect schedule: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nRun 'qeffect schedule --help' for usage.\n");
	return 2;
}

/* The flags, then the checks across them.  Returns 0, 2 (bad usage, printed) or -1 (--help). */
static int parse_args(int argc, char **argv, sched_opts *o)
{
	const cli_flag flags[] = {
		{ "pp", 0, CLI_FLAG_LONG, &o->pp, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "micro", 0, CLI_FLAG_LONG, &o->micro, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "chunks", 0, CLI_FLAG_LONG, &o->chunks, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "schedule", 0, CLI_FLAG_STRING, .dst = &o->kind },
		{ "backward", 0, CLI_FLAG_STRING, .dst = &o->backward },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &o->json },
		{ "stats", 0, CLI_FLAG_BOOL, .dst = &o->stats },
		{ "compute-only", 0, CLI_FLAG_BOOL, .dst = &o->compute_only },
		{ 0 },
	};
	int rc = cli_flags_parse("schedule", flags, argc, argv, NULL);
	if (rc)
		return rc;
	if (o->pp == -1 && o->micro == -1 && !o->kind)
		return usage_error("%s", "--pp, --micro and --schedule are required");
	if (o->pp == -1)
		return usage_error("%s", "--pp is required");
	if (o->micro == -1)
		return usage_error("%s", "--micro is required");
	if (o->pp < 1 || o->pp > 4096)
		return usage_error("%s", "--pp must be between 1 and 4096");
	if (o->micro < 1 || o->micro > 1 << 16)
		return usage_error("%s", "--micro must be between 1 and 65536");
	if (o->chunks < 1 || o->chunks > 64)
		return usage_error("%s", "--chunks must be between 1 and 64");
	if (!o->kind)
		return usage_error("%s", "--schedule is required (interleaved or zbv)");
	return 0;
}

static json_t *stats_json(const qe_sched_rank_stats *x)
{
	json_t *counts = json_object();
	for (int k = 0; k < QE_ACT_NKINDS; k++)
		json_object_set_new(counts, qe_sched_action_name((qe_action_kind)k), json_integer(x->count[k]));
	return json_pack("{s:o, s:i, s:i, s:i, s:I, s:I, s:I, s:f}", "count", counts, "peak_live_tapes",
			 x->peak_live_tapes, "delayed_dw", x->delayed_dw, "max_pending_dw", x->max_pending_dw, "busy",
			 (json_int_t)x->busy, "finish", (json_int_t)x->finish, "makespan", (json_int_t)x->makespan,
			 "bubble", x->bubble);
}

static int print_json(const qe_sched *s, const qe_sched_rank_stats *st)
{
	json_t *root = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:b}", "schedule", qe_sched_kind_name(s->kind),
				 "backward", qe_sched_backward_name(s->backward), "pp", s->P, "micro", s->M, "chunks",
				 s->V, "stages", s->S, "valid", 1);
	json_t *ranks = json_array();
	if (!root || !ranks) {
		json_decref(root);
		json_decref(ranks);
		fprintf(stderr, "qeffect schedule: out of memory building JSON\n");
		return 1;
	}
	for (int r = 0; r < s->P; r++) {
		json_t *stages = json_array(), *acts = json_array();
		for (int c = 0; c < s->V; c++)
			json_array_append_new(stages, json_integer(qe_sched_stage_of(s, r, c)));
		for (int i = 0; i < s->ranks[r].n; i++) {
			const qe_sched_action *a = &s->ranks[r].actions[i];
			char tok[64];
			qe_sched_action_token(a, tok, sizeof(tok));
			json_array_append_new(acts, json_pack("{s:s, s:i, s:i, s:i, s:i, s:s}", "kind",
							      qe_sched_action_name(a->kind), "chunk", a->chunk, "stage",
							      a->stage, "mb", a->mb, "peer", a->peer, "token", tok));
		}
		json_t *rank = json_pack("{s:i, s:o, s:o}", "rank", r, "stages", stages, "actions", acts);
		if (st)
			json_object_set_new(rank, "stats", stats_json(&st[r]));
		json_array_append_new(ranks, rank);
	}
	json_object_set_new(root, "ranks", ranks);
	if (st && s->P > 0)
		json_object_set_new(root, "makespan", json_integer(st[0].makespan));
	int rc = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
	json_decref(root);
	return rc ? 1 : 0;
}

int cli_schedule_main(int argc, char **argv)
{
	sched_opts o = { .pp = -1, .micro = -1, .chunks = 2, .backward = "split" };
	int rc = parse_args(argc, argv, &o);
	if (rc < 0) {
		fputs(schedule_usage, stdout);
		return 0;
	}
	if (rc)
		return rc;

	qe_sched_config cfg = { .P = (int)o.pp, .M = (int)o.micro, .V = (int)o.chunks };
	if (qe_sched_kind_parse(o.kind, &cfg.kind) || qe_sched_backward_parse(o.backward, &cfg.backward))
		return usage_error("%s", qe_last_error());
	qe_sched *s = NULL;
	rc = qe_sched_build(&cfg, &s);
	if (rc == QE_EINVAL)
		return usage_error("%s", qe_last_error());
	if (rc)
		return cli_report("schedule", rc, "building the schedule");

	qe_sched_rank_stats *st = NULL;
	int status = 0;
	rc = qe_sched_validate(s);
	if (rc) {
		status = cli_report("schedule", rc, "the schedule is invalid");
		goto out;
	}
	if (o.stats) {
		st = calloc((size_t)s->P, sizeof(*st));
		rc = st ? qe_sched_stats(s, st) : qe_fail(QE_ENOMEM, "stats of %d ranks", s->P);
		if (rc) {
			status = cli_report("schedule", rc, "computing statistics");
			goto out;
		}
	}
	if (o.json) {
		status = print_json(s, st);
		goto out;
	}
	char *txt = NULL;
	rc = qe_sched_format(s, o.compute_only ? QE_SCHED_FMT_COMPUTE_ONLY : 0, &txt);
	if (rc) {
		status = cli_report("schedule", rc, "formatting");
		goto out;
	}
	fputs(txt, stdout);
	fputs(qe_sched_legend(), stdout);
	free(txt);
	if (st) {
		rc = qe_sched_stats_format(s, st, &txt);
		if (rc) {
			status = cli_report("schedule", rc, "formatting statistics");
			goto out;
		}
		fputs("\n", stdout);
		fputs(txt, stdout);
		fputs("peak_tapes: tapes alive at once (F until DI and DW, or B); delayed_dw: DWs not right after\n"
		      "their DI; pending_dw: most DIs waiting for their DW; bubble: idle share of the makespan\n",
		      stdout);
		free(txt);
	}
out:
	free(st);
	qe_sched_free(s);
	return status;
}
