/*
 * import.c - `train --init-from`: a GPT-2 model file's tensors into the
 * ranks' parameters (see import.h for the formats and what is checked).
 *
 * The command opens the file once before anything is written (so a bad file
 * creates no run directory) and records its hash; each rank opens it again
 * (a header only) and reads just its own stages' slices, placed by the
 * naming table of the run's cut, so the same file loads under any --pp.
 */
#include "cli/import.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_F32 3
#define LLMC_HEADER_INTS 256

void cli_import_release(cli_import *im)
{
	qe_names_release(&im->names);
	free(im->src);
	memset(im, 0, sizeof(*im));
}

static int is_dir(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static uint64_t le64(const unsigned char *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static int32_t le32(const unsigned char *b)
{
	return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

static int read_at(int fd, const char *path, void *dst, size_t n, uint64_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = pread(fd, (char *)dst + got, n - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return qe_fail(QE_EIO, "read '%s' at byte %llu: %s", path, (unsigned long long)(off + got),
				       strerror(errno));
		if (k == 0)
			return qe_fail(QE_ECORRUPT, "'%s' ends at byte %llu, before the %zu bytes wanted at %llu", path,
				       (unsigned long long)(off + got), n, (unsigned long long)off);
		got += (size_t)k;
	}
	return QE_OK;
}

static int hash_file(int fd, cli_import *im)
{
	XXH3_state_t *st = XXH3_createState();
	size_t cap = 1 << 20;
	unsigned char *buf = malloc(cap);
	int rc = st && buf ? QE_OK : qe_fail(QE_ENOMEM, "hashing '%s': out of memory", im->path);
	if (!rc)
		XXH3_128bits_reset(st);
	for (uint64_t off = 0; !rc && off < im->size; off += cap) {
		size_t n = im->size - off < cap ? (size_t)(im->size - off) : cap;
		if (!(rc = read_at(fd, im->path, buf, n, off)))
			XXH3_128bits_update(st, buf, n);
	}
	if (!rc) {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
		for (int i = 0; i < 16; i++)
			snprintf(im->hash + 2 * i, 3, "%02x", c.digest[i]);
	}
	XXH3_freeState(st);
	free(buf);
	return rc;
}

/* "[a, b]" of a shape for messages. */
static void shape_str(char *buf, size_t len, int nd, const int64_t *d)
{
	if (nd == 1)
		snprintf(buf, len, "[%lld]", (long long)d[0]);
	else
		snprintf(buf, len, "[%lld, %lld]", (long long)d[0], (long long)d[1]);
}

/* The shape parameter e has in a Hugging Face file (Conv1D transposed). */
static void hf_shape(const qe_named *e, int64_t d[2])
{
	d[0] = e->conv1d ? e->shape[1] : e->shape[0];
	d[1] = e->conv1d ? e->shape[0] : e->shape[1];
}

static const char *model_str(const cli_import *im, char *buf, size_t len)
{
	const qe_model_config *m = &im->model;
	snprintf(buf, len, "the model '%s' (layers %d, hidden %d, heads %d, ffn %d, seq %d, vocab %d)", m->preset,
		 m->layers, m->hidden, m->heads, m->ffn, m->seq, m->vocab);
	return buf;
}

/* config.json beside model.safetensors: the fields a shape cannot show (n_head) and the rest, when present. */
static int check_hf_config(cli_import *im, const char *cfg_path)
{
	json_error_t err;
	json_t *c = json_load_file(cfg_path, 0, &err);
	if (!c)
		return qe_fail(QE_ECORRUPT, "'%s': not JSON (line %d: %s)", cfg_path, err.line, err.text);
	const qe_model_config *m = &im->model;
	const struct { const char *key; int want; } f[] = { { "n_layer", m->layers }, { "n_embd", m->hidden },
							   { "n_head", m->heads },   { "n_positions", m->seq },
							   { "vocab_size", m->vocab } };
	int rc = QE_OK;
	char ms[256];
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]) && !rc; i++) {
		json_t *v = json_object_get(c, f[i].key);
		if (v && (!json_is_integer(v) || json_integer_value(v) != f[i].want))
			rc = qe_fail(QE_EINVAL, "'%s': %s is %lld; %s needs %d", cfg_path, f[i].key,
				     json_is_integer(v) ? (long long)json_integer_value(v) : -1LL,
				     model_str(im, ms, sizeof(ms)), f[i].want);
	}
	json_decref(c);
	return rc;
}

/* A name the file may hold that is not a parameter: skipped.  Else -1 (not ours) or 0 (a parameter). */
static int skippable(const cli_import *im, const char *name, const qe_named **e)
{
	int layer, n = 0;
	*e = qe_names_find(&im->names, name);
	if (*e)
		return (*e)->source != QE_NAME_PARAMS; /* our own export's moments and FP8 meta */
	if (sscanf(name, "h.%d.attn.%n", &layer, &n) == 1 && n > 0 && layer >= 0 && layer < im->model.layers &&
	    (strcmp(name + n, "bias") == 0 || strcmp(name + n, "masked_bias") == 0))
		return 1; /* old GPT-2 files' causal mask buffers */
	return -1;
}

/* The head takes wte's bytes (wte is checked before the head: the model's order). */
static void head_from_wte(cli_import *im, int head)
{
	int wi = (int)(qe_names_find(&im->names, "wte.weight") - im->names.t);
	im->src[head] = im->src[wi];
	im->src[head].from = wi;
}

/*
 * Parameter p's header entry v (named key; NULL when the file lacks it):
 * dtype F32, the model's shape, bytes inside the file's data.  A missing
 * lm_head.weight becomes a copy of wte (a tied model's head is wte's copy
 * anyway: tie_head below).
 */
static int check_entry(cli_import *im, int p, json_t *v, const char *key, uint64_t data, uint64_t dbytes)
{
	char ms[256];
	const qe_named *e = &im->names.t[p];
	if (!v && strcmp(e->name, "lm_head.weight") == 0) {
		head_from_wte(im, p);
		im->head_tied = !e->tied; /* an untied head starting from wte is news; a tied one is wte by definition */
		return QE_OK;
	}
	if (!v)
		return qe_fail(QE_EINVAL, "'%s': has no tensor '%s%s' (nor '%s'), which %s needs", im->path,
			       strncmp(e->name, "lm_head.", 8) ? "transformer." : "", e->name, e->name,
			       model_str(im, ms, sizeof(ms)));
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *of = json_object_get(v, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(of) || json_array_size(of) != 2 ||
	    !json_is_integer(json_array_get(of, 0)) || !json_is_integer(json_array_get(of, 1)))
		return qe_fail(QE_ECORRUPT, "'%s': tensor '%s': its header entry lacks dtype, shape or data_offsets",
			       im->path, key);
	if (strcmp(json_string_value(dt), "F32"))
		return qe_fail(QE_EINVAL, "'%s': tensor '%s' is %s; --init-from reads F32 tensors", im->path, key,
			       json_string_value(dt));
	int64_t want[2], got[2] = { 0, 1 };
	hf_shape(e, want);
	size_t nd = json_array_size(sh);
	for (size_t i = 0; i < nd && i < 2; i++)
		got[i] = json_is_integer(json_array_get(sh, i)) ? json_integer_value(json_array_get(sh, i)) : -1;
	if ((int)nd != e->ndim || got[0] != want[0] || (nd == 2 && got[1] != want[1])) {
		char gs[64], ws[64];
		if (nd >= 1 && nd <= 2)
			shape_str(gs, sizeof(gs), (int)nd, got);
		else
			snprintf(gs, sizeof(gs), "of %zu dimensions", nd);
		shape_str(ws, sizeof(ws), e->ndim, want);
		return qe_fail(QE_EINVAL, "'%s': tensor '%s' is %s in the file; %s needs %s", im->path, key, gs,
			       model_str(im, ms, sizeof(ms)), ws);
	}
	json_int_t b = json_integer_value(json_array_get(of, 0)), en = json_integer_value(json_array_get(of, 1));
	uint64_t need = (uint64_t)qe_named_floats(e) * 4;
	if (b < 0 || en < b || (uint64_t)en > dbytes)
		return qe_fail(QE_ECORRUPT,
			       "'%s': tensor '%s': data_offsets [%lld, %lld] lie outside the file's %llu data bytes "
			       "(truncated, or a header that does not match the file)",
			       im->path, key, (long long)b, (long long)en, (unsigned long long)dbytes);
	if ((uint64_t)(en - b) != need)
		return qe_fail(QE_ECORRUPT, "'%s': tensor '%s': data_offsets [%lld, %lld] hold %lld bytes; F32 of its shape "
					    "needs %llu",
			       im->path, key, (long long)b, (long long)en, (long long)(en - b), (unsigned long long)need);
	im->src[p].offset = data + (uint64_t)b;
	im->src[p].file_rows = e->shape[0];
	im->src[p].transposed = e->conv1d;
	im->src[p].from = p;
	return QE_OK;
}

/*
 * A tied model's head is wte's copy, so it takes the file's wte.  A file
 * with an lm_head.weight of other bytes holds an untied model: loading wte
 * into both copies would drop its head without a word, so it is refused.
 * The two are compared a slice at a time, bytes as they are in the file
 * (both [vocab, C], neither transposed).
 */
static int tie_head(cli_import *im, int fd)
{
	const qe_named *h = qe_names_find(&im->names, "lm_head.weight"), *w = qe_names_find(&im->names, "wte.weight");
	int hi = (int)(h - im->names.t), wi = (int)(w - im->names.t);
	if (im->src[hi].from != hi) /* not in the file: already wte's */
		return QE_OK;
	uint64_t total = (uint64_t)qe_named_floats(h) * 4, slice = 1 << 20;
	unsigned char *a = malloc(slice), *b = malloc(slice);
	int rc = a && b ? QE_OK : qe_fail(QE_ENOMEM, "'%s': out of memory comparing lm_head.weight with wte", im->path);
	for (uint64_t off = 0; !rc && off < total; off += slice) {
		size_t n = total - off < slice ? (size_t)(total - off) : (size_t)slice;
		if ((rc = read_at(fd, im->path, a, n, im->src[hi].offset + off)) ||
		    (rc = read_at(fd, im->path, b, n, im->src[wi].offset + off)))
			break;
		if (memcmp(a, b, n)) {
			size_t at = 0;
			while (a[at] == b[at])
				at++;
			int64_t fl = (int64_t)((off + at) / 4), C = h->shape[1];
			rc = qe_fail(QE_EINVAL,
				     "'%s': its lm_head.weight differs from its wte.weight (first at row %lld, column %lld): "
				     "the file's head is a tensor of its own, but this model ties its head to wte "
				     "(--tie-embeddings on, the gpt2 presets' default) and would drop it; pass "
				     "--tie-embeddings off to load the head as it is",
				     im->path, (long long)(fl / C), (long long)(fl % C));
		}
	}
	free(a);
	free(b);
	if (!rc)
		head_from_wte(im, hi);
	return rc;
}

static int open_safetensors(cli_import *im, int fd)
{
	char ms[256];
	unsigned char lenb[8];
	if (im->size < 8)
		return qe_fail(QE_ECORRUPT, "'%s': %llu bytes, shorter than safetensors' 8-byte header length", im->path,
			       (unsigned long long)im->size);
	int rc = read_at(fd, im->path, lenb, 8, 0);
	if (rc)
		return rc;
	uint64_t hl = le64(lenb);
	if (hl > im->size - 8)
		return qe_fail(QE_ECORRUPT, "'%s': its header says it is %llu bytes, but the file has %llu after the length",
			       im->path, (unsigned long long)hl, (unsigned long long)(im->size - 8));
	if (hl > (100u << 20)) /* the format's own limit */
		return qe_fail(QE_ECORRUPT, "'%s': a safetensors header of %llu bytes (the format allows 100 MB)", im->path,
			       (unsigned long long)hl);
	char *hdr = malloc(hl + 1);
	if (!hdr)
		return qe_fail(QE_ENOMEM, "'%s': out of memory for a header of %llu bytes", im->path, (unsigned long long)hl);
	rc = read_at(fd, im->path, hdr, hl, 8);
	json_error_t err;
	json_t *h = rc ? NULL : json_loadb(hdr, hl, 0, &err);
	free(hdr);
	if (rc)
		return rc;
	if (!json_is_object(h)) {
		json_decref(h);
		return qe_fail(QE_ECORRUPT, "'%s': the safetensors header is not a JSON object (%s)", im->path,
			       h ? "another JSON value" : err.text);
	}
	uint64_t data = 8 + hl, dbytes = im->size - data;
	/* The file's entry of each parameter (borrowed from h); checked below in the model's order. */
	json_t **ent = calloc((size_t)im->names.nparams, sizeof(*ent));
	const char **keys = calloc((size_t)im->names.nparams, sizeof(*keys));
	if (!ent || !keys)
		rc = qe_fail(QE_ENOMEM, "'%s': out of memory", im->path);
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v)
	{
		if (rc)
			break;
		if (strcmp(key, "__metadata__") == 0)
			continue;
		const char *name = strncmp(key, "transformer.", 12) == 0 ? key + 12 : key;
		const qe_named *e;
		int sk = skippable(im, name, &e), layer;
		if (sk > 0) {
			im->skipped++;
		} else if (sk < 0 && sscanf(name, "h.%d.", &layer) == 1 && (layer < 0 || layer >= im->model.layers)) {
			rc = qe_fail(QE_EINVAL, "'%s': tensor '%s' is of block h.%d, but %s has blocks h.0 .. h.%d", im->path,
				     key, layer, model_str(im, ms, sizeof(ms)), im->model.layers - 1);
		} else if (sk < 0) {
			rc = qe_fail(QE_EINVAL, "'%s': tensor '%s' is not a GPT-2 parameter qeffect knows", im->path, key);
		} else if (ent[e - im->names.t]) {
			rc = qe_fail(QE_ECORRUPT, "'%s': tensor '%s' appears twice (with and without 'transformer.')", im->path,
				     key);
		} else {
			ent[e - im->names.t] = v;
			keys[e - im->names.t] = key;
		}
	}
	for (int p = 0; !rc && p < im->names.nparams; p++)
		rc = check_entry(im, p, ent[p], keys[p], data, dbytes);
	if (!rc && im->model.tie_embeddings)
		rc = tie_head(im, fd);
	json_decref(h);
	free(ent);
	free(keys);
	return rc;
}

/* A tensor of llm.c's file by its name there and ours ("h.N." for a block's, stacked over the layers). */
static const char *llmc_name(const qe_named *e, char *buf, size_t len)
{
	static const char *const n[QE_LLMC_TENSORS] = { "wte",	    "wpe",  "ln1w", "ln1b", "qkvw",	"qkvb",
							  "attprojw", "attprojb", "ln2w", "ln2b", "fcw",	"fcb",
							  "fcprojw",  "fcprojb",  "lnfw", "lnfb" };
	if (e->layer >= 0)
		snprintf(buf, len, "%s (h.N.%s, all layers)", n[e->llmc], strchr(e->name + 2, '.') + 1);
	else
		snprintf(buf, len, "%s (%s)", n[e->llmc], e->name);
	return buf;
}

static int open_llmc(cli_import *im, int fd)
{
	char ln[128];
	char ms[256];
	unsigned char hb[LLMC_HEADER_INTS * 4];
	const qe_model_config *m = &im->model;
	if (im->size < sizeof(hb))
		return qe_fail(QE_ECORRUPT, "'%s': %llu bytes, shorter than llm.c's %zu-byte header", im->path,
			       (unsigned long long)im->size, sizeof(hb));
	QE_TRY(read_at(fd, im->path, hb, sizeof(hb), 0));
	int32_t h[8];
	for (int i = 0; i < 8; i++)
		h[i] = le32(hb + 4 * i);
	if (h[0] != LLMC_MAGIC)
		return qe_fail(QE_ECORRUPT, "'%s': bad magic %d: not an llm.c model file (magic %d)", im->path, h[0],
			       LLMC_MAGIC);
	if (h[1] != LLMC_VERSION_F32)
		return qe_fail(QE_EINVAL, "'%s': llm.c model file version %d; --init-from reads version %d (f32)", im->path,
			       h[1], LLMC_VERSION_F32);
	int maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
	if (m->ffn != 4 * m->hidden)
		return qe_fail(QE_EINVAL, "'%s': llm.c's GPT-2 has an MLP of 4 x hidden; %s does not", im->path,
			       model_str(im, ms, sizeof(ms)));
	if (L != m->layers || NH != m->heads)
		return qe_fail(QE_EINVAL, "'%s': the file's model has %d layers and %d heads; %s", im->path, L, NH,
			       model_str(im, ms, sizeof(ms)));
	if (Vp < V || V < 1 || C < 1 || maxT < 1)
		return qe_fail(QE_ECORRUPT, "'%s': header: vocabulary %d padded to %d, hidden %d, seq %d", im->path, V, Vp,
			       C, maxT);
	/* llm.c's tensors in its order; per-block ones stacked over the layers. */
	int64_t start[QE_LLMC_TENSORS], per[QE_LLMC_TENSORS] = { 0 }, at = sizeof(hb) / 4;
	int first[QE_LLMC_TENSORS];
	for (int k = 0; k < QE_LLMC_TENSORS; k++)
		first[k] = -1;
	for (int p = 0; p < im->names.nparams; p++) {
		const qe_named *e = &im->names.t[p];
		if (e->llmc >= 0 && first[e->llmc] < 0)
			first[e->llmc] = p;
	}
	for (int k = 0; k < QE_LLMC_TENSORS; k++) {
		const qe_named *e = &im->names.t[first[k]];
		/* the file's shape of this tensor (one layer's slice) from its header: multiples of C */
		static const int8_t rmul[QE_LLMC_TENSORS] = { 0, 0, 1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1, 1, 1 };
		static const int8_t cmul[QE_LLMC_TENSORS] = { 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0, 0, 0 };
		int64_t fr = k == 0 ? V : k == 1 ? maxT : (int64_t)rmul[k] * C, fc = cmul[k] ? (int64_t)cmul[k] * C : 1;
		if (fr != e->shape[0] || fc != e->shape[1]) {
			char gs[64], ws[64];
			int64_t g[2] = { fr, fc };
			shape_str(gs, sizeof(gs), e->ndim, g);
			shape_str(ws, sizeof(ws), e->ndim, e->shape);
			return qe_fail(QE_EINVAL, "'%s': tensor %s is %s in the file; %s needs %s", im->path,
				       llmc_name(e, ln, sizeof(ln)), gs, model_str(im, ms, sizeof(ms)), ws);
		}
		per[k] = (k == 0 ? (int64_t)Vp : fr) * fc;
		start[k] = at;
		at += per[k] * (e->layer >= 0 ? L : 1);
		if ((uint64_t)at * 4 > im->size)
			return qe_fail(QE_ECORRUPT, "'%s': truncated: tensor %s ends at byte %llu, but the file has %llu bytes",
				       im->path, llmc_name(e, ln, sizeof(ln)), (unsigned long long)at * 4,
				       (unsigned long long)im->size);
	}
	if ((uint64_t)at * 4 != im->size)
		return qe_fail(QE_ECORRUPT, "'%s': %llu bytes, but its header describes %llu", im->path,
			       (unsigned long long)im->size, (unsigned long long)at * 4);
	int vpad = qe_model_vocab_padded(m);
	for (int p = 0; p < im->names.nparams; p++) {
		const qe_named *e = &im->names.t[p];
		int from = e->llmc >= 0 ? p : first[0]; /* the head is wte */
		const qe_named *f = &im->names.t[from];
		im->src[p].from = from;
		im->src[p].offset = (uint64_t)(start[f->llmc] + (f->layer >= 0 ? (int64_t)f->layer * per[f->llmc] : 0)) * 4;
		im->src[p].file_rows = f->llmc == 0 ? (Vp == vpad ? Vp : V) : f->shape[0];
		im->src[p].transposed = 0;
	}
	const qe_named *head = qe_names_find(&im->names, "lm_head.weight");
	im->head_tied = head && !head->tied; /* an untied head starts as wte's copy; a tied one is wte's copy */
	return QE_OK;
}

int cli_import_open(const char *path, const qe_model_config *m, int hash, cli_import *out)
{
	memset(out, 0, sizeof(*out));
	out->model = *m;
	char cfg_path[4200] = "";
	if (strlen(path) >= sizeof(out->path) - 32)
		return qe_fail(QE_EINVAL, "--init-from: path too long");
	if (is_dir(path)) {
		snprintf(out->path, sizeof(out->path), "%s/model.safetensors", path);
		snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", path);
		if (access(out->path, F_OK))
			return qe_fail(QE_ENOTFOUND, "--init-from '%s': a folder without model.safetensors", path);
	} else {
		snprintf(out->path, sizeof(out->path), "%s", path);
	}
	int rc = qe_model_names(m, 1, 1, &out->names);
	if (rc)
		return rc;
	out->src = calloc((size_t)out->names.nparams, sizeof(*out->src));
	if (!out->src)
		return qe_fail(QE_ENOMEM, "--init-from: out of memory");
	int fd = open(out->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return qe_fail(QE_EIO, "open '%s': %s", out->path, strerror(errno));
	struct stat sb;
	unsigned char magic[4] = { 0 };
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		rc = qe_fail(QE_EINVAL, "'%s': not a regular file", out->path);
		goto close_fd;
	}
	out->size = (uint64_t)sb.st_size;
	/* llm.c's file starts with its magic; safetensors with a header length (a JSON of < 2^31 bytes). */
	if (out->size >= 4 && (rc = read_at(fd, out->path, magic, 4, 0)))
		goto close_fd;
	size_t pl = strlen(out->path);
	int llmc = le32(magic) == LLMC_MAGIC || (pl > 4 && strcmp(out->path + pl - 4, ".bin") == 0);
	snprintf(out->format, sizeof(out->format), "%s", llmc ? "llmc" : "safetensors");
	rc = llmc ? open_llmc(out, fd) : open_safetensors(out, fd);
	if (!rc && cfg_path[0] && access(cfg_path, F_OK) == 0)
		rc = check_hf_config(out, cfg_path);
	if (!rc && hash)
		rc = hash_file(fd, out);
close_fd:
	close(fd);
	return rc;
}

/* Parameter p of the file into dst in qeffect's layout (rows x cols, padded rows left as they are). */
static int read_param(cli_import *im, int fd, int p, float *dst, float *tmp)
{
	const cli_import_src *s = &im->src[p];
	const qe_named *e = &im->names.t[p];
	int64_t cols = e->shape[1], rows = s->file_rows;
	if (!s->transposed)
		return read_at(fd, im->path, dst, (size_t)(rows * cols) * 4, s->offset);
	QE_TRY(read_at(fd, im->path, tmp, (size_t)(rows * cols) * 4, s->offset));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[r * cols + c] = tmp[c * rows + r];
	return QE_OK;
}

int cli_import_load_rank(cli_import *im, qe_rank *r)
{
	const qe_train_config *cfg = qe_rank_config(r);
	qe_names nm;
	qe_pstate_item *items = NULL;
	float *buf = NULL, *tmp = NULL;
	int n = 0, fd = -1;
	int rc = qe_model_names(&cfg->model, cfg->pp * cfg->chunks, cfg->prec.recipe.history_len, &nm);
	if (!rc)
		rc = qe_rank_pstate(r, &items, &n);
	if (rc)
		goto release;
	int64_t maxf = 1;
	for (int p = 0; p < im->names.nparams; p++)
		if (qe_named_floats(&im->names.t[p]) > maxf)
			maxf = qe_named_floats(&im->names.t[p]);
	tmp = malloc((size_t)maxf * 4);
	fd = open(im->path, O_RDONLY | O_CLOEXEC);
	if (!tmp) {
		rc = qe_fail(QE_ENOMEM, "--init-from: out of memory");
		goto release;
	}
	if (fd < 0) {
		rc = qe_fail(QE_EIO, "open '%s': %s", im->path, strerror(errno));
		goto release;
	}
	for (int i = 0; i < n && !rc; i++) {
		const qe_pstate_item *it = &items[i];
		if (it->kind != QE_PSTATE_PARAM)
			continue;
		if (it->stage < 0 || it->stage >= nm.nstages || it->bytes != (size_t)nm.param_floats[it->stage] * 4) {
			rc = qe_fail(QE_EINVAL, "--init-from: stage %d's parameters are %zu bytes; the naming table says %lld",
				     it->stage, it->bytes,
				     it->stage >= 0 && it->stage < nm.nstages ? (long long)nm.param_floats[it->stage] * 4 : -1LL);
			break;
		}
		free(buf);
		buf = calloc(it->bytes, 1); /* padded vocabulary rows the file lacks stay zero */
		if (!buf) {
			rc = qe_fail(QE_ENOMEM, "--init-from: out of memory for stage %d", it->stage);
			break;
		}
		for (int p = 0; p < nm.nparams && !rc; p++) {
			const qe_named *e = &nm.t[p];
			if (e->stage != it->stage)
				continue;
			const qe_named *f = qe_names_find(&im->names, e->name);
			if (!f) {
				rc = qe_fail(QE_EINVAL, "--init-from: '%s' is not in the file's table", e->name);
				break;
			}
			int fp = (int)(f - im->names.t);
			if ((rc = read_param(im, fd, im->src[fp].from, buf + e->offset, tmp)))
				qe_fail_ctx(rc, "--init-from: tensor '%s' of stage %d", e->name, e->stage);
		}
		if (!rc && (rc = qe_pstate_write(r, it, buf)))
			qe_fail_ctx(rc, "--init-from: loading stage %d's parameters", it->stage);
	}
	/* The weight caches are invalid: the first F of step 1 casts the loaded weights. */
	if (!rc)
		rc = qe_rank_restart(r, qe_rank_steps_done(r), qe_rank_epochs(r)->e_W);
release:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(tmp);
	free(items);
	qe_names_release(&nm);
	return rc;
}
