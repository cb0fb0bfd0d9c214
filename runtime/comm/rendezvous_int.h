/*
 * rendezvous_int.h - what rendezvous.c (the protocol, the connecting side,
 * rank 0 and the others) and rendezvous_accept.c (the accepting side) share:
 * the handshake's wire format and proofs, and the socket helpers both call.
 * The rest of runtime/comm sees only qe_comm_rendezvous (comm_int.h).
 */
#ifndef QE_RENDEZVOUS_INT_H
#define QE_RENDEZVOUS_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "runtime/comm/auth.h"
#include "runtime/comm/comm_int.h"

/* The handshake on the wire: fixed-size little-endian messages. */
#define RDV_MAGIC 0x56524551u /* "QERV" */
#define RDV_VERSION 2u
#define RDV_HOST 64
#define HELLO_SIZE (24 + QE_DIST_RUN_ID_MAX + RDV_HOST + QE_AUTH_NONCE_BYTES)
#define CHAL_MAGIC 0x43524551u  /* "QERC": the acceptor's nonce and proof */
#define CHAL_SIZE (8 + QE_AUTH_NONCE_BYTES + QE_AUTH_MAC_BYTES)
#define PROOF_MAGIC 0x50524551u /* "QERP": the connector's proof */
#define PROOF_SIZE (4 + QE_AUTH_MAC_BYTES)
#define RDV_FLAG_SECRET 1u      /* hello/challenge flag: this side has a job secret */
#define VERDICT_TEXT 200
#define VERDICT_SIZE (8 + VERDICT_TEXT)

enum { IO_OK = 0, IO_TIMEOUT, IO_EOF, IO_ERR };

/* Little-endian u32 fields of the handshake. */
static inline void qe__rdv_put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static inline uint32_t qe__rdv_get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct rdv_hello {
	uint32_t magic, version, world, rank, port, flags;
	char run_id[QE_DIST_RUN_ID_MAX];
	char host[RDV_HOST];
	unsigned char nonce[QE_AUTH_NONCE_BYTES];
} rdv_hello;

/* Move exactly n bytes over a non-blocking socket before deadline: IO_*. */
int qe__rdv_xfer(int fd, void *buf, size_t n, int writing, int64_t deadline);
/* The numeric host and port of sa ("?" and 0 when it has none). */
void qe__rdv_addr_text(const struct sockaddr *sa, socklen_t len, char *host, size_t hostlen, int *port);
void qe__rdv_hello_unpack(rdv_hello *h, const unsigned char *b);
/* The proof of one side of a handshake; acceptor (1) or connector (0) picks its label. */
int qe__rdv_mac(const qe_auth_key *key, int acceptor, const char *run_id, int world, int conn_rank, int acc_rank,
		const unsigned char *nc, const unsigned char *na, unsigned char *out);
/* The acceptor's answer to a hello: ok, or a refusal with the reason the refused side prints. */
int qe__rdv_send_verdict(int fd, int ok, const char *text, int64_t deadline);

/*
 * Accept ranks lo..hi on the listener lfd (rendezvous_accept.c); fds[r] gets
 * each rank's connection.  Rank 0 passes hosts and ports to record where
 * each rank listens, and answers them itself once all have joined; others
 * pass NULL, and each rank is admitted at once.
 */
int qe__rdv_accept_ranks(const qe_dist_env *env, const qe_auth_key *key, int lfd, int lo, int hi, int64_t deadline,
			 int *fds, char (*hosts)[RDV_HOST], int *ports);

#endif
