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

/* "--flag VALUE" or "--flag=VALUE" at argv[i]: 1 and *val (and *used: 1 or 2 slots), else 0. */
static int flag_value(int argc, char **argv, int i, const char *flag, const char **val, int *used)
{
	size_t n = strlen(flag);
	if (strncmp(argv[i], flag, n))
		return 0;
	if (argv[i][n] == '=') {
		*val = argv[i] + n + 1;
		*used = 1;
		return 1;
	}
	if (argv[i][n] || i + 1 >= argc)
		return argv[i][n] ? 0 : (*val = NULL, *used = 1, 1);
	*val = argv[i + 1];
	*used = 2;
	return 1;
}

int cli_resume_remote_prepare(int *argc, char **argv)
{
	const char *url = NULL, *endpoint = NULL, *run_id = NULL, *run_dir = NULL, *from = NULL;
	int help = 0, quiet = 0, persist = 0;
	int out = 1;
	for (int i = 1; i < *argc;) {
		const char *v;
		int used = 0;
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if (flag_value(*argc, argv, i, "--remote-run-id", &v, &used) ||
		    flag_value(*argc, argv, i, "--remote", &v, &used) ||
		    flag_value(*argc, argv, i, "--endpoint", &v, &used)) {
			if (!v) {
				fprintf(stderr, "qeffect resume: %s needs a value\n", argv[i]);
				return 2;
			}
			if (strncmp(argv[i], "--remote-run-id", 15) == 0)
				run_id = v;
			else if (strncmp(argv[i], "--remote", 8) == 0)
				url = v;
			else
				endpoint = v;
			i += used;
			continue;
		}
		/* Read, and keep for resume's own parser. */
		if (flag_value(*argc, argv, i, "--run-dir", &v, &used) && v)
			run_dir = v;
		else if (flag_value(*argc, argv, i, "--from", &v, &used) && v)
			from = v;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			help = 1;
		else if (strcmp(argv[i], "--quiet") == 0)
			quiet = 1;
		else if (strncmp(argv[i], "--ckpt-persist-every", 20) == 0)
			persist = 1;
		if (!used)
			used = 1;
		for (int k = 0; k < used && i < *argc; k++)
			argv[out++] = argv[i++];
	}
	*argc = out;
	argv[out] = NULL;
	/* The ranks use them too: --ckpt-persist-every pushes to --remote, and a restore fetches what no
	 * store holds from the checkpoint's pushed copy through --endpoint (ckpt_persist.h, ckpt_restore_s3.c). */
	cli_storage *s = cli_storage_get();
	if ((url && cli_storage_text("resume", "--remote", url, s->remote, sizeof(s->remote))) ||
	    (endpoint && cli_storage_text("resume", "--endpoint", endpoint, s->ckpt.remote_endpoint,
					  sizeof(s->ckpt.remote_endpoint))))
		return 2;
	cli_storage_commit();
	if (help || !url) {
		if (!url && run_id) {
			fprintf(stderr, "qeffect resume: --remote-run-id goes with --remote\n");
			return 2;
		}
		return 0;
	}
	if (!run_dir || !run_dir[0]) {
		fprintf(stderr, "qeffect resume: --remote needs --run-dir DIR (where the checkpoint is pulled to)\n");
		return 2;
	}
	long step = -1;
	if (from && cli_parse_long("resume", "--from", from, &step))
		return 2;
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
	if (!quiet) {
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
