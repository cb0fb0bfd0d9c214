/*
 * tier_flags.c - parsing the checkpoint tier flags of train and resume
 * (tier_flags.h): replicas, the persistent tier and retention per tier.
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

/* "--flag VALUE" or "--flag=VALUE" at argv[i]: 1 and *val (NULL when missing), *used slots; else 0. */
static int flag_value(int argc, char **argv, int i, const char *flag, const char **val, int *used)
{
	size_t n = strlen(flag);
	if (strncmp(argv[i], flag, n) || (argv[i][n] && argv[i][n] != '='))
		return 0;
	if (argv[i][n] == '=') {
		*val = argv[i] + n + 1;
		*used = 1;
	} else {
		*val = i + 1 < argc ? argv[i + 1] : NULL;
		*used = i + 1 < argc ? 2 : 1;
	}
	return 1;
}

/* A count flag's value into *dst: 0 or 2 after a usage error. */
static int count_flag(const char *cmd, const char *flag, const char *v, long lo, long hi, int64_t *dst)
{
	long n = lo - 1;
	if (!v || cli_parse_long(cmd, flag, v, &n))
		n = lo - 1;
	if (n < lo || n > hi) {
		fprintf(stderr, "qeffect %s: %s needs a count in %ld..%ld, got '%s'\n", cmd, flag, lo, hi, v ? v : "");
		return 2;
	}
	*dst = n;
	return 0;
}

enum { T_KEEP, T_PERSIST_EVERY, T_PERSIST_KEEP, T_REMOTE, T_ENDPOINT };
static const struct {
	const char *flag;
	int what;       /* T_* */
	long lo, hi;
	int text;       /* a text value (URL), not a count */
	int train_only; /* resume takes it through resume_remote.c */
} tier_flags[] = {
	{ "--ckpt-keep", T_KEEP, 1, 1000000, 0, 0 },
	{ "--ckpt-persist-every", T_PERSIST_EVERY, 1, 1L << 40, 0, 0 },
	{ "--ckpt-persist-keep", T_PERSIST_KEEP, 1, 1000000, 0, 0 },
	{ "--remote", T_REMOTE, 0, 0, 1, 1 },
	{ "--endpoint", T_ENDPOINT, 0, 0, 1, 1 },
};

/* A text flag's value into its setting: 0 or 2 after a usage error. */
static int text_flag(const char *cmd, const char *flag, int what, const char *v)
{
	cli_storage *s = cli_storage_get();
	if (!v || !v[0]) {
		fprintf(stderr, "qeffect %s: %s needs a value\n", cmd, flag);
		return 2;
	}
	if (what == T_REMOTE)
		return cli_storage_text(cmd, flag, v, s->remote, sizeof(s->remote));
	return cli_storage_text(cmd, flag, v, s->ckpt.remote_endpoint, sizeof(s->ckpt.remote_endpoint));
}

int cli_tier_flags_extract(const char *cmd, int *argc, char **argv)
{
	cli_storage *s = cli_storage_get();
	int out = 1;
	for (int i = 1; i < *argc;) {
		const char *v = NULL;
		int used = 0;
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		int found = 0;
		for (size_t k = 0; k < sizeof(tier_flags) / sizeof(tier_flags[0]) && !found; k++) {
			if ((tier_flags[k].train_only && strcmp(cmd, "train")) ||
			    !flag_value(*argc, argv, i, tier_flags[k].flag, &v, &used))
				continue;
			found = 1;
			int64_t n = 0;
			if (tier_flags[k].text) {
				if (text_flag(cmd, tier_flags[k].flag, tier_flags[k].what, v))
					return 2;
			} else if (count_flag(cmd, tier_flags[k].flag, v, tier_flags[k].lo, tier_flags[k].hi, &n)) {
				return 2;
			} else if (tier_flags[k].what == T_KEEP) {
				s->keep = (int)n;
			} else if (tier_flags[k].what == T_PERSIST_EVERY) {
				s->persist_every = n;
			} else {
				s->persist_keep = (int)n;
			}
			i += used;
		}
		if (found)
			continue;
		if (!flag_value(*argc, argv, i, "--ckpt-replicas", &v, &used)) {
			argv[out++] = argv[i++];
			continue;
		}
		long n = -1;
		if (!v || cli_parse_long(cmd, "--ckpt-replicas", v, &n))
			n = -1;
		if (n < 0 || n > 8) {
			fprintf(stderr, "qeffect %s: --ckpt-replicas needs a count of copies in 0..8, got '%s'\n", cmd,
				v ? v : "");
			return 2;
		}
		s->ckpt.replicas = (int)n;
		i += used;
	}
	*argc = out;
	argv[out] = NULL;
	cli_storage_commit();
	return 0;
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
