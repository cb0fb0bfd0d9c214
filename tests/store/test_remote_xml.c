/*
 * test_remote_xml.c - the strict reading of S3's XML answers
 * (store/remote_xml.c), as a table: documents that must pass as the root
 * asked for, and bodies that must not - HTML pages, empty and cut-short
 * bodies, mismatched or unclosed tags, a bare '&', data after the root, the
 * wrong root - each with the phrase its reason must hold, since that phrase
 * is what a user reads when gc or pull stops.  Then the element lookups on a
 * checked document: entities decoded, markup inside an element refused.
 */
#include <string.h>

#include "runtime/core/status.h"
#include "store/remote_int.h"
#include "testlib.h"

typedef struct xml_case {
	const char *root;
	const char *body;
	const char *why; /* NULL: must pass; else a phrase of the reason */
} xml_case;

static const xml_case cases[] = {
	/* what S3 and s3rver send */
	{ "ListBucketResult",
	  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	  "<Name>b</Name><Prefix>p/</Prefix><KeyCount>1</KeyCount><IsTruncated>false</IsTruncated>"
	  "<Contents><Key>p/a&amp;b</Key><ETag>&quot;x&quot;</ETag><Size>3</Size></Contents></ListBucketResult>",
	  NULL },
	{ "ListBucketResult", "<ListBucketResult><Prefix/><IsTruncated>false</IsTruncated></ListBucketResult>\n", NULL },
	{ "ListBucketResult", "\xef\xbb\xbf<!-- c --><ListBucketResult a='1' b = \"2\"/> <?pi x?>", NULL },
	{ "Error", "<Error><Code>SlowDown</Code><Message>a &#x3c; b &#60; c</Message></Error>", NULL },
	{ "InitiateMultipartUploadResult",
	  "<InitiateMultipartUploadResult><UploadId><![CDATA[u<1>]]></UploadId></InitiateMultipartUploadResult>", NULL },
	/* what a proxy, a portal or a cut connection sends */
	{ "ListBucketResult", "", "answer is empty" },
	{ "ListBucketResult", "  \r\n ", "no element after its prolog" },
	{ "ListBucketResult", "<!DOCTYPE html><html><body>sign in</body></html>", "not a ListBucketResult (HTML page?)" },
	{ "ListBucketResult", "<HTML><BODY>502</BODY></HTML>", "(HTML page?)" },
	{ "ListBucketResult", "<?xml version=\"1.0\"?><html/>", "(HTML page?)" },
	{ "ListBucketResult", "Bad Gateway", "not XML: it starts 'Bad Gateway'" },
	{ "ListBucketResult", "{\"error\": 1}", "not XML" },
	{ "ListBucketResult", "<Error><Code>x</Code></Error>", "its root element is <Error>" },
	{ "ListBucketResult", "<ListBucketResultX/>", "its root element is <ListBucketResultX>" },
	{ "ListBucketResult", "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Ke",
	  "answer is truncated" },
	{ "ListBucketResult", "<ListBucketResult><IsTruncated>false</IsTruncated>", "<ListBucketResult> is not closed" },
	{ "ListBucketResult", "<ListBucketResult><Contents><Key>a</Key></Contents>", "is not closed" },
	{ "ListBucketResult", "<ListBucketResult><Key>a</Size></ListBucketResult>", "</Size> closes <Key>" },
	{ "ListBucketResult", "<ListBucketResult><Key>a & b</Key></ListBucketResult>", "bare '&'" },
	{ "ListBucketResult", "<ListBucketResult><Key>a &nbsp; b</Key></ListBucketResult>", "unknown entity" },
	{ "ListBucketResult", "<ListBucketResult><Key>a &#0; b</Key></ListBucketResult>", "bare '&'" },
	{ "ListBucketResult", "<ListBucketResult></ListBucketResult><ListBucketResult/>", "more after" },
	{ "ListBucketResult", "<ListBucketResult></ListBucketResult>trailing", "more after" },
	{ "ListBucketResult", "<ListBucketResult a=1/>", "is not quoted" },
	{ "ListBucketResult", "<ListBucketResult a=\"1\"b=\"2\"/>", "no space between attributes" },
	{ "ListBucketResult", "<ListBucketResult a=\"1", "truncated inside a tag" },
	{ "ListBucketResult", "<ListBucketResult><!-- cut", "comment is not closed" },
	{ "ListBucketResult", "<ListBucketResult>< Key/></ListBucketResult>", "bare '<'" },
};

int main(void)
{
	char why[256];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const xml_case *c = &cases[i];
		size_t n = strlen(c->body);
		int rc = remote__xml_check(c->body, n, c->root, why, sizeof(why));
		if (!c->why)
			CHECK(rc == 0, "case %zu must pass as <%s>: %s\n  body: %s", i, c->root, why, c->body);
		else
			CHECK(rc == -1 && strstr(why, c->why), "case %zu must fail with '%s', got %d '%s'\n  body: %s", i,
			      c->why, rc, why, c->body);
	}
	/* A NUL inside the body (strlen would stop before it). */
	{
		static const char nul[] = "<ListBucketResult><Key>a\0b</Key></ListBucketResult>";
		int rc = remote__xml_check(nul, sizeof(nul) - 1, "ListBucketResult", why, sizeof(why));
		CHECK(rc == -1 && strstr(why, "NUL byte"), "NUL: %d '%s'", rc, why);
	}
	/* Every cut of a good listing fails, and says it is truncated (or empty). */
	{
		const char *good = cases[0].body;
		size_t n = strlen(good);
		int bad = 0;
		for (size_t k = 0; k < n; k++) {
			int rc = remote__xml_check(good, k, "ListBucketResult", why, sizeof(why));
			if (rc == 0 || (!strstr(why, "truncated") && !strstr(why, "empty") && !strstr(why, "not closed"))) {
				if (!bad++)
					CHECK(0, "the first %zu bytes of a listing: %d '%s'", k, rc, why);
			}
		}
		CHECK(bad == 0, "%d cuts of a listing were not reported as truncated", bad);
	}
	/* Lookups on a checked document. */
	{
		const char *d = cases[0].body;
		char out[64];
		CHECK(remote__xml_text(d, strlen(d), "Key", NULL, out, sizeof(out)) == 1 && strcmp(out, "p/a&b") == 0,
		      "Key: '%s'", out);
		CHECK(remote__xml_text(d, strlen(d), "Contents", NULL, out, sizeof(out)) == -1,
		      "an element holding markup read as text");
		CHECK(remote__xml_text(d, strlen(d), "NextContinuationToken", NULL, out, sizeof(out)) == 0,
		      "an absent element found");
		const char *e = cases[3].body;
		CHECK(remote__xml_text(e, strlen(e), "Message", NULL, out, sizeof(out)) == 1 &&
			      strcmp(out, "a < b < c") == 0,
		      "character references: '%s'", out);
	}
	return qe_test_done("store_test_remote_xml");
}
