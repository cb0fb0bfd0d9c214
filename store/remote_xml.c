/*
 * remote_xml.c - the few XML elements the S3 client reads: Code and Message
 * of an error, UploadId of a new multipart upload, and Contents / Key / Size
 * / IsTruncated / NextContinuationToken of a listing.
 *
 * Why not a full XML parser: S3 answers with flat, namespace-free documents
 * whose elements we look up by name; a scan for <Tag>...</Tag> plus the five
 * predefined entities and numeric character references reads them exactly.
 * Anything else (CDATA, comments) does not occur in these answers; an element
 * we cannot read is treated as absent, which callers report as a malformed
 * answer.
 */
#include "store/remote_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
