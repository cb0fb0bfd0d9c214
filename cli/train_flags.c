/*
 * train_flags.c - flag parsing for train and resume.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
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

static int bad(const char *cmd, const char *flag, const char *val)
{
	fprintf(stderr, "qeffect %s: bad value '%s' for %s: %s\n", cmd, val, flag, qe_last_error());
	return 2;
}

int cli_train_flags_parse(const char *cmd, int argc, char **argv, cli_train_args *a, int for_resume)
{
	enum {
		O_PRESET = 256, O_PP, O_DP, O_MICRO, O_CHUNKS, O_SCHEDULE, O_BACKWARD, O_EXEC, O_GRAD, O_STEPS, O_SEED,
		O_LR, O_HISTORY, O_MARGIN, O_ALGO, O_FORMAT, O_FP8, O_HEAD, O_DATA, O_RUNDIR, O_EVAL, O_EVALM, O_CKPT,
		O_BACKEND, O_NPROC, O_LOG, O_QUIET, O_JSON, O_FROM, O_CHECKREP, O_TRACE, O_ARENA, O_PRECISION, O_LAYERS,
		O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_VOCAB, O_BATCH, O_ATTN, O_HELP, O_LRSCHED, O_WARMUP, O_LRMIN, O_DECAY,
		O_WD, O_BETA1, O_BETA2, O_EPS, O_CLIP, O_LOGFMT, O_ONSIGNAL, O_TIE, O_SAMPLE, O_SAMPLE_TOKENS
	};
	static const struct option opts[] = {
		{ "preset", 1, 0, O_PRESET },	  { "pp", 1, 0, O_PP },		  { "dp", 1, 0, O_DP },
		{ "micro", 1, 0, O_MICRO },	  { "chunks", 1, 0, O_CHUNKS },	  { "schedule", 1, 0, O_SCHEDULE },
		{ "backward", 1, 0, O_BACKWARD }, { "exec", 1, 0, O_EXEC },	  { "grad", 1, 0, O_GRAD },
		{ "steps", 1, 0, O_STEPS },	  { "seed", 1, 0, O_SEED },	  { "lr", 1, 0, O_LR },
		{ "amax-history", 1, 0, O_HISTORY }, { "amax-margin", 1, 0, O_MARGIN }, { "amax-algo", 1, 0, O_ALGO },
		{ "fp8-format", 1, 0, O_FORMAT }, { "fp8", 1, 0, O_FP8 },	  { "head-scaling", 1, 0, O_HEAD },
		{ "data", 1, 0, O_DATA },	  { "run-dir", 1, 0, O_RUNDIR },  { "eval-every", 1, 0, O_EVAL },
		{ "eval-micro", 1, 0, O_EVALM },  { "ckpt-every", 1, 0, O_CKPT }, { "backend", 1, 0, O_BACKEND },
		{ "nproc", 1, 0, O_NPROC },	  { "log-every", 1, 0, O_LOG },	  { "quiet", 0, 0, O_QUIET },
		{ "check-replicas", 1, 0, O_CHECKREP },
		{ "trace", 1, 0, O_TRACE },	  { "arena", 1, 0, O_ARENA },
		{ "json", 0, 0, O_JSON },	  { "from", 1, 0, O_FROM },	  { "help", 0, 0, O_HELP },
		{ "precision", 1, 0, O_PRECISION }, { "layers", 1, 0, O_LAYERS }, { "hidden", 1, 0, O_HIDDEN },
		{ "heads", 1, 0, O_HEADS },	  { "ffn", 1, 0, O_FFN },	  { "seq", 1, 0, O_SEQ },
		{ "vocab", 1, 0, O_VOCAB },	  { "batch", 1, 0, O_BATCH },	  { "attention", 1, 0, O_ATTN },
		{ "tie-embeddings", 1, 0, O_TIE },
		{ "lr-schedule", 1, 0, O_LRSCHED }, { "warmup", 1, 0, O_WARMUP }, { "lr-min", 1, 0, O_LRMIN },
		{ "lr-decay-steps", 1, 0, O_DECAY }, { "weight-decay", 1, 0, O_WD }, { "beta1", 1, 0, O_BETA1 }, { "grad-clip", 1, 0, O_CLIP }, { "log-format", 1, 0, O_LOGFMT }, { "ckpt-on-signal", 1, 0, O_ONSIGNAL },
		{ "beta2", 1, 0, O_BETA2 },	  { "eps", 1, 0, O_EPS },
		{ "sample-every", 1, 0, O_SAMPLE }, { "sample-tokens", 1, 0, O_SAMPLE_TOKENS },
		{ 0, 0, 0, 0 }
	};
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
	optind = 1;
	opterr = 0;
	int c;
	long v;
	double d;
	qe_train_config *cfg = &a->cfg;
	/* shape flags override the preset whatever their order: applied after the loop */
	int *shape = a->shape;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		switch (c) {
		case 'h':
		case O_HELP:
			return -1;
		case O_PRESET:
			if (qe_model_preset(optarg, &cfg->model))
				return bad(cmd, "--preset", optarg);
			a->given |= CLI_F_PRESET;
			break;
#define INTFLAG(O, F, field, lo, hi, name)                                                    \
	case O:                                                                              \
		if (cli_parse_long(cmd, name, optarg, &v))                                   \
			return 2;                                                            \
		if (v < lo || v > hi) {                                                      \
			fprintf(stderr, "qeffect %s: %s must be in %ld..%ld, got %ld\n", cmd, name, \
				(long)(lo), (long)(hi), v);                                  \
			return 2;                                                            \
		}                                                                            \
		field = v;                                                                   \
		a->given |= F;                                                               \
		break;
			INTFLAG(O_PP, CLI_F_PP, cfg->pp, 1, 64, "--pp")
			INTFLAG(O_DP, CLI_F_DP, cfg->dp, 1, 64, "--dp")
			INTFLAG(O_MICRO, CLI_F_MICRO, cfg->micro, 1, 256, "--micro")
			INTFLAG(O_CHUNKS, CLI_F_CHUNKS, cfg->chunks, 1, 8, "--chunks")
			INTFLAG(O_STEPS, CLI_F_STEPS, cfg->steps, 0, 100000000, "--steps")
			INTFLAG(O_SEED, CLI_F_SEED, cfg->seed, 0, 0x7fffffffffffffffL, "--seed")
			INTFLAG(O_HISTORY, CLI_F_HISTORY, cfg->prec.recipe.history_len, 1, 65536, "--amax-history")
			INTFLAG(O_MARGIN, CLI_F_MARGIN, cfg->prec.recipe.margin, 0, 127, "--amax-margin")
			INTFLAG(O_EVAL, CLI_F_EVAL, cfg->eval_every, 0, 100000000, "--eval-every")
			INTFLAG(O_EVALM, CLI_F_EVAL_MICRO, cfg->eval_micro, 1, 4096, "--eval-micro")
			INTFLAG(O_CKPT, CLI_F_CKPT, cfg->ckpt_every, 0, 100000000, "--ckpt-every")
			INTFLAG(O_NPROC, CLI_F_NPROC, a->nproc, 1, 256, "--nproc")
			INTFLAG(O_LOG, CLI_F_LOG, cfg->log_every, 1, 100000000, "--log-every")
			INTFLAG(O_FROM, CLI_F_FROM, a->from_step, 0, 0x7fffffffffffffffL, "--from")
			INTFLAG(O_SAMPLE, 0, a->sample_every, 0, 100000000, "--sample-every")
			INTFLAG(O_SAMPLE_TOKENS, 0, a->sample_tokens, 1, 1000000, "--sample-tokens")
			INTFLAG(O_LAYERS, CLI_F_SHAPE, shape[0], 1, 1024, "--layers")
			INTFLAG(O_HIDDEN, CLI_F_SHAPE, shape[1], 1, 65536, "--hidden")
			INTFLAG(O_HEADS, CLI_F_SHAPE, shape[2], 1, 1024, "--heads")
			INTFLAG(O_FFN, CLI_F_SHAPE, shape[3], 1, 262144, "--ffn")
			INTFLAG(O_SEQ, CLI_F_SHAPE, shape[4], 1, 65536, "--seq")
			INTFLAG(O_VOCAB, CLI_F_SHAPE, shape[5], 2, 1048576, "--vocab")
			INTFLAG(O_BATCH, CLI_F_SHAPE, shape[6], 1, 4096, "--batch")
#undef INTFLAG
		case O_LR:
			if (cli_parse_double(cmd, "--lr", optarg, &d))
				return 2;
			if (!(d >= 0 && d < 10)) {
				fprintf(stderr, "qeffect %s: --lr must be in [0, 10), got %s\n", cmd, optarg);
				return 2;
			}
			cfg->optim.lr = (float)d;
			a->given |= CLI_F_LR;
			break;
		case O_LRSCHED:
			if (qe_lr_schedule_parse(optarg, &cfg->optim.lr_schedule))
				return bad(cmd, "--lr-schedule", optarg);
			a->optim_given |= CLI_O_SCHEDULE;
			break;
		case O_WARMUP:
		case O_DECAY:
			if (cli_parse_long(cmd, c == O_WARMUP ? "--warmup" : "--lr-decay-steps", optarg, &v))
				return 2;
			if (v < 0 || v > 1000000000L) {
				fprintf(stderr, "qeffect %s: %s must be in 0..1000000000, got %s\n", cmd,
					c == O_WARMUP ? "--warmup" : "--lr-decay-steps", optarg);
				return 2;
			}
			*(c == O_WARMUP ? &cfg->optim.warmup : &cfg->optim.decay_steps) = v;
			a->optim_given |= c == O_WARMUP ? CLI_O_WARMUP : CLI_O_DECAY;
			break;
		case O_LRMIN:
		case O_WD:
		case O_BETA1:
		case O_BETA2:
		case O_EPS:
		case O_CLIP: {
			static const struct {
				int opt;
				const char *flag;
				unsigned bit;
				double lo, hi; /* [lo, hi) */
			} fl[] = { { O_LRMIN, "--lr-min", CLI_O_LR_MIN, 0, 10 },   { O_WD, "--weight-decay", CLI_O_WD, 0, 10 },
				   { O_BETA1, "--beta1", CLI_O_BETA1, 0, 1 },	  { O_BETA2, "--beta2", CLI_O_BETA2, 0, 1 },
				   { O_EPS, "--eps", CLI_O_EPS, 1e-30, 1 },	  { O_CLIP, "--grad-clip", CLI_O_CLIP, 0, 1e30 } };
			int k = 0;
			while (fl[k].opt != c)
				k++;
			if (cli_parse_double(cmd, fl[k].flag, optarg, &d))
				return 2;
			if (!(d >= fl[k].lo && d < fl[k].hi)) {
				fprintf(stderr, "qeffect %s: %s must be in [%g, %g), got %s\n", cmd, fl[k].flag, fl[k].lo,
					fl[k].hi, optarg);
				return 2;
			}
			float *dst[] = { &cfg->optim.lr_min, &cfg->optim.weight_decay, &cfg->optim.beta1, &cfg->optim.beta2,
					 &cfg->optim.eps, &cfg->optim.grad_clip };
			*dst[k] = (float)d;
			a->optim_given |= fl[k].bit;
			break;
		}
		case O_SCHEDULE:
			if (qe_sched_kind_parse(optarg, &cfg->schedule))
				return bad(cmd, "--schedule", optarg);
			a->given |= CLI_F_SCHEDULE;
			break;
		case O_BACKWARD:
			if (qe_sched_backward_parse(optarg, &cfg->backward))
				return bad(cmd, "--backward", optarg);
			a->given |= CLI_F_BACKWARD;
			break;
		case O_EXEC:
			if (qe_exec_parse(optarg, &cfg->exec))
				return bad(cmd, "--exec", optarg);
			a->given |= CLI_F_EXEC;
			break;
		case O_GRAD:
			if (qe_grad_parse(optarg, &cfg->grad))
				return bad(cmd, "--grad", optarg);
			a->given |= CLI_F_GRAD;
			break;
		case O_ARENA:
			if (qe_arena_layout_parse(optarg, &cfg->arena))
				return bad(cmd, "--arena", optarg);
			a->given |= CLI_F_ARENA;
			break;
		case O_ALGO:
			if (qe_amax_algo_parse(optarg, &cfg->prec.recipe.algo))
				return bad(cmd, "--amax-algo", optarg);
			a->given |= CLI_F_ALGO;
			break;
		case O_FORMAT:
			if (qe_fp8_format_parse(optarg, &cfg->prec.recipe.format))
				return bad(cmd, "--fp8-format", optarg);
			a->given |= CLI_F_FORMAT;
			break;
		case O_FP8:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect %s: --fp8 takes on or off, got '%s'\n", cmd, optarg);
				return 2;
			}
			cfg->prec.mode = strcmp(optarg, "on") == 0 ? QE_PREC_FP8 : QE_PREC_F32;
			snprintf(a->prec_flag, sizeof(a->prec_flag), "--fp8");
			snprintf(a->prec_value, sizeof(a->prec_value), "%s", optarg);
			a->given |= CLI_F_FP8;
			break;
		case O_ATTN: {
			qe_attn_mode m;
			if (qe_attn_mode_parse(optarg, &m))
				return bad(cmd, "--attention", optarg);
			a->attn = (int)m + 1;
			a->given |= CLI_F_SHAPE;
			break;
		}
		case O_TIE:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect %s: bad value '%s' for --tie-embeddings: on or off\n", cmd, optarg);
				return 2;
			}
			a->tie = strcmp(optarg, "on") == 0 ? 2 : 1;
			a->given |= CLI_F_SHAPE;
			break;
		case O_PRECISION:
			if (qe_prec_mode_parse(optarg, &cfg->prec.mode))
				return bad(cmd, "--precision", optarg);
			snprintf(a->prec_flag, sizeof(a->prec_flag), "--precision");
			snprintf(a->prec_value, sizeof(a->prec_value), "%s", optarg);
			a->given |= CLI_F_FP8;
			break;
		case O_HEAD:
			if (strcmp(optarg, "delayed") && strcmp(optarg, "current")) {
				fprintf(stderr, "qeffect %s: --head-scaling takes delayed or current, got '%s'\n", cmd, optarg);
				return 2;
			}
			cfg->prec.head_current = strcmp(optarg, "current") == 0;
			a->given |= CLI_F_HEAD;
			break;
		case O_DATA:
			if (cli_parse_path(cmd, "--data", optarg))
				return 2;
			snprintf(cfg->data, sizeof(cfg->data), "%s", optarg);
			a->given |= CLI_F_DATA;
			break;
		case O_RUNDIR:
			if (cli_parse_path(cmd, "--run-dir", optarg))
				return 2;
			snprintf(cfg->run_dir, sizeof(cfg->run_dir), "%s", optarg);
			a->given |= CLI_F_RUNDIR;
			break;
		case O_BACKEND:
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "qeffect %s: --backend takes cpu or cuda, got '%s'\n", cmd, optarg);
				return 2;
			}
			snprintf(cfg->backend, sizeof(cfg->backend), "%s", optarg);
			a->given |= CLI_F_BACKEND;
			break;
		case O_ONSIGNAL:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect %s: bad value '%s' for --ckpt-on-signal: on or off\n", cmd, optarg);
				return 2;
			}
			a->ckpt_on_signal = !strcmp(optarg, "on");
			break;
		case O_LOGFMT:
			if (strcmp(optarg, "text") && strcmp(optarg, "json")) {
				fprintf(stderr, "qeffect %s: bad value '%s' for --log-format: text or json\n", cmd, optarg);
				return 2;
			}
			a->log_json = !strcmp(optarg, "json");
			break;
		case O_QUIET:
			a->quiet = 1;
			break;
		case O_TRACE:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect %s: --trace takes on or off, got '%s'\n", cmd, optarg);
				return 2;
			}
			a->no_trace = strcmp(optarg, "off") == 0;
			break;
		case O_CHECKREP:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "qeffect %s: --check-replicas takes on or off, got '%s'\n", cmd, optarg);
				return 2;
			}
			cfg->check_replicas = strcmp(optarg, "on") == 0;
			break;
		case O_JSON:
			a->json = 1;
			break;
		case '?':
		default:
			fprintf(stderr, "qeffect %s: unknown or incomplete flag '%s' (see --help)\n", cmd, flag);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "qeffect %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
		return 2;
	}
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
