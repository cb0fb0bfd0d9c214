/*
 * test_tape_pool.c - the key/slot relation: injective allocation, generations,
 * ABA, consumer masks, release, abort and purge, and the pool's counters.
 */
#include "runtime/contract/contract.h"
#include "testlib.h"

#include <string.h>

static qe_tape_slot_info slot(const qe_tape_pool *p, int i)
{
	qe_tape_slot_info si;
	memset(&si, 0, sizeof(si));
	qe_tape_pool_slot_info(p, i, &si);
	return si;
}

static int same_slot(qe_tape_slot_info a, qe_tape_slot_info b)
{
	return a.live == b.live && a.mask == b.mask && a.gen == b.gen && qe_key_equal(&a.key, &b.key);
}

static int same_stats(const qe_tape_pool_stats *a, const qe_tape_pool_stats *b)
{
	return a->nslots == b->nslots && a->live == b->live && a->peak_live == b->peak_live && a->allocs == b->allocs &&
	       a->releases == b->releases && a->aborts == b->aborts && a->consumes == b->consumes &&
	       a->delayed_dw == b->delayed_dw;
}

static void test_key_format(void)
{
	char buf[QE_KEY_FMT_LEN], rb[2 * QE_KEY_FMT_LEN];
	qe_key k = qe_key_make(3, 1, 2, 0, 0);
	CHECK(strcmp(qe_key_format(&k, buf, sizeof(buf)), "K=(e=3,s=1,m=2,u=0,i=0)") == 0, "key format '%s'", buf);
	qe_key big = qe_key_make(INT64_MAX, INT32_MIN, INT32_MAX, -1, 7);
	qe_key_format(&big, buf, sizeof(buf));
	CHECK(strcmp(buf, "K=(e=9223372036854775807,s=-2147483648,m=2147483647,u=-1,i=7)") == 0, "extreme key '%s'", buf);
	qe_tape_ref r = { k, 1, 7 };
	CHECK(strcmp(qe_tape_ref_format(&r, rb, sizeof(rb)), "K=(e=3,s=1,m=2,u=0,i=0) slot 1 gen 7") == 0, "ref '%s'", rb);
	qe_key k2 = k;
	CHECK(qe_key_equal(&k, &k2), "equal keys");
	k2.i = 1;
	CHECK(!qe_key_equal(&k, &k2), "i differs");
	k2 = k;
	k2.e = 4;
	CHECK(!qe_key_equal(&k, &k2), "e differs");
}

static void test_alloc_rules(void)
{
	qe_tape_pool *p = NULL;
	char store[3][16];
	void *payloads[3] = { store[0], store[1], store[2] };
	CHECK(qe_tape_pool_create(0, NULL, &p) == QE_EINVAL && p == NULL, "0 slots refused");
	CHECK_OK(qe_tape_pool_create(3, payloads, &p));
	qe_tape_ref a, b, c, d;
	qe_key ka = qe_key_make(0, 0, 0, 0, 0), kb = qe_key_make(0, 0, 1, 0, 0), kc = qe_key_make(0, 0, 2, 1, 3);
	CHECK_OK(qe_tape_pool_alloc(p, ka, -1, &a));
	CHECK(a.slot == 0 && a.gen == 1 && qe_key_equal(&a.key, &ka), "first alloc slot %d gen %llu", a.slot,
	      (unsigned long long)a.gen);
	/* injective: the same K cannot be live twice */
	qe_tape_pool_stats before, after;
	qe_tape_pool_get_stats(p, &before);
	CHECK(qe_tape_pool_alloc(p, ka, -1, &d) == QE_EKEY_SLOT, "same key twice");
	CHECK(strstr(qe_last_error(), "K=(e=0,s=0,m=0,u=0,i=0) is live in slot 0 gen 1"), "message: %s", qe_last_error());
	/* hint on an occupied slot: never pre-empted */
	CHECK(qe_tape_pool_alloc(p, kb, 0, &d) == QE_EBUSY, "occupied hint");
	CHECK(strstr(qe_last_error(), "slot 0") && strstr(qe_last_error(), "pre-empted"), "message: %s", qe_last_error());
	CHECK(qe_tape_pool_alloc(p, kb, 3, &d) == QE_EINVAL, "hint out of range");
	CHECK(qe_tape_pool_alloc(p, kb, -2, &d) == QE_EINVAL, "hint -2");
	qe_tape_pool_get_stats(p, &after);
	CHECK(same_stats(&before, &after), "failed allocs changed the counters");
	CHECK(same_slot(slot(p, 0), (qe_tape_slot_info){ 1, 0, 1, ka }), "slot 0 changed by failed allocs");
	CHECK(slot(p, 1).gen == 0 && !slot(p, 1).live, "slot 1 touched");
	CHECK_OK(qe_tape_pool_alloc(p, kb, 2, &b));
	CHECK(b.slot == 2 && b.gen == 1, "hinted slot 2: slot %d gen %llu", b.slot, (unsigned long long)b.gen);
	CHECK_OK(qe_tape_pool_alloc(p, kc, -1, &c));
	CHECK(c.slot == 1, "lowest free slot is 1, got %d", c.slot);
	CHECK(qe_tape_pool_alloc(p, qe_key_make(0, 0, 3, 0, 0), -1, &d) == QE_EBUSY, "full pool");
	CHECK(strstr(qe_last_error(), "all 3 slots are live"), "message: %s", qe_last_error());
	/* payloads are the caller's fixed storage */
	void *pl = NULL;
	CHECK_OK(qe_tape_pool_check(p, &b, QE_CONSUMER_DI, &pl));
	CHECK(pl == store[2], "payload of slot 2");
	/* keys differing only in u or i are distinct */
	CHECK_OK(qe_tape_pool_abort(p, &c));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(0, 0, 2, 1, 4), -1, &d));
	CHECK(d.slot == 1 && d.gen == 2, "slot 1 gen 2, got slot %d gen %llu", d.slot, (unsigned long long)d.gen);
	qe_tape_pool_free(p);
	qe_tape_pool_free(NULL);
}

static void test_aba_and_consumers(void)
{
	qe_tape_pool *p = NULL;
	CHECK_OK(qe_tape_pool_create(1, NULL, &p));
	qe_tape_ref old, cur;
	qe_key k0 = qe_key_make(5, 2, 0, 0, 0), k1 = qe_key_make(5, 2, 1, 0, 0);
	CHECK_OK(qe_tape_pool_alloc(p, k0, 0, &old));
	CHECK_OK(qe_tape_pool_check(p, &old, QE_CONSUMER_DI, NULL));
	CHECK_OK(qe_tape_pool_commit(p, &old, QE_CONSUMER_DI));
	CHECK(qe_tape_pool_check(p, &old, QE_CONSUMER_DI, NULL) == QE_EDUP_CONSUMER, "second dI");
	CHECK(strstr(qe_last_error(), "duplicate consumer: dI of K=(e=5,s=2,m=0,u=0,i=0) slot 0 gen 1"), "msg %s",
	      qe_last_error());
	CHECK(qe_tape_pool_commit(p, &old, QE_CONSUMER_DI) == QE_EDUP_CONSUMER, "second dI commit");
	CHECK(slot(p, 0).live && slot(p, 0).mask == QE_CONSUMER_DI, "still live with dI only");
	CHECK(qe_tape_pool_check(p, &old, QE_CONSUMER_FULL, NULL) == QE_EDUP_CONSUMER, "B after dI");
	CHECK_OK(qe_tape_pool_commit(p, &old, QE_CONSUMER_DW));
	qe_tape_slot_info s0 = slot(p, 0);
	CHECK(!s0.live && s0.gen == 1 && s0.mask == QE_CONSUMER_FULL, "released, gen kept: live %d gen %llu mask %d",
	      s0.live, (unsigned long long)s0.gen, s0.mask);
	CHECK(qe_tape_pool_check(p, &old, QE_CONSUMER_DW, NULL) == QE_EDUP_CONSUMER, "dW after release");
	CHECK(qe_tape_pool_check(p, &old, 0, NULL) == QE_ESTALE_REF, "released tape is not live");
	CHECK(strstr(qe_last_error(), "released"), "msg %s", qe_last_error());
	/* ABA: the slot is reused for another key; the old ref must be refused, the new tape untouched */
	CHECK_OK(qe_tape_pool_alloc(p, k1, 0, &cur));
	CHECK(cur.slot == 0 && cur.gen == 2, "reuse slot 0 gen 2");
	qe_tape_slot_info live = slot(p, 0);
	qe_tape_pool_stats st0, st1;
	qe_tape_pool_get_stats(p, &st0);
	int codes[4];
	codes[0] = qe_tape_pool_check(p, &old, QE_CONSUMER_DI, NULL);
	codes[1] = qe_tape_pool_commit(p, &old, QE_CONSUMER_DI);
	codes[2] = qe_tape_pool_commit(p, &old, QE_CONSUMER_DW);
	codes[3] = qe_tape_pool_abort(p, &old);
	for (int i = 0; i < 4; i++)
		CHECK(codes[i] == QE_ESTALE_REF, "old ref op %d -> %s", i, qe_errname(codes[i]));
	CHECK(strstr(qe_last_error(), "stale reference") && strstr(qe_last_error(), "ref gen 1 slot 0") &&
		      strstr(qe_last_error(), "live gen 2") && strstr(qe_last_error(), "K=(e=5,s=2,m=1,u=0,i=0)"),
	      "ABA message: %s", qe_last_error());
	qe_tape_pool_get_stats(p, &st1);
	CHECK(same_slot(live, slot(p, 0)) && same_stats(&st0, &st1), "ABA attempt changed the live tape");
	/* a forged ref: right slot and gen, wrong key */
	qe_tape_ref forged = cur;
	forged.key.m = 7;
	CHECK(qe_tape_pool_check(p, &forged, QE_CONSUMER_DI, NULL) == QE_EKEY_SLOT, "forged key");
	forged = cur;
	forged.slot = 4;
	CHECK(qe_tape_pool_check(p, &forged, QE_CONSUMER_DI, NULL) == QE_EKEY_SLOT, "slot out of range");
	forged = cur;
	forged.gen = 9;
	CHECK(qe_tape_pool_check(p, &forged, QE_CONSUMER_DI, NULL) == QE_ESTALE_REF, "future gen");
	CHECK(qe_tape_pool_check(p, &cur, 4, NULL) == QE_EINVAL, "bad consumer mask");
	CHECK(qe_tape_pool_commit(p, &cur, 0) == QE_EINVAL, "commit without consumer");
	/* the live tape can still be consumed, in one FULL commit */
	CHECK_OK(qe_tape_pool_commit(p, &cur, QE_CONSUMER_FULL));
	CHECK(!slot(p, 0).live, "B releases");
	qe_tape_pool_free(p);
}

static void test_abort_purge(void)
{
	qe_tape_pool *p = NULL;
	CHECK_OK(qe_tape_pool_create(4, NULL, &p));
	qe_tape_ref r[4];
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(7, 0, 0, 0, 0), -1, &r[0]));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(7, 0, 1, 0, 0), -1, &r[1]));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(8, 0, 0, 0, 0), -1, &r[2]));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(7, 1, 0, 0, 0), -1, &r[3]));
	CHECK_OK(qe_tape_pool_commit(p, &r[1], QE_CONSUMER_DI));
	CHECK(qe_tape_pool_live_refs(p, 7, NULL, 0) == 3, "3 live of epoch 7");
	qe_tape_ref got[2];
	CHECK(qe_tape_pool_live_refs(p, 7, got, 2) == 3 && got[0].slot == 0 && got[1].slot == 1, "first two by slot");
	CHECK(qe_tape_pool_live_refs(p, QE_EPOCH_ANY, NULL, 0) == 4, "4 live in all");
	/* abort one reference: slot freed, generation kept, ref now stale */
	CHECK_OK(qe_tape_pool_abort(p, &r[0]));
	CHECK(!slot(p, 0).live && slot(p, 0).gen == 1, "aborted slot free, gen kept");
	CHECK(qe_tape_pool_check(p, &r[0], QE_CONSUMER_DI, NULL) == QE_ESTALE_REF, "aborted ref");
	CHECK(strstr(qe_last_error(), "aborted"), "msg %s", qe_last_error());
	CHECK(qe_tape_pool_abort(p, &r[0]) == QE_ESTALE_REF, "double abort");
	/* purge the epoch: every outstanding tape of epoch 7, whatever its consumers */
	CHECK(qe_tape_pool_purge_epoch(p, 7) == 2, "purge 2");
	CHECK(qe_tape_pool_purge_epoch(p, 7) == 0, "purge again 0");
	CHECK(qe_tape_pool_live_refs(p, 7, NULL, 0) == 0, "none of epoch 7");
	CHECK(slot(p, 2).live, "epoch 8 untouched");
	CHECK(qe_tape_pool_check(p, &r[1], QE_CONSUMER_DW, NULL) == QE_ESTALE_REF, "purged ref stale");
	/* purged slots are reusable; generations keep growing */
	qe_tape_ref again;
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(7, 0, 1, 0, 0), 1, &again));
	CHECK(again.gen == 2, "gen 2 after purge");
	CHECK(qe_tape_pool_check(p, &r[1], QE_CONSUMER_DW, NULL) == QE_ESTALE_REF, "old ref after reuse");
	qe_tape_pool_stats st;
	qe_tape_pool_get_stats(p, &st);
	CHECK(st.allocs == 5 && st.aborts == 3 && st.releases == 0 && st.live == 2 && st.peak_live == 4 &&
		      st.consumes == 1,
	      "stats allocs %llu aborts %llu releases %llu live %d peak %d consumes %llu", (unsigned long long)st.allocs,
	      (unsigned long long)st.aborts, (unsigned long long)st.releases, st.live, st.peak_live,
	      (unsigned long long)st.consumes);
	qe_tape_pool_free(p);
}

/* M=4, every F first, then dI in order with dW deferred out of LIFO order. */
static void test_delayed_counter(void)
{
	qe_tape_pool *p = NULL;
	CHECK_OK(qe_tape_pool_create(4, NULL, &p));
	qe_tape_ref r[4];
	for (int m = 0; m < 4; m++)
		CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(0, 0, m, 0, 0), m, &r[m]));
	CHECK_OK(qe_tape_pool_commit(p, &r[0], QE_CONSUMER_DI));
	CHECK_OK(qe_tape_pool_commit(p, &r[1], QE_CONSUMER_DI));
	CHECK_OK(qe_tape_pool_commit(p, &r[0], QE_CONSUMER_DW)); /* delayed: dI1 in between */
	CHECK_OK(qe_tape_pool_commit(p, &r[2], QE_CONSUMER_DI));
	CHECK_OK(qe_tape_pool_commit(p, &r[2], QE_CONSUMER_DW)); /* right after its dI: not delayed */
	CHECK_OK(qe_tape_pool_commit(p, &r[3], QE_CONSUMER_DI));
	CHECK_OK(qe_tape_pool_commit(p, &r[1], QE_CONSUMER_DW)); /* delayed */
	CHECK_OK(qe_tape_pool_commit(p, &r[3], QE_CONSUMER_DW)); /* delayed: dW1 in between */
	qe_tape_pool_stats st;
	qe_tape_pool_get_stats(p, &st);
	CHECK(st.delayed_dw == 3, "delayed dW %llu, expected 3", (unsigned long long)st.delayed_dw);
	CHECK(st.peak_live == 4 && st.live == 0 && st.releases == 4 && st.allocs == 4 && st.consumes == 8,
	      "peak %d live %d releases %llu", st.peak_live, st.live, (unsigned long long)st.releases);
	/* a full B and a dW without a dI before it */
	qe_tape_ref b, w;
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(1, 0, 0, 0, 0), -1, &b));
	CHECK_OK(qe_tape_pool_commit(p, &b, QE_CONSUMER_FULL));
	CHECK_OK(qe_tape_pool_alloc(p, qe_key_make(1, 0, 1, 0, 0), -1, &w));
	CHECK_OK(qe_tape_pool_commit(p, &w, QE_CONSUMER_DW));
	CHECK(slot(p, w.slot).live && slot(p, w.slot).mask == QE_CONSUMER_DW, "dW alone does not release");
	qe_tape_pool_get_stats(p, &st);
	CHECK(st.delayed_dw == 4 && st.releases == 5, "B not delayed, dW without dI delayed: %llu",
	      (unsigned long long)st.delayed_dw);
	qe_tape_pool_free(p);
}

int main(void)
{
	test_key_format();
	test_alloc_rules();
	test_aba_and_consumers();
	test_abort_purge();
	test_delayed_counter();
	return qe_test_done("test_tape_pool");
}
