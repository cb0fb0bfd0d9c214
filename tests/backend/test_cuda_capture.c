/*
 * test_cuda_capture.c - streams and graphs on the cuda backend (the cpu's
 * are test_capture.c).  The default (NULL) stream runs at once.  A sequence
 * touching every op kind (casts, an FP8 GEMM, GELU, layernorm, xent,
 * bias_grad, adamw and adamw_many over two gradient views, sum_views,
 * fp8_update, attention, copy, fill, events) runs on buffers carved from
 * one arena, so the whole state is one byte range: run eagerly twice, then
 * captured, capture must execute nothing, and replaying the graph must give
 * the eager results byte for byte (also on a second stream and on the
 * default stream, with the tables and views it was given overwritten: the
 * graph holds its own copies).  alloc and default-stream ops are refused
 * during capture, and a sync while capturing fails the capture.
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <stdlib.h>

#include "bk_util.h"
#include "cuda_pair.h"
#include "runtime/fp8/fp8.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

#define NAME "backend_test_cuda_capture"

#ifdef QE_WITH_CUDA

/* ---- capture / replay ---------------------------------------------------------------- */

enum { CN = 32, CIN = 64, COUT = 64, CT = 32, CH = 64, CNH = 4, CL = 4 };

typedef struct cstate {
	uint8_t *arena; /* device */
	size_t bytes;
	float *x, *w, *bias, *y, *g, *ln, *mean, *rstd, *lnw, *lnb, *dl, *loss, *db, *db2, *p, *m, *v, *sum, *cpy;
	float *rx, *rw, *qkv, *probs, *ao, *dqkv;
	uint8_t *xq, *xt, *wq, *filled;
	int32_t *tgt;
} cstate;

static size_t carve(size_t *off, size_t bytes)
{
	size_t at = *off;
	*off += (bytes + 255) & ~(size_t)255;
	return at;
}

static void cstate_init(cstate *st, uint8_t **host)
{
	size_t off = 0, o[40];
	int i = 0;
	size_t fl[] = { CN * CIN, COUT * CIN, COUT, CN * COUT, CN * COUT, CN * COUT, CN, CN, COUT, COUT, CN * COUT, 1,
			COUT, COUT, COUT, COUT, COUT, COUT, CN * CIN, CL + 2, CL + 2, CT * 3 * CH, CNH * CT * CT, CT * CH,
			CT * 3 * CH };
	int nf = (int)(sizeof(fl) / sizeof(fl[0]));
	for (i = 0; i < nf; i++)
		o[i] = carve(&off, fl[i] * 4);
	o[i++] = carve(&off, CN * CIN);
	o[i++] = carve(&off, CN * CIN);
	o[i++] = carve(&off, COUT * CIN);
	o[i++] = carve(&off, 100);
	o[i++] = carve(&off, CN * 4);
	st->bytes = off;
	st->arena = g_mem(off);
	uint8_t *hb = calloc(1, off);
	float **f[] = { &st->x,	  &st->w,  &st->bias, &st->y,	&st->g,	  &st->ln,   &st->mean, &st->rstd, &st->lnw,
			&st->lnb, &st->dl, &st->loss, &st->db,	&st->db2, &st->p,    &st->m,	&st->v,	   &st->sum,
			&st->cpy, &st->rx, &st->rw,   &st->qkv, &st->probs, &st->ao, &st->dqkv };
	for (int j = 0; j < nf; j++)
		*f[j] = (float *)(st->arena + o[j]);
	st->xq = st->arena + o[nf];
	st->xt = st->arena + o[nf + 1];
	st->wq = st->arena + o[nf + 2];
	st->filled = st->arena + o[nf + 3];
	st->tgt = (int32_t *)(st->arena + o[nf + 4]);
	/* host image of the initial state, at the same offsets */
	qe_rng r;
	qe_rng_init(&r, 4242);
#define HOST(ptr) ((float *)(hb + ((uint8_t *)(ptr) - st->arena)))
	fill_normal(HOST(st->x), CN * CIN, &r, 2.0f);
	fill_normal(HOST(st->w), COUT * CIN, &r, 0.2f);
	fill_normal(HOST(st->bias), COUT, &r, 0.1f);
	fill_normal(HOST(st->qkv), CT * 3 * CH, &r, 1.0f);
	for (int j = 0; j < COUT; j++) {
		HOST(st->lnw)[j] = 1.0f + 0.1f * qe_rng_normal(&r);
		HOST(st->p)[j] = qe_rng_normal(&r);
	}
	for (int j = 0; j < CN; j++)
		((int32_t *)HOST(st->tgt))[j] = (int32_t)qe_rng_below(&r, COUT);
	qe_fp8_role_init(HOST(st->rx), CL);
	qe_fp8_role_init(HOST(st->rw), CL);
#undef HOST
	*host = hb;
}

/* Every op kind once (events too); returns the number of calls. */
static int enqueue(qe_stream *s, cstate *st, qe_event *ev)
{
	const qe_backend_ops *o = K.go;
	qe_fp8_recipe rec = qe_fp8_recipe_default();
	rec.history_len = CL;
	int n = 0;
	const float *views[2] = { st->db, st->db2 };
	CHECK_OK(o->fill(s, st->filled, 0xA5, 100));
	n++;
	CHECK_OK(o->copy(s, st->cpy, st->x, CN * CIN * 4, QE_COPY_D2D));
	n++;
	qe_cast_args cx = { 0 }, cw = { 0 };
	cx.x = qe_tensor_2d(st->x, QE_F32, QE_DEV_CUDA, CN, CIN);
	cx.row = qe_tensor_2d(st->xq, QE_E4M3, QE_DEV_CUDA, CN, CIN);
	cx.col = qe_tensor_2d(st->xt, QE_E4M3, QE_DEV_CUDA, CIN, CN);
	cx.scale = &st->rx[CL];
	cx.amax = &st->rx[0];
	cx.scale_inv = &st->rx[CL + 1];
	cw.x = qe_tensor_2d(st->w, QE_F32, QE_DEV_CUDA, COUT, CIN);
	cw.row = qe_tensor_2d(st->wq, QE_E4M3, QE_DEV_CUDA, COUT, CIN);
	cw.current = 1;
	cw.scale = &st->rw[CL];
	cw.amax = &st->rw[0];
	cw.scale_inv = &st->rw[CL + 1];
	CHECK_OK(o->cast(s, &cx));
	n++;
	CHECK_OK(o->cast(s, &cw));
	n++;
	qe_tensor X = qe_tensor_2d(st->xq, QE_E4M3, QE_DEV_CUDA, CN, CIN);
	qe_tensor W = qe_tensor_2d(st->wq, QE_E4M3, QE_DEV_CUDA, COUT, CIN);
	X.scale_inv = &st->rx[CL + 1];
	W.scale_inv = &st->rw[CL + 1];
	qe_tensor Y = qe_tensor_2d(st->y, QE_F32, QE_DEV_CUDA, CN, COUT);
	CHECK_OK(o->gemm(s, &X, &W, &Y, st->bias, 0));
	n++;
	CHECK_OK(o->event_record(ev, s));
	n++;
	CHECK_OK(o->gelu_fwd(s, st->g, st->y, CN * COUT));
	n++;
	CHECK_OK(o->layernorm_fwd(s, st->ln, st->mean, st->rstd, st->g, QE_F32, st->lnw, st->lnb, CN, COUT));
	n++;
	CHECK_OK(o->add_inplace(s, st->ln, st->y, CN * COUT));
	n++;
	CHECK_OK(o->xent(s, st->loss, st->dl, st->ln, st->tgt, CN, COUT, COUT, 1.0f, QE_F32));
	n++;
	CHECK_OK(o->bias_grad(s, st->db, st->dl, CN, COUT));
	n++;
	CHECK_OK(o->gelu_bwd(s, st->db2, st->bias, st->db, COUT));
	n++;
	CHECK_OK(o->stream_wait(s, ev));
	n++;
	qe_adamw_args aw = { 0 };
	aw.param = st->p;
	aw.m = st->m;
	aw.v = st->v;
	aw.grads = views;
	aw.nviews = 2;
	aw.n = COUT;
	aw.lr = 1e-2f;
	aw.beta1 = 0.9f;
	aw.beta2 = 0.95f;
	aw.eps = 1e-8f;
	aw.weight_decay = 0.1f;
	aw.step = 3;
	aw.grad_scale = 0.5f;
	CHECK_OK(o->adamw(s, &aw));
	n++;
	CHECK_OK(o->sum_views(s, st->sum, views, 2, COUT));
	n++;
	/* float4s [0, 32), floats [33, 64) through unaligned views; float 32 untouched */
	const float *v33[2] = { st->db + 33, st->db2 + 33 };
	qe_adamw_seg segs[2] = { { .offset = 0, .n = 32, .weight_decay = 0.1f, .nviews = 2, .grads = views },
				 { .offset = 33, .n = 31, .weight_decay = 0.0f, .nviews = 2, .grads = v33 } };
	qe_adamw_many_args am = { 0 };
	am.param = st->p;
	am.m = st->m;
	am.v = st->v;
	am.segs = segs;
	am.nseg = 2;
	am.lr = 1e-2f;
	am.beta1 = 0.9f;
	am.beta2 = 0.95f;
	am.eps = 1e-8f;
	am.step = 4;
	am.grad_scale = 0.25f;
	CHECK_OK(o->adamw_many(s, &am));
	n++;
	segs[0].n = segs[1].n = -1; /* the graph must hold its own copy of the table */
	v33[0] = v33[1] = NULL;
	CHECK_OK(o->fp8_update(s, st->rx, CL, QE_E4M3, rec));
	n++;
	CHECK_OK(o->attn_fwd(s, st->ao, st->probs, st->qkv, CT, CH, CNH));
	n++;
	CHECK_OK(o->attn_bwd(s, st->dqkv, st->ao, st->qkv, st->probs, CT, CH, CNH));
	n++;
	CHECK_OK(o->add_inplace(s, st->qkv, st->dqkv, CT * 3 * CH));
	n++;
	CHECK_OK(o->add_inplace(s, st->x, st->cpy, CN * CIN));
	n++;
	views[0] = views[1] = NULL; /* the graph must hold its own copy of the views */
	return n;
}

static void test_capture(void)
{
	printf("capture / replay\n");
	cstate st;
	uint8_t *init;
	cstate_init(&st, &init);
	uint8_t *e1 = malloc(st.bytes), *e2 = malloc(st.bytes), *h = malloc(st.bytes);
	qe_stream *s, *s2;
	qe_event *ev;
	CHECK_OK(K.go->stream_create(K.gb, &s));
	CHECK_OK(K.go->stream_create(K.gb, &s2));
	CHECK_OK(K.go->event_create(K.gb, &ev));
	CHECK_OK(K.go->stream_wait(s, ev)); /* never recorded: a no-op */

	CHECK_OK(K.go->copy(s, st.arena, init, st.bytes, QE_COPY_H2D));
	int nops = enqueue(s, &st, ev);
	CHECK_OK(K.go->copy(s, e1, st.arena, st.bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(s));
	enqueue(s, &st, ev);
	CHECK_OK(K.go->copy(s, e2, st.arena, st.bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(s));
	CHECK(bytes_diff(init, e1, st.bytes) >= 0 && bytes_diff(e1, e2, st.bytes) >= 0, "the sequence changes state");

	CHECK_OK(K.go->copy(s, st.arena, init, st.bytes, QE_COPY_H2D));
	CHECK_OK(K.go->stream_sync(s));
	qe_graph *g = NULL;
	CHECK_OK(K.go->capture_begin(s));
	enqueue(s, &st, ev);
	void *p = (void *)1;
	int rc = K.go->alloc(K.gb, 128, &p);
	CHECK(rc == QE_ECAPTURE && p == NULL, "alloc during capture: want QE_ECAPTURE, got %s", qe_errname(rc));
	rc = K.go->fill(NULL, st.filled, 0, 4);
	CHECK(rc == QE_ECAPTURE, "default-stream op during capture: want QE_ECAPTURE, got %s", qe_errname(rc));
	CHECK(K.go->capture_begin(NULL) == QE_EINVAL, "the default stream cannot capture");
	CHECK_OK(K.go->capture_end(s, &g));
	int nodes = g ? K.go->graph_op_count(g) : -1;
	printf("  %d op calls captured into a graph of %d nodes\n", nops, nodes);
	CHECK(nodes >= nops, "graph has %d nodes for %d op calls", nodes, nops);
	CHECK_OK(K.go->copy(s, h, st.arena, st.bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(s));
	same_bytes("state after capture (nothing ran)", init, h, st.bytes);
	CHECK_OK(K.go->graph_launch(g, s));
	CHECK_OK(K.go->copy(s, h, st.arena, st.bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(s));
	same_bytes("first replay vs first eager run", e1, h, st.bytes);
	CHECK_OK(K.go->graph_launch(g, s));
	CHECK_OK(K.go->copy(s, h, st.arena, st.bytes, QE_COPY_D2H));
	CHECK_OK(K.go->stream_sync(s));
	same_bytes("second replay vs second eager run", e2, h, st.bytes);
	/* on another stream, and on the default stream */
	CHECK_OK(K.go->copy(s2, st.arena, init, st.bytes, QE_COPY_H2D));
	CHECK_OK(K.go->graph_launch(g, s2));
	CHECK_OK(K.go->stream_sync(s2));
	CHECK_OK(K.go->graph_launch(g, NULL));
	CHECK_OK(K.go->copy(NULL, h, st.arena, st.bytes, QE_COPY_D2H));
	same_bytes("replays on a second stream and NULL", e2, h, st.bytes);

	/* sync while capturing fails the stream; capture_end reports it */
	qe_stream *s3;
	CHECK_OK(K.go->stream_create(K.gb, &s3));
	CHECK_OK(K.go->capture_begin(s3));
	CHECK(K.go->stream_sync(s3) == QE_ECAPTURE, "sync during capture");
	qe_graph *g2 = (qe_graph *)1;
	CHECK(K.go->capture_end(s3, &g2) == QE_ECAPTURE && g2 == NULL, "capture_end after an invalidated capture");
	p = NULL;
	CHECK(K.go->alloc(K.gb, 64, &p) == QE_OK, "capture over: alloc works again");
	K.go->free(K.gb, p);
	K.go->stream_destroy(s3);

	K.go->graph_destroy(g);
	K.go->event_destroy(ev);
	K.go->stream_destroy(s);
	K.go->stream_destroy(s2);
	K.go->free(K.gb, st.arena);
	free(init);
	free(e1);
	free(e2);
	free(h);
}

int main(void)
{
	qe_rng r;
	int rc = both_open(20261129u, &r);
	if (rc <= 0)
		return rc < 0 ? qe_test_done(NAME) : 0;

	/* the default (NULL) stream runs at once */
	void *d = g_mem(16);
	float one[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
	CHECK_OK(K.go->copy(NULL, d, one, 16, QE_COPY_H2D));
	CHECK_OK(K.go->add_inplace(NULL, d, d, 4));
	CHECK_OK(K.go->copy(NULL, back, d, 16, QE_COPY_D2H));
	CHECK(back[0] == 2 && back[3] == 8, "NULL-stream ops: got %g %g", back[0], back[3]);

	test_capture();

	/* leak accounting is the backends' business; the buffers die with the process */
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif