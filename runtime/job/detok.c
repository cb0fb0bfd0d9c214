/*
 * detok.c - GPT-2 ids to bytes, and lossy UTF-8 (what and why: detok.h).
 *
 * All token bytes sit in one arena, indexed by id.  The stand-in alphabet is
 * tokenizer.c's (qe_gpt2_byte_alphabet, qe_gpt2_stand_in_bytes).
 */
#include "runtime/job/detok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/core/status.h"
#include "runtime/job/tokenizer.h"

struct qe_gpt2_detok {
	int size;
	uint32_t *off, *len; /* per id; len 0: no token has the id */
	char *arena;
};

void qe_gpt2_detok_free(qe_gpt2_detok *d)
{
	if (!d)
		return;
	free(d->off);
	free(d->len);
	free(d->arena);
	free(d);
}

int qe_gpt2_detok_open(const char *dir, qe_gpt2_detok **out)
{
	char path[4096];
	int rc = QE_OK;
	*out = NULL;
	snprintf(path, sizeof(path), "%s/encoder.json", dir);
	FILE *f = fopen(path, "rb");
	if (!f)
		return qe_fail(errno == ENOENT ? QE_ENOTFOUND : QE_EIO, "cannot open '%s': %s", path, strerror(errno));
	json_error_t jerr;
	json_t *root = json_loadf(f, 0, &jerr);
	fclose(f);
	if (!root)
		return qe_fail(QE_ECORRUPT, "'%s' line %d: not JSON: %s", path, jerr.line, jerr.text);
	qe_gpt2_detok *d = calloc(1, sizeof(*d));
	if (!d) {
		rc = qe_fail(QE_ENOMEM, "detokenizer: out of memory");
		goto free_json;
	}
	if (!json_is_object(root)) {
		rc = qe_fail(QE_ECORRUPT, "'%s': not a JSON object of token -> id", path);
		goto free_detok;
	}
	/* First pass: the ids' range and the arena's size (a key spells at most strlen(key) bytes). */
	const char *k;
	json_t *v;
	size_t bytes = 0;
	json_object_foreach(root, k, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535) {
			rc = qe_fail(QE_ECORRUPT, "'%s': token \"%.60s\" has no id in 0..65535", path, k);
			goto free_detok;
		}
		if ((int)json_integer_value(v) + 1 > d->size)
			d->size = (int)json_integer_value(v) + 1;
		bytes += strlen(k);
	}
	d->off = calloc((size_t)d->size + 1, sizeof(uint32_t));
	d->len = calloc((size_t)d->size + 1, sizeof(uint32_t));
	d->arena = malloc(bytes + 1);
	if (!d->off || !d->len || !d->arena) {
		rc = qe_fail(QE_ENOMEM, "detokenizer: out of memory for %d tokens", d->size);
		goto free_detok;
	}
	int16_t byte_of[512];
	uint32_t cp_of[256];
	qe_gpt2_byte_alphabet(cp_of, byte_of);
	size_t used = 0;
	json_object_foreach(root, k, v)
	{
		long n = qe_gpt2_stand_in_bytes(byte_of, k, strlen(k), d->arena + used);
		if (n <= 0) {
			rc = qe_fail(QE_ECORRUPT, "'%s': token \"%.60s\" is empty or has a character outside GPT-2's byte alphabet",
				     path, k);
			goto free_detok;
		}
		int id = (int)json_integer_value(v);
		d->off[id] = (uint32_t)used;
		d->len[id] = (uint32_t)n;
		used += (size_t)n;
	}
	*out = d;
	d = NULL;
free_detok:
	qe_gpt2_detok_free(d);
free_json:
	json_decref(root);
	return rc;
}

int qe_gpt2_detok_size(const qe_gpt2_detok *d)
{
	return d->size;
}

int qe_gpt2_detok_token(const qe_gpt2_detok *d, int32_t id, const char **bytes, size_t *len)
{
	if (id < 0 || id >= d->size || d->len[id] == 0)
		return qe_fail(QE_EINVAL, "token id %d is not in GPT-2's vocabulary (%d entries)", (int)id, d->size);
	*bytes = d->arena + d->off[id];
	*len = d->len[id];
	return QE_OK;
}

int qe_utf8_lossy(const char *in, size_t n, char **out, size_t *outlen)
{
	const unsigned char *u = (const unsigned char *)in;
	char *o = malloc(3 * n + 1); /* one byte becomes at most U+FFFD's three */
	size_t w = 0;
	*out = NULL;
	*outlen = 0;
	if (!o)
		return qe_fail(QE_ENOMEM, "out of memory for %zu bytes of text", n);
	for (size_t i = 0; i < n;) {
		unsigned char b = u[i];
		int need;
		unsigned char lo = 0x80, hi = 0xBF;
		if (b < 0x80) {
			o[w++] = (char)b;
			i++;
			continue;
		} else if (b >= 0xC2 && b <= 0xDF) {
			need = 1;
		} else if (b >= 0xE0 && b <= 0xEF) {
			need = 2;
			lo = b == 0xE0 ? 0xA0 : 0x80;
			hi = b == 0xED ? 0x9F : 0xBF;
		} else if (b >= 0xF0 && b <= 0xF4) {
			need = 3;
			lo = b == 0xF0 ? 0x90 : 0x80;
			hi = b == 0xF4 ? 0x8F : 0xBF;
		} else {
			need = -1;
		}
		size_t j = i + 1;
		int got = 0;
		while (need > 0 && got < need && j < n && u[j] >= lo && u[j] <= hi) {
			lo = 0x80;
			hi = 0xBF;
			got++;
			j++;
		}
		if (need > 0 && got == need) {
			memcpy(o + w, in + i, j - i);
			w += j - i;
		} else {
			/* the maximal ill-formed subsequence i..j: one replacement character */
			memcpy(o + w, "\xEF\xBF\xBD", 3);
			w += 3;
		}
		i = j;
	}
	o[w] = 0;
	*out = o;
	*outlen = w;
	return QE_OK;
}
