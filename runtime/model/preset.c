/*
 * preset.c - the named model shapes of DESIGN.md section 5, the derived
 * sizes (padded vocabulary, tokens per microbatch, blocks per stage), and the
 * names of precisions and linear layers.
 *
 * tiny is what the CPU tests train and small the CPU demo (four layers, seq
 * 32/64, byte vocabulary); h2048 and h4096 are the paper's GPU benchmark
 * cells; gpt2 ... gpt2-xl are GPT-2's shapes (ffn 4 x hidden, seq 1024,
 * vocabulary 50257, padded to 50304 as llm.c pads it, the head tied to
 * wte).  Every preset has batch 1; --batch, --tie-embeddings and the shape
 * flags override any field.
 */
#include "runtime/model/model.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/status.h"

static const qe_model_config presets[] = {
	/* name, vocab, hidden, ffn, heads, seq, layers, batch, attention, tied embeddings (GPT-2's shapes tie them) */
	{ "tiny", 256, 64, 256, 4, 32, 4, 1, QE_ATTN_AUTO, 0 },
	{ "small", 256, 128, 512, 4, 64, 4, 1, QE_ATTN_AUTO, 0 },
	{ "h2048", 32768, 2048, 8192, 16, 256, 4, 1, QE_ATTN_AUTO, 0 },
	{ "h4096", 32768, 4096, 11008, 32, 256, 4, 1, QE_ATTN_AUTO, 0 },
	{ "gpt2", 50257, 768, 3072, 12, 1024, 12, 1, QE_ATTN_AUTO, 1 },
	{ "gpt2-medium", 50257, 1024, 4096, 16, 1024, 24, 1, QE_ATTN_AUTO, 1 },
	{ "gpt2-large", 50257, 1280, 5120, 20, 1024, 36, 1, QE_ATTN_AUTO, 1 },
	{ "gpt2-xl", 50257, 1600, 6400, 25, 1024, 48, 1, QE_ATTN_AUTO, 1 },
};

int qe_model_preset(const char *name, qe_model_config *out)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
		if (strcmp(name, presets[i].preset) == 0) {
			*out = presets[i];
			return QE_OK;
		}
	}
	return qe_fail(QE_EINVAL,
		       "unknown model preset '%s' (known: tiny, small, h2048, h4096, gpt2, gpt2-medium, gpt2-large, gpt2-xl)",
		       name);
}

/* the head dimensions auto picks flash for; --attention flash also takes 128 (bf16 and fp8 only) */
static int flash_head_dim(const qe_model_config *c)
{
	int d = c->hidden / c->heads;
	return d == 16 || d == 32 || d == 64;
}

int qe_model_config_check(const qe_model_config *c)
{
	static const struct {
		const char *flag;
		size_t off;
		int max;
	} dims[] = {
		{ "--vocab", offsetof(qe_model_config, vocab), 1 << 20 },
		{ "--hidden", offsetof(qe_model_config, hidden), 1 << 16 },
		{ "--ffn", offsetof(qe_model_config, ffn), 1 << 18 },
		{ "--heads", offsetof(qe_model_config, heads), 1 << 10 },
		{ "--seq", offsetof(qe_model_config, seq), 1 << 16 },
		{ "--layers", offsetof(qe_model_config, layers), 1 << 10 },
		{ "--batch", offsetof(qe_model_config, batch), 1 << 12 },
	};
	for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
		int v = *(const int *)((const char *)c + dims[i].off);
		if (v < 1 || v > dims[i].max)
			return qe_fail(QE_EINVAL, "model '%s': %s is %d, must be in 1..%d", c->preset, dims[i].flag, v,
				       dims[i].max);
	}
	if (c->vocab < 2)
		return qe_fail(QE_EINVAL, "model '%s': --vocab must be at least 2", c->preset);
	if (c->hidden % c->heads)
		return qe_fail(QE_EINVAL, "model '%s': --hidden %d is not a multiple of --heads %d", c->preset,
			       c->hidden, c->heads);
	if (c->attn < QE_ATTN_AUTO || c->attn > QE_ATTN_FLASH)
		return qe_fail(QE_EINVAL, "model '%s': attention mode %d", c->preset, c->attn);
	if (c->attn == QE_ATTN_FLASH && !flash_head_dim(c) && c->hidden / c->heads != 128)
		return qe_fail(QE_EINVAL, "model '%s': --attention flash takes head dimensions 16, 32, 64 or 128; --hidden "
			       "%d / --heads %d is %d", c->preset, c->hidden, c->heads, c->hidden / c->heads);
	return QE_OK;
}

int qe_model_vocab_padded(const qe_model_config *c)
{
	return (c->vocab + 127) / 128 * 128;
}

int64_t qe_model_tokens(const qe_model_config *c)
{
	return (int64_t)c->batch * c->seq;
}

double qe_model_param_count(const qe_model_config *c)
{
	double H = c->hidden, F = c->ffn, V = c->vocab, T = c->seq;
	double block = 4 * H + (3 * H * H + 3 * H) + (H * H + H) + (F * H + F) + (H * F + H);
	return V * H + T * H + c->layers * block + 2 * H + (c->tie_embeddings ? 0 : V * H);
}

double qe_model_flops_per_token(const qe_model_config *c)
{
	return 6 * (qe_model_param_count(c) - (double)c->seq * c->hidden) +
	       12.0 * c->layers * (double)c->hidden * (double)c->seq;
}

int qe_model_blocks_per_stage(const qe_model_config *c, int nstages, int *out)
{
	*out = 0;
	if (nstages < 1 || c->layers % nstages)
		return qe_fail(QE_EINVAL,
			       "model '%s' has %d layers, which do not divide evenly into %d virtual stages (P x V chunks)",
			       c->preset, c->layers, nstages);
	*out = c->layers / nstages;
	return QE_OK;
}

/* The index of s in names[0..n), or -1. */
static int name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static const char *const attn_names[] = { "auto", "probs", "flash" };

const char *qe_attn_mode_name(qe_attn_mode m)
{
	return (unsigned)m < 3 ? attn_names[m] : "?";
}

int qe_attn_mode_parse(const char *s, qe_attn_mode *out)
{
	int i = name_index(attn_names, 3, s);
	if (i < 0)
		return qe_fail(QE_EINVAL, "unknown attention '%s' (known: auto, probs, flash)", s);
	*out = (qe_attn_mode)i;
	return QE_OK;
}

qe_attn_mode qe_model_attn(const qe_model_config *c)
{
	if (c->attn == QE_ATTN_PROBS || c->attn == QE_ATTN_FLASH)
		return (qe_attn_mode)c->attn;
	return c->seq > 256 && flash_head_dim(c) ? QE_ATTN_FLASH : QE_ATTN_PROBS;
}

static const char *const prec_names[] = { "f32", "bf16", "fp8" };

const char *qe_prec_mode_name(qe_prec_mode m)
{
	return (unsigned)m < 3 ? prec_names[m] : "?";
}

int qe_prec_mode_parse(const char *s, qe_prec_mode *out)
{
	int i = name_index(prec_names, 3, s);
	if (i < 0)
		return qe_fail(QE_EINVAL, "unknown precision '%s' (known: fp8, bf16, f32)", s);
	*out = (qe_prec_mode)i;
	return QE_OK;
}

const char *qe_linear_name(int kind)
{
	static const char *names[] = { "qkv", "proj", "fc1", "fc2", "head" };
	return kind >= 0 && kind < QE_LIN_KINDS ? names[kind] : "?";
}

void qe_linear_label(int lin, int nlinear, char *buf, size_t len)
{
	int nblk = nlinear / 4, head = nlinear % 4 == 1;
	if (lin < 0 || lin >= nlinear)
		snprintf(buf, len, "?");
	else if (head && lin == nlinear - 1)
		snprintf(buf, len, "head");
	else if (nblk <= 1)
		snprintf(buf, len, "%s", qe_linear_name(lin % 4));
	else
		snprintf(buf, len, "b%d.%s", lin / 4, qe_linear_name(lin % 4));
}
