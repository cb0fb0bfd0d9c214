/*
 * cmd_export.c - `qeffect export --run-dir R [--step S] --format
 * safetensors|llmc -o PATH`: a committed checkpoint's weights as a Hugging
 * Face GPT-2 safetensors file (with config.json) or an llm.c model file.
 *
 * Everything that can be refused is refused before a file is created: the
 * flags, the run, the checkpoint (committed), the naming table against the
 * checkpoint's arrays, the format's limits.  The files are then written
 * durably (cli/export_file.c); a read error on the way (a damaged chunk)
 * removes what was begun.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/export.h"
#include "cli/named.h"
#include "cli/run_args.h"
#include "ckpt/query/ckpt_query.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect export --run-dir DIR [--step S] --format safetensors|llmc -o PATH\n"
		"                      [--with-optimizer] [--with-fp8] [--untied-ok] [--json]\n\n"
		"Write a committed checkpoint's weights (default: the latest; --step S the one at S) for other\n"
		"tools, whatever pipeline mapping wrote it:\n"
		"  safetensors  Hugging Face GPT-2: transformer.wte.weight, transformer.h.N.attn.c_attn.weight,\n"
		"               ..., transformer.ln_f.weight, linear weights in Conv1D's [in, out], the\n"
		"               vocabulary's padding rows dropped; F32.  A config.json for GPT2LMHeadModel\n"
		"               goes beside it (n_layer, n_embd, n_head, n_positions, vocab_size, gelu_new,\n"
		"               layer_norm_epsilon 1e-5, tie_word_embeddings).  A tied model (--tie-embeddings\n"
		"               on, the gpt2 presets' default) is written as GPT-2's own files are: no\n"
		"               lm_head.weight, tie_word_embeddings true (the head is wte); an untied one\n"
		"               adds lm_head.weight, tie_word_embeddings false.  -o FOLDER (existing, or\n"
		"               ending in /) writes FOLDER/model.safetensors and FOLDER/config.json; -o FILE\n"
		"               writes FILE and config.json in FILE's folder.\n"
		"  llmc         llm.c's GPT-2 model file (header magic 20240326, version 3, f32; wte padded\n"
		"               to Vp rows).  llm.c ties its head to wte, so a tied model is written whole;\n"
		"               an untied model is refused unless --untied-ok, which writes it without\n"
		"               lm_head.weight (wte is then the head).  Needs ffn = 4 x hidden.  -o FOLDER\n"
		"               writes FOLDER/model.bin.\n"
		"--with-optimizer adds the AdamW moments NAME.exp_avg and NAME.exp_avg_sq, --with-fp8 the FP8\n"
		"meta M.fp8.ROLE.amax_history, .scale, .scale_inv (safetensors only; names as `inspect --names`\n"
		"lists them, with the transformer. prefix; moments of Conv1D weights transposed as they are).\n"
		"A tied head's moments are wte's, byte for byte, and are left out with it; its FP8 meta\n"
		"(lm_head.fp8.*) is its own and is written.\n"
		"Files are written to a temporary file, fsync'd and renamed; nothing is left on failure.\n"
		"Exit status: 0 written, 1 missing or damaged run or checkpoint, a model the format cannot hold,\n"
		"or an I/O error, 2 bad usage.\n");
}

static int is_dir(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cli_export_main(int argc, char **argv)
{
	const char *dir = NULL, *out = NULL, *format = NULL;
	long step = -1;
	int json = 0, rc;
	cli_export_opts eo = { 0 };
	const cli_flag extra[] = {
		{ "step", 0, CLI_FLAG_LONG, &step, .lo = 0, .hi = LLONG_MAX },
		{ "format", 0, CLI_FLAG_STRING, .dst = &format },
		{ "output", 'o', CLI_FLAG_PATH, .dst = &out },
		{ "with-optimizer", 0, CLI_FLAG_BOOL, .dst = &eo.with_optimizer },
		{ "with-fp8", 0, CLI_FLAG_BOOL, .dst = &eo.with_fp8 },
		{ "untied-ok", 0, CLI_FLAG_BOOL, .dst = &eo.untied_ok },
		{ 0 },
	};
	if ((rc = cli_run_args_parse("export", argc, argv, extra, &dir, &json)) < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (!format || (strcmp(format, "safetensors") && strcmp(format, "llmc"))) {
		fprintf(stderr, "qeffect export: --format must be safetensors or llmc%s%s%s\n", format ? ", got '" : "",
			format ? format : "", format ? "'" : "");
		return 2;
	}
	int llmc = strcmp(format, "llmc") == 0;
	if (!out) {
		fprintf(stderr, "qeffect export: -o PATH is required (a file, or a folder for %s)\n",
			llmc ? "model.bin" : "model.safetensors and config.json");
		return 2;
	}
	if (llmc && (eo.with_optimizer || eo.with_fp8)) {
		fprintf(stderr, "qeffect export: llm.c's model file holds the weights only; %s needs --format "
				"safetensors\n",
			eo.with_optimizer ? "--with-optimizer" : "--with-fp8");
		return 2;
	}

	/* Where the files go. */
	char model_path[4200], cfg_path[4200], parent[4096];
	size_t ol = strlen(out);
	if (ol >= 4000) {
		fprintf(stderr, "qeffect export: -o path too long (%zu characters)\n", ol);
		return 2;
	}
	int folder = is_dir(out) || (ol && out[ol - 1] == '/'), made_dir = 0;
	char outdir[4096];
	snprintf(outdir, sizeof(outdir), "%s", out);
	while (folder && strlen(outdir) > 1 && outdir[strlen(outdir) - 1] == '/')
		outdir[strlen(outdir) - 1] = 0;
	if (folder) {
		out = outdir;
		snprintf(model_path, sizeof(model_path), "%s/%s", out, llmc ? "model.bin" : "model.safetensors");
		snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", out);
		snprintf(parent, sizeof(parent), "%s/..", out);
	} else {
		snprintf(model_path, sizeof(model_path), "%s", out);
		const char *slash = strrchr(out, '/');
		snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - out) + 1 : 1, slash ? out : ".");
		snprintf(cfg_path, sizeof(cfg_path), "%sconfig.json", slash ? parent : "");
	}

	ckpt_run *r = NULL;
	cat_ckpt ck = { 0 };
	cat_tensor_rows tr = { 0 };
	cli_named nm = { 0 };
	cli_export_result res = { 0 };
	int status = 1;
	char what[4400];
	if ((rc = cli_named_checkpoint(dir, step, "exported", &r, &ck, &tr, &nm, what, sizeof(what))))
		goto fail;
	eo.run_id = ckpt_run_id(r);
	eo.step = ck.step;
	if (!folder && !is_dir(parent)) {
		snprintf(what, sizeof(what), "-o %s", out);
		rc = qe_fail(QE_ENOTFOUND, "its folder '%s' does not exist", parent);
		goto fail;
	}
	if (folder && !is_dir(out)) {
		if (mkdir(out, 0755)) {
			snprintf(what, sizeof(what), "-o %s", out);
			rc = qe_fail(QE_EIO, "create folder '%s': %s", out, strerror(errno));
			goto fail;
		}
		made_dir = 1;
	}
	snprintf(what, sizeof(what), "%s: checkpoint step %lld -> %s", dir, (long long)ck.step, model_path);
	rc = llmc ? cli_export_llmc(&nm, &eo, model_path, &res)
		  : cli_export_safetensors(&nm, &eo, model_path, cfg_path, &res);
	if (rc)
		goto fail;
	if (res.head_dropped)
		fprintf(stderr, "qeffect export: warning: %s: lm_head.weight is not in the file (--untied-ok): llm.c "
				"uses wte as the output head\n",
			model_path);
	if (json) {
		json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:i,s:I,s:b,s:b,s:b,s:b}", "format", format, "run_id",
				      ckpt_run_id(r), "step", (json_int_t)ck.step, "model", model_path, "tensors", res.tensors,
				      "bytes", (json_int_t)res.bytes, "with_optimizer", eo.with_optimizer, "with_fp8",
				      eo.with_fp8, "tied", nm.cfg.model.tie_embeddings != 0, "head_dropped", res.head_dropped);
		if (!llmc)
			json_object_set_new(o, "config", json_string(cfg_path));
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		printf("exported run %s checkpoint step %lld: %d tensors, %llu bytes -> %s%s%s\n", ckpt_run_id(r),
		       (long long)ck.step, res.tensors, (unsigned long long)res.bytes, model_path, llmc ? "" : " and ",
		       llmc ? "" : cfg_path);
	}
	status = 0;
	goto release;
fail:
	status = cli_report("export", rc, what);
	if (made_dir)
		rmdir(out);
release:
	cli_named_release(&nm);
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&ck);
	ckpt_run_close(r);
	return status;
}
