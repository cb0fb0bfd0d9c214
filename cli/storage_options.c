/*
 * storage_options.c - the storage and tier settings of a cli process, read
 * from the environment in this one place (storage_options.h).
 */
#include "cli/storage_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/env.h"

static cli_storage settings;

cli_storage *cli_storage_get(void)
{
	return &settings;
}

void cli_storage_commit(void)
{
	ckpt_options_set(&settings.ckpt);
}

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

/* A variable's text into dst (unset or empty: ""); 0 or 2 when too long. */
static int env_text(const char *name, char *dst, size_t cap)
{
	const char *v = qe_env(name);
	return v && v[0] ? cli_storage_text(NULL, name, v, dst, cap) : 0;
}

/* A variable's number (unset or empty: dflt), as the flags that once set it wrote it. */
static long long env_number(const char *name, long long dflt)
{
	const char *v = qe_env(name);
	return v && v[0] ? atoll(v) : dflt;
}

int cli_storage_init(void)
{
	cli_storage *s = &settings;
	memset(s, 0, sizeof(*s));
	if (env_text("QE_LOCAL_DIR", s->ckpt.local_dir, sizeof(s->ckpt.local_dir)) ||
	    env_text("QE_CKPT_MEMORY_DIR", s->ckpt.memory_dir, sizeof(s->ckpt.memory_dir)) ||
	    env_text("QE_CKPT_REMOTE_ENDPOINT", s->ckpt.remote_endpoint, sizeof(s->ckpt.remote_endpoint)) ||
	    env_text("QE_CKPT_REMOTE", s->remote, sizeof(s->remote)))
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
	cli_storage_commit();
	return 0;
}
