/*
 * fp8_recipe.c - the delayed-scaling recipe and the update of one role block.
 *
 * Semantics are TransformerEngine's (DESIGN.md section 4), because the runs we
 * compare against were made with it: the scale comes from the amax history
 * *before* the roll, a non-finite or zero amax keeps the old scale, and an
 * infinite scale (tiny amax) becomes FLT_MAX rather than inf, so that
 * scale_inv stays a finite, non-zero number.  The update is skipped entirely
 * when nothing was cast since the last one (history[0] == 0): rolling then
 * would shift a zero into the window and shorten the effective history.
 *
 * Everything is float arithmetic in the same order as the CUDA kernel, so the
 * cpu backend and the GPU produce the same bits.
 */
#include "runtime/fp8/fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "runtime/core/status.h"

qe_fp8_recipe qe_fp8_recipe_default(void)
{
	qe_fp8_recipe r = { QE_FP8_HYBRID, 0, 1024, QE_AMAX_MAX };
	return r;
}

int qe_fp8_recipe_check(const qe_fp8_recipe *r)
{
	if (!r)
		return qe_fail(QE_EINVAL, "fp8 recipe: NULL recipe");
	if (r->format != QE_FP8_HYBRID && r->format != QE_FP8_E4M3_ONLY)
		return qe_fail(QE_EINVAL, "fp8 recipe: format %d is not hybrid (0) or e4m3 (1)", (int)r->format);
	if (r->algo != QE_AMAX_MAX && r->algo != QE_AMAX_MOST_RECENT)
		return qe_fail(QE_EINVAL, "fp8 recipe: amax algo %d is not max (0) or most_recent (1)", (int)r->algo);
	if (r->history_len < 1)
		return qe_fail(QE_EINVAL, "fp8 recipe: history_len %d must be >= 1", r->history_len);
	/* 2^margin must be a finite float, or every scale would become 0. */
	if (r->margin < 0 || r->margin > 127)
		return qe_fail(QE_EINVAL, "fp8 recipe: margin %d must be in 0..127", r->margin);
	return QE_OK;
}

qe_dtype qe_fp8_role_dtype(const qe_fp8_recipe *r, qe_fp8_role role)
{
	if (role == QE_ROLE_GRAD_OUTPUT && (!r || r->format == QE_FP8_HYBRID))
		return QE_E5M2;
	return QE_E4M3;
}

const char *qe_fp8_role_name(qe_fp8_role role)
{
	switch (role) {
	case QE_ROLE_INPUT:
		return "input";
	case QE_ROLE_WEIGHT:
		return "weight";
	case QE_ROLE_GRAD_OUTPUT:
		return "grad_output";
	default:
		return "?";
	}
}

int qe_fp8_format_parse(const char *s, qe_fp8_format *out)
{
	if (s && strcmp(s, "hybrid") == 0) {
		*out = QE_FP8_HYBRID;
		return QE_OK;
	}
	if (s && strcmp(s, "e4m3") == 0) {
		*out = QE_FP8_E4M3_ONLY;
		return QE_OK;
	}
	return qe_fail(QE_EINVAL, "fp8 format '%s': expected 'hybrid' or 'e4m3'", s ? s : "(null)");
}

int qe_amax_algo_parse(const char *s, qe_amax_algo *out)
{
	if (s && strcmp(s, "max") == 0) {
		*out = QE_AMAX_MAX;
		return QE_OK;
	}
	if (s && strcmp(s, "most_recent") == 0) {
		*out = QE_AMAX_MOST_RECENT;
		return QE_OK;
	}
	return qe_fail(QE_EINVAL, "amax algo '%s': expected 'max' or 'most_recent'", s ? s : "(null)");
}

const char *qe_fp8_format_name(qe_fp8_format f)
{
	switch (f) {
	case QE_FP8_HYBRID:
		return "hybrid";
	case QE_FP8_E4M3_ONLY:
		return "e4m3";
	default:
		return "?";
	}
}

const char *qe_amax_algo_name(qe_amax_algo a)
{
	switch (a) {
	case QE_AMAX_MAX:
		return "max";
	case QE_AMAX_MOST_RECENT:
		return "most_recent";
	default:
		return "?";
	}
}

void qe_fp8_role_init(float *block, int history_len)
{
	for (int i = 0; i < history_len; i++)
		block[i] = 0.0f;
	block[history_len] = 1.0f;
	block[history_len + 1] = 1.0f;
}

float qe_fp8_scale_for_amax(float amax, float fp8_max, int margin, float fallback)
{
	if (!isfinite(amax) || !(amax > 0.0f))
		return fallback;
	float s = (fp8_max / amax) / ldexpf(1.0f, margin);
	if (isinf(s))
		s = FLT_MAX;
	return s;
}

void qe_fp8_role_update(float *block, int history_len, qe_dtype fmt, const qe_fp8_recipe *r)
{
	const int L = history_len;
	float *hist = block;

	if (hist[0] == 0.0f)
		return;

	/* NaN anywhere in the window poisons max() (as torch.max does), so the
	 * scale is kept rather than derived from the finite rest. */
	float amax = hist[0];
	if (!r || r->algo == QE_AMAX_MAX) {
		for (int i = 1; i < L; i++) {
			if (isnan(hist[i]) || isnan(amax))
				amax = NAN;
			else if (hist[i] > amax)
				amax = hist[i];
		}
	}

	if (isfinite(amax) && amax > 0.0f) {
		float scale = qe_fp8_scale_for_amax(amax, qe_fp8_max(fmt), r ? r->margin : 0, block[L]);
		block[L] = scale;
		block[L + 1] = 1.0f / scale;
	}

	float first = hist[0];
	for (int i = 0; i + 1 < L; i++)
		hist[i] = hist[i + 1];
	hist[L - 1] = first;
	hist[0] = 0.0f;
}
