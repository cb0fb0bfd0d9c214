/*
 * test_cuda_fused.c - the fused forms of QE_FUSE=1 on the GPU give the bytes
 * of the ops they replace, run there too (the cpu checks the same
 * identities in test_fused.c): the cast's prologues (FC1's bias and GELU,
 * the layernorm from its statistics, GELU's backward) and its column sums,
 * gelu_bwd with a bias, residual_add (also against the cpu), layernorm_bwd
 * with a residual, and flash attention with the QKV bias, through every
 * kernel each picks (four-wide and byte-wide casts, current scaling, bf16,
 * f32; row-in-registers and plain layernorms; bf16 and TF32 flash).
 * Without a GPU (or without CUDA in the build) the test prints SKIP and passes.
 */
#include <math.h>
#include <stdlib.h>

#include "bk_util.h"
#include "cuda_pair.h"
#include "runtime/fp8/fp8.h"
#ifdef QE_WITH_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

#define NAME "backend_test_cuda_fused"

#ifdef QE_WITH_CUDA

/*
 * The fused MLP ops (QE_FUSE=1): on the GPU, a cast with the bias + GELU
 * prologue gives the bytes of the unfused ops (x + bias, the add gemm
 * would do, here on the host; gelu_fwd; the plain cast), for every kernel
 * the cast picks (four-wide and byte-wide tiles, current scaling, bf16,
 * f32), and gelu_bwd with a bias the bytes of gelu_bwd of x + bias; the f32
 * fused cast against the cpu's within gelu_fwd's bound.
 */
static void test_fused(qe_rng *r)
{
	static const struct {
		int rows, cols;
		qe_dtype dt;
		int current;
	} cases[] = {
		{ 64, 256, QE_E4M3, 0 }, { 33, 17, QE_E4M3, 0 }, { 64, 256, QE_E4M3, 1 }, { 33, 17, QE_E5M2, 1 },
		{ 128, 3072, QE_E4M3, 0 }, { 64, 256, QE_BF16, 0 }, { 33, 17, QE_BF16, 0 }, { 64, 256, QE_F32, 0 },
		{ 33, 17, QE_F32, 0 },
	};
	printf("fused MLP ops\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t R = cases[ci].rows, C = cases[ci].cols, n = R * C;
		qe_dtype dt = cases[ci].dt;
		size_t esz = qe_dtype_size(dt);
		fresh_stream();
		float *x = rnd(r, n, 2.0f), *bias = rnd(r, C, 0.5f), *v = malloc((size_t)n * 4), *dy = rnd(r, n, 1.0f);
		for (int64_t i = 0; i < n; i++)
			v[i] = x[i] + bias[i % C];
		void *gx, *gb, *gv, *gdy, *grow[2], *gcol[2], *grole[2], *gdx[2];
		float *cx = pair(x, n * 4, &gx), *cb = pair(bias, C * 4, &gb), *cv = pair(v, n * 4, &gv);
		float *cdy = pair(dy, n * 4, &gdy);
		float role[3] = { 0.25f, 37.5f, 0.0f };
		for (int k = 0; k < 2; k++) {
			grow[k] = g_mem(n * esz + 1);
			gcol[k] = g_mem(n * esz + 1);
			gdx[k] = g_mem(n * 4);
			grole[k] = g_mem(sizeof(role));
			up(grole[k], role, sizeof(role));
		}
		CHECK_OK(K.go->gelu_fwd(K.gs, gv, gv, n));
		qe_cast_args a[2];
		for (int k = 0; k < 2; k++) { /* 0: unfused (gelu output cast), 1: fused */
			memset(&a[k], 0, sizeof(a[k]));
			a[k].x = qe_tensor_2d(k ? gx : gv, QE_F32, QE_DEV_CUDA, R, C);
			a[k].row = qe_tensor_2d(grow[k], dt, QE_DEV_CUDA, R, C);
			a[k].col = qe_tensor_2d(gcol[k], dt, QE_DEV_CUDA, C, R);
			a[k].scale = (float *)grole[k] + 1;
			a[k].amax = grole[k];
			a[k].scale_inv = (float *)grole[k] + 2;
			a[k].current = cases[ci].current;
			a[k].pre_bias = k ? gb : NULL;
			a[k].pre_gelu = k;
			CHECK_OK(K.go->cast(K.gs, &a[k]));
		}
		char what[96];
		const char *nm = qe_dtype_name(dt);
		const char *cur = cases[ci].current ? " current" : "";
		for (int part = 0; part < 3; part++) {
			void **b = part == 0 ? grow : part == 1 ? gcol : grole;
			snprintf(what, sizeof(what), "fused cast %lldx%lld %s%s %s", (long long)R, (long long)C, nm, cur,
				 part == 0 ? "row" : part == 1 ? "col" : "amax/scale");
			same_dev_bytes(what, b[0], b[1], part == 2 ? sizeof(role) : (size_t)n * esz);
		}
		if (dt == QE_F32) { /* the fused values against the cpu's */
			float *crow = c_mem(n * 4);
			qe_cast_args ca = { .x = qe_tensor_2d(cx, QE_F32, QE_DEV_CPU, R, C),
					    .row = qe_tensor_2d(crow, QE_F32, QE_DEV_CPU, R, C),
					    .col = qe_tensor_2d(NULL, QE_F32, QE_DEV_CPU, C, R),
					    .pre_bias = cb,
					    .pre_gelu = 1 };
			CHECK_OK(K.co->cast(K.cs, &ca));
			float *hg = fetch(grow[1], n * 4);
			snprintf(what, sizeof(what), "fused cast %lldx%lld f32 vs cpu", (long long)R, (long long)C);
			close_to(what, crow, hg, n, 1e-5);
			free(hg);
			K.co->free(K.cb, crow);
		}
		/* gelu_bwd: bias inside == x + bias outside (gv was overwritten by gelu: upload v again) */
		up(gv, v, n * 4);
		CHECK_OK(K.go->gelu_bwd(K.gs, gdx[0], gv, gdy, NULL, n, C));
		CHECK_OK(K.go->gelu_bwd(K.gs, gdx[1], gx, gdy, gb, n, C));
		snprintf(what, sizeof(what), "gelu_bwd bias %lldx%lld", (long long)R, (long long)C);
		same_dev_bytes(what, gdx[0], gdx[1], (size_t)n * 4);
		for (int k = 0; k < 2; k++) {
			K.go->free(K.gb, grow[k]);
			K.go->free(K.gb, gcol[k]);
			K.go->free(K.gb, gdx[k]);
			K.go->free(K.gb, grole[k]);
		}
		float *cbufs[] = { cx, cb, cv, cdy };
		void *gbufs[] = { gx, gb, gv, gdy };
		for (int k = 0; k < 4; k++) {
			K.co->free(K.cb, cbufs[k]);
			K.go->free(K.gb, gbufs[k]);
		}
		free(x);
		free(bias);
		free(v);
		free(dy);
	}
}

/*
 * A cast's column sums (colsum): the bytes of bias_grad on the cpu and of
 * the cast without them on the GPU, through the four-wide kernel's partials
 * (FP8 delayed and current, bf16; row counts that fill and cut colsum.h's
 * groups) and through the fallback (odd shapes, f32) that runs bias_grad's
 * kernels first.
 */
static void test_fused_colsum(qe_rng *r)
{
	static const struct {
		int rows, cols;
		qe_dtype dt;
		int current;
	} cases[] = {
		{ 256, 3072, QE_E5M2, 0 }, { 200, 64, QE_E5M2, 0 }, { 200, 68, QE_BF16, 0 }, { 128, 256, QE_E4M3, 1 },
		{ 8192, 96, QE_E5M2, 0 },  { 33, 17, QE_E5M2, 0 },  { 64, 256, QE_F32, 0 },
	};
	printf("cast with column sums\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t R = cases[ci].rows, C = cases[ci].cols, n = R * C;
		qe_dtype dt = cases[ci].dt;
		size_t esz = qe_dtype_size(dt);
		fresh_stream();
		float *x = rnd(r, n, 2.0f);
		void *gx, *gsum[2], *grow[2], *gcol[2], *grole[2];
		float *cx = pair(x, n * 4, &gx), *csum = c_mem(C * 4);
		float role[3] = { 0.25f, 37.5f, 0.0f };
		for (int k = 0; k < 2; k++) {
			gsum[k] = g_mem(C * 4);
			grow[k] = g_mem(n * esz + 1);
			gcol[k] = g_mem(n * esz + 1);
			grole[k] = g_mem(sizeof(role));
			up(grole[k], role, sizeof(role));
		}
		CHECK_OK(K.co->bias_grad(K.cs, csum, cx, R, C));
		CHECK_OK(K.go->bias_grad(K.gs, gsum[0], gx, R, C));
		for (int k = 0; k < 2; k++) { /* 0: cast, bias_grad above; 1: the cast sums */
			qe_cast_args a = { .x = qe_tensor_2d(gx, QE_F32, QE_DEV_CUDA, R, C),
					   .row = qe_tensor_2d(grow[k], dt, QE_DEV_CUDA, R, C),
					   .col = qe_tensor_2d(gcol[k], dt, QE_DEV_CUDA, C, R),
					   .scale = (float *)grole[k] + 1,
					   .amax = grole[k],
					   .scale_inv = (float *)grole[k] + 2,
					   .current = cases[ci].current,
					   .colsum = k ? gsum[1] : NULL };
			CHECK_OK(K.go->cast(K.gs, &a));
		}
		char what[96];
		const char *nm = qe_dtype_name(dt), *cur = cases[ci].current ? " current" : "";
		for (int part = 0; part < 4; part++) {
			void **b = part == 0 ? grow : part == 1 ? gcol : part == 2 ? grole : gsum;
			snprintf(what, sizeof(what), "colsum cast %lldx%lld %s%s %s", (long long)R, (long long)C, nm, cur,
				 part == 0 ? "row" : part == 1 ? "col" : part == 2 ? "amax/scale" : "sums");
			same_dev_bytes(what, b[0], b[1], part == 3 ? (size_t)C * 4 : part == 2 ? sizeof(role) : (size_t)n * esz);
		}
		float *hs = fetch(gsum[1], (size_t)C * 4);
		snprintf(what, sizeof(what), "colsum cast %lldx%lld %s sums vs cpu", (long long)R, (long long)C, nm);
		same_bytes(what, csum, hs, (size_t)C * 4);
		free(hs);
		for (int k = 0; k < 2; k++) {
			K.go->free(K.gb, gsum[k]);
			K.go->free(K.gb, grow[k]);
			K.go->free(K.gb, gcol[k]);
			K.go->free(K.gb, grole[k]);
		}
		K.go->free(K.gb, gx);
		K.co->free(K.cb, cx);
		K.co->free(K.cb, csum);
		free(x);
	}
}

/* residual_add on the GPU: the cpu's bytes (three f32 adds), four-wide and scalar kernels. */
static void test_residual_add(qe_rng *r)
{
	static const int shapes[][2] = { { 64, 768 }, { 33, 17 }, { 8, 1600 } };
	printf("residual_add\n");
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int64_t R = shapes[k][0], C = shapes[k][1], n = R * C;
		fresh_stream();
		float *ha = rnd(r, n, 2.0f), *hb = rnd(r, n, 1.0f), *hbias = rnd(r, C, 0.5f);
		void *ga, *gb, *gbias, *gy;
		float *ca = pair(ha, n * 4, &ga), *cb = pair(hb, n * 4, &gb), *cbias = pair(hbias, C * 4, &gbias);
		float *cy = pair(NULL, n * 4, &gy);
		CHECK_OK(K.co->residual_add(K.cs, cy, ca, cb, cbias, R, C));
		CHECK_OK(K.go->residual_add(K.gs, gy, ga, gb, gbias, R, C));
		float *h = fetch(gy, n * 4);
		char what[64];
		snprintf(what, sizeof(what), "residual_add %lldx%lld", (long long)R, (long long)C);
		same_bytes(what, cy, h, n * 4);
		free(h);
		free(ha);
		free(hb);
		free(hbias);
	}
}

/*
 * The layernorm prologue on the GPU: layernorm_fwd with y NULL gives the
 * statistics it gives with y, and a cast that normalizes with them gives the
 * bytes of casting layernorm_fwd's output (four-wide and byte-wide cast
 * kernels, the row-in-registers and the plain layernorm kernels).
 */
static void test_fused_ln(qe_rng *r)
{
	static const struct {
		int rows, cols;
		qe_dtype dt;
		int current;
	} cases[] = {
		{ 64, 768, QE_E4M3, 0 }, { 33, 17, QE_E4M3, 0 }, { 64, 768, QE_E4M3, 1 }, { 128, 1600, QE_E4M3, 0 },
		{ 64, 768, QE_BF16, 0 }, { 33, 17, QE_BF16, 0 }, { 64, 768, QE_F32, 0 },
	};
	printf("cast with a layernorm prologue\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t R = cases[ci].rows, C = cases[ci].cols, n = R * C;
		qe_dtype dt = cases[ci].dt;
		size_t esz = qe_dtype_size(dt);
		fresh_stream();
		float *x = rnd(r, n, 2.0f), *w = rnd(r, C, 1.0f), *b = rnd(r, C, 0.3f);
		void *gx, *gw, *gb, *gy, *gm[2], *gs[2], *grow[2], *gcol[2], *grole[2];
		float *cx = pair(x, n * 4, &gx), *cw = pair(w, C * 4, &gw), *cb = pair(b, C * 4, &gb);
		gy = g_mem(n * 4);
		float role[3] = { 0.25f, 37.5f, 0.0f };
		for (int k = 0; k < 2; k++) {
			gm[k] = g_mem(R * 4);
			gs[k] = g_mem(R * 4);
			grow[k] = g_mem(n * esz + 1);
			gcol[k] = g_mem(n * esz + 1);
			grole[k] = g_mem(sizeof(role));
			up(grole[k], role, sizeof(role));
		}
		CHECK_OK(K.go->layernorm_fwd(K.gs, gy, gm[0], gs[0], gx, gw, gb, R, C));
		CHECK_OK(K.go->layernorm_fwd(K.gs, NULL, gm[1], gs[1], gx, gw, gb, R, C));
		for (int k = 0; k < 2; k++) { /* 0: the normalized copy cast, 1: the prologue */
			qe_cast_args a = { .x = qe_tensor_2d(k ? gx : gy, QE_F32, QE_DEV_CUDA, R, C),
					   .row = qe_tensor_2d(grow[k], dt, QE_DEV_CUDA, R, C),
					   .col = qe_tensor_2d(gcol[k], dt, QE_DEV_CUDA, C, R),
					   .scale = (float *)grole[k] + 1,
					   .amax = grole[k],
					   .scale_inv = (float *)grole[k] + 2,
					   .current = cases[ci].current };
			if (k) {
				a.pre_ln.mean = gm[1];
				a.pre_ln.rstd = gs[1];
				a.pre_ln.w = gw;
				a.pre_ln.b = gb;
			}
			CHECK_OK(K.go->cast(K.gs, &a));
		}
		char what[96];
		const char *nm = qe_dtype_name(dt), *cur = cases[ci].current ? " current" : "";
		for (int part = 0; part < 5; part++) {
			static const char *parts[] = { "row", "col", "amax/scale", "mean", "rstd" };
			void **b = part == 0 ? grow : part == 1 ? gcol : part == 2 ? grole : part == 3 ? gm : gs;
			snprintf(what, sizeof(what), "ln cast %lldx%lld %s%s %s", (long long)R, (long long)C, nm, cur,
				 parts[part]);
			same_dev_bytes(what, b[0], b[1], part >= 3 ? (size_t)R * 4 : part == 2 ? sizeof(role) : (size_t)n * esz);
		}
		for (int k = 0; k < 2; k++) {
			void *bufs[] = { gm[k], gs[k], grow[k], gcol[k], grole[k] };
			for (int i = 0; i < 5; i++)
				K.go->free(K.gb, bufs[i]);
		}
		void *gbufs[] = { gx, gw, gb, gy };
		for (int i = 0; i < 4; i++)
			K.go->free(K.gb, gbufs[i]);
		K.co->free(K.cb, cx);
		K.co->free(K.cb, cw);
		K.co->free(K.cb, cb);
		free(x);
		free(w);
		free(b);
	}
}

/*
 * layernorm_bwd with a residual on the GPU: the bytes of layernorm_bwd then
 * add (row-in-registers and plain kernels), dw and db unchanged.
 */
static void test_layernorm_bwd_residual(qe_rng *r)
{
	static const int shapes[][2] = { { 64, 768 }, { 33, 17 }, { 16, 1600 } };
	printf("layernorm_bwd with a residual\n");
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		int64_t R = shapes[k][0], C = shapes[k][1], n = R * C;
		fresh_stream();
		float *hx = rnd(r, n, 2.0f), *hdy = rnd(r, n, 1.0f), *hres = rnd(r, n, 1.0f), *hw = rnd(r, C, 1.0f);
		float *hb = rnd(r, C, 0.3f);
		void *gx, *gdy, *gres, *gw, *gb;
		float *cbufs[5];
		cbufs[0] = pair(hx, n * 4, &gx);
		cbufs[1] = pair(hdy, n * 4, &gdy);
		cbufs[2] = pair(hres, n * 4, &gres);
		cbufs[3] = pair(hw, C * 4, &gw);
		cbufs[4] = pair(hb, C * 4, &gb);
		void *gm = g_mem(R * 4), *gs = g_mem(R * 4), *gg = g_mem(n * 4), *gdx[2] = { g_mem(n * 4), g_mem(n * 4) };
		void *gdw[2] = { g_mem(C * 4), g_mem(C * 4) }, *gdb[2] = { g_mem(C * 4), g_mem(C * 4) };
		CHECK_OK(K.go->layernorm_fwd(K.gs, NULL, gm, gs, gx, gw, gb, R, C));
		CHECK_OK(K.go->layernorm_bwd(K.gs, gg, gdw[0], gdb[0], gdy, gx, gm, gs, gw, R, C, NULL));
		CHECK_OK(K.go->add(K.gs, gdx[0], gres, gg, n));
		CHECK_OK(K.go->layernorm_bwd(K.gs, gdx[1], gdw[1], gdb[1], gdy, gx, gm, gs, gw, R, C, gres));
		char what[64];
		void *pairs[3][2] = { { gdx[0], gdx[1] }, { gdw[0], gdw[1] }, { gdb[0], gdb[1] } };
		static const char *nm[] = { "dx", "dw", "db" };
		for (int p = 0; p < 3; p++) {
			snprintf(what, sizeof(what), "ln_bwd residual %lldx%lld %s", (long long)R, (long long)C, nm[p]);
			same_dev_bytes(what, pairs[p][0], pairs[p][1], p ? (size_t)C * 4 : (size_t)n * 4);
		}
		void *gbufs[] = { gx, gdy, gres, gw, gb, gm, gs, gg, gdx[0], gdx[1], gdw[0], gdw[1], gdb[0], gdb[1] };
		for (size_t i = 0; i < sizeof(gbufs) / sizeof(*gbufs); i++)
			K.go->free(K.gb, gbufs[i]);
		for (int i = 0; i < 5; i++)
			K.co->free(K.cb, cbufs[i]);
		free(hx);
		free(hdy);
		free(hres);
		free(hw);
		free(hb);
	}
}

/*
 * The GELU backward prologue on the GPU, with the column sums of its values:
 * the bytes of gelu_bwd into a buffer, bias_grad of it and the plain cast,
 * through the four-wide kernel (partials in the tile) and the fallback
 * (odd shapes and f32: v made in scratch, summed, then cast).
 */
static void test_fused_dgelu(qe_rng *r)
{
	static const struct {
		int rows, cols;
		qe_dtype dt;
		int current;
	} cases[] = {
		{ 256, 3072, QE_E5M2, 0 }, { 200, 64, QE_E5M2, 1 }, { 200, 68, QE_BF16, 0 },
		{ 33, 17, QE_E5M2, 0 },	   { 64, 256, QE_F32, 0 },  { 33, 17, QE_F32, 0 },
	};
	printf("cast with the GELU backward prologue\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t R = cases[ci].rows, C = cases[ci].cols, n = R * C;
		qe_dtype dt = cases[ci].dt;
		size_t esz = qe_dtype_size(dt);
		fresh_stream();
		float *hdy = rnd(r, n, 1.0f), *hu = rnd(r, n, 2.0f), *hb = rnd(r, C, 0.5f);
		void *gdy, *gu, *gb;
		float *cdy = pair(hdy, n * 4, &gdy), *cu = pair(hu, n * 4, &gu), *cb = pair(hb, C * 4, &gb);
		void *gv = g_mem(n * 4), *gsum[2] = { g_mem(C * 4), g_mem(C * 4) };
		void *grow[2], *gcol[2], *grole[2];
		float role[3] = { 0.25f, 37.5f, 0.0f };
		for (int k = 0; k < 2; k++) {
			grow[k] = g_mem(n * esz + 1);
			gcol[k] = g_mem(n * esz + 1);
			grole[k] = g_mem(sizeof(role));
			up(grole[k], role, sizeof(role));
		}
		CHECK_OK(K.go->gelu_bwd(K.gs, gv, gu, gdy, gb, n, C));
		CHECK_OK(K.go->bias_grad(K.gs, gsum[0], gv, R, C));
		for (int k = 0; k < 2; k++) { /* 0: gelu_bwd's buffer cast, 1: the prologue */
			qe_cast_args a = { .x = qe_tensor_2d(k ? gdy : gv, QE_F32, QE_DEV_CUDA, R, C),
					   .row = qe_tensor_2d(grow[k], dt, QE_DEV_CUDA, R, C),
					   .col = qe_tensor_2d(gcol[k], dt, QE_DEV_CUDA, C, R),
					   .scale = (float *)grole[k] + 1,
					   .amax = grole[k],
					   .scale_inv = (float *)grole[k] + 2,
					   .current = cases[ci].current,
					   .pre_bias = k ? gb : NULL,
					   .pre_dgelu = k ? gu : NULL,
					   .colsum = k ? gsum[1] : NULL };
			CHECK_OK(K.go->cast(K.gs, &a));
		}
		char what[96];
		const char *nm = qe_dtype_name(dt), *cur = cases[ci].current ? " current" : "";
		for (int part = 0; part < 4; part++) {
			static const char *parts[] = { "row", "col", "amax/scale", "sums" };
			void **b = part == 0 ? grow : part == 1 ? gcol : part == 2 ? grole : gsum;
			snprintf(what, sizeof(what), "dgelu cast %lldx%lld %s%s %s", (long long)R, (long long)C, nm, cur,
				 parts[part]);
			same_dev_bytes(what, b[0], b[1], part == 3 ? (size_t)C * 4 : part == 2 ? sizeof(role) : (size_t)n * esz);
		}
		for (int k = 0; k < 2; k++) {
			K.go->free(K.gb, grow[k]);
			K.go->free(K.gb, gcol[k]);
			K.go->free(K.gb, grole[k]);
			K.go->free(K.gb, gsum[k]);
		}
		void *gbufs[] = { gdy, gu, gb, gv };
		for (int i = 0; i < 4; i++)
			K.go->free(K.gb, gbufs[i]);
		K.co->free(K.cb, cdy);
		K.co->free(K.cb, cu);
		K.co->free(K.cb, cb);
		free(hdy);
		free(hu);
		free(hb);
	}
}

/*
 * Flash attention with qkv_bias on the GPU: forward and backward give the
 * bytes of the same op on qkv + bias (made on the host: one f32 add, as
 * gemm's), for both operand kinds (bf16: added in the bf16 copy; TF32: a
 * biased copy first).
 */
static void test_flash_qkv_bias(qe_rng *r)
{
	static const int cases[][4] = { { 2, 100, 64, 2 }, { 1, 64, 256, 4 } }; /* B, T, H, nh */
	printf("flash attention with the QKV bias\n");
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		int64_t B = cases[ci][0], T = cases[ci][1], H = cases[ci][2], N = B * T, n3 = N * 3 * H;
		int nh = cases[ci][3];
		float *hq = rnd(r, n3, 1.0f), *hb = rnd(r, 3 * H, 0.5f), *hdo = rnd(r, N * H, 1.0f);
		float *hqb = malloc((size_t)n3 * 4);
		for (int64_t i = 0; i < n3; i++)
			hqb[i] = hq[i] + hb[i % (3 * H)];
		for (int kind = 0; kind < 2; kind++) {
			qe_flash_operands op = kind ? QE_FLASH_BF16 : QE_FLASH_TF32;
			fresh_stream();
			void *gq = g_mem(n3 * 4), *gb = g_mem(3 * H * 4), *gqb = g_mem(n3 * 4), *gdo = g_mem(N * H * 4);
			void *go[2] = { g_mem(N * H * 4), g_mem(N * H * 4) }, *gl[2] = { g_mem(B * nh * T * 4), g_mem(B * nh * T * 4) };
			void *gdq[2] = { g_mem(n3 * 4), g_mem(n3 * 4) };
			up(gq, hq, n3 * 4);
			up(gb, hb, 3 * H * 4);
			up(gqb, hqb, n3 * 4);
			up(gdo, hdo, N * H * 4);
			CHECK_OK(K.go->attn_flash_fwd(K.gs, go[0], gl[0], gqb, NULL, B, T, H, nh, op));
			CHECK_OK(K.go->attn_flash_fwd(K.gs, go[1], gl[1], gq, gb, B, T, H, nh, op));
			CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq[0], gdo, gqb, NULL, go[0], gl[0], B, T, H, nh, op));
			CHECK_OK(K.go->attn_flash_bwd(K.gs, gdq[1], gdo, gq, gb, go[1], gl[1], B, T, H, nh, op));
			void *pairs[3][2] = { { go[0], go[1] }, { gl[0], gl[1] }, { gdq[0], gdq[1] } };
			size_t sizes[3] = { (size_t)N * H * 4, (size_t)B * nh * T * 4, (size_t)n3 * 4 };
			static const char *nm[] = { "out", "lse", "dqkv" };
			for (int p = 0; p < 3; p++) {
				char what[96];
				snprintf(what, sizeof(what), "flash qkv_bias %s B%lld T%lld H%lld %s", kind ? "bf16" : "tf32",
					 (long long)B, (long long)T, (long long)H, nm[p]);
				same_dev_bytes(what, pairs[p][0], pairs[p][1], sizes[p]);
			}
			void *bufs[] = { gq, gb, gqb, gdo, go[0], go[1], gl[0], gl[1], gdq[0], gdq[1] };
			for (size_t i = 0; i < sizeof(bufs) / sizeof(*bufs); i++)
				K.go->free(K.gb, bufs[i]);
		}
		free(hq);
		free(hb);
		free(hdo);
		free(hqb);
	}
}

int main(void)
{
	if (qe_cuda_device_count() < 1) {
		printf("SKIP: no CUDA device\n");
		return 0;
	}
	uint64_t seed = 20261204u;
	const char *env = getenv("QE_TEST_SEED");
	if (env)
		seed = strtoull(env, NULL, 0);
	printf("seed %llu\n", (unsigned long long)seed);
	qe_rng r;
	qe_rng_init(&r, seed);
	CHECK_OK(qe_backend_open("cpu", &K.cb));
	CHECK_OK(qe_backend_open("cuda", &K.gb));
	if (!K.cb || !K.gb)
		return qe_test_done(NAME);
	K.co = K.cb->ops;
	K.go = K.gb->ops;
	CHECK_OK(K.co->stream_create(K.cb, &K.cs));
	CHECK_OK(K.go->stream_create(K.gb, &K.gs));
	if (!K.cs || !K.gs)
		return qe_test_done(NAME);
	test_fused(&r);
	test_fused_colsum(&r);
	test_fused_ln(&r);
	test_fused_dgelu(&r);
	test_residual_add(&r);
	test_layernorm_bwd_residual(&r);
	test_flash_qkv_bias(&r);
	return qe_test_done(NAME);
}

#else /* !QE_WITH_CUDA */

int main(void)
{
	printf("SKIP: built without CUDA (QE_CUDA=OFF or nvcc not found)\n");
	return 0;
}

#endif
