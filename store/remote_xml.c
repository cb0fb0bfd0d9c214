/*
 * remote_xml.c - reading S3's XML answers: first a strict check that a body
 * is one complete, well-formed document with the root element we expect
 * (remote__xml_check), then lookups of the few elements the client reads:
 * Code and Message of an error, UploadId of a new multipart upload, and
 * Contents / Key / Size / IsTruncated / NextContinuationToken of a listing.
 *
 * Why the check comes first: a lookup by name in whatever came back reads
 * an HTML page from a proxy, an empty body or a listing cut short as "no
 * such element", and a listing without Contents as "no objects" - which
 * remote gc once took as licence to delete every chunk.  An answer counts
 * only when the whole body parses and its root is the document S3 defines
 * for that request; anything else is an error naming the request.
 *
 * Why not a full XML library: S3 answers with small, flat, namespace-free
 * documents (at most an xmlns attribute on the root) and no DTD.  The check
 * below is the XML 1.0 well-formedness rules for that subset - one root
 * element, every tag closed by its own name in order, quoted attributes,
 * only the five predefined entities and character references, comments,
 * processing instructions and CDATA sections - and refuses anything else
 * (a DOCTYPE included: S3 never sends one, HTML pages do).  Once a document
 * has passed, the lookups by name below read it exactly; an element whose
 * content is markup rather than text is reported as unreadable (-1).
 */
#include "store/remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * Find "<tag>" or "<tag attr...>" at or after from.  Returns the index after
 * its '>' or (size_t)-1; *empty says it was a self-closing <tag/>.
 */
static size_t open_tag(const char *x, size_t n, const char *tag, size_t from, int *empty)
{
	size_t tl = strlen(tag);
	*empty = 0;
	for (size_t i = from; i + tl + 2 <= n; i++) {
		if (x[i] != '<' || strncmp(x + i + 1, tag, tl))
			continue;
		char c = x[i + 1 + tl];
		if (c != '>' && c != ' ' && c != '/')
			continue;
		const char *gt = memchr(x + i, '>', n - i);
		if (!gt)
			return (size_t)-1;
		*empty = gt[-1] == '/';
		return (size_t)(gt - x) + 1;
	}
	return (size_t)-1;
}

int remote__xml_span(const char *x, size_t n, const char *tag, size_t *pos, size_t *b, size_t *e)
{
	int empty;
	size_t o = open_tag(x, n, tag, pos ? *pos : 0, &empty);
	if (o == (size_t)-1)
		return 0;
	if (empty) {
		*b = *e = o;
		if (pos)
			*pos = o;
		return 1;
	}
	char close[80];
	int cl = snprintf(close, sizeof(close), "</%s>", tag);
	if (cl <= 0 || (size_t)cl >= sizeof(close))
		return 0;
	for (size_t i = o; i + (size_t)cl <= n; i++) {
		if (x[i] == '<' && strncmp(x + i, close, (size_t)cl) == 0) {
			*b = o;
			*e = i;
			if (pos)
				*pos = i + (size_t)cl;
			return 1;
		}
	}
	return 0;
}

/* Append the UTF-8 encoding of code point cp. */
static int put_utf8(unsigned long cp, char *out, size_t len, size_t *k)
{
	unsigned char tmp[4];
	int m;
	if (cp < 0x80) {
		tmp[0] = (unsigned char)cp;
		m = 1;
	} else if (cp < 0x800) {
		tmp[0] = (unsigned char)(0xc0 | (cp >> 6));
		tmp[1] = (unsigned char)(0x80 | (cp & 0x3f));
		m = 2;
	} else if (cp < 0x10000) {
		tmp[0] = (unsigned char)(0xe0 | (cp >> 12));
		tmp[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[2] = (unsigned char)(0x80 | (cp & 0x3f));
		m = 3;
	} else {
		tmp[0] = (unsigned char)(0xf0 | (cp >> 18));
		tmp[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		tmp[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[3] = (unsigned char)(0x80 | (cp & 0x3f));
		m = 4;
	}
	if (*k + (size_t)m >= len)
		return -1;
	memcpy(out + *k, tmp, (size_t)m);
	*k += (size_t)m;
	return 0;
}

int remote__xml_text(const char *x, size_t n, const char *tag, size_t *pos, char *out, size_t len)
{
	size_t b, e;
	if (!x || !len || !remote__xml_span(x, n, tag, pos, &b, &e))
		return 0;
	static const struct {
		const char *name;
		char c;
	} ents[] = { { "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' }, { "quot;", '"' }, { "apos;", '\'' } };
	if (memchr(x + b, '<', e - b))
		return -1; /* markup, not text (a child element, CDATA or a comment) */
	size_t k = 0;
	for (size_t i = b; i < e; i++) {
		if (x[i] == '&') {
			int done = 0;
			for (size_t j = 0; j < sizeof(ents) / sizeof(ents[0]) && !done; j++) {
				size_t el = strlen(ents[j].name);
				if (i + 1 + el <= e && strncmp(x + i + 1, ents[j].name, el) == 0) {
					if (k + 1 >= len)
						return -1;
					out[k++] = ents[j].c;
					i += el;
					done = 1;
				}
			}
			if (!done && i + 2 < e && x[i + 1] == '#') {
				char num[16];
				size_t semi = i + 2;
				while (semi < e && x[semi] != ';' && semi - i < sizeof(num))
					semi++;
				if (semi < e && x[semi] == ';') {
					size_t nl = semi - (i + 2);
					memcpy(num, x + i + 2, nl);
					num[nl] = 0;
					char *end;
					unsigned long cp = num[0] == 'x' ? strtoul(num + 1, &end, 16) : strtoul(num, &end, 10);
					if (*end == 0 && cp <= 0x10ffff) {
						if (put_utf8(cp, out, len, &k))
							return -1;
						i = semi;
						done = 1;
					}
				}
			}
			if (done)
				continue;
		}
		if (k + 1 >= len)
			return -1;
		out[k++] = x[i];
	}
	out[k] = 0;
	return 1;
}

/* ---- the strict check ---------------------------------------------------------- */

#define XML_MAX_DEPTH 32

typedef struct xml_scan {
	const char *x;
	size_t n;
	size_t i;
	char *why;
	size_t why_len;
} xml_scan;

/* "a ListBucketResult", "an InitiateMultipartUploadResult": the article goes into the %s. */
static const char *with_article(const char *root, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s", strchr("AEIOUaeiou", root[0]) && root[0] ? "an" : "a", root);
	return buf;
}

static int xfail(xml_scan *s, const char *fmt, const char *a, const char *b)
{
	snprintf(s->why, s->why_len, fmt, a, b);
	return -1;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int name_start(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':' || c >= 0x80;
}

static int name_char(unsigned char c)
{
	return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static void skip_space(xml_scan *s)
{
	while (s->i < s->n && is_space(s->x[s->i]))
		s->i++;
}

static int starts(const xml_scan *s, const char *lit)
{
	size_t l = strlen(lit);
	return s->i + l <= s->n && memcmp(s->x + s->i, lit, l) == 0;
}

/* Byte offset as text, for messages. */
static const char *at(const xml_scan *s, char *buf, size_t len)
{
	snprintf(buf, len, "byte %zu of %zu", s->i, s->n);
	return buf;
}

/* 1 when the body ends inside lit: what is left is a proper prefix of it. */
static int cut_in(const xml_scan *s, const char *lit)
{
	size_t left = s->n - s->i;
	return left < strlen(lit) && memcmp(s->x + s->i, lit, left) == 0;
}

/* Past the first occurrence of lit at or after s->i; -1 when there is none (cut short). */
static int skip_past(xml_scan *s, const char *lit, const char *what)
{
	size_t l = strlen(lit);
	for (size_t j = s->i; j + l <= s->n; j++) {
		if (memcmp(s->x + j, lit, l) == 0) {
			s->i = j + l;
			return 0;
		}
	}
	return xfail(s, "answer is truncated: a %s is not closed%s", what, "");
}

/* A Name at s->i into out (cut to len-1 bytes for messages; the full length is returned). */
static size_t read_name(xml_scan *s, char *out, size_t len)
{
	size_t b = s->i;
	if (s->i < s->n && name_start((unsigned char)s->x[s->i]))
		while (s->i < s->n && name_char((unsigned char)s->x[s->i]))
			s->i++;
	size_t l = s->i - b, c = l < len - 1 ? l : len - 1;
	memcpy(out, s->x + b, c);
	out[c] = 0;
	return l;
}

/* An entity or character reference at s->i ('&'); stops before end. */
static int check_ref(xml_scan *s, size_t end)
{
	static const char *const ents[] = { "amp;", "lt;", "gt;", "quot;", "apos;" };
	char where[64];
	size_t j = s->i + 1;
	for (size_t k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
		size_t el = strlen(ents[k]);
		if (j + el <= end && memcmp(s->x + j, ents[k], el) == 0) {
			s->i = j + el;
			return 0;
		}
	}
	if (j < end && s->x[j] == '#') {
		j++;
		int hex = j < end && s->x[j] == 'x';
		j += (size_t)hex;
		size_t d = j;
		unsigned long cp = 0;
		while (j < end && j - d < 8 &&
		       (hex ? strchr("0123456789abcdefABCDEF", s->x[j]) != NULL : (s->x[j] >= '0' && s->x[j] <= '9'))) {
			char c = s->x[j++];
			cp = cp * (hex ? 16 : 10) + (unsigned long)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
		}
		if (j > d && j < end && s->x[j] == ';' && cp > 0 && cp <= 0x10ffff) {
			s->i = j + 1;
			return 0;
		}
	}
	size_t k = s->i + 1;
	while (k < end && (name_char((unsigned char)s->x[k]) || s->x[k] == '#'))
		k++;
	if (k == s->n)
		return xfail(s, "answer is truncated inside a character reference%s%s", "", "");
	return xfail(s, "answer is not well-formed XML: a bare '&' or an unknown entity at %s%s", at(s, where, sizeof(where)),
		     "");
}

/* Attributes and the end of a start tag; *empty for "/>". s->i is after the name. */
static int check_tag_rest(xml_scan *s, int *empty)
{
	char where[64], name[64];
	*empty = 0;
	for (;;) {
		size_t b = s->i;
		skip_space(s);
		if (s->i >= s->n)
			return xfail(s, "answer is truncated inside a tag%s%s", "", "");
		if (s->x[s->i] == '>') {
			s->i++;
			return 0;
		}
		if (starts(s, "/>")) {
			s->i += 2;
			*empty = 1;
			return 0;
		}
		if (s->i == b || !read_name(s, name, sizeof(name)))
			return xfail(s, "answer is not well-formed XML: a malformed tag at %s%s", at(s, where, sizeof(where)),
				     "");
		skip_space(s);
		if (s->i < s->n && s->x[s->i] != '=')
			return xfail(s, "answer is not well-formed XML: attribute '%s' has no value at %s", name,
				     at(s, where, sizeof(where)));
		s->i++;
		skip_space(s);
		if (s->i >= s->n)
			return xfail(s, "answer is truncated inside a tag%s%s", "", "");
		char q = s->x[s->i];
		if (q != '"' && q != '\'')
			return xfail(s, "answer is not well-formed XML: attribute '%s' is not quoted at %s", name,
				     at(s, where, sizeof(where)));
		s->i++;
		for (;;) {
			if (s->i >= s->n)
				return xfail(s, "answer is truncated inside a tag%s%s", "", "");
			char c = s->x[s->i];
			if (c == q)
				break;
			if (c == '<')
				return xfail(s, "answer is not well-formed XML: '<' in attribute '%s' at %s", name,
					     at(s, where, sizeof(where)));
			if (c == '&') {
				if (check_ref(s, s->n))
					return -1;
				continue;
			}
			s->i++;
		}
		s->i++;
		if (s->i < s->n && !is_space(s->x[s->i]) && s->x[s->i] != '>' && s->x[s->i] != '/')
			return xfail(s, "answer is not well-formed XML: no space between attributes at %s%s",
				     at(s, where, sizeof(where)), "");
	}
}

/* Comments and processing instructions (prolog, epilog and content alike); 1 when one was skipped. */
static int skip_misc(xml_scan *s, int *err)
{
	*err = 0;
	if (starts(s, "<!--")) {
		s->i += 4;
		*err = skip_past(s, "-->", "comment");
		return 1;
	}
	if (starts(s, "<?")) {
		s->i += 2;
		*err = skip_past(s, "?>", "processing instruction");
		return 1;
	}
	return 0;
}

/* The first bytes of the body, printable, for "not XML" messages. */
static const char *preview(const xml_scan *s, char *buf, size_t len)
{
	size_t k = 0;
	for (size_t j = s->i; j < s->n && k + 1 < len && k < 40; j++)
		buf[k++] = (s->x[j] >= 0x20 && s->x[j] < 0x7f) ? s->x[j] : '.';
	buf[k] = 0;
	return buf;
}

int remote__xml_check(const char *x, size_t n, const char *root, char *why, size_t why_len)
{
	xml_scan s = { x ? x : "", x ? n : 0, 0, why, why_len };
	char where[64], name[64], buf[64], aroot[96];
	why[0] = 0;
	with_article(root, aroot, sizeof(aroot));
	if (s.n >= 3 && memcmp(s.x, "\xef\xbb\xbf", 3) == 0)
		s.i = 3;
	if (memchr(s.x, 0, s.n))
		return xfail(&s, "answer is not %s (the body holds a NUL byte)%s", aroot, "");
	/* Prolog: the declaration, comments, PIs, white space. */
	for (;;) {
		skip_space(&s);
		int err;
		if (!skip_misc(&s, &err))
			break;
		if (err)
			return -1;
	}
	if (s.i >= s.n)
		return xfail(&s, s.n ? "answer is truncated or not %s (no element after its prolog)%s"
				     : "answer is empty, not %s%s",
			     aroot, "");
	if (cut_in(&s, "<!--") || cut_in(&s, "<?"))
		return xfail(&s, "answer is truncated in its prolog%s%s", "", "");
	if (starts(&s, "<!") || (s.n - s.i >= 5 && strncasecmp(s.x + s.i, "<html", 5) == 0)) {
		/* <!DOCTYPE ...>: S3 never sends one; an HTML page from a proxy or a portal starts so. */
		return xfail(&s, "answer is not %s (HTML page?)%s", aroot, "");
	}
	if (s.x[s.i] != '<')
		return xfail(&s, "answer is not %s (not XML: it starts '%s')", aroot, preview(&s, buf, sizeof(buf)));

	/* The elements: a stack of open names (offset and length into x). */
	size_t open_at[XML_MAX_DEPTH], open_len[XML_MAX_DEPTH];
	int depth = 0, seen_root = 0;
	for (;;) {
		if (s.i >= s.n) {
			if (depth == 0)
				break;
			size_t l = open_len[depth - 1] < sizeof(name) - 1 ? open_len[depth - 1] : sizeof(name) - 1;
			memcpy(name, s.x + open_at[depth - 1], l);
			name[l] = 0;
			return xfail(&s, "answer is truncated: <%s> is not closed (the body ends at byte %s)", name,
				     (snprintf(buf, sizeof(buf), "%zu", s.n), buf));
		}
		char c = s.x[s.i];
		if (depth == 0) {
			/* Before the root or after it: only white space and misc. */
			int err;
			skip_space(&s);
			if (s.i >= s.n)
				break;
			if (skip_misc(&s, &err)) {
				if (err)
					return -1;
				continue;
			}
			if (seen_root)
				return xfail(&s, "answer has more after </%s> at %s", root, at(&s, where, sizeof(where)));
			if (cut_in(&s, "<!--") || cut_in(&s, "<?"))
				return xfail(&s, "answer is truncated after </%s>%s", root, "");
			s.i++; /* '<' */
			size_t nb = s.i, nl = read_name(&s, name, sizeof(name));
			if (s.i >= s.n)
				return xfail(&s, "answer is truncated inside its first tag <%s%s", name, "");
			if (!nl)
				return xfail(&s, "answer is not %s (not XML: it starts '%s')", aroot,
					     (s.i = nb - 1, preview(&s, buf, sizeof(buf))));
			if (strcasecmp(name, "html") == 0)
				return xfail(&s, "answer is not %s (HTML page?)%s", aroot, "");
			if (nl != strlen(root) || memcmp(s.x + nb, root, nl))
				return xfail(&s, "answer is not %s (its root element is <%s>)", aroot, name);
			int empty;
			if (check_tag_rest(&s, &empty))
				return -1;
			seen_root = 1;
			if (!empty) {
				open_at[0] = nb;
				open_len[0] = nl;
				depth = 1;
			}
			continue;
		}
		if (c == '&') {
			if (check_ref(&s, s.n))
				return -1;
			continue;
		}
		if (c != '<') {
			s.i++;
			continue;
		}
		int err;
		if (cut_in(&s, "<!--") || cut_in(&s, "<![CDATA[") || cut_in(&s, "<?") || cut_in(&s, "</"))
			return xfail(&s, "answer is truncated inside a tag%s%s", "", "");
		if (skip_misc(&s, &err)) {
			if (err)
				return -1;
			continue;
		}
		if (starts(&s, "<![CDATA[")) {
			s.i += 9;
			if (skip_past(&s, "]]>", "CDATA section"))
				return -1;
			continue;
		}
		if (s.i + 1 < s.n && s.x[s.i + 1] == '/') {
			s.i += 2;
			size_t nb = s.i, nl = read_name(&s, name, sizeof(name));
			skip_space(&s);
			if (s.i >= s.n)
				return xfail(&s, "answer is truncated inside the end tag </%s>%s", name, "");
			if (!nl || s.x[s.i] != '>')
				return xfail(&s, "answer is not well-formed XML: a malformed end tag at %s%s",
					     at(&s, where, sizeof(where)), "");
			if (nl != open_len[depth - 1] || memcmp(s.x + nb, s.x + open_at[depth - 1], nl)) {
				char want[64];
				size_t l = open_len[depth - 1] < sizeof(want) - 1 ? open_len[depth - 1] : sizeof(want) - 1;
				memcpy(want, s.x + open_at[depth - 1], l);
				want[l] = 0;
				snprintf(why, why_len, "answer is not well-formed XML: </%s> closes <%s> at %s", name, want,
					 at(&s, where, sizeof(where)));
				return -1;
			}
			s.i++;
			depth--;
			continue;
		}
		s.i++;
		size_t nb = s.i, nl = read_name(&s, name, sizeof(name));
		if (!nl) {
			if (s.i >= s.n)
				return xfail(&s, "answer is truncated inside a tag%s%s", "", "");
			return xfail(&s, "answer is not well-formed XML: a bare '<' at %s%s", at(&s, where, sizeof(where)), "");
		}
		int empty;
		if (check_tag_rest(&s, &empty))
			return -1;
		if (!empty) {
			if (depth == XML_MAX_DEPTH)
				return xfail(&s, "answer nests elements deeper than S3 does (at <%s>)%s", name, "");
			open_at[depth] = nb;
			open_len[depth] = nl;
			depth++;
		}
	}
	if (!seen_root)
		return xfail(&s, "answer is not %s (no element)%s", aroot, "");
	return 0;
}
