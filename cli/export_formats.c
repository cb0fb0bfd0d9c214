/*
 * export_formats.c - the two file formats of `qeffect export` (see export.h
 * for their layout): Hugging Face GPT-2 safetensors with its config.json, and
 * llm.c's GPT-2 model file.
 *
 * Both take every tensor from the naming table (cli/named.h), so the bytes
 * written are the bytes `inspect --tensor NAME` hashes, in the target's
 * orientation: Hugging Face's Conv1D holds a linear's weight [in, out], the
 * transpose of ours; llm.c holds [out, in] as we do.  Values are f32, written
 * in the host's byte order (little-endian on every machine qeffect builds for);
 * the integer fields are encoded little-endian explicitly.
 */
#include "cli/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "runtime/core/status.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_F32 3
#define LLMC_HEADER_INTS 256

void cli_export_hf_name(const qe_named *e, char *buf, size_t len)
{
	if (strncmp(e->name, "lm_head.", 8) == 0)
		snprintf(buf, len, "%s", e->name);
	else
		snprintf(buf, len, "transformer.%s", e->name);
}

/*
 * Whether safetensors writes e.  A tied model's head (lm_head.weight and its
 * moments) is wte's copy, byte for byte: it is written once, as wte, and
 * config.json says tie_word_embeddings, as Hugging Face's own GPT-2 files do.
 * The head's FP8 meta is its own and goes with --with-fp8.
 */
static int wanted(const cli_export_opts *o, const qe_named *e)
{
	if (e->tied)
		return 0;
	switch (e->source) {
	case QE_NAME_PARAMS:
		return 1;
	case QE_NAME_ADAM_M:
	case QE_NAME_ADAM_V:
		return o->with_optimizer;
	case QE_NAME_FP8_META:
		return o->with_fp8;
	default:
		return 0;
	}
}

/* e's floats in Hugging Face's orientation into dst (tmp: scratch of the same size). */
static int read_hf(cli_named *nm, const qe_named *e, float *dst, float *tmp)
{
	if (!e->conv1d)
		return cli_named_read(nm, e, dst);
	int rc = cli_named_read(nm, e, tmp);
	if (rc)
		return rc;
	int64_t R = e->shape[0], C = e->shape[1];
	for (int64_t r = 0; r < R; r++)
		for (int64_t c = 0; c < C; c++)
			dst[c * R + r] = tmp[r * C + c];
	return QE_OK;
}

static json_t *hf_config(const cli_named *nm, const cli_export_opts *o)
{
	const qe_model_config *m = &nm->cfg.model;
	json_t *c = json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:b,s:b,s:s}",
			      "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", m->vocab,
			      "n_positions", m->seq, "n_ctx", m->seq, "n_embd", m->hidden, "n_layer", m->layers, "n_head",
			      m->heads, "n_inner", m->ffn, "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5,
			      "initializer_range", 0.02, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
			      "scale_attn_weights", 1, "tie_word_embeddings", m->tie_embeddings != 0, "torch_dtype",
			      "float32");
	if (m->vocab == 50257) { /* GPT-2's BPE: <|endoftext|> begins and ends a text */
		json_object_set_new(c, "bos_token_id", json_integer(50256));
		json_object_set_new(c, "eos_token_id", json_integer(50256));
	}
	json_object_set_new(c, "qeffect_run_id", json_string(o->run_id ? o->run_id : ""));
	json_object_set_new(c, "qeffect_step", json_integer((json_int_t)o->step));
	json_object_set_new(c, "qeffect_preset", json_string(m->preset));
	return c;
}

static void put_le64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static void put_le32(unsigned char *b, int32_t v)
{
	uint32_t u = (uint32_t)v;
	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)(u >> (8 * i));
}

/* The safetensors header: JSON padded with spaces to a multiple of 8 after its u64 length. */
static char *st_header(cli_named *nm, const cli_export_opts *o, size_t *len, int *ntensors, int64_t *maxf)
{
	const qe_names *n = &nm->names;
	json_t *h = json_object();
	/* No run id or step here (config.json has them): the file is a function of the weights alone, so an
	 * --init-from round trip exports the same bytes (issue 37 item 3). */
	json_object_set_new(h, "__metadata__", json_pack("{s:s,s:s}", "format", "pt", "producer", "qeffect"));
	uint64_t off = 0;
	*ntensors = 0;
	*maxf = 1;
	for (int i = 0; i < n->n; i++) {
		const qe_named *e = &n->t[i];
		if (!wanted(o, e))
			continue;
		char hf[96];
		cli_export_hf_name(e, hf, sizeof(hf));
		int64_t f = qe_named_floats(e);
		json_t *shape = e->ndim == 1 ? json_pack("[I]", (json_int_t)e->shape[0])
			: e->conv1d ? json_pack("[I,I]", (json_int_t)e->shape[1], (json_int_t)e->shape[0])
				    : json_pack("[I,I]", (json_int_t)e->shape[0], (json_int_t)e->shape[1]);
		json_object_set_new(h, hf, json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape, "data_offsets",
						     (json_int_t)off, (json_int_t)(off + (uint64_t)f * 4)));
		off += (uint64_t)f * 4;
		++*ntensors;
		if (f > *maxf)
			*maxf = f;
	}
	char *js = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(h);
	if (!js)
		return NULL;
	size_t jl = strlen(js), padded = (jl + 7) / 8 * 8;
	char *buf = malloc(8 + padded);
	if (buf) {
		put_le64((unsigned char *)buf, padded);
		memcpy(buf + 8, js, jl);
		memset(buf + 8 + jl, ' ', padded - jl);
		*len = 8 + padded;
	}
	free(js);
	return buf;
}

int cli_export_safetensors(cli_named *nm, const cli_export_opts *o, const char *st_path, const char *cfg_path,
			   cli_export_result *res)
{
	cli_xfile st = { 0 }, cf = { 0 };
	float *buf = NULL, *tmp = NULL;
	char *hdr = NULL, *cjs = NULL;
	size_t hlen = 0;
	int nt = 0, rc;
	int64_t maxf = 1;
	memset(res, 0, sizeof(*res));
	json_t *cfg = hf_config(nm, o);
	cjs = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
	json_decref(cfg);
	hdr = st_header(nm, o, &hlen, &nt, &maxf);
	buf = malloc((size_t)maxf * 4);
	tmp = malloc((size_t)maxf * 4);
	if (!cjs || !hdr || !buf || !tmp) {
		rc = qe_fail(QE_ENOMEM, "out of memory for the safetensors header and a tensor of %lld floats",
			     (long long)maxf);
		goto remove_tmp;
	}
	if ((rc = cli_xfile_open(&st, st_path)) || (rc = cli_xfile_write(&st, hdr, hlen, -1)))
		goto remove_tmp;
	for (int i = 0; i < nm->names.n; i++) {
		const qe_named *e = &nm->names.t[i];
		if (!wanted(o, e))
			continue;
		if ((rc = read_hf(nm, e, buf, tmp)) ||
		    (rc = cli_xfile_write(&st, buf, (size_t)qe_named_floats(e) * 4, -1)))
			goto remove_tmp;
	}
	res->bytes = st.bytes;
	if ((rc = cli_xfile_sync(&st)) || (rc = cli_xfile_open(&cf, cfg_path)) ||
	    (rc = cli_xfile_write(&cf, cjs, strlen(cjs), -1)) || (rc = cli_xfile_write(&cf, "\n", 1, -1)) ||
	    (rc = cli_xfile_sync(&cf)) || (rc = cli_xfile_commit(&st)))
		goto remove_tmp;
	if ((rc = cli_xfile_commit(&cf))) {
		unlink(st_path); /* no model file without its config */
		goto remove_tmp;
	}
	if ((rc = cli_fsync_dir_of(st_path)) || (rc = cli_fsync_dir_of(cfg_path)))
		goto remove_tmp;
	res->tensors = nt;
remove_tmp:
	cli_xfile_abort(&st);
	cli_xfile_abort(&cf);
	free(buf);
	free(tmp);
	free(hdr);
	free(cjs);
	return rc;
}

int cli_export_llmc(cli_named *nm, const cli_export_opts *o, const char *path, cli_export_result *res)
{
	const qe_model_config *m = &nm->cfg.model;
	const qe_names *n = &nm->names;
	memset(res, 0, sizeof(*res));
	if (m->ffn != 4 * m->hidden)
		return qe_fail(QE_EINVAL,
			       "llm.c's GPT-2 has an MLP of 4 x hidden (%d); this model has --ffn %d, which its file cannot "
			       "describe",
			       4 * m->hidden, m->ffn);
	/* llm.c's head is wte: a tied model's head is wte's copy, an untied one's is lost */
	const qe_named *head = qe_names_find(n, "lm_head.weight");
	int drops_head = head && !head->tied;
	if (drops_head && !o->untied_ok)
		return qe_fail(QE_EINVAL,
			       "llm.c ties its output head to wte, but this model's head (lm_head.weight) is a separate "
			       "tensor: its file would drop the head (--untied-ok writes it anyway, wte serving as the "
			       "head; --format safetensors keeps lm_head.weight)");
	/* Per llm.c tensor: floats of one layer's slice (or of the whole tensor), and its start. */
	int64_t per[QE_LLMC_TENSORS] = { 0 }, start[QE_LLMC_TENSORS];
	int64_t maxf = 1;
	for (int i = 0; i < n->nparams; i++) {
		const qe_named *e = &n->t[i];
		if (e->llmc < 0)
			continue;
		per[e->llmc] = e->stored_rows * e->shape[1];
		if (per[e->llmc] > maxf)
			maxf = per[e->llmc];
	}
	int64_t at = 0;
	for (int k = 0; k < QE_LLMC_TENSORS; k++) {
		start[k] = at;
		at += per[k] * (k >= 2 && k < 14 ? m->layers : 1);
	}
	unsigned char hdr[LLMC_HEADER_INTS * 4];
	int32_t hv[8] = { LLMC_MAGIC, LLMC_VERSION_F32, m->seq, m->vocab, m->layers, m->heads, m->hidden,
			  qe_model_vocab_padded(m) };
	memset(hdr, 0, sizeof(hdr));
	for (int i = 0; i < 8; i++)
		put_le32(hdr + 4 * i, hv[i]);

	cli_xfile x = { 0 };
	float *buf = malloc((size_t)maxf * 4);
	int rc;
	if (!buf) {
		rc = qe_fail(QE_ENOMEM, "out of memory for a tensor of %lld floats", (long long)maxf);
		goto remove_tmp;
	}
	if ((rc = cli_xfile_open(&x, path)) || (rc = cli_xfile_write(&x, hdr, sizeof(hdr), 0)))
		goto remove_tmp;
	/* In the table's (stage) order, each slice at its place: every stage array is read once. */
	for (int i = 0; i < n->nparams; i++) {
		const qe_named *e = &n->t[i];
		if (e->llmc < 0)
			continue;
		int64_t pos = start[e->llmc] + (e->layer >= 0 ? (int64_t)e->layer * per[e->llmc] : 0);
		if ((rc = cli_named_read_stored(nm, e, buf)) ||
		    (rc = cli_xfile_write(&x, buf, (size_t)per[e->llmc] * 4, (int64_t)sizeof(hdr) + pos * 4)))
			goto remove_tmp;
		res->tensors++;
	}
	res->bytes = (uint64_t)sizeof(hdr) + (uint64_t)at * 4;
	res->head_dropped = drops_head;
	if ((rc = cli_xfile_sync(&x)) || (rc = cli_xfile_commit(&x)) || (rc = cli_fsync_dir_of(path)))
		goto remove_tmp;
remove_tmp:
	cli_xfile_abort(&x);
	free(buf);
	return rc;
}
