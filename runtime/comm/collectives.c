/*
 * collectives.c - barrier, deterministic all-reduce, broadcasts and gather
 * over plain host memory, built on the transport's collective lane.
 *
 * Everything is rooted and sequential on purpose: the all-reduce sums on the
 * group's first rank in group order and sends the bytes back, so the result
 * does not depend on arrival order and is bitwise the same on every member
 * (the data-parallel replicas must hold identical weights).  The sizes here
 * (gradients of the cpu backend, a few ranks) do not call for rings or trees.
 * Each step carries its own tag, so ranks that call different collectives
 * fail with a message naming both instead of mixing data.
 */
#include "runtime/comm/comm_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

int qe_comm_barrier(qe_comm *c)
{
	int rc;
	if (c->world == 1)
		return 0;
	if (c->rank != 0) {
		rc = qe_comm_post(c, 0, QE_KIND_COLL, QE_COLL_BARRIER_IN, NULL, 0);
		return rc ? rc : qe_comm_take(c, 0, QE_LANE_COLL, QE_COLL_BARRIER_OUT, 0, &rc, NULL, NULL);
	}
	for (int r = 1; r < c->world; r++)
		if ((rc = qe_comm_take(c, r, QE_LANE_COLL, QE_COLL_BARRIER_IN, 0, &rc, NULL, NULL)))
			return rc;
	for (int r = 1; r < c->world; r++)
		if ((rc = qe_comm_post(c, r, QE_KIND_COLL, QE_COLL_BARRIER_OUT, NULL, 0)))
			return rc;
	return 0;
}

/* Check a group: members in range, distinct, the caller among them. */
static int check_group(qe_comm *c, const int *group, int size)
{
	int self_in = 0;
	if (size < 1 || size > c->world)
		return qe_fail(QE_EINVAL, "rank %d: allreduce group of %d ranks in a world of %d", c->rank, size, c->world);
	for (int i = 0; i < size; i++) {
		if (group[i] < 0 || group[i] >= c->world)
			return qe_fail(QE_EINVAL, "rank %d: allreduce group member %d is not a rank (world size %d)", c->rank,
				       group[i], c->world);
		for (int j = 0; j < i; j++)
			if (group[j] == group[i])
				return qe_fail(QE_EINVAL, "rank %d: allreduce group lists rank %d twice", c->rank, group[i]);
		self_in |= group[i] == c->rank;
	}
	if (!self_in)
		return qe_fail(QE_EINVAL, "rank %d: called allreduce for a group it is not in", c->rank);
	return 0;
}

int qe_comm_allreduce_sum_f32(qe_comm *c, float *buf, size_t n, const int *group, int group_size)
{
	int *all = NULL, rc, root;
	size_t bytes;
	if (!c || (!buf && n))
		return qe_fail(QE_EINVAL, "allreduce: NULL comm or buffer");
	if (n > SIZE_MAX / sizeof(float))
		return qe_fail(QE_EINVAL, "rank %d: allreduce of %zu floats overflows", c->rank, n);
	bytes = n * sizeof(float);
	if (!group) {
		all = malloc((size_t)c->world * sizeof(int));
		if (!all)
			return qe_fail(QE_ENOMEM, "rank %d: allreduce group", c->rank);
		for (int r = 0; r < c->world; r++)
			all[r] = r;
		group = all;
		group_size = c->world;
	}
	rc = check_group(c, group, group_size);
	if (rc)
		goto free_gathered;
	root = group[0];
	if (group_size == 1)
		goto free_gathered;
	if (c->rank != root) {
		rc = qe_comm_post(c, root, QE_KIND_COLL, QE_COLL_ALLREDUCE_IN, buf, bytes);
		if (!rc)
			rc = qe_comm_take(c, root, QE_LANE_COLL, QE_COLL_ALLREDUCE_OUT, bytes, buf ? (void *)buf : &rc,
					  NULL, NULL);
		goto free_gathered;
	}
	/* Root: acc = x[g0]; acc += x[g1]; acc += x[g2]; ... element by element. */
	for (int i = 1; i < group_size; i++) {
		void *part = NULL;
		const float *x;
		rc = qe_comm_take(c, group[i], QE_LANE_COLL, QE_COLL_ALLREDUCE_IN, bytes, NULL, &part, NULL);
		if (rc)
			goto free_gathered;
		x = part;
		for (size_t k = 0; k < n; k++)
			buf[k] += x[k];
		free(part);
	}
	for (int i = 1; i < group_size; i++)
		if ((rc = qe_comm_post(c, group[i], QE_KIND_COLL, QE_COLL_ALLREDUCE_OUT, buf, bytes)))
			goto free_gathered;
free_gathered:
	free(all);
	return rc;
}

int qe_comm_bcast(qe_comm *c, int root, void *buf, size_t n)
{
	int rc;
	if (!c || (!buf && n))
		return qe_fail(QE_EINVAL, "bcast: NULL comm or buffer");
	if (root < 0 || root >= c->world)
		return qe_fail(QE_EINVAL, "rank %d: bcast root %d is not a rank (world size %d)", c->rank, root, c->world);
	if (c->rank != root)
		return qe_comm_take(c, root, QE_LANE_COLL, QE_COLL_BCAST, n, buf ? buf : (void *)&rc, NULL, NULL);
	for (int r = 0; r < c->world; r++)
		if (r != root && (rc = qe_comm_post(c, r, QE_KIND_COLL, QE_COLL_BCAST, buf, n)))
			return rc;
	return 0;
}

int qe_comm_bcast_blob(qe_comm *c, const void *blob, size_t n, void **out, size_t *out_n)
{
	int rc;
	*out = NULL;
	*out_n = 0;
	if (c->rank != 0)
		return qe_comm_take(c, 0, QE_LANE_COLL, QE_COLL_BLOB, SIZE_MAX, NULL, out, out_n);
	if (!blob && n)
		return qe_fail(QE_EINVAL, "rank 0: bcast_blob of %zu bytes from NULL", n);
	for (int r = 1; r < c->world; r++)
		if ((rc = qe_comm_post(c, r, QE_KIND_COLL, QE_COLL_BLOB, blob, n)))
			return rc;
	*out = malloc(n ? n : 1);
	if (!*out)
		return qe_fail(QE_ENOMEM, "rank 0: copy of a %zu-byte blob", n);
	if (n)
		memcpy(*out, blob, n);
	*out_n = n;
	return 0;
}

void qe_comm_blobs_free(qe_comm_blob *blobs, int count)
{
	if (!blobs)
		return;
	for (int i = 0; i < count; i++)
		free(blobs[i].data);
	free(blobs);
}

int qe_comm_gather_blobs(qe_comm *c, const void *blob, size_t n, qe_comm_blob **out)
{
	qe_comm_blob *all;
	int rc;
	*out = NULL;
	if (!blob && n)
		return qe_fail(QE_EINVAL, "rank %d: gather of %zu bytes from NULL", c->rank, n);
	if (c->rank != 0)
		return qe_comm_post(c, 0, QE_KIND_COLL, QE_COLL_GATHER, blob, n);
	all = calloc((size_t)c->world, sizeof(*all));
	if (!all || !(all[0].data = malloc(n ? n : 1))) {
		free(all);
		return qe_fail(QE_ENOMEM, "rank 0: gather of %d blobs", c->world);
	}
	if (n)
		memcpy(all[0].data, blob, n);
	all[0].size = n;
	for (int r = 1; r < c->world; r++) {
		rc = qe_comm_take(c, r, QE_LANE_COLL, QE_COLL_GATHER, SIZE_MAX, NULL, &all[r].data, &all[r].size);
		if (rc) {
			qe_comm_blobs_free(all, c->world);
			return rc;
		}
	}
	*out = all;
	return 0;
}
