/*
 * auth.c - the job secret (auth.h): loading it without ever echoing it,
 * nonces, HMAC-SHA256 proofs, and what a job without a secret does.
 *
 * The key is read afresh by every handshake (rendezvous, link open) instead
 * of being cached in the process: the launcher forks children after setting
 * the variable, and a cache filled before the fork would be stale there.
 */
#define _GNU_SOURCE
#include "runtime/comm/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/comm/launch_vars.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

#define LABEL_MAX 64
#define CTX_MAX 1024

static atomic_int g_warned;

void qe_auth_key_clear(qe_auth_key *k)
{
	if (!k)
		return;
	OPENSSL_cleanse(k->key, sizeof(k->key));
	k->len = 0;
	k->set = 0;
}

/* Read the whole secret file into k; the contents never reach a message. */
static int load_file(const char *path, qe_auth_key *k)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	size_t got = 0;
	if (fd < 0)
		return qe_fail(QE_EINVAL, "QE_JOB_SECRET_FILE '%s': cannot open: %s", path, strerror(errno));
	for (;;) {
		ssize_t r;
		if (got == sizeof(k->key)) {
			unsigned char extra;
			r = read(fd, &extra, 1);
			if (r > 0)
				rc = qe_fail(QE_EINVAL, "QE_JOB_SECRET_FILE '%s' is longer than %d bytes", path,
					     QE_AUTH_SECRET_MAX);
			OPENSSL_cleanse(&extra, 1);
			break;
		}
		r = read(fd, k->key + got, sizeof(k->key) - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = qe_fail(QE_EINVAL, "QE_JOB_SECRET_FILE '%s': read: %s", path, strerror(errno));
			break;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	while (!rc && got > 0 && (k->key[got - 1] == '\n' || k->key[got - 1] == '\r'))
		got--;
	if (!rc && got == 0)
		rc = qe_fail(QE_EINVAL, "QE_JOB_SECRET_FILE '%s' is empty", path);
	if (rc) {
		qe_auth_key_clear(k);
		return rc;
	}
	k->len = got;
	k->set = 1;
	return 0;
}

int qe_auth_load(qe_auth_key *k)
{
	const char *s = qe_launch_var("QE_JOB_SECRET"), *f = qe_launch_var("QE_JOB_SECRET_FILE");
	size_t n;
	memset(k, 0, sizeof(*k));
	if (s && f)
		return qe_fail(QE_EINVAL, "both QE_JOB_SECRET and QE_JOB_SECRET_FILE are set; set one");
	if (f)
		return f[0] ? load_file(f, k) : qe_fail(QE_EINVAL, "environment variable QE_JOB_SECRET_FILE is set but empty");
	if (!s)
		return 0;
	n = strlen(s);
	if (n == 0)
		return qe_fail(QE_EINVAL, "environment variable QE_JOB_SECRET is set but empty");
	if (n > sizeof(k->key))
		return qe_fail(QE_EINVAL, "environment variable QE_JOB_SECRET is longer than %d bytes", QE_AUTH_SECRET_MAX);
	memcpy(k->key, s, n);
	k->len = n;
	k->set = 1;
	return 0;
}

int qe_auth_nonce(unsigned char *out)
{
	size_t got = 0;
	while (got < QE_AUTH_NONCE_BYTES) {
		ssize_t r = getrandom(out + got, QE_AUTH_NONCE_BYTES - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return qe_fail(QE_EIO, "getrandom for a handshake nonce: %s", strerror(errno));
		got += (size_t)r;
	}
	return 0;
}

int qe_auth_mac(const qe_auth_key *k, const char *label, const void *ctx, size_t n, unsigned char *out)
{
	static const unsigned char empty = 0;
	unsigned char msg[LABEL_MAX + 1 + CTX_MAX];
	size_t ll = strlen(label);
	unsigned int outlen = 0;
	const unsigned char *key = k && k->set ? k->key : &empty;
	int keylen = k && k->set ? (int)k->len : 0;
	if (ll > LABEL_MAX || n > CTX_MAX)
		return qe_fail(QE_EINVAL, "auth: handshake label or context too long");
	memcpy(msg, label, ll);
	msg[ll] = 0;
	if (n)
		memcpy(msg + ll + 1, ctx, n);
	if (!HMAC(EVP_sha256(), key, keylen, msg, ll + 1 + n, out, &outlen) || outlen != QE_AUTH_MAC_BYTES)
		return qe_fail(QE_EIO, "auth: HMAC-SHA256 failed in libcrypto");
	return 0;
}

int qe_auth_equal(const unsigned char *a, const unsigned char *b)
{
	return CRYPTO_memcmp(a, b, QE_AUTH_MAC_BYTES) == 0;
}

int qe_auth_generate(char *hex, size_t cap)
{
	unsigned char raw[QE_AUTH_GENERATED_CHARS / 2];
	static const char digits[] = "0123456789abcdef";
	int rc;
	if (cap < QE_AUTH_GENERATED_CHARS + 1)
		return qe_fail(QE_EINVAL, "auth: buffer of %zu bytes for a generated secret", cap);
	if ((rc = qe_auth_nonce(raw)))
		return rc;
	for (size_t i = 0; i < sizeof(raw); i++) {
		hex[2 * i] = digits[raw[i] >> 4];
		hex[2 * i + 1] = digits[raw[i] & 15];
	}
	hex[QE_AUTH_GENERATED_CHARS] = '\0';
	OPENSSL_cleanse(raw, sizeof(raw));
	return 0;
}

int qe_auth_policy(const qe_auth_key *k, int rank, int world, const char *where)
{
	const char *strict = qe_launch_var("QE_REQUIRE_SECRET");
	if (world <= 1 || (k && k->set))
		return 0;
	if (strict && strcmp(strict, "0") != 0 && strict[0])
		return qe_fail(QE_EINVAL,
			       "rank %d: the job has no secret and QE_REQUIRE_SECRET=%s: set QE_JOB_SECRET or "
			       "QE_JOB_SECRET_FILE to the same value on every rank",
			       rank, strict);
	if (!atomic_exchange(&g_warned, 1))
		qe_log(QE_LOG_WARN,
		       "rank %d: the job has no secret (QE_JOB_SECRET or QE_JOB_SECRET_FILE): its connections are not "
		       "authenticated, any process that reaches %s can join it (QE_REQUIRE_SECRET=1 refuses to run)",
		       rank, where);
	return 0;
}
