/*
 * config.h - the whole configuration of a training run, and its JSON form.
 *
 * The JSON form is what the catalog stores per run, so a resume in a fresh
 * process rebuilds exactly the same run, and a resume with a conflicting
 * model or recipe flag can be refused by comparing fields.
 */
#ifndef QE_JOB_CONFIG_H
#define QE_JOB_CONFIG_H

#include <stdint.h>

#include "runtime/contract/contract.h"
#include "runtime/model/model.h"
#include "runtime/optim/adamw.h"
#include "runtime/sched/sched.h"

typedef enum qe_exec_mode { QE_EXEC_EAGER = 0, QE_EXEC_GRAPH = 1 } qe_exec_mode;
typedef enum qe_grad_mode { QE_GRAD_DIRECT = 0, QE_GRAD_COPY = 1 } qe_grad_mode;

typedef struct qe_train_config {
	qe_model_config model;
	qe_precision prec;
	qe_adamw_config optim;
	char backend[16];        /* "cpu" or "cuda" */
	int pp, dp, micro, chunks;
	qe_sched_kind schedule;
	qe_sched_backward backward;
	qe_exec_mode exec;
	qe_grad_mode grad;
	qe_arena_layout arena;   /* gradient arena: accumulate (default) or per-mb views */
	int64_t steps;           /* train until this step count is reached */
	uint64_t seed;
	char data[512];          /* JSONL or llm.c shard; "" = built-in text */
	uint64_t data_fingerprint; /* qe_data_fingerprint of its tokens; 0 = not recorded (older runs) */
	char run_dir[512];       /* "" = no run directory (no traces, no checkpoints) */
	char local_dir[512];     /* --local-dir of train (absolute), "" = none: later commands use it by default */
	int eval_every;          /* 0 = never */
	int eval_micro;          /* held-out microbatches per evaluation */
	int ckpt_every;          /* 0 = never */
	int log_every;           /* progress line every N steps */
	int check_replicas;      /* DP > 1: compare replicas' parameters after every step */
	/*
	 * train --init-from: the model file the weights came from (absolute), its
	 * format ("safetensors" or "llmc") and the xxh3-128 of its bytes (hex);
	 * "" = initialized from seed.  Loaded before step 1 only, never on resume.
	 */
	char init_from[512];
	char init_format[16];
	char init_hash[40];
	/*
	 * Not part of the run (not in the JSON form): 1 keeps one tape slot per
	 * microbatch, so every microbatch's outputs are still there at the end of
	 * the step (per-step traces read them); 0 lets a rank without pipeline
	 * peers use as few slots as its schedule needs (runtime/exec/slots.c).
	 */
	int full_slots;
} qe_train_config;

void qe_train_config_default(qe_train_config *c);
/* Check consistency (pp * chunks == layers, micro multiple of pp, ...); QE_EINVAL names the flag. */
int qe_train_config_check(const qe_train_config *c);

const char *qe_exec_name(qe_exec_mode m);
const char *qe_grad_name(qe_grad_mode m);
int qe_exec_parse(const char *s, qe_exec_mode *out);
int qe_grad_parse(const char *s, qe_grad_mode *out);

/* JSON text of the config; the caller frees it with free(). NULL on out of memory. */
char *qe_train_config_to_json(const qe_train_config *c);
/* Parse JSON made by qe_train_config_to_json. */
int qe_train_config_from_json(const char *json, qe_train_config *out);
/*
 * The first field that makes a checkpoint of `saved` unusable for `want`
 * (model shape, precision, recipe): writes its description into why and
 * returns QE_EMISMATCH; QE_OK when compatible.  Mapping fields (pp, dp,
 * schedule, exec, grad, arena) may differ.
 */
int qe_train_config_compatible(const qe_train_config *saved, const qe_train_config *want, char *why, size_t len);

#endif
