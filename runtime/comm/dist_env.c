/*
 * dist_env.c - the job variables a rank process starts from (WORLD_SIZE,
 * RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, QE_COMM_TIMEOUT_MS, QE_RUN_ID),
 * read strictly: a value that is not a whole decimal number in range, or a
 * string that is empty, too long or holds a space or control character, is
 * refused with the variable's name and value.
 */
#include "runtime/comm/comm_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/env.h"
#include "runtime/core/status.h"

void qe_dist_env_default(qe_dist_env *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = 0;
	out->world_size = 1;
	out->local_rank = 0;
	snprintf(out->master_addr, sizeof(out->master_addr), "127.0.0.1");
	out->master_port = QE_COMM_DEFAULT_PORT;
	snprintf(out->run_id, sizeof(out->run_id), "qeffect");
	out->timeout_ms = QE_COMM_DEFAULT_TIMEOUT_MS;
}

static int env_int(const char *name, int def, long lo, long hi, int *out)
{
	const char *s = qe_env(name);
	char *end;
	long v;
	if (!s) {
		*out = def;
		return 0;
	}
	if (!(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end != '\0')
		return qe_fail(QE_EINVAL, "environment variable %s='%s' is not a decimal integer", name, s);
	if (errno == ERANGE || v < lo || v > hi)
		return qe_fail(QE_EINVAL, "environment variable %s=%s is out of range [%ld, %ld]", name, s, lo, hi);
	*out = (int)v;
	return 0;
}

static int env_str(const char *name, const char *def, char *dst, size_t cap)
{
	const char *s = qe_env(name);
	size_t i;
	if (!s)
		s = def;
	if (s[0] == '\0')
		return qe_fail(QE_EINVAL, "environment variable %s is set but empty", name);
	if (strlen(s) >= cap)
		return qe_fail(QE_EINVAL, "environment variable %s='%.40s...' is longer than %zu characters", name, s,
			       cap - 1);
	for (i = 0; s[i]; i++)
		if (iscntrl((unsigned char)s[i]) || s[i] == ' ')
			return qe_fail(QE_EINVAL, "environment variable %s='%s' contains a space or control character",
				       name, s);
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

int qe_dist_env_from_environ(qe_dist_env *out)
{
	qe_dist_env e;
	int rc;
	qe_dist_env_default(&e);
	qe_dist_env_default(out);
	if ((rc = env_int("WORLD_SIZE", 1, 1, 65536, &e.world_size)) ||
	    (rc = env_int("RANK", 0, 0, 65535, &e.rank)) ||
	    (rc = env_int("LOCAL_RANK", 0, 0, 65535, &e.local_rank)) ||
	    (rc = env_int("MASTER_PORT", QE_COMM_DEFAULT_PORT, 1, 65535, &e.master_port)) ||
	    (rc = env_int("QE_COMM_TIMEOUT_MS", QE_COMM_DEFAULT_TIMEOUT_MS, 1, INT_MAX, &e.timeout_ms)) ||
	    (rc = env_str("MASTER_ADDR", "127.0.0.1", e.master_addr, sizeof(e.master_addr))) ||
	    (rc = env_str("QE_RUN_ID", "qeffect", e.run_id, sizeof(e.run_id))))
		return rc;
	if (e.rank >= e.world_size)
		return qe_fail(QE_EINVAL, "environment variable RANK=%d is not below WORLD_SIZE=%d%s", e.rank,
			       e.world_size, qe_env("WORLD_SIZE") ? "" : " (WORLD_SIZE unset)");
	*out = e;
	return 0;
}
