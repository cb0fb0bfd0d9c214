/*
 * data.c - loading JSONL text (bytes as tokens) or llm.c token shards, and
 * the deterministic sampler.  A shard named X_train.bin with X_val.bin beside
 * it (`qeffect tokenize` output) takes its held-out stream from X_val.bin.
 */
#include "runtime/job/data.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "runtime/core/rng.h"
#include "runtime/core/status.h"

static const char builtin_text[] =
	"The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
	"All that glitters is not gold. Where there is a will there is a way. "
	"Actions speak louder than words. The early bird catches the worm. "
	"Practice makes perfect. Knowledge is power. Time is money. ";

typedef struct tokbuf {
	int32_t *v;
	int64_t n, cap;
} tokbuf;

static int tb_push(tokbuf *b, const unsigned char *s, size_t n)
{
	if (b->n + (int64_t)n + 1 > b->cap) {
		int64_t cap = b->cap ? b->cap : 1 << 16;
		while (cap < b->n + (int64_t)n + 1)
			cap *= 2;
		int32_t *v = realloc(b->v, (size_t)cap * sizeof(int32_t));
		if (!v)
			return qe_fail(QE_ENOMEM, "data: out of memory for %lld tokens", (long long)cap);
		b->v = v;
		b->cap = cap;
	}
	for (size_t i = 0; i < n; i++)
		b->v[b->n++] = s[i];
	b->v[b->n++] = '\n'; /* record separator */
	return QE_OK;
}

/*
 * The next line of f into *line (grown as needed, NUL-terminated, the '\n'
 * kept): its length, 0 at the end of the file, -1 with an error set when it
 * is longer than QE_DATA_RECORD_MAX bytes (named by lineno) or cannot be
 * held.  Bounded, unlike getline: one line never takes more than the limit.
 */
static int64_t read_record(const char *path, FILE *f, int64_t lineno, char **line, size_t *cap)
{
	size_t len = 0;
	for (;;) {
		if (*cap - len < 2) {
			size_t nc = *cap ? *cap * 2 : 1 << 16;
			char *p = realloc(*line, nc);
			if (!p) {
				qe_fail(QE_ENOMEM, "data '%s' line %lld: out of memory", path, (long long)lineno);
				return -1;
			}
			*line = p;
			*cap = nc;
		}
		if (!fgets(*line + len, (int)(*cap - len > INT32_MAX ? INT32_MAX : *cap - len), f))
			return (int64_t)len; /* end of file (or a read error, which the caller checks) */
		len += strlen(*line + len);
		if (len > QE_DATA_RECORD_MAX) {
			qe_fail(QE_ECORRUPT, "data '%s' line %lld: a record over %d bytes (the limit of one JSONL record)",
				path, (long long)lineno, QE_DATA_RECORD_MAX);
			return -1;
		}
		if (len > 0 && (*line)[len - 1] == '\n')
			return (int64_t)len;
	}
}

static int load_jsonl(const char *path, FILE *f, qe_data *d)
{
	tokbuf tr = { 0 }, ho = { 0 };
	char *line = NULL;
	size_t cap = 0;
	int64_t len;
	int64_t lineno = 0;
	int rc = QE_OK;
	while ((len = read_record(path, f, lineno + 1, &line, &cap)) > 0) {
		lineno++;
		if (len <= 1)
			continue;
		json_error_t jerr;
		json_t *obj = json_loadb(line, (size_t)len, 0, &jerr);
		if (!obj) {
			rc = qe_fail(QE_ECORRUPT, "data '%s' line %lld: not JSON: %s", path, (long long)lineno, jerr.text);
			break;
		}
		json_t *text = json_object_get(obj, "text");
		if (!json_is_string(text)) {
			json_decref(obj);
			rc = qe_fail(QE_ECORRUPT, "data '%s' line %lld: no string field \"text\"", path, (long long)lineno);
			break;
		}
		tokbuf *dst = (d->records % 5 == 4) ? &ho : &tr;
		rc = tb_push(dst, (const unsigned char *)json_string_value(text), json_string_length(text));
		json_decref(obj);
		if (rc)
			break;
		d->records++;
	}
	free(line);
	if (!rc && len < 0)
		rc = QE_ECORRUPT; /* read_record said why */
	if (!rc && ferror(f))
		rc = qe_fail(QE_EIO, "data '%s': read error: %s", path, strerror(errno));
	if (!rc && (d->records < 2 || ho.n == 0))
		rc = qe_fail(QE_ECORRUPT, "data '%s': needs at least 5 records (has %lld)", path, (long long)d->records);
	if (rc) {
		free(tr.v);
		free(ho.v);
		return rc;
	}
	d->train = tr.v;
	d->ntrain = tr.n;
	d->heldout = ho.v;
	d->nheldout = ho.n;
	d->vocab = 256;
	return QE_OK;
}

/*
 * llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens,
 * exactly as many as the header says (the file's size is checked against it).
 * OUT: *raw (malloc'd, n tokens), *maxtok.
 */
static int read_shard(const char *path, FILE *f, uint16_t **raw, int64_t *count, int *maxtok)
{
	int32_t hdr[256];
	struct stat sb;
	if (fstat(fileno(f), &sb))
		return qe_fail(QE_EIO, "data '%s': cannot stat: %s", path, strerror(errno));
	if (fread(hdr, sizeof(hdr), 1, f) != 1)
		return qe_fail(QE_ECORRUPT, "data '%s': shorter than the 1024-byte llm.c header", path);
	if (hdr[0] != 20240520)
		return qe_fail(QE_ECORRUPT, "data '%s': bad magic %d (want 20240520)", path, hdr[0]);
	if (hdr[1] != 1)
		return qe_fail(QE_ECORRUPT, "data '%s': llm.c shard version %d; this reader takes version 1 (uint16 tokens)",
			       path, hdr[1]);
	int64_t n = hdr[2];
	if (n < 10)
		return qe_fail(QE_ECORRUPT, "data '%s': only %lld tokens", path, (long long)n);
	if ((int64_t)sb.st_size > (int64_t)sizeof(hdr) + 2 * n)
		return qe_fail(QE_ECORRUPT, "data '%s': the header says %lld tokens but the file holds %lld bytes after it "
			       "(%lld tokens)", path, (long long)n, (long long)(sb.st_size - (off_t)sizeof(hdr)),
			       (long long)((sb.st_size - (off_t)sizeof(hdr)) / 2));
	uint16_t *r = malloc((size_t)n * 2);
	if (!r)
		return qe_fail(QE_ENOMEM, "data '%s': out of memory", path);
	if (fread(r, 2, (size_t)n, f) != (size_t)n) {
		free(r);
		return qe_fail(QE_ECORRUPT, "data '%s': truncated: header says %lld tokens", path, (long long)n);
	}
	int mx = 0;
	for (int64_t i = 0; i < n; i++)
		if (r[i] > mx)
			mx = r[i];
	*raw = r;
	*count = n;
	*maxtok = mx;
	return QE_OK;
}

static int32_t *widen(const uint16_t *raw, int64_t n)
{
	int32_t *v = malloc((size_t)n * 4);
	if (v)
		for (int64_t i = 0; i < n; i++)
			v[i] = raw[i];
	return v;
}

/*
 * A shard X_train.bin with X_val.bin beside it (as `qeffect tokenize` writes
 * them): the whole train shard is the train stream and the val shard the
 * held-out one.  A shard alone: its last fifth is held out.
 */
static int load_shard(const char *path, FILE *f, qe_data *d)
{
	char val[sizeof(d->path) + 16] = "";
	size_t plen = strlen(path);
	if (plen > 10 && strcmp(path + plen - 10, "_train.bin") == 0) {
		snprintf(val, sizeof(val), "%.*s_val.bin", (int)(plen - 10), path);
		if (access(val, F_OK))
			val[0] = 0;
	}
	uint16_t *raw;
	int64_t n;
	int maxtok;
	QE_TRY(read_shard(path, f, &raw, &n, &maxtok));
	if (val[0]) {
		FILE *vf = fopen(val, "rb");
		if (!vf) {
			free(raw);
			return qe_fail(QE_EIO, "data '%s': cannot open: %s", val, strerror(errno));
		}
		uint16_t *vraw;
		int64_t vn;
		int vmax;
		int rc = read_shard(val, vf, &vraw, &vn, &vmax);
		fclose(vf);
		if (rc) {
			free(raw);
			return rc;
		}
		d->train = widen(raw, n);
		d->heldout = widen(vraw, vn);
		free(raw);
		free(vraw);
		if (!d->train || !d->heldout) {
			qe_data_free(d);
			return qe_fail(QE_ENOMEM, "data '%s': out of memory", path);
		}
		d->ntrain = n;
		d->nheldout = vn;
		d->records = 2;
		d->vocab = (maxtok > vmax ? maxtok : vmax) + 1;
		return QE_OK;
	}
	int64_t nho = n / 5, ntr = n - nho;
	d->train = widen(raw, ntr);
	d->heldout = widen(raw + ntr, nho);
	free(raw);
	if (!d->train || !d->heldout) {
		qe_data_free(d);
		return qe_fail(QE_ENOMEM, "data '%s': out of memory", path);
	}
	d->ntrain = ntr;
	d->nheldout = nho;
	d->records = 1;
	d->vocab = maxtok + 1;
	return QE_OK;
}

uint64_t qe_data_fingerprint(const qe_data *d)
{
	/* The train stream's hash seeds the held-out one's: a token moved across the split changes it. */
	uint64_t h = XXH3_64bits(d->train, (size_t)d->ntrain * sizeof(int32_t));
	return XXH3_64bits_withSeed(d->heldout, (size_t)d->nheldout * sizeof(int32_t), h ^ (uint64_t)d->ntrain);
}

int qe_data_load(const char *path, qe_data *out)
{
	memset(out, 0, sizeof(*out));
	if (!path || !path[0]) {
		tokbuf tr = { 0 }, ho = { 0 };
		int rc = 0;
		for (int i = 0; i < 40 && !rc; i++)
			rc = tb_push(i % 5 == 4 ? &ho : &tr, (const unsigned char *)builtin_text, sizeof(builtin_text) - 1);
		if (rc) {
			free(tr.v);
			free(ho.v);
			return rc;
		}
		out->train = tr.v;
		out->ntrain = tr.n;
		out->heldout = ho.v;
		out->nheldout = ho.n;
		out->records = 40;
		out->vocab = 256;
		snprintf(out->path, sizeof(out->path), "(built-in text)");
		return QE_OK;
	}
	snprintf(out->path, sizeof(out->path), "%s", path);
	/* a device, a pipe or a directory has no end that bounds what is read (and a pipe blocks the open) */
	struct stat sb;
	if (stat(path, &sb))
		return qe_fail(QE_EIO, "data '%s': cannot open: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return qe_fail(QE_EINVAL, "data '%s': %s: training data is a JSONL file or an llm.c shard", path,
			       S_ISDIR(sb.st_mode)    ? "a directory"
			       : S_ISCHR(sb.st_mode)  ? "a character device"
			       : S_ISFIFO(sb.st_mode) ? "a pipe"
			       : S_ISBLK(sb.st_mode)  ? "a block device"
						      : "not a regular file");
	FILE *f = fopen(path, "rb");
	if (!f)
		return qe_fail(QE_EIO, "data '%s': cannot open: %s", path, strerror(errno));
	size_t plen = strlen(path);
	int rc = plen > 4 && strcmp(path + plen - 4, ".bin") == 0 ? load_shard(path, f, out) : load_jsonl(path, f, out);
	fclose(f);
	return rc;
}

int qe_data_load_stream(const char *path, int32_t **tokens, int64_t *n, int *max_token)
{
	*tokens = NULL;
	*n = 0;
	struct stat sb;
	if (stat(path, &sb))
		return qe_fail(QE_EIO, "data '%s': cannot open: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return qe_fail(QE_EINVAL, "data '%s': not a regular file (an llm.c .bin shard is)", path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return qe_fail(QE_EIO, "data '%s': cannot open: %s", path, strerror(errno));
	uint16_t *raw;
	int rc = read_shard(path, f, &raw, n, max_token);
	fclose(f);
	if (rc)
		return rc;
	*tokens = widen(raw, *n);
	free(raw);
	if (!*tokens)
		return qe_fail(QE_ENOMEM, "data '%s': out of memory", path);
	return QE_OK;
}

void qe_data_free(qe_data *d)
{
	free(d->train);
	free(d->heldout);
	d->train = d->heldout = NULL;
	d->ntrain = d->nheldout = 0;
}

int qe_data_sample(const qe_data *d, int heldout, uint64_t seed, int64_t step, int replica, int m, int T,
		   int32_t *tokens, int32_t *targets)
{
	const int32_t *src = heldout ? d->heldout : d->train;
	int64_t n = heldout ? d->nheldout : d->ntrain;
	if (n < T + 2)
		return qe_fail(QE_EINVAL, "data '%s': %s split has %lld tokens, fewer than sequence length %d + 2",
			       d->path, heldout ? "held-out" : "train", (long long)n, T);
	uint64_t stream = ((uint64_t)step << 24) ^ ((uint64_t)replica << 12) ^ (uint64_t)m ^ (heldout ? 1ULL << 63 : 0);
	qe_rng r = qe_rng_derive(seed, stream);
	int64_t off = (int64_t)qe_rng_below(&r, (uint64_t)(n - T - 1));
	for (int t = 0; t < T; t++) {
		tokens[t] = src[off + t];
		targets[t] = src[off + t + 1];
	}
	return QE_OK;
}

int qe_data_sample_batch(const qe_data *d, int heldout, uint64_t seed, int64_t step, int replica, int m, int batch,
			 int T, int vocab, const char *model, int32_t *tokens, int32_t *targets)
{
	if (batch < 1 || (int64_t)m * batch + batch - 1 > 0xfff)
		return qe_fail(QE_EINVAL, "data '%s': microbatch %d of %d sequences is beyond the sampler's 4096 sequences "
			       "per step", d->path, m, batch);
	for (int b = 0; b < batch; b++)
		QE_TRY(qe_data_sample(d, heldout, seed, step, replica, m * batch + b, T, tokens + (int64_t)b * T,
				      targets + (int64_t)b * T));
	int32_t top = -1;
	for (int64_t i = 0; i < (int64_t)batch * T; i++) {
		if (tokens[i] > top)
			top = tokens[i];
		if (targets[i] > top)
			top = targets[i];
	}
	if (top >= vocab)
		return qe_fail(QE_EINVAL, "data '%s': token %d does not fit vocabulary %d of model '%s'", d->path, (int)top,
			       vocab, model);
	return QE_OK;
}

int qe_data_check_vocab(const qe_data *d, int vocab, const char *model)
{
	if (d->vocab > vocab)
		return qe_fail(QE_EINVAL, "data '%s': token %d does not fit vocabulary %d of model '%s' (its largest token)",
			       d->path, d->vocab - 1, vocab, model);
	return QE_OK;
}
