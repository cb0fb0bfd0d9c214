/*
 * test_fp8_update.c - fp8_update_many on the cpu backend: the same bytes as n
 * single fp8_update calls in order (eager and replayed from a capture, which
 * must keep its own copy of the item list), over blocks that lie back to back
 * as a stage's role blocks do, with mixed E4M3/E5M2 formats and the special
 * histories (nothing cast, NaN, infinity, tiny amax).  Then the refusals:
 * n < 0, a NULL item array, a NULL block, a format that is not FP8, a
 * repeated block, overlapping blocks, a bad history length; each must return
 * QE_EINVAL, name the op (and the item), and leave every block as it was
 * (on a stream and on the default stream).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bk_util.h"
#include "runtime/fp8/fp8.h"

#define NAME "backend_test_fp8_update"
#define SEED 777u
#define NMAX 80

/* n role blocks of L + 2 floats, back to back: random histories, some special, scale 3. */
static void fill_blocks(float *arena, int n, int L, qe_rng *r)
{
	int F = qe_fp8_role_floats(L);
	for (int i = 0; i < n; i++) {
		float *b = arena + (size_t)i * F;
		for (int j = 0; j < L; j++)
			b[j] = fabsf(qe_rng_normal(r)) * 10.0f;
		b[L] = 3.0f;
		b[L + 1] = 1.0f / 3.0f;
		switch (i % 7) {
		case 1:
			b[0] = 0.0f; /* nothing cast: no update, no roll */
			break;
		case 3:
			b[L / 2] = NAN;
			break;
		case 4:
			b[0] = INFINITY;
			break;
		case 5:
			for (int j = 0; j < L; j++)
				b[j] = 1e-44f;
			break;
		default:
			break;
		}
	}
}

/* Formats mixed so that neither E4M3 nor E5M2 runs in long stretches. */
static qe_dtype fmt_of(int i)
{
	return (i % 3 == 1 || i % 5 == 0) ? QE_E5M2 : QE_E4M3;
}

static void make_items(qe_fp8_update_item *it, float *arena, int n, int L)
{
	for (int i = 0; i < n; i++) {
		it[i].block = arena + (size_t)i * qe_fp8_role_floats(L);
		it[i].fmt = fmt_of(i);
	}
}

/* many == n singles, byte for byte, three updates in a row (the roll), eager and from a graph. */
static void test_same_as_singles(bk *k, qe_rng *r, int n, int L, qe_amax_algo algo, int margin)
{
	const qe_backend_ops *o = k->o;
	size_t bytes = (size_t)n * qe_fp8_role_floats(L) * sizeof(float);
	float *a = bk_f32(k, (int64_t)n * qe_fp8_role_floats(L)), *b = bk_f32(k, (int64_t)n * qe_fp8_role_floats(L));
	float *c = bk_f32(k, (int64_t)n * qe_fp8_role_floats(L));
	if (!a || !b || !c)
		return;
	fill_blocks(a, n, L, r);
	memcpy(b, a, bytes);
	memcpy(c, a, bytes);
	qe_fp8_recipe rec = qe_fp8_recipe_default();
	rec.history_len = L;
	rec.algo = algo;
	rec.margin = margin;
	qe_fp8_update_item items[NMAX];
	char what[96];

	for (int rep = 0; rep < 3; rep++) {
		for (int i = 0; i < n; i++)
			CHECK_OK(o->fp8_update(k->s, a + (size_t)i * qe_fp8_role_floats(L), L, fmt_of(i), rec));
		make_items(items, b, n, L);
		CHECK_OK(o->fp8_update_many(k->s, items, n, L, rec));
	}
	snprintf(what, sizeof(what), "fp8_update_many n=%d L=%d algo %d margin %d (x3)", n, L, (int)algo, margin);
	CHECK_BYTES(a, b, bytes, what);
	CHECK(bytes_diff(a, c, bytes) >= 0, "%s: the updates changed no block", what);
	printf("  %-44s %zu bytes identical\n", what, bytes);

	/* captured: nothing runs at capture; the graph keeps its own item list */
	qe_graph *g = NULL;
	make_items(items, c, n, L);
	CHECK_OK(o->capture_begin(k->s));
	CHECK_OK(o->fp8_update_many(k->s, items, n, L, rec));
	CHECK_OK(o->capture_end(k->s, &g));
	memset(items, 0, sizeof(items));
	CHECK(g && o->graph_op_count(g) == 1, "capture of fp8_update_many recorded %d ops, want 1",
	      g ? o->graph_op_count(g) : -1);
	for (int rep = 0; rep < 3 && g; rep++)
		CHECK_OK(o->graph_launch(g, k->s));
	snprintf(what, sizeof(what), "graph of fp8_update_many n=%d L=%d (x3)", n, L);
	CHECK_BYTES(a, c, bytes, what);
	if (g)
		o->graph_destroy(g);
	o->free(k->b, a);
	o->free(k->b, b);
	o->free(k->b, c);
}

/* One refused call on a fresh stream: the code, the message, and no block changed. */
static void refuse(bk *k, const char *what, const qe_fp8_update_item *items, int n, int L, qe_fp8_recipe rec,
		   float *arena, size_t bytes, const char *want)
{
	uint8_t *before = malloc(bytes);
	memcpy(before, arena, bytes);
	qe_stream *s = NULL;
	CHECK_OK(k->o->stream_create(k->b, &s));
	int rc = k->o->fp8_update_many(s, items, n, L, rec);
	const char *msg = qe_last_error();
	CHECK(rc == QE_EINVAL, "%s: returned %s, want QE_EINVAL", what, qe_errname(rc));
	CHECK(strstr(msg, "fp8_update_many") && strstr(msg, want), "%s: message '%s' lacks '%s'", what, msg, want);
	CHECK_BYTES(before, arena, bytes, what);
	/* the default stream refuses it the same way */
	rc = k->o->fp8_update_many(NULL, items, n, L, rec);
	CHECK(rc == QE_EINVAL, "%s on the NULL stream: returned %s, want QE_EINVAL", what, qe_errname(rc));
	CHECK_BYTES(before, arena, bytes, what);
	printf("  refused: %-26s %s\n", what, msg);
	k->o->stream_destroy(s);
	free(before);
}

static void test_refusals(bk *k, qe_rng *r)
{
	const int n = 6, L = 4, F = qe_fp8_role_floats(L);
	size_t bytes = (size_t)n * F * sizeof(float);
	float *arena = bk_f32(k, (int64_t)n * F);
	if (!arena)
		return;
	fill_blocks(arena, n, L, r);
	for (int i = 0; i < n; i++)
		arena[(size_t)i * F] = 1.0f + (float)i; /* every block would change if updated */
	qe_fp8_recipe rec = qe_fp8_recipe_default();
	rec.history_len = L;
	qe_fp8_update_item items[8];

	make_items(items, arena, n, L);
	items[4].block = items[1].block;
	refuse(k, "repeated block", items, n, L, rec, arena, bytes, "item 4 of 6 repeats the role block of item 1");

	make_items(items, arena, n, L);
	items[5].block = items[2].block + 1;
	refuse(k, "overlapping blocks", items, n, L, rec, arena, bytes, "item 5 of 6");
	make_items(items, arena, n, L);
	items[2].block = items[3].block + F - 1; /* last float of block 3 shared */
	refuse(k, "overlap by one float", items, n, L, rec, arena, bytes, "item 3 of 6");

	make_items(items, arena, n, L);
	items[3].block = NULL;
	refuse(k, "NULL block", items, n, L, rec, arena, bytes, "item 3 of 6: NULL role block");

	make_items(items, arena, n, L);
	items[2].fmt = QE_F32;
	refuse(k, "f32 format", items, n, L, rec, arena, bytes, "item 2 of 6: format f32 is not FP8");

	make_items(items, arena, n, L);
	refuse(k, "n < 0", items, -1, L, rec, arena, bytes, "-1 items");
	refuse(k, "NULL item array", NULL, n, L, rec, arena, bytes, "item array is NULL");
	refuse(k, "history length 0", items, n, 0, rec, arena, bytes, "history length 0");
	qe_fp8_recipe bad = rec;
	bad.margin = -1;
	refuse(k, "bad recipe", items, n, L, bad, arena, bytes, "margin -1");

	/* n == 0 does nothing, even with no item array; adjacent blocks are not overlapping */
	uint8_t *before = malloc(bytes);
	memcpy(before, arena, bytes);
	CHECK_OK(k->o->fp8_update_many(k->s, NULL, 0, L, rec));
	CHECK_BYTES(before, arena, bytes, "n == 0");
	CHECK_OK(k->o->fp8_update_many(k->s, items, n, L, rec));
	CHECK(bytes_diff(before, arena, bytes) >= 0, "the valid call after the refusals changed no block");
	free(before);
	k->o->free(k->b, arena);
}

int main(void)
{
	printf("seed %u\n", SEED);
	qe_rng r;
	qe_rng_init(&r, SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.s)
		return qe_test_done(NAME);
	printf("fp8_update_many against single updates\n");
	test_same_as_singles(&k, &r, 1, 4, QE_AMAX_MAX, 0);
	test_same_as_singles(&k, &r, 10, 4, QE_AMAX_MAX, 0);
	test_same_as_singles(&k, &r, 33, 1, QE_AMAX_MAX, 0);
	test_same_as_singles(&k, &r, 75, 37, QE_AMAX_MOST_RECENT, 1);
	test_same_as_singles(&k, &r, 64, 300, QE_AMAX_MAX, 3);
	printf("refusals\n");
	test_refusals(&k, &r);
	bk_close(&k);
	return qe_test_done(NAME);
}
