/*
 * resume_remote.c - the --remote part of `qeffect resume`: a pull into the
 * run directory before the ordinary resume reads it.  Kept apart from
 * cmd_resume.c so the resume command stays about resuming; it calls
 * cli_resume_remote_prepare() first thing.
 */
#include "cli/resume_remote.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/query/ckpt_job.h"
#include "ckpt/remote/ckpt_remote.h"
#include "ckpt/session/rundir.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "cli/storage_options.h"
#include "runtime/core/status.h"

void cli_resume_remote_help(FILE *f)
{
	fprintf(f, "\nresuming from object storage (see 'qeffect pull --help'):\n"
		   "  --remote URL           s3://BUCKET/PREFIX: pull the checkpoint (--from STEP, default the\n"
		   "                         latest there) into --run-dir first, creating it when missing; with\n"
		   "                         --ckpt-persist-every, where to push (no pull when --run-dir holds the run)\n"
		   "  --endpoint URL         the S3 server (default AWS_ENDPOINT_URL, else AWS); without --remote,\n"
		   "                         where the restore fetches what no store or replica holds from the\n"
		   "                         checkpoint's pushed copy (the catalog records its URL)\n"
		   "  --remote-run-id ID     which run under PREFIX (needed when there are several)\n");
}

int cli_resume_remote_prepare(const cli_train_args *a)
{
	/* The ranks use --remote and --endpoint too (the parse put them in the storage settings):
	 * --ckpt-persist-every pushes to --remote, and a restore fetches what no store holds from the
	 * checkpoint's pushed copy through --endpoint (ckpt_persist.h, ckpt_restore_s3.c). */
	const cli_storage *s = cli_storage_get();
	const char *url = s->given & CLI_S_REMOTE ? s->remote : NULL;
	const char *endpoint = s->given & CLI_S_ENDPOINT ? s->ckpt.remote_endpoint : NULL;
	const char *run_id = a->remote_run_id;
	const char *run_dir = a->given & CLI_F_RUNDIR ? a->cfg.run_dir : NULL;
	int persist = (s->given & CLI_S_PERSIST_EVERY) != 0;
	if (!url && run_id) {
		fprintf(stderr, "qeffect resume: --remote-run-id goes with --remote\n");
		return 2;
	}
	if (!url)
		return 0;
	if (!run_dir || !run_dir[0]) {
		fprintf(stderr, "qeffect resume: --remote needs --run-dir DIR (where the checkpoint is pulled to)\n");
		return 2;
	}
	long step = a->from_step;
	/* With the persistent tier, --remote names where to push: a run that is here needs no pull (a
	 * tensor no store holds is fetched from its pushed copy by the restore itself). */
	char cat_path[4200];
	if (persist && !ckpt_rundir_catalog(run_dir, cat_path, sizeof(cat_path)) && access(cat_path, F_OK) == 0)
		return 0;
	store_remote_opts ro = { 0 };
	ro.retries = -1;
	ro.endpoint = endpoint;
	/* Under an external launcher only rank 0 pulls: it is the rank with the catalog, and
	 * restore sends the pulled chunks to the ranks that load them. */
	int rank;
	if (cli_launched(&rank) && rank != 0)
		return 0;
	ckpt_pull_result r;
	ckpt_lock *lock = NULL;
	int rc = cli_run_lock(run_dir, "resume --remote (pull)", 1, &lock);
	if (rc)
		return cli_report("resume", rc, run_dir);
	/* a job of one: the chunks land in this host's stores/rank-0 (ckpt/query/ckpt_job.h) */
	rc = ckpt_job_pull(NULL, run_dir, url, &ro, run_id, step, &r, NULL);
	ckpt_unlock(lock);
	if (rc)
		return cli_report("resume", rc, "pulling the checkpoint failed; nothing was resumed");
	if (!a->quiet) {
		if (r.up_to_date)
			printf("%s step %lld from %s is already in %s\n", r.run_id, (long long)r.step, r.manifest_url, run_dir);
		else
			printf("pulled %s step %lld into %s: %llu chunks (%llu fetched, %llu already here), %.1f ms\n", r.run_id,
			       (long long)r.step, run_dir, (unsigned long long)r.chunks, (unsigned long long)r.chunks_fetched,
			       (unsigned long long)r.chunks_present, r.ms);
		fflush(stdout);
	}
	return 0;
}
