/*
 * cmd_list.c - `qeffect list --run-dir DIR`: one row per checkpoint of a run,
 * every status, so a user sees what a resume would load (the latest committed)
 * and what gc would find (pending and aborted attempts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ckpt/query/ckpt_query.h"
#include "cli/run_args.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect list --run-dir DIR [--json]\n\n"
		   "List the checkpoints of a run, oldest first: step, e_W, status (committed, pending,\n"
		   "aborted), when it was created and committed, its bytes, how many of them are runtime\n"
		   "state (everything but parameters and AdamW moments), topology and schedule.\n"
		   "--json prints the same as one JSON object for scripts.\n"
		   "Exit status: 0 listed (also when there are none), 1 the run cannot be read, 2 bad usage.\n");
}

static const char *nz(const char *s)
{
	return s ? s : "";
}

int cli_list_main(int argc, char **argv)
{
	const char *dir;
	int json;
	int rc = cli_run_args_parse("list", argc, argv, NULL, &dir, &json);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	ckpt_run *r;
	if ((rc = ckpt_run_open(dir, 0, &r)))
		return cli_report("list", rc, dir);
	cat_ckpt_rows l = { 0 };
	if ((rc = ckpt_q_list(r, &l))) {
		ckpt_run_close(r);
		return cli_report("list", rc, dir);
	}
	size_t ncommitted = 0;
	for (size_t i = 0; i < l.n; i++)
		ncommitted += l.rows[i].status == CAT_COMMITTED;
	if (json) {
		json_t *o = json_object(), *a = json_array();
		for (size_t i = 0; i < l.n; i++) {
			const cat_ckpt *k = &l.rows[i];
			json_array_append_new(
				a, json_pack("{s:I,s:I,s:I,s:s,s:s,s:s,s:I,s:I,s:s,s:s,s:s,s:s}", "id", (json_int_t)k->id,
					     "step", (json_int_t)k->step, "e_W", (json_int_t)k->e_w, "status",
					     cat_status_name(k->status), "created", nz(k->created), "committed_at",
					     nz(k->committed_at), "bytes", (json_int_t)k->bytes, "runtime_state_bytes",
					     (json_int_t)k->runtime_state_bytes, "topology", nz(k->topology), "schedule",
					     nz(k->schedule), "recipe", nz(k->recipe), "note", nz(k->note)));
			ckpt_redundancy rd;
			if (!ckpt_q_redundancy(r, k->id, &rd)) {
				json_t *row = json_array_get(a, json_array_size(a) - 1);
				json_object_set_new(row, "copies", json_integer(rd.copies));
				json_object_set_new(row, "hosts", json_integer(rd.hosts));
				json_object_set_new(row, "memory_copies", json_integer(rd.memory_copies));
				json_object_set_new(row, "memory_hosts", json_integer(rd.memory_hosts));
			}
		}
		json_object_set_new(o, "run_dir", json_string(dir));
		json_object_set_new(o, "run_id", json_string(ckpt_run_id(r)));
		json_object_set_new(o, "committed", json_integer((json_int_t)ncommitted));
		json_object_set_new(o, "checkpoints", a);
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		printf("run %s (%s): %zu checkpoints, %zu committed\n", ckpt_run_id(r), dir, l.n, ncommitted);
		if (l.n)
			printf("%6s %6s  %-9s  %-24s  %-24s  %12s  %10s  %-18s  %-18s  %s\n", "step", "e_W", "status", "created",
			       "committed", "bytes", "runtime", "copies", "topology", "schedule");
		for (size_t i = 0; i < l.n; i++) {
			const cat_ckpt *k = &l.rows[i];
			/* copies: the fewest stores holding any one tensor, on how many hosts (--ckpt-replicas),
			 * and in memory (--ckpt-memory) */
			ckpt_redundancy rd;
			char cp[64] = "-";
			if (!ckpt_q_redundancy(r, k->id, &rd) && rd.copies)
				snprintf(cp, sizeof(cp), "%d on %d host%s%s", rd.copies, rd.hosts, rd.hosts == 1 ? "" : "s",
					 rd.memory_copies ? " +mem" : "");
			printf("%6lld %6lld  %-9s  %-24s  %-24s  %12llu  %10llu  %-18s  %-18s  %s", (long long)k->step,
			       (long long)k->e_w, cat_status_name(k->status), k->created,
			       k->committed_at[0] ? k->committed_at : "-", (unsigned long long)k->bytes,
			       (unsigned long long)k->runtime_state_bytes, cp, k->topology[0] ? k->topology : "-",
			       k->schedule[0] ? k->schedule : "-");
			if (k->note[0])
				printf("  (%s)", k->note);
			printf("\n");
		}
	}
	cat_ckpt_rows_free(&l);
	ckpt_run_close(r);
	return 0;
}
