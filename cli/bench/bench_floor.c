/*
 * bench_floor.c - `qeffect bench floor`: the least time a pipeline rank can
 * take per step on this machine, from the model's arithmetic and two rates
 * measured through the op table:
 *
 *   floor = GEMM FLOPs of the rank / FP8 GEMM rate  +  bytes the step must move / copy bandwidth
 *
 * GEMM FLOPs: every linear of every local stage, every microbatch: forward,
 * dgrad and wgrad, 2*T*in*out each (attention's batched GEMMs, under 1% at
 * sequence 256, are left out).  Bytes: the gradient traffic, plus parameters,
 * m and v read and written once.  Gradients: the matrix gradients go to the
 * accumulating arena (one view per matrix): microbatch 0's dW writes it, each
 * later dW reads and writes it (GEMM beta = 1), the optimizer reads it once,
 * so 1 + 2(M-1) + 1 = 2M passes over the matrix floats - the same bytes as
 * M per-microbatch views written once and read once, in 1/M of the memory.
 * The non-matrix gradients accumulate too (runtime/model/stage_backward.c):
 * microbatch 0 writes the sum, each later one writes a scratch buffer that is
 * added in (write, read, read, write), the optimizer reads the sum:
 * 2 + 4(M-1) passes over them, except the embedding's (first stage): its
 * V x H gradient is cleared once (M > 1) and read by the optimizer, and each
 * microbatch moves only its tokens' rows (written by microbatch 0, read and
 * written by later ones).  The GEMM rate is ops->gemm on E4M3 operands of the representative
 * shape T x 4H x H (T = sequence length) after warmup, wall time over many
 * calls on one stream ending in stream_sync; the bandwidth is ops->copy D2D of
 * one large buffer, counted as bytes read + written.  Every GEMM shape of the
 * model is timed as well, giving a second, shape-by-shape floor.
 *
 * The floor is per placement: interleaved puts the embedding and the head on
 * different ranks, ZB-V's V shape puts both on rank 0.
 */
#include <limits.h>
#include <math.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/model/model.h"
#include "runtime/sched/sched.h"

/* The linears of one stage: out x in weights. */
typedef struct linear {
	const char *name;
	int64_t out, in;
} linear;

static int stage_linears(const qe_model_config *c, int stage, int nstages, linear *lin)
{
	int64_t H = c->hidden, F = c->ffn;
	int n = 0;
	lin[n++] = (linear){ "qkv", 3 * H, H };
	lin[n++] = (linear){ "proj", H, H };
	lin[n++] = (linear){ "fc1", F, H };
	lin[n++] = (linear){ "fc2", H, F };
	if (stage == nstages - 1)
		lin[n++] = (linear){ "head", c->vocab, H };
	return n;
}

/* Non-matrix parameter floats of a stage (runtime/model/stage.c's parameter table). */
static int64_t stage_nonmatrix(const qe_model_config *c, int stage, int nstages)
{
	int64_t H = c->hidden, F = c->ffn;
	int64_t n = 2 * H + 3 * H + H + 2 * H + F + H; /* ln1, qkv bias, proj bias, ln2, fc1 bias, fc2 bias */
	if (stage == 0)
		n += (int64_t)c->vocab * H + (int64_t)c->seq * H; /* wte, wpe */
	if (stage == nstages - 1)
		n += 2 * H; /* lnf; the head has no bias */
	return n;
}

int bench_floor_model(const char *preset, int P, int M, int zbv, bench_floor_rank *ranks)
{
	qe_model_config c;
	QE_TRY(qe_model_preset(preset, &c));
	int S = 2 * P;
	if (c.layers != S)
		return qe_fail(QE_EINVAL, "floor: preset '%s' has %d layers, --pp %d with two chunks needs %d", preset,
			       c.layers, P, S);
	qe_sched *s = NULL;
	QE_TRY(qe_sched_create(zbv ? QE_PLACE_VSHAPE : QE_PLACE_INTERLEAVED, P, 2, M, QE_BACKWARD_SPLIT, &s));
	double tokens = (double)qe_model_tokens(&c);
	for (int r = 0; r < P; r++) {
		bench_floor_rank *fr = &ranks[r];
		double wte = 0; /* the embedding's gradient floats on this rank */
		memset(fr, 0, sizeof(*fr));
		for (int ch = 0; ch < 2; ch++) {
			int st = qe_sched_stage_of(s, r, ch);
			linear lin[QE_LIN_KINDS];
			int nl = stage_linears(&c, st, S, lin);
			double mat = 0, flops = 0;
			for (int i = 0; i < nl; i++) {
				mat += (double)lin[i].out * lin[i].in;
				flops += 3 * 2.0 * c.seq * lin[i].in * lin[i].out;
			}
			double nonmat = (double)stage_nonmatrix(&c, st, S);
			fr->stages[fr->nstages++] = st;
			fr->gemm_flops += flops * M;
			fr->params += mat + nonmat;
			fr->grad_floats += mat + nonmat;
			fr->matrix_floats += mat;
			if (st == 0)
				wte += (double)c.vocab * c.hidden;
		}
		/* accumulating matrix arena: write (mb 0) + (M-1) x (read + write) + the optimizer's read */
		double mat_passes = 1.0 + 2.0 * (M - 1) + 1.0;
		/* accumulating non-matrix sum: write (mb 0) + (M-1) x (scratch write, read; sum read, write) + read */
		double nonmat_passes = 2.0 + 4.0 * (M - 1);
		double other = fr->grad_floats - fr->matrix_floats - wte;
		double wte_bytes = wte > 0 ? ((M > 1 ? 2.0 : 1.0) * wte + (1.0 + 2.0 * (M - 1)) * tokens * c.hidden) * 4 : 0;
		fr->grad_bytes = mat_passes * fr->matrix_floats * 4 + nonmat_passes * other * 4 + wte_bytes;
		fr->arena_bytes = fr->matrix_floats * 4;
		fr->bytes = fr->grad_bytes + 6.0 * fr->params * 4;
	}
	qe_sched_free(s);
	return QE_OK;
}

/*
 * The formula above against the model's own parameter table, on stages built
 * on the cpu backend (only for models small enough to build here).
 */
static int check_model(qe_backend *b, const char *preset, char *msg, size_t len)
{
	qe_model_config c;
	QE_TRY(qe_model_preset(preset, &c));
	qe_precision prec = { 1, 0, qe_fp8_recipe_default() };
	for (int st = 0; st < c.layers; st++) {
		qe_stage *s = NULL;
		QE_TRY(qe_stage_create(b, &c, &prec, st, c.layers, 1, 1, 0, &s));
		linear lin[QE_LIN_KINDS];
		int nl = stage_linears(&c, st, c.layers, lin);
		double want_mat = 0, got_mat = 0;
		for (int i = 0; i < nl; i++)
			want_mat += (double)lin[i].out * lin[i].in;
		for (int i = 0; i < qe_stage_nparams(s); i++) {
			const qe_param_info *pi = qe_stage_param(s, i);
			if (pi->is_matrix)
				got_mat += (double)pi->rows * pi->cols;
		}
		int64_t want_non = stage_nonmatrix(&c, st, c.layers);
		int ok = got_mat == want_mat && qe_stage_nonmatrix_floats(s) == want_non &&
			 qe_stage_param_floats(s) == (int64_t)want_mat + want_non && qe_stage_nmatrices(s) == nl;
		if (!ok)
			snprintf(msg, len, "stage %d: model has %d matrices, %.0f matrix and %lld non-matrix floats; the "
				 "floor counts %d, %.0f and %lld", st, qe_stage_nmatrices(s), got_mat,
				 (long long)qe_stage_nonmatrix_floats(s), nl, want_mat, (long long)want_non);
		qe_stage_free(s);
		if (!ok)
			return QE_EMISMATCH;
	}
	snprintf(msg, len, "ok");
	return QE_OK;
}

typedef struct gemm_time {
	int64_t m, n, k;
	double ms; /* per call */
	long reps;
} gemm_time;

/* ms per call of C[m,n] = A[m,k] B[n,k]^T on E4M3 operands, after warmup. */
static int time_gemm(qe_backend *b, qe_stream *s, gemm_time *g, int min_reps, double min_ms)
{
	const qe_backend_ops *o = b->ops;
	void *A = NULL, *B = NULL, *C = NULL, *sc = NULL;
	float one[2] = { 1.0f, 1.0f };
	int rc;
	if ((rc = o->alloc(b, (size_t)(g->m * g->k), &A)) || (rc = o->alloc(b, (size_t)(g->n * g->k), &B)) ||
	    (rc = o->alloc(b, (size_t)(g->m * g->n) * 4, &C)) || (rc = o->alloc(b, 8, &sc)))
		goto out;
	/* 0x3C is 1.5 and 0x38 is 1.0 in E4M3: finite, non-zero operands. */
	if ((rc = o->fill(s, A, 0x3C, (size_t)(g->m * g->k))) || (rc = o->fill(s, B, 0x38, (size_t)(g->n * g->k))) ||
	    (rc = o->copy(s, sc, one, sizeof(one), QE_COPY_H2D)) || (rc = o->stream_sync(s)))
		goto out;
	qe_tensor ta = qe_tensor_2d(A, QE_E4M3, o->device, g->m, g->k);
	qe_tensor tb = qe_tensor_2d(B, QE_E4M3, o->device, g->n, g->k);
	qe_tensor tc = qe_tensor_2d(C, QE_F32, o->device, g->m, g->n);
	ta.scale_inv = (float *)sc;
	tb.scale_inv = (float *)sc + 1;
	for (int i = 0; i < 3 && !rc; i++)
		rc = o->gemm(s, &ta, &tb, &tc, NULL, 0);
	if (rc || (rc = o->stream_sync(s)))
		goto out;
	long reps = min_reps;
	for (;;) {
		double t0 = bench_now_ms();
		for (long i = 0; i < reps && !rc; i++)
			rc = o->gemm(s, &ta, &tb, &tc, NULL, 0);
		if (rc || (rc = o->stream_sync(s)))
			goto out;
		double dt = bench_now_ms() - t0;
		if (dt >= min_ms || reps >= (1L << 22)) {
			g->ms = dt / reps;
			g->reps = reps;
			break;
		}
		reps = dt > 0 ? (long)(reps * 1.2 * min_ms / dt) + 1 : reps * 16;
	}
out:
	if (rc)
		rc = qe_fail_ctx(rc, "gemm %lldx%lldx%lld", (long long)g->m, (long long)g->n, (long long)g->k);
	o->free(b, A);
	o->free(b, B);
	o->free(b, C);
	o->free(b, sc);
	return rc;
}

/* Copy bandwidth (bytes read + written per second) of D2D copies of `bytes`. */
static int time_copy(qe_backend *b, qe_stream *s, size_t bytes, int min_reps, double min_ms, double *gbps, long *reps_out)
{
	const qe_backend_ops *o = b->ops;
	void *src = NULL, *dst = NULL;
	int rc;
	if ((rc = o->alloc(b, bytes, &src)) || (rc = o->alloc(b, bytes, &dst)) || (rc = o->fill(s, src, 0x5A, bytes)))
		goto out;
	for (int i = 0; i < 2 && !rc; i++)
		rc = o->copy(s, dst, src, bytes, QE_COPY_D2D);
	if (rc || (rc = o->stream_sync(s)))
		goto out;
	long reps = min_reps;
	for (;;) {
		double t0 = bench_now_ms();
		for (long i = 0; i < reps && !rc; i++)
			rc = o->copy(s, dst, src, bytes, QE_COPY_D2D);
		if (rc || (rc = o->stream_sync(s)))
			goto out;
		double dt = bench_now_ms() - t0;
		if (dt >= min_ms || reps >= (1L << 20)) {
			*gbps = 2.0 * (double)bytes * reps / (dt / 1e3) / 1e9;
			*reps_out = reps;
			break;
		}
		reps = dt > 0 ? (long)(reps * 1.2 * min_ms / dt) + 1 : reps * 16;
	}
out:
	if (rc)
		rc = qe_fail_ctx(rc, "copy of %zu bytes", bytes);
	o->free(b, src);
	o->free(b, dst);
	return rc;
}

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect bench floor [--backend cpu|cuda] [--preset h4096] [--micro 8] [--pp 2] [--json]\n\n"
		   "The per-rank floor of one training step with two chunks per rank:\n"
		   "  GEMM FLOPs / measured FP8 GEMM rate + bytes moved / measured copy bandwidth\n"
		   "GEMM FLOPs: forward, dgrad and wgrad (2*T*in*out each) of every linear of the rank's stages,\n"
		   "every microbatch.  Bytes: the accumulating matrix arena (mb 0 writes, later mbs read + write,\n"
		   "the optimizer reads), the accumulating non-matrix sum (mb 0 writes; later mbs write a scratch\n"
		   "that is added in; the embedding's rows only, added in place), parameters, AdamW m and v\n"
		   "read and written once.  The GEMM rate is\n"
		   "ops->gemm on E4M3 operands of shape T x 4H x H (T the sequence length); the bandwidth is\n"
		   "ops->copy D2D counted as bytes read + written.  Every GEMM shape of the model is timed too\n"
		   "(shape_floor_ms: the same floor with each GEMM at its own measured time).  Printed for the\n"
		   "interleaved and the ZB-V (V-shape) placement; the heavier rank sets the floor.\n\n"
		   "flags:\n"
		   "  --backend cpu|cuda   (default cpu)\n"
		   "  --preset NAME        model preset (default h4096)\n"
		   "  --micro M            microbatches per step (default 8)\n"
		   "  --pp P               pipeline ranks (default 2; layers must equal 2P)\n"
		   "  --copy-mib N         copy buffer size (default 1024 on cuda, 32 on cpu)\n"
		   "  --min-ms X           time each measurement at least this long (default 200 cuda, 20 cpu)\n"
		   "  --json               print one JSON object instead of the table\n");
}

static json_t *placement_json(const char *preset, int P, int M, int zbv, double rate_flops, double bw,
			      const gemm_time *shapes, int nshapes, double *floor_out)
{
	bench_floor_rank ranks[16];
	if (P > 16 || bench_floor_model(preset, P, M, zbv, ranks))
		return NULL;
	qe_model_config c;
	qe_model_preset(preset, &c);
	json_t *arr = json_array();
	double worst = -1, worst_shape = 0;
	int heavier = 0;
	for (int r = 0; r < P; r++) {
		bench_floor_rank *fr = &ranks[r];
		double gemm_ms = fr->gemm_flops / rate_flops * 1e3, bytes_ms = fr->bytes / (bw * 1e9) * 1e3;
		/* shape by shape: each GEMM at its own measured time */
		double shape_ms = 0;
		for (int i = 0; i < fr->nstages; i++) {
			linear lin[QE_LIN_KINDS];
			int nl = stage_linears(&c, fr->stages[i], 2 * P, lin);
			for (int l = 0; l < nl; l++) {
				int64_t dims[3][3] = { { c.seq, lin[l].out, lin[l].in },
						       { c.seq, lin[l].in, lin[l].out },
						       { lin[l].out, lin[l].in, c.seq } };
				for (int k = 0; k < 3; k++)
					for (int s = 0; s < nshapes; s++)
						if (shapes[s].m == dims[k][0] && shapes[s].n == dims[k][1] &&
						    shapes[s].k == dims[k][2]) {
							shape_ms += M * shapes[s].ms;
							break;
						}
			}
		}
		double floor_ms = gemm_ms + bytes_ms;
		json_t *st = json_array();
		for (int i = 0; i < fr->nstages; i++)
			json_array_append_new(st, json_integer(fr->stages[i]));
		json_array_append_new(arr, json_pack("{s:i,s:o,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o}", "rank", r, "stages",
						     st, "gemm_flops", fr->gemm_flops, "bytes", fr->bytes, "grad_bytes",
						     fr->grad_bytes, "arena_bytes", fr->arena_bytes, "params", fr->params,
						     "gemm_ms", gemm_ms, "bytes_ms", bytes_ms, "floor_ms", floor_ms,
						     "shape_floor_ms", bench_real(nshapes ? shape_ms + bytes_ms : NAN)));
		if (floor_ms > worst) {
			worst = floor_ms;
			worst_shape = shape_ms + bytes_ms;
			heavier = r;
		}
	}
	*floor_out = worst;
	return json_pack("{s:i,s:f,s:o,s:o}", "heavier_rank", heavier, "floor_ms", worst, "shape_floor_ms",
			 bench_real(nshapes ? worst_shape : NAN), "ranks", arr);
}

int bench_floor_main(int argc, char **argv)
{
	const char *backend = "cpu", *preset = "h4096";
	long M = 8, P = 2, copy_mib = -1;
	double min_ms = -1;
	int json = 0;
	const cli_flag table[] = {
		{ "backend", 0, CLI_FLAG_STRING, .dst = &backend },
		{ "preset", 0, CLI_FLAG_STRING, .dst = &preset },
		{ "micro", 0, CLI_FLAG_LONG, &M, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "pp", 0, CLI_FLAG_LONG, &P, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "copy-mib", 0, CLI_FLAG_LONG, &copy_mib, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "min-ms", 0, CLI_FLAG_DOUBLE, &min_ms, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ 0 },
	};
	int rc = cli_flags_parse("bench floor", table, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (M < 1 || P < 1 || P > 16) {
		fprintf(stderr, "qeffect bench floor: --micro must be >= 1 and --pp in 1..16\n");
		return 2;
	}
	qe_model_config mc;
	bench_floor_rank probe[16];
	if (qe_model_preset(preset, &mc) || bench_floor_model(preset, (int)P, (int)M, 0, probe)) {
		fprintf(stderr, "qeffect bench floor: %s\n", qe_last_error());
		return 2;
	}
	qe_backend *b = NULL;
	qe_stream *s = NULL;
	rc = qe_backend_open(backend, &b);
	if (rc)
		return cli_report("bench floor", rc, "opening the backend");
	int cuda = b->ops->device == QE_DEV_CUDA;
	if (min_ms < 0)
		min_ms = cuda ? 200 : 20;
	if (copy_mib < 0)
		copy_mib = cuda ? 1024 : 32;
	int status = 1;
	json_t *doc = NULL;
	char check[512] = "skipped (model too large to build on the cpu backend here)";
	if ((rc = b->ops->stream_create(b, &s))) {
		cli_report("bench floor", rc, "creating a stream");
		goto out;
	}
	/* the representative shape, then every GEMM shape of the model */
	gemm_time rep = { mc.seq, 4 * (int64_t)mc.hidden, mc.hidden, 0, 0 };
	if ((rc = time_gemm(b, s, &rep, cuda ? 50 : 3, min_ms))) {
		cli_report("bench floor", rc, "timing the FP8 GEMM");
		goto out;
	}
	gemm_time shapes[64];
	int nshapes = 0;
	json_t *jshapes = json_array();
	for (int st = 0; st < mc.layers; st++) {
		linear lin[QE_LIN_KINDS];
		int nl = stage_linears(&mc, st, mc.layers, lin);
		for (int l = 0; l < nl; l++) {
			int64_t dims[3][3] = { { mc.seq, lin[l].out, lin[l].in },
					       { mc.seq, lin[l].in, lin[l].out },
					       { lin[l].out, lin[l].in, mc.seq } };
			static const char *kinds[3] = { "fwd", "dgrad", "wgrad" };
			for (int k = 0; k < 3; k++) {
				int seen = 0;
				for (int i = 0; i < nshapes; i++)
					seen |= shapes[i].m == dims[k][0] && shapes[i].n == dims[k][1] && shapes[i].k == dims[k][2];
				if (seen || nshapes == 64)
					continue;
				gemm_time *g = &shapes[nshapes];
				*g = (gemm_time){ dims[k][0], dims[k][1], dims[k][2], 0, 0 };
				if ((rc = time_gemm(b, s, g, cuda ? 20 : 2, min_ms / 4))) {
					cli_report("bench floor", rc, "timing a model GEMM shape");
					json_decref(jshapes);
					goto out;
				}
				nshapes++;
				double fl = 2.0 * g->m * g->n * g->k;
				json_array_append_new(jshapes, json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:I}", "linear",
									 lin[l].name, "kind", kinds[k], "m", (json_int_t)g->m,
									 "n", (json_int_t)g->n, "k", (json_int_t)g->k, "ms",
									 g->ms, "tflops", fl / (g->ms / 1e3) / 1e12, "reps",
									 (json_int_t)g->reps));
			}
		}
	}
	double gbps = 0;
	long creps = 0;
	if ((rc = time_copy(b, s, (size_t)copy_mib << 20, cuda ? 5 : 2, min_ms, &gbps, &creps))) {
		cli_report("bench floor", rc, "timing the D2D copy");
		json_decref(jshapes);
		goto out;
	}
	double total_params = 0;
	for (int r = 0; r < P; r++)
		total_params += probe[r].params;
	if (!cuda && total_params < 50e6) {
		int crc = check_model(b, preset, check, sizeof(check));
		if (crc == QE_EMISMATCH) {
			fprintf(stderr, "qeffect bench floor: the floor's parameter count disagrees with the model: %s\n",
				check);
			json_decref(jshapes);
			goto out;
		}
		if (crc)
			snprintf(check, sizeof(check), "not run: %s", qe_last_error());
	}
	double rate = 2.0 * rep.m * rep.n * rep.k / (rep.ms / 1e3);
	double fi = 0, fz = 0;
	json_t *pi = placement_json(preset, (int)P, (int)M, 0, rate, gbps, shapes, nshapes, &fi);
	json_t *pz = placement_json(preset, (int)P, (int)M, 1, rate, gbps, shapes, nshapes, &fz);
	doc = json_pack("{s:s,s:s,s:s,s:i,s:i,s:{s:I,s:I,s:I,s:s,s:f,s:f,s:I},s:o,s:{s:I,s:f,s:I,s:s},s:{s:o,s:o},s:s,s:s}",
			"bench", "floor", "backend", b->ops->name, "preset", preset, "micro", (int)M, "pp", (int)P, "gemm",
			"m", (json_int_t)rep.m, "n", (json_int_t)rep.n, "k", (json_int_t)rep.k, "dtype", "e4m3", "ms",
			rep.ms, "tflops", rate / 1e12, "reps", (json_int_t)rep.reps, "gemm_shapes", jshapes, "copy",
			"bytes", (json_int_t)((size_t)copy_mib << 20), "gbps", gbps, "reps", (json_int_t)creps, "counts",
			"bytes read + written", "placements", "interleaved", pi ? pi : json_null(), "zbv",
			pz ? pz : json_null(), "model_check", check, "formula",
			"floor = gemm_flops / gemm rate + bytes / copy bandwidth; gemm_flops = M * sum over the rank's "
			"linears of 3 * 2*T*in*out; bytes = grad_bytes + 6 * params * 4; grad_bytes = (1 + 2(M-1) + 1) * "
			"matrix floats * 4 (accumulating arena: mb 0 writes, later mbs read + write, the optimizer "
			"reads) + (2 + 4(M-1)) * non-matrix floats but wte * 4 (mb 0 writes the sum, later mbs write "
			"a scratch that is added in, the optimizer reads) + wte: (2 if M > 1 else 1) * V*H * 4 (cleared, "
			"read by the optimizer) + (1 + 2(M-1)) * tokens * H * 4 (the rows the microbatches move)");
	if (json) {
		char *txt = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
		printf("%s\n", txt ? txt : "{}");
		free(txt);
	} else {
		printf("floor of %s, --pp %ld, M=%ld, two chunks per rank, %s backend\n", preset, P, M, b->ops->name);
		printf("  FP8 GEMM %lldx%lldx%lld: %.4f ms/call = %.2f TFLOP/s (%ld calls)\n", (long long)rep.m,
		       (long long)rep.n, (long long)rep.k, rep.ms, rate / 1e12, rep.reps);
		printf("  D2D copy of %ld MiB: %.1f GB/s read + written (%ld copies)\n", copy_mib, gbps, creps);
		for (int z = 0; z < 2; z++) {
			json_t *p = z ? pz : pi;
			if (!p)
				continue;
			size_t i;
			json_t *r;
			json_array_foreach(json_object_get(p, "ranks"), i, r)
				printf("  %-11s rank %zu: %.3g GFLOP -> %.3f ms + %.3g GB -> %.3f ms = %.3f ms floor "
				       "(shape by shape %.3f ms)\n", z ? "zbv" : "interleaved", i,
				       json_real_value(json_object_get(r, "gemm_flops")) / 1e9,
				       json_real_value(json_object_get(r, "gemm_ms")),
				       json_real_value(json_object_get(r, "bytes")) / 1e9,
				       json_real_value(json_object_get(r, "bytes_ms")),
				       json_real_value(json_object_get(r, "floor_ms")),
				       json_number_value(json_object_get(r, "shape_floor_ms")));
		}
		printf("  floor (heavier rank): interleaved %.3f ms, zbv %.3f ms; model check: %s\n", fi, fz, check);
	}
	status = 0;
out:
	json_decref(doc);
	if (s)
		b->ops->stream_destroy(s);
	qe_backend_close(b);
	return status;
}
