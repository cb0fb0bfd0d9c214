/*
 * storage_options.c - the storage and tier settings of a cli process, the
 * S3 client's fallbacks, the runtime's knobs and test hooks and the
 * launcher's variables, read from the environment in this one place
 * (storage_options.h).
 */
#include "cli/storage_options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/launch_vars.h"
#include "runtime/core/env.h"
#include "runtime/core/status.h"

static cli_storage settings;

cli_storage *cli_storage_get(void)
{
	return &settings;
}

void cli_storage_commit(void)
{
	ckpt_options_set(&settings.ckpt);
	store_remote_set_defaults(&settings.s3);
	qe_rt_options_set(&settings.rt);
}

const cli_flag cli_storage_flags[] = {
	{ "local-dir", 0, CLI_FLAG_TEXT, settings.ckpt.local_dir, .cap = sizeof(settings.ckpt.local_dir) },
	{ "ckpt-memory", 0, CLI_FLAG_TEXT, settings.ckpt.memory_dir, .cap = sizeof(settings.ckpt.memory_dir) },
	{ "allow-network-fs", 0, CLI_FLAG_BOOL, .dst = &settings.ckpt.allow_network_fs },
	{ 0 },
};

const cli_flag cli_tier_flags[] = {
	{ "ckpt-replicas", 0, CLI_FLAG_INT, &settings.ckpt.replicas, .lo = 0, .hi = 8 },
	{ "ckpt-keep", 0, CLI_FLAG_INT, &settings.keep, .lo = 1, .hi = 1000000 },
	{ "ckpt-persist-every", 0, CLI_FLAG_INT64, &settings.persist_every, .lo = 1, .hi = 1LL << 40,
	  .given = &settings.given, .bit = CLI_S_PERSIST_EVERY },
	{ "ckpt-persist-keep", 0, CLI_FLAG_INT, &settings.persist_keep, .lo = 1, .hi = 1000000 },
	{ "remote", 0, CLI_FLAG_TEXT, settings.remote, .cap = sizeof(settings.remote), .given = &settings.given,
	  .bit = CLI_S_REMOTE },
	{ "endpoint", 0, CLI_FLAG_TEXT, settings.ckpt.remote_endpoint, .cap = sizeof(settings.ckpt.remote_endpoint),
	  .given = &settings.given, .bit = CLI_S_ENDPOINT },
	{ 0 },
};

int cli_storage_text(const char *cmd, const char *flag, const char *v, char *dst, size_t cap)
{
	if (strlen(v) >= cap) {
		fprintf(stderr, "qeffect%s%s: %s is %zu bytes long, more than the %zu it may have\n", cmd ? " " : "",
			cmd ? cmd : "", flag, strlen(v), cap - 1);
		return 2;
	}
	snprintf(dst, cap, "%s", v);
	return 0;
}

/*
 * A variable's text into dst (unset or empty: ""); 0 or 2 when too long.  A
 * dst already set by an earlier variable of the table is left as it is.
 */
static int env_text(const char *name, char *dst, size_t cap)
{
	if (dst[0])
		return 0;
	const char *v = qe_env(name);
	return v && v[0] ? cli_storage_text(NULL, name, v, dst, cap) : 0;
}

/* A variable's number (unset or empty: dflt), as the flags that once set it wrote it. */
static long long env_number(const char *name, long long dflt)
{
	const char *v = qe_env(name);
	return v && v[0] ? atoll(v) : dflt;
}

/* The text settings and the variable each comes from; of two for one setting, the first set wins. */
#define TEXT(var, field) { var, offsetof(cli_storage, field), sizeof(((cli_storage *)0)->field) }
static const struct {
	const char *var;
	size_t off, cap;
} texts[] = {
	TEXT("QE_LOCAL_DIR", ckpt.local_dir),
	TEXT("QE_CKPT_MEMORY_DIR", ckpt.memory_dir),
	TEXT("QE_CKPT_REMOTE_ENDPOINT", ckpt.remote_endpoint),
	TEXT("QE_CKPT_REMOTE", remote),
	TEXT("QE_CKPT_STAGING", ckpt.staging),
	TEXT("QE_CKPT_LOAD_THREADS", ckpt.load_threads),
	TEXT("QE_CKPT_LOAD_PIECE_BYTES", ckpt.load_piece_bytes),
	TEXT("QE_CKPT_READ_AHEAD_MIB", ckpt.read_ahead_mib),
	TEXT("QE_CKPT_PIECE_BYTES", ckpt.piece_bytes),
	TEXT("QE_CKPT_CHUNK_BYTES", ckpt.chunk_bytes),
	TEXT("QE_CKPT_ASYNC_TEST_DELAY_MS", ckpt.async_test_delay_ms),
	TEXT("QE_JOB_KILL", ckpt.job_kill),
	TEXT("QE_CKPT_KILL", ckpt.kill),
	TEXT("QE_REMOTE_PAUSE", ckpt.remote_pause),
	TEXT("QE_CKPT_PERSIST_SLOW_MS", ckpt.persist_slow_ms),
	TEXT("QE_CKPT_PERSIST_PAUSE", ckpt.persist_pause),
	TEXT("AWS_REGION", s3.region),
	TEXT("AWS_DEFAULT_REGION", s3.region),
	TEXT("AWS_ENDPOINT_URL_S3", s3.endpoint),
	TEXT("AWS_ENDPOINT_URL", s3.endpoint),
	TEXT("AWS_ACCESS_KEY_ID", s3.access_key),
	TEXT("AWS_SECRET_ACCESS_KEY", s3.secret_key),
	TEXT("AWS_SESSION_TOKEN", s3.session_token),
	TEXT("QE_S3_RETRIES", s3.retries),
	TEXT("QE_S3_BACKOFF_MS", s3.backoff_ms),
	TEXT("QE_S3_RETRY_BUDGET_S", s3.retry_budget_s),
	TEXT("QE_S3_CONNECT_TIMEOUT_S", s3.connect_timeout_s),
	TEXT("QE_S3_LOW_SPEED_S", s3.low_speed_s),
	TEXT("QE_S3_LOW_SPEED_BPS", s3.low_speed_bps),
	TEXT("QE_S3_TIMEOUT_S", s3.timeout_s),
	TEXT("QE_S3_MIN_RATE", s3.min_rate),
	TEXT("QE_S3_MULTIPART_BYTES", s3.multipart_bytes),
	TEXT("QE_S3_PART_BYTES", s3.part_bytes),
	TEXT("QE_P2P", rt.p2p),
	TEXT("QE_PROFILE", rt.profile),
	TEXT("QE_FLASH_ROWS", rt.flash_rows),
	TEXT("QE_FAULT", rt.fault),
	TEXT("QE_FAULT_COUNT", rt.fault_count),
	TEXT("QE_LINK_TEST_CONNECT_DELAY_MS", rt.link_test_connect_delay_ms),
};
#undef TEXT

int cli_storage_init(void)
{
	cli_storage *s = &settings;
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (env_text(texts[i].var, (char *)s + texts[i].off, texts[i].cap))
			return 2;
	const char *allow = qe_env("QE_ALLOW_NETWORK_FS");
	s->ckpt.allow_network_fs = allow && strcmp(allow, "1") == 0;
	const char *r = qe_env("QE_CKPT_REPLICAS");
	if (r && r[0]) {
		char *end;
		long n = strtol(r, &end, 10);
		if (*end || n < 0 || n > 8) {
			fprintf(stderr, "qeffect: QE_CKPT_REPLICAS='%s' is not a count of copies in 0..8\n", r);
			return 2;
		}
		s->ckpt.replicas = (int)n;
	}
	s->keep = (int)env_number("QE_CKPT_KEEP", 0);
	s->persist_every = env_number("QE_CKPT_PERSIST_EVERY", 0);
	s->persist_keep = (int)env_number("QE_CKPT_PERSIST_KEEP", 0);
	s->keep_grace_s = (uint64_t)env_number("QE_CKPT_KEEP_GRACE_S", 600);
	s->persist_grace_s = (uint64_t)env_number("QE_CKPT_PERSIST_GRACE_S", 600);
	s->shared_dir = qe_env("QE_SHARED_DIR");
	s->encoder_dir = qe_env("QE_GPT2_ENCODER_DIR");
	s->gnuplot = qe_env("QE_GNUPLOT");
	s->path = qe_env("PATH");
	s->tmpdir = qe_env("TMPDIR");
	/* the launcher's variables go to the runtime as they are, set or not (launch_vars.h) */
	for (int i = 0; i < qe_launch_nvars; i++)
		if (qe_launch_var_set(qe_launch_var_names[i], qe_env(qe_launch_var_names[i]))) {
			fprintf(stderr, "qeffect: %s\n", qe_last_error());
			return 2;
		}
	cli_storage_commit();
	return 0;
}
