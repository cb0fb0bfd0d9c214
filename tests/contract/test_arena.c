/*
 * test_arena.c - the gradient arena: layout (fixed, aligned, parameter-major),
 * the bind check (shape, dtype, device, address), aliased / duplicate /
 * missing writes, microbatch-ordered views for the reduction, and counters;
 * the accumulating layout: one view per parameter whatever M, ascending
 * microbatch order enforced, and its sum bit-identical to the ordered
 * reduction of per-mb views.
 */
#include "runtime/contract/contract.h"
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const qe_arena_param params[3] = {
	{ "QKV.W", 5, 3, QE_F32, QE_DEV_CPU },  /* 60 bytes: padded to 256 */
	{ "FC1.W", 16, 16, QE_F32, QE_DEV_CPU }, /* 1024 bytes: already aligned */
	{ "FC2.W", 3, 70, QE_F32, QE_DEV_CPU },  /* 840 bytes: padded to 1024 */
};

static void test_layout(void)
{
	const int M = 3;
	size_t bytes = qe_arena_bytes(params, 3, M, QE_ARENA_PER_MB);
	CHECK(bytes == (size_t)M * (256 + 1024 + 1024), "bytes %zu", bytes);
	CHECK(qe_arena_bytes(params, 3, 0, QE_ARENA_PER_MB) == 0, "M 0 invalid");
	qe_arena_param bad = params[0];
	bad.dtype = QE_BF16;
	CHECK(qe_arena_bytes(&bad, 1, 2, QE_ARENA_PER_MB) == 0, "bf16 invalid");
	char *base = aligned_alloc(QE_ARENA_ALIGN, bytes + QE_ARENA_ALIGN);
	qe_arena *a = NULL;
	CHECK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes - 1, QE_DEV_CPU, &a) == QE_EINVAL && !a,
	      "short base");
	CHECK(strstr(qe_last_error(), "needs"), "msg %s", qe_last_error());
	CHECK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base + 4, bytes, QE_DEV_CPU, &a) == QE_EINVAL,
	      "misaligned base");
	CHECK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CUDA, &a) == QE_EINVAL,
	      "param device differs from arena device");
	CHECK(qe_arena_create(&bad, 1, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a) == QE_EUNSUPPORTED, "bf16");
	CHECK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, (qe_arena_mode)7, base, bytes, QE_DEV_CPU, &a) == QE_EINVAL, "mode");
	CHECK_OK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, QE_ARENA_COPY, base, bytes, QE_DEV_CPU, &a));
	CHECK(qe_arena_get_mode(a) == QE_ARENA_COPY && qe_arena_nparams(a) == 3 && qe_arena_microbatches(a) == M,
	      "mode/nparams/M");
	CHECK(strcmp(qe_arena_param_name(a, 2), "FC2.W") == 0 && strcmp(qe_arena_param_name(a, 3), "?") == 0, "names");
	size_t expect_off[3] = { 0, (size_t)M * 256, (size_t)M * (256 + 1024) }, stride[3] = { 256, 1024, 1024 };
	for (int p = 0; p < 3; p++) {
		const float *views[3];
		CHECK_OK(qe_arena_views_for(a, p, views, NULL));
		for (int m = 0; m < M; m++) {
			qe_tensor v;
			CHECK_OK(qe_arena_view(a, p, m, &v));
			size_t off = (size_t)((char *)v.data - base);
			CHECK(off == expect_off[p] + (size_t)m * stride[p], "view (%d,%d) at %zu", p, m, off);
			CHECK(off % QE_ARENA_ALIGN == 0, "aligned");
			CHECK(v.dtype == QE_F32 && v.device == QE_DEV_CPU && v.ndim == 2 && v.shape[0] == params[p].rows &&
				      v.shape[1] == params[p].cols,
			      "view shape");
			CHECK(views[m] == (const float *)v.data, "views_for in microbatch order");
			CHECK(off + qe_tensor_nbytes(&v) <= bytes, "inside the base");
		}
	}
	qe_tensor v;
	CHECK(qe_arena_view(a, 3, 0, &v) == QE_EINVAL && qe_arena_view(a, 0, M, &v) == QE_EINVAL, "view range");
	qe_arena_stats st;
	qe_arena_get_stats(a, &st);
	CHECK(st.capacity_bytes == bytes && st.view_bytes == (size_t)M * (60 + 1024 + 840) && st.nparams == 3 &&
		      st.M == M && st.writes_this_step == 0,
	      "stats capacity %zu view %zu", st.capacity_bytes, st.view_bytes);
	qe_arena_free(a);
	qe_arena_free(NULL);
	/* names are copied */
	char name[8] = "X.W";
	qe_arena_param one = { name, 2, 2, QE_F32, QE_DEV_CPU };
	CHECK_OK(qe_arena_create(&one, 1, 1, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a));
	name[0] = 'Y';
	CHECK(strcmp(qe_arena_param_name(a, 0), "X.W") == 0, "name copied");
	qe_arena_free(a);
	free(base);
}

static void test_checks(void)
{
	const int M = 4;
	size_t bytes = qe_arena_bytes(params, 3, M, QE_ARENA_PER_MB);
	char *base = aligned_alloc(QE_ARENA_ALIGN, bytes);
	qe_arena *a = NULL;
	CHECK_OK(qe_arena_create(params, 3, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a));
	qe_tensor v, d;
	CHECK_OK(qe_arena_view(a, 1, 2, &v));
	CHECK_OK(qe_arena_bind_check(a, 1, 2, &v));

	/* wrong shape, dtype, device: QE_ESHAPE naming param, mb, expected, got */
	d = qe_tensor_2d(v.data, QE_F32, QE_DEV_CPU, 16, 8);
	CHECK(qe_arena_bind_check(a, 1, 2, &d) == QE_ESHAPE, "shape");
	CHECK(strcmp(qe_last_error(), "arena bind FC1.W mb 2: expected f32[16,16]@cpu, got f32[16,8]@cpu") == 0,
	      "msg '%s'", qe_last_error());
	d = qe_tensor_make(v.data, QE_F32, QE_DEV_CPU, 1, 256, 0, 0, 0);
	CHECK(qe_arena_bind_check(a, 1, 2, &d) == QE_ESHAPE, "rank 1 of the same size");
	d = v;
	d.dtype = QE_BF16;
	CHECK(qe_arena_bind_check(a, 1, 2, &d) == QE_ESHAPE, "dtype");
	d = v;
	d.device = QE_DEV_CUDA;
	CHECK(qe_arena_bind_check(a, 1, 2, &d) == QE_ESHAPE, "device");
	CHECK(strstr(qe_last_error(), "@cuda"), "msg %s", qe_last_error());
	/* address: another view is an aliased write; elsewhere just the wrong address */
	qe_tensor other;
	CHECK_OK(qe_arena_view(a, 1, 3, &other));
	d = v;
	d.data = other.data;
	CHECK(qe_arena_bind_check(a, 1, 2, &d) == QE_EARENA, "aliased: the view of mb 3");
	CHECK(strstr(qe_last_error(), "aliased arena write: destination of FC1.W mb 2") &&
		      strstr(qe_last_error(), "overlaps the view of FC1.W mb 3"),
	      "msg %s", qe_last_error());
	/* partly overlapping the next parameter's first view */
	CHECK_OK(qe_arena_view(a, 0, 3, &v));
	d = v;
	d.data = (char *)v.data + 220; /* [988, 1048) against FC1.W mb 0 at 1024 */
	CHECK(qe_arena_write_check(a, 0, 3, &d) == QE_EARENA, "straddling");
	CHECK(strstr(qe_last_error(), "overlaps the view of FC1.W mb 0"), "msg %s", qe_last_error());
	/* shifted within its own view and padding: not aliased, still not the view */
	d.data = (char *)v.data + 128;
	CHECK(qe_arena_bind_check(a, 0, 3, &d) == QE_EARENA, "in the padding");
	CHECK(strstr(qe_last_error(), "is not the view"), "msg %s", qe_last_error());
	d.data = (char *)v.data + 4;
	CHECK(qe_arena_bind_check(a, 0, 3, &d) == QE_EARENA, "shifted inside own view");
	CHECK(strstr(qe_last_error(), "is not the view"), "msg %s", qe_last_error());
	float outside[15];
	d = qe_tensor_2d(outside, QE_F32, QE_DEV_CPU, 5, 3);
	CHECK(qe_arena_bind_check(a, 0, 3, &d) == QE_EARENA, "scratch buffer is not the view");
	CHECK(qe_arena_bind_check(a, 3, 0, &d) == QE_EARENA && qe_arena_bind_check(a, 0, -1, &d) == QE_EARENA,
	      "no such view");
	CHECK(qe_arena_bind_check(a, 0, 0, NULL) == QE_EINVAL, "NULL dest");

	/* exactly once: duplicate refused, missing named */
	qe_arena_stats st;
	CHECK(qe_arena_check_complete(a) == QE_EARENA, "empty is incomplete");
	CHECK(strstr(qe_last_error(), "12 of 12 views not written"), "msg %s", qe_last_error());
	for (int p = 0; p < 3; p++)
		for (int m = 0; m < M; m++) {
			if (p == 2 && m == 1)
				continue;
			CHECK_OK(qe_arena_view(a, p, m, &v));
			CHECK_OK(qe_arena_write_check(a, p, m, &v));
			CHECK_OK(qe_arena_write_commit(a, p, m));
			CHECK(qe_arena_is_written(a, p, m) == 1, "written bit");
		}
	CHECK(qe_arena_is_written(a, 2, 1) == 0 && qe_arena_is_written(a, 9, 0) == -1, "bits");
	CHECK(qe_arena_check_complete(a) == QE_EARENA, "one missing");
	CHECK(strcmp(qe_last_error(), "incomplete arena: 1 of 12 views not written: (FC2.W, mb 1)") == 0, "msg '%s'",
	      qe_last_error());
	CHECK_OK(qe_arena_view(a, 1, 0, &v));
	qe_arena_get_stats(a, &st);
	uint64_t w = st.writes_this_step;
	CHECK(qe_arena_write_check(a, 1, 0, &v) == QE_EARENA, "duplicate write check");
	CHECK(strcmp(qe_last_error(), "duplicate arena write: FC1.W mb 0 was already written this step") == 0, "msg '%s'",
	      qe_last_error());
	CHECK(qe_arena_write_commit(a, 1, 0) == QE_EARENA, "duplicate commit");
	qe_arena_get_stats(a, &st);
	CHECK(st.writes_this_step == w && w == 11, "refused writes not counted: %llu", (unsigned long long)w);
	CHECK_OK(qe_arena_write_commit(a, 2, 1));
	CHECK_OK(qe_arena_check_complete(a));
	qe_arena_step_reset(a);
	qe_arena_get_stats(a, &st);
	CHECK(st.writes_this_step == 0 && st.total_writes == 12 && st.steps == 1, "after reset");
	CHECK(qe_arena_is_written(a, 1, 0) == 0, "bits cleared");
	CHECK_OK(qe_arena_write_check(a, 1, 0, &v));
	qe_arena_free(a);
	free(base);
}

/* Reduction in microbatch order is independent of the order dW ran in (bit-exact). */
static void test_order_independence(void)
{
	const int M = 4;
	qe_arena_param one = { "W", 3, 5, QE_F32, QE_DEV_CPU };
	size_t bytes = qe_arena_bytes(&one, 1, M, QE_ARENA_PER_MB);
	float *sum[2];
	for (int run = 0; run < 2; run++) {
		char *base = aligned_alloc(QE_ARENA_ALIGN, bytes);
		qe_arena *a = NULL;
		CHECK_OK(qe_arena_create(&one, 1, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a));
		static const int order[2][4] = { { 0, 1, 2, 3 }, { 2, 0, 3, 1 } };
		for (int k = 0; k < M; k++) {
			int m = order[run][k];
			qe_tensor v;
			CHECK_OK(qe_arena_view(a, 0, m, &v));
			CHECK_OK(qe_arena_write_check(a, 0, m, &v));
			float *g = v.data;
			for (int i = 0; i < 15; i++)
				g[i] = 1.0f / (float)(3 + i * 7 + m * 1000) * (m % 2 ? 1e7f : 1e-7f);
			CHECK_OK(qe_arena_write_commit(a, 0, m));
		}
		CHECK_OK(qe_arena_check_complete(a));
		const float *views[4];
		CHECK_OK(qe_arena_views_for(a, 0, views, NULL));
		sum[run] = calloc(15, sizeof(float));
		for (int m = 0; m < M; m++)
			for (int i = 0; i < 15; i++)
				sum[run][i] += views[m][i];
		qe_arena_free(a);
		free(base);
	}
	CHECK(memcmp(sum[0], sum[1], 15 * sizeof(float)) == 0, "reduction differs with dW order");
	free(sum[0]);
	free(sum[1]);
}

/* Accumulate: capacity independent of M; one view for every m; initialize vs add. */
static void test_accumulate_layout(void)
{
	size_t one = qe_arena_bytes(params, 3, 1, QE_ARENA_ACCUMULATE);
	CHECK(one == 256 + 1024 + 1024, "accumulate bytes %zu", one);
	for (int M = 2; M <= 16; M *= 2)
		CHECK(qe_arena_bytes(params, 3, M, QE_ARENA_ACCUMULATE) == one, "accumulate bytes grow with M=%d", M);
	CHECK(qe_arena_bytes(params, 3, 4, QE_ARENA_PER_MB) == 4 * one, "per-mb bytes");
	CHECK(qe_arena_bytes(params, 3, 4, (qe_arena_layout)9) == 0, "unknown layout");
	qe_arena_layout l;
	CHECK(qe_arena_layout_parse("accumulate", &l) == QE_OK && l == QE_ARENA_ACCUMULATE, "parse accumulate");
	CHECK(qe_arena_layout_parse("per-mb", &l) == QE_OK && l == QE_ARENA_PER_MB, "parse per-mb");
	CHECK(qe_arena_layout_parse("sum", &l) == QE_EINVAL, "parse bad");
	CHECK(strcmp(qe_arena_layout_name(QE_ARENA_ACCUMULATE), "accumulate") == 0, "name");

	const int M = 4;
	char *base = aligned_alloc(QE_ARENA_ALIGN, one);
	qe_arena *a = NULL;
	CHECK(qe_arena_create(params, 3, M, (qe_arena_layout)9, QE_ARENA_DIRECT, base, one, QE_DEV_CPU, &a) ==
		      QE_EINVAL, "unknown layout refused");
	CHECK_OK(qe_arena_create(params, 3, M, QE_ARENA_ACCUMULATE, QE_ARENA_COPY, base, one, QE_DEV_CPU, &a));
	CHECK(qe_arena_nviews(a) == 1 && qe_arena_get_layout(a) == QE_ARENA_ACCUMULATE, "one view");
	qe_arena_stats st;
	qe_arena_get_stats(a, &st);
	CHECK(st.capacity_bytes == one && st.view_bytes == 60 + 1024 + 840, "stats %zu %zu", st.capacity_bytes,
	      st.view_bytes);
	for (int p = 0; p < 3; p++) {
		qe_tensor v0, vm;
		CHECK_OK(qe_arena_view(a, p, 0, &v0));
		for (int m = 1; m < M; m++) {
			CHECK_OK(qe_arena_view(a, p, m, &vm));
			CHECK(vm.data == v0.data, "param %d mb %d has its own view", p, m);
		}
		const float *views[4] = { 0 };
		int nv = 0;
		CHECK_OK(qe_arena_views_for(a, p, views, &nv));
		CHECK(nv == 1 && views[0] == v0.data, "views_for: %d views", nv);
	}
	CHECK(qe_arena_accumulates(a, 0) == 0 && qe_arena_accumulates(a, 1) == 1 && qe_arena_accumulates(a, 3) == 1 &&
		      qe_arena_accumulates(a, 4) == -1,
	      "accumulates()");
	qe_arena_free(a);
	free(base);
}

/* Accumulate: every mb once, in ascending order; duplicate, out-of-order, missing and aliased refused. */
static void test_accumulate_checks(void)
{
	const int M = 3;
	size_t bytes = qe_arena_bytes(params, 3, M, QE_ARENA_ACCUMULATE);
	char *base = aligned_alloc(QE_ARENA_ALIGN, bytes);
	qe_arena *a = NULL;
	CHECK_OK(qe_arena_create(params, 3, M, QE_ARENA_ACCUMULATE, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a));
	for (int step = 0; step < 2; step++) {
		qe_tensor v;
		CHECK_OK(qe_arena_view(a, 1, 1, &v));
		CHECK(qe_arena_write_check(a, 1, 1, &v) == QE_EARENA, "mb 1 before mb 0");
		CHECK(strstr(qe_last_error(), "out-of-order arena write: FC1.W mb 1 would add into the accumulating view, "
					      "which holds no microbatch yet (the next write must be mb 0)"),
		      "msg '%s'", qe_last_error());
		CHECK(qe_arena_write_commit(a, 1, 1) == QE_EARENA && qe_arena_is_written(a, 1, 1) == 0,
		      "commit out of order refused, nothing marked");
		for (int p = 0; p < 3; p++) {
			CHECK_OK(qe_arena_view(a, p, 0, &v));
			CHECK_OK(qe_arena_write_check(a, p, 0, &v));
			CHECK_OK(qe_arena_write_commit(a, p, 0));
		}
		CHECK_OK(qe_arena_view(a, 2, 0, &v));
		CHECK(qe_arena_write_check(a, 2, 0, &v) == QE_EARENA &&
			      strstr(qe_last_error(), "duplicate arena write: FC2.W mb 0"),
		      "duplicate mb 0: '%s'", qe_last_error());
		CHECK(qe_arena_write_check(a, 2, 2, &v) == QE_EARENA &&
			      strstr(qe_last_error(), "FC2.W mb 2 would add into the accumulating view, which holds mbs "
						      "0..0 (the next write must be mb 1)"),
		      "mb 2 before mb 1: '%s'", qe_last_error());
		/* aliased: FC1.W's shape at FC2.W's view */
		qe_tensor alias = qe_tensor_2d(v.data, QE_F32, QE_DEV_CPU, 16, 16);
		CHECK(qe_arena_write_check(a, 1, 1, &alias) == QE_EARENA &&
			      strstr(qe_last_error(), "aliased arena write: destination of FC1.W mb 1") &&
			      strstr(qe_last_error(), "overlaps the view of FC2.W (accumulating, all mbs)"),
		      "aliased: '%s'", qe_last_error());
		CHECK(qe_arena_check_complete(a) == QE_EARENA && strstr(qe_last_error(), "6 of 9 views not written"),
		      "incomplete: '%s'", qe_last_error());
		for (int m = 1; m < M; m++)
			for (int p = 0; p < 3; p++) {
				CHECK_OK(qe_arena_view(a, p, m, &v));
				CHECK_OK(qe_arena_write_check(a, p, m, &v));
				CHECK_OK(qe_arena_write_commit(a, p, m));
			}
		CHECK_OK(qe_arena_check_complete(a));
		qe_arena_step_reset(a);
	}
	qe_arena_free(a);
	free(base);
}

/*
 * The accumulated sum (mb 0 writes, later mbs add: v = v + g_m) equals the
 * optimizer's ordered reduction of per-mb views (grad = g0; grad += g_m),
 * bit for bit, on values of mixed magnitude and sign (including -0).
 */
static void test_accumulate_bits(void)
{
	const int M = 5, n = 64;
	float g[5][64];
	uint32_t x = 12345;
	for (int m = 0; m < M; m++)
		for (int i = 0; i < n; i++) {
			x = x * 1664525u + 1013904223u;
			float u = (float)(x >> 8) / 16777216.0f - 0.5f;
			g[m][i] = i == 3 ? -0.0f : u * (m % 2 ? 1e6f : 1e-6f) * (float)(1 + i % 7);
		}
	float reduced[64], acc[64];
	for (int i = 0; i < n; i++) {
		reduced[i] = g[0][i];
		for (int m = 1; m < M; m++)
			reduced[i] += g[m][i];
	}
	for (int m = 0; m < M; m++)
		for (int i = 0; i < n; i++)
			acc[i] = m == 0 ? g[0][i] : g[m][i] + acc[i]; /* the GEMM epilogue's v = v(product) + C */
	CHECK(memcmp(reduced, acc, sizeof(acc)) == 0, "accumulated sum differs from the ordered reduction");
}

int main(void)
{
	test_layout();
	test_checks();
	test_order_independence();
	test_accumulate_layout();
	test_accumulate_checks();
	test_accumulate_bits();
	return qe_test_done("test_arena");
}
