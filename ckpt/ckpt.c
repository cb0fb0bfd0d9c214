/*
 * ckpt.c - placeholder so the tree links while the checkpoint service is
 * being written; replaced by the real implementation.
 */
#include "ckpt.h"

#include <stdlib.h>

#include "runtime/core/status.h"

struct ckpt_session {
	int unused;
};

int ckpt_session_open(const char *run_dir, const char *run_id, cat *catalog, ckpt_session **out)
{
	*out = calloc(1, sizeof(ckpt_session));
	return *out ? QE_OK : QE_ENOMEM;
}

void ckpt_session_close(ckpt_session *s)
{
	free(s);
}

int ckpt_save(ckpt_session *s, qe_rank *r, ckpt_result *out)
{
	return qe_fail(QE_EUNSUPPORTED, "checkpoints are not implemented yet");
}

int ckpt_restore(ckpt_session *s, qe_rank *r, int64_t step, ckpt_result *out)
{
	return qe_fail(QE_EUNSUPPORTED, "checkpoints are not implemented yet");
}
