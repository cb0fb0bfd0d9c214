/*
 * test_capture.c - cpu stream capture and replay, as the executor's graph
 * mode will use it.
 *
 * A sequence touching every op kind (cast with a role block, FP8 GEMM, GELU,
 * layernorm, xent, bias_grad, AdamW over two gradient views, sum_views, copy,
 * fill, fp8_update, events) runs on buffers carved from one arena, so the
 * whole state is one byte range.  Eager execution twice gives states E1, E2;
 * from the same initial bytes, capture must change nothing, and replaying the
 * graph twice must give E1 then E2 exactly.  Also: allocation while any
 * stream captures fails with QE_ECAPTURE; syncing a capturing stream
 * invalidates the capture; a failure during replay names the op and leaves
 * the stream failed; launching a graph into a capture inlines its ops; the
 * default (NULL) stream runs at once and is refused during any capture.
 */
#include <stdlib.h>

#include "bk_util.h"
#include "runtime/fp8/fp8.h"

#define SEED 99u
#define L 4 /* amax history length */

enum { N = 12, IN = 24, OUT = 16 };

typedef struct state {
	uint8_t *arena;
	size_t bytes;
	float *x, *w, *bias, *y, *g, *ln, *mean, *rstd, *lnw, *lnb, *dl, *loss, *db, *db2, *p, *m, *v, *sum, *cpy;
	float *rx, *rw; /* role blocks: [history L | scale | scale_inv] */
	uint8_t *xq, *xt, *wq, *filled;
	int32_t *tgt;
	const float *views[2];
} state;

static size_t carve(state *st, size_t *off, size_t bytes)
{
	size_t at = *off;
	*off += (bytes + 63) & ~(size_t)63;
	(void)st;
	return at;
}

static int state_init(bk *k, state *st)
{
	size_t off = 0, o[30];
	int i = 0;
	o[i++] = carve(st, &off, N * IN * 4);    /* x */
	o[i++] = carve(st, &off, OUT * IN * 4);  /* w */
	o[i++] = carve(st, &off, OUT * 4);       /* bias */
	o[i++] = carve(st, &off, N * OUT * 4);   /* y */
	o[i++] = carve(st, &off, N * OUT * 4);   /* g */
	o[i++] = carve(st, &off, N * OUT * 4);   /* ln */
	o[i++] = carve(st, &off, N * 4);         /* mean */
	o[i++] = carve(st, &off, N * 4);         /* rstd */
	o[i++] = carve(st, &off, OUT * 4);       /* lnw */
	o[i++] = carve(st, &off, OUT * 4);       /* lnb */
	o[i++] = carve(st, &off, N * OUT * 4);   /* dl */
	o[i++] = carve(st, &off, 4);             /* loss */
	o[i++] = carve(st, &off, OUT * 4);       /* db */
	o[i++] = carve(st, &off, OUT * 4);       /* db2 */
	o[i++] = carve(st, &off, OUT * 4);       /* p */
	o[i++] = carve(st, &off, OUT * 4);       /* m */
	o[i++] = carve(st, &off, OUT * 4);       /* v */
	o[i++] = carve(st, &off, OUT * 4);       /* sum */
	o[i++] = carve(st, &off, N * IN * 4);    /* cpy */
	o[i++] = carve(st, &off, (L + 2) * 4);   /* rx */
	o[i++] = carve(st, &off, (L + 2) * 4);   /* rw */
	o[i++] = carve(st, &off, N * IN);        /* xq */
	o[i++] = carve(st, &off, N * IN);        /* xt */
	o[i++] = carve(st, &off, OUT * IN);      /* wq */
	o[i++] = carve(st, &off, 100);           /* filled */
	o[i++] = carve(st, &off, N * 4);         /* tgt */
	st->bytes = off;
	st->arena = bk_bytes(k, off);
	if (!st->arena)
		return -1;
	float **f[] = { &st->x, &st->w, &st->bias, &st->y, &st->g, &st->ln, &st->mean, &st->rstd, &st->lnw, &st->lnb,
			&st->dl, &st->loss, &st->db, &st->db2, &st->p, &st->m, &st->v, &st->sum, &st->cpy, &st->rx, &st->rw };
	int j = 0;
	for (; j < (int)(sizeof(f) / sizeof(*f)); j++)
		*f[j] = (float *)(st->arena + o[j]);
	st->xq = st->arena + o[j++];
	st->xt = st->arena + o[j++];
	st->wq = st->arena + o[j++];
	st->filled = st->arena + o[j++];
	st->tgt = (int32_t *)(st->arena + o[j++]);
	st->views[0] = st->db;
	st->views[1] = st->db2;
	return 0;
}

/* Deterministic initial contents. */
static void state_fill(state *st)
{
	qe_rng r;
	qe_rng_init(&r, SEED);
	memset(st->arena, 0, st->bytes);
	fill_normal(st->x, N * IN, &r, 2.0f);
	fill_normal(st->w, OUT * IN, &r, 0.2f);
	fill_normal(st->bias, OUT, &r, 0.1f);
	for (int i = 0; i < OUT; i++) {
		st->lnw[i] = 1.0f + 0.1f * qe_rng_normal(&r);
		st->p[i] = qe_rng_normal(&r);
	}
	for (int i = 0; i < N; i++)
		st->tgt[i] = (int32_t)qe_rng_below(&r, OUT);
	qe_fp8_role_init(st->rx, L);
	qe_fp8_role_init(st->rw, L);
}

static const int SEQ_OPS = 17;

/* The sequence; every call's status is checked.  Returns the number of ops enqueued. */
static int enqueue(bk *k, qe_stream *s, state *st, qe_event *ev)
{
	const qe_backend_ops *o = k->o;
	qe_fp8_recipe rec = qe_fp8_recipe_default();
	rec.history_len = L;
	int n = 0;
	/* the caller's pointer array is reused after enqueue: the graph must hold its own copy */
	const float *views[2] = { st->views[0], st->views[1] };
	CHECK_OK(o->fill(s, st->filled, 0xA5, 100));
	n++;
	CHECK_OK(o->copy(s, st->cpy, st->x, N * IN * 4, QE_COPY_D2D));
	n++;
	qe_cast_args cx = { .x = qe_tensor_2d(st->x, QE_F32, QE_DEV_CPU, N, IN),
			    .row = qe_tensor_2d(st->xq, QE_E4M3, QE_DEV_CPU, N, IN),
			    .col = qe_tensor_2d(st->xt, QE_E4M3, QE_DEV_CPU, IN, N),
			    .scale = &st->rx[L], .amax = &st->rx[0], .scale_inv = &st->rx[L + 1] };
	qe_cast_args cw = { .x = qe_tensor_2d(st->w, QE_F32, QE_DEV_CPU, OUT, IN),
			    .row = qe_tensor_2d(st->wq, QE_E4M3, QE_DEV_CPU, OUT, IN),
			    .scale = &st->rw[L], .amax = &st->rw[0], .scale_inv = &st->rw[L + 1] };
	CHECK_OK(o->cast(s, &cx));
	n++;
	CHECK_OK(o->cast(s, &cw));
	n++;
	qe_tensor X = qe_tensor_2d(st->xq, QE_E4M3, QE_DEV_CPU, N, IN), W = qe_tensor_2d(st->wq, QE_E4M3, QE_DEV_CPU, OUT, IN);
	X.scale_inv = &st->rx[L + 1];
	W.scale_inv = &st->rw[L + 1];
	qe_tensor Y = qe_tensor_2d(st->y, QE_F32, QE_DEV_CPU, N, OUT);
	CHECK_OK(o->gemm(s, &X, &W, &Y, st->bias, 0));
	n++;
	CHECK_OK(o->event_record(ev, s));
	n++;
	CHECK_OK(o->gelu_fwd(s, st->g, st->y, N * OUT));
	n++;
	CHECK_OK(o->layernorm_fwd(s, st->ln, st->mean, st->rstd, st->g, QE_F32, st->lnw, st->lnb, N, OUT));
	n++;
	CHECK_OK(o->add_inplace(s, st->ln, st->y, N * OUT));
	n++;
	CHECK_OK(o->xent(s, st->loss, st->dl, st->ln, st->tgt, N, OUT, OUT, 1.0f, QE_F32));
	n++;
	CHECK_OK(o->bias_grad(s, st->db, st->dl, N, OUT));
	n++;
	CHECK_OK(o->gelu_bwd(s, st->db2, st->bias, st->db, OUT));
	n++;
	CHECK_OK(o->stream_wait(s, ev));
	n++;
	qe_adamw_args aw = { .param = st->p, .m = st->m, .v = st->v, .grads = views, .nviews = 2, .n = OUT,
			     .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
			     .step = 3, .grad_scale = 0.5f };
	CHECK_OK(o->adamw(s, &aw));
	n++;
	CHECK_OK(o->sum_views(s, st->sum, views, 2, OUT));
	n++;
	CHECK_OK(o->fp8_update(s, st->rx, L, QE_E4M3, rec));
	n++;
	CHECK_OK(o->fp8_update(s, st->rw, L, QE_E4M3, rec));
	n++;
	views[0] = views[1] = NULL;
	return n;
}

int main(void)
{
	printf("seed %u\n", SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.s)
		return qe_test_done("backend_test_capture");
	const qe_backend_ops *o = k.o;
	state st;
	if (state_init(&k, &st))
		return qe_test_done("backend_test_capture");
	uint8_t *init = malloc(st.bytes), *e1 = malloc(st.bytes), *e2 = malloc(st.bytes);
	qe_event *ev;
	CHECK_OK(o->event_create(k.b, &ev));

	/* waiting on an event never recorded is a no-op, as in CUDA */
	CHECK_OK(o->stream_wait(k.s, ev));

	/* eager reference */
	state_fill(&st);
	memcpy(init, st.arena, st.bytes);
	CHECK(enqueue(&k, k.s, &st, ev) == SEQ_OPS, "sequence length");
	memcpy(e1, st.arena, st.bytes);
	enqueue(&k, k.s, &st, ev);
	memcpy(e2, st.arena, st.bytes);
	CHECK(bytes_diff(init, e1, st.bytes) >= 0 && bytes_diff(e1, e2, st.bytes) >= 0, "the sequence changes state");
	CHECK(st.rx[L] != 1.0f, "fp8_update moved the input scale (%g)", st.rx[L]);

	/* capture: nothing runs, allocation refused */
	state_fill(&st);
	qe_graph *g = NULL;
	CHECK_OK(o->capture_begin(k.s));
	CHECK(o->capture_begin(k.s) == QE_ECAPTURE, "second capture_begin on a capturing stream");
	qe_stream *s2;
	/* the failed capture_begin left k.s failed; start over on a clean stream */
	o->stream_destroy(k.s);
	CHECK_OK(o->stream_create(k.b, &k.s));
	CHECK(o->stream_create(k.b, &s2) == QE_OK, "stream_create while nothing captures");
	CHECK_OK(o->capture_begin(k.s));
	enqueue(&k, k.s, &st, ev);
	void *p = (void *)1;
	int rc = o->alloc(k.b, 128, &p);
	CHECK(rc == QE_ECAPTURE && p == NULL, "alloc during capture: want QE_ECAPTURE, got %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "captur") != NULL, "alloc message: '%s'", qe_last_error());
	CHECK_OK(o->capture_end(k.s, &g));
	CHECK_BYTES(st.arena, init, st.bytes, "state after capture (nothing may run)");
	CHECK(o->graph_op_count(g) == SEQ_OPS, "graph holds %d ops, want %d", o->graph_op_count(g), SEQ_OPS);
	p = NULL;
	CHECK_OK(o->alloc(k.b, 128, &p));
	o->free(k.b, p);

	/* replay twice = eager twice, byte for byte; on another stream too */
	CHECK_OK(o->graph_launch(g, k.s));
	CHECK_BYTES(st.arena, e1, st.bytes, "first replay vs first eager run");
	CHECK_OK(o->graph_launch(g, k.s));
	CHECK_BYTES(st.arena, e2, st.bytes, "second replay vs second eager run");
	CHECK_OK(o->stream_sync(k.s));
	memcpy(st.arena, init, st.bytes);
	CHECK_OK(o->graph_launch(g, s2));
	CHECK_OK(o->graph_launch(g, s2));
	CHECK_BYTES(st.arena, e2, st.bytes, "two replays on a second stream");

	/* the default (NULL) stream runs at once: sequence and replay match eager */
	memcpy(st.arena, init, st.bytes);
	CHECK(enqueue(&k, NULL, &st, ev) == SEQ_OPS, "sequence on the default stream");
	CHECK_BYTES(st.arena, e1, st.bytes, "eager run on the default (NULL) stream");
	CHECK_OK(o->graph_launch(g, NULL));
	CHECK_BYTES(st.arena, e2, st.bytes, "replay on the default (NULL) stream");
	CHECK_OK(o->stream_sync(NULL));

	/* allocation is refused while any stream of the backend captures */
	CHECK_OK(o->capture_begin(s2));
	p = NULL;
	CHECK(o->alloc(k.b, 64, &p) == QE_ECAPTURE, "alloc while another stream captures");
	/* so is the default stream (CUDA's legacy stream under global capture) */
	rc = o->fill(NULL, st.filled, 0, 4);
	CHECK(rc == QE_ECAPTURE, "default-stream op during a capture: want QE_ECAPTURE, got %s", qe_errname(rc));
	CHECK(o->capture_begin(NULL) == QE_EINVAL, "the default stream cannot capture");
	/* launching a graph into a capture inlines its ops */
	CHECK_OK(o->graph_launch(g, s2));
	qe_graph *g2 = NULL;
	CHECK_OK(o->capture_end(s2, &g2));
	CHECK(g2 && o->graph_op_count(g2) == SEQ_OPS, "nested launch recorded %d ops", g2 ? o->graph_op_count(g2) : -1);
	memcpy(st.arena, init, st.bytes);
	CHECK_OK(o->graph_launch(g2, k.s));
	CHECK_BYTES(st.arena, e1, st.bytes, "replay of the graph captured by launching a graph");
	o->graph_destroy(g2);

	/* sync while capturing invalidates the capture */
	qe_stream *s3;
	CHECK_OK(o->stream_create(k.b, &s3));
	CHECK_OK(o->capture_begin(s3));
	CHECK(o->stream_sync(s3) == QE_ECAPTURE, "sync during capture");
	g2 = (qe_graph *)1;
	CHECK(o->capture_end(s3, &g2) == QE_ECAPTURE && g2 == NULL, "capture_end after an invalidated capture");
	p = NULL;
	CHECK(o->alloc(k.b, 64, &p) == QE_OK, "capture over: alloc works again");
	o->free(k.b, p);
	o->stream_destroy(s3);

	/* a data error during replay names the op and fails the stream */
	memcpy(st.arena, init, st.bytes);
	st.tgt[3] = OUT; /* out of range for xent */
	rc = o->graph_launch(g, s2);
	CHECK(rc == QE_EINVAL, "replay with a bad target: want QE_EINVAL, got %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "xent") != NULL && strstr(qe_last_error(), "op 9") != NULL,
	      "replay failure message: '%s'", qe_last_error());
	CHECK(o->fill(s2, st.filled, 0, 4) == QE_EINVAL, "the stream stays failed");
	CHECK(o->graph_launch(g, s2) == QE_EINVAL, "replay on the failed stream is refused");

	o->graph_destroy(g);
	o->stream_destroy(s2);
	o->event_destroy(ev);
	o->free(k.b, st.arena);
	free(init);
	free(e1);
	free(e2);
	bk_close(&k);
	return qe_test_done("backend_test_capture");
}
