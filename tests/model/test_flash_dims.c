/*
 * test_flash_dims.c - which head dimensions a model may run flash attention
 * at (runtime/model/preset.c, stage.c):
 *   - auto picks flash above seq 256 at head dimensions 16, 32 and 64 only;
 *   - --attention flash also takes 128, the head dimension of larger models,
 *     and a stage at 128 is made under bf16 and fp8 precision; under f32 it
 *     is refused, naming the precision (the TF32 kernels stop at 64);
 *   - any other head dimension (80 here) is refused, naming the ones taken.
 */
#include <stdio.h>
#include <string.h>

#include "testlib.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/status.h"
#include "runtime/fp8/fp8.h"
#include "runtime/model/model.h"

static int make_stage(qe_backend *b, const qe_model_config *cfg, qe_prec_mode mode)
{
	qe_precision prec = { 0 };
	prec.mode = mode;
	prec.recipe = qe_fp8_recipe_default();
	qe_stage *st = NULL;
	int rc = qe_stage_create(b, cfg, &prec, 0, 1, 1, 1, 0, &st);
	if (st)
		qe_stage_free(st);
	return rc;
}

int main(void)
{
	qe_backend *b = NULL;
	CHECK_OK(qe_cpu_backend_create(&b));
	/* head dimension 128: hidden 256 over 2 heads, seq 512 */
	qe_model_config d128 = { "d128", 64, 256, 512, 2, 512, 1, 1, QE_ATTN_AUTO, 0 };
	CHECK_OK(qe_model_config_check(&d128));
	CHECK(qe_model_attn(&d128) == QE_ATTN_PROBS, "auto took flash at head dimension 128");
	qe_model_config d64 = d128;
	d64.heads = 4;
	CHECK(qe_model_attn(&d64) == QE_ATTN_FLASH, "auto did not take flash at head dimension 64, seq 512");
	d128.attn = QE_ATTN_FLASH;
	CHECK_OK(qe_model_config_check(&d128));
	CHECK(qe_model_attn(&d128) == QE_ATTN_FLASH, "--attention flash at head dimension 128 not kept");
	CHECK_OK(make_stage(b, &d128, QE_PREC_BF16));
	CHECK_OK(make_stage(b, &d128, QE_PREC_FP8));
	int rc = make_stage(b, &d128, QE_PREC_F32);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "needs --precision bf16 or fp8") &&
		      strstr(qe_last_error(), "head dimension 128"),
	      "f32 flash at head dimension 128: got %s: %s", qe_errname(rc), qe_last_error());
	qe_model_config d80 = d128;
	d80.hidden = 160;
	rc = qe_model_config_check(&d80);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "16, 32, 64 or 128") && strstr(qe_last_error(), "is 80"),
	      "flash at head dimension 80: got %s: %s", qe_errname(rc), qe_last_error());
	qe_cpu_backend_destroy(b);
	return qe_test_done("flash_dims");
}
