/*
 * auth.h - the job secret: how every connection of a job (rendezvous, the
 * rank-to-rank mesh, the cpu device links) proves that it belongs to it.
 *
 * The secret is any string of bytes the job's processes share: QE_JOB_SECRET,
 * or the contents of the file QE_JOB_SECRET_FILE names (a trailing newline is
 * dropped).  The local launcher (qe_launch_*) makes a random one for the
 * ranks it starts; an external launcher's user sets one.  It never travels:
 * each side of a handshake sends a fresh random nonce and proves that it
 * knows the secret with HMAC-SHA256(secret, label || context), where the
 * context holds both nonces, the ranks or link name and the run id, and the
 * label names the role ("acceptor" or "connector"), so one side's proof can
 * never be replayed as the other's.  A job without a secret still runs the
 * same exchange under the empty key: it then proves nothing, which
 * qe_auth_policy warns about (or refuses, with QE_REQUIRE_SECRET=1).
 *
 * Nothing here ever puts the secret, or a MAC of it, in a message or a log
 * line; errors name the variable or the file, never the contents.
 *
 * This file is its own small library (qe_auth: core + libcrypto) so that both
 * runtime/comm and the cpu backend's links can use it.
 */
#ifndef QE_AUTH_H
#define QE_AUTH_H

#include <stddef.h>

#define QE_AUTH_NONCE_BYTES 32
#define QE_AUTH_MAC_BYTES 32
/* Longest secret we accept (bytes); a longer QE_JOB_SECRET or file is an error. */
#define QE_AUTH_SECRET_MAX 1024
/* Length of the secrets qe_auth_generate writes: 32 random bytes in hex. */
#define QE_AUTH_GENERATED_CHARS 64

/* A loaded secret.  Plain data on the caller's stack; wipe it with qe_auth_key_clear. */
typedef struct qe_auth_key {
	int set;    /* 1 when the job has a secret */
	size_t len; /* bytes in key */
	unsigned char key[QE_AUTH_SECRET_MAX];
} qe_auth_key;

/*
 * Read the job secret from the environment into OUT: *k (k->set = 0 when
 * neither variable is set).  Returns 0, or QE_EINVAL when QE_JOB_SECRET is
 * set but empty or too long, when both variables are set, or when the file
 * cannot be read, is empty or too long (the message names the file, never
 * the secret); *k is then empty.
 */
int qe_auth_load(qe_auth_key *k);

/* Overwrite the key bytes (OPENSSL_cleanse); k may be NULL. */
void qe_auth_key_clear(qe_auth_key *k);

/* OUT: out[QE_AUTH_NONCE_BYTES] from getrandom.  Returns 0 or QE_EIO. */
int qe_auth_nonce(unsigned char *out);

/*
 * OUT: out[QE_AUTH_MAC_BYTES] = HMAC-SHA256(k, label || 0 || ctx[0..n)).
 * An unset key is the empty key.  Returns 0, QE_EINVAL (label or ctx too
 * long), QE_EIO (libcrypto failed).
 */
int qe_auth_mac(const qe_auth_key *k, const char *label, const void *ctx, size_t n, unsigned char *out);

/* 1 when the two MACs are equal, compared in constant time; else 0. */
int qe_auth_equal(const unsigned char *a, const unsigned char *b);

/*
 * OUT: hex, QE_AUTH_GENERATED_CHARS characters + NUL (cap >= 65) of fresh
 * random bytes, for the local launcher.  Returns 0, QE_EINVAL, QE_EIO.
 */
int qe_auth_generate(char *hex, size_t cap);

/*
 * What a job of world > 1 does without a secret.  With one, or a world of 1,
 * nothing.  Without one it logs, once per process, that its connections are
 * not authenticated (where names the address it listens on or reaches), or
 * with QE_REQUIRE_SECRET=1 returns QE_EINVAL saying how to set one.
 */
int qe_auth_policy(const qe_auth_key *k, int rank, int world, const char *where);

#endif
