/*
 * bench_attention.c - `qeffect bench attention`: the flash attention's forward
 * and backward alone, in TFLOP/s, at the shapes of the models people train
 * (issue 34).  bench/attention/run.sh sets PyTorch's scaled_dot_product_attention
 * beside it (bench/peers/attention_torch.py), on the same shapes, in one call.
 *
 * A pass is the backend's op as training calls it: attn_flash_fwd and
 * attn_flash_bwd (the row dot products, dQ, dK and dV), with qkv and dout
 * stored as training stores them: bf16 for bf16 operands (the kernels read
 * them where they lie, no copies), f32 for TF32.  No QKV bias.
 *
 * FLOPs are counted causal, as the issue states them: the forward 2 B nh T^2 D
 * (QK^T and PV over half the T x T scores), the backward 2.5 times that.  Each
 * pass is repeated until min-ms have passed (after two warm-up calls) and its
 * time is the mean over the repetitions, host wall clock around a stream sync.
 * Operands are normal(0, 1) values (q, k, v and dout), so the softmax is not
 * uniform.  A shape the backend refuses (head dim 128 with TF32 operands) is reported as
 * unsupported with the backend's message; the others still run.
 */
#include <limits.h>
#include <math.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/backend/backend.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"
#include "runtime/fp8/bf16.h"

#define MAX_SHAPES 16

typedef struct attn_shape {
	long batch, heads, seq, dim;
	char name[32];
} attn_shape;

/* gpt2, gpt2-xl, and seq 4096 at head dim 64 and 128 (the shapes) */
static const attn_shape cuda_shapes[] = {
	{ 16, 12, 1024, 64, "gpt2 b16" },
	{ 8, 25, 1024, 64, "gpt2-xl b8" },
	{ 4, 16, 4096, 64, "seq4096 d64" },
	{ 2, 16, 4096, 128, "seq4096 d128" },
};
/* the cpu backend runs the reference loops: a small shape */
static const attn_shape cpu_shapes[] = { { 1, 4, 256, 64, "small" } };

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect bench attention [--backend cuda|cpu] [--shapes B:NH:T:D,...] [--operands bf16|tf32]\n"
		"                               [--min-ms MS] [--json]\n\n"
		"The flash attention's forward and backward alone, causal, in TFLOP/s: FLOPs counted as\n"
		"2 B NH T^2 D for the forward (half of the T x T scores) and 2.5 times that for the backward.\n"
		"A pass is the op training runs, on q, k, v and dout stored as training stores them (bf16\n"
		"for bf16 operands, f32 for tf32), without a QKV bias.\n\n"
		"  --backend cuda|cpu   where to run (default cuda)\n"
		"  --shapes LIST        B:NH:T:D items (batch, heads, sequence, head dim); default on cuda:\n"
		"                       16:12:1024:64 (gpt2 b16), 8:25:1024:64 (gpt2-xl b8), 4:16:4096:64 and\n"
		"                       2:16:4096:128; on cpu 1:4:256:64\n"
		"  --operands bf16|tf32 what the tensor cores multiply (default bf16, as training at fp8 or bf16)\n"
		"  --min-ms MS          time each pass at least this long (default 300 on cuda, 50 on cpu)\n"
		"  --json               one JSON object per shape instead of the table\n\n"
		"bench/attention/run.sh runs it beside PyTorch's scaled_dot_product_attention.\n");
}

static int parse_shapes(const char *s, attn_shape *out, int *n)
{
	char items[MAX_SHAPES][32];
	int k = bench_split_list(s, items, MAX_SHAPES);
	if (k < 0)
		return -1;
	for (int i = 0; i < k; i++) {
		attn_shape *a = &out[i];
		char tail;
		if (sscanf(items[i], "%ld:%ld:%ld:%ld%c", &a->batch, &a->heads, &a->seq, &a->dim, &tail) != 4 ||
		    a->batch < 1 || a->heads < 1 || a->seq < 1 || a->dim < 1 || a->batch * a->seq > (1L << 26) ||
		    a->heads * a->dim > (1L << 16))
			return -1;
		snprintf(a->name, sizeof(a->name), "%.31s", items[i]);
	}
	*n = k;
	return 0;
}

typedef struct pass_time {
	double ms;
	long reps;
} pass_time;

typedef struct attn_bufs {
	void *qkv, *dout; /* of dt */
	float *out, *lse, *dqkv;
	qe_dtype dt;
} attn_bufs;

/* Mean time of one call of the pass (fwd: 0, bwd: 1), repeated until min_ms have passed. */
static int time_pass(const qe_backend_ops *o, qe_stream *s, const attn_shape *a, const attn_bufs *m, int bwd,
		     qe_flash_operands op, double min_ms, pass_time *t)
{
	int64_t H = a->heads * a->dim;
	int rc = QE_OK;
#define CALL()                                                                                                 \
	(bwd ? o->attn_flash_bwd(s, m->dqkv, m->dout, m->qkv, NULL, m->out, m->lse, a->batch, a->seq, H,       \
				 (int)a->heads, op, m->dt)                                                     \
	     : o->attn_flash_fwd(s, m->out, m->lse, m->qkv, NULL, a->batch, a->seq, H, (int)a->heads, op, m->dt))
	for (int i = 0; i < 2 && !rc; i++)
		rc = CALL();
	if (rc || (rc = o->stream_sync(s)))
		return rc;
	long reps = 1;
	for (;;) {
		double t0 = bench_now_ms();
		for (long i = 0; i < reps && !rc; i++)
			rc = CALL();
		if (rc || (rc = o->stream_sync(s)))
			return rc;
		double dt = bench_now_ms() - t0;
		if (dt >= min_ms || reps >= (1L << 20)) {
			t->ms = dt / reps;
			t->reps = reps;
			return QE_OK;
		}
		reps = dt > 0 ? (long)(reps * 1.2 * min_ms / dt) + 1 : reps * 16;
	}
#undef CALL
}

/*
 * Device buffers of one shape, q, k, v and dout filled with normal(0, 1)
 * values of type m->dt (bf16: the floats rounded to nearest even).
 */
static int shape_bufs(qe_backend *b, qe_stream *s, const attn_shape *a, attn_bufs *m)
{
	const qe_backend_ops *o = b->ops;
	int64_t N = a->batch * a->seq, H = a->heads * a->dim;
	int64_t nq = N * 3 * H;
	size_t es = qe_dtype_size(m->dt);
	float *host = malloc((size_t)nq * sizeof(float));
	if (!host)
		return qe_fail(QE_ENOMEM, "bench attention: %lld host floats", (long long)nq);
	qe_rng r;
	qe_rng_init(&r, 34);
	qe_rng_normal_fill(&r, host, nq, 1.0f);
	if (m->dt == QE_BF16) /* in place: code i overwrites bytes that float i no longer needs */
		for (int64_t i = 0; i < nq; i++)
			((uint16_t *)host)[i] = qe_bf16_from_f32(host[i]);
	int rc;
	if ((rc = o->alloc(b, (size_t)nq * es, &m->qkv)) || (rc = o->alloc(b, (size_t)nq * 4, (void **)&m->dqkv)) ||
	    (rc = o->alloc(b, (size_t)(N * H) * 4, (void **)&m->out)) ||
	    (rc = o->alloc(b, (size_t)(N * H) * es, &m->dout)) ||
	    (rc = o->alloc(b, (size_t)(a->batch * a->heads * a->seq) * 4, (void **)&m->lse)) ||
	    (rc = o->copy(s, m->qkv, host, (size_t)nq * es, QE_COPY_H2D)) ||
	    (rc = o->copy(s, m->dout, host, (size_t)(N * H) * es, QE_COPY_H2D)) || (rc = o->stream_sync(s))) {
		free(host);
		return rc;
	}
	free(host);
	return QE_OK;
}

static void free_bufs(qe_backend *b, attn_bufs *m)
{
	b->ops->free(b, m->qkv);
	b->ops->free(b, m->dqkv);
	b->ops->free(b, m->out);
	b->ops->free(b, m->dout);
	b->ops->free(b, m->lse);
	m->qkv = m->dout = NULL;
	m->out = m->lse = m->dqkv = NULL;
}

int bench_attention_main(int argc, char **argv)
{
	const char *backend = "cuda", *shapes_s = NULL, *opname = "bf16";
	double min_ms = -1;
	int json = 0;
	const cli_flag table[] = {
		{ "backend", 0, CLI_FLAG_STRING, .dst = &backend },
		{ "shapes", 0, CLI_FLAG_STRING, .dst = &shapes_s },
		{ "operands", 0, CLI_FLAG_STRING, .dst = &opname },
		{ "min-ms", 0, CLI_FLAG_DOUBLE, &min_ms, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ 0 },
	};
	int rc = cli_flags_parse("bench attention", table, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (strcmp(backend, "cuda") && strcmp(backend, "cpu")) {
		fprintf(stderr, "qeffect bench attention: --backend cuda or cpu, not '%s'\n", backend);
		return 2;
	}
	if (strcmp(opname, "bf16") && strcmp(opname, "tf32")) {
		fprintf(stderr, "qeffect bench attention: --operands bf16 or tf32, not '%s'\n", opname);
		return 2;
	}
	qe_flash_operands op = strcmp(opname, "bf16") == 0 ? QE_FLASH_BF16 : QE_FLASH_TF32;
	attn_shape shapes[MAX_SHAPES];
	int nshapes = 0;
	if (shapes_s) {
		if (parse_shapes(shapes_s, shapes, &nshapes)) {
			fprintf(stderr, "qeffect bench attention: --shapes wants B:NH:T:D items, all >= 1 (B*T up to "
					"2^26, NH*D up to 2^16), comma-separated, at most %d: '%s'\n",
				MAX_SHAPES, shapes_s);
			return 2;
		}
	} else {
		int cuda = strcmp(backend, "cuda") == 0;
		const attn_shape *d = cuda ? cuda_shapes : cpu_shapes;
		nshapes = cuda ? (int)(sizeof(cuda_shapes) / sizeof(cuda_shapes[0])) : 1;
		memcpy(shapes, d, (size_t)nshapes * sizeof(*d));
	}
	qe_backend *b = NULL;
	qe_stream *s = NULL;
	rc = qe_backend_open(backend, &b);
	if (rc)
		return cli_report("bench attention", rc, "opening the backend");
	if (min_ms < 0)
		min_ms = b->ops->device == QE_DEV_CUDA ? 300 : 50;
	int status = 0;
	if ((rc = b->ops->stream_create(b, &s))) {
		status = cli_report("bench attention", rc, "creating a stream");
		goto out;
	}
	if (!json)
		printf("%-16s %6s %4s %6s %4s  %10s %10s  %10s %10s\n", "shape", "batch", "nh", "seq", "dim", "fwd ms",
		       "fwd TF/s", "bwd ms", "bwd TF/s");
	for (int i = 0; i < nshapes; i++) {
		const attn_shape *a = &shapes[i];
		attn_bufs m = { .dt = op == QE_FLASH_BF16 ? QE_BF16 : QE_F32 };
		pass_time tf = { 0 }, tb = { 0 };
		double fl = 2.0 * a->batch * a->heads * (double)a->seq * a->seq * a->dim;
		if ((rc = shape_bufs(b, s, a, &m)) == QE_OK && (rc = time_pass(b->ops, s, a, &m, 0, op, min_ms, &tf)) == QE_OK)
			rc = time_pass(b->ops, s, a, &m, 1, op, min_ms, &tb);
		free_bufs(b, &m);
		const char *why = rc ? qe_last_error() : NULL;
		if (rc && rc != QE_EUNSUPPORTED) {
			status = cli_report("bench attention", rc, a->name);
			goto out;
		}
		char whybuf[512] = "";
		if (rc) {
			/* a refused op leaves its stream failed (backend.h): the next shape gets a new one */
			snprintf(whybuf, sizeof(whybuf), "%s", why);
			why = whybuf;
			b->ops->stream_destroy(s);
			s = NULL;
			int src = b->ops->stream_create(b, &s);
			if (src) {
				status = cli_report("bench attention", src, "creating a stream");
				goto out;
			}
		}
		double ftf = rc ? NAN : fl / (tf.ms / 1e3) / 1e12, btf = rc ? NAN : 2.5 * fl / (tb.ms / 1e3) / 1e12;
		if (json) {
			json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:I,s:I,s:f}", "bench",
					      "attention", "impl", "qeffect", "backend", b->ops->name, "shape", a->name,
					      "batch", (json_int_t)a->batch, "heads", (json_int_t)a->heads, "seq",
					      (json_int_t)a->seq, "head_dim", (json_int_t)a->dim, "fwd_ms",
					      bench_real(rc ? NAN : tf.ms), "bwd_ms", bench_real(rc ? NAN : tb.ms),
					      "fwd_tflops", bench_real(ftf), "bwd_tflops", bench_real(btf), "fwd_reps",
					      (json_int_t)tf.reps, "bwd_reps", (json_int_t)tb.reps, "fwd_flop", fl);
			if (o && why)
				json_object_set_new(o, "unsupported", json_string(why));
			char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
			if (txt)
				printf("%s\n", txt);
			free(txt);
			json_decref(o);
		} else if (rc) {
			printf("%-16s %6ld %4ld %6ld %4ld  unsupported: %s\n", a->name, a->batch, a->heads, a->seq, a->dim,
			       why);
		} else {
			printf("%-16s %6ld %4ld %6ld %4ld  %10.3f %10.4g  %10.3f %10.4g\n", a->name, a->batch, a->heads,
			       a->seq, a->dim, tf.ms, ftf, tb.ms, btf);
		}
		fflush(stdout);
		rc = QE_OK;
	}
out:
	if (s)
		b->ops->stream_destroy(s);
	qe_backend_close(b);
	return status;
}
