/*
 * test_remote_fake.c - the S3 client against a scripted local HTTP server,
 * which needs nothing installed and lets us check what a real server would
 * and s3rver does not: every request's AWS Signature V4 recomputed by the
 * published algorithm (canonical request, string to sign, derived key), the
 * x-amz-content-sha256 header against the body, the session token being
 * signed; plus the behaviour on scripted failures: retries with backoff on
 * 5xx, throttling, dropped and stalled connections, bounded attempts, no
 * retry on 4xx, error texts (unknown key id, missing key / bucket), listing
 * with continuation tokens, multipart completion failing inside an HTTP 200
 * (the upload is aborted), and a connection refused.  Answers that are
 * not what they claim (issue 15): a listing answered with an HTML page, an
 * empty or cut body, no IsTruncated, a bad Size, another prefix; a
 * multipart start or completion that is not its document; an HTML error
 * page - each an error naming the request, never an empty result.  And the
 * two time limits: the low-speed window and the deadline.
 */
#include "remote_testutil.h"

#include "runtime/core/log.h"
#include "runtime/core/status.h"
#include "testlib.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static void check_all_signed(fake_server *s, const char *what)
{
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nreq; i++) {
		fs_req *q = &s->req[i];
		CHECK(q->sig_ok, "%s: request %d (%s %s?%s): signature: %s", what, i, q->method, q->path, q->query, q->why);
		CHECK(q->hash_ok, "%s: request %d (%s %s): x-amz-content-sha256 is not the body's hash", what, i, q->method,
		      q->path);
		CHECK(q->x_amz_signed, "%s: request %d: %s", what, i, q->why);
	}
	pthread_mutex_unlock(&s->mu);
}

static store_remote *open_fake(fake_server *s, const char *url, const char *token, int retries)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", s->port);
	store_remote_opts o = { 0 };
	o.endpoint = ep;
	o.region = "eu-west-3";
	o.access_key = "AKIDEXAMPLE";
	o.secret_key = SECRET;
	o.session_token = token;
	o.retries = retries;
	o.backoff_ms = 10;
	o.stall_timeout_s = 1;
	o.connect_timeout_s = 2;
	o.multipart_bytes = STORE_REMOTE_MIN_PART;
	o.part_bytes = STORE_REMOTE_MIN_PART;
	store_remote *r = NULL;
	CHECK_OK(store_remote_open(url, &o, &r));
	return r;
}

typedef struct list_acc {
	int n;
	char keys[8][64];
	uint64_t sizes[8];
} list_acc;

static int on_key(void *ctx, const char *key, uint64_t size)
{
	list_acc *a = ctx;
	if (a->n < 8) {
		snprintf(a->keys[a->n], sizeof(a->keys[0]), "%s", key);
		a->sizes[a->n] = size;
	}
	a->n++;
	return 0;
}

static int count_method(fake_server *s, const char *m)
{
	int n = 0;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nreq; i++)
		n += strcmp(s->req[i].method, m) == 0;
	pthread_mutex_unlock(&s->mu);
	return n;
}

int main(void)
{
	qe_log_set_level(QE_LOG_ERROR);
	static fake_server s; /* large: keep it off the stack */
	if (fs_start(&s, SECRET)) {
		fprintf(stderr, "cannot start the fake server\n");
		return 1;
	}
	printf("fake server on port %d\n", s.port);

	/* URL parsing. */
	char b[64], p[256];
	CHECK_OK(store_remote_parse_url("s3://my-bucket/a/b/", b, sizeof(b), p, sizeof(p)));
	CHECK(strcmp(b, "my-bucket") == 0 && strcmp(p, "a/b") == 0, "parse: '%s' '%s'", b, p);
	CHECK_OK(store_remote_parse_url("s3://my-bucket", b, sizeof(b), p, sizeof(p)));
	CHECK(p[0] == 0, "parse: empty prefix, got '%s'", p);
	CHECK(store_remote_parse_url("http://x/y", b, sizeof(b), p, sizeof(p)) == QE_EINVAL, "http:// accepted");
	CHECK(store_remote_parse_url("s3://UPPER/x", b, sizeof(b), p, sizeof(p)) == QE_EINVAL, "bad bucket accepted");
	CHECK(store_remote_parse_url("s3://ab", b, sizeof(b), p, sizeof(p)) == QE_EINVAL, "short bucket accepted");
	/* "." and ".." parts and empty parts would move the objects under another prefix (curl folds them) */
	static const char *const bad_prefix[] = { "s3://my-bucket/a/../b", "s3://my-bucket/./a", "s3://my-bucket/a/.",
						  "s3://my-bucket/..",     "s3://my-bucket/a//b" };
	for (size_t i = 0; i < sizeof(bad_prefix) / sizeof(bad_prefix[0]); i++)
		CHECK(store_remote_parse_url(bad_prefix[i], b, sizeof(b), p, sizeof(p)) == QE_EINVAL, "'%s' accepted",
		      bad_prefix[i]);
	CHECK_OK(store_remote_parse_url("s3://my-bucket/a.b/..c/d..", b, sizeof(b), p, sizeof(p)));
	CHECK(strcmp(p, "a.b/..c/d..") == 0, "parse: dotted names '%s'", p);

	/* Missing credentials are refused before any request. */
	{
		unsetenv("AWS_ACCESS_KEY_ID");
		unsetenv("AWS_SECRET_ACCESS_KEY");
		store_remote *r = NULL;
		store_remote_opts o = { 0 };
		o.retries = -1;
		o.endpoint = "http://127.0.0.1:1";
		int rc = store_remote_open("s3://bkt/x", &o, &r);
		CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "AWS_ACCESS_KEY_ID"), "no credentials: %s: %s",
		      qe_errname(rc), qe_last_error());
		CHECK(r == NULL, "handle returned on failure");
	}

	/* 1. Put: signed, hashed, with the session token signed too; 503 and 500 are retried. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/run one/x", "TOKEN/with+odd=chars", 3);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 503, NULL, "<Error><Code>SlowDown</Code><Message>slow</Message></Error>");
		fs_push(&s, FS_ANSWER, 500, NULL, "<Error><Code>InternalError</Code><Message>oops</Message></Error>");
		fs_push(&s, FS_ANSWER, 200, "ETag: \"982017f2313a26a953160e107a099d18\"\r\n", NULL); /* its MD5 */
		const char payload[] = "hello, object storage";
		CHECK_OK(store_remote_put(r, "chunks/a b+c", payload, sizeof(payload) - 1));
		store_remote_stats st;
		store_remote_get_stats(r, &st);
		CHECK(st.retries == 2 && st.requests == 3, "put: %llu retries, %llu requests (want 2, 3)",
		      (unsigned long long)st.retries, (unsigned long long)st.requests);
		CHECK(s.nreq == 3, "server saw %d requests", s.nreq);
		CHECK(strcmp(s.req[0].path, "/bkt/run%20one/x/chunks/a%20b%2Bc") == 0, "path sent: %s", s.req[0].path);
		char tok[128];
		fs_header(s.req[0].headers, "x-amz-security-token", tok, sizeof(tok));
		CHECK(strcmp(tok, "TOKEN/with+odd=chars") == 0, "session token header: '%s'", tok);
		check_all_signed(&s, "put");
		store_remote_close(r);
	}

	/* 1b. A 200 without the MD5 of the bytes as its ETag (a stub that stores nothing) is not believed. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/x", NULL, 1);
		static const char *const answers[] = { NULL, "ETag: \"abc\"\r\n",
						       "ETag: \"0cc175b9c0f1b6a831c399e269772661\"\r\n" /* MD5 of "a" */ };
		for (int i = 0; i < 3; i++) {
			fs_reset(&s);
			fs_push(&s, FS_ANSWER, 200, answers[i], "<Result>fine</Result>");
			int rc = store_remote_put(r, "chunks/k", "x", 1);
			CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "is not the MD5 9dd4e461268c8034f5c8564e155c67a6") &&
				      strstr(qe_last_error(), "s3://bkt/x/chunks/k"),
			      "put answered 200 with ETag %d: %s: %s", i, qe_errname(rc), qe_last_error());
		}
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"9DD4E461268C8034F5C8564E155C67A6\"\r\n", NULL);
		CHECK_OK(store_remote_put(r, "chunks/k", "x", 1));
		store_remote_close(r);
	}

	/* 2. Bounded retries: a server that keeps failing is given up on with a clear message. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/x", NULL, 2);
		fs_reset(&s);
		for (int i = 0; i < 3; i++)
			fs_push(&s, FS_ANSWER, 500, NULL, "<Error><Code>InternalError</Code><Message>disk on fire</Message></Error>");
		int rc = store_remote_put(r, "k", "x", 1);
		CHECK(rc == QE_ESTORE, "persistent 500: %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "HTTP 500") && strstr(qe_last_error(), "InternalError") &&
			      strstr(qe_last_error(), "disk on fire") && strstr(qe_last_error(), "s3://bkt/x/k") &&
			      strstr(qe_last_error(), "after 3 attempts"),
		      "500 message: %s", qe_last_error());
		CHECK(s.nreq == 3, "persistent 500: %d requests, want 3", s.nreq);
		store_remote_close(r);
	}

	/* 3. 4xx is not retried; an unknown key id names the key. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/x", NULL, 3);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 403, NULL,
			"<?xml version=\"1.0\"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you "
			"provided does not exist in our records.</Message></Error>");
		int rc = store_remote_put(r, "k", "x", 1);
		CHECK(rc == QE_ESTORE, "403: %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "access denied for key id 'AKIDEXAMPLE' (InvalidAccessKeyId)") != NULL,
		      "403 message: %s", qe_last_error());
		CHECK(s.nreq == 1, "403 retried: %d requests", s.nreq);

		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 404, NULL, "<Error><Code>NoSuchKey</Code><Message>nope</Message></Error>");
		void *data = NULL;
		size_t size = 7;
		rc = store_remote_get(r, "missing", 0, &data, &size);
		CHECK(rc == QE_ENOTFOUND && data == NULL && size == 0, "get 404: %s", qe_errname(rc));
		CHECK(strstr(qe_last_error(), "s3://bkt/x/missing") && strstr(qe_last_error(), "NoSuchKey"),
		      "404 message: %s", qe_last_error());

		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 404, NULL, "<Error><Code>NoSuchBucket</Code><Message>no</Message></Error>");
		rc = store_remote_check(r);
		CHECK(rc == QE_ENOTFOUND && strstr(qe_last_error(), "bucket 'bkt' does not exist"), "no bucket: %s: %s",
		      qe_errname(rc), qe_last_error());

		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 404, NULL, NULL);
		int exists = 1;
		uint64_t sz = 9;
		CHECK_OK(store_remote_head(r, "missing", &exists, &sz));
		CHECK(exists == 0 && sz == 0, "head 404: exists %d", exists);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, "Content-Length: 1234\r\n", NULL);
		CHECK_OK(store_remote_head(r, "there", &exists, &sz));
		CHECK(exists == 1, "head 200: exists %d", exists);
		check_all_signed(&s, "head");
		store_remote_close(r);
	}

	/* 4. Dropped and stalled connections are retried; the stall time-out fires. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/x", NULL, 2);
		fs_reset(&s);
		fs_push(&s, FS_CLOSE, 0, NULL, NULL);
		fs_push(&s, FS_HANG, 0, NULL, NULL);
		fs_push(&s, FS_ANSWER, 200, NULL, "payload!");
		void *data = NULL;
		size_t size = 0;
		double t0 = tu_now_s();
		CHECK_OK(store_remote_get(r, "obj", 0, &data, &size));
		double dt = tu_now_s() - t0;
		CHECK(size == 8 && data && memcmp(data, "payload!", 8) == 0, "get after retries: %zu bytes", size);
		CHECK(dt < 10, "stall detection took %.1f s", dt);
		free(data);
		/* A body larger than the caller accepts is refused. */
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "0123456789");
		int rc = store_remote_get(r, "obj", 4, &data, &size);
		CHECK(rc == QE_ECORRUPT, "oversized body: %s", qe_errname(rc));
		store_remote_close(r);
	}

	/* 5. Listing follows continuation tokens (with characters that need encoding). */
	{
		store_remote *r = open_fake(&s, "s3://bkt/pre", NULL, 0);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL,
			"<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>pre/chunks/a</Key><Size>3</Size>"
			"</Contents><Contents><Key>pre/chunks/b&amp;c</Key><Size>4</Size></Contents>"
			"<NextContinuationToken>tok+/=1</NextContinuationToken></ListBucketResult>");
		fs_push(&s, FS_ANSWER, 200, NULL,
			"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>pre/chunks/d</Key><Size>5</Size>"
			"</Contents></ListBucketResult>");
		list_acc acc = { 0 };
		CHECK_OK(store_remote_list(r, "chunks/", on_key, &acc));
		CHECK(acc.n == 3, "listed %d keys", acc.n);
		CHECK(strcmp(acc.keys[0], "chunks/a") == 0 && strcmp(acc.keys[1], "chunks/b&c") == 0 &&
			      strcmp(acc.keys[2], "chunks/d") == 0 && acc.sizes[2] == 5,
		      "keys %s %s %s", acc.keys[0], acc.keys[1], acc.keys[2]);
		CHECK(s.nreq == 2 && strstr(s.req[1].query, "continuation-token=tok%2B%2F%3D1"), "second query: %s",
		      s.req[1].query);
		check_all_signed(&s, "list");
		store_remote_close(r);
	}

	/* 5b. A listing counts only as a complete ListBucketResult: everything else names the request. */
	{
		static const struct {
			const char *body;
			const char *why;
		} bad[] = {
			{ "<!DOCTYPE html><html><body>Sign in to continue</body></html>", "not a ListBucketResult (HTML page?)" },
			{ "", "answer is empty" },
			{ "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>pre/chunks/a</Key><Si",
			  "answer is truncated" },
			{ "<ListBucketResult><Contents><Key>pre/chunks/a</Key><Size>3</Size></Contents></ListBucketResult>",
			  "no <IsTruncated>" },
			{ "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>", "not true or false" },
			{ "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>pre/chunks/a</Key><Size>3x</Size>"
			  "</Contents></ListBucketResult>",
			  "no readable Key or Size" },
			{ "<ListBucketResult><Prefix>other/</Prefix><IsTruncated>false</IsTruncated></ListBucketResult>",
			  "for prefix 'other/'" },
			{ "<ListBucketResult><Name>nope</Name><IsTruncated>false</IsTruncated></ListBucketResult>",
			  "lists bucket 'nope'" },
			{ "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>pre/chunks/a</Key><Size>3</Size>"
			  "</Contents></ListBucketResult>",
			  "without a usable continuation token" },
			{ "<Error><Code>AccessDenied</Code><Message>in a 200</Message></Error>", "HTTP 200 with an error: AccessDenied" },
		};
		store_remote *r = open_fake(&s, "s3://bkt/pre", NULL, 0);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			fs_reset(&s);
			fs_push(&s, FS_ANSWER, 200, NULL, bad[i].body);
			list_acc acc = { 0 };
			int rc = store_remote_list(r, "chunks/", on_key, &acc);
			CHECK(rc == QE_ESTORE && strstr(qe_last_error(), bad[i].why) &&
				      strstr(qe_last_error(), "GET s3://bkt/pre/chunks/?list-type=2"),
			      "bad listing %zu: %s: %s", i, qe_errname(rc), qe_last_error());
			CHECK(i == 8 || acc.n == 0, "bad listing %zu: %d keys handed out", i, acc.n);
		}
		/* The bucket check reads its one-key listing the same way. */
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<html><body>captive portal</body></html>");
		int rc = store_remote_check(r);
		CHECK(rc == QE_ESTORE &&  
			      strstr(qe_last_error(), "GET s3://bkt/pre/?list-type=2") && strstr(qe_last_error(), "HTML page?"),
		      "check on an HTML answer: %s: %s", qe_errname(rc), qe_last_error());
		/* An error page that is not S3's: no Code read out of it, still retried as a 5xx, and said so. */
		store_remote_close(r);
		r = open_fake(&s, "s3://bkt/pre", NULL, 1);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 503, NULL, "<html><body><Code>NoSuchBucket</Code></body></html>");
		fs_push(&s, FS_ANSWER, 503, NULL, "<html><body><Code>NoSuchBucket</Code></body></html>");
		void *data = NULL;
		size_t size = 0;
		rc = store_remote_get(r, "obj", 0, &data, &size);
		CHECK(rc == QE_ESTORE && s.nreq == 2 && strstr(qe_last_error(), "not an S3 error document") &&
			      strstr(qe_last_error(), "HTTP 503"),
		      "HTML error page: %s after %d requests: %s", qe_errname(rc), s.nreq, qe_last_error());
		store_remote_close(r);
	}

	/* 4b. The deadline: a server that answers nothing within floor + bytes / rate fails, and says so. */
	{
		char ep[64];
		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", s.port);
		store_remote_opts o = { 0 };
		o.endpoint = ep;
		o.access_key = "AKIDEXAMPLE";
		o.secret_key = SECRET;
		o.retries = 0;
		o.stall_timeout_s = 30; /* the low-speed window stays out of the way */
		o.low_speed_bps = 1;
		o.timeout_s = 1;
		o.min_rate_bps = 1 << 20;
		store_remote *r = NULL;
		CHECK_OK(store_remote_open("s3://bkt/x", &o, &r));
		fs_reset(&s);
		fs_push(&s, FS_HANG, 0, NULL, NULL);
		void *data = NULL;
		size_t size = 0;
		double t0 = tu_now_s();
		int rc = store_remote_get(r, "slow", 0, &data, &size);
		double dt = tu_now_s() - t0;
		CHECK(rc == QE_EIO && strstr(qe_last_error(), "GET s3://bkt/x/slow") &&
			      strstr(qe_last_error(), "over its deadline of 1 s"),
		      "deadline: %s: %s", qe_errname(rc), qe_last_error());
		CHECK(dt < 1.45, "the 1 s deadline fired after %.2f s (the server hangs 1.5 s)", dt);
		store_remote_close(r);
		/* And the low-speed window: slower than 65536 B/s for 1 s. */
		o.stall_timeout_s = 1;
		o.low_speed_bps = 65536;
		o.timeout_s = 60;
		CHECK_OK(store_remote_open("s3://bkt/x", &o, &r));
		fs_reset(&s);
		fs_push(&s, FS_HANG, 0, NULL, NULL);
		rc = store_remote_get(r, "slow", 0, &data, &size);
		CHECK(rc == QE_EIO && strstr(qe_last_error(), "GET s3://bkt/x/slow") &&
			      strstr(qe_last_error(), "slower than 65536 B/s for 1 s"),
		      "low speed: %s: %s", qe_errname(rc), qe_last_error());
		store_remote_close(r);
	}

	/* 6. Multipart: parts, ETags in the completion, and a completion that fails inside HTTP 200 aborts. */
	{
		store_remote *r = open_fake(&s, "s3://bkt/x", NULL, 0);
		size_t n = 2 * STORE_REMOTE_MIN_PART + 17;
		unsigned char *big = malloc(n);
		for (size_t i = 0; i < n; i++)
			big[i] = (unsigned char)(i * 2654435761u >> 13);
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<InitiateMultipartUploadResult><UploadId>up/1+x</UploadId></InitiateMultipartUploadResult>");
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e1\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e2\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e3\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, NULL, "<CompleteMultipartUploadResult><Key>x/big</Key></CompleteMultipartUploadResult>");
		CHECK_OK(store_remote_put(r, "big", big, n));
		CHECK(s.nreq == 5, "multipart: %d requests, want 5", s.nreq);
		CHECK(strcmp(s.req[0].query, "uploads=") == 0, "create query: %s", s.req[0].query);
		CHECK(strcmp(s.req[2].query, "partNumber=2&uploadId=up%2F1%2Bx") == 0, "part query: %s", s.req[2].query);
		CHECK(s.req[1].body_len == STORE_REMOTE_MIN_PART && s.req[3].body_len == 17, "part sizes %zu, %zu",
		      s.req[1].body_len, s.req[3].body_len);
		check_all_signed(&s, "multipart");
		store_remote_stats st;
		store_remote_get_stats(r, &st);
		CHECK(st.multipart == 1 && st.parts == 3 && st.aborts == 0, "stats: %llu multipart, %llu parts",
		      (unsigned long long)st.multipart, (unsigned long long)st.parts);

		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<InitiateMultipartUploadResult><UploadId>U2</UploadId></InitiateMultipartUploadResult>");
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e1\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e2\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e3\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, NULL, "<Error><Code>InternalError</Code><Message>late failure</Message></Error>");
		fs_push(&s, FS_ANSWER, 204, NULL, NULL);
		int rc = store_remote_put(r, "big", big, n);
		CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "late failure"), "late completion failure: %s: %s",
		      qe_errname(rc), qe_last_error());
		CHECK(s.nreq == 6 && strcmp(s.req[5].method, "DELETE") == 0 && strcmp(s.req[5].query, "uploadId=U2") == 0,
		      "abort not sent: %d requests", s.nreq);

		/* A part that fails aborts too, and the abort failing keeps the part's error. */
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<InitiateMultipartUploadResult><UploadId>U3</UploadId></InitiateMultipartUploadResult>");
		fs_push(&s, FS_ANSWER, 400, NULL, "<Error><Code>EntityTooSmall</Code><Message>small</Message></Error>");
		fs_push(&s, FS_ANSWER, 405, NULL, "<Error><Code>MethodNotAllowed</Code><Message>no abort</Message></Error>");
		rc = store_remote_put(r, "big", big, n);
		CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "EntityTooSmall") && strstr(qe_last_error(), "part 1 of 3"),
		      "part failure: %s: %s", qe_errname(rc), qe_last_error());
		CHECK(count_method(&s, "DELETE") == 1, "abort after a failed part");

		/* A start that is not an InitiateMultipartUploadResult sends no part. */
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<html><body>ok</body></html>");
		rc = store_remote_put(r, "big", big, n);
		CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "POST s3://bkt/x/big?uploads=") &&
			      strstr(qe_last_error(), "not an InitiateMultipartUploadResult (HTML page?)") && s.nreq == 1,
		      "HTML start: %s after %d requests: %s", qe_errname(rc), s.nreq, qe_last_error());
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<InitiateMultipartUploadResult><Bucket>bkt</Bucket></InitiateMultipartUploadResult>");
		rc = store_remote_put(r, "big", big, n);
		CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "has no UploadId") && s.nreq == 1,
		      "start without UploadId: %s after %d requests: %s", qe_errname(rc), s.nreq, qe_last_error());
		/* A completion cut short is a failure, and the upload is aborted. */
		fs_reset(&s);
		fs_push(&s, FS_ANSWER, 200, NULL, "<InitiateMultipartUploadResult><UploadId>U4</UploadId></InitiateMultipartUploadResult>");
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e1\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e2\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, "ETag: \"e3\"\r\n", NULL);
		fs_push(&s, FS_ANSWER, 200, NULL, "<CompleteMultipartUploadResult><Key>x/big</Ke");
		fs_push(&s, FS_ANSWER, 204, NULL, NULL);
		rc = store_remote_put(r, "big", big, n);
		CHECK(rc == QE_ESTORE && strstr(qe_last_error(), "answer is truncated") &&
			      strstr(qe_last_error(), "POST s3://bkt/x/big?uploadId=U4"),
		      "cut completion: %s: %s", qe_errname(rc), qe_last_error());
		CHECK(s.nreq == 6 && strcmp(s.req[5].method, "DELETE") == 0, "cut completion: no abort (%d requests)", s.nreq);
		free(big);
		store_remote_close(r);
	}

	/* 7. Nothing listening: connection refused, bounded attempts, QE_EIO. */
	{
		store_remote_opts o = { 0 };
		o.endpoint = "http://127.0.0.1:9"; /* discard port: nothing listens on loopback */
		o.access_key = "A";
		o.secret_key = "B";
		o.retries = 2;
		o.backoff_ms = 5;
		store_remote *r = NULL;
		CHECK_OK(store_remote_open("s3://bkt/x", &o, &r));
		double t0 = tu_now_s();
		int rc = store_remote_put(r, "k", "x", 1);
		double dt = tu_now_s() - t0;
		CHECK(rc == QE_EIO && strstr(qe_last_error(), "after 3 attempts"), "refused: %s: %s", qe_errname(rc),
		      qe_last_error());
		CHECK(dt < 5, "refused connection took %.1f s", dt);
		store_remote_close(r);
	}

	fs_stop(&s);
	return qe_test_done("store_remote_fake");
}
