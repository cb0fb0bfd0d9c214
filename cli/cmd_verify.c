/*
 * cmd_verify.c - `qeffect verify --run-dir DIR`: re-hash every chunk of every
 * committed checkpoint and check that catalog and store agree, naming each
 * damaged tensor; the exit status says whether the run's checkpoints can be
 * trusted.  The work is ckpt_q_verify (ckpt/query/ckpt_query_verify.c) on one host, or
 * ckpt_job_verify (ckpt/query/ckpt_job_verify.c) as a job over every host's stores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ckpt/query/ckpt_job.h"
#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "cli/run_args.h"
#include "cli/store_job.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect verify --run-dir DIR [--nproc N] [--json]\n\n"
		   "Re-hash every chunk of every committed checkpoint of the run and check that the catalog\n"
		   "and the stores agree: every chunk a tensor lists is stored, with the listed size and bytes\n"
		   "that match its hash, and each tensor's chunks add up to its size.  Each fault names the\n"
		   "checkpoint step, stage, tensor, chunk index and hash, and the rank and host of the store\n"
		   "that should hold it.  Chunks no checkpoint lists (orphans, e.g. of a crashed save) are\n"
		   "reported as information: gc collects them.  Pending and aborted checkpoints are not\n"
		   "checked (they are never loaded).\n\n"
		   "Alone, verify sees the stores on this host's disk only.  As a job it checks every\n"
		   "host's: start it like train, with --nproc N or one process per host under a launcher\n"
		   "(torchrun, srun or mpirun: README, \"Launchers\"), the same command line everywhere.\n"
		   "Rank 0 (the host with the catalog) tells each rank which chunks to re-hash in the stores\n"
		   "on its disk; the ranks work in parallel and rank 0 prints the one report.\n\n"
		   "  --run-dir DIR   the run (the same path on every host)\n"
		   "  --nproc N       fork N local ranks (as train --nproc)\n"
		   "  --json          the report as one JSON object\n"
		   "Exit status: 0 no fault, 1 any fault or the run cannot be read (a rank that died or cannot\n"
		   "reach its store is named with its host), 2 bad usage.\n");
}

typedef struct verify_args {
	const char *dir;
	int json;
} verify_args;

static json_t *store_json(const ckpt_job_store *s)
{
	return json_pack("{s:s,s:i,s:i,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "store_id", s->store_id, "owner", s->owner,
			 "checked_by", s->rank, "host", s->host, "path", s->path, "chunks", (json_int_t)s->chunks,
			 "bytes", (json_int_t)s->bytes, "store_chunks", (json_int_t)s->store_chunks, "orphans",
			 (json_int_t)s->orphans, "orphan_bytes", (json_int_t)s->orphan_bytes);
}

/* The report; job NULL for the one-host form. */
static void print_report(const char *dir, const char *run_id, const ckpt_verify_report *v, int no_store,
			 const ckpt_job_report *job, int json)
{
	if (json) {
		json_t *o = json_object(), *fa = json_array();
		for (size_t i = 0; i < v->n_faults; i++) {
			const ckpt_fault *f = &v->faults[i];
			json_array_append_new(fa, json_pack("{s:s,s:I,s:I,s:i,s:s,s:I,s:s,s:s,s:i,s:s,s:i}", "kind",
							    ckpt_fault_name(f->kind), "step", (json_int_t)f->step,
							    "checkpoint_id", (json_int_t)f->ckpt_id, "stage", f->stage,
							    "tensor", f->name, "chunk", (json_int_t)f->chunk, "hash",
							    f->hash, "why", f->why, "rank", f->rank, "host", f->host,
							    "checked_by", f->checked_by));
		}
		json_object_set_new(o, "run_dir", json_string(dir));
		json_object_set_new(o, "run_id", json_string(run_id));
		json_object_set_new(o, "ok", json_boolean(v->n_faults == 0));
		json_object_set_new(o, "store_present", json_boolean(!no_store));
		json_object_set_new(o, "checkpoints", json_integer((json_int_t)v->checkpoints));
		json_object_set_new(o, "skipped", json_integer((json_int_t)v->skipped));
		json_object_set_new(o, "memory_unchecked", json_integer((json_int_t)v->memory_unchecked));
		json_object_set_new(o, "tensors", json_integer((json_int_t)v->tensors));
		json_object_set_new(o, "bad_tensors", json_integer((json_int_t)v->bad_tensors));
		json_object_set_new(o, "chunk_refs", json_integer((json_int_t)v->chunk_refs));
		json_object_set_new(o, "chunks", json_integer((json_int_t)v->chunks));
		json_object_set_new(o, "bytes", json_integer((json_int_t)v->bytes));
		json_object_set_new(o, "ref_bytes", json_integer((json_int_t)v->ref_bytes));
		json_object_set_new(o, "store_chunks", json_integer((json_int_t)v->store_chunks));
		json_object_set_new(o, "orphans", json_integer((json_int_t)v->orphans));
		json_object_set_new(o, "orphan_bytes", json_integer((json_int_t)v->orphan_bytes));
		json_object_set_new(o, "faults", fa);
		if (job) {
			json_t *sa = json_array();
			for (size_t i = 0; i < job->n; i++)
				json_array_append_new(sa, store_json(&job->stores[i]));
			json_object_set_new(o, "ranks", json_integer(job->world));
			json_object_set_new(o, "stores", sa);
		}
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
		return;
	}
	for (size_t i = 0; i < v->n_faults; i++) {
		const ckpt_fault *f = &v->faults[i];
		char at[160] = "";
		if (f->host[0])
			snprintf(at, sizeof(at), " [store of rank %d on host '%s'%s]", f->rank, f->host,
				 job && f->checked_by >= 0 ? ", checked there" : "");
		if (f->chunk >= 0)
			printf("BAD step %lld stage %d tensor '%s' chunk %lld %s: %s: %s%s\n", (long long)f->step, f->stage,
			       f->name, (long long)f->chunk, f->hash, ckpt_fault_name(f->kind), f->why, at);
		else
			printf("BAD step %lld stage %d tensor '%s': %s: %s\n", (long long)f->step, f->stage, f->name,
			       ckpt_fault_name(f->kind), f->why);
	}
	if (no_store && v->checkpoints)
		printf("the run has no store folder (%s/store): every chunk is missing\n", dir);
	for (size_t i = 0; job && i < job->n; i++) {
		const ckpt_job_store *s = &job->stores[i];
		if (s->rank < 0)
			printf("store %s of rank %d on host '%s': no rank of this job sees it (start a rank on that host)\n",
			       s->store_id, s->owner, s->host);
		else
			printf("store %s of rank %d on host '%s': checked by rank %d, %llu chunks re-hashed (%llu bytes), "
			       "%llu orphans\n",
			       s->store_id[0] ? s->store_id : "RUN/store", s->owner, s->host, s->rank,
			       (unsigned long long)s->chunks, (unsigned long long)s->bytes, (unsigned long long)s->orphans);
	}
	printf("verified %llu committed checkpoints (%llu pending or aborted not checked): %llu tensors, %llu "
	       "chunk references (%llu bytes), %llu distinct chunks re-hashed (%llu bytes)\n",
	       (unsigned long long)v->checkpoints, (unsigned long long)v->skipped, (unsigned long long)v->tensors,
	       (unsigned long long)v->chunk_refs, (unsigned long long)v->ref_bytes, (unsigned long long)v->chunks,
	       (unsigned long long)v->bytes);
	if (v->memory_unchecked)
		printf("%llu memory-tier copies not checked: name the memory folder with --ckpt-memory DIR to check them\n",
		       (unsigned long long)v->memory_unchecked);
	printf("store%s: %llu chunks, %llu orphans (%llu bytes; information only, gc collects them)\n", job ? "s" : "",
	       (unsigned long long)v->store_chunks, (unsigned long long)v->orphans, (unsigned long long)v->orphan_bytes);
	if (v->n_faults)
		printf("FAULTS: %zu in %llu tensors\n", v->n_faults, (unsigned long long)v->bad_tensors);
	else
		printf("ok: every committed checkpoint reads back intact\n");
}

/* A rank of the job (every rank runs it; rank 0 prints). */
static int verify_job(qe_comm *comm, void *varg)
{
	verify_args *a = varg;
	ckpt_verify_report v;
	ckpt_job_report where;
	int rc = ckpt_job_verify(comm, a->dir, &v, &where);
	if (comm && qe_comm_rank(comm) != 0) {
		if (rc)
			fprintf(stderr, "qeffect verify: %s (%s)\n", qe_last_error(), qe_errname(rc));
		return rc ? 1 : 0;
	}
	if (rc)
		return cli_report("verify", rc, a->dir);
	int nstores = 0;
	for (size_t i = 0; i < where.n; i++)
		nstores += where.stores[i].rank >= 0;
	char run_id[64] = "";
	ckpt_run *r;
	if (!ckpt_run_open(a->dir, 0, &r)) {
		snprintf(run_id, sizeof(run_id), "%s", ckpt_run_id(r));
		ckpt_run_close(r);
	}
	print_report(a->dir, run_id, &v, nstores == 0, &where, a->json);
	int status = v.n_faults ? 1 : 0;
	ckpt_verify_report_free(&v);
	ckpt_job_report_free(&where);
	return status;
}

int cli_verify_main(int argc, char **argv)
{
	verify_args a = { NULL, 0 };
	int nproc = 0;
	const cli_flag extra[] = { cli_store_job_nproc_flag(&nproc), { 0 } };
	int rc = cli_run_args_parse("verify", argc, argv, extra, &a.dir, &a.json);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (cli_store_job_wanted(nproc))
		return cli_store_job_run("verify", nproc, verify_job, &a);
	ckpt_run *r;
	if ((rc = ckpt_run_open(a.dir, CKPT_RUN_STORE, &r)))
		return cli_report("verify", rc, a.dir);
	ckpt_verify_report v;
	if ((rc = ckpt_q_verify(r, &v))) {
		ckpt_run_close(r);
		return cli_report("verify", rc, a.dir);
	}
	print_report(a.dir, ckpt_run_id(r), &v, ckpt_storeset_count(ckpt_run_stores(r)) == 0, NULL, a.json);
	int status = v.n_faults ? 1 : 0;
	ckpt_verify_report_free(&v);
	ckpt_run_close(r);
	return status;
}
