/*
 * cpu_backend.c - the cpu op table: memory, streams, events, capture/replay,
 * and the argument checks of every op.
 *
 * Every op goes through one path: pack its arguments into a cpu_op, check
 * them, then either execute it (eager) or append a copy to the stream's
 * capture (graph).  Capture stores pointers, never data, and copies the
 * pointer arrays (AdamW gradient views, summed views, the items of
 * fp8_update_many) so the caller may reuse its array; replay runs the
 * recorded ops in order on the launching stream.
 * This is what CUDA stream capture does, and it lets graph-mode code paths be
 * tested without a GPU: an op that reads a buffer before it is written, or
 * memory allocated during capture, misbehaves here as it would on a GPU.
 *
 * cpu work is synchronous, so events and waits are bookkeeping: an event
 * holds the count of ops its stream had completed when it was recorded.
 * After any failure a stream stays failed and every later call on it returns
 * the first error (STYLE.md 4) until it is destroyed.
 *
 * A NULL stream is the default stream (backend.h): the op runs at once on a
 * throw-away stream state, with no sticky failure.  Like CUDA's legacy stream
 * under global capture mode, it is refused while any cpu stream in the
 * process captures.
 *
 * Device links (one local socket each, so the executor's device-link path
 * runs without a GPU) live in cpu_link.c.
 */
#include "runtime/backend/cpu/cpu_backend.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "runtime/backend/cpu/cpu_int.h"
#include "runtime/backend/cpu/cpu_link.h"
#include "runtime/backend/backend_check.h"

typedef enum cpu_op_kind {
	OP_COPY,
	OP_FILL,
	OP_EVENT_RECORD,
	OP_STREAM_WAIT,
	OP_CAST,
	OP_FP8_UPDATE,
	OP_FP8_UPDATE_MANY,
	OP_GEMM,
	OP_ADD,
	OP_ADD_INPLACE,
	OP_BIAS_GRAD,
	OP_GELU_FWD,
	OP_GELU_BWD,
	OP_LN_FWD,
	OP_LN_BWD,
	OP_EMBED_FWD,
	OP_EMBED_BWD,
	OP_ATTN_FWD,
	OP_ATTN_BWD,
	OP_FLASH_FWD,
	OP_FLASH_BWD,
	OP_XENT,
	OP_ADAMW,
	OP_SUM_VIEWS,
	OP_KIND_COUNT
} cpu_op_kind;

static const char *const op_names[OP_KIND_COUNT] = {
	"copy",		 "fill",      "event_record", "stream_wait", "cast",	  "fp8_update",	   "fp8_update_many",
	"gemm",		 "add",	      "add_inplace",  "bias_grad",   "gelu_fwd",  "gelu_bwd",	   "layernorm_fwd",
	"layernorm_bwd", "embed_fwd", "embed_bwd",    "attn_fwd",    "attn_bwd",  "attn_flash_fwd",
	"attn_flash_bwd", "xent",     "adamw",	      "sum_views",
};

/* One op call with its arguments; pointer arrays are owned by the graph once recorded. */
typedef struct cpu_op {
	cpu_op_kind kind;
	union {
		struct {
			void *dst;
			const void *src;
			size_t bytes;
			qe_copy_kind kind;
		} copy;
		struct {
			void *dst;
			uint8_t byte;
			size_t bytes;
		} fill;
		qe_event *ev;
		qe_cast_args cast;
		struct {
			float *block;
			int history_len;
			qe_dtype fmt;
			qe_fp8_recipe recipe;
		} upd;
		struct {
			const qe_fp8_update_item *items;
			int n;
			int history_len;
			qe_fp8_recipe recipe;
		} updm;
		struct {
			qe_tensor a, b, c;
			const float *bias;
			int accumulate;
		} gemm;
		struct { /* add: y=a+b; add_inplace: y+=a; gelu_fwd: y=f(a); gelu_bwd: y=dx, a=x, b=dy */
			float *y;
			const float *a, *b;
			int64_t n;
		} ew;
		struct {
			float *db;
			const float *dy;
			int64_t rows, cols;
		} bg;
		struct {
			float *y, *mean, *rstd;
			const float *x, *w, *b;
			int64_t rows, cols;
		} lnf;
		struct {
			float *dx, *dw, *db;
			const float *dy, *x, *mean, *rstd, *w;
			int64_t rows, cols;
		} lnb;
		struct {
			float *out;
			const int32_t *tok;
			const float *wte, *wpe;
			int64_t T, H;
		} ef;
		struct {
			float *dwte, *dwpe;
			const int32_t *tok;
			const float *dout;
			int64_t T, H, V;
			int32_t *rows_written;
		} eb;
		struct {
			float *out, *probs;
			const float *qkv;
			int64_t T, H;
			int nh;
		} af;
		struct {
			float *dqkv;
			const float *dout, *qkv, *probs;
			int64_t T, H;
			int nh;
		} ab;
		struct {
			float *a, *b;               /* forward: out, lse; backward: dqkv, dout (const) */
			const float *qkv, *out, *lse; /* backward: out, lse */
			int64_t B, T, H;
			int nh;
		} fl;
		struct {
			float *loss, *dlogits;
			const float *logits;
			const int32_t *tgt;
			int64_t T, V, valid;
			float grad_scale;
		} xe;
		qe_adamw_args adamw;
		struct {
			float *out;
			const float *const *views;
			int nviews;
			int64_t n;
		} sv;
	} u;
} cpu_op;

typedef struct cpu_backend {
	qe_backend pub; /* first: a qe_backend * is a cpu_backend * */
	atomic_int capturing; /* streams of this backend now capturing */
	atomic_long live_allocs, live_streams, live_events, live_graphs;
} cpu_backend;

struct qe_graph {
	cpu_backend *be;
	cpu_op *ops;
	int n, cap;
};

struct qe_stream {
	cpu_backend *be;
	qe_graph *capture; /* non-NULL while capturing */
	int failed;        /* first error, sticky */
	char failmsg[512];
	uint64_t done;     /* ops executed on this stream */
	uint64_t waits;    /* stream_wait calls on recorded events */
	qe_cpu_scratch scratch;
};

struct qe_event {
	cpu_backend *be;
	int recorded;
	uint64_t seq;
};

static const qe_backend_ops cpu_ops;

/* Streams capturing in this process, over all cpu backends (default-stream rule). */
static atomic_int g_capturing;

/* ---- stream state -------------------------------------------------------- */

static int stream_fail(qe_stream *s, int rc)
{
	if (s && !s->failed) {
		s->failed = rc;
		snprintf(s->failmsg, sizeof(s->failmsg), "%s", qe_last_error());
	}
	return rc;
}

static int stream_check(qe_stream *s, const char *what)
{
	if (!s) {
		int n = atomic_load(&g_capturing);
		if (n > 0)
			return qe_fail(QE_ECAPTURE, "%s on the default (NULL) stream while %d cpu stream(s) capture", what, n);
		return QE_OK;
	}
	if (s->failed)
		return qe_fail(s->failed, "%s: cpu stream failed earlier (%s): %s", what, qe_errname(s->failed),
			       s->failmsg);
	return QE_OK;
}

/* Links (cpu_link.c) run outside the op list but keep the streams' rules. */
int qe__cpu_stream_enter(qe_stream *s, const char *op)
{
	if (!s)
		return qe_fail(QE_EINVAL, "%s on the default (NULL) stream: it would block every other op", op);
	int rc = stream_check(s, op);
	if (rc)
		return rc;
	if (s->capture)
		return qe_fail(QE_ECAPTURE, "%s while the stream captures: links run outside graphs", op);
	return QE_OK;
}

int qe__cpu_stream_fail(qe_stream *s, int rc)
{
	return stream_fail(s, rc);
}

/* ---- graphs ------------------------------------------------------------------ */

static void op_release(cpu_op *op)
{
	if (op->kind == OP_ADAMW)
		free((void *)op->u.adamw.grads);
	else if (op->kind == OP_SUM_VIEWS)
		free((void *)op->u.sv.views);
	else if (op->kind == OP_FP8_UPDATE_MANY)
		free((void *)op->u.updm.items);
}

/* Append a copy of op, duplicating its pointer array so the caller's may change. */
static int graph_append(qe_graph *g, const cpu_op *op)
{
	if (g->n == g->cap) {
		int nc = g->cap ? 2 * g->cap : 32;
		cpu_op *p = realloc(g->ops, (size_t)nc * sizeof(*p));
		if (!p)
			return qe_fail(QE_ENOMEM, "capture: growing the op list to %d ops", nc);
		g->ops = p;
		g->cap = nc;
	}
	cpu_op c = *op;
	if (op->kind == OP_ADAMW || op->kind == OP_SUM_VIEWS) {
		int nv = op->kind == OP_ADAMW ? op->u.adamw.nviews : op->u.sv.nviews;
		const float *const *src = op->kind == OP_ADAMW ? op->u.adamw.grads : op->u.sv.views;
		const float **arr = malloc((size_t)nv * sizeof(*arr));
		if (!arr)
			return qe_fail(QE_ENOMEM, "capture: copying %d view pointers of %s", nv, op_names[op->kind]);
		memcpy(arr, src, (size_t)nv * sizeof(*arr));
		if (op->kind == OP_ADAMW)
			c.u.adamw.grads = arr;
		else
			c.u.sv.views = arr;
	}
	if (op->kind == OP_FP8_UPDATE_MANY) {
		int n = op->u.updm.n;
		qe_fp8_update_item *arr = NULL;
		if (n > 0) {
			arr = malloc((size_t)n * sizeof(*arr));
			if (!arr)
				return qe_fail(QE_ENOMEM, "capture: copying %d items of fp8_update_many", n);
			memcpy(arr, op->u.updm.items, (size_t)n * sizeof(*arr));
		}
		c.u.updm.items = arr;
	}
	g->ops[g->n++] = c;
	return QE_OK;
}

static void graph_free(qe_graph *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++)
		op_release(&g->ops[i]);
	free(g->ops);
	free(g);
}

/* ---- checks ------------------------------------------------------------------ */

/* Everything that can be checked without reading the data; run at enqueue time. */
static int check_op(const cpu_op *op)
{
	const char *nm = op_names[op->kind];
	switch (op->kind) {
	case OP_COPY:
		if ((unsigned)op->u.copy.kind > QE_COPY_D2D)
			return qe_fail(QE_EINVAL, "copy: unknown kind %d", (int)op->u.copy.kind);
		if (op->u.copy.bytes && (!op->u.copy.dst || !op->u.copy.src))
			return qe_fail(QE_EINVAL, "copy: NULL %s for %zu bytes", op->u.copy.dst ? "src" : "dst",
				       op->u.copy.bytes);
		return QE_OK;
	case OP_FILL:
		return qe__check_need(op->u.fill.dst, (int64_t)op->u.fill.bytes, nm, "dst");
	case OP_EVENT_RECORD:
	case OP_STREAM_WAIT:
		return QE_OK;
	case OP_CAST:
		return qe__check_cast(&op->u.cast, QE_DEV_CPU);
	case OP_FP8_UPDATE:
		return qe__check_fp8_update(op->u.upd.block, op->u.upd.history_len, op->u.upd.fmt, &op->u.upd.recipe);
	case OP_FP8_UPDATE_MANY:
		return qe__check_fp8_update_many(op->u.updm.items, op->u.updm.n, op->u.updm.history_len,
						 &op->u.updm.recipe);
	case OP_GEMM:
		return qe__check_gemm(&op->u.gemm.a, &op->u.gemm.b, &op->u.gemm.c, QE_DEV_CPU);
	case OP_ADD:
	case OP_ADD_INPLACE:
	case OP_GELU_FWD:
	case OP_GELU_BWD: {
		int64_t n = op->u.ew.n;
		int rc = qe__check_size(n, nm, "n");
		if (!rc)
			rc = qe__check_need(op->u.ew.y, n, nm, op->kind == OP_GELU_BWD ? "dx" : "y");
		if (!rc)
			rc = qe__check_need(op->u.ew.a, n, nm, op->kind == OP_GELU_BWD || op->kind == OP_GELU_FWD ? "x" : "a");
		if (!rc && (op->kind == OP_ADD || op->kind == OP_GELU_BWD))
			rc = qe__check_need(op->u.ew.b, n, nm, op->kind == OP_GELU_BWD ? "dy" : "b");
		return rc;
	}
	case OP_BIAS_GRAD: {
		int rc = qe__check_size(op->u.bg.rows, nm, "rows");
		if (!rc)
			rc = qe__check_size(op->u.bg.cols, nm, "cols");
		if (!rc)
			rc = qe__check_need(op->u.bg.db, op->u.bg.cols, nm, "db");
		if (!rc)
			rc = qe__check_need(op->u.bg.dy, op->u.bg.rows * op->u.bg.cols, nm, "dy");
		return rc;
	}
	case OP_LN_FWD: {
		int64_t r = op->u.lnf.rows, c = op->u.lnf.cols;
		int rc = qe__check_size(r, nm, "rows");
		if (!rc)
			rc = qe__check_size(c, nm, "cols");
		if (!rc && r > 0 && c == 0)
			rc = qe_fail(QE_EINVAL, "layernorm_fwd: %lld rows of 0 columns", (long long)r);
		if (!rc)
			rc = qe__check_need(op->u.lnf.y, r * c, nm, "y");
		if (!rc)
			rc = qe__check_need(op->u.lnf.x, r * c, nm, "x");
		if (!rc)
			rc = qe__check_need(op->u.lnf.w, r * c, nm, "w");
		if (!rc)
			rc = qe__check_need(op->u.lnf.b, r * c, nm, "b");
		return rc;
	}
	case OP_LN_BWD: {
		int64_t r = op->u.lnb.rows, c = op->u.lnb.cols;
		int rc = qe__check_size(r, nm, "rows");
		if (!rc)
			rc = qe__check_size(c, nm, "cols");
		if (!rc)
			rc = qe__check_need(op->u.lnb.dx, r * c, nm, "dx");
		if (!rc)
			rc = qe__check_need(op->u.lnb.dy, r * c, nm, "dy");
		if (!rc)
			rc = qe__check_need(op->u.lnb.x, r * c, nm, "x");
		if (!rc)
			rc = qe__check_need(op->u.lnb.mean, r, nm, "mean");
		if (!rc)
			rc = qe__check_need(op->u.lnb.rstd, r, nm, "rstd");
		if (!rc)
			rc = qe__check_need(op->u.lnb.w, r * c, nm, "w");
		return rc;
	}
	case OP_EMBED_FWD: {
		int64_t T = op->u.ef.T, H = op->u.ef.H;
		int rc = qe__check_size(T, nm, "T");
		if (!rc)
			rc = qe__check_size(H, nm, "H");
		if (!rc)
			rc = qe__check_need(op->u.ef.out, T * H, nm, "out");
		if (!rc)
			rc = qe__check_need(op->u.ef.tok, T, nm, "tok");
		if (!rc)
			rc = qe__check_need(op->u.ef.wte, T * H, nm, "wte");
		return rc;
	}
	case OP_EMBED_BWD:
		return qe__check_embed_bwd(op->u.eb.dwte, op->u.eb.tok, op->u.eb.dout, op->u.eb.T, op->u.eb.H, op->u.eb.V);
	case OP_ATTN_FWD:
	case OP_ATTN_BWD: {
		int fwd = op->kind == OP_ATTN_FWD;
		int64_t T = fwd ? op->u.af.T : op->u.ab.T, H = fwd ? op->u.af.H : op->u.ab.H;
		int nh = fwd ? op->u.af.nh : op->u.ab.nh;
		int rc = qe__check_size(T, nm, "T");
		if (!rc)
			rc = qe__check_size(H, nm, "H");
		if (!rc && (nh < 1 || H % nh != 0))
			rc = qe_fail(QE_ESHAPE, "%s: H=%lld is not a multiple of %d heads", nm, (long long)H, nh);
		if (!rc && fwd) {
			rc = qe__check_need(op->u.af.out, T * H, nm, "out");
			if (!rc)
				rc = qe__check_need(op->u.af.probs, T * H, nm, "probs");
			if (!rc)
				rc = qe__check_need(op->u.af.qkv, T * H, nm, "qkv");
		} else if (!rc) {
			rc = qe__check_need(op->u.ab.dqkv, T * H, nm, "dqkv");
			if (!rc)
				rc = qe__check_need(op->u.ab.dout, T * H, nm, "dout");
			if (!rc)
				rc = qe__check_need(op->u.ab.qkv, T * H, nm, "qkv");
			if (!rc)
				rc = qe__check_need(op->u.ab.probs, T * H, nm, "probs");
		}
		return rc;
	}
	case OP_FLASH_FWD:
	case OP_FLASH_BWD:
		return qe__check_flash(nm, op->kind == OP_FLASH_BWD, op->u.fl.a, op->u.fl.b, op->u.fl.qkv, op->u.fl.out,
				       op->u.fl.lse, op->u.fl.B, op->u.fl.T, op->u.fl.H, op->u.fl.nh);
	case OP_XENT: {
		return qe__check_xent(op->u.xe.logits, op->u.xe.tgt, op->u.xe.T, op->u.xe.V, op->u.xe.valid);
	}
	case OP_ADAMW: {
		const qe_adamw_args *a = &op->u.adamw;
		int rc = qe__check_size(a->n, nm, "n");
		if (!rc)
			rc = qe__check_need(a->param, a->n, nm, "param");
		if (!rc)
			rc = qe__check_need(a->m, a->n, nm, "m");
		if (!rc)
			rc = qe__check_need(a->v, a->n, nm, "v");
		if (!rc)
			rc = qe__check_views(a->grads, a->nviews, a->n, nm, 0);
		if (!rc && a->step < 1)
			rc = qe_fail(QE_EINVAL, "adamw: step %lld; steps are 1-based", (long long)a->step);
		return rc;
	}
	case OP_SUM_VIEWS: {
		int rc = qe__check_size(op->u.sv.n, nm, "n");
		if (!rc)
			rc = qe__check_need(op->u.sv.out, op->u.sv.n, nm, "out");
		if (!rc)
			rc = qe__check_views(op->u.sv.views, op->u.sv.nviews, op->u.sv.n, nm, 0);
		return rc;
	}
	case OP_KIND_COUNT:
		break;
	}
	return qe_fail(QE_EINVAL, "cpu backend: unknown op %d", (int)op->kind);
}

/* ---- execution ------------------------------------------------------------ */

static int exec_op(qe_stream *s, const cpu_op *op)
{
	int rc = QE_OK;
	switch (op->kind) {
	case OP_COPY:
		if (op->u.copy.bytes)
			memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
		break;
	case OP_FILL:
		if (op->u.fill.bytes)
			memset(op->u.fill.dst, op->u.fill.byte, op->u.fill.bytes);
		break;
	case OP_EVENT_RECORD:
		op->u.ev->recorded = 1;
		op->u.ev->seq = s->done;
		return QE_OK; /* bookkeeping, not work: done is not advanced */
	case OP_STREAM_WAIT:
		if (op->u.ev->recorded)
			s->waits++;
		return QE_OK;
	case OP_CAST:
		rc = qe_cpu_cast(&op->u.cast);
		break;
	case OP_FP8_UPDATE:
		qe_fp8_role_update(op->u.upd.block, op->u.upd.history_len, op->u.upd.fmt, &op->u.upd.recipe);
		break;
	case OP_FP8_UPDATE_MANY:
		for (int i = 0; i < op->u.updm.n; i++)
			qe_fp8_role_update(op->u.updm.items[i].block, op->u.updm.history_len, op->u.updm.items[i].fmt,
					   &op->u.updm.recipe);
		break;
	case OP_GEMM: {
		qe_tensor c = op->u.gemm.c;
		rc = qe_cpu_gemm(&s->scratch, &op->u.gemm.a, &op->u.gemm.b, &c, op->u.gemm.bias, op->u.gemm.accumulate);
		break;
	}
	case OP_ADD:
		qe_cpu_add(op->u.ew.y, op->u.ew.a, op->u.ew.b, op->u.ew.n);
		break;
	case OP_ADD_INPLACE:
		qe_cpu_add_inplace(op->u.ew.y, op->u.ew.a, op->u.ew.n);
		break;
	case OP_BIAS_GRAD:
		qe_cpu_bias_grad(op->u.bg.db, op->u.bg.dy, op->u.bg.rows, op->u.bg.cols);
		break;
	case OP_GELU_FWD:
		qe_cpu_gelu_fwd(op->u.ew.y, op->u.ew.a, op->u.ew.n);
		break;
	case OP_GELU_BWD:
		qe_cpu_gelu_bwd(op->u.ew.y, op->u.ew.a, op->u.ew.b, op->u.ew.n);
		break;
	case OP_LN_FWD:
		qe_cpu_layernorm_fwd(op->u.lnf.y, op->u.lnf.mean, op->u.lnf.rstd, op->u.lnf.x, op->u.lnf.w, op->u.lnf.b,
				     op->u.lnf.rows, op->u.lnf.cols);
		break;
	case OP_LN_BWD:
		qe_cpu_layernorm_bwd(op->u.lnb.dx, op->u.lnb.dw, op->u.lnb.db, op->u.lnb.dy, op->u.lnb.x,
				     op->u.lnb.mean, op->u.lnb.rstd, op->u.lnb.w, op->u.lnb.rows, op->u.lnb.cols);
		break;
	case OP_EMBED_FWD:
		qe_cpu_embed_fwd(op->u.ef.out, op->u.ef.tok, op->u.ef.wte, op->u.ef.wpe, op->u.ef.T, op->u.ef.H);
		break;
	case OP_EMBED_BWD:
		rc = qe_cpu_embed_bwd(op->u.eb.dwte, op->u.eb.dwpe, op->u.eb.tok, op->u.eb.dout, op->u.eb.T, op->u.eb.H,
				      op->u.eb.V, op->u.eb.rows_written);
		break;
	case OP_ATTN_FWD:
		qe_cpu_attn_fwd(op->u.af.out, op->u.af.probs, op->u.af.qkv, op->u.af.T, op->u.af.H, op->u.af.nh);
		break;
	case OP_ATTN_BWD:
		rc = qe_cpu_attn_bwd(&s->scratch, op->u.ab.dqkv, op->u.ab.dout, op->u.ab.qkv, op->u.ab.probs,
				     op->u.ab.T, op->u.ab.H, op->u.ab.nh);
		break;
	case OP_FLASH_FWD:
		rc = qe_cpu_attn_flash_fwd(op->u.fl.a, op->u.fl.b, op->u.fl.qkv, op->u.fl.B, op->u.fl.T, op->u.fl.H,
					   op->u.fl.nh);
		break;
	case OP_FLASH_BWD:
		qe_cpu_attn_flash_bwd(op->u.fl.a, op->u.fl.b, op->u.fl.qkv, op->u.fl.out, op->u.fl.lse, op->u.fl.B,
				      op->u.fl.T, op->u.fl.H, op->u.fl.nh);
		break;
	case OP_XENT:
		rc = qe_cpu_xent(op->u.xe.loss, op->u.xe.dlogits, op->u.xe.logits, op->u.xe.tgt, op->u.xe.T, op->u.xe.V,
				 op->u.xe.valid, op->u.xe.grad_scale);
		break;
	case OP_ADAMW:
		qe_cpu_adamw(&op->u.adamw);
		break;
	case OP_SUM_VIEWS:
		qe_cpu_sum_views(op->u.sv.out, op->u.sv.views, op->u.sv.nviews, op->u.sv.n);
		break;
	case OP_KIND_COUNT:
		rc = qe_fail(QE_EINVAL, "cpu backend: unknown op %d", (int)op->kind);
		break;
	}
	if (rc == QE_OK)
		s->done++;
	return rc;
}

/* Run op on the default stream: a fresh state whose scratch lives for this call only. */
static int exec_default(const cpu_op *op)
{
	qe_stream tmp;
	memset(&tmp, 0, sizeof(tmp));
	int rc = exec_op(&tmp, op);
	qe_cpu_scratch_release(&tmp.scratch);
	return rc;
}

/* The one path of every stream op: fail fast, check, then run or record. */
static int submit(qe_stream *s, const cpu_op *op)
{
	int rc = stream_check(s, op_names[op->kind]);
	if (rc)
		return rc;
	rc = check_op(op);
	if (!s)
		return rc ? rc : exec_default(op);
	if (!rc)
		rc = s->capture ? graph_append(s->capture, op) : exec_op(s, op);
	return rc ? stream_fail(s, rc) : QE_OK;
}

/* ---- memory ------------------------------------------------------------------ */

static int cpu_alloc(qe_backend *b, size_t bytes, void **out)
{
	cpu_backend *be = (cpu_backend *)b;
	if (!out)
		return qe_fail(QE_EINVAL, "alloc: NULL out pointer");
	*out = NULL;
	int ncap = atomic_load(&be->capturing);
	if (ncap > 0)
		return qe_fail(QE_ECAPTURE, "alloc of %zu bytes while %d cpu stream(s) capture: allocate before capture_begin",
			       bytes, ncap);
	/* 256-byte alignment, as cudaMalloc gives, so arena views line up the same on both backends */
	size_t sz = bytes ? (bytes + 255) & ~(size_t)255 : 256;
	if (sz < bytes)
		return qe_fail(QE_ENOMEM, "alloc: %zu bytes", bytes);
	void *p = aligned_alloc(256, sz);
	if (!p)
		return qe_fail(QE_ENOMEM, "alloc: %zu bytes", bytes);
	memset(p, 0, sz);
	atomic_fetch_add(&be->live_allocs, 1);
	*out = p;
	return QE_OK;
}

static void cpu_free(qe_backend *b, void *p)
{
	cpu_backend *be = (cpu_backend *)b;
	if (!p)
		return;
	if (atomic_load(&be->capturing) > 0)
		qe_log(QE_LOG_WARN, "cpu backend: free while capturing; a recorded op may still point at %p", p);
	atomic_fetch_sub(&be->live_allocs, 1);
	free(p);
}

static int cpu_host_alloc(qe_backend *b, size_t bytes, void **out)
{
	(void)b;
	if (!out)
		return qe_fail(QE_EINVAL, "host_alloc: NULL out pointer");
	*out = malloc(bytes ? bytes : 1);
	return *out ? QE_OK : qe_fail(QE_ENOMEM, "host_alloc: %zu bytes", bytes);
}

static void cpu_host_free(qe_backend *b, void *p)
{
	(void)b;
	free(p);
}

static int cpu_copy(qe_stream *s, void *dst, const void *src, size_t bytes, qe_copy_kind kind)
{
	cpu_op op = { .kind = OP_COPY };
	op.u.copy.dst = dst;
	op.u.copy.src = src;
	op.u.copy.bytes = bytes;
	op.u.copy.kind = kind;
	return submit(s, &op);
}

static int cpu_fill(qe_stream *s, void *dst, uint8_t byte, size_t bytes)
{
	cpu_op op = { .kind = OP_FILL };
	op.u.fill.dst = dst;
	op.u.fill.byte = byte;
	op.u.fill.bytes = bytes;
	return submit(s, &op);
}

/* ---- streams, events, graphs ------------------------------------------------ */

static int cpu_stream_create(qe_backend *b, qe_stream **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "stream_create: NULL out pointer");
	qe_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return qe_fail(QE_ENOMEM, "stream_create");
	s->be = (cpu_backend *)b;
	atomic_fetch_add(&s->be->live_streams, 1);
	*out = s;
	return QE_OK;
}

static void cpu_stream_destroy(qe_stream *s)
{
	if (!s)
		return;
	if (s->capture) {
		graph_free(s->capture);
		atomic_fetch_sub(&s->be->capturing, 1);
		atomic_fetch_sub(&g_capturing, 1);
	}
	qe_cpu_scratch_release(&s->scratch);
	atomic_fetch_sub(&s->be->live_streams, 1);
	free(s);
}

static int cpu_stream_sync(qe_stream *s)
{
	int rc = stream_check(s, "stream_sync");
	if (rc)
		return rc;
	/* CUDA invalidates a capture that synchronizes; so do we, so the bug shows on cpu. */
	if (s && s->capture)
		return stream_fail(s, qe_fail(QE_ECAPTURE, "stream_sync on a capturing stream invalidates the capture"));
	return QE_OK;
}

/* cpu streams run every op when it is enqueued: nothing is ever pending. */
static int cpu_stream_query(qe_stream *s)
{
	return stream_check(s, "stream_query");
}

static int cpu_event_create(qe_backend *b, qe_event **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "event_create: NULL out pointer");
	qe_event *e = calloc(1, sizeof(*e));
	if (!e)
		return qe_fail(QE_ENOMEM, "event_create");
	e->be = (cpu_backend *)b;
	atomic_fetch_add(&e->be->live_events, 1);
	*out = e;
	return QE_OK;
}

static void cpu_event_destroy(qe_event *e)
{
	if (!e)
		return;
	atomic_fetch_sub(&e->be->live_events, 1);
	free(e);
}

static int event_op(qe_stream *s, qe_event *e, cpu_op_kind kind)
{
	int rc = stream_check(s, op_names[kind]);
	if (rc)
		return rc;
	if (!e)
		return stream_fail(s, qe_fail(QE_EINVAL, "%s: NULL event", op_names[kind]));
	if (s && e->be != s->be)
		return stream_fail(s, qe_fail(QE_EINVAL, "%s: event and stream belong to different backends",
					      op_names[kind]));
	cpu_op op = { .kind = kind };
	op.u.ev = e;
	return submit(s, &op);
}

static int cpu_event_record(qe_event *e, qe_stream *s)
{
	return event_op(s, e, OP_EVENT_RECORD);
}

/* Waiting on an event never recorded is a no-op, as in CUDA. */
static int cpu_stream_wait(qe_stream *s, qe_event *e)
{
	return event_op(s, e, OP_STREAM_WAIT);
}

static int cpu_capture_begin(qe_stream *s)
{
	if (!s)
		return qe_fail(QE_EINVAL, "capture_begin: the default (NULL) stream cannot capture");
	int rc = stream_check(s, "capture_begin");
	if (rc)
		return rc;
	if (s->capture)
		return stream_fail(s, qe_fail(QE_ECAPTURE, "capture_begin: the stream is already capturing"));
	qe_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return qe_fail(QE_ENOMEM, "capture_begin");
	g->be = s->be;
	s->capture = g;
	atomic_fetch_add(&s->be->capturing, 1);
	atomic_fetch_add(&g_capturing, 1);
	return QE_OK;
}

static int cpu_capture_end(qe_stream *s, qe_graph **out)
{
	if (!s || !out)
		return qe_fail(QE_EINVAL, "capture_end: NULL %s", s ? "out pointer" : "stream");
	*out = NULL;
	if (!s->capture) {
		int rc = stream_check(s, "capture_end");
		return rc ? rc : stream_fail(s, qe_fail(QE_EINVAL, "capture_end: the stream is not capturing"));
	}
	qe_graph *g = s->capture;
	s->capture = NULL;
	atomic_fetch_sub(&s->be->capturing, 1);
	atomic_fetch_sub(&g_capturing, 1);
	int rc = stream_check(s, "capture_end (capture invalidated)");
	if (rc) {
		graph_free(g);
		return rc;
	}
	atomic_fetch_add(&s->be->live_graphs, 1);
	*out = g;
	return QE_OK;
}

static int cpu_graph_launch(qe_graph *g, qe_stream *s)
{
	int rc = stream_check(s, "graph_launch");
	if (rc)
		return rc;
	if (!g)
		return stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: NULL graph"));
	if (s && g->be != s->be)
		return stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: graph and stream belong to different backends"));
	qe_stream tmp;
	if (!s) {
		memset(&tmp, 0, sizeof(tmp));
		s = &tmp;
	}
	if (s->capture) {
		/* launching into a capture inlines the graph's ops (a child graph in CUDA) */
		if (s->capture == g)
			return stream_fail(s, qe_fail(QE_EINVAL, "graph_launch: a graph cannot launch into its own capture"));
		for (int i = 0; i < g->n; i++) {
			rc = graph_append(s->capture, &g->ops[i]);
			if (rc)
				return stream_fail(s, rc);
		}
		return QE_OK;
	}
	for (int i = 0; i < g->n && !rc; i++) {
		rc = exec_op(s, &g->ops[i]);
		if (rc)
			rc = qe_fail_ctx(rc, "graph_launch: op %d of %d (%s)", i, g->n, op_names[g->ops[i].kind]);
	}
	if (s == &tmp) {
		qe_cpu_scratch_release(&tmp.scratch);
		return rc;
	}
	return rc ? stream_fail(s, rc) : QE_OK;
}

static void cpu_graph_destroy(qe_graph *g)
{
	if (!g)
		return;
	atomic_fetch_sub(&g->be->live_graphs, 1);
	graph_free(g);
}

static int cpu_graph_op_count(const qe_graph *g)
{
	return g ? g->n : 0;
}

/* ---- compute ops ------------------------------------------------------------ */

static int cpu_cast(qe_stream *s, const qe_cast_args *a)
{
	cpu_op op = { .kind = OP_CAST };
	if (!a) {
		int rc = stream_check(s, "cast");
		return rc ? rc : stream_fail(s, qe_fail(QE_EINVAL, "cast: NULL arguments"));
	}
	op.u.cast = *a;
	return submit(s, &op);
}

static int cpu_fp8_update(qe_stream *s, float *block, int history_len, qe_dtype fmt, qe_fp8_recipe recipe)
{
	cpu_op op = { .kind = OP_FP8_UPDATE };
	op.u.upd.block = block;
	op.u.upd.history_len = history_len;
	op.u.upd.fmt = fmt;
	op.u.upd.recipe = recipe;
	return submit(s, &op);
}

static int cpu_fp8_update_many(qe_stream *s, const qe_fp8_update_item *items, int n, int history_len,
			       qe_fp8_recipe recipe)
{
	cpu_op op = { .kind = OP_FP8_UPDATE_MANY };
	op.u.updm.items = items;
	op.u.updm.n = n;
	op.u.updm.history_len = history_len;
	op.u.updm.recipe = recipe;
	return submit(s, &op);
}

static int cpu_gemm_op(qe_stream *s, const qe_tensor *a, const qe_tensor *b, qe_tensor *c, const float *bias,
		       int accumulate)
{
	cpu_op op = { .kind = OP_GEMM };
	if (!a || !b || !c) {
		int rc = stream_check(s, "gemm");
		return rc ? rc : stream_fail(s, qe_fail(QE_EINVAL, "gemm: NULL tensor descriptor"));
	}
	op.u.gemm.a = *a;
	op.u.gemm.b = *b;
	op.u.gemm.c = *c;
	op.u.gemm.bias = bias;
	op.u.gemm.accumulate = accumulate;
	return submit(s, &op);
}

static int ew_op(qe_stream *s, cpu_op_kind kind, float *y, const float *a, const float *b, int64_t n)
{
	cpu_op op = { .kind = kind };
	op.u.ew.y = y;
	op.u.ew.a = a;
	op.u.ew.b = b;
	op.u.ew.n = n;
	return submit(s, &op);
}

static int cpu_add(qe_stream *s, float *y, const float *a, const float *b, int64_t n)
{
	return ew_op(s, OP_ADD, y, a, b, n);
}

static int cpu_add_inplace(qe_stream *s, float *y, const float *a, int64_t n)
{
	return ew_op(s, OP_ADD_INPLACE, y, a, NULL, n);
}

static int cpu_gelu_fwd(qe_stream *s, float *y, const float *x, int64_t n)
{
	return ew_op(s, OP_GELU_FWD, y, x, NULL, n);
}

static int cpu_gelu_bwd(qe_stream *s, float *dx, const float *x, const float *dy, int64_t n)
{
	return ew_op(s, OP_GELU_BWD, dx, x, dy, n);
}

static int cpu_bias_grad(qe_stream *s, float *db, const float *dy, int64_t rows, int64_t cols)
{
	cpu_op op = { .kind = OP_BIAS_GRAD };
	op.u.bg.db = db;
	op.u.bg.dy = dy;
	op.u.bg.rows = rows;
	op.u.bg.cols = cols;
	return submit(s, &op);
}

static int cpu_layernorm_fwd(qe_stream *s, float *y, float *mean, float *rstd, const float *x, const float *w,
			     const float *b, int64_t rows, int64_t cols)
{
	cpu_op op = { .kind = OP_LN_FWD };
	op.u.lnf.y = y;
	op.u.lnf.mean = mean;
	op.u.lnf.rstd = rstd;
	op.u.lnf.x = x;
	op.u.lnf.w = w;
	op.u.lnf.b = b;
	op.u.lnf.rows = rows;
	op.u.lnf.cols = cols;
	return submit(s, &op);
}

static int cpu_layernorm_bwd(qe_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
			     const float *mean, const float *rstd, const float *w, int64_t rows, int64_t cols)
{
	cpu_op op = { .kind = OP_LN_BWD };
	op.u.lnb.dx = dx;
	op.u.lnb.dw = dw;
	op.u.lnb.db = db;
	op.u.lnb.dy = dy;
	op.u.lnb.x = x;
	op.u.lnb.mean = mean;
	op.u.lnb.rstd = rstd;
	op.u.lnb.w = w;
	op.u.lnb.rows = rows;
	op.u.lnb.cols = cols;
	return submit(s, &op);
}

static int cpu_embed_fwd(qe_stream *s, float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t T,
			 int64_t H)
{
	cpu_op op = { .kind = OP_EMBED_FWD };
	op.u.ef.out = out;
	op.u.ef.tok = tok;
	op.u.ef.wte = wte;
	op.u.ef.wpe = wpe;
	op.u.ef.T = T;
	op.u.ef.H = H;
	return submit(s, &op);
}

static int cpu_embed_bwd(qe_stream *s, float *dwte, float *dwpe, const int32_t *tok, const float *dout, int64_t T,
			 int64_t H, int64_t V, int32_t *rows_written)
{
	cpu_op op = { .kind = OP_EMBED_BWD };
	op.u.eb.dwte = dwte;
	op.u.eb.dwpe = dwpe;
	op.u.eb.tok = tok;
	op.u.eb.dout = dout;
	op.u.eb.T = T;
	op.u.eb.H = H;
	op.u.eb.V = V;
	op.u.eb.rows_written = rows_written;
	return submit(s, &op);
}

static int cpu_attn_fwd(qe_stream *s, float *out, float *probs, const float *qkv, int64_t T, int64_t H, int nh)
{
	cpu_op op = { .kind = OP_ATTN_FWD };
	op.u.af.out = out;
	op.u.af.probs = probs;
	op.u.af.qkv = qkv;
	op.u.af.T = T;
	op.u.af.H = H;
	op.u.af.nh = nh;
	return submit(s, &op);
}

static int cpu_attn_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *probs,
			int64_t T, int64_t H, int nh)
{
	cpu_op op = { .kind = OP_ATTN_BWD };
	op.u.ab.dqkv = dqkv;
	op.u.ab.dout = dout;
	op.u.ab.qkv = qkv;
	op.u.ab.probs = probs;
	op.u.ab.T = T;
	op.u.ab.H = H;
	op.u.ab.nh = nh;
	return submit(s, &op);
}

static int cpu_attn_flash_fwd(qe_stream *s, float *out, float *lse, const float *qkv, int64_t batch, int64_t T,
			      int64_t H, int nh)
{
	cpu_op op = { .kind = OP_FLASH_FWD };
	op.u.fl.a = out;
	op.u.fl.b = lse;
	op.u.fl.qkv = qkv;
	op.u.fl.B = batch;
	op.u.fl.T = T;
	op.u.fl.H = H;
	op.u.fl.nh = nh;
	return submit(s, &op);
}

static int cpu_attn_flash_bwd(qe_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
			      const float *lse, int64_t batch, int64_t T, int64_t H, int nh)
{
	cpu_op op = { .kind = OP_FLASH_BWD };
	op.u.fl.a = dqkv;
	op.u.fl.b = (float *)dout; /* read only */
	op.u.fl.qkv = qkv;
	op.u.fl.out = out;
	op.u.fl.lse = lse;
	op.u.fl.B = batch;
	op.u.fl.T = T;
	op.u.fl.H = H;
	op.u.fl.nh = nh;
	return submit(s, &op);
}

static int cpu_xent(qe_stream *s, float *loss, float *dlogits, const float *logits, const int32_t *tgt, int64_t T,
		    int64_t V, int64_t valid, float grad_scale)
{
	cpu_op op = { .kind = OP_XENT };
	op.u.xe.loss = loss;
	op.u.xe.dlogits = dlogits;
	op.u.xe.logits = logits;
	op.u.xe.tgt = tgt;
	op.u.xe.T = T;
	op.u.xe.V = V;
	op.u.xe.valid = valid;
	op.u.xe.grad_scale = grad_scale;
	return submit(s, &op);
}

static int cpu_adamw(qe_stream *s, const qe_adamw_args *a)
{
	cpu_op op = { .kind = OP_ADAMW };
	if (!a) {
		int rc = stream_check(s, "adamw");
		return rc ? rc : stream_fail(s, qe_fail(QE_EINVAL, "adamw: NULL arguments"));
	}
	op.u.adamw = *a;
	return submit(s, &op);
}

static int cpu_sum_views(qe_stream *s, float *out, const float *const *views, int nviews, int64_t n)
{
	cpu_op op = { .kind = OP_SUM_VIEWS };
	op.u.sv.out = out;
	op.u.sv.views = views;
	op.u.sv.nviews = nviews;
	op.u.sv.n = n;
	return submit(s, &op);
}

/* ---- the table ---------------------------------------------------------------- */

static const qe_backend_ops cpu_ops = {
	.name = "cpu",
	.device = QE_DEV_CPU,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.copy = cpu_copy,
	.fill = cpu_fill,
	.stream_create = cpu_stream_create,
	.stream_destroy = cpu_stream_destroy,
	.stream_sync = cpu_stream_sync,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.stream_wait = cpu_stream_wait,
	.capture_begin = cpu_capture_begin,
	.capture_end = cpu_capture_end,
	.graph_launch = cpu_graph_launch,
	.graph_destroy = cpu_graph_destroy,
	.graph_op_count = cpu_graph_op_count,
	.stream_query = cpu_stream_query,
	.link_id = qe__cpu_link_id,
	.link_open = qe__cpu_link_open,
	.link_send = qe__cpu_link_send,
	.link_recv = qe__cpu_link_recv,
	.link_check = qe__cpu_link_check,
	.link_abort = qe__cpu_link_abort,
	.link_close = qe__cpu_link_close,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.cast = cpu_cast,
	.fp8_update = cpu_fp8_update,
	.fp8_update_many = cpu_fp8_update_many,
	.gemm = cpu_gemm_op,
	.add = cpu_add,
	.add_inplace = cpu_add_inplace,
	.bias_grad = cpu_bias_grad,
	.gelu_fwd = cpu_gelu_fwd,
	.gelu_bwd = cpu_gelu_bwd,
	.layernorm_fwd = cpu_layernorm_fwd,
	.layernorm_bwd = cpu_layernorm_bwd,
	.embed_fwd = cpu_embed_fwd,
	.embed_bwd = cpu_embed_bwd,
	.attn_fwd = cpu_attn_fwd,
	.attn_bwd = cpu_attn_bwd,
	.attn_flash_fwd = cpu_attn_flash_fwd,
	.attn_flash_bwd = cpu_attn_flash_bwd,
	.xent = cpu_xent,
	.adamw = cpu_adamw,
	.sum_views = cpu_sum_views,
};

int qe_cpu_backend_create(qe_backend **out)
{
	if (!out)
		return qe_fail(QE_EINVAL, "cpu backend: NULL out pointer");
	*out = NULL;
	cpu_backend *be = calloc(1, sizeof(*be));
	if (!be)
		return qe_fail(QE_ENOMEM, "cpu backend");
	be->pub.ops = &cpu_ops;
	be->pub.impl = be;
	atomic_init(&be->capturing, 0);
	atomic_init(&be->live_allocs, 0);
	atomic_init(&be->live_streams, 0);
	atomic_init(&be->live_events, 0);
	atomic_init(&be->live_graphs, 0);
	*out = &be->pub;
	return QE_OK;
}

void qe_cpu_backend_destroy(qe_backend *b)
{
	if (!b)
		return;
	cpu_backend *be = (cpu_backend *)b;
	qe__cpu_link_forget(b);
	long a = atomic_load(&be->live_allocs), s = atomic_load(&be->live_streams);
	long e = atomic_load(&be->live_events), g = atomic_load(&be->live_graphs);
	if (a || s || e || g)
		qe_log(QE_LOG_WARN, "cpu backend closed with %ld allocation(s), %ld stream(s), %ld event(s), %ld graph(s) alive",
		       a, s, e, g);
	free(be);
}
