/*
 * train_flags.c - flag parsing for train and resume.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/async_flag.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/storage_options.h"
#include "runtime/core/status.h"
#include "cli/train_flags.h"

void cli_train_flags_help(FILE *f, int for_resume)
{
	if (!for_resume)
		fprintf(f,
			"model and precision:\n"
			"  --preset NAME          tiny | small | h2048 | h4096 | gpt2 | gpt2-medium | gpt2-large |\n"
			"                         gpt2-xl (default tiny)\n"
			"  --layers N  --hidden N  --heads N  --ffn N  --seq N  --vocab N\n"
			"                         override the preset's shape (--preset gpt2 --layers 2: a 2-layer\n"
			"                         GPT-2; --hidden without --ffn sets ffn 4 x hidden); the vocabulary\n"
			"                         is padded to a multiple of 128 rows, masked out of the loss\n"
			"  --batch B              sequences per microbatch (default 1): B x seq tokens\n"
			"  --attention auto|flash|probs   keep the row log-sum-exp and recompute the\n"
			"                         probabilities (flash: no T x T tensor; head dimension 16, 32 or\n"
			"                         64), or keep the probabilities; auto: flash above seq 256\n"
			"  --tie-embeddings on|off   the output head is the token embedding, as in GPT-2 (default on\n"
			"                         for the gpt2 presets, off for the others); the two copies on the\n"
			"                         first and last stage get the same summed gradient every step\n"
			"  --precision fp8|bf16|f32   GEMM operands: FP8 with delayed scaling, bf16 (round to\n"
			"                         nearest even, fp32 accumulation: the baseline), or f32 (gradient\n"
			"                         checks); default fp8\n"
			"  --fp8 on|off           alias: --precision fp8 | --precision f32\n"
			"  --head-scaling delayed|current   output head scaling (default delayed)\n"
			"  --fp8-format hybrid|e4m3   (default hybrid: E4M3 forward, E5M2 backward)\n"
			"  --amax-history L       amax history length (default 1024)\n"
			"  --amax-margin N        scale margin (default 0)\n"
			"  --amax-algo max|most_recent   (default max)\n"
			"  --seed N               initialization and data seed (default 1)\n"
			"  --micro M              microbatches per step (default 4)\n");
	fprintf(f,
		"optimizer (AdamW; a resume continues the run's schedule and refuses a different value):\n"
		"  --lr X                 peak learning rate (default 1e-3; 0 leaves the weights as they are)\n"
		"  --lr-schedule constant|cosine|linear   after warmup (default constant)\n"
		"  --warmup N             steps of linear warmup: lr (s+1)/N at step s < N (default 0)\n"
		"  --lr-min X             where cosine and linear end (default 0)\n"
		"  --lr-decay-steps N     the step where they reach --lr-min (default: train's --steps)\n"
		"  --weight-decay X       decoupled weight decay of the matrices and embeddings; biases and\n"
		"                         layernorm weights never decay (default 0.1)\n"
		"  --beta1 X  --beta2 X  --eps X   (defaults 0.9, 0.95, 1e-8)\n"
		"  --grad-clip NORM       scale the step's gradients by NORM / (norm + 1e-6) when their\n"
		"                         global norm (every stage and replica, summed in a fixed order)\n"
		"                         is above NORM (default 0: off); the progress line shows the norm\n");
	fprintf(f,
		"parallelism and execution:\n"
		"  --pp P                 pipeline ranks (default 1)\n"
		"  --dp D                 data-parallel replicas (default 1); ranks = P x D\n"
		"  --chunks V             local chunks per rank, layers/(P x V) layers each (default layers/P,\n"
		"                         or its largest divisor up to 8; zbv: 2; resume: the run's virtual\n"
		"                         stages / P)\n"
		"  --schedule interleaved|zbv      (default interleaved)\n"
		"  --backward split|full  dI and dW as separate actions, or one B (default split)\n"
		"  --exec eager|graph     run actions directly or replay captured graphs (default eager)\n"
		"  --grad direct|copy     dW writes the arena view, or scratch then a copy (default direct)\n"
		"  --arena accumulate|per-mb   one gradient view per matrix that microbatch 0 writes and\n"
		"                         later microbatches add into, or one view per microbatch reduced\n"
		"                         by the optimizer (default accumulate; same bits; train only:\n"
		"                         resume keeps the run's)\n"
		"  --backend cpu|cuda     (default cpu)\n"
		"  --check-replicas on|off   with --dp > 1, compare the replicas' parameters after every\n"
		"                         step and fail on any difference; with tied embeddings also the\n"
		"                         two copies of wte (every step with --dp > 1, else after the\n"
		"                         last) (default on)\n"
		"  --nproc N              local rank processes (default P x D); an external launcher may set\n"
		"                         RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT instead\n"
		"run:\n"
		"  --steps N              train until N steps are done (train: default 20; resume: the\n"
		"                         run's --steps)\n"
		"  --data FILE            JSONL with a \"text\" field, or an llm.c .bin token shard\n"
		"                         (default: the Brown corpus in the shared data folder)\n"
		"  --run-dir DIR          where the catalog, store and traces go\n"
		"  --eval-every K         held-out loss every K steps (default 0: never)\n"
		"  --eval-micro N         held-out microbatches per evaluation (default 4)\n"
		"  --ckpt-every K         checkpoint every K steps into --run-dir (default 0: never)\n"
		"  --log-every K          progress line every K steps (default 1)\n"
		"  --sample-every K       after every K-th step rank 0 prints a sample of the model (default 0:\n"
		"                         never), drawn on the cpu from the fp32 weights: --sample-tokens\n"
		"                         tokens after <|endoftext|> (GPT-2's vocabulary) or '\\n' (bytes), at\n"
		"                         temperature 1 with seed (--seed + step), as `qeffect sample --step S\n"
		"                         --seed (seed + S) --tokens N` draws from a checkpoint of step S; one\n"
		"                         line 'sample at step S: TEXT' (newlines as \\n; ids where the vocabulary\n"
		"                         has no decoder), or a JSON line with --log-format json.  Printed even\n"
		"                         with --quiet; not part of the run (a resume may change it) and it\n"
		"                         leaves training's bytes as they are\n"
		"  --sample-tokens N      tokens per sample (default 32)\n"
		"  --trace on|off         per-step fingerprints into the run's catalog (default on; they\n"
		"                         read all state every step: turn off for big models)\n"
		"  --quiet                no progress lines\n"
		"  --ckpt-on-signal on|off   on (default): SIGTERM or SIGINT to any rank stops every rank after\n"
		"                         the current step, takes a checkpoint there (with --run-dir) and exits\n"
		"                         with status 75; a second signal ends at once; off: the signal ends the\n"
		"                         process at once\n"
		"  --log-format text|json   the progress lines and the closing summary as text (step, loss,\n"
		"                         held-out loss, grad norm, tok/s, model TFLOP/s = (6 N + 12 L H T)\n"
		"                         FLOPs per token x tok/s, ms/step, elapsed, eta, peak memory on cuda,\n"
		"                         lr) or as one JSON object a line (default text)\n"
		"  --json                 print a JSON summary at the end\n");
	if (for_resume)
		fprintf(f, "  --from STEP            resume from this committed checkpoint (default: the latest)\n");
}

const char *const cli_shape_flags[7] = { "--layers", "--hidden", "--heads", "--ffn", "--seq", "--vocab", "--batch" };

int *cli_shape_field(qe_model_config *m, int i)
{
	int *f[7] = { &m->layers, &m->hidden, &m->heads, &m->ffn, &m->seq, &m->vocab, &m->batch };
	return f[i];
}

/* The value parsers of the runtime's enums, as the flag table calls them (flags.h: CLI_FLAG_PARSE). */
static int p_preset(const char *v, void *dst) { return qe_model_preset(v, dst); }
static int p_lr_schedule(const char *v, void *dst) { return qe_lr_schedule_parse(v, dst); }
static int p_schedule(const char *v, void *dst) { return qe_sched_kind_parse(v, dst); }
static int p_backward(const char *v, void *dst) { return qe_sched_backward_parse(v, dst); }
static int p_exec(const char *v, void *dst) { return qe_exec_parse(v, dst); }
static int p_grad(const char *v, void *dst) { return qe_grad_parse(v, dst); }
static int p_arena(const char *v, void *dst) { return qe_arena_layout_parse(v, dst); }
static int p_amax_algo(const char *v, void *dst) { return qe_amax_algo_parse(v, dst); }
static int p_fp8_format(const char *v, void *dst) { return qe_fp8_format_parse(v, dst); }

/* --attention: qe_attn_mode + 1 into an int (0: not given). */
static int p_attention(const char *v, void *dst)
{
	qe_attn_mode m;
	if (qe_attn_mode_parse(v, &m))
		return -1;
	*(int *)dst = (int)m + 1;
	return 0;
}

/* --fp8 on|off and --precision MODE set the same field; resume names the one given in its refusals. */
static int precision_flag(const char *cmd, const char *flag, const char *v, void *dst)
{
	cli_train_args *a = dst;
	if (strcmp(flag, "--fp8") == 0) {
		if (strcmp(v, "on") && strcmp(v, "off")) {
			fprintf(stderr, "qeffect %s: --fp8 takes on or off, got '%s'\n", cmd, v);
			return 2;
		}
		a->cfg.prec.mode = strcmp(v, "on") == 0 ? QE_PREC_FP8 : QE_PREC_F32;
	} else if (qe_prec_mode_parse(v, &a->cfg.prec.mode)) {
		fprintf(stderr, "qeffect %s: bad value '%s' for %s: %s\n", cmd, v, flag, qe_last_error());
		return 2;
	}
	snprintf(a->prec_flag, sizeof(a->prec_flag), "%s", flag);
	snprintf(a->prec_value, sizeof(a->prec_value), "%s", v);
	return 0;
}

static const char *const delayed_current[] = { "delayed", "current", NULL };
static const char *const text_json[] = { "text", "json", NULL };

int cli_train_flags_parse(const char *cmd, int argc, char **argv, cli_train_args *a, int for_resume)
{
	memset(a, 0, sizeof(*a));
	qe_train_config_default(&a->cfg);
	a->ckpt_on_signal = 1;
	a->from_step = -1;
	a->sample_tokens = 32;
	char path[480];
	snprintf(path, sizeof(path), "%s/data/brown.jsonl", cli_shared_dir());
	FILE *probe = fopen(path, "r");
	if (probe) {
		fclose(probe);
		snprintf(a->cfg.data, sizeof(a->cfg.data), "%s", path);
	}
	qe_train_config *cfg = &a->cfg;
	qe_adamw_config *o = &cfg->optim;
	unsigned *g = &a->given, *og = &a->optim_given;
	/* shape flags override the preset whatever their order: applied after the parse; so are the on/off
	 * words (index into cli_on_off: 0 on, 1 off; -1 not given) */
	int *shape = a->shape;
	int backend = -1, on_signal = -1, check_rep = -1, tie = -1;
	const long long big = 100000000, any = 0x7fffffffffffffffLL;
	const cli_flag train_only[] = { { "init-from", 0, CLI_FLAG_PATH, .dst = &a->init_from }, { 0 } };
	const cli_flag resume_only[] = { { "remote-run-id", 0, CLI_FLAG_STRING, .dst = &a->remote_run_id }, { 0 } };
	const cli_flag flags[] = {
		{ "preset", 0, CLI_FLAG_PARSE, &cfg->model, .parse = p_preset, .given = g, .bit = CLI_F_PRESET },
		{ "pp", 0, CLI_FLAG_INT, &cfg->pp, 1, 64, .given = g, .bit = CLI_F_PP },
		{ "dp", 0, CLI_FLAG_INT, &cfg->dp, 1, 64, .given = g, .bit = CLI_F_DP },
		{ "micro", 0, CLI_FLAG_INT, &cfg->micro, 1, 256, .given = g, .bit = CLI_F_MICRO },
		{ "chunks", 0, CLI_FLAG_INT, &cfg->chunks, 1, 8, .given = g, .bit = CLI_F_CHUNKS },
		{ "steps", 0, CLI_FLAG_INT64, &cfg->steps, 0, big, .given = g, .bit = CLI_F_STEPS },
		{ "seed", 0, CLI_FLAG_UINT64, &cfg->seed, 0, any, .given = g, .bit = CLI_F_SEED },
		{ "amax-history", 0, CLI_FLAG_INT, &cfg->prec.recipe.history_len, 1, 65536, .given = g, .bit = CLI_F_HISTORY },
		{ "amax-margin", 0, CLI_FLAG_INT, &cfg->prec.recipe.margin, 0, 127, .given = g, .bit = CLI_F_MARGIN },
		{ "eval-every", 0, CLI_FLAG_INT, &cfg->eval_every, 0, big, .given = g, .bit = CLI_F_EVAL },
		{ "eval-micro", 0, CLI_FLAG_INT, &cfg->eval_micro, 1, 4096, .given = g, .bit = CLI_F_EVAL_MICRO },
		{ "ckpt-every", 0, CLI_FLAG_INT, &cfg->ckpt_every, 0, big, .given = g, .bit = CLI_F_CKPT },
		{ "nproc", 0, CLI_FLAG_INT, &a->nproc, 1, 256, .given = g, .bit = CLI_F_NPROC },
		{ "log-every", 0, CLI_FLAG_INT, &cfg->log_every, 1, big, .given = g, .bit = CLI_F_LOG },
		{ "from", 0, CLI_FLAG_LONG, &a->from_step, 0, any, .given = g, .bit = CLI_F_FROM },
		{ "sample-every", 0, CLI_FLAG_LONG, &a->sample_every, .lo = 0, .hi = big },
		{ "sample-tokens", 0, CLI_FLAG_LONG, &a->sample_tokens, .lo = 1, .hi = 1000000 },
		{ "layers", 0, CLI_FLAG_INT, &shape[0], 1, 1024, .given = g, .bit = CLI_F_SHAPE },
		{ "hidden", 0, CLI_FLAG_INT, &shape[1], 1, 65536, .given = g, .bit = CLI_F_SHAPE },
		{ "heads", 0, CLI_FLAG_INT, &shape[2], 1, 1024, .given = g, .bit = CLI_F_SHAPE },
		{ "ffn", 0, CLI_FLAG_INT, &shape[3], 1, 262144, .given = g, .bit = CLI_F_SHAPE },
		{ "seq", 0, CLI_FLAG_INT, &shape[4], 1, 65536, .given = g, .bit = CLI_F_SHAPE },
		{ "vocab", 0, CLI_FLAG_INT, &shape[5], 2, 1048576, .given = g, .bit = CLI_F_SHAPE },
		{ "batch", 0, CLI_FLAG_INT, &shape[6], 1, 4096, .given = g, .bit = CLI_F_SHAPE },
		{ "attention", 0, CLI_FLAG_PARSE, &a->attn, .parse = p_attention, .given = g, .bit = CLI_F_SHAPE },
		{ "tie-embeddings", 0, CLI_FLAG_CHOICE, &tie, .words = cli_on_off, .given = g, .bit = CLI_F_SHAPE },
		{ "lr", 0, CLI_FLAG_FLOAT, &o->lr, .dlo = 0, .dhi = 10, .given = g, .bit = CLI_F_LR },
		{ "lr-schedule", 0, CLI_FLAG_PARSE, &o->lr_schedule, .parse = p_lr_schedule, .given = og, .bit = CLI_O_SCHEDULE },
		{ "warmup", 0, CLI_FLAG_INT64, &o->warmup, 0, 1000000000, .given = og, .bit = CLI_O_WARMUP },
		{ "lr-decay-steps", 0, CLI_FLAG_INT64, &o->decay_steps, 0, 1000000000, .given = og, .bit = CLI_O_DECAY },
		{ "lr-min", 0, CLI_FLAG_FLOAT, &o->lr_min, .dlo = 0, .dhi = 10, .given = og, .bit = CLI_O_LR_MIN },
		{ "weight-decay", 0, CLI_FLAG_FLOAT, &o->weight_decay, .dlo = 0, .dhi = 10, .given = og, .bit = CLI_O_WD },
		{ "beta1", 0, CLI_FLAG_FLOAT, &o->beta1, .dlo = 0, .dhi = 1, .given = og, .bit = CLI_O_BETA1 },
		{ "beta2", 0, CLI_FLAG_FLOAT, &o->beta2, .dlo = 0, .dhi = 1, .given = og, .bit = CLI_O_BETA2 },
		{ "eps", 0, CLI_FLAG_FLOAT, &o->eps, .dlo = 1e-30, .dhi = 1, .given = og, .bit = CLI_O_EPS },
		{ "grad-clip", 0, CLI_FLAG_FLOAT, &o->grad_clip, .dlo = 0, .dhi = 1e30, .given = og, .bit = CLI_O_CLIP },
		{ "schedule", 0, CLI_FLAG_PARSE, &cfg->schedule, .parse = p_schedule, .given = g, .bit = CLI_F_SCHEDULE },
		{ "backward", 0, CLI_FLAG_PARSE, &cfg->backward, .parse = p_backward, .given = g, .bit = CLI_F_BACKWARD },
		{ "exec", 0, CLI_FLAG_PARSE, &cfg->exec, .parse = p_exec, .given = g, .bit = CLI_F_EXEC },
		{ "grad", 0, CLI_FLAG_PARSE, &cfg->grad, .parse = p_grad, .given = g, .bit = CLI_F_GRAD },
		{ "arena", 0, CLI_FLAG_PARSE, &cfg->arena, .parse = p_arena, .given = g, .bit = CLI_F_ARENA },
		{ "amax-algo", 0, CLI_FLAG_PARSE, &cfg->prec.recipe.algo, .parse = p_amax_algo, .given = g, .bit = CLI_F_ALGO },
		{ "fp8-format", 0, CLI_FLAG_PARSE, &cfg->prec.recipe.format, .parse = p_fp8_format, .given = g,
		  .bit = CLI_F_FORMAT },
		{ "fp8", 0, CLI_FLAG_FN, a, .fn = precision_flag, .given = g, .bit = CLI_F_FP8 },
		{ "precision", 0, CLI_FLAG_FN, a, .fn = precision_flag, .given = g, .bit = CLI_F_FP8 },
		{ "head-scaling", 0, CLI_FLAG_CHOICE, &cfg->prec.head_current, .words = delayed_current, .given = g,
		  .bit = CLI_F_HEAD },
		{ "data", 0, CLI_FLAG_PATH, cfg->data, .cap = sizeof(cfg->data), .given = g, .bit = CLI_F_DATA },
		{ "run-dir", 0, CLI_FLAG_PATH, cfg->run_dir, .cap = sizeof(cfg->run_dir), .given = g, .bit = CLI_F_RUNDIR },
		{ "backend", 0, CLI_FLAG_CHOICE, &backend, .words = cli_backends, .given = g, .bit = CLI_F_BACKEND },
		{ "ckpt-on-signal", 0, CLI_FLAG_CHOICE, &on_signal, .words = cli_on_off },
		{ "log-format", 0, CLI_FLAG_CHOICE, &a->log_json, .words = text_json },
		{ "trace", 0, CLI_FLAG_CHOICE, &a->no_trace, .words = cli_on_off },
		{ "check-replicas", 0, CLI_FLAG_CHOICE, &check_rep, .words = cli_on_off },
		{ "quiet", 0, CLI_FLAG_BOOL, .dst = &a->quiet },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &a->json },
		{ "ckpt-async", 0, CLI_FLAG_FN, &a->async, .fn = cli_async_flag_set, .bare = "wait" },
		{ .kind = CLI_FLAG_INCLUDE, .include = cli_tier_flags },
		{ .kind = CLI_FLAG_INCLUDE, .include = for_resume ? resume_only : train_only },
		{ 0 },
	};
	int rc = cli_flags_parse(cmd, flags, argc, argv, NULL);
	cli_storage_commit();
	if (rc)
		return rc;
	if (backend >= 0)
		snprintf(cfg->backend, sizeof(cfg->backend), "%s", cli_backends[backend]);
	if (on_signal >= 0)
		a->ckpt_on_signal = on_signal == 0;
	if (check_rep >= 0)
		cfg->check_replicas = check_rep == 0;
	if (tie >= 0)
		a->tie = tie == 0 ? 2 : 1;
	for (int i = 0; i < 7; i++)
		if (shape[i])
			*cli_shape_field(&cfg->model, i) = shape[i];
	/* fields left unset follow the ones given: the FFN is 4 x hidden, as every preset has it */
	if (shape[1] && !shape[3])
		cfg->model.ffn = 4 * shape[1];
	if (a->attn)
		cfg->model.attn = a->attn - 1;
	if (a->tie)
		cfg->model.tie_embeddings = a->tie - 1;
	if ((a->given & CLI_F_SHAPE) && qe_model_config_check(&cfg->model)) {
		fprintf(stderr, "qeffect %s: %s\n", cmd, qe_last_error());
		return 2;
	}
	if (for_resume && (a->given & CLI_F_ARENA)) {
		fprintf(stderr, "qeffect %s: --arena belongs to train: a resumed run keeps the arena layout its run "
				"config records (both layouts give the same bits)\n", cmd);
		return 2;
	}
	/* cosine and linear end at train's --steps unless told otherwise (recorded: a resume keeps it) */
	if (!for_resume && !(a->optim_given & CLI_O_DECAY))
		cfg->optim.decay_steps = cfg->optim.lr_schedule == QE_LR_CONSTANT ? 0 : cfg->steps;
	if (!for_resume && (a->given & CLI_F_FROM)) {
		fprintf(stderr, "qeffect %s: --from belongs to resume\n", cmd);
		return 2;
	}
	return 0;
}

void cli_train_config_finish(qe_train_config *cfg, unsigned given, int stages)
{
	if ((given & CLI_F_CHUNKS) && cfg->chunks > 0)
		return;
	if (cfg->schedule == QE_SCHED_ZBV) {
		cfg->chunks = 2;
		return;
	}
	int pp = cfg->pp > 0 ? cfg->pp : 1;
	if (stages > 0 && stages % pp == 0) {
		cfg->chunks = stages / pp;
		return;
	}
	/* one layer per chunk where that fits the executor's 8 chunks, else the most chunks that divide */
	int per_rank = cfg->model.layers / pp;
	cfg->chunks = per_rank > 0 ? per_rank : 1;
	for (int v = 8; per_rank > 8 && v >= 1; v--)
		if (per_rank % v == 0) {
			cfg->chunks = v;
			break;
		}
}
