/*
 * ckpt_replica.c - replicas of every rank's checkpoint chunks on peer hosts
 * (--ckpt-replicas R, env QE_CKPT_REPLICAS).
 *
 * A host that dies takes its local stores with it.  With R > 0 each rank
 * also sends its chunks to R ranks on other hosts, which put them into their
 * own stores, STORES/rank-T on their own disks, and flush them.  All of it
 * happens before the rank's rows go to rank 0, and the rows carry the
 * stores that acknowledged a durable copy, so rank 0's single commit
 * transaction records every copy (catalog table copies): a crash anywhere
 * before it leaves nothing but orphan chunks, as a crash of the plain save
 * does.
 *
 * Targets are chosen deterministically from the hosts of the ranks, which
 * the ranks agree on once per session (ckpt__repl_setup: every rank sends
 * rank 0 its replica count and host name, rank 0 sends every rank the
 * table): hosts are numbered in order of their lowest rank; rank q, the
 * l-th rank of host h, sends its j-th copy (j = 1..R) to the (l mod n)-th of
 * the n ranks of host (h + j) mod H.  So copies go to R distinct other
 * hosts and the ranks of a host spread their copies over the ranks of the
 * next.  R larger than the number of other hosts is refused, naming the
 * hosts: on one host a replica shares the disk it should survive.
 *
 * The exchange, on the comm's service lane (tags CKPT_SVC_REPL and
 * CKPT_SVC_REPL_ACK; the sync save calls it on the training thread, an
 * async save from its background thread): a source sends each tensor to
 * each target as soon as it is in its own store (the sends are buffered, so
 * writing and sending overlap), then one end message carrying its outcome;
 * a target reads every source's messages to the end, re-hashes every chunk
 * as it puts it, flushes its store once, and answers each source with an
 * acknowledgement (its store identity, or why it failed).  Every message is
 * always sent, failure or not, so nobody waits for a timeout.  Kill phases:
 * replsend (source, after a tensor went to a target), replrecv (target,
 * after a tensor arrived), replwrite (target, after its chunks were put),
 * replsync (target, before its flush), replsynced (after it), replack
 * (source, after every target acknowledged).
 */
#include "ckpt/session/ckpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

#define REPL_MAGIC 0x4c504552u /* "REPL" */
enum { REPL_TENSOR = 1, REPL_END = 2 };

struct ckpt_repl {
	int world;
	int nhosts;
	char (*host)[CKPT_HOST_MAX]; /* [world]: each rank's host */
	int ntargets;
	int targets[CKPT_MAX_REPLICAS];
	int nsources;
	int *sources; /* ranks whose copies this rank keeps, in rank order */
};

/* ---- configuration and the agreed map ------------------------------------------ */

int ckpt__repl_config(ckpt_session *s)
{
	int n = ckpt_options_get()->replicas;
	s->replicas = 0;
	if (n < 0 || n > CKPT_MAX_REPLICAS)
		return qe_fail(QE_EINVAL, "--ckpt-replicas %d is not a count in 0..%d", n, CKPT_MAX_REPLICAS);
	s->replicas = n;
	return QE_OK;
}

void ckpt__repl_free(ckpt_session *s)
{
	if (!s->repl)
		return;
	free(s->repl->host);
	free(s->repl->sources);
	free(s->repl);
	s->repl = NULL;
}

/* What every rank tells rank 0 once: its replica count and its host. */
typedef struct repl_hello {
	int64_t replicas;
	char host[CKPT_HOST_MAX];
	int64_t mem_rc;      /* opening its memory store (--ckpt-memory) */
	char mem_msg[CKPT_MSG];
} repl_hello;

/* The k-th rank (by rank order) of host h. */
static int rank_on(const int *hidx, int world, int h, int k)
{
	int seen = -1;
	for (int q = 0; q < world; q++)
		if (hidx[q] == h && ++seen == k)
			return q;
	return -1;
}

/* The map from the host table (identical on every rank). */
static int build_map(ckpt_session *s, int me, int world, char (*host)[CKPT_HOST_MAX], int R, ckpt_repl *m)
{
	int *hidx = calloc((size_t)world, sizeof(int)), *lidx = calloc((size_t)world, sizeof(int));
	int *first = calloc((size_t)world, sizeof(int)), *count = calloc((size_t)world, sizeof(int));
	int rc = QE_OK;
	if (!hidx || !lidx || !first || !count) {
		rc = qe_fail(QE_ENOMEM, "replicas: out of memory");
		goto out;
	}
	int nh = 0;
	for (int q = 0; q < world; q++) {
		int h = 0;
		while (h < nh && strcmp(host[first[h]], host[q]))
			h++;
		if (h == nh)
			first[nh++] = q;
		hidx[q] = h;
		lidx[q] = count[h]++;
	}
	m->nhosts = nh;
	if (R > nh - 1) {
		char list[CKPT_MSG / 2] = "";
		size_t len = 0;
		for (int h = 0; h < nh && len < sizeof(list) - 1; h++) {
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s'%s': ranks", h ? "; " : "", host[first[h]]);
			for (int q = 0; q < world && len < sizeof(list) - 1; q++)
				if (hidx[q] == h)
					len += (size_t)snprintf(list + len, sizeof(list) - len, " %d", q);
		}
		rc = qe_fail(QE_EINVAL,
			     "--ckpt-replicas %d needs ranks on at least %d hosts (a replica must survive the loss of its "
			     "rank's host), but the job's %d rank%s run%s on %d host%s (%s)",
			     R, R + 1, world, world == 1 ? "" : "s", world == 1 ? "s" : "", nh, nh == 1 ? "" : "s", list);
		goto out;
	}
	m->ntargets = R;
	for (int j = 1; j <= R; j++) {
		int h = (hidx[me] + j) % nh;
		m->targets[j - 1] = rank_on(hidx, world, h, lidx[me] % count[h]);
	}
	if (!(m->sources = calloc((size_t)world, sizeof(int)))) {
		rc = qe_fail(QE_ENOMEM, "replicas: out of memory");
		goto out;
	}
	for (int q = 0; q < world; q++)
		for (int j = 1; j <= R && q != me; j++) {
			int h = (hidx[q] + j) % nh;
			if (rank_on(hidx, world, h, lidx[q] % count[h]) == me) {
				m->sources[m->nsources++] = q;
				break;
			}
		}
	(void)s;
out:
	free(hidx);
	free(lidx);
	free(first);
	free(count);
	return rc;
}

int ckpt__repl_setup(ckpt_session *s, qe_rank *r)
{
	if (s->repl)
		return QE_OK;
	qe_comm *comm = qe_pstate_comm(r);
	int world = ckpt__comm_world(comm), me = qe_pstate_rank(r), rc;
	if (world == 1 && s->replicas == 0)
		return QE_OK; /* nothing to agree on, and no map needed */
	ckpt_repl *m = calloc(1, sizeof(*m));
	if (!m || !(m->host = calloc((size_t)world, CKPT_HOST_MAX))) {
		free(m);
		return qe_fail(QE_ENOMEM, "replicas: out of memory");
	}
	m->world = world;
	repl_hello hello;
	memset(&hello, 0, sizeof(hello));
	hello.replicas = s->replicas;
	snprintf(hello.host, sizeof(hello.host), "%s", s->host);
	/* The memory tier's store, opened now so that a folder not in memory fails every rank before any write. */
	if (s->replicas > 0 && (hello.mem_rc = ckpt__mem_open(s, me)))
		snprintf(hello.mem_msg, sizeof(hello.mem_msg), "%s", qe_last_error());
	/* rank 0's answer: a word, then the host table */
	size_t alen = sizeof(ckpt_word) + (size_t)world * CKPT_HOST_MAX;
	unsigned char *answer = calloc(1, alen);
	if (!answer) {
		ckpt_repl *tmp = m;
		s->repl = tmp;
		ckpt__repl_free(s);
		return qe_fail(QE_ENOMEM, "replicas: out of memory");
	}
	ckpt_word w;
	memset(&w, 0, sizeof(w));
	qe_comm_blob *blobs = NULL;
	if (world > 1 && (rc = qe_pstate_gather(comm, &hello, sizeof(hello), &blobs)))
		goto fail_comm;
	if (me == 0) {
		for (int q = 0; q < world && !w.rc; q++) {
			repl_hello h;
			if (world == 1)
				h = hello;
			else if (qe_pstate_blob_size(blobs, q) == sizeof(h))
				memcpy(&h, qe_pstate_blob_data(blobs, q), sizeof(h));
			else {
				ckpt__word_set(&w, QE_ECOMM, "replicas: rank %d sent %zu bytes for its host", q,
					       qe_pstate_blob_size(blobs, q));
				break;
			}
			h.host[sizeof(h.host) - 1] = 0;
			h.mem_msg[sizeof(h.mem_msg) - 1] = 0;
			if (h.mem_rc)
				ckpt__word_set(&w, (int)h.mem_rc, "%s", h.mem_msg);
			else if (h.replicas != s->replicas)
				ckpt__word_set(&w, QE_EINVAL,
					       "replicas: rank %d on '%s' was started with --ckpt-replicas %lld, rank 0 with %d "
					       "(give every host the same command line)",
					       q, h.host, (long long)h.replicas, s->replicas);
			memcpy(answer + sizeof(ckpt_word) + (size_t)q * CKPT_HOST_MAX, h.host, CKPT_HOST_MAX);
		}
		memcpy(answer, &w, sizeof(w));
		qe_pstate_blobs_free(blobs, world);
	}
	void *got = answer;
	size_t glen = alen;
	if (world > 1) {
		rc = qe_pstate_bcast_blob(comm, answer, alen, &got, &glen);
		free(answer);
		answer = NULL;
		if (rc)
			goto fail_comm;
		if (glen != alen) {
			free(got);
			rc = qe_fail(QE_ECOMM, "replicas: rank 0's host table is %zu bytes, expected %zu", glen, alen);
			goto fail;
		}
	}
	memcpy(&w, got, sizeof(w));
	w.msg[sizeof(w.msg) - 1] = 0;
	memcpy(m->host, (unsigned char *)got + sizeof(ckpt_word), (size_t)world * CKPT_HOST_MAX);
	free(got);
	for (int q = 0; q < world; q++)
		m->host[q][CKPT_HOST_MAX - 1] = 0;
	if (w.rc) {
		rc = qe_fail((int)w.rc, "%s", w.msg);
		goto fail;
	}
	if ((rc = build_map(s, me, world, m->host, s->replicas, m)))
		goto fail;
	s->repl = m;
	if (s->replicas > 0) {
		char t[128] = "";
		size_t len = 0;
		for (int j = 0; j < m->ntargets && len < sizeof(t) - 1; j++)
			len += (size_t)snprintf(t + len, sizeof(t) - len, "%s%d ('%s')", j ? ", " : "", m->targets[j],
						m->host[m->targets[j]]);
		qe_log(QE_LOG_INFO, "replicas: rank %d on '%s' copies its checkpoints to rank%s %s and keeps the copies of %d rank%s",
		       me, s->host, m->ntargets == 1 ? "" : "s", t, m->nsources, m->nsources == 1 ? "" : "s");
	}
	return QE_OK;
fail_comm:
	free(answer);
	rc = qe_fail_ctx(rc, "replicas: agreeing on every rank's host");
fail:
	s->repl = m;
	ckpt__repl_free(s);
	return rc;
}

int ckpt__repl_active(const ckpt_session *s)
{
	return s->replicas > 0 && s->repl && s->repl->ntargets > 0;
}

int ckpt_replicas_prepare(ckpt_session *s, qe_rank *r)
{
	if (!s || !r)
		return qe_fail(QE_EINVAL, "ckpt_replicas_prepare: NULL argument");
	return ckpt__repl_setup(s, r);
}

/* ---- bytes -------------------------------------------------------------------- */

/* Header of every data message: magic, checkpoint id, kind, rc, count (chunks, or message bytes). */
#define HDR 40

/* ---- the source side ------------------------------------------------------------ */

int ckpt__repl_send(ckpt_session *s, qe_comm *comm, int64_t id, const void *data, const store_chunk_list *list)
{
	if (!ckpt__repl_active(s))
		return QE_OK;
	uint64_t bytes = 0;
	for (size_t k = 0; k < list->n; k++)
		bytes += list->chunks[k].size;
	size_t len = HDR + list->n * 24 + (size_t)bytes;
	unsigned char *buf = malloc(len);
	if (!buf)
		return qe_fail(QE_ENOMEM, "replicas: rank %d on '%s': no host memory for a tensor of %llu bytes", s->rank,
			       s->host, (unsigned long long)bytes);
	ckpt__put64(buf, REPL_MAGIC);
	ckpt__put64(buf + 8, (uint64_t)id);
	ckpt__put64(buf + 16, REPL_TENSOR);
	ckpt__put64(buf + 24, 0);
	ckpt__put64(buf + 32, list->n);
	for (size_t k = 0; k < list->n; k++) {
		memcpy(buf + HDR + 24 * k, list->chunks[k].hash.b, STORE_HASH_BYTES);
		ckpt__put64(buf + HDR + 24 * k + 16, list->chunks[k].size);
	}
	if (bytes)
		memcpy(buf + HDR + list->n * 24, data, (size_t)bytes);
	int rc = QE_OK;
	for (int j = 0; j < s->repl->ntargets && !rc; j++) {
		int t = s->repl->targets[j];
		if ((rc = qe_pstate_svc_send(comm, t, CKPT_SVC_REPL, buf, len)))
			rc = qe_fail_ctx(rc, "replicas: rank %d on '%s' sending a tensor to rank %d on '%s'", s->rank, s->host,
					 t, s->repl->host[t]);
		else
			ckpt__maybe_kill(s, "replsend", s->rank);
	}
	free(buf);
	return rc;
}

/* ---- the target side ------------------------------------------------------------ */

/* One data message from source q into the own store: every chunk re-hashed as it is put. */
static int keep_tensor(ckpt_session *s, int q, int64_t id, const unsigned char *p, size_t len)
{
	uint64_t n = ckpt__get64(p + 32);
	if (!s->st)
		return qe_fail(QE_EINVAL, "replicas: rank %d on '%s' has no store open to keep the copy of rank %d", s->rank,
			       s->host, q);
	if (n > (len - HDR) / 24)
		return qe_fail(QE_ECOMM, "replicas: rank %d sent a garbled tensor (%zu bytes)", q, len);
	size_t off = HDR + (size_t)n * 24;
	for (uint64_t k = 0; k < n; k++) {
		const unsigned char *e = p + HDR + 24 * k;
		uint64_t size = ckpt__get64(e + 16);
		if (size > len - off)
			return qe_fail(QE_ECOMM, "replicas: rank %d sent a tensor shorter than its chunk list (%zu bytes)", q, len);
		store_hash want, got;
		memcpy(want.b, e, STORE_HASH_BYTES);
		store_hash_of(p + off, (size_t)size, &got);
		if (store_hash_cmp(&want, &got)) {
			char hex[STORE_HASH_HEX];
			return qe_fail(QE_ECORRUPT, "replicas: chunk %s from rank %d on '%s' does not match its hash",
				       store_hash_hex(&want, hex), q, s->repl->host[q]);
		}
		int rc = store_put_chunk(s->st, p + off, (size_t)size, NULL);
		if (rc)
			return qe_fail_ctx(rc, "replicas: rank %d on '%s' keeping a chunk of rank %d in its store '%s'", s->rank,
					   s->host, q, s->store_dir);
		if (ckpt__mem_active(s)) {
			ckpt__mem_begin(s, id);
			ckpt__mem_put(s, p + off, (size_t)size, &got);
		}
		off += (size_t)size;
	}
	if (off != len)
		return qe_fail(QE_ECOMM, "replicas: rank %d sent %zu bytes more than its chunk list", q, len - off);
	return QE_OK;
}

/*
 * Every message of source q for checkpoint id, to its end message.  A local
 * failure stops the writing but not the reading, so the lane is left clean.
 * OUT *theirs: the source's own outcome (from its end message).
 */
static int drain_source(ckpt_session *s, qe_comm *comm, int q, int64_t id, int *theirs, int *got)
{
	int rc = QE_OK;
	*theirs = QE_OK;
	*got = 0;
	for (;;) {
		void *msg = NULL;
		size_t len = 0;
		int crc = qe_pstate_svc_recv(comm, q, CKPT_SVC_REPL, &msg, &len);
		if (crc)
			return qe_fail_ctx(crc, "replicas: rank %d on '%s' waiting for the copy of rank %d on '%s'", s->rank,
					   s->host, q, s->repl->host[q]);
		const unsigned char *p = msg;
		if (len < HDR || ckpt__get64(p) != REPL_MAGIC || (int64_t)ckpt__get64(p + 8) != id) {
			free(msg);
			return qe_fail(QE_ECOMM, "replicas: rank %d sent %zu bytes that are no copy of checkpoint %lld", q, len,
				       (long long)id);
		}
		uint64_t kind = ckpt__get64(p + 16);
		if (kind == REPL_END) {
			*theirs = (int)(int64_t)ckpt__get64(p + 24);
			free(msg);
			return rc;
		}
		ckpt__maybe_kill(s, "replrecv", s->rank);
		if (!rc) {
			rc = keep_tensor(s, q, id, p, len);
			if (!rc) {
				(*got)++;
				ckpt__maybe_kill(s, "replwrite", s->rank);
			}
		}
		free(msg);
	}
}

/*
 * An acknowledgement: magic, id, rc, then the identity and path of each of
 * ACK_STORES stores that now hold the copy - the target's disk store, then
 * its memory store (--ckpt-memory; an empty identity when it holds none) -
 * then why it failed.
 */
#define ACK_STORES 2
#define ACK_STORE_BYTES (8 + 64 + CKPT_STORE_ID_MAX + CKPT_HOST_MAX + CKPT_PATH_MAX)
#define ACK_BYTES (24 + ACK_STORES * ACK_STORE_BYTES + CKPT_MSG)

static unsigned char *put_store(unsigned char *p, const ckpt_store_identity *id, const char *path)
{
	ckpt__put64(p, (uint64_t)(int64_t)id->rank);
	p += 8;
	snprintf((char *)p, 64, "%s", id->run_id);
	p += 64;
	snprintf((char *)p, CKPT_STORE_ID_MAX, "%s", id->store_id);
	p += CKPT_STORE_ID_MAX;
	snprintf((char *)p, CKPT_HOST_MAX, "%s", id->host);
	p += CKPT_HOST_MAX;
	snprintf((char *)p, CKPT_PATH_MAX, "%s", path);
	return p + CKPT_PATH_MAX;
}

static const unsigned char *get_store(const unsigned char *q, ckpt_copy_store *out)
{
	memset(out, 0, sizeof(*out));
	out->id.rank = (int)(int64_t)ckpt__get64(q);
	q += 8;
	memcpy(out->id.run_id, q, sizeof(out->id.run_id));
	out->id.run_id[sizeof(out->id.run_id) - 1] = 0;
	q += 64;
	memcpy(out->id.store_id, q, CKPT_STORE_ID_MAX);
	out->id.store_id[CKPT_STORE_ID_MAX - 1] = 0;
	q += CKPT_STORE_ID_MAX;
	memcpy(out->id.host, q, CKPT_HOST_MAX);
	out->id.host[CKPT_HOST_MAX - 1] = 0;
	q += CKPT_HOST_MAX;
	memcpy(out->path, q, CKPT_PATH_MAX);
	out->path[CKPT_PATH_MAX - 1] = 0;
	return q + CKPT_PATH_MAX;
}

static int send_ack(ckpt_session *s, qe_comm *comm, int q, int64_t id, int rc, const ckpt_copy_store *mem,
		    const char *why)
{
	unsigned char *b = calloc(1, ACK_BYTES);
	if (!b)
		return qe_fail(QE_ENOMEM, "replicas: out of memory");
	ckpt__put64(b, REPL_MAGIC);
	ckpt__put64(b + 8, (uint64_t)id);
	ckpt__put64(b + 16, (uint64_t)(int64_t)rc);
	unsigned char *p = put_store(b + 24, &s->ident, s->store_dir);
	p = put_store(p, &mem->id, mem->path);
	snprintf((char *)p, CKPT_MSG, "%s", why ? why : "");
	int src = qe_pstate_svc_send(comm, q, CKPT_SVC_REPL_ACK, b, ACK_BYTES);
	free(b);
	if (src)
		return qe_fail_ctx(src, "replicas: rank %d answering rank %d", s->rank, q);
	return QE_OK;
}

/* Target t's answer: OUT out[0] its disk store, out[1] its memory store (store_id "" when none). */
static int read_ack(ckpt_session *s, qe_comm *comm, int t, int64_t id, ckpt_copy_store out[ACK_STORES])
{
	void *msg = NULL;
	size_t len = 0;
	int rc = qe_pstate_svc_recv(comm, t, CKPT_SVC_REPL_ACK, &msg, &len);
	if (rc)
		return qe_fail_ctx(rc, "replicas: rank %d on '%s' waiting for rank %d on '%s' to keep its copy", s->rank,
				   s->host, t, s->repl->host[t]);
	unsigned char *p = msg;
	if (len != ACK_BYTES || ckpt__get64(p) != REPL_MAGIC || (int64_t)ckpt__get64(p + 8) != id) {
		free(msg);
		return qe_fail(QE_ECOMM, "replicas: rank %d answered %zu bytes that are no acknowledgement of checkpoint %lld",
			       t, len, (long long)id);
	}
	int theirs = (int)(int64_t)ckpt__get64(p + 16);
	const unsigned char *q = p + 24;
	for (int k = 0; k < ACK_STORES; k++)
		q = get_store(q, &out[k]);
	char why[CKPT_MSG];
	memcpy(why, q, CKPT_MSG);
	why[CKPT_MSG - 1] = 0;
	free(msg);
	if (theirs)
		return qe_fail(theirs, "rank %d on '%s' could not keep the copy of rank %d: %s", t, s->repl->host[t], s->rank,
			       why);
	for (int k = 0; k < ACK_STORES; k++)
		if ((k == 0 || out[k].id.store_id[0]) && (!out[k].id.store_id[0] || strcmp(out[k].id.run_id, s->run_id)))
			return qe_fail(QE_ECOMM, "replicas: rank %d acknowledged a copy in a store of run '%s' (id '%s')", t,
				       out[k].id.run_id, out[k].id.store_id);
	return QE_OK;
}

int ckpt__repl_finish(ckpt_session *s, qe_comm *comm, int64_t id, int own_rc, ckpt_copy_store **copies, int *ncopies)
{
	*copies = NULL;
	*ncopies = 0;
	if (!s->repl || (s->repl->ntargets == 0 && s->repl->nsources == 0))
		return own_rc;
	ckpt_repl *m = s->repl;
	char own_why[CKPT_MSG];
	snprintf(own_why, sizeof(own_why), "%s", own_rc ? qe_last_error() : "");
	int rc = QE_OK;

	/* 1. The end of this rank's stream to each target, with its outcome. */
	unsigned char end[HDR];
	ckpt__put64(end, REPL_MAGIC);
	ckpt__put64(end + 8, (uint64_t)id);
	ckpt__put64(end + 16, REPL_END);
	ckpt__put64(end + 24, (uint64_t)(int64_t)own_rc);
	ckpt__put64(end + 32, 0);
	for (int j = 0; j < m->ntargets && !rc; j++)
		if ((rc = qe_pstate_svc_send(comm, m->targets[j], CKPT_SVC_REPL, end, sizeof(end))))
			rc = qe_fail_ctx(rc, "replicas: rank %d ending its copy to rank %d", s->rank, m->targets[j]);

	/* 2. Keep every source's copy: read each to its end, flush once, acknowledge each. */
	int keep_rc = QE_OK, any = 0;
	char keep_why[CKPT_MSG] = "";
	int *theirs = calloc((size_t)m->nsources + 1, sizeof(int));
	if (!theirs && !rc)
		rc = qe_fail(QE_ENOMEM, "replicas: out of memory");
	for (int i = 0; i < m->nsources && !rc; i++) {
		int got = 0;
		int drc = drain_source(s, comm, m->sources[i], id, &theirs[i], &got);
		if (drc && qe_pstate_comm_failed(comm)) {
			rc = drc;
			break;
		}
		if (drc && !keep_rc) {
			keep_rc = drc;
			snprintf(keep_why, sizeof(keep_why), "%s", qe_last_error());
		}
		any += got;
	}
	if (!rc && !keep_rc && any) {
		ckpt__maybe_kill(s, "replsync", s->rank);
		if ((keep_rc = store_sync(s->st))) {
			qe_fail_ctx(keep_rc, "replicas: rank %d on '%s' flushing the copies in its store '%s'", s->rank, s->host,
				    s->store_dir);
			snprintf(keep_why, sizeof(keep_why), "%s", qe_last_error());
		} else {
			ckpt__maybe_kill(s, "replsynced", s->rank);
		}
	}
	/* The memory tier: named in the answer only when every chunk of every source reached memory. */
	ckpt_copy_store mem;
	memset(&mem, 0, sizeof(mem));
	if (!rc && !keep_rc && any)
		ckpt__mem_finish(s, id, &mem);
	for (int i = 0; i < m->nsources && !rc; i++)
		rc = send_ack(s, comm, m->sources[i], id, keep_rc, &mem, keep_why);
	free(theirs);

	/* 3. Every target's acknowledgement: the stores (disk, and memory) that now hold this rank's chunks. */
	ckpt_copy_store *v = calloc((size_t)m->ntargets * ACK_STORES + 1, sizeof(*v));
	if (!v && !rc)
		rc = qe_fail(QE_ENOMEM, "replicas: out of memory");
	int ack_rc = QE_OK, nv = 0;
	char ack_why[CKPT_MSG] = "";
	for (int j = 0; j < m->ntargets && !rc; j++) {
		ckpt_copy_store got[ACK_STORES];
		int arc = read_ack(s, comm, m->targets[j], id, got);
		if (arc && qe_pstate_comm_failed(comm))
			rc = arc;
		else if (arc && !ack_rc) {
			ack_rc = arc;
			snprintf(ack_why, sizeof(ack_why), "%s", qe_last_error());
		}
		for (int k = 0; !arc && k < ACK_STORES; k++)
			if (got[k].id.store_id[0])
				v[nv++] = got[k];
	}
	if (rc) {
		free(v);
		return rc;
	}
	if (own_rc) {
		free(v);
		return qe_fail(own_rc, "%s", own_why);
	}
	if (ack_rc || keep_rc) {
		free(v);
		return qe_fail(ack_rc ? ack_rc : keep_rc, "%s", ack_rc ? ack_why : keep_why);
	}
	ckpt__maybe_kill(s, "replack", s->rank);
	*copies = v;
	*ncopies = nv;
	return QE_OK;
}
