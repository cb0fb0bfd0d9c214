/*
 * replicas.c - the copies guard (--check-replicas): after an optimizer
 * commit every replica of a pipeline rank must hold byte-identical
 * parameters, and with tied embeddings the first stage's wte and the last
 * stage's head must be byte-identical too.  Each rank hashes its parameters
 * (XXH3-64 per local stage, and each tied copy it holds), rank 0 gathers the
 * hashes and compares, and every rank learns the verdict.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "runtime/exec/rank_int.h"
#include "runtime/core/status.h"

typedef struct replica_report {
	int32_t pr, dr, nstages;
	int32_t stage[QE_RANK_MAX_CHUNKS];
	uint64_t hash[QE_RANK_MAX_CHUNKS];
	int32_t has_wte, has_head; /* tied embeddings: the copies this rank holds */
	uint64_t wte_hash, head_hash;
} replica_report;

/* XXH3-64 of floats [off, off + n) of backend memory p (copied to the host first when it is not host memory). */
static int hash_floats(qe_rank *r, const float *p, int64_t n, uint64_t *out)
{
	size_t bytes = (size_t)n * 4;
	void *host = NULL;
	if (r->b->ops->device != QE_DEV_CPU) {
		if (!(host = malloc(bytes)))
			return qe_fail(QE_ENOMEM, "copies check: out of host memory for %zu bytes", bytes);
		int rc = r->b->ops->copy(NULL, host, p, bytes, QE_COPY_D2H);
		if (rc) {
			free(host);
			return rc;
		}
		p = host;
	}
	*out = XXH3_64bits(p, bytes);
	free(host);
	return QE_OK;
}

/* The hash of parameter i of local stage st. */
static int hash_param(qe_rank *r, qe_stage *st, int i, uint64_t *out)
{
	const qe_param_info *pi = qe_stage_param(st, i);
	return hash_floats(r, qe_stage_params(st) + pi->offset, pi->rows * pi->cols, out);
}

static int hash_params(qe_rank *r, replica_report *rep)
{
	memset(rep, 0, sizeof(*rep));
	rep->pr = r->pr;
	rep->dr = r->dr;
	rep->nstages = r->V;
	for (int c = 0; c < r->V; c++) {
		qe_stage *st = r->chunks[c].st;
		rep->stage[c] = r->chunks[c].stage;
		QE_TRY(hash_floats(r, qe_stage_params(st), qe_stage_param_floats(st), &rep->hash[c]));
	}
	if (r->tie.wte >= 0) {
		rep->has_wte = 1;
		QE_TRY(hash_param(r, qe__rank_chunk_of_stage(r, 0)->st, r->tie.wte, &rep->wte_hash));
	}
	if (r->tie.head >= 0) {
		rep->has_head = 1;
		QE_TRY(hash_param(r, qe__rank_chunk_of_stage(r, r->S - 1)->st, r->tie.head, &rep->head_hash));
	}
	return QE_OK;
}

static void tie_verdict(const qe_rank *r, int dr, int wte_rank, int head_rank, char *verdict, size_t len)
{
	snprintf(verdict, len,
		 "tied embeddings diverged after step %lld: replica %d's wte (stage 0, rank %d) and head (stage %d, "
		 "rank %d) are no longer the same bytes",
		 (long long)r->steps, dr, wte_rank, r->S - 1, head_rank);
}

int qe_rank_check_replicas(qe_rank *r)
{
	if (!r->tie.on && (r->D == 1 || !r->comm))
		return QE_OK;
	replica_report mine;
	int rc = hash_params(r, &mine);
	if (rc)
		return rc;
	char verdict[256] = "";
	if (!r->comm || r->world == 1) {
		if (mine.wte_hash != mine.head_hash)
			tie_verdict(r, 0, 0, 0, verdict, sizeof(verdict));
		return verdict[0] ? qe_fail(QE_EMISMATCH, "%s", verdict) : QE_OK;
	}
	qe_comm_blob *all = NULL;
	if ((rc = qe_comm_gather_blobs(r->comm, &mine, sizeof(mine), &all)))
		return rc;
	if (r->rank == 0) {
		for (int i = 0; i < r->world && !verdict[0]; i++) {
			const replica_report *a = all[i].data;
			const replica_report *ref = all[a->pr].data; /* replica 0 of the same pipeline rank */
			for (int c = 0; c < a->nstages; c++)
				if (a->hash[c] != ref->hash[c]) {
					snprintf(verdict, sizeof(verdict),
						 "data-parallel replicas diverged after step %lld: stage %d parameters of "
						 "replica %d (rank %d) differ from replica 0 (rank %d)",
						 (long long)r->steps, a->stage[c], a->dr, i, a->pr);
					break;
				}
		}
		/* each replica's two tied copies */
		for (int d = 0; d < r->D && r->tie.on && !verdict[0]; d++) {
			int we = -1, he = -1;
			for (int i = 0; i < r->world; i++) {
				const replica_report *a = all[i].data;
				if (a->dr == d && a->has_wte)
					we = i;
				if (a->dr == d && a->has_head)
					he = i;
			}
			if (we >= 0 && he >= 0 &&
			    ((const replica_report *)all[we].data)->wte_hash != ((const replica_report *)all[he].data)->head_hash)
				tie_verdict(r, d, we, he, verdict, sizeof(verdict));
		}
		qe_comm_blobs_free(all, r->world);
	}
	if ((rc = qe_comm_bcast(r->comm, 0, verdict, sizeof(verdict))))
		return rc;
	return verdict[0] ? qe_fail(QE_EMISMATCH, "%s", verdict) : QE_OK;
}
