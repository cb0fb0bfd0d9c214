/*
 * rendezvous_accept.c - the accepting side of the rendezvous (rendezvous.c):
 * rank 0 taking in every other rank, and each rank taking in the ranks above
 * it for the mesh.
 *
 * The acceptor handles many handshakes at once: its loop polls the listener
 * and every connection in its handshake, each with its own time limit
 * (HELLO_WAIT_MS), so a process that connects and stalls, or proves nothing,
 * costs the job nothing: it is dropped, logged with its address, and never
 * takes a rank's place.  A rank is admitted only once its proof checks.
 */
#define _GNU_SOURCE
#include "runtime/comm/comm_int.h"
#include "runtime/comm/rendezvous_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/comm/auth.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* A connection that does not finish its handshake within this time is dropped. */
#define HELLO_WAIT_MS 5000
/* Handshakes under way at once on one listener; a new one beyond drops the oldest. */
#define PEND_MAX 64

/* ---- accepting: many handshakes at once ------------------------------------ */

/*
 * A connection whose handshake is under way.  The accept loop polls the
 * listener and every pending connection together, so a peer that connects
 * and then stalls (or trickles bytes) holds only its own slot, until its
 * HELLO_WAIT_MS run out; the real ranks keep being accepted meanwhile.
 */
typedef struct pending {
	int fd;
	int stage; /* 0: reading the hello, 1: reading the proof */
	size_t got;
	int64_t until;
	char addr[RDV_HOST + 8];
	rdv_hello h;
	unsigned char na[QE_AUTH_NONCE_BYTES];
	unsigned char buf[HELLO_SIZE];
} pending;

typedef struct acceptor {
	const qe_dist_env *env;
	const qe_auth_key *key;
	int lo, hi;
	const int *taken;
	int hosts_wanted; /* rank 0: the hello must announce a listening port */
} acceptor;

enum { STEP_MORE = 0, STEP_ADMIT = 1, STEP_DROP = -1 };

/* Why hello h may not join here ("" when it may). */
static void judge(const acceptor *a, const rdv_hello *h, char *why, size_t n)
{
	const qe_dist_env *env = a->env;
	why[0] = '\0';
	if (h->version != RDV_VERSION)
		snprintf(why, n, "protocol version %u, rank %d speaks %u", h->version, env->rank, RDV_VERSION);
	else if (strcmp(h->run_id, env->run_id) != 0)
		snprintf(why, n, "run id '%s' does not match rank %d's run id '%s' (QE_RUN_ID)", h->run_id, env->rank,
			 env->run_id);
	else if ((int)h->world != env->world_size)
		snprintf(why, n, "WORLD_SIZE=%u does not match rank %d's WORLD_SIZE=%d", h->world, env->rank,
			 env->world_size);
	else if ((int)h->rank < a->lo || (int)h->rank > a->hi)
		snprintf(why, n, "rank %u is not expected here (rank %d accepts ranks %d..%d)", h->rank, env->rank, a->lo,
			 a->hi);
	else if (a->taken[h->rank])
		snprintf(why, n, "rank %u has already joined", h->rank);
	else if (a->hosts_wanted && (h->port == 0 || h->port > 65535))
		snprintf(why, n, "rank %u announced an invalid port %u", h->rank, h->port);
	else if (a->key->set && !(h->flags & RDV_FLAG_SECRET))
		snprintf(why, n, "rank %d has a job secret and rank %u has none (QE_JOB_SECRET, QE_JOB_SECRET_FILE)",
			 env->rank, h->rank);
	else if (!a->key->set && (h->flags & RDV_FLAG_SECRET))
		snprintf(why, n, "rank %u has a job secret and rank %d has none (QE_JOB_SECRET, QE_JOB_SECRET_FILE)",
			 h->rank, env->rank);
}

static int refuse(const acceptor *a, pending *p, const char *why)
{
	qe_log(QE_LOG_WARN, "rank %d: refused a connection from %s (claiming rank %u): %s", a->env->rank, p->addr,
	       p->h.rank, why);
	qe__rdv_send_verdict(p->fd, 0, why, qe_comm_now_ms() + 100);
	return STEP_DROP;
}

/* Move p's handshake on as far as the bytes that have arrived allow. */
static int step(const acceptor *a, pending *p)
{
	const qe_dist_env *env = a->env;
	size_t want = p->stage == 0 ? HELLO_SIZE : PROOF_SIZE;
	char why[VERDICT_TEXT];
	while (p->got < want) {
		ssize_t r = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
		if (r > 0) {
			p->got += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return STEP_MORE;
		qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: %s during the handshake", env->rank, p->addr,
		       r == 0 ? "closed" : strerror(errno));
		return STEP_DROP;
	}
	if (p->stage == 0) {
		unsigned char cb[CHAL_SIZE];
		qe__rdv_hello_unpack(&p->h, p->buf);
		if (p->h.magic != RDV_MAGIC) {
			qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s that is not a qeffect rank (bad magic 0x%08x)",
			       env->rank, p->addr, p->h.magic);
			return STEP_DROP;
		}
		judge(a, &p->h, why, sizeof(why));
		if (why[0])
			return refuse(a, p, why);
		qe__rdv_put_u32(cb, CHAL_MAGIC);
		qe__rdv_put_u32(cb + 4, a->key->set ? RDV_FLAG_SECRET : 0);
		if (qe_auth_nonce(p->na) ||
		    qe__rdv_mac(a->key, 1, env->run_id, env->world_size, (int)p->h.rank, env->rank, p->h.nonce, p->na,
			    cb + 8 + QE_AUTH_NONCE_BYTES)) {
			qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: %s", env->rank, p->addr, qe_last_error());
			return STEP_DROP;
		}
		memcpy(cb + 8, p->na, QE_AUTH_NONCE_BYTES);
		/* A fresh socket's buffer takes these bytes at once; a peer that reads nothing cannot stall us. */
		if (qe__rdv_xfer(p->fd, cb, sizeof(cb), 1, qe_comm_now_ms() + 100) != IO_OK) {
			qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s (claiming rank %u): it does not take our challenge",
			       env->rank, p->addr, p->h.rank);
			return STEP_DROP;
		}
		p->stage = 1;
		p->got = 0;
		return STEP_MORE;
	}
	{
		unsigned char mac[QE_AUTH_MAC_BYTES];
		if (qe__rdv_get_u32(p->buf) != PROOF_MAGIC)
			return refuse(a, p, "the handshake has no proof where one belongs");
		if (qe__rdv_mac(a->key, 0, env->run_id, env->world_size, (int)p->h.rank, env->rank, p->h.nonce, p->na, mac)) {
			qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: %s", env->rank, p->addr, qe_last_error());
			return STEP_DROP;
		}
		if (!qe_auth_equal(mac, p->buf + 4))
			return refuse(a, p,
				      "it does not prove that it knows the job secret (QE_JOB_SECRET / QE_JOB_SECRET_FILE "
				      "differ, or it is not a rank of this job)");
		if (a->taken[p->h.rank])
			return refuse(a, p, "this rank has already joined");
	}
	return STEP_ADMIT;
}

static void pend_remove(pending *pend, int *np, int i, int close_fd)
{
	if (close_fd)
		close(pend[i].fd);
	pend[i] = pend[*np - 1];
	(*np)--;
}

/* Accept ranks lo..hi on lfd; fds[r] gets each connection (rank 0 also records hosts and ports). */
int qe__rdv_accept_ranks(const qe_dist_env *env, const qe_auth_key *key, int lfd, int lo, int hi, int64_t deadline,
			 int *fds, char (*hosts)[RDV_HOST], int *ports)
{
	int want = hi - lo + 1, got = 0, np = 0, rc = 0;
	int *taken = calloc((size_t)env->world_size, sizeof(int));
	pending *pend = calloc(PEND_MAX, sizeof(pending));
	struct pollfd *pf = calloc(PEND_MAX + 1, sizeof(struct pollfd));
	acceptor a = { .env = env, .key = key, .lo = lo, .hi = hi, .taken = taken, .hosts_wanted = hosts != NULL };
	if (!taken || !pend || !pf) {
		rc = qe_fail(QE_ENOMEM, "rank %d: rendezvous table", env->rank);
		goto drop_pending;
	}
	while (got < want) {
		int64_t now = qe_comm_now_ms(), wake = deadline;
		int r;
		for (int i = np - 1; i >= 0; i--) {
			if (now >= pend[i].until) {
				qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: no complete handshake within %d ms",
				       env->rank, pend[i].addr, HELLO_WAIT_MS);
				pend_remove(pend, &np, i, 1);
			} else if (pend[i].until < wake) {
				wake = pend[i].until;
			}
		}
		if (now >= deadline) {
			char missing[256] = "";
			size_t used = 0;
			for (int k = lo; k <= hi && used + 16 < sizeof(missing); k++)
				if (!taken[k])
					used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
								 used ? ", " : "", k);
			rc = qe_fail(QE_ECOMM, "rank %d: rendezvous timed out: %d of %d ranks joined (missing: %s)", env->rank,
				     got, want, missing);
			goto drop_pending;
		}
		pf[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < np; i++)
			pf[1 + i] = (struct pollfd){ .fd = pend[i].fd, .events = POLLIN };
		r = poll(pf, (nfds_t)(1 + np), wake - now > INT_MAX ? INT_MAX : (int)(wake - now));
		if (r < 0 && errno != EINTR) {
			rc = qe_fail(QE_ECOMM, "rank %d: rendezvous: poll: %s", env->rank, strerror(errno));
			goto drop_pending;
		}
		if (r <= 0)
			continue;
		for (int i = np - 1; i >= 0; i--) {
			int s, rk;
			if (!pf[1 + i].revents)
				continue;
			s = step(&a, &pend[i]);
			if (s == STEP_MORE)
				continue;
			if (s == STEP_DROP) {
				pend_remove(pend, &np, i, 1);
				continue;
			}
			rk = (int)pend[i].h.rank;
			/* Mesh links are admitted at once; rank 0 answers when it has the table. */
			if (!hosts && qe__rdv_send_verdict(pend[i].fd, 1, "ok", deadline) != IO_OK) {
				qe_log(QE_LOG_WARN, "rank %d: rank %d left while being admitted", env->rank, rk);
				pend_remove(pend, &np, i, 1);
				continue;
			}
			taken[rk] = 1;
			fds[rk] = pend[i].fd;
			if (hosts)
				memcpy(hosts[rk], pend[i].h.host, RDV_HOST);
			if (ports)
				ports[rk] = (int)pend[i].h.port;
			got++;
			pend_remove(pend, &np, i, 0);
		}
		if (!(pf[0].revents & POLLIN))
			continue;
		for (;;) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			int cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC), port, oldest = 0;
			char host[RDV_HOST];
			if (cfd < 0)
				break; /* EAGAIN, ECONNABORTED, EINTR: poll again */
			if (np == PEND_MAX) {
				for (int i = 1; i < np; i++)
					if (pend[i].until < pend[oldest].until)
						oldest = i;
				qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: %d handshakes are under way",
				       env->rank, pend[oldest].addr, PEND_MAX);
				pend_remove(pend, &np, oldest, 1);
			}
			qe__rdv_addr_text((struct sockaddr *)&ss, sl, host, sizeof(host), &port);
			memset(&pend[np], 0, sizeof(pend[np]));
			pend[np].fd = cfd;
			pend[np].until = qe_comm_now_ms() + HELLO_WAIT_MS;
			snprintf(pend[np].addr, sizeof(pend[np].addr), "%s:%d", host, port);
			np++;
		}
	}
drop_pending:
	for (int i = 0; i < np; i++) {
		if (!rc)
			qe_log(QE_LOG_WARN, "rank %d: dropped a connection from %s: its handshake was unfinished when every rank had joined",
			       env->rank, pend[i].addr);
		close(pend[i].fd);
	}
	free(taken);
	free(pend);
	free(pf);
	return rc;
}
