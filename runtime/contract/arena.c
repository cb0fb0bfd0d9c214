/*
 * arena.c - the matrix-gradient arena: every gradient destination complete,
 * and written exactly once.
 *
 * dW runs deferred and out of order, possibly replayed from a captured graph
 * whose destination addresses were fixed at capture.  So the gradient of each
 * (local matrix parameter, microbatch) gets its own view at a fixed offset in
 * one caller-provided buffer, and the optimizer reduces the views in
 * microbatch order: the result does not depend on the order dW ran in.  The
 * arena checks every bound destination against its view (shape, dtype,
 * device, address: a captured pointer into the wrong view is an aliased
 * write), and keeps a written bit per view so a duplicate or missing write is
 * caught before the optimizer consumes the arena.
 *
 * Layout: parameter-major; the M views of a parameter follow each other, each
 * rounded up to QE_ARENA_ALIGN bytes.
 */
#include "runtime/contract/contract.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct arena_param {
	char *name;
	int64_t rows, cols;
	size_t bytes;  /* rows * cols * 4 */
	size_t stride; /* bytes rounded up to QE_ARENA_ALIGN */
	size_t offset; /* of the view of microbatch 0 */
};

struct qe_arena {
	int np, M;
	qe_arena_mode mode;
	qe_device dev;
	char *base;
	struct arena_param *p;
	unsigned char *written; /* np * M, parameter-major */
	qe_arena_stats st;
};

static size_t align_up(size_t n)
{
	return (n + QE_ARENA_ALIGN - 1) / QE_ARENA_ALIGN * QE_ARENA_ALIGN;
}

/* QE_OK when the description is usable; the message names the bad field. */
static int check_params(const qe_arena_param *params, int nparams, int M)
{
	if (nparams < 0 || (nparams > 0 && !params))
		return qe_fail(QE_EINVAL, "arena: %d params described", nparams);
	if (M < 1)
		return qe_fail(QE_EINVAL, "arena: %d microbatches configured (need >= 1)", M);
	for (int i = 0; i < nparams; i++) {
		const qe_arena_param *a = &params[i];
		const char *n = a->name ? a->name : "(unnamed)";
		if (!a->name || !a->name[0])
			return qe_fail(QE_EINVAL, "arena: param %d has no name", i);
		if (a->rows < 1 || a->cols < 1 || a->rows > (INT64_C(1) << 31) || a->cols > (INT64_C(1) << 31))
			return qe_fail(QE_EINVAL, "arena: param '%s' has shape [%lld,%lld]", n, (long long)a->rows,
				       (long long)a->cols);
		if (a->dtype != QE_F32)
			return qe_fail(QE_EUNSUPPORTED, "arena: param '%s' has dtype %s; gradients are f32", n,
				       qe_dtype_name(a->dtype));
	}
	return QE_OK;
}

size_t qe_arena_bytes(const qe_arena_param *params, int nparams, int M)
{
	if (check_params(params, nparams, M))
		return 0;
	size_t total = 0;
	for (int i = 0; i < nparams; i++)
		total += (size_t)M * align_up((size_t)params[i].rows * (size_t)params[i].cols * sizeof(float));
	return total;
}

int qe_arena_create(const qe_arena_param *params, int nparams, int M, qe_arena_mode mode, void *base,
		    size_t bytes, qe_device dev, qe_arena **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "arena: no output pointer");
	*out = NULL;
	int rc = check_params(params, nparams, M);
	if (rc)
		return rc;
	if (mode != QE_ARENA_DIRECT && mode != QE_ARENA_COPY)
		return qe_fail(QE_EINVAL, "arena: unknown mode %d", (int)mode);
	for (int i = 0; i < nparams; i++)
		if (params[i].device != dev)
			return qe_fail(QE_EINVAL, "arena: param '%s' is on %s, the arena on %s", params[i].name,
				       params[i].device == QE_DEV_CUDA ? "cuda" : "cpu",
				       dev == QE_DEV_CUDA ? "cuda" : "cpu");
	size_t need = qe_arena_bytes(params, nparams, M);
	if (need > 0 && !base)
		return qe_fail(QE_EINVAL, "arena: no base buffer for %zu bytes", need);
	if ((uintptr_t)base % QE_ARENA_ALIGN)
		return qe_fail(QE_EINVAL, "arena: base %p is not %d-byte aligned", base, QE_ARENA_ALIGN);
	if (bytes < need)
		return qe_fail(QE_EINVAL, "arena: base holds %zu bytes, the layout needs %zu", bytes, need);

	qe_arena *a = calloc(1, sizeof(*a));
	if (!a)
		goto fail_arena;
	a->p = calloc((size_t)(nparams ? nparams : 1), sizeof(*a->p));
	if (!a->p)
		goto fail_params;
	a->written = calloc((size_t)(nparams ? nparams : 1) * (size_t)M, 1);
	if (!a->written)
		goto fail_written;
	size_t off = 0, view_bytes = 0;
	for (int i = 0; i < nparams; i++) {
		struct arena_param *p = &a->p[i];
		p->name = strdup(params[i].name);
		if (!p->name)
			goto fail_names;
		p->rows = params[i].rows;
		p->cols = params[i].cols;
		p->bytes = (size_t)p->rows * (size_t)p->cols * sizeof(float);
		p->stride = align_up(p->bytes);
		p->offset = off;
		off += (size_t)M * p->stride;
		view_bytes += (size_t)M * p->bytes;
	}
	a->np = nparams;
	a->M = M;
	a->mode = mode;
	a->dev = dev;
	a->base = base;
	a->st.nparams = nparams;
	a->st.M = M;
	a->st.capacity_bytes = need;
	a->st.view_bytes = view_bytes;
	*out = a;
	return QE_OK;

fail_names:
	for (int i = 0; i < nparams; i++)
		free(a->p[i].name);
	free(a->written);
fail_written:
	free(a->p);
fail_params:
	free(a);
fail_arena:
	return qe_fail(QE_ENOMEM, "arena: out of memory for %d params", nparams);
}

void qe_arena_free(qe_arena *arena)
{
	if (!arena)
		return;
	for (int i = 0; i < arena->np; i++)
		free(arena->p[i].name);
	free(arena->p);
	free(arena->written);
	free(arena);
}

int qe_arena_nparams(const qe_arena *arena)
{
	return arena ? arena->np : 0;
}

int qe_arena_microbatches(const qe_arena *arena)
{
	return arena ? arena->M : 0;
}

qe_arena_mode qe_arena_get_mode(const qe_arena *arena)
{
	return arena ? arena->mode : QE_ARENA_DIRECT;
}

const char *qe_arena_param_name(const qe_arena *arena, int p)
{
	return arena && p >= 0 && p < arena->np ? arena->p[p].name : "?";
}

static char *view_ptr(const qe_arena *a, int p, int m)
{
	return a->base + a->p[p].offset + (size_t)m * a->p[p].stride;
}

static qe_tensor view_of(const qe_arena *a, int p, int m)
{
	return qe_tensor_2d(view_ptr(a, p, m), QE_F32, a->dev, a->p[p].rows, a->p[p].cols);
}

int qe_arena_view(const qe_arena *arena, int p, int m, qe_tensor *out)
{
	if (!arena || !out || p < 0 || p >= arena->np || m < 0 || m >= arena->M)
		return qe_fail(QE_EINVAL, "arena: no view (param %d, mb %d) (%d params, %d microbatches)", p, m,
			       arena ? arena->np : 0, arena ? arena->M : 0);
	*out = view_of(arena, p, m);
	return QE_OK;
}

int qe_arena_bind_check(const qe_arena *arena, int p, int m, const qe_tensor *dest)
{
	if (!arena || !dest)
		return qe_fail(QE_EINVAL, "arena bind: NULL argument");
	if (p < 0 || p >= arena->np || m < 0 || m >= arena->M)
		return qe_fail(QE_EARENA, "arena bind: no view (param %d, mb %d): the arena has %d params x %d microbatches",
			       p, m, arena->np, arena->M);
	const char *name = arena->p[p].name;
	qe_tensor v = view_of(arena, p, m);
	char what[160];
	snprintf(what, sizeof(what), "arena bind %s mb %d", name, m);
	int rc = qe_tensor_check_same(&v, dest, what);
	if (rc)
		return rc;
	if (dest->data == v.data)
		return QE_OK;
	/* Not its own view: is it inside another one?  That is the aliased write. */
	uintptr_t d0 = (uintptr_t)dest->data, d1 = d0 + arena->p[p].bytes;
	for (int q = 0; q < arena->np; q++) {
		for (int n = 0; n < arena->M; n++) {
			if (q == p && n == m)
				continue;
			uintptr_t v0 = (uintptr_t)view_ptr(arena, q, n), v1 = v0 + arena->p[q].bytes;
			if (d0 < v1 && v0 < d1)
				return qe_fail(QE_EARENA,
					       "aliased arena write: destination of %s mb %d at %p overlaps the view of "
					       "%s mb %d at %p (expected %p)",
					       name, m, dest->data, arena->p[q].name, n, (void *)v0, v.data);
		}
	}
	return qe_fail(QE_EARENA, "arena bind %s mb %d: destination at %p is not the view at %p", name, m, dest->data,
		       v.data);
}

int qe_arena_write_check(const qe_arena *arena, int p, int m, const qe_tensor *dest)
{
	int rc = qe_arena_bind_check(arena, p, m, dest);
	if (rc)
		return rc;
	if (arena->written[(size_t)p * arena->M + m])
		return qe_fail(QE_EARENA, "duplicate arena write: %s mb %d was already written this step",
			       arena->p[p].name, m);
	return QE_OK;
}

int qe_arena_write_commit(qe_arena *arena, int p, int m)
{
	if (!arena || p < 0 || p >= arena->np || m < 0 || m >= arena->M)
		return qe_fail(QE_EARENA, "arena write: no view (param %d, mb %d)", p, m);
	unsigned char *w = &arena->written[(size_t)p * arena->M + m];
	if (*w)
		return qe_fail(QE_EARENA, "duplicate arena write: %s mb %d was already written this step",
			       arena->p[p].name, m);
	*w = 1;
	arena->st.writes_this_step++;
	arena->st.total_writes++;
	return QE_OK;
}

int qe_arena_is_written(const qe_arena *arena, int p, int m)
{
	if (!arena || p < 0 || p >= arena->np || m < 0 || m >= arena->M)
		return -1;
	return arena->written[(size_t)p * arena->M + m];
}

int qe_arena_check_complete(const qe_arena *arena)
{
	if (!arena)
		return qe_fail(QE_EINVAL, "arena: NULL");
	char list[800];
	size_t len = 0;
	int missing = 0, cut = 0, total = arena->np * arena->M;
	list[0] = '\0';
	for (int p = 0; p < arena->np; p++) {
		for (int m = 0; m < arena->M; m++) {
			if (arena->written[(size_t)p * arena->M + m])
				continue;
			if (len < sizeof(list) - 200)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s(%s, mb %d)",
							missing ? ", " : "", arena->p[p].name, m);
			else if (!cut++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, ", ...");
			if (len >= sizeof(list))
				len = sizeof(list) - 1;
			missing++;
		}
	}
	if (missing)
		return qe_fail(QE_EARENA, "incomplete arena: %d of %d views not written: %s", missing, total, list);
	return QE_OK;
}

int qe_arena_views_for(const qe_arena *arena, int p, const float **views)
{
	if (!arena || !views || p < 0 || p >= arena->np)
		return qe_fail(QE_EINVAL, "arena: no param %d", p);
	for (int m = 0; m < arena->M; m++)
		views[m] = (const float *)view_ptr(arena, p, m);
	return QE_OK;
}

void qe_arena_step_reset(qe_arena *arena)
{
	if (!arena)
		return;
	memset(arena->written, 0, (size_t)(arena->np ? arena->np : 1) * (size_t)arena->M);
	arena->st.writes_this_step = 0;
	arena->st.steps++;
}

void qe_arena_get_stats(const qe_arena *arena, qe_arena_stats *out)
{
	if (arena)
		*out = arena->st;
	else
		memset(out, 0, sizeof(*out));
}
