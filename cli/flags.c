/*
 * flags.c - the table-driven flag parser every command uses (flags.h).
 * getopt_long's rules, one table per command instead of a switch, and the
 * same messages for the same mistakes in every command.
 */
#include "cli/flags.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

const char *const cli_on_off[] = { "on", "off", NULL };
const char *const cli_backends[] = { "cpu", "cuda", NULL };

/* The flag values' own checks, each printing an error that names the flag; 0 or 2. */
static int parse_path(const char *cmd, const char *flag, const char *s)
{
	if (s && s[0])
		return 0;
	fprintf(stderr, "qeffect %s: %s needs a file or folder name, got ''\n", cmd, flag);
	return 2;
}

int cli_parse_long(const char *cmd, const char *flag, const char *s, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end) {
		fprintf(stderr, "qeffect %s: %s needs an integer, got '%s'\n", cmd, flag, s);
		return 2;
	}
	*out = v;
	return 0;
}

static int parse_double(const char *cmd, const char *flag, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end) {
		fprintf(stderr, "qeffect %s: %s needs a number, got '%s'\n", cmd, flag, s);
		return 2;
	}
	*out = v;
	return 0;
}

/* -h and --help: answered by the parser for every table. */
static const cli_flag help_row = { "help", 'h', CLI_FLAG_BOOL, .dst = NULL };

#define QE_CMD(cmd) (cmd) ? " " : "", (cmd) ? (cmd) : ""

/* Rows of t (and the tables it includes) whose long name is name[0..len) or starts with it. */
typedef struct match {
	const cli_flag *exact;
	const cli_flag *prefix; /* the first prefix match */
	int nprefix;
	char other[64];         /* a second prefix match's name, for the message */
} match;

static void find_long(const cli_flag *t, const char *name, size_t len, match *m)
{
	for (; t->kind != CLI_FLAG_END; t++) {
		if (t->kind == CLI_FLAG_INCLUDE) {
			if (t->include)
				find_long(t->include, name, len, m);
			continue;
		}
		if (!t->name || strncmp(t->name, name, len))
			continue;
		if (!t->name[len]) {
			m->exact = t;
		} else {
			if (m->nprefix++ == 0)
				m->prefix = t;
			else if (!m->other[0])
				snprintf(m->other, sizeof(m->other), "--%s", t->name);
		}
	}
}

static const cli_flag *find_short(const cli_flag *t, char c)
{
	for (; t->kind != CLI_FLAG_END; t++) {
		const cli_flag *f = t->kind == CLI_FLAG_INCLUDE && t->include ? find_short(t->include, c) : NULL;
		if (f)
			return f;
		if (t->kind != CLI_FLAG_INCLUDE && t->short_name && t->short_name == c)
			return t;
	}
	return NULL;
}

/* The row for a long flag ("--name", before any '='): NULL after printing why there is none. */
static const cli_flag *lookup_long(const char *cmd, const cli_flag *table, const char *arg, size_t len)
{
	match m = { 0 };
	find_long(table, arg + 2, len - 2, &m);
	find_long((const cli_flag[]){ help_row, { 0 } }, arg + 2, len - 2, &m);
	if (m.exact)
		return m.exact->name == help_row.name ? &help_row : m.exact;
	if (m.nprefix == 1)
		return m.prefix->name == help_row.name ? &help_row : m.prefix;
	if (m.nprefix > 1)
		fprintf(stderr, "qeffect%s%s: ambiguous flag '%.*s': --%s, %s%s (see --help)\n", QE_CMD(cmd), (int)len,
			arg, m.prefix->name, m.other, m.nprefix > 2 ? ", ..." : "");
	else
		fprintf(stderr, "qeffect%s%s: unknown flag '%s' (see --help)\n", QE_CMD(cmd), arg);
	return NULL;
}

static int range_error(const char *cmd, const char *flag, const cli_flag *f, long v)
{
	if (f->hi == LLONG_MAX)
		fprintf(stderr, "qeffect%s%s: %s must be >= %lld, got %ld\n", QE_CMD(cmd), flag, f->lo, v);
	else
		fprintf(stderr, "qeffect%s%s: %s must be in %lld..%lld, got %ld\n", QE_CMD(cmd), flag, f->lo, f->hi, v);
	return 2;
}

/* Check and store one value; 0 or 2 after printing why not. */
static int store(const char *cmd, const char *flag, const cli_flag *f, const char *v)
{
	long n;
	double d;
	switch (f->kind) {
	case CLI_FLAG_BOOL:
		*(int *)f->dst = 1;
		return 0;
	case CLI_FLAG_INT:
	case CLI_FLAG_LONG:
	case CLI_FLAG_INT64:
	case CLI_FLAG_UINT64:
		if (cli_parse_long(cmd ? cmd : "", flag, v, &n))
			return 2;
		if (n < f->lo || n > f->hi)
			return range_error(cmd, flag, f, n);
		if (f->kind == CLI_FLAG_INT)
			*(int *)f->dst = (int)n;
		else if (f->kind == CLI_FLAG_LONG)
			*(long *)f->dst = n;
		else if (f->kind == CLI_FLAG_INT64)
			*(int64_t *)f->dst = n;
		else
			*(uint64_t *)f->dst = (uint64_t)n;
		return 0;
	case CLI_FLAG_DOUBLE:
	case CLI_FLAG_FLOAT:
		if (parse_double(cmd ? cmd : "", flag, v, &d))
			return 2;
		if (!(d >= f->dlo && d < f->dhi)) {
			fprintf(stderr, "qeffect%s%s: %s must be in [%g, %g), got %s\n", QE_CMD(cmd), flag, f->dlo, f->dhi, v);
			return 2;
		}
		if (f->kind == CLI_FLAG_DOUBLE)
			*(double *)f->dst = d;
		else
			*(float *)f->dst = (float)d;
		return 0;
	case CLI_FLAG_STRING:
		*(const char **)f->dst = v;
		return 0;
	case CLI_FLAG_PATH:
		if (parse_path(cmd ? cmd : "", flag, v))
			return 2;
		if (!f->cap) {
			*(const char **)f->dst = v;
			return 0;
		}
		/* fall through */
	case CLI_FLAG_TEXT:
		if (!v[0]) {
			fprintf(stderr, "qeffect%s%s: %s needs a value, got ''\n", QE_CMD(cmd), flag);
			return 2;
		}
		if (strlen(v) >= f->cap) {
			fprintf(stderr, "qeffect%s%s: %s is %zu bytes long, more than the %zu it may have\n", QE_CMD(cmd),
				flag, strlen(v), f->cap - 1);
			return 2;
		}
		memcpy(f->dst, v, strlen(v) + 1);
		return 0;
	case CLI_FLAG_CHOICE: {
		char list[256] = "";
		for (int i = 0; f->words[i]; i++) {
			if (strcmp(v, f->words[i]) == 0) {
				*(int *)f->dst = i;
				return 0;
			}
			size_t u = strlen(list);
			snprintf(list + u, sizeof(list) - u, "%s%s", i == 0 ? "" : f->words[i + 1] ? ", " : " or ",
				 f->words[i]);
		}
		fprintf(stderr, "qeffect%s%s: %s takes %s, got '%s'\n", QE_CMD(cmd), flag, list, v);
		return 2;
	}
	case CLI_FLAG_PARSE:
		if (f->parse(v, f->dst) == 0)
			return 0;
		fprintf(stderr, "qeffect%s%s: bad value '%s' for %s: %s\n", QE_CMD(cmd), v, flag, qe_last_error());
		return 2;
	case CLI_FLAG_FN:
		return f->fn(cmd, flag, v, f->dst) ? 2 : 0;
	case CLI_FLAG_END:
	case CLI_FLAG_INCLUDE:
		break;
	}
	return 2;
}

/*
 * The flag at argv[*i] and its value (the next argument when not after '=',
 * *i moved past it).  Returns 0 and sets *row (NULL for --help), or 2 after
 * printing a usage error.
 */
static int one_flag(const char *cmd, const cli_flag *table, int argc, char **argv, int *i, const cli_flag **row,
		    const char **value)
{
	const char *arg = argv[*i], *v = NULL, *eq = NULL;
	const cli_flag *f;
	char flag[80];
	if (arg[1] == '-') {
		eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		if (!(f = lookup_long(cmd, table, arg, len)))
			return 2;
		if (eq)
			v = eq + 1;
	} else {
		f = find_short(table, arg[1]);
		if (!f && arg[1] == 'h')
			f = &help_row;
		if (!f || (f->kind == CLI_FLAG_BOOL && arg[2])) {
			fprintf(stderr, "qeffect%s%s: unknown flag '%s' (see --help)\n", QE_CMD(cmd), arg);
			return 2;
		}
		if (arg[2])
			v = arg + 2;
	}
	if (f == &help_row) {
		*row = NULL;
		return 0;
	}
	if (f->name)
		snprintf(flag, sizeof(flag), "--%s", f->name);
	else
		snprintf(flag, sizeof(flag), "-%c", f->short_name);
	if (f->kind == CLI_FLAG_BOOL && v) {
		fprintf(stderr, "qeffect%s%s: %s takes no value, got '%s'\n", QE_CMD(cmd), flag, arg);
		return 2;
	}
	if (!v && f->bare) {
		v = f->bare;
	} else if (!v && f->kind != CLI_FLAG_BOOL) {
		if (*i + 1 >= argc) {
			fprintf(stderr, "qeffect%s%s: missing value: %s needs a value (see --help)\n", QE_CMD(cmd), flag);
			return 2;
		}
		v = argv[++*i];
	}
	if (store(cmd, flag, f, v))
		return 2;
	if (f->given)
		*f->given |= f->bit;
	*row = f;
	*value = v;
	return 0;
}

int cli_flags_parse(const char *cmd, const cli_flag *table, int argc, char **argv, int *noperands)
{
	int nops = 0;
	int rest = 0; /* after "--": operands only */
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!rest && strcmp(arg, "--") == 0) {
			rest = 1;
			continue;
		}
		if (rest || arg[0] != '-' || !arg[1]) {
			if (!noperands) {
				fprintf(stderr, "qeffect%s%s: unexpected argument '%s' (see --help)\n", QE_CMD(cmd), arg);
				return 2;
			}
			argv[1 + nops++] = argv[i]; /* 1 + nops <= i: nothing unread is overwritten */
			continue;
		}
		const cli_flag *row;
		const char *v = NULL;
		if (one_flag(cmd, table, argc, argv, &i, &row, &v))
			return 2;
		if (!row)
			return -1;
	}
	if (noperands) {
		*noperands = nops;
		argv[1 + nops] = NULL;
	}
	return 0;
}

/* The row whose long name is exactly arg's (before any '='), searching included tables. */
static const cli_flag *exact_long(const cli_flag *t, const char *arg)
{
	if (strncmp(arg, "--", 2))
		return NULL;
	const char *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) - 2 : strlen(arg) - 2;
	match m = { 0 };
	find_long(t, arg + 2, len, &m);
	return m.exact;
}

int cli_flags_take(const char *cmd, const cli_flag *table, int *argc, char **argv)
{
	int out = 1;
	for (int i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if (!exact_long(table, argv[i])) {
			argv[out++] = argv[i];
			continue;
		}
		const cli_flag *row;
		const char *v;
		if (one_flag(cmd, table, *argc, argv, &i, &row, &v))
			return 2;
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}
