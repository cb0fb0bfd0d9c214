/*
 * test_auth.c - only the job's own ranks get in (issue 23), below the command:
 *  - the job secret: QE_JOB_SECRET, QE_JOB_SECRET_FILE, both (refused), bad
 *    files; errors never quote it; HMAC proofs depend on key, label and input;
 *    generated secrets are 64 fresh hex characters; QE_REQUIRE_SECRET;
 *  - the launcher hands its ranks a fresh secret, or the caller's own;
 *  - a local job (MASTER_ADDR 127.0.0.1, as the launcher sets) cannot be
 *    reached on a non-loopback address of this machine, and a job on such an
 *    address is not reachable on 127.0.0.1.  The address comes from
 *    getifaddrs; without one the test makes one (a dummy interface in a new
 *    network namespace, as root) and fails when it cannot;
 *  - connections that connect and say nothing do not slow the rendezvous:
 *    each rank opens several to rank 0 first, and still joins well within one
 *    connection's handshake limit (5 s).
 * The wire-level rogue (wrong secret, cpu links) is tests/cli/job_auth.sh.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include "comm_test_util.h"
#include "runtime/comm/auth.h"

static char g_ip[INET_ADDRSTRLEN];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL, "cannot write %s", path);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void test_load(void)
{
	qe_auth_key k;
	char path[] = "/tmp/qe-auth-test-XXXXXX";
	int fd = mkstemp(path), rc;
	CHECK(fd >= 0, "mkstemp");
	close(fd);
	tu_setenv("QE_JOB_SECRET", NULL);
	tu_setenv("QE_JOB_SECRET_FILE", NULL);
	CHECK_OK(qe_auth_load(&k));
	CHECK(!k.set, "no variable, yet a secret");
	tu_setenv("QE_JOB_SECRET", "hunter2-of-the-test");
	CHECK_OK(qe_auth_load(&k));
	CHECK(k.set && k.len == 19 && memcmp(k.key, "hunter2-of-the-test", 19) == 0, "QE_JOB_SECRET not loaded");
	qe_auth_key_clear(&k);
	CHECK(!k.set && k.len == 0 && k.key[0] == 0, "clear left the key");
	tu_setenv("QE_JOB_SECRET_FILE", path);
	rc = qe_auth_load(&k);
	CHECK(rc == QE_EINVAL && !strstr(qe_last_error(), "hunter2"), "both set -> %s: %s", qe_errname(rc),
	      qe_last_error());
	tu_setenv("QE_JOB_SECRET", NULL);
	write_file(path, "file-secret-value\n");
	CHECK_OK(qe_auth_load(&k));
	CHECK(k.set && k.len == 17 && memcmp(k.key, "file-secret-value", 17) == 0, "file secret not loaded (len %zu)",
	      k.len);
	write_file(path, "\n");
	rc = qe_auth_load(&k);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "empty"), "empty file -> %s: %s", qe_errname(rc), qe_last_error());
	unlink(path);
	rc = qe_auth_load(&k);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), path), "missing file -> %s: %s", qe_errname(rc), qe_last_error());
	tu_setenv("QE_JOB_SECRET_FILE", NULL);
	tu_setenv("QE_JOB_SECRET", "");
	CHECK(qe_auth_load(&k) == QE_EINVAL, "empty QE_JOB_SECRET accepted");
	tu_setenv("QE_JOB_SECRET", NULL);
}

static void test_mac(void)
{
	qe_auth_key a = { .set = 1, .len = 3 }, b = { .set = 1, .len = 3 }, none = { 0 };
	unsigned char m1[QE_AUTH_MAC_BYTES], m2[QE_AUTH_MAC_BYTES], m3[QE_AUTH_MAC_BYTES], m4[QE_AUTH_MAC_BYTES];
	unsigned char m5[QE_AUTH_MAC_BYTES];
	char h1[QE_AUTH_GENERATED_CHARS + 1], h2[QE_AUTH_GENERATED_CHARS + 1];
	memcpy(a.key, "abc", 3);
	memcpy(b.key, "abd", 3);
	CHECK_OK(qe_auth_mac(&a, "x", "ctx", 3, m1));
	CHECK_OK(qe_auth_mac(&a, "x", "ctx", 3, m2));
	CHECK_OK(qe_auth_mac(&b, "x", "ctx", 3, m3));
	CHECK_OK(qe_auth_mac(&a, "y", "ctx", 3, m4));
	CHECK_OK(qe_auth_mac(&none, "x", "ctx", 3, m5));
	CHECK(qe_auth_equal(m1, m2), "the same proof twice differs");
	CHECK(!qe_auth_equal(m1, m3) && !qe_auth_equal(m1, m4) && !qe_auth_equal(m1, m5),
	      "a proof does not depend on the key or the label");
	CHECK_OK(qe_auth_generate(h1, sizeof(h1)));
	CHECK_OK(qe_auth_generate(h2, sizeof(h2)));
	CHECK(strlen(h1) == 64 && strspn(h1, "0123456789abcdef") == 64 && strcmp(h1, h2) != 0,
	      "generated secrets '%s' '%s'", h1, h2);
	tu_setenv("QE_REQUIRE_SECRET", "1");
	CHECK(qe_auth_policy(&none, 1, 2, "x") == QE_EINVAL, "QE_REQUIRE_SECRET=1 let a job without a secret run");
	CHECK_OK(qe_auth_policy(&a, 1, 2, "x"));
	CHECK_OK(qe_auth_policy(&none, 0, 1, "x"));
	tu_setenv("QE_REQUIRE_SECRET", NULL);
	CHECK_OK(qe_auth_policy(&none, 1, 2, "x"));
}

/* ---- the launcher's secret --------------------------------------------------- */

static int secret_main(void *arg)
{
	const char *want = arg, *s = qe_launch_var("QE_JOB_SECRET");
	tu_child_begin();
	if (want)
		CHECK(s && strcmp(s, want) == 0, "rank %s: QE_JOB_SECRET is not the caller's", qe_launch_var("RANK"));
	else
		CHECK(s && strlen(s) == 64, "rank %s: no generated QE_JOB_SECRET", qe_launch_var("RANK"));
	return tu_child_end();
}

/* Each rank writes its secret to a pipe so the parent can compare launches. */
static int report_main(void *arg)
{
	const char *s = qe_launch_var("QE_JOB_SECRET");
	int fd = *(int *)arg;
	char buf[65] = { 0 };
	if (s)
		snprintf(buf, sizeof(buf), "%s", s);
	return write(fd, buf, 64) == 64 ? 0 : 1;
}

static void test_launcher_secret(void)
{
	qe_launch_result res;
	int p[2];
	char a[65] = { 0 }, b[65] = { 0 }, c[65] = { 0 };
	CHECK_OK(qe_launch_local(2, secret_main, NULL, NULL, 0, &res));
	CHECK(getenv("QE_JOB_SECRET") == NULL && qe_launch_var("QE_JOB_SECRET") == NULL, "the launcher changed its own variables");
	tu_setenv("QE_JOB_SECRET", "the-callers-own");
	CHECK_OK(qe_launch_local(2, secret_main, "the-callers-own", NULL, 0, &res));
	tu_setenv("QE_JOB_SECRET", NULL);
	CHECK(pipe(p) == 0, "pipe");
	CHECK_OK(qe_launch_local(2, report_main, &p[1], NULL, 0, &res));
	CHECK_OK(qe_launch_local(1, report_main, &p[1], NULL, 0, &res));
	CHECK(read(p[0], a, 64) == 64 && read(p[0], b, 64) == 64 && read(p[0], c, 64) == 64, "reading the secrets");
	CHECK(strcmp(a, b) == 0, "two ranks of one launch got different secrets");
	CHECK(strcmp(a, c) != 0, "two launches got the same secret");
	close(p[0]);
	close(p[1]);
}

/* ---- listening where the job is ------------------------------------------- */

/* A non-loopback IPv4 address of this machine, made in a fresh network namespace if there is none. */
static int find_address(void)
{
	struct ifaddrs *ifa, *i;
	if (getifaddrs(&ifa) == 0) {
		for (i = ifa; i; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
			    !(i->ifa_flags & IFF_LOOPBACK)) {
				inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, g_ip, sizeof(g_ip));
				break;
			}
		freeifaddrs(ifa);
	}
	if (g_ip[0]) {
		printf("non-loopback address of this machine: %s\n", g_ip);
		return 0;
	}
	if (unshare(CLONE_NEWNET) != 0) {
		printf("no non-loopback address, and no new network namespace: %s\n", strerror(errno));
		return -1;
	}
	/* A dummy interface; where the kernel has none, the same address on lo (still not a loopback address). */
	if (system("ip link set lo up && { { ip link add qe-auth0 type dummy && ip addr add 10.231.0.1/24 dev qe-auth0 && "
		   "ip link set qe-auth0 up; } 2>/dev/null || ip addr add 10.231.0.1/32 dev lo; }") != 0) {
		printf("no non-loopback address, and 'ip' could not make one in a new network namespace\n");
		return -1;
	}
	snprintf(g_ip, sizeof(g_ip), "10.231.0.1");
	printf("made a non-loopback address in a new network namespace: %s\n", g_ip);
	return 0;
}

/* 0 connected, else errno. */
static int try_connect(const char *ip, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), e = 0;
	inet_pton(AF_INET, ip, &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		e = errno;
	close(fd);
	return e;
}

/* Rank 1: once rank 0 listens on `reachable`, `hidden` must refuse; then join normally. */
static int probe_main(void *arg)
{
	const char **addrs = arg; /* reachable, hidden */
	int port = atoi(qe_launch_var("MASTER_PORT")), rank = atoi(qe_launch_var("RANK")), e = -1;
	qe_comm *c;
	tu_child_begin();
	if (rank == 1) {
		int64_t until = tu_now_ms() + 10000;
		while ((e = try_connect(addrs[0], port)) != 0 && tu_now_ms() < until)
			tu_sleep_ms(10);
		CHECK(e == 0, "rank 0 never listened on %s:%d: %s", addrs[0], port, strerror(e));
		e = try_connect(addrs[1], port);
		CHECK(e != 0, "rank 0 of a job on %s is reachable on %s:%d", addrs[0], addrs[1], port);
		printf("rank 0 listens on %s:%d; %s:%d: %s\n", addrs[0], port, addrs[1], port, e ? strerror(e) : "open");
	}
	c = tu_open(TU_OP_MS);
	if (c) {
		CHECK_OK(qe_comm_barrier(c));
		qe_comm_close(c);
	}
	return tu_child_end();
}

static void test_listen(void)
{
	qe_launch_result res;
	const char *local[2] = { "127.0.0.1", g_ip }, *remote[2] = { g_ip, "127.0.0.1" };
	/* the launcher's own job: MASTER_ADDR 127.0.0.1 */
	CHECK_OK(qe_launch_local(2, probe_main, local, NULL, 0, &res));
	/* a job on another address listens there only */
	CHECK_OK(qe_launch_local(2, probe_main, remote, g_ip, 0, &res));
	/* QE_LISTEN_ADDR names the address */
	tu_setenv("QE_LISTEN_ADDR", g_ip);
	tu_setenv("QE_JOB_SECRET", "listen-test");
	CHECK_OK(qe_launch_local(2, probe_main, remote, g_ip, 0, &res));
	tu_setenv("QE_LISTEN_ADDR", NULL);
	tu_setenv("QE_JOB_SECRET", NULL);
}

/* ---- silent connections cost nothing ---------------------------------------- */

#define SILENT 4

static int silent_main(void *arg)
{
	int port = atoi(qe_launch_var("MASTER_PORT")), rank = atoi(qe_launch_var("RANK")), fds[SILENT], n = 0;
	int64_t t0, took;
	qe_comm *c;
	tu_child_begin();
	if (rank > 0) {
		int64_t until = tu_now_ms() + 10000;
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		while (n < SILENT && tu_now_ms() < until) {
			fds[n] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (connect(fds[n], (struct sockaddr *)&sa, sizeof(sa)) == 0) {
				n++;
			} else {
				close(fds[n]);
				tu_sleep_ms(10);
			}
		}
		CHECK(n == SILENT, "rank %d: only %d silent connections to rank 0", rank, n);
	}
	t0 = tu_now_ms();
	c = tu_open(TU_OP_MS);
	took = tu_now_ms() - t0;
	if (rank > 0) {
		printf("rank %d joined in %lld ms with %d silent connections held open to rank 0\n", rank, (long long)took, n);
		CHECK(took < 3000, "rank %d: the rendezvous took %lld ms behind %d silent connections", rank, (long long)took,
		      n);
	}
	if (c) {
		CHECK_OK(qe_comm_barrier(c));
		qe_comm_close(c);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return tu_child_end();
}

static void test_silent(void)
{
	qe_launch_result res;
	CHECK_OK(qe_launch_local(3, silent_main, NULL, NULL, 0, &res));
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	test_load();
	test_mac();
	test_launcher_secret();
	CHECK(find_address() == 0, "no non-loopback address to check that a local job is not reachable there");
	if (g_ip[0])
		test_listen();
	test_silent();
	return qe_test_done("comm_test_auth");
}
