/*
 * inspect_named.c - the named-tensor part of `qeffect inspect`: the table of
 * GPT-2 names (runtime/model/names.h) and the summary of one named tensor,
 * with the hashes of its bytes, so a tensor can be found and checked by name
 * under any pipeline mapping.
 */
#include "cli/inspect_named.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/status.h"

static json_t *jreal(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static void fmt_shape(const qe_named *e, char *buf, size_t len)
{
	if (e->ndim == 1)
		snprintf(buf, len, "[%lld]", (long long)e->shape[0]);
	else
		snprintf(buf, len, "[%lld,%lld]", (long long)e->shape[0], (long long)e->shape[1]);
}

static json_t *jshape(const qe_named *e)
{
	return e->ndim == 1 ? json_pack("[I]", (json_int_t)e->shape[0])
			    : json_pack("[I,I]", (json_int_t)e->shape[0], (json_int_t)e->shape[1]);
}

void cli_inspect_named_list(const cli_named *nm, int all, json_t *arr)
{
	const qe_names *n = &nm->names;
	if (arr) {
		for (int i = 0; i < (all ? n->n : n->nparams); i++) {
			const qe_named *e = &n->t[i];
			json_t *o = json_pack("{s:s,s:s,s:o,s:i,s:s,s:I,s:I,s:b,s:b}", "name", e->name, "dtype", "f32",
					      "shape", jshape(e), "stage", e->stage, "array", qe_name_source_array(e->source),
					      "offset", (json_int_t)e->offset, "stored_rows", (json_int_t)e->stored_rows,
					      "conv1d", e->conv1d, "tied", e->tied);
			json_array_append_new(arr, o);
		}
		return;
	}
	printf("named tensors (GPT-2 names; the name is the address under any --pp; inspect --tensor NAME reads one):\n"
	       "  %-48s %-14s %5s %-9s %10s\n",
	       "name", "shape", "stage", "array", "offset");
	for (int i = 0; i < n->n; i++) {
		const qe_named *e = &n->t[i];
		if (!all && i >= n->nparams)
			break;
		char sh[48];
		fmt_shape(e, sh, sizeof(sh));
		printf("  %-48s %-14s %5d %-9s %10lld", e->name, sh, e->stage, qe_name_source_array(e->source),
		       (long long)e->offset);
		if (e->stored_rows != e->shape[0])
			printf("  (stored padded to %lld rows)", (long long)e->stored_rows);
		if (e->tied)
			printf("  (tied: wte's copy)");
		printf("\n");
	}
	if (!all)
		printf("  and per parameter NAME: NAME.exp_avg, NAME.exp_avg_sq (AdamW moments); per linear M (its weight\n"
		       "  without .weight): M.fp8.ROLE.amax_history, .scale, .scale_inv for ROLE input, weight,\n"
		       "  grad_output (FP8 meta): %d named tensors in all (--names lists every one)\n",
		       n->n);
}

int cli_inspect_named_summary(cli_named *nm, const qe_named *e, json_t *arr)
{
	int64_t nf = qe_named_floats(e);
	float *d = malloc((size_t)(nf ? nf : 1) * 4);
	if (!d)
		return qe_fail(QE_ENOMEM, "tensor '%s': out of memory for %lld floats", e->name, (long long)nf);
	int rc = cli_named_read(nm, e, d);
	if (rc) {
		free(d);
		return rc;
	}
	char xxh[33], sha[65], sh[48];
	cli_named_hashes(d, (size_t)nf * 4, xxh, sha);
	fmt_shape(e, sh, sizeof(sh));
	/* the value summary of the checkpoint's own tensors, over these floats */
	cat_tensor t = { 0 };
	t.name = (char *)e->name;
	t.stage = e->stage;
	t.dtype = "f32";
	t.kind = "param";
	t.bytes = (uint64_t)nf * 4;
	ckpt_summary s;
	rc = ckpt_q_summarize(&t, d, &s);
	free(d);
	if (rc)
		return rc;
	if (arr) {
		json_t *fv = json_array();
		for (int k = 0; k < s.nfirst; k++)
			json_array_append_new(fv, jreal(s.first[k]));
		json_t *o = json_pack("{s:s,s:i,s:s,s:I,s:s,s:o,s:I,s:b,s:b,s:s,s:s,s:s,s:I,s:o,s:o,s:o,s:o,s:I}", "name",
				      e->name, "stage", e->stage, "array", qe_name_source_array(e->source), "offset",
				      (json_int_t)e->offset, "dtype", "f32", "shape", jshape(e), "stored_rows",
				      (json_int_t)e->stored_rows, "conv1d", e->conv1d, "tied", e->tied, "xxh3_128", xxh,
				      "sha256", sha, "as", s.as, "count", (json_int_t)s.count, "min", jreal(s.min), "max",
				      jreal(s.max), "mean", jreal(s.mean), "rms", jreal(s.rms), "nonfinite",
				      (json_int_t)s.nonfinite);
		json_object_set_new(o, "first", fv);
		json_array_append_new(arr, o);
		return QE_OK;
	}
	printf("tensor '%s': f32 %s, stage %d '%s' from float %lld%s\n", e->name, sh, e->stage,
	       qe_name_source_array(e->source), (long long)e->offset,
	       e->conv1d ? " (a linear's [out, in]; Hugging Face's Conv1D holds the transpose)" : "");
	if (e->stored_rows != e->shape[0])
		printf("  the vocabulary's rows only: stored padded to %lld rows\n", (long long)e->stored_rows);
	if (e->tied)
		printf("  tied: wte's copy (tied embeddings), kept byte-identical to it by training\n");
	printf("  xxh3-128 %s  sha256 %s (of its %lld bytes, little-endian f32, row-major)\n", xxh, sha,
	       (long long)nf * 4);
	printf("  count %llu, min %.9g, max %.9g, mean %.9g, rms %.9g, non-finite %llu\n  first:",
	       (unsigned long long)s.count, s.min, s.max, s.mean, s.rms, (unsigned long long)s.nonfinite);
	for (int k = 0; k < s.nfirst; k++)
		printf(" %.9g", s.first[k]);
	printf("\n");
	return QE_OK;
}
