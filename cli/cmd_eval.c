/*
 * cmd_eval.c - `qeffect eval --run-dir R [--step S] --data X.bin [--tokens N]
 * [--precision fp8|bf16|f32] [--backend cpu|cuda] [--json]`: the held-out
 * loss of a committed checkpoint on an llm.c token shard (issue 37 item 5).
 *
 * The stream is read as llm.c's loader reads it: windows of seq + 1 tokens
 * from the first token on, stepping by seq; a window's first seq tokens are
 * the inputs, its last seq the targets.  One process holds the whole model
 * (one stage, whatever mapping trained it): the parameters and FP8 meta are
 * gathered by name through the naming table (cli/named.h) from the
 * checkpoint's stage arrays into the one stage's layout.  Each window runs
 * the evaluation forward (no amax recorded, no scaling state updated), so the
 * result depends on the checkpoint and the tokens alone; the loss is the
 * mean over every target (each window's mean, summed in window order in
 * double, over the windows).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/named.h"
#include "cli/run_args.h"
#include "ckpt/query/ckpt_query.h"
#include "runtime/core/status.h"
#include "runtime/exec/pstate.h"
#include "runtime/exec/rank.h"
#include "runtime/job/data.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect eval --run-dir DIR [--step S] --data X.bin [--tokens N]\n"
		"                    [--precision fp8|bf16|f32] [--backend cpu|cuda] [--json]\n\n"
		"The held-out loss of a committed checkpoint (default: the latest; --step S the one at S) on an\n"
		"llm.c token shard (`qeffect tokenize` writes them).  The stream is read as llm.c's loader does:\n"
		"windows of seq + 1 tokens start at its first token and step by seq tokens; a window's first seq\n"
		"tokens are the inputs and its last seq the targets.  --tokens N takes the first N / seq windows\n"
		"(default: every whole window).  The loss is the mean over every target, printed with 9\n"
		"significant digits (--json: {\"loss\": ..., \"tokens\": ...}, tokens = targets scored).\n"
		"One process holds the whole model whatever pipeline mapping trained it, on cpu (default) or\n"
		"cuda.  --precision defaults to the run's; fp8 casts with the checkpoint's own scaling state\n"
		"(scales and amax histories are read, never updated), so two checkpoints with equal weights\n"
		"but different FP8 histories give different fp8 losses, while bf16 and f32 depend on the\n"
		"weights alone.  The result is deterministic.\n"
		"Exit status: 0 evaluated, 1 missing or damaged run, checkpoint or data, 2 bad usage.\n");
}

typedef struct eval_args {
	const char *dir, *data, *precision, *backend;
	long step, tokens;
	int json;
} eval_args;

/* --precision MODE, kept as the word given once it parses. */
static int precision_word(const char *cmd, const char *flag, const char *value, void *dst)
{
	qe_prec_mode m;
	if (qe_prec_mode_parse(value, &m)) {
		fprintf(stderr, "qeffect %s: %s: %s\n", cmd, flag, qe_last_error());
		return 2;
	}
	*(const char **)dst = value;
	return 0;
}

/* Returns 0, 2 after a usage error, or -1 after --help. */
static int parse(int argc, char **argv, eval_args *a)
{
	int backend = 0; /* index into cli_backends */
	memset(a, 0, sizeof(*a));
	a->step = -1;
	const cli_flag extra[] = {
		{ "step", 0, CLI_FLAG_LONG, &a->step, .lo = 0, .hi = LLONG_MAX },
		{ "tokens", 0, CLI_FLAG_LONG, &a->tokens, .lo = 1, .hi = LLONG_MAX },
		{ "data", 0, CLI_FLAG_PATH, .dst = &a->data },
		{ "precision", 0, CLI_FLAG_FN, &a->precision, .fn = precision_word },
		{ "backend", 0, CLI_FLAG_CHOICE, &backend, .words = cli_backends },
		{ 0 },
	};
	int rc = cli_run_args_parse("eval", argc, argv, extra, &a->dir, &a->json);
	a->backend = cli_backends[backend];
	if (rc < 0)
		help(stdout);
	if (rc)
		return rc;
	if (!a->data) {
		fprintf(stderr, "qeffect eval: --data X.bin is required (an llm.c token shard)\n");
		return 2;
	}
	return 0;
}

/* The amax history length the checkpoint's FP8 meta was stored with. */
static int history_len(const cli_named *nm)
{
	for (int i = 0; i < nm->names.n; i++) {
		const qe_named *e = &nm->names.t[i];
		size_t l = strlen(e->name);
		if (e->source == QE_NAME_FP8_META && l > 13 && strcmp(e->name + l - 13, ".amax_history") == 0)
			return (int)e->shape[0];
	}
	return nm->cfg.prec.recipe.history_len;
}

/*
 * Gather the checkpoint's parameters and FP8 meta by name into rank rk's one
 * stage (table one: the model as one stage).
 */
static int gather(cli_named *nm, const qe_names *one, qe_rank *rk)
{
	qe_pstate_item *items = NULL;
	float *buf[2] = { NULL, NULL };
	int n = 0, rc = qe_rank_pstate(rk, &items, &n);
	if (rc)
		return rc;
	int64_t floats[2] = { one->param_floats[0], one->fp8_floats[0] };
	buf[0] = calloc((size_t)floats[0], 4);
	buf[1] = calloc((size_t)floats[1] + 1, 4);
	if (!buf[0] || !buf[1]) {
		rc = qe_fail(QE_ENOMEM, "out of memory for the model's %lld parameters", (long long)floats[0]);
		goto release;
	}
	for (int i = 0; i < one->n && !rc; i++) {
		const qe_named *e = &one->t[i];
		if (e->source != QE_NAME_PARAMS && e->source != QE_NAME_FP8_META)
			continue;
		const qe_named *src = qe_names_find(&nm->names, e->name);
		if (!src || src->stored_rows != e->stored_rows || src->shape[1] != e->shape[1])
			rc = qe_fail(QE_ECORRUPT, "the checkpoint's tensor '%s' is missing or of another shape", e->name);
		else
			rc = cli_named_read_stored(nm, src, buf[e->source == QE_NAME_FP8_META] + e->offset);
	}
	for (int i = 0; i < n && !rc; i++) {
		const qe_pstate_item *it = &items[i];
		int k = strcmp(it->name, "params") == 0 ? 0 : strcmp(it->name, "fp8_meta") == 0 ? 1 : -1;
		if (k < 0)
			continue;
		if (it->bytes != (size_t)floats[k] * 4)
			rc = qe_fail(QE_EINVAL, "eval: '%s' is %zu bytes; the naming table says %lld", it->name, it->bytes,
				     (long long)floats[k] * 4);
		else
			rc = qe_pstate_write(rk, it, buf[k]);
	}
	/* fresh weight caches: the first forward casts the gathered weights */
	if (!rc)
		rc = qe_rank_restart(rk, 0, qe_rank_epochs(rk)->e_W);
release:
	free(buf[0]);
	free(buf[1]);
	free(items);
	return rc;
}

int cli_eval_main(int argc, char **argv)
{
	eval_args a;
	int rc = parse(argc, argv, &a);
	if (rc)
		return rc < 0 ? 0 : rc;
	ckpt_run *r = NULL;
	cat_ckpt ck = { 0 };
	cat_tensor_rows tr = { 0 };
	cli_named nm = { 0 };
	qe_names one = { 0 };
	qe_backend *b = NULL;
	qe_rank *rk = NULL;
	int32_t *stream = NULL;
	int64_t ntok = 0;
	int maxtok = 0, status = 1;
	char what[4400];
	if ((rc = cli_named_checkpoint(a.dir, a.step, "evaluated", &r, &ck, &tr, &nm, what, sizeof(what))))
		goto fail;

	/* The token stream, checked against the model before any forward. */
	const qe_model_config *m = &nm.cfg.model;
	snprintf(what, sizeof(what), "--data %s", a.data);
	if ((rc = qe_data_load_stream(a.data, &stream, &ntok, &maxtok)))
		goto fail;
	if (maxtok >= m->vocab) {
		rc = qe_fail(QE_EINVAL, "token %d is outside the model's vocabulary of %d ('%s')", maxtok, m->vocab,
			     m->preset);
		goto fail;
	}
	int64_t T = m->seq, nwin = (ntok - 1) / T;
	if (a.tokens > 0 && a.tokens / T > nwin) {
		rc = qe_fail(QE_EINVAL, "--tokens %ld asks for %ld windows of %lld; the shard's %lld tokens hold %lld",
			     a.tokens, a.tokens / (long)T, (long long)T, (long long)ntok, (long long)nwin);
		goto fail;
	}
	if (a.tokens > 0)
		nwin = a.tokens / T;
	if (nwin < 1) {
		rc = qe_fail(QE_EINVAL, "%s: no window of seq + 1 = %lld tokens (the shard holds %lld%s)",
			     a.tokens > 0 ? "--tokens is below seq" : "too short", (long long)T + 1, (long long)ntok,
			     a.tokens > 0 ? "; --tokens takes N / seq windows" : "");
		goto fail;
	}

	/* The model as one stage in this process. */
	qe_train_config ecfg = nm.cfg;
	ecfg.pp = ecfg.dp = ecfg.chunks = ecfg.micro = 1;
	ecfg.model.batch = 1;
	ecfg.schedule = QE_SCHED_INTERLEAVED;
	ecfg.exec = QE_EXEC_EAGER;
	ecfg.run_dir[0] = ecfg.local_dir[0] = 0;
	ecfg.eval_every = ecfg.ckpt_every = 0;
	ecfg.check_replicas = ecfg.full_slots = 0;
	ecfg.prec.recipe.history_len = history_len(&nm);
	snprintf(ecfg.backend, sizeof(ecfg.backend), "%s", a.backend);
	if (a.precision && (rc = qe_prec_mode_parse(a.precision, &ecfg.prec.mode)))
		goto fail;
	snprintf(what, sizeof(what), "%s: checkpoint step %lld as one %s stage on %s", a.dir, (long long)ck.step,
		 qe_prec_mode_name(ecfg.prec.mode), a.backend);
	if ((rc = qe_train_config_check(&ecfg)) || (rc = qe_backend_open(ecfg.backend, &b)) ||
	    (rc = qe_rank_create(&ecfg, b, NULL, &rk)) ||
	    (rc = qe_model_names(&ecfg.model, 1, ecfg.prec.recipe.history_len, &one)) || (rc = gather(&nm, &one, rk)))
		goto fail;

	double sum = 0;
	for (int64_t w = 0; w < nwin; w++) {
		float l;
		/* inputs stream[wT .. wT + T), targets the same shifted by one */
		if ((rc = qe_rank_eval_tokens(rk, stream + w * T, stream + w * T + 1, &l))) {
			snprintf(what, sizeof(what), "%s: window %lld", a.dir, (long long)w);
			goto fail;
		}
		sum += (double)l;
	}
	double loss = sum / (double)nwin;
	long long scored = (long long)(nwin * T);
	if (a.json)
		printf("{\"loss\": %#.9g, \"tokens\": %lld, \"windows\": %lld, \"seq\": %lld, \"step\": %lld, \"precision\": "
		       "\"%s\", \"backend\": \"%s\", \"run_id\": \"%s\"}\n",
		       loss, scored, (long long)nwin, (long long)T, (long long)ck.step, qe_prec_mode_name(ecfg.prec.mode),
		       a.backend, ckpt_run_id(r));
	else
		printf("eval: run %s checkpoint step %lld on %s: %lld windows of %lld tokens (%lld targets), %s on %s: loss "
		       "%#.9g\n",
		       ckpt_run_id(r), (long long)ck.step, a.data, (long long)nwin, (long long)T, scored,
		       qe_prec_mode_name(ecfg.prec.mode), a.backend, loss);
	status = 0;
	goto release;
fail:
	status = cli_report("eval", rc, what);
release:
	free(stream);
	qe_rank_free(rk);
	if (b)
		qe_backend_close(b);
	qe_names_release(&one);
	cli_named_release(&nm);
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&ck);
	ckpt_run_close(r);
	return status;
}
