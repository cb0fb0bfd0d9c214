/*
 * arena.c - the matrix-gradient arena: every gradient destination complete,
 * and written exactly once per microbatch.
 *
 * dW runs deferred, possibly replayed from a captured graph whose destination
 * addresses were fixed at capture.  Two layouts:
 *
 *  - accumulate (the default): one view per local matrix parameter.  The dW
 *    of microbatch 0 writes it (GEMM beta = 0), every later microbatch adds
 *    into it (beta = 1: view = view + dW_m, one fp32 rounding per add).  The
 *    capacity does not grow with M.  The sum order ((g0 + g1) + g2) + ... is
 *    the optimizer's ordered reduction of the per-microbatch layout, so both
 *    give the same bits - provided the writes come in ascending microbatch
 *    order, which every schedule guarantees (sched_validate.c checks it) and
 *    this file enforces: a write of mb m before mb m-1 of the same parameter
 *    is an "out-of-order arena write".
 *  - per-mb: one view per (parameter, microbatch); the optimizer reduces the
 *    M views in microbatch order, so any dW order gives the same result.
 *
 * Both keep one written bit per (parameter, microbatch) - the mask of a view
 * - so a duplicate or missing write is caught before the optimizer consumes
 * the arena, and both check every bound destination against its view
 * (shape, dtype, device, address: a captured pointer into another view is an
 * aliased write).
 *
 * Layout in memory: parameter-major; the views of a parameter (M or 1)
 * follow each other, each rounded up to QE_ARENA_ALIGN bytes.
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
	size_t offset; /* of the view of microbatch 0 (the only one when accumulating) */
};

struct qe_arena {
	int np, M;
	int nv; /* views per parameter: M (per-mb) or 1 (accumulate) */
	qe_arena_layout layout;
	qe_arena_mode mode;
	qe_device dev;
	char *base;
	struct arena_param *p;
	unsigned char *written; /* np * M, parameter-major: the per-view masks */
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

static const char *layout_names[] = { "per-mb", "accumulate" };

const char *qe_arena_layout_name(qe_arena_layout l)
{
	return (unsigned)l < 2 ? layout_names[l] : "?";
}

int qe_arena_layout_parse(const char *s, qe_arena_layout *out)
{
	for (int i = 0; i < 2; i++)
		if (s && strcmp(s, layout_names[i]) == 0) {
			*out = (qe_arena_layout)i;
			return QE_OK;
		}
	return qe_fail(QE_EINVAL, "arena: unknown layout '%s' (per-mb or accumulate)", s ? s : "(null)");
}

static int views_per_param(qe_arena_layout layout, int M)
{
	return layout == QE_ARENA_ACCUMULATE ? 1 : M;
}

size_t qe_arena_bytes(const qe_arena_param *params, int nparams, int M, qe_arena_layout layout)
{
	if (check_params(params, nparams, M) || (layout != QE_ARENA_PER_MB && layout != QE_ARENA_ACCUMULATE))
		return 0;
	size_t total = 0, nv = (size_t)views_per_param(layout, M);
	for (int i = 0; i < nparams; i++)
		total += nv * align_up((size_t)params[i].rows * (size_t)params[i].cols * sizeof(float));
	return total;
}

int qe_arena_create(const qe_arena_param *params, int nparams, int M, qe_arena_layout layout, qe_arena_mode mode,
		    void *base, size_t bytes, qe_device dev, qe_arena **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "arena: no output pointer");
	*out = NULL;
	int rc = check_params(params, nparams, M);
	if (rc)
		return rc;
	if (layout != QE_ARENA_PER_MB && layout != QE_ARENA_ACCUMULATE)
		return qe_fail(QE_EINVAL, "arena: unknown layout %d", (int)layout);
	if (mode != QE_ARENA_DIRECT && mode != QE_ARENA_COPY)
		return qe_fail(QE_EINVAL, "arena: unknown mode %d", (int)mode);
	for (int i = 0; i < nparams; i++)
		if (params[i].device != dev)
			return qe_fail(QE_EINVAL, "arena: param '%s' is on %s, the arena on %s", params[i].name,
				       params[i].device == QE_DEV_CUDA ? "cuda" : "cpu",
				       dev == QE_DEV_CUDA ? "cuda" : "cpu");
	size_t need = qe_arena_bytes(params, nparams, M, layout);
	int nv = views_per_param(layout, M);
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
		off += (size_t)nv * p->stride;
		view_bytes += (size_t)nv * p->bytes;
	}
	a->np = nparams;
	a->M = M;
	a->nv = nv;
	a->layout = layout;
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

qe_arena_layout qe_arena_get_layout(const qe_arena *arena)
{
	return arena ? arena->layout : QE_ARENA_PER_MB;
}

int qe_arena_nviews(const qe_arena *arena)
{
	return arena ? arena->nv : 0;
}

int qe_arena_accumulates(const qe_arena *arena, int m)
{
	if (!arena || m < 0 || m >= arena->M)
		return -1;
	return arena->layout == QE_ARENA_ACCUMULATE && m > 0;
}

const char *qe_arena_param_name(const qe_arena *arena, int p)
{
	return arena && p >= 0 && p < arena->np ? arena->p[p].name : "?";
}

/* The view microbatch m writes: its own (per-mb) or the parameter's one (accumulate). */
static int view_index(const qe_arena *a, int m)
{
	return a->layout == QE_ARENA_ACCUMULATE ? 0 : m;
}

/* View number v (0..nv-1) of parameter p. */
static char *view_at(const qe_arena *a, int p, int v)
{
	return a->base + a->p[p].offset + (size_t)v * a->p[p].stride;
}

static char *view_ptr(const qe_arena *a, int p, int m)
{
	return view_at(a, p, view_index(a, m));
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
		for (int n = 0; n < arena->nv; n++) {
			if (q == p && n == view_index(arena, m))
				continue;
			uintptr_t v0 = (uintptr_t)view_at(arena, q, n), v1 = v0 + arena->p[q].bytes;
			if (d0 < v1 && v0 < d1) {
				char other[48];
				if (arena->layout == QE_ARENA_ACCUMULATE)
					snprintf(other, sizeof(other), "(accumulating, all mbs)");
				else
					snprintf(other, sizeof(other), "mb %d", n);
				return qe_fail(QE_EARENA,
					       "aliased arena write: destination of %s mb %d at %p overlaps the view of "
					       "%s %s at %p (expected %p)",
					       name, m, dest->data, arena->p[q].name, other, (void *)v0, v.data);
			}
		}
	}
	return qe_fail(QE_EARENA, "arena bind %s mb %d: destination at %p is not the view at %p", name, m, dest->data,
		       v.data);
}

/* Microbatches of p written this step (accumulate: mbs 0..n-1, in that order). */
static int written_count(const qe_arena *a, int p)
{
	int n = 0;
	for (int m = 0; m < a->M; m++)
		n += a->written[(size_t)p * a->M + m];
	return n;
}

/* Duplicate, then (accumulating) the ascending order: the write of mb m must be the next one. */
static int check_unwritten(const qe_arena *arena, int p, int m)
{
	if (arena->written[(size_t)p * arena->M + m])
		return qe_fail(QE_EARENA, "duplicate arena write: %s mb %d was already written this step",
			       arena->p[p].name, m);
	if (arena->layout == QE_ARENA_ACCUMULATE) {
		int next = written_count(arena, p);
		if (m != next) {
			char held[48];
			if (next == 0)
				snprintf(held, sizeof(held), "no microbatch yet");
			else
				snprintf(held, sizeof(held), "mbs 0..%d", next - 1);
			return qe_fail(QE_EARENA,
				       "out-of-order arena write: %s mb %d would %s the accumulating view, which holds "
				       "%s (the next write must be mb %d): a chunk's dW runs in ascending microbatch "
				       "order, or the fp32 sum order (and its bits) would change",
				       arena->p[p].name, m, m == 0 ? "initialize" : "add into", held, next);
		}
	}
	return QE_OK;
}

int qe_arena_write_check(const qe_arena *arena, int p, int m, const qe_tensor *dest)
{
	int rc = qe_arena_bind_check(arena, p, m, dest);
	if (rc)
		return rc;
	return check_unwritten(arena, p, m);
}

int qe_arena_write_commit(qe_arena *arena, int p, int m)
{
	if (!arena || p < 0 || p >= arena->np || m < 0 || m >= arena->M)
		return qe_fail(QE_EARENA, "arena write: no view (param %d, mb %d)", p, m);
	int rc = check_unwritten(arena, p, m);
	if (rc)
		return rc;
	arena->written[(size_t)p * arena->M + m] = 1;
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

int qe_arena_views_for(const qe_arena *arena, int p, const float **views, int *nviews)
{
	if (!arena || !views || p < 0 || p >= arena->np)
		return qe_fail(QE_EINVAL, "arena: no param %d", p);
	for (int v = 0; v < arena->nv; v++)
		views[v] = (const float *)view_at(arena, p, v);
	if (nviews)
		*nviews = arena->nv;
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
