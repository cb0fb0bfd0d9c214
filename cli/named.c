/*
 * named.c - reading a checkpoint's tensors by GPT-2 name (see named.h).
 */
#include "cli/named.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"
#include "store/remote.h"
#include "store/store.h"

void cli_named_release(cli_named *nm)
{
	for (int s = 0; s < QE_NAME_SOURCES; s++)
		free(nm->held[s]);
	qe_names_release(&nm->names);
	memset(nm, 0, sizeof(*nm));
}

/* The checkpoint row of stage s holding source src, checked against the table's size. */
static int row_of(cli_named *nm, qe_name_source src, int s, const cat_tensor **out)
{
	const char *arr = qe_name_source_array(src);
	const cat_tensor *t = ckpt_q_find(nm->rows, s, arr);
	*out = NULL;
	if (!t)
		return qe_fail(QE_ECORRUPT, "the checkpoint has no '%s' of stage %d (the naming table has %d stages)", arr,
			       s, nm->names.nstages);
	int64_t want = src == QE_NAME_FP8_META ? nm->names.fp8_floats[s] : nm->names.param_floats[s];
	if (strcmp(t->dtype, "f32") || t->bytes != (uint64_t)want * 4)
		return qe_fail(QE_ECORRUPT,
			       "'%s' of stage %d is %s of %llu bytes; the model '%s' (layers %d, hidden %d, ffn %d, vocab %d) "
			       "cut into %d stages needs f32 of %lld bytes",
			       arr, s, t->dtype, (unsigned long long)t->bytes, nm->cfg.model.preset, nm->cfg.model.layers,
			       nm->cfg.model.hidden, nm->cfg.model.ffn, nm->cfg.model.vocab, nm->names.nstages,
			       (long long)want * 4);
	*out = t;
	return QE_OK;
}

int cli_named_checkpoint(const char *dir, long step, const char *verb, ckpt_run **r, cat_ckpt *ck,
			 cat_tensor_rows *tr, cli_named *nm, char *what, size_t whatlen)
{
	int rc;
	snprintf(what, whatlen, "%s", dir);
	if ((rc = ckpt_run_open(dir, CKPT_RUN_STORE, r)) || (rc = ckpt_q_select(*r, step, ck)))
		return rc;
	snprintf(what, whatlen, "%s: checkpoint step %lld", dir, (long long)ck->step);
	if (ck->status != CAT_COMMITTED)
		return qe_fail(QE_ENOTFOUND, "it is %s, not committed: only a committed checkpoint is %s",
			       cat_status_name(ck->status), verb);
	if ((rc = cat_ckpt_tensors(ckpt_run_catalog(*r), ck->id, tr)))
		return rc;
	return cli_named_open(*r, tr, nm);
}

int cli_named_open(ckpt_run *r, const cat_tensor_rows *tr, cli_named *out)
{
	int rc;
	memset(out, 0, sizeof(*out));
	out->run = r;
	out->rows = tr;
	for (int s = 0; s < QE_NAME_SOURCES; s++)
		out->held_stage[s] = -1;
	if ((rc = qe_train_config_from_json(ckpt_run_config_json(r), &out->cfg)))
		return qe_fail_ctx(rc, "the run's stored configuration cannot be read, so its tensors cannot be named");
	/* The checkpoint's own cut: one "params" per virtual stage. */
	int nstages = 0;
	for (size_t i = 0; i < tr->n; i++)
		if (strcmp(ckpt_q_base_name(&tr->rows[i]), "params") == 0 && ckpt_q_stage_of(&tr->rows[i]) + 1 > nstages)
			nstages = ckpt_q_stage_of(&tr->rows[i]) + 1;
	if (nstages < 1)
		return qe_fail(QE_ECORRUPT, "the checkpoint has no 'params' tensor");
	/* The amax history length as stored: fp8_meta is [linear, role, L + 2]. */
	int L = out->cfg.prec.recipe.history_len;
	const cat_tensor *m = ckpt_q_find(tr, 0, "fp8_meta");
	int64_t dims[4];
	int nd;
	if (m && !ckpt_q_parse_shape(m->shape, dims, 4, &nd) && nd == 3 && dims[2] > 2)
		L = (int)(dims[2] - 2);
	if ((rc = qe_model_names(&out->cfg.model, nstages, L, &out->names)))
		return rc;
	for (int s = 0; s < nstages; s++) {
		const cat_tensor *t;
		for (int src = 0; src < QE_NAME_SOURCES; src++)
			if ((rc = row_of(out, (qe_name_source)src, s, &t)))
				return rc;
	}
	return QE_OK;
}

/* The stage array e lives in, read once and held until another stage's is asked for. */
static int hold(cli_named *nm, const qe_named *e, const float **arr)
{
	const cat_tensor *t;
	int rc;
	*arr = NULL;
	if (nm->held[e->source] && nm->held_stage[e->source] == e->stage) {
		*arr = nm->held[e->source];
		return QE_OK;
	}
	free(nm->held[e->source]);
	nm->held[e->source] = NULL;
	nm->held_stage[e->source] = -1;
	if ((rc = row_of(nm, e->source, e->stage, &t)))
		return rc;
	void *d;
	if ((rc = ckpt_q_read(nm->run, t, &d)))
		return qe_fail_ctx(rc, "tensor '%s' (stage %d '%s')", e->name, e->stage, qe_name_source_array(e->source));
	nm->held[e->source] = d;
	nm->held_stage[e->source] = e->stage;
	*arr = d;
	return QE_OK;
}

int cli_named_read(cli_named *nm, const qe_named *e, float *dst)
{
	const float *a;
	int rc = hold(nm, e, &a);
	if (!rc)
		memcpy(dst, a + e->offset, (size_t)qe_named_floats(e) * 4);
	return rc;
}

int cli_named_read_stored(cli_named *nm, const qe_named *e, float *dst)
{
	const float *a;
	int rc = hold(nm, e, &a);
	if (!rc)
		memcpy(dst, a + e->offset, (size_t)(e->stored_rows * e->shape[1]) * 4);
	return rc;
}

void cli_named_hashes(const void *data, size_t bytes, char xxh[33], char sha[65])
{
	store_hash h;
	store_hash_of(data, bytes, &h);
	store_hash_hex(&h, xxh);
	store_remote_sha256_hex(data, bytes, sha);
}
