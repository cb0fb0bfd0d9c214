/*
 * tier_flags.c - the checkpoint tier flags of train and resume
 * (tier_flags.h): replicas, the persistent tier and retention per tier;
 * their help and the checks across them.
 */
#include "cli/tier_flags.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/session/rundir.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "cli/storage_options.h"
#include "runtime/core/status.h"
#include "store/remote.h"

void cli_tier_flags_help(FILE *f)
{
	fprintf(f, "  --ckpt-replicas R      also write every rank's checkpoint chunks into the stores of R ranks\n"
		   "                         on R other hosts before the commit, which records every copy; a\n"
		   "                         restore on a host that lost its disk reads them over the comm\n"
		   "                         (default 0; needs ranks on at least R+1 hosts)\n"
		   "  --ckpt-keep N          keep the N latest local checkpoints: at each checkpoint boundary older\n"
		   "                         ones are dropped (catalog rows first, then every rank's unreferenced\n"
		   "                         chunks older than QE_CKPT_KEEP_GRACE_S, default 600 s); one being\n"
		   "                         pushed, or due next, is kept; with --ckpt-async the previous write\n"
		   "                         is waited for first, so skip mode skips nothing (default: keep all)\n"
		   "  --ckpt-persist-every K2\n"
		   "                         also push every K2-th step's committed checkpoint to --remote in the\n"
		   "                         background (K2 a multiple of --ckpt-every): every rank uploads its own\n"
		   "                         chunks, rank 0 writes the manifest last; training does not wait.  A\n"
		   "                         failed push is reported and tried again at the next checkpoint (or\n"
		   "                         left for 'qeffect push'); the end of training waits for a running one\n"
		   "  --ckpt-persist-keep N2 keep the N2 latest pushed checkpoints of the run on the remote (older\n"
		   "                         manifests deleted, then chunks no manifest lists; default: keep all)\n"
		   "  --ckpt-memory DIR      the memory tier: replica targets also keep the copies of the latest\n"
		   "                         committed checkpoint in DIR/RUN_ID/rank-R, DIR a tmpfs or ramfs folder\n"
		   "                         (/dev/shm/qeffect); ranks restarted while their hosts live restore from\n"
		   "                         there over the comm without reading a disk.  Costs each host R copies\n"
		   "                         of the shards it backs, up to twice that between a commit and the drop\n"
		   "                         of the replaced copy; lost with the host.  train: needs --ckpt-replicas;\n"
		   "                         resume: reads it (and keeps filling it with --ckpt-replicas)\n");
}

void cli_tier_remote_help(FILE *f)
{
	fprintf(f, "  --remote URL           s3://BUCKET/PREFIX, where --ckpt-persist-every pushes\n"
		   "  --endpoint URL         the S3 server (default AWS_ENDPOINT_URL, else AWS); also where a\n"
		   "                         restore fetches what no store or replica holds, when the checkpoint\n"
		   "                         was pushed\n");
}

int cli_tier_flags_check(const char *cmd, int64_t ckpt_every)
{
	cli_tiers t;
	cli_tiers_get(&t);
	if (t.memory) {
		if (strcmp(cmd, "train") == 0 && cli_storage_get()->ckpt.replicas < 1) {
			fprintf(stderr, "qeffect %s: --ckpt-memory keeps replica copies in memory: it needs --ckpt-replicas R "
				"(R >= 1)\n", cmd);
			return 2;
		}
		/* Under an external launcher (torchrun, srun, mpirun) every host checks its own folder when the
		 * ranks first agree (ckpt_replica.c), so that rank 0 names the host at fault and no rank waits
		 * out the rendezvous for one that refused alone; here only a local launch checks. */
		if (!cli_launched(NULL) && ckpt_memory_fs_check(t.memory)) {
			fprintf(stderr, "qeffect %s: --ckpt-memory: %s\n", cmd, qe_last_error());
			return 2;
		}
	}
	if (t.persist_keep && !t.persist_every) {
		fprintf(stderr, "qeffect %s: --ckpt-persist-keep goes with --ckpt-persist-every\n", cmd);
		return 2;
	}
	if ((t.keep || t.persist_every) && ckpt_every <= 0) {
		fprintf(stderr, "qeffect %s: --%s needs --ckpt-every K (the local checkpoints it builds on)\n", cmd,
			t.persist_every ? "ckpt-persist-every" : "ckpt-keep");
		return 2;
	}
	if (!t.persist_every)
		return 0;
	if (t.persist_every % ckpt_every) {
		fprintf(stderr,
			"qeffect %s: --ckpt-persist-every %lld is not a multiple of --ckpt-every %lld: only checkpoints that "
			"are taken can be pushed (make --ckpt-persist-every a multiple of --ckpt-every)\n",
			cmd, (long long)t.persist_every, (long long)ckpt_every);
		return 2;
	}
	if (!t.remote) {
		fprintf(stderr, "qeffect %s: --ckpt-persist-every needs --remote s3://BUCKET/PREFIX (where to push)\n", cmd);
		return 2;
	}
	char bucket[128], prefix[1024];
	if (store_remote_parse_url(t.remote, bucket, sizeof(bucket), prefix, sizeof(prefix))) {
		fprintf(stderr, "qeffect %s: --remote: %s\n", cmd, qe_last_error());
		return 2;
	}
	return 0;
}

void cli_tiers_get(cli_tiers *t)
{
	const cli_storage *s = cli_storage_get();
	memset(t, 0, sizeof(*t));
	t->keep = s->keep;
	t->persist_every = s->persist_every;
	t->persist_keep = s->persist_keep;
	t->remote = s->remote[0] ? s->remote : NULL;
	t->endpoint = s->ckpt.remote_endpoint[0] ? s->ckpt.remote_endpoint : NULL;
	t->memory = ckpt_memory_dir();
	t->keep_grace_s = s->keep_grace_s;
	t->persist_grace_s = s->persist_grace_s;
}
