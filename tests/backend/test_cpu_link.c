/*
 * test_cpu_link.c - the cpu backend's device links (cpu_link.c), the channel
 * the executor's device-link path (runtime/exec/links.c) uses with
 * QE_P2P=device on cpu.
 *
 * Two threads of one process play the two ranks: the sender makes the id and
 * opens it as sender, the receiver opens it as receiver.  Checked: a link's
 * first send waits for the receiver's first receive (NCCL's lazy connect)
 * and fails at QE_COMM_TIMEOUT_MS, naming the cause, when none comes; after
 * that first exchange, messages of many sizes (0 bytes to 8 MiB) arrive bit
 * for bit and in order, also when every send is enqueued before any receive
 * (a send must not wait for its receiver); a receive of the wrong size fails naming both sizes and
 * leaves link and stream failed; link_abort makes a blocked receive return
 * promptly; a sender that closes early makes the receive fail with
 * QE_ECOMM, a receiver that closes early makes the sender's link fail, and
 * neither close hangs; a silent sender times out after QE_COMM_TIMEOUT_MS,
 * and a sender whose receiver stops reading closes within that bound;
 * capture, the default stream, the wrong side and foreign ids are refused.
 * A watchdog ends the process if anything hangs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bk_util.h"
#include "runtime/comm/launch_vars.h"

#define SEED 20240611u
#define WATCHDOG_S 60

/* QE_COMM_TIMEOUT_MS as cli would hand it to the runtime (NULL: unset, the default). */
static void set_timeout(const char *ms)
{
	qe_launch_var_set("QE_COMM_TIMEOUT_MS", ms);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void *watchdog(void *arg)
{
	(void)arg;
	sleep(WATCHDOG_S);
	fprintf(stderr, "FAIL: test_cpu_link still running after %d s: something hangs\n", WATCHDOG_S);
	_exit(2);
}

/* ---- opening a pair ---------------------------------------------------------- */

typedef struct opener {
	qe_backend *b;
	unsigned char id[QE_LINK_ID_BYTES];
	qe_link *rx;
	int rc;
	char err[512];
} opener;

static void *open_receiver(void *arg)
{
	opener *op = arg;
	op->rc = op->b->ops->link_open(op->b, op->id, 0, &op->rx);
	snprintf(op->err, sizeof(op->err), "%s", qe_last_error());
	return NULL;
}

/* Open a sender (this thread) and a receiver (another thread) on one id; 0 or the first error. */
static int open_pair(qe_backend *b, qe_link **tx, qe_link **rx)
{
	opener op = { .b = b };
	*tx = *rx = NULL;
	int rc = b->ops->link_id(b, op.id);
	if (rc)
		return rc;
	pthread_t t;
	if (pthread_create(&t, NULL, open_receiver, &op))
		return qe_fail(QE_ENOMEM, "test: receiver thread");
	rc = b->ops->link_open(b, op.id, 1, tx);
	pthread_join(t, NULL);
	if (!rc && op.rc)
		rc = qe_fail(op.rc, "receiver: %s", op.err);
	*rx = op.rx;
	return rc;
}

/* ---- a receiving thread ------------------------------------------------------ */

typedef struct receiver {
	const qe_backend_ops *o;
	qe_link *rx;
	qe_stream *s;
	void *buf;
	size_t bytes;
	int rc;
	double ms;
	char err[512];
} receiver;

static void *recv_one(void *arg)
{
	receiver *r = arg;
	double t0 = now_ms();
	r->rc = r->o->link_recv(r->rx, r->s, r->buf, r->bytes);
	r->ms = now_ms() - t0;
	snprintf(r->err, sizeof(r->err), "%s", qe_last_error());
	return NULL;
}

/*
 * The first exchange of a fresh pair, a 0-byte message received on another
 * thread: a link's first send waits for the receiver's first receive (as
 * NCCL's lazy connect may), so one thread cannot do both.
 */
static int connect_pair(bk *k, qe_link *tx, qe_link *rx, qe_stream *ss, qe_stream *rs)
{
	receiver r = { k->o, rx, rs, NULL, 0, 0, 0, "" };
	pthread_t t;
	if (pthread_create(&t, NULL, recv_one, &r))
		return qe_fail(QE_ENOMEM, "test: receiver thread");
	int rc = k->o->link_send(tx, ss, NULL, 0);
	pthread_join(t, NULL);
	if (!rc && r.rc)
		rc = qe_fail(r.rc, "first receive: %s", r.err);
	return rc;
}

/* ---- cases ------------------------------------------------------------------- */

static void fill_rand(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

static int same_bytes(const uint8_t *a, const uint8_t *b, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i]) {
			CHECK(0, "%s: byte %zu of %zu differs: sent 0x%02x, received 0x%02x", what, i, n, a[i], b[i]);
			return 0;
		}
	return 1;
}

/*
 * Case setup: a sending and a receiving stream and a linked pair, which has
 * made its first exchange when connect is set; 0 (checks failed) when any is
 * missing.
 */
static int pair_open(bk *k, qe_link **tx, qe_link **rx, qe_stream **ss, qe_stream **rs, int connect)
{
	*tx = *rx = NULL;
	*ss = *rs = NULL;
	CHECK_OK(k->o->stream_create(k->b, ss));
	CHECK_OK(k->o->stream_create(k->b, rs));
	CHECK_OK(open_pair(k->b, tx, rx));
	if (!*tx || !*rx || !*ss || !*rs)
		return 0;
	if (connect)
		CHECK_OK(connect_pair(k, *tx, *rx, *ss, *rs));
	return 1;
}

static int pair_up(bk *k, qe_link **tx, qe_link **rx, qe_stream **ss, qe_stream **rs)
{
	return pair_open(k, tx, rx, ss, rs, 1);
}

/* Case ends: close the sending side, then the receiving one, then both streams. */
static void pair_down(bk *k, qe_link *tx, qe_link *rx, qe_stream *ss, qe_stream *rs)
{
	k->o->link_close(tx);
	k->o->link_close(rx);
	k->o->stream_destroy(ss);
	k->o->stream_destroy(rs);
}

/* Every send enqueued before any receive, then the receives: order and bytes. */
static void case_order(bk *k)
{
	static const size_t sizes[] = { 0, 1, 7, 4096, (3u << 20) + 5, 8u << 20, 100, 0, 65536 };
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	qe_link *tx, *rx;
	qe_stream *ss, *rs;
	if (!pair_up(k, &tx, &rx, &ss, &rs))
		return;
	uint8_t *src[NS], *dst = malloc(8u << 20);
	double t0 = now_ms();
	for (int i = 0; i < NS; i++) {
		src[i] = malloc(sizes[i] + 1);
		fill_rand(src[i], sizes[i], SEED + (uint64_t)i);
		CHECK_OK(k->o->link_send(tx, ss, src[i], sizes[i]));
	}
	double t_send = now_ms() - t0;
	for (int i = 0; i < NS; i++) {
		uint8_t *keep = malloc(sizes[i] + 1);
		fill_rand(keep, sizes[i], SEED + (uint64_t)i);
		if (sizes[i]) /* the payload was copied: the source may change at once, as ring slots do */
			memset(src[i], 0xEE, sizes[i]);
		memset(dst, 0x5A, sizes[i] + 1 < (8u << 20) ? sizes[i] + 1 : 8u << 20);
		CHECK_OK(k->o->link_recv(rx, rs, dst, sizes[i]));
		char what[64];
		snprintf(what, sizeof(what), "message %d (%zu bytes)", i, sizes[i]);
		same_bytes(keep, dst, sizes[i], what);
		if (sizes[i] < (8u << 20))
			CHECK(dst[sizes[i]] == 0x5A, "%s: the receive wrote past its end", what);
		free(keep);
	}
	double t_all = now_ms() - t0;
	CHECK(t_send < 5000, "enqueueing %d sends took %.0f ms: a send waited for its receiver", NS, t_send);
	CHECK_OK(k->o->link_check(tx));
	CHECK_OK(k->o->link_check(rx));
	CHECK(k->o->stream_query(ss) == 0, "the send stream reports pending work");

	/* now concurrently: a receiving thread while this one sends, 64 messages of varying size */
	enum { NM = 64 };
	uint8_t *big = malloc(1u << 20);
	int bad = 0;
	for (int i = 0; i < NM && !bad; i++) {
		size_t n = (size_t)((i * 7919) % (1 << 20));
		receiver r = { k->o, rx, rs, dst, n, 0, 0, "" };
		pthread_t t;
		pthread_create(&t, NULL, recv_one, &r);
		fill_rand(big, n, SEED * 3 + (uint64_t)i);
		CHECK_OK(k->o->link_send(tx, ss, big, n));
		pthread_join(t, NULL);
		CHECK(r.rc == 0, "concurrent message %d (%zu bytes): %s", i, n, r.err);
		char what[64];
		snprintf(what, sizeof(what), "concurrent message %d", i);
		bad = r.rc != 0 || !same_bytes(big, dst, n, what);
	}
	printf("order: %d messages (0 B .. 8 MiB) enqueued in %.1f ms, all received in %.1f ms; %d concurrent ok\n",
	       NS, t_send, t_all, bad ? 0 : NM);
	for (int i = 0; i < NS; i++)
		free(src[i]);
	free(big);
	free(dst);
	/* close the receiver first: closing is not collective on cpu */
	k->o->link_close(rx);
	k->o->link_close(tx);
	k->o->stream_destroy(ss);
	k->o->stream_destroy(rs);
}

static void case_size_mismatch(bk *k)
{
	qe_link *tx, *rx;
	qe_stream *ss, *rs;
	if (!pair_up(k, &tx, &rx, &ss, &rs))
		return;
	uint8_t buf[128] = { 1, 2, 3 };
	CHECK_OK(k->o->link_send(tx, ss, buf, 100));
	int rc = k->o->link_recv(rx, rs, buf, 64);
	const char *msg = qe_last_error();
	CHECK(rc == QE_ECOMM, "receiving 64 bytes of a 100-byte message: %s (%s)", qe_errname(rc), msg);
	CHECK(strstr(msg, "100") && strstr(msg, "64"), "the mismatch message names both sizes: %s", msg);
	printf("size mismatch: %s\n", msg);
	CHECK(k->o->link_check(rx) != 0, "link_check is 0 after a failed receive");
	rc = k->o->link_recv(rx, rs, buf, 100);
	CHECK(rc != 0, "a receive on the failed stream and link succeeded");
	rc = k->o->fill(rs, buf, 0, 4);
	CHECK(rc != 0, "the receive stream is not failed after the mismatch");
	pair_down(k, tx, rx, ss, rs);
}

static void case_abort(bk *k)
{
	qe_link *tx, *rx;
	qe_stream *ss, *rs;
	if (!pair_up(k, &tx, &rx, &ss, &rs))
		return;
	uint8_t buf[256];
	receiver r = { k->o, rx, rs, buf, sizeof(buf), 0, 0, "" };
	pthread_t t;
	pthread_create(&t, NULL, recv_one, &r);
	sleep_ms(200);
	double t0 = now_ms();
	k->o->link_abort(rx);
	pthread_join(t, NULL);
	double after = now_ms() - t0;
	CHECK(r.rc == QE_ECOMM, "a receive blocked when its link was aborted returned %s: %s", qe_errname(r.rc), r.err);
	CHECK(after < 1000, "the blocked receive returned %.0f ms after the abort", after);
	CHECK(strstr(r.err, "abort") != NULL, "the error says the link was aborted: %s", r.err);
	CHECK(k->o->link_check(rx) != 0, "link_check is 0 on an aborted link");
	printf("abort: a receive blocked %.0f ms returned %.1f ms after link_abort: %s\n", r.ms, after, r.err);
	/* the sender side aborted: later sends fail instead of queueing */
	k->o->link_abort(tx);
	int rc = k->o->link_send(tx, ss, buf, 16);
	CHECK(rc == QE_ECOMM, "link_send on an aborted link: %s", qe_errname(rc));
	CHECK(k->o->link_check(tx) != 0, "link_check is 0 on an aborted sending link");
	pair_down(k, tx, rx, ss, rs);
}

static void case_peer_closes(bk *k)
{
	qe_link *tx, *rx;
	qe_stream *ss, *rs;
	/* the sender closes after one message: the first receive gets it, the second fails */
	if (!pair_up(k, &tx, &rx, &ss, &rs))
		return;
	uint8_t a[1000], b2[1000];
	fill_rand(a, sizeof(a), SEED + 77);
	CHECK_OK(k->o->link_send(tx, ss, a, sizeof(a)));
	double t0 = now_ms();
	k->o->link_close(tx); /* flushes the queued message first */
	double t_close = now_ms() - t0;
	CHECK_OK(k->o->link_recv(rx, rs, b2, sizeof(b2)));
	same_bytes(a, b2, sizeof(a), "the message sent before the sender closed");
	t0 = now_ms();
	int rc = k->o->link_recv(rx, rs, b2, sizeof(b2));
	double t_fail = now_ms() - t0;
	CHECK(rc == QE_ECOMM, "receiving from a closed sender: %s (%s)", qe_errname(rc), qe_last_error());
	CHECK(strstr(qe_last_error(), "closed") != NULL, "the error says the sender closed: %s", qe_last_error());
	CHECK(t_fail < 1000, "the receive failed only after %.0f ms", t_fail);
	printf("sender closed: close %.1f ms (flush), next receive failed in %.1f ms: %s\n", t_close, t_fail,
	       qe_last_error());
	k->o->link_close(rx);
	k->o->stream_destroy(rs);
	rs = NULL;
	CHECK_OK(k->o->stream_create(k->b, &rs));

	/* the receiver closes first: the sender's link fails (no SIGPIPE), and its close does not hang */
	CHECK_OK(open_pair(k->b, &tx, &rx));
	if (!tx || !rx)
		return;
	CHECK_OK(connect_pair(k, tx, rx, ss, rs));
	k->o->link_close(rx);
	uint8_t *big = calloc(1, 4u << 20);
	CHECK_OK(k->o->link_send(tx, ss, big, 4u << 20)); /* enqueued; the writer finds the peer gone */
	t0 = now_ms();
	while (k->o->link_check(tx) == 0 && now_ms() - t0 < 5000)
		sleep_ms(5);
	rc = k->o->link_check(tx);
	CHECK(rc == QE_ECOMM, "link_check after the receiver closed: %s", qe_errname(rc));
	printf("receiver closed: the sender's link failed after %.1f ms: %s\n", now_ms() - t0, qe_last_error());
	rc = k->o->link_send(tx, ss, big, 16);
	CHECK(rc == QE_ECOMM, "a send after the link failed: %s", qe_errname(rc));
	t0 = now_ms();
	k->o->link_close(tx);
	CHECK(now_ms() - t0 < 1000, "closing the failed sender took %.0f ms", now_ms() - t0);
	free(big);
	k->o->stream_destroy(ss);
	k->o->stream_destroy(rs);
}

static void case_timeout(bk *k)
{
	set_timeout("300");
	qe_link *tx, *rx;
	qe_stream *rs = NULL;
	CHECK_OK(k->o->stream_create(k->b, &rs));
	CHECK_OK(open_pair(k->b, &tx, &rx));
	set_timeout(NULL);
	if (!tx || !rx)
		return;
	uint8_t buf[8];
	double t0 = now_ms();
	int rc = k->o->link_recv(rx, rs, buf, sizeof(buf));
	double ms = now_ms() - t0;
	CHECK(rc == QE_ECOMM, "a receive from a silent sender: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "QE_COMM_TIMEOUT_MS") != NULL, "the timeout names its knob: %s", qe_last_error());
	CHECK(ms >= 250 && ms < 2000, "the 300 ms timeout took %.0f ms", ms);
	printf("timeout: a silent sender failed the receive after %.0f ms\n", ms);
	/* a receiver that stops reading: the sender's close waits for its queue only so long (here 300 ms) */
	qe_stream *ss = NULL;
	CHECK_OK(k->o->stream_create(k->b, &ss));
	uint8_t *big = calloc(1, 4u << 20);
	CHECK_OK(k->o->link_send(tx, ss, big, 4u << 20));
	t0 = now_ms();
	k->o->link_close(tx);
	ms = now_ms() - t0;
	CHECK(ms < 2000, "closing a sender whose receiver stopped reading took %.0f ms", ms);
	printf("timeout: closing a sender with 4 MiB unread took %.0f ms (bounded flush)\n", ms);
	k->o->link_close(rx);
	free(big);
	k->o->stream_destroy(ss);
	k->o->stream_destroy(rs);
}

/* A receive made 200 ms late, by another thread. */
static void *recv_late(void *arg)
{
	sleep_ms(200);
	return recv_one(arg);
}

/* The first send of a link waits for the receiver's first receive, and fails when none comes. */
static void case_first_send(bk *k)
{
	qe_link *tx, *rx;
	qe_stream *ss, *rs;
	if (!pair_open(k, &tx, &rx, &ss, &rs, 0))
		return;
	uint8_t a[64], b2[64];
	fill_rand(a, sizeof(a), SEED + 5);
	receiver r = { k->o, rx, rs, b2, sizeof(b2), 0, 0, "" };
	pthread_t t;
	pthread_create(&t, NULL, recv_late, &r);
	double t0 = now_ms();
	CHECK_OK(k->o->link_send(tx, ss, a, sizeof(a)));
	double waited = now_ms() - t0;
	pthread_join(t, NULL);
	CHECK(r.rc == 0, "the late first receive: %s", r.err);
	same_bytes(a, b2, sizeof(a), "the first message");
	CHECK(waited >= 150, "the first send returned after %.0f ms, before the receiver's first receive (200 ms)",
	      waited);
	t0 = now_ms();
	CHECK_OK(k->o->link_send(tx, ss, a, sizeof(a))); /* connected: no wait, no receiver yet */
	double second = now_ms() - t0;
	CHECK(second < 100, "the second send waited %.0f ms for its receiver", second);
	CHECK_OK(k->o->link_recv(rx, rs, b2, sizeof(b2)));
	printf("first send: waited %.0f ms for the receiver's first receive; the second took %.1f ms\n", waited,
	       second);
	pair_down(k, tx, rx, ss, rs);

	/* no receive ever: the first send fails at the deadline and says why */
	set_timeout("300");
	int ok = pair_open(k, &tx, &rx, &ss, &rs, 0);
	set_timeout(NULL);
	if (!ok)
		return;
	t0 = now_ms();
	int rc = k->o->link_send(tx, ss, a, sizeof(a));
	double ms = now_ms() - t0;
	CHECK(rc == QE_ECOMM, "a first send with no receive: %s", qe_errname(rc));
	CHECK(strstr(qe_last_error(), "made no receive") != NULL, "the error names the missing receive: %s",
	      qe_last_error());
	CHECK(ms >= 250 && ms < 2000, "the 300 ms deadline took %.0f ms", ms);
	CHECK(k->o->link_check(tx) != 0, "link_check is 0 after the first send failed");
	printf("first send: no receive -> failed after %.0f ms: %s\n", ms, qe_last_error());
	pair_down(k, tx, rx, ss, rs);

	/* a sender that closes before its first send, its receiver waiting: the receive says so */
	if (!pair_open(k, &tx, &rx, &ss, &rs, 0))
		return;
	receiver w = { k->o, rx, rs, b2, sizeof(b2), 0, 0, "" };
	pthread_create(&t, NULL, recv_one, &w);
	sleep_ms(100); /* the receive has written its connect frame, which the sender never reads */
	k->o->link_close(tx);
	pthread_join(t, NULL);
	CHECK(w.rc == QE_ECOMM && strstr(w.err, "closed"), "a receive from a sender that closed unconnected: %s (%s)",
	      qe_errname(w.rc), w.err);
	printf("first send: the sender closed before sending -> %s\n", w.err);
	k->o->link_close(rx);
	k->o->stream_destroy(ss);
	k->o->stream_destroy(rs);
}

static void case_refusals(bk *k)
{
	qe_link *tx, *rx, *l = NULL;
	qe_stream *cs = NULL, *ss = NULL;
	uint8_t buf[16] = { 0 };
	CHECK_OK(k->o->stream_create(k->b, &cs));
	CHECK_OK(k->o->stream_create(k->b, &ss));
	CHECK_OK(open_pair(k->b, &tx, &rx));
	if (!tx || !rx)
		return;
	CHECK_OK(k->o->capture_begin(cs));
	int rc = k->o->link_send(tx, cs, buf, 16);
	CHECK(rc == QE_ECAPTURE, "link_send while the stream captures: %s", qe_errname(rc));
	qe_graph *g = NULL;
	k->o->capture_end(cs, &g);
	if (g)
		k->o->graph_destroy(g);
	rc = k->o->link_send(tx, NULL, buf, 16);
	CHECK(rc == QE_EINVAL, "link_send on the default stream: %s", qe_errname(rc));
	rc = k->o->link_recv(tx, ss, buf, 16);
	CHECK(rc == QE_EINVAL, "link_recv on the sending side: %s", qe_errname(rc));
	k->o->stream_destroy(ss);
	CHECK_OK(k->o->stream_create(k->b, &ss));
	rc = k->o->link_send(rx, ss, buf, 16);
	CHECK(rc == QE_EINVAL, "link_send on the receiving side: %s", qe_errname(rc));
	CHECK_OK(k->o->link_check(tx)); /* refusals do not fail the link */
	k->o->link_close(tx);
	k->o->link_close(rx);

	unsigned char id[QE_LINK_ID_BYTES] = { 0 };
	rc = k->o->link_open(k->b, id, 0, &l);
	CHECK(rc == QE_EINVAL && !l, "link_open with a zero id: %s", qe_errname(rc));
	/* an id made in this process but already taken: the sender finds no listener */
	CHECK_OK(k->o->link_id(k->b, id));
	opener op = { .b = k->b };
	memcpy(op.id, id, sizeof(id));
	pthread_t t;
	pthread_create(&t, NULL, open_receiver, &op);
	CHECK_OK(k->o->link_open(k->b, id, 1, &tx));
	pthread_join(t, NULL);
	CHECK_OK(op.rc);
	rc = k->o->link_open(k->b, id, 1, &l);
	CHECK(rc == QE_EINVAL && !l, "a second sender open of one id: %s", qe_errname(rc));
	printf("refusals: %s\n", qe_last_error());
	k->o->link_close(tx);
	k->o->link_close(op.rx);
	/* an unused id: the backend closes its listener at teardown (no receiver can connect after that) */
	CHECK_OK(k->o->link_id(k->b, id));
	k->o->stream_destroy(cs);
	k->o->stream_destroy(ss);
}

int main(void)
{
	pthread_t wd;
	pthread_create(&wd, NULL, watchdog, NULL);
	pthread_detach(wd);
	printf("seed %u\n", SEED);
	bk k = { 0 };
	CHECK_OK(bk_open(&k));
	if (!k.o || !k.o->link_open) {
		CHECK(0, "the cpu backend has no link ops");
		return qe_test_done("test_cpu_link");
	}
	double t0 = now_ms();
	case_first_send(&k);
	case_order(&k);
	case_size_mismatch(&k);
	case_abort(&k);
	case_peer_closes(&k);
	case_timeout(&k);
	case_refusals(&k);
	bk_close(&k);
	printf("all cases in %.0f ms\n", now_ms() - t0);
	return qe_test_done("test_cpu_link");
}
