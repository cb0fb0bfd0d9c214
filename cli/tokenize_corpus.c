/*
 * tokenize_corpus.c - the inputs of `qeffect tokenize`: JSONL records and
 * plain-text files, read one document at a time (tokenize_corpus.h says what
 * counts as what).
 *
 * Everything that can be checked without reading the text is checked in
 * cli_corpus_open, before tokenize creates a shard or loads the encoder: a
 * typo in a path, an empty file or an empty folder costs nothing.  A plain
 * text file is held whole in memory while it is encoded: it is one document,
 * and the encoder needs all of it.
 */
#include "cli/tokenize_corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

static int has_txt_suffix(const char *name)
{
	size_t n = strlen(name);
	return n > 4 && strcasecmp(name + n - 4, ".txt") == 0;
}

/* Whether s[0..len) is only spaces, tabs, CR and LF. */
static int blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!strchr(" \t\r\n", s[i]))
			return 0;
	return 1;
}

int cli_utf8_valid(const char *s, size_t len, size_t *bad)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < len) {
		unsigned c = p[i];
		size_t need;
		unsigned cp, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			need = 1, cp = c & 0x1F, min = 0x80;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2, cp = c & 0x0F, min = 0x800;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3, cp = c & 0x07, min = 0x10000;
		} else {
			*bad = i;
			return 0;
		}
		if (len - i <= need) {
			*bad = i;
			return 0;
		}
		for (size_t k = 1; k <= need; k++) {
			if ((p[i + k] & 0xC0) != 0x80) {
				*bad = i;
				return 0;
			}
			cp = (cp << 6) | (p[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
			*bad = i;
			return 0;
		}
		i += need + 1;
	}
	return 1;
}

static int add_file(cli_corpus *c, const char *path, int text)
{
	cli_corpus_file *v = realloc(c->files, (c->nfiles + 1) * sizeof(*v));
	if (!v)
		goto no_memory;
	c->files = v;
	v[c->nfiles].path = strdup(path);
	if (!v[c->nfiles].path)
		goto no_memory;
	v[c->nfiles].text = text;
	c->nfiles++;
	c->ntext += text;
	return 0;
no_memory:
	fprintf(stderr, "qeffect tokenize: out of memory listing the inputs\n");
	return -1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .txt files directly inside dir, sorted by name, appended to c. */
static int add_folder(cli_corpus *c, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "qeffect tokenize: cannot open the folder '%s': %s\n", dir, strerror(errno));
		return -1;
	}
	char **names = NULL;
	size_t n = 0;
	int ret = -1;
	struct dirent *e;
	errno = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !has_txt_suffix(e->d_name))
			continue;
		char **v = realloc(names, (n + 1) * sizeof(*v));
		if (!v || !(v[n] = strdup(e->d_name))) {
			names = v ? v : names;
			fprintf(stderr, "qeffect tokenize: out of memory listing '%s'\n", dir);
			goto free_names;
		}
		names = v;
		n++;
	}
	if (errno) {
		fprintf(stderr, "qeffect tokenize: cannot list the folder '%s': %s\n", dir, strerror(errno));
		goto free_names;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	size_t before = c->nfiles;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(dir) + strlen(names[i]) + 2;
		char *p = malloc(len);
		if (!p) {
			fprintf(stderr, "qeffect tokenize: out of memory listing '%s'\n", dir);
			goto free_names;
		}
		snprintf(p, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", names[i]);
		struct stat st;
		int rc = 0;
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) /* a subfolder or a device named x.txt is not a document */
			rc = add_file(c, p, 1);
		free(p);
		if (rc)
			goto free_names;
	}
	if (c->nfiles == before) {
		fprintf(stderr, "qeffect tokenize: the folder '%s' holds no .txt files (one document per file)\n", dir);
		goto free_names;
	}
	ret = 0;
free_names:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return ret;
}

int cli_corpus_open(cli_corpus *c, char *const *paths, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(paths[i], &st)) {
			fprintf(stderr, "qeffect tokenize: cannot open '%s': %s\n", paths[i], strerror(errno));
			return -1;
		}
		if (S_ISDIR(st.st_mode)) {
			if (add_folder(c, paths[i]))
				return -1;
		} else if (add_file(c, paths[i], has_txt_suffix(paths[i]))) {
			return -1;
		}
	}
	/* Every file can be opened, and no plain-text file is empty, before anything is written. */
	for (size_t i = 0; i < c->nfiles; i++) {
		const char *p = c->files[i].path;
		FILE *f = fopen(p, "rb");
		struct stat st;
		if (!f) {
			fprintf(stderr, "qeffect tokenize: cannot open '%s': %s\n", p, strerror(errno));
			return -1;
		}
		int ok = fstat(fileno(f), &st) == 0;
		fclose(f);
		if (ok && S_ISREG(st.st_mode)) {
			c->total_bytes += (int64_t)st.st_size;
			if (c->files[i].text && st.st_size == 0) {
				fprintf(stderr, "qeffect tokenize: '%s': an empty file (a .txt file is one document)\n", p);
				return -1;
			}
		}
	}
	return 0;
}

static void release_doc(cli_corpus *c)
{
	json_decref((json_t *)c->json);
	c->json = NULL;
	free(c->buf);
	c->buf = NULL;
}

/* Read the plain-text file p whole into c->buf and check it. */
static int read_text(cli_corpus *c, const char *p, cli_doc *doc)
{
	FILE *f = fopen(p, "rb");
	if (!f) {
		fprintf(stderr, "qeffect tokenize: cannot open '%s': %s\n", p, strerror(errno));
		return -1;
	}
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int ret = -1;
	for (;;) {
		if (!buf) {
			fprintf(stderr, "qeffect tokenize: '%s': out of memory after %zu bytes\n", p, len);
			goto close_file;
		}
		size_t k = fread(buf + len, 1, cap - len, f);
		len += k;
		if (k == 0)
			break;
		if (len == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	if (ferror(f)) {
		fprintf(stderr, "qeffect tokenize: cannot read '%s': %s\n", p, strerror(errno));
		goto close_file;
	}
	size_t bad;
	if (blank(buf, len)) {
		fprintf(stderr, "qeffect tokenize: '%s': %s (a .txt file is one document)\n", p,
			len ? "only whitespace" : "an empty file");
		goto close_file;
	}
	if (!cli_utf8_valid(buf, len, &bad)) {
		fprintf(stderr,
			"qeffect tokenize: '%s': not UTF-8 text: byte %zu is 0x%02x (convert it first, e.g. iconv -t UTF-8)\n",
			p, bad, (unsigned char)buf[bad]);
		goto close_file;
	}
	c->buf = buf;
	buf = NULL;
	c->bytes_in += (int64_t)len;
	doc->text = c->buf;
	doc->len = len;
	doc->path = p;
	doc->line = 0;
	ret = 1;
close_file:
	free(buf);
	fclose(f);
	return ret;
}

int cli_corpus_next(cli_corpus *c, cli_doc *doc)
{
	release_doc(c);
	while (c->cur < c->nfiles) {
		const char *p = c->files[c->cur].path;
		if (c->files[c->cur].text) {
			c->cur++;
			return read_text(c, p, doc);
		}
		if (!c->f) {
			c->f = fopen(p, "rb");
			if (!c->f) {
				fprintf(stderr, "qeffect tokenize: cannot open '%s': %s\n", p, strerror(errno));
				return -1;
			}
			c->lineno = 0;
		}
		ssize_t len;
		while ((len = getline(&c->line, &c->cap, c->f)) >= 0) {
			c->lineno++;
			c->lines++;
			c->bytes_in += len;
			if (blank(c->line, (size_t)len))
				continue;
			json_error_t jerr;
			json_t *obj = json_loadb(c->line, (size_t)len, JSON_ALLOW_NUL, &jerr);
			if (!obj) {
				fprintf(stderr, "qeffect tokenize: '%s' line %lld: not JSON: %s (column %d)\n", p,
					(long long)c->lineno, jerr.text, jerr.column);
				return -1;
			}
			json_t *text = json_object_get(obj, "text");
			if (!json_is_string(text)) {
				json_decref(obj);
				fprintf(stderr, "qeffect tokenize: '%s' line %lld: no string field \"text\"\n", p,
					(long long)c->lineno);
				return -1;
			}
			c->json = obj;
			doc->text = json_string_value(text);
			doc->len = json_string_length(text);
			doc->path = p;
			doc->line = c->lineno;
			return 1;
		}
		if (ferror(c->f)) {
			fprintf(stderr, "qeffect tokenize: cannot read '%s': %s\n", p, strerror(errno));
			return -1;
		}
		fclose(c->f);
		c->f = NULL;
		c->cur++;
	}
	return 0;
}

void cli_corpus_close(cli_corpus *c)
{
	release_doc(c);
	if (c->f)
		fclose(c->f);
	free(c->line);
	for (size_t i = 0; i < c->nfiles; i++)
		free(c->files[i].path);
	free(c->files);
	memset(c, 0, sizeof(*c));
}
