/*
 * hostlist.c - SLURM's compressed host lists ("node[01-04,07]",
 * "a1,b[2-3]", "rack[1-2]-gpu[1-4]"), as SLURM_JOB_NODELIST and
 * SLURM_STEP_NODELIST carry them, read without expanding the whole list:
 * the rendezvous needs the first host (where SLURM puts rank 0) and the
 * number of hosts (does the job leave this one?).
 *
 * Grammar: names separated by commas outside brackets; a name is literal
 * text (letters, digits, '-', '.', '_') with any number of bracket groups,
 * each a comma-separated list of numbers or ranges LO-HI (LO <= HI).  A
 * name with several groups is their product, the first group outermost,
 * as SLURM's multi-dimensional names are.  A number keeps the width of the
 * bound it was written with (01-04 gives 01 02 03 04; 8-10 gives 8 9 10).
 * Anything else - an empty name or group, an unclosed or nested bracket, a
 * letter inside brackets, HI below LO - is refused with the list and the
 * offset of the fault, never guessed at.
 */
#include "runtime/comm/comm_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/status.h"

#define MAX_GROUPS 8
#define MAX_HOSTS ((long)1 << 24)

/* One bracket group of a name: its text [lo, hi) between the brackets, and how many numbers it gives. */
typedef struct group {
	const char *lo, *hi;
	long count;
} group;

static int bad(const char *list, const char *at, const char *what)
{
	return qe_fail(QE_EINVAL, "host list '%s': %s at offset %ld", list, what, (long)(at - list));
}

/* A number of up to 18 digits at *p; OUT: its value and width; *p moves past it. */
static int number(const char *list, const char **p, unsigned long long *v, int *width)
{
	const char *s = *p;
	*v = 0;
	while (isdigit((unsigned char)**p) && *p - s < 18)
		*v = *v * 10 + (unsigned long long)(*(*p)++ - '0');
	if (*p == s)
		return bad(list, s, "expected a number");
	if (isdigit((unsigned char)**p))
		return bad(list, s, "a number longer than 18 digits");
	*width = (int)(*p - s);
	return 0;
}

/*
 * Walk group g's ranges.  With want < 0 count them (OUT g->count); else
 * print the want-th number into out (cap bytes) with its range's width.
 */
static int group_walk(const char *list, group *g, long want, char *out, size_t cap)
{
	const char *p = g->lo;
	long n = 0;
	if (p == g->hi)
		return bad(list, p, "an empty bracket group");
	while (p < g->hi) {
		unsigned long long a, b;
		int wa, wb, rc;
		if ((rc = number(list, &p, &a, &wa)))
			return rc;
		b = a;
		if (*p == '-') {
			p++;
			if ((rc = number(list, &p, &b, &wb)))
				return rc;
			if (b < a)
				return bad(list, p - wb, "a range whose end is below its start");
		}
		if (p < g->hi && *p != ',')
			return bad(list, p, "expected ',' or ']' after a number");
		if (p < g->hi && ++p == g->hi)
			return bad(list, p, "an empty range");
		if (b - a >= (unsigned long long)(MAX_HOSTS - n))
			return bad(list, g->lo, "more hosts than qeffect reads (16777216)");
		if (want >= n && want <= n + (long)(b - a)) {
			int k = snprintf(out, cap, "%0*llu", wa, a + (unsigned long long)(want - n));
			if (k < 0 || (size_t)k >= cap)
				return bad(list, g->lo, "a host name too long");
			return 0;
		}
		n += (long)(b - a) + 1;
	}
	g->count = n;
	return 0;
}

static int name_char(int c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_';
}

/*
 * The name [s, e): its groups (OUT g, *ng) and the number of hosts it
 * gives (OUT *count).  Literal text must be name characters.
 */
static int name_parse(const char *list, const char *s, const char *e, group *g, int *ng, long *count)
{
	long total = 1;
	int rc;
	*ng = 0;
	if (s == e)
		return bad(list, s, "an empty host name");
	for (const char *p = s; p < e;) {
		if (*p == '[') {
			const char *c = memchr(p, ']', (size_t)(e - p));
			const char *o = memchr(p + 1, '[', (size_t)(e - p - 1));
			if (!c)
				return bad(list, p, "a '[' without its ']'");
			if (o && o < c)
				return bad(list, o, "a '[' inside brackets");
			if (*ng == MAX_GROUPS)
				return bad(list, p, "more than 8 bracket groups in one name");
			g[*ng] = (group){ p + 1, c, 0 };
			if ((rc = group_walk(list, &g[*ng], -1, NULL, 0)))
				return rc;
			if (g[*ng].count > MAX_HOSTS / total)
				return bad(list, s, "more hosts than qeffect reads (16777216)");
			total *= g[*ng].count;
			(*ng)++;
			p = c + 1;
		} else if (*p == ']') {
			return bad(list, p, "a ']' without its '['");
		} else if (!name_char((unsigned char)*p)) {
			return bad(list, p, "a character that is not part of a host name");
		} else {
			p++;
		}
	}
	*count = total;
	return 0;
}

/* Print host k of name [s, e) (parsed into g[0..ng)) into host. */
static int name_host(const char *list, const char *s, const char *e, group *g, int ng, long k, char *host, size_t cap)
{
	long idx[MAX_GROUPS];
	size_t len = 0;
	for (int i = ng - 1; i >= 0; i--) {
		idx[i] = k % g[i].count;
		k /= g[i].count;
	}
	for (const char *p = s; p < e;) {
		if (*p == '[') {
			int i = 0, rc;
			while (g[i].lo != p + 1)
				i++;
			if ((rc = group_walk(list, &g[i], idx[i], host + len, cap - len)))
				return rc;
			len += strlen(host + len);
			p = g[i].hi + 1;
		} else {
			if (len + 1 >= cap)
				return bad(list, p, "a host name too long");
			host[len++] = *p++;
			host[len] = '\0';
		}
	}
	return 0;
}

int qe_hostlist_host(const char *list, long i, char *host, size_t cap, long *count)
{
	long seen = 0;
	int found = 0;
	if (count)
		*count = 0;
	if (host && cap)
		host[0] = '\0';
	if (!list || !list[0])
		return qe_fail(QE_EINVAL, "host list is empty");
	if (i >= 0 && (!host || cap < 2))
		return qe_fail(QE_EINVAL, "host list '%s': no room for a host name", list);
	for (const char *s = list;;) {
		const char *e = s;
		int depth = 0;
		while (*e && (depth || *e != ',')) {
			depth += *e == '[' ? 1 : *e == ']' ? -1 : 0;
			e++;
		}
		group g[MAX_GROUPS];
		int ng = 0, rc;
		long n = 0;
		if ((rc = name_parse(list, s, e, g, &ng, &n)))
			return rc;
		if (n > MAX_HOSTS - seen)
			return bad(list, s, "more hosts than qeffect reads (16777216)");
		if (!found && i >= seen && i < seen + n) {
			if ((rc = name_host(list, s, e, g, ng, i - seen, host, cap)))
				return rc;
			found = 1;
		}
		seen += n;
		if (!*e)
			break;
		s = e + 1;
	}
	if (count)
		*count = seen;
	if (i >= 0 && !found)
		return qe_fail(QE_EINVAL, "host list '%s' has %ld hosts, no host %ld", list, seen, i);
	return 0;
}
