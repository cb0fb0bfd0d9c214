/*
 * replicas.c - the data-parallel guard: after an optimizer commit every
 * replica of a pipeline rank must hold byte-identical parameters.  Each rank
 * hashes its parameters (XXH3-64 per local stage), rank 0 gathers the hashes
 * and compares replicas, and every rank learns the verdict.
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
} replica_report;

static int hash_params(qe_rank *r, replica_report *rep)
{
	memset(rep, 0, sizeof(*rep));
	rep->pr = r->pr;
	rep->dr = r->dr;
	rep->nstages = r->V;
	for (int c = 0; c < r->V; c++) {
		qe_stage *st = r->chunks[c].st;
		size_t n = qe_stage_param_floats(st) * 4;
		const void *p = qe_stage_params(st);
		void *host = NULL;
		if (r->b->ops->device != QE_DEV_CPU) {
			host = malloc(n);
			if (!host)
				return qe_fail(QE_ENOMEM, "replica check: out of memory");
			int rc = r->b->ops->copy(NULL, host, p, n, QE_COPY_D2H);
			if (rc) {
				free(host);
				return rc;
			}
			p = host;
		}
		rep->stage[c] = r->chunks[c].stage;
		rep->hash[c] = XXH3_64bits(p, n);
		free(host);
	}
	return QE_OK;
}

int qe_rank_check_replicas(qe_rank *r)
{
	if (r->D == 1 || !r->comm)
		return QE_OK;
	replica_report mine;
	int rc = hash_params(r, &mine);
	if (rc)
		return rc;
	qe_comm_blob *all = NULL;
	if ((rc = qe_comm_gather_blobs(r->comm, &mine, sizeof(mine), &all)))
		return rc;
	char verdict[256] = "";
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
		qe_comm_blobs_free(all, r->world);
	}
	if ((rc = qe_comm_bcast(r->comm, 0, verdict, sizeof(verdict))))
		return rc;
	return verdict[0] ? qe_fail(QE_EMISMATCH, "%s", verdict) : QE_OK;
}
