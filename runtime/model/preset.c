/*
 * preset.c - the named model sizes of DESIGN.md section 5.
 *
 * Every preset has four layers, one per virtual stage, and micro-batch size 1.
 * tiny is what the CPU tests train; small is the CPU demo; h2048 and h4096
 * are the GPU benchmark shapes.
 */
#include "runtime/model/model.h"

#include <string.h>

#include "runtime/core/status.h"

static const qe_model_config presets[] = {
	{ "tiny", 256, 64, 256, 4, 32, 4 },
	{ "small", 256, 128, 512, 4, 64, 4 },
	{ "h2048", 32768, 2048, 8192, 16, 256, 4 },
	{ "h4096", 32768, 4096, 11008, 32, 256, 4 },
};

int qe_model_preset(const char *name, qe_model_config *out)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
		if (strcmp(name, presets[i].preset) == 0) {
			*out = presets[i];
			return QE_OK;
		}
	}
	return qe_fail(QE_EINVAL, "unknown model preset '%s' (known: tiny, small, h2048, h4096)", name);
}

int qe_model_config_check(const qe_model_config *c)
{
	if (c->vocab < 2 || c->hidden < 1 || c->ffn < 1 || c->heads < 1 || c->seq < 1 || c->layers < 1)
		return qe_fail(QE_EINVAL, "model '%s': every dimension must be positive", c->preset);
	if (c->hidden % c->heads)
		return qe_fail(QE_EINVAL, "model '%s': hidden %d is not a multiple of heads %d", c->preset, c->hidden,
			       c->heads);
	return QE_OK;
}

const char *qe_linear_name(int lin)
{
	static const char *names[] = { "qkv", "proj", "fc1", "fc2", "head" };
	return lin >= 0 && lin < QE_LIN_MAX ? names[lin] : "?";
}
