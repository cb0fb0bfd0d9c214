/*
 * tokenizer.c - GPT-2 byte-level BPE as gpt-3-encoder 1.1.4 computes it
 * (what and why: tokenizer.h).
 *
 * Everything works on bytes, not on the package's printable stand-ins:
 * bytes_to_unicode is a bijection between bytes and 256 code points, so a
 * vocabulary entry or a merge piece is translated back to its bytes once at
 * load, and the BPE of a piece works on spans of the piece's own UTF-8.  The
 * comma that joins a rank key is the stand-in of byte 0x2C, which is itself,
 * so a rank key in bytes is bytes(first) 0x2C bytes(second).
 *
 * Three hash maps of byte strings (open addressing, xxh3 hashes, keys in one
 * arena): vocabulary (bytes -> id), ranks (joined pair -> merge index, the
 * last of equal keys winning as in the package's dictZip), and the piece
 * cache (bytes -> a run of token ids), cleared when it grows past a bound.
 */
#include "runtime/job/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <xxhash.h>

#include "runtime/core/status.h"

/* JavaScript's \s (ECMAScript WhiteSpace + LineTerminator, Unicode 15), for a character class. */
#define JS_WS "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
/* Encoder.js's pattern with \s, \S and [^\s...] spelled with JS_WS. */
static const char pre_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_WS "\\p{L}\\p{N}]+"
				  "|[" JS_WS "]+(?![^" JS_WS "])|[" JS_WS "]+";

/* Bound on the piece cache before it is cleared (entries; token ids). */
#define CACHE_MAX_ENTRIES (1u << 20)
#define CACHE_MAX_TOKENS (1u << 24)

/* --- byte string hash map ------------------------------------------------------ */

typedef struct sm_slot {
	uint64_t h;
	uint32_t off, len; /* key = arena[off..off+len); len 0: empty slot */
	int32_t a, b;      /* the value */
} sm_slot;

typedef struct strmap {
	sm_slot *slots;
	size_t cap, n; /* cap a power of two */
	char *arena;
	size_t alen, acap;
} strmap;

static int sm_init(strmap *m, size_t cap)
{
	memset(m, 0, sizeof(*m));
	m->cap = 1;
	while (m->cap < cap * 2)
		m->cap <<= 1;
	m->slots = calloc(m->cap, sizeof(sm_slot));
	return m->slots ? QE_OK : qe_fail(QE_ENOMEM, "tokenizer: out of memory for a %zu-slot map", m->cap);
}

static void sm_release(strmap *m)
{
	free(m->slots);
	free(m->arena);
	memset(m, 0, sizeof(*m));
}

static void sm_clear(strmap *m)
{
	memset(m->slots, 0, m->cap * sizeof(sm_slot));
	m->n = 0;
	m->alen = 0;
}

static sm_slot *sm_lookup(const strmap *m, const char *k, size_t len, uint64_t h)
{
	size_t mask = m->cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		sm_slot *s = &m->slots[i];
		if (!s->len)
			return s;
		if (s->h == h && s->len == len && memcmp(m->arena + s->off, k, len) == 0)
			return s;
	}
}

static const sm_slot *sm_get(const strmap *m, const char *k, size_t len)
{
	const sm_slot *s = sm_lookup(m, k, len, XXH3_64bits(k, len));
	return s->len ? s : NULL;
}

static int sm_grow(strmap *m)
{
	size_t ncap = m->cap * 2;
	sm_slot *ns = calloc(ncap, sizeof(sm_slot));
	if (!ns)
		return qe_fail(QE_ENOMEM, "tokenizer: out of memory growing a map to %zu slots", ncap);
	for (size_t i = 0; i < m->cap; i++) {
		sm_slot *s = &m->slots[i];
		if (!s->len)
			continue;
		size_t j = (size_t)s->h & (ncap - 1);
		while (ns[j].len)
			j = (j + 1) & (ncap - 1);
		ns[j] = *s;
	}
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return QE_OK;
}

/* Insert or overwrite key k (len >= 1) with (a, b). */
static int sm_put(strmap *m, const char *k, size_t len, int32_t a, int32_t b)
{
	if ((m->n + 1) * 2 > m->cap && sm_grow(m))
		return QE_ENOMEM;
	uint64_t h = XXH3_64bits(k, len);
	sm_slot *s = sm_lookup(m, k, len, h);
	if (!s->len) {
		if (len > UINT32_MAX || m->alen + len > UINT32_MAX)
			return qe_fail(QE_ENOMEM, "tokenizer: map arena past 4 GiB");
		if (m->alen + len > m->acap) {
			size_t cap = m->acap ? m->acap : 1 << 16;
			while (cap < m->alen + len)
				cap *= 2;
			char *na = realloc(m->arena, cap);
			if (!na)
				return qe_fail(QE_ENOMEM, "tokenizer: out of memory for map keys");
			m->arena = na;
			m->acap = cap;
		}
		memcpy(m->arena + m->alen, k, len);
		s->h = h;
		s->off = (uint32_t)m->alen;
		s->len = (uint32_t)len;
		m->alen += len;
		m->n++;
	}
	s->a = a;
	s->b = b;
	return QE_OK;
}

/* --- token buffer ---------------------------------------------------------- */

static int tb_reserve(qe_tokbuf *b, size_t more)
{
	if (b->n + more <= b->cap)
		return QE_OK;
	size_t cap = b->cap ? b->cap : 1024;
	while (cap < b->n + more)
		cap *= 2;
	int32_t *v = realloc(b->v, cap * sizeof(int32_t));
	if (!v)
		return qe_fail(QE_ENOMEM, "tokenizer: out of memory for %zu tokens", cap);
	b->v = v;
	b->cap = cap;
	return QE_OK;
}

int qe_tokbuf_push(qe_tokbuf *b, int32_t tok)
{
	QE_TRY(tb_reserve(b, 1));
	b->v[b->n++] = tok;
	return QE_OK;
}

void qe_tokbuf_release(qe_tokbuf *b)
{
	free(b->v);
	memset(b, 0, sizeof(*b));
}

/* --- the encoder ----------------------------------------------------------- */

struct qe_gpt2 {
	strmap vocab, ranks, cache;
	qe_tokbuf cache_toks; /* the cache's values are runs of this */
	int vocab_size;
	pcre2_code *re;
	pcre2_match_data *md;
	/* BPE scratch: symbols as spans of the piece, their next state, a rank key. */
	uint32_t *st, *ln, *nst, *nln;
	size_t scap;
	char *key;
	size_t kcap;
	uint64_t lookups, hits;
};

void qe_gpt2_byte_alphabet(uint32_t cp_of[256], int16_t byte_of[512])
{
	int n = 0;
	for (int i = 0; i < 512; i++)
		byte_of[i] = -1;
	for (int b = 0; b < 256; b++) {
		int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
		cp_of[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
		byte_of[cp_of[b]] = (int16_t)b;
	}
}

long qe_gpt2_stand_in_bytes(const int16_t byte_of[512], const char *s, size_t len, char *out)
{
	const unsigned char *u = (const unsigned char *)s;
	long n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		if (u[i] < 0x80) {
			cp = u[i++];
		} else if ((u[i] & 0xE0) == 0xC0 && i + 1 < len && (u[i + 1] & 0xC0) == 0x80) {
			cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
			i += 2;
		} else {
			return -1; /* the alphabet ends at U+0143: two bytes at most */
		}
		if (cp >= 512 || byte_of[cp] < 0)
			return -1;
		out[n++] = (char)byte_of[cp];
	}
	return n;
}

static int load_vocab(qe_gpt2 *e, const char *path, const int16_t byte_of[512])
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return qe_fail(errno == ENOENT ? QE_ENOTFOUND : QE_EIO, "cannot open '%s': %s", path, strerror(errno));
	json_error_t jerr;
	json_t *root = json_loadf(f, 0, &jerr);
	fclose(f);
	if (!root)
		return qe_fail(QE_ECORRUPT, "'%s' line %d: not JSON: %s", path, jerr.line, jerr.text);
	int rc = QE_OK;
	if (!json_is_object(root)) {
		rc = qe_fail(QE_ECORRUPT, "'%s': not a JSON object of token -> id", path);
		goto free_json;
	}
	if ((rc = sm_init(&e->vocab, json_object_size(root))))
		goto free_json;
	const char *k;
	json_t *v;
	char buf[1024];
	json_object_foreach(root, k, v)
	{
		size_t klen = strlen(k);
		long n = klen < sizeof(buf) ? qe_gpt2_stand_in_bytes(byte_of, k, klen, buf) : -1;
		if (n <= 0) {
			rc = qe_fail(QE_ECORRUPT, "'%s': token \"%.60s\" is empty or has a character outside GPT-2's byte alphabet",
				     path, k);
			goto free_json;
		}
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 65535) {
			rc = qe_fail(QE_ECORRUPT, "'%s': token \"%.60s\" has no id in 0..65535", path, k);
			goto free_json;
		}
		int id = (int)json_integer_value(v);
		if ((rc = sm_put(&e->vocab, buf, (size_t)n, id, 0)))
			goto free_json;
		if (id + 1 > e->vocab_size)
			e->vocab_size = id + 1;
	}
free_json:
	json_decref(root);
	return rc;
}

static int load_merges(qe_gpt2 *e, const char *path, const int16_t byte_of[512])
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return qe_fail(errno == ENOENT ? QE_ENOTFOUND : QE_EIO, "cannot open '%s': %s", path, strerror(errno));
	char *text = NULL;
	size_t len = 0, cap = 0, got;
	int rc = QE_OK;
	do {
		if (len + 65536 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			char *t = realloc(text, cap);
			if (!t) {
				rc = qe_fail(QE_ENOMEM, "tokenizer: out of memory reading '%s'", path);
				goto close_file;
			}
			text = t;
		}
		got = fread(text + len, 1, cap - len, f);
		len += got;
	} while (got);
	if (ferror(f)) {
		rc = qe_fail(QE_EIO, "cannot read '%s': %s", path, strerror(errno));
		goto close_file;
	}
	if ((rc = sm_init(&e->ranks, 65536)))
		goto close_file;
	/*
	 * Encoder.js: lines = text.split('\n'); merges = lines.slice(1, -1): the
	 * first line ("#version: 0.2") and the last element (empty after the final
	 * newline) are not merges.
	 */
	size_t pos = 0, lineno = 0;
	int rank = 0;
	char key[2048];
	for (;;) {
		char *nl = memchr(text + pos, '\n', len - pos);
		if (!nl)
			break; /* the last element */
		size_t ll = (size_t)(nl - (text + pos));
		char *line = text + pos;
		pos += ll + 1;
		if (++lineno == 1)
			continue;
		/* Two pieces separated by whitespace. */
		const char *p[3];
		size_t pl[3];
		int np = 0;
		for (size_t i = 0; i < ll && np < 3;) {
			while (i < ll && strchr(" \t\r\v\f", line[i]))
				i++;
			if (i >= ll)
				break;
			size_t j = i;
			while (j < ll && !strchr(" \t\r\v\f", line[j]))
				j++;
			p[np] = line + i;
			pl[np++] = j - i;
			i = j;
		}
		if (np != 2 || pl[0] + pl[1] + 1 > sizeof(key)) {
			rc = qe_fail(QE_ECORRUPT, "'%s' line %zu: a merge is two pieces, found %d", path, lineno, np);
			goto close_file;
		}
		long n0 = qe_gpt2_stand_in_bytes(byte_of, p[0], pl[0], key);
		long n1 = n0 > 0 ? qe_gpt2_stand_in_bytes(byte_of, p[1], pl[1], key + n0 + 1) : -1;
		if (n0 <= 0 || n1 <= 0) {
			rc = qe_fail(QE_ECORRUPT, "'%s' line %zu: a piece has a character outside GPT-2's byte alphabet", path,
				     lineno);
			goto close_file;
		}
		key[n0] = ',';
		if ((rc = sm_put(&e->ranks, key, (size_t)(n0 + 1 + n1), rank++, 0)))
			goto close_file;
	}
	if (rank == 0)
		rc = qe_fail(QE_ECORRUPT, "'%s': no merges", path);
close_file:
	free(text);
	fclose(f);
	return rc;
}

static int compile_pattern(qe_gpt2 *e)
{
	int err;
	PCRE2_SIZE off;
	e->re = pcre2_compile((PCRE2_SPTR)pre_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
	if (!e->re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof(msg));
		return qe_fail(QE_EUNSUPPORTED, "tokenizer: PCRE2 refused the pre-tokenizer pattern at %zu: %s", (size_t)off,
			       (const char *)msg);
	}
	/* JIT where the library has it; the interpreter gives the same matches, slower. */
	(void)pcre2_jit_compile(e->re, PCRE2_JIT_COMPLETE);
	e->md = pcre2_match_data_create_from_pattern(e->re, NULL);
	return e->md ? QE_OK : qe_fail(QE_ENOMEM, "tokenizer: out of memory for PCRE2 match data");
}

int qe_gpt2_open(const char *dir, qe_gpt2 **out)
{
	*out = NULL;
	qe_gpt2 *e = calloc(1, sizeof(*e));
	if (!e)
		return qe_fail(QE_ENOMEM, "tokenizer: out of memory");
	uint32_t cp_of[256];
	int16_t byte_of[512];
	qe_gpt2_byte_alphabet(cp_of, byte_of);
	char path[4096];
	int rc;
	snprintf(path, sizeof(path), "%s/encoder.json", dir);
	if ((rc = load_vocab(e, path, byte_of)))
		goto free_encoder;
	snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
	if ((rc = load_merges(e, path, byte_of)))
		goto free_encoder;
	if ((rc = compile_pattern(e)) || (rc = sm_init(&e->cache, 1 << 16)))
		goto free_encoder;
	*out = e;
	return QE_OK;
free_encoder:
	qe_gpt2_free(e);
	return rc;
}

void qe_gpt2_free(qe_gpt2 *e)
{
	if (!e)
		return;
	sm_release(&e->vocab);
	sm_release(&e->ranks);
	sm_release(&e->cache);
	qe_tokbuf_release(&e->cache_toks);
	pcre2_match_data_free(e->md);
	pcre2_code_free(e->re);
	free(e->st);
	free(e->ln);
	free(e->nst);
	free(e->nln);
	free(e->key);
	free(e);
}

int qe_gpt2_vocab_size(const qe_gpt2 *e)
{
	return e->vocab_size;
}

void qe_gpt2_cache_stats(const qe_gpt2 *e, uint64_t *lookups, uint64_t *hits)
{
	*lookups = e->lookups;
	*hits = e->hits;
}

static int scratch(qe_gpt2 *e, size_t n)
{
	if (n > e->scap) {
		size_t cap = e->scap ? e->scap : 64;
		while (cap < n)
			cap *= 2;
		uint32_t *a = realloc(e->st, cap * 4), *b = a ? realloc(e->ln, cap * 4) : NULL;
		if (a)
			e->st = a;
		if (b)
			e->ln = b;
		uint32_t *c = b ? realloc(e->nst, cap * 4) : NULL, *d = c ? realloc(e->nln, cap * 4) : NULL;
		if (c)
			e->nst = c;
		if (d)
			e->nln = d;
		if (!d)
			return qe_fail(QE_ENOMEM, "tokenizer: out of memory for a %zu-byte piece", n);
		e->scap = cap;
	}
	if (2 * n + 1 > e->kcap) {
		char *k = realloc(e->key, 2 * n + 1);
		if (!k)
			return qe_fail(QE_ENOMEM, "tokenizer: out of memory for a %zu-byte piece", n);
		e->key = k;
		e->kcap = 2 * n + 1;
	}
	return QE_OK;
}

/* Rank of the adjacent symbols a, b of piece p (Encoder.js: bpe_ranks[[a, b]]), or -1. */
static int pair_rank(qe_gpt2 *e, const char *p, uint32_t as, uint32_t al, uint32_t bs, uint32_t bl)
{
	memcpy(e->key, p + as, al);
	e->key[al] = ',';
	memcpy(e->key + al + 1, p + bs, bl);
	const sm_slot *s = sm_get(&e->ranks, e->key, al + 1 + bl);
	return s ? s->a : -1;
}

/* Encoder.js bpe(): the symbols of piece p[0..n) after merging, in e->st/e->ln; returns their count. */
static size_t bpe(qe_gpt2 *e, const char *p, size_t n)
{
	uint32_t *st = e->st, *ln = e->ln, *nst = e->nst, *nln = e->nln;
	size_t ns = n;
	for (size_t i = 0; i < n; i++) {
		st[i] = (uint32_t)i;
		ln[i] = 1;
	}
	while (ns >= 2) {
		/* The lowest rank; among equal ranks the last pair (minPairs[rank] = pair keeps the last). */
		int best = -1;
		size_t bi = 0;
		for (size_t i = 0; i + 1 < ns; i++) {
			int r = pair_rank(e, p, st[i], ln[i], st[i + 1], ln[i + 1]);
			if (r >= 0 && (best < 0 || r <= best)) {
				best = r;
				bi = i;
			}
		}
		if (best < 0)
			break;
		const char *first = p + st[bi], *second = p + st[bi + 1];
		uint32_t fl = ln[bi], sl = ln[bi + 1];
		size_t nn = 0;
		for (size_t i = 0; i < ns;) {
			if (ln[i] == fl && memcmp(p + st[i], first, fl) == 0 && i + 1 < ns && ln[i + 1] == sl &&
			    memcmp(p + st[i + 1], second, sl) == 0) {
				nst[nn] = st[i];
				nln[nn++] = fl + sl;
				i += 2;
			} else {
				nst[nn] = st[i];
				nln[nn++] = ln[i];
				i++;
			}
		}
		uint32_t *t = st;
		st = nst;
		nst = t;
		t = ln;
		ln = nln;
		nln = t;
		ns = nn;
	}
	/* The scratch arrays may have swapped roles: keep the result in e->st/e->ln. */
	e->st = st;
	e->ln = ln;
	e->nst = nst;
	e->nln = nln;
	return ns;
}

static int encode_piece(qe_gpt2 *e, const char *p, size_t n, qe_tokbuf *out)
{
	e->lookups++;
	const sm_slot *c = sm_get(&e->cache, p, n);
	if (c) {
		e->hits++;
		QE_TRY(tb_reserve(out, (size_t)c->b));
		memcpy(out->v + out->n, e->cache_toks.v + c->a, (size_t)c->b * sizeof(int32_t));
		out->n += (size_t)c->b;
		return QE_OK;
	}
	QE_TRY(scratch(e, n));
	size_t ns = bpe(e, p, n);
	QE_TRY(tb_reserve(out, ns));
	size_t n0 = out->n;
	for (size_t i = 0; i < ns; i++) {
		const sm_slot *v = sm_get(&e->vocab, p + e->st[i], e->ln[i]);
		if (!v) {
			out->n = n0;
			return qe_fail(QE_EINVAL, "tokenizer: BPE left the piece \"%.*s\" of \"%.*s\", which the vocabulary lacks",
				       (int)e->ln[i], p + e->st[i], (int)(n < 80 ? n : 80), p);
		}
		out->v[out->n++] = v->a;
	}
	if (e->cache.n >= CACHE_MAX_ENTRIES || e->cache_toks.n + ns > CACHE_MAX_TOKENS) {
		sm_clear(&e->cache);
		e->cache_toks.n = 0;
	}
	/* A cache that cannot grow only costs time: the tokens are already out. */
	if (tb_reserve(&e->cache_toks, ns) == QE_OK) {
		size_t at = e->cache_toks.n;
		memcpy(e->cache_toks.v + at, out->v + n0, ns * sizeof(int32_t));
		if (sm_put(&e->cache, p, n, (int32_t)at, (int32_t)ns) == QE_OK)
			e->cache_toks.n += ns;
	}
	qe_clear_error();
	return QE_OK;
}

int qe_gpt2_encode(qe_gpt2 *e, const char *text, size_t len, qe_tokbuf *out)
{
	size_t n0 = out->n, start = 0;
	uint32_t opts = 0; /* the first match checks the whole text is UTF-8; later ones need not */
	int rc = QE_OK;
	while (start < len) {
		int m = pcre2_match(e->re, (PCRE2_SPTR)text, len, start, opts, e->md, NULL);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(m, msg, sizeof(msg));
			if (m <= PCRE2_ERROR_UTF8_ERR1 && m >= PCRE2_ERROR_UTF8_ERR21)
				rc = qe_fail(QE_EINVAL, "not valid UTF-8 at byte %zu: %s", (size_t)pcre2_get_startchar(e->md),
					     (const char *)msg);
			else
				rc = qe_fail(QE_EINVAL, "tokenizer: PCRE2 match failed at byte %zu: %s", start,
					     (const char *)msg);
			break;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		if (ov[1] <= ov[0]) { /* every alternative takes a character: cannot happen */
			rc = qe_fail(QE_EINVAL, "tokenizer: empty pre-token at byte %zu", (size_t)ov[0]);
			break;
		}
		if ((rc = encode_piece(e, text + ov[0], ov[1] - ov[0], out)))
			break;
		start = ov[1];
		opts = PCRE2_NO_UTF_CHECK;
	}
	if (rc)
		out->n = n0;
	return rc;
}
