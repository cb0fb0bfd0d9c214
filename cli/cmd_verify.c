/*
 * cmd_verify.c - `qeffect verify --run-dir DIR`: re-hash every chunk of every
 * committed checkpoint and check that catalog and store agree, naming each
 * damaged tensor; the exit status says whether the run's checkpoints can be
 * trusted.  The work is ckpt_q_verify (ckpt/ckpt_query_verify.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ckpt/ckpt_query.h"
#include "ckpt/rundir.h"
#include "cli/run_args.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect verify --run-dir DIR [--json]\n\n"
		   "Re-hash every chunk of every committed checkpoint of the run and check that the catalog\n"
		   "and the store agree: every chunk a tensor lists is stored, with the listed size and bytes\n"
		   "that match its hash, and each tensor's chunks add up to its size.  Each fault names the\n"
		   "checkpoint step, stage, tensor, chunk index and hash.  Chunks no checkpoint lists\n"
		   "(orphans, e.g. of a crashed save) are reported as information: gc collects them.\n"
		   "Pending and aborted checkpoints are not checked (they are never loaded).\n"
		   "Exit status: 0 no fault, 1 any fault or the run cannot be read, 2 bad usage.\n");
}

int cli_verify_main(int argc, char **argv)
{
	const char *dir;
	int json;
	int rc = cli_run_args_parse("verify", argc, argv, &dir, &json);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	ckpt_run *r;
	if ((rc = ckpt_run_open(dir, CKPT_RUN_STORE, &r)))
		return cli_report("verify", rc, dir);
	ckpt_verify_report v;
	if ((rc = ckpt_q_verify(r, &v))) {
		ckpt_run_close(r);
		return cli_report("verify", rc, dir);
	}
	int no_store = ckpt_storeset_count(ckpt_run_stores(r)) == 0;
	if (json) {
		json_t *o = json_object(), *fa = json_array();
		for (size_t i = 0; i < v.n_faults; i++) {
			const ckpt_fault *f = &v.faults[i];
			json_array_append_new(fa, json_pack("{s:s,s:I,s:I,s:i,s:s,s:I,s:s,s:s}", "kind",
							    ckpt_fault_name(f->kind), "step", (json_int_t)f->step,
							    "checkpoint_id", (json_int_t)f->ckpt_id, "stage", f->stage,
							    "tensor", f->name, "chunk", (json_int_t)f->chunk, "hash",
							    f->hash, "why", f->why));
		}
		json_object_set_new(o, "run_dir", json_string(dir));
		json_object_set_new(o, "run_id", json_string(ckpt_run_id(r)));
		json_object_set_new(o, "ok", json_boolean(v.n_faults == 0));
		json_object_set_new(o, "store_present", json_boolean(!no_store));
		json_object_set_new(o, "checkpoints", json_integer((json_int_t)v.checkpoints));
		json_object_set_new(o, "skipped", json_integer((json_int_t)v.skipped));
		json_object_set_new(o, "tensors", json_integer((json_int_t)v.tensors));
		json_object_set_new(o, "bad_tensors", json_integer((json_int_t)v.bad_tensors));
		json_object_set_new(o, "chunk_refs", json_integer((json_int_t)v.chunk_refs));
		json_object_set_new(o, "chunks", json_integer((json_int_t)v.chunks));
		json_object_set_new(o, "bytes", json_integer((json_int_t)v.bytes));
		json_object_set_new(o, "ref_bytes", json_integer((json_int_t)v.ref_bytes));
		json_object_set_new(o, "store_chunks", json_integer((json_int_t)v.store_chunks));
		json_object_set_new(o, "orphans", json_integer((json_int_t)v.orphans));
		json_object_set_new(o, "orphan_bytes", json_integer((json_int_t)v.orphan_bytes));
		json_object_set_new(o, "faults", fa);
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		for (size_t i = 0; i < v.n_faults; i++) {
			const ckpt_fault *f = &v.faults[i];
			if (f->chunk >= 0)
				printf("BAD step %lld stage %d tensor '%s' chunk %lld %s: %s: %s\n", (long long)f->step,
				       f->stage, f->name, (long long)f->chunk, f->hash, ckpt_fault_name(f->kind), f->why);
			else
				printf("BAD step %lld stage %d tensor '%s': %s: %s\n", (long long)f->step, f->stage, f->name,
				       ckpt_fault_name(f->kind), f->why);
		}
		if (no_store && v.checkpoints)
			printf("the run has no store folder (%s/store): every chunk is missing\n", dir);
		printf("verified %llu committed checkpoints (%llu pending or aborted not checked): %llu tensors, %llu "
		       "chunk references (%llu bytes), %llu distinct chunks re-hashed (%llu bytes)\n",
		       (unsigned long long)v.checkpoints, (unsigned long long)v.skipped, (unsigned long long)v.tensors,
		       (unsigned long long)v.chunk_refs, (unsigned long long)v.ref_bytes, (unsigned long long)v.chunks,
		       (unsigned long long)v.bytes);
		printf("store: %llu chunks, %llu orphans (%llu bytes; information only, gc collects them)\n",
		       (unsigned long long)v.store_chunks, (unsigned long long)v.orphans,
		       (unsigned long long)v.orphan_bytes);
		if (v.n_faults)
			printf("FAULTS: %zu in %llu tensors\n", v.n_faults, (unsigned long long)v.bad_tensors);
		else
			printf("ok: every committed checkpoint reads back intact\n");
	}
	int status = v.n_faults ? 1 : 0;
	ckpt_verify_report_free(&v);
	ckpt_run_close(r);
	return status;
}
