/*
 * pstate_rank.c - the rank's place, the checkpoint gate and the comm calls of
 * the agreement, as runtime/exec/pstate.h offers them to ckpt: each forwards
 * to the function of runtime/exec/rank.h or runtime/comm/comm.h it names, so
 * that ckpt sees the rank, the comm and a gather's blobs as opaque types and
 * includes nothing of the runtime but pstate.h and runtime/core (issue 36
 * item 4).  Nothing here adds behaviour.
 */
#include "runtime/exec/pstate.h"

#include "runtime/comm/comm.h"
#include "runtime/exec/rank.h"

int qe_pstate_rank(const qe_rank *r)
{
	return qe_rank_index(r);
}

int qe_pstate_replica(const qe_rank *r)
{
	return qe_rank_replica(r);
}

int64_t qe_pstate_steps_done(const qe_rank *r)
{
	return qe_rank_steps_done(r);
}

int64_t qe_pstate_e_w(const qe_rank *r)
{
	return qe_rank_epochs(r)->e_W;
}

uint64_t qe_pstate_seed(const qe_rank *r)
{
	return qe_rank_config(r)->seed;
}

qe_backend *qe_pstate_backend(qe_rank *r)
{
	return qe_rank_backend(r);
}

int qe_pstate_quiescent(qe_rank *r)
{
	return qe_rank_quiescent(r);
}

qe_comm *qe_pstate_comm(qe_rank *r)
{
	return qe_rank_comm(r);
}

int qe_pstate_comm_rank(const qe_comm *c)
{
	return qe_comm_rank(c);
}

int qe_pstate_comm_world(const qe_comm *c)
{
	return qe_comm_world_size(c);
}

int qe_pstate_comm_timeout_ms(const qe_comm *c)
{
	const qe_dist_env *e = qe_comm_env(c);
	return e->timeout_ms > 0 ? e->timeout_ms : QE_COMM_DEFAULT_TIMEOUT_MS;
}

int qe_pstate_comm_failed(qe_comm *c)
{
	return qe_comm_failed(c);
}

const char *qe_pstate_comm_failure(qe_comm *c, char *buf, size_t len)
{
	return qe_comm_failure(c, buf, len);
}

int qe_pstate_svc_send(qe_comm *c, int peer, uint32_t tag, const void *buf, size_t n)
{
	return qe_comm_svc_send(c, peer, tag, buf, n);
}

int qe_pstate_svc_recv(qe_comm *c, int peer, uint32_t tag, void **out, size_t *n)
{
	return qe_comm_svc_recv(c, peer, tag, out, n);
}

int qe_pstate_flush(qe_comm *c)
{
	return qe_comm_flush(c);
}

int qe_pstate_bcast(qe_comm *c, int root, void *buf, size_t n)
{
	return qe_comm_bcast(c, root, buf, n);
}

int qe_pstate_bcast_blob(qe_comm *c, const void *blob, size_t n, void **out, size_t *out_n)
{
	return qe_comm_bcast_blob(c, blob, n, out, out_n);
}

int qe_pstate_gather(qe_comm *c, const void *blob, size_t n, qe_comm_blob **out)
{
	return qe_comm_gather_blobs(c, blob, n, out);
}

const void *qe_pstate_blob_data(const qe_comm_blob *blobs, int q)
{
	return blobs[q].data;
}

size_t qe_pstate_blob_size(const qe_comm_blob *blobs, int q)
{
	return blobs[q].size;
}

void qe_pstate_blobs_free(qe_comm_blob *blobs, int count)
{
	qe_comm_blobs_free(blobs, count);
}
