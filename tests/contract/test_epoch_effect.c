/*
 * test_epoch_effect.c - effect tokens (order of scaling-state transitions),
 * the weight-cache epoch rules incl. restart, and the optimizer-commit and
 * checkpoint gates with their "what is pending" messages.
 */
#include "runtime/contract/contract.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static void test_effect(void)
{
	qe_effect_state st;
	uint64_t next = 99;
	qe_effect_init(&st, 3);
	CHECK(st.next == 0, "starts at 0");
	CHECK_OK(qe_effect_check(&st, 0));
	CHECK(qe_effect_check(&st, 1) == QE_EORDER, "future token");
	for (uint64_t t = 0; t < 6; t++) {
		CHECK_OK(qe_effect_commit(&st, t, &next));
		CHECK(next == t + 1 && st.next == t + 1, "token %llu -> %llu", (unsigned long long)t, (unsigned long long)next);
	}
	next = 77;
	CHECK(qe_effect_commit(&st, 4, &next) == QE_EORDER, "old token");
	CHECK(strcmp(qe_last_error(), "out-of-order state transition: token 4 presented, expected 6 (stage 3)") == 0,
	      "message '%s'", qe_last_error());
	CHECK(st.next == 6 && next == 77 && st.transitions == 6, "refused commit changed nothing");
	CHECK_OK(qe_effect_commit(&st, 6, NULL));
	qe_effect_reset(&st);
	CHECK(st.next == 0 && st.stage == 3, "restart: tokens from 0");
	CHECK(qe_effect_check(&st, 7) == QE_EORDER, "pre-restart token refused after restart");
	CHECK_OK(qe_effect_commit(&st, 0, &next));
	CHECK(next == 1 && st.transitions == 8, "transitions %llu", (unsigned long long)st.transitions);
}

static void test_weight_cache(void)
{
	qe_epoch_state ep;
	qe_weight_cache wc;
	int refresh = -1;
	qe_key k = qe_key_make(0, 2, 1, 0, 0);
	qe_epoch_init(&ep, 0);
	qe_weight_cache_init(&wc);
	CHECK(!wc.valid && wc.e_C == -1 && ep.e_W == 0, "init");
	CHECK(qe_weight_cache_epoch(&wc) == -1, "invalid reads -1");
	/* a fresh cache: F of mb 1 before any refresh is stale */
	CHECK(qe_weight_cache_check(&wc, ep.e_W, &k, 0, &refresh) == QE_ESTALE_CACHE && refresh == -1, "invalid cache");
	CHECK(strstr(qe_last_error(), "invalid") && strstr(qe_last_error(), "K=(e=0,s=2,m=1,u=0,i=0)"), "msg %s",
	      qe_last_error());
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, NULL, 1, &refresh));
	CHECK(refresh == 1, "first F refreshes");
	qe_weight_cache_commit(&wc, ep.e_W, 1);
	CHECK(wc.valid && wc.e_C == 0 && qe_weight_cache_epoch(&wc) == 0, "refreshed");
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, &k, 0, &refresh));
	CHECK(refresh == 0, "later F reuses");
	qe_weight_cache_commit(&wc, ep.e_W, 0);
	CHECK(wc.e_C == 0, "no refresh keeps e_C");
	/* optimizer commit: e_W advances, the cache goes stale */
	qe_epoch_commit_optimizer(&ep);
	CHECK(ep.e_W == 1 && wc.e_C == 0, "e_W 1");
	k.e = 1;
	CHECK(qe_weight_cache_check(&wc, ep.e_W, &k, 0, &refresh) == QE_ESTALE_CACHE, "stale after commit");
	CHECK(strstr(qe_last_error(), "stale cache") && strstr(qe_last_error(), "e_C=0") &&
		      strstr(qe_last_error(), "e_W=1") && strstr(qe_last_error(), "K=(e=1,s=2,m=1,u=0,i=0)"),
	      "msg %s", qe_last_error());
	/* the first F of the step refreshes even when the cache looks current */
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, &k, 1, &refresh));
	qe_weight_cache_commit(&wc, ep.e_W, refresh);
	CHECK(wc.e_C == 1, "refreshed to 1");
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, &k, 1, &refresh));
	CHECK(refresh == 1, "first of step always refreshes");
	/* restart: cache invalid, even though e_C happens to equal the restored e_W */
	qe_epoch_restart(&ep, 1);
	qe_weight_cache_init(&wc);
	CHECK(ep.e_W == 1 && !wc.valid, "restart invalidates");
	CHECK(qe_weight_cache_check(&wc, ep.e_W, &k, 0, &refresh) == QE_ESTALE_CACHE, "after restart: mb 1 first refused");
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, &k, 1, &refresh));
	qe_weight_cache_commit(&wc, ep.e_W, refresh);
	CHECK_OK(qe_weight_cache_check(&wc, ep.e_W, &k, 0, &refresh));
	CHECK(qe_weight_cache_check(NULL, ep.e_W, &k, 0, &refresh) == QE_EINVAL, "NULL cache");
}

static void test_commit_gates(void)
{
	static const qe_arena_param params[2] = { { "FC1.W", 4, 4, QE_F32, QE_DEV_CPU }, { "FC2.W", 4, 4, QE_F32, QE_DEV_CPU } };
	const int M = 2;
	size_t bytes = qe_arena_bytes(params, 2, M, QE_ARENA_PER_MB);
	void *base = aligned_alloc(QE_ARENA_ALIGN, bytes);
	qe_arena *a = NULL;
	qe_tape_pool *p = NULL;
	qe_epoch_state ep;
	qe_epoch_init(&ep, 4);
	CHECK_OK(qe_arena_create(params, 2, M, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base, bytes, QE_DEV_CPU, &a));
	CHECK_OK(qe_tape_pool_create(4, NULL, &p));

	/* nothing written, nothing live */
	CHECK_OK(qe_quiescence_check(&ep, p, a, 0, 0));
	CHECK(qe_epoch_check_commit(&ep, p, a, 0) == QE_EPREMATURE, "empty arena is incomplete");
	CHECK_OK(qe_epoch_check_commit(&ep, p, NULL, 0));
	CHECK_OK(qe_epoch_check_commit(&ep, NULL, NULL, 0));
	CHECK(qe_epoch_check_commit(&ep, NULL, NULL, 1) == QE_EPREMATURE, "reduction in flight");
	CHECK(strstr(qe_last_error(), "1 reduction in flight"), "msg %s", qe_last_error());

	qe_tape_ref r0, r1, old;
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(3, 0, 0, 0, 0), 3, &old)); /* left over from epoch 3 */
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(4, 0, 0, 0, 0), -1, &r0));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(4, 0, 1, 0, 0), -1, &r1));
	CHECK_OK(qe_tape_pool_commit(p, &r1, QE_CONSUMER_DI));
	for (int q = 0; q < 2; q++)
		CHECK_OK(qe_arena_write_commit(a, q, 0));
	CHECK_OK(qe_arena_write_commit(a, 0, 1));
	CHECK(qe_epoch_check_commit(&ep, p, a, 2) == QE_EPREMATURE, "premature");
	const char *msg = qe_last_error();
	CHECK(strstr(msg, "premature commit of epoch 4: 2 live tapes of epoch 4 (K=(e=4,s=0,m=0,u=0,i=0) slot 0 gen 1; "
			  "K=(e=4,s=0,m=1,u=0,i=0) slot 1 gen 1), arena view FC2.W mb 1 not written, 2 reductions in flight"),
	      "commit message '%s'", msg);
	CHECK(!strstr(msg, "e=3"), "the epoch-3 tape is not this epoch's: '%s'", msg);
	CHECK(qe_quiescence_check(&ep, p, a, 1, 1) == QE_EPREMATURE, "checkpoint refused");
	msg = qe_last_error();
	CHECK(strstr(msg, "premature checkpoint at epoch 4: 3 live tapes") && strstr(msg, "e=3") &&
		      strstr(msg, "3 arena views written but not reduced") && strstr(msg, "FC2.W mb 1 not written") &&
		      strstr(msg, "1 reduction in flight") && strstr(msg, "device work not complete"),
	      "checkpoint message '%s'", msg);

	/* finish the step; the leftover tape of epoch 3 does not block the commit of 4 */
	CHECK_OK(qe_tape_pool_commit(p, &r0, QE_CONSUMER_FULL));
	CHECK_OK(qe_tape_pool_commit(p, &r1, QE_CONSUMER_DW));
	CHECK_OK(qe_arena_write_commit(a, 1, 1));
	CHECK_OK(qe_epoch_check_commit(&ep, p, a, 0));
	/* a complete but unreduced arena still blocks a checkpoint; so does the epoch-3 tape and device work */
	CHECK(qe_quiescence_check(&ep, p, a, 0, 0) == QE_EPREMATURE, "unreduced arena");
	CHECK(strstr(qe_last_error(), "4 arena views written but not reduced") && strstr(qe_last_error(), "1 live tape ("),
	      "msg %s", qe_last_error());
	qe_epoch_commit_optimizer(&ep);
	qe_arena_step_reset(a);
	CHECK(qe_tape_pool_purge_epoch(p, 3) == 1, "purge the leftover");
	CHECK(qe_quiescence_check(&ep, p, a, 0, 1) == QE_EPREMATURE, "device busy");
	CHECK(strcmp(qe_last_error(), "premature checkpoint at epoch 5: device work not complete") == 0, "msg '%s'",
	      qe_last_error());
	CHECK_OK(qe_quiescence_check(&ep, p, a, 0, 0));
	CHECK_OK(qe_quiescence_check(NULL, NULL, NULL, 0, 0));
	CHECK(ep.e_W == 5, "e_W 5");

	/* many pending items: the message stays bounded and says there are more */
	qe_tape_pool *big = NULL;
	CHECK_OK(qe_tape_pool_create(64, NULL, &big));
	for (int m = 0; m < 64; m++) {
		qe_tape_ref r;
		CHECK_OK(qe_tape_pool_alloc(big, qe_key_make(5, 1000000, m, 2, 3), -1, &r));
	}
	size_t bytes8 = qe_arena_bytes(params, 2, 8, QE_ARENA_PER_MB);
	void *base8 = aligned_alloc(QE_ARENA_ALIGN, bytes8);
	qe_arena *a8 = NULL;
	CHECK_OK(qe_arena_create(params, 2, 8, QE_ARENA_PER_MB, QE_ARENA_DIRECT, base8, bytes8, QE_DEV_CPU, &a8));
	CHECK(qe_epoch_check_commit(&ep, big, a8, 0) == QE_EPREMATURE, "big");
	CHECK(strstr(qe_last_error(), "64 live tapes of epoch 5") && strstr(qe_last_error(), "; ...)") &&
		      strstr(qe_last_error(), "10 more arena views not written"),
	      "bounded message '%s'", qe_last_error());
	CHECK(strlen(qe_last_error()) < 1000, "message length %zu", strlen(qe_last_error()));
	qe_arena_free(a8);
	free(base8);
	qe_tape_pool_free(big);
	qe_tape_pool_free(p);
	qe_arena_free(a);
	free(base);
}

int main(void)
{
	test_effect();
	test_weight_cache();
	test_commit_gates();
	return qe_test_done("test_epoch_effect");
}
