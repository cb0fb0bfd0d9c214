/*
 * import.h - reading a GPT-2 model file for `train --init-from PATH` (issue
 * 37 item 3): the two formats `export` writes (cli/export.h), read with our
 * own code:
 *   - Hugging Face safetensors: a file, or a folder holding model.safetensors
 *     (and config.json, whose n_layer, n_embd, n_head, n_positions and
 *     vocab_size are checked when present).  Names "transformer.h.N..." or
 *     bare "h.N..."; Conv1D weights [in, out], turned into qeffect's
 *     [out, in]; F32 only.  A tied model (--tie-embeddings on, names.h)
 *     takes its head from the file's wte: a file without lm_head.weight (as
 *     Hugging Face writes GPT-2) loads, one whose lm_head.weight has the
 *     bytes of its wte loads, and one whose lm_head.weight differs is refused
 *     (its head would be lost; --tie-embeddings off loads it).  An untied
 *     model takes lm_head.weight when the file has it; without it the head
 *     starts as a copy of wte (GPT-2's tie), and the open says so
 *     (head_tied).  The attention mask buffers of
 *     old GPT-2 files (h.N.attn.bias, h.N.attn.masked_bias) and the extras
 *     `export --with-optimizer --with-fp8` adds are skipped; any other name
 *     is refused.
 *   - llm.c's model file (magic 20240326, version 3 = f32): its padded
 *     vocabulary's rows are read too when the padding matches ours; its head
 *     is wte (for an untied model a starting copy, head_tied).
 * Every tensor is checked against the model's naming table (names.h) before
 * a byte is loaded: the first one that differs is named with both shapes,
 * and every tensor's bytes must lie inside the file.  The vocabulary's
 * padding rows the file does not hold start at zero.
 */
#ifndef CLI_IMPORT_H
#define CLI_IMPORT_H

#include <stdint.h>

#include "runtime/exec/rank.h"
#include "runtime/model/names.h"

/* Where one parameter's floats are in the file. */
typedef struct cli_import_src {
	uint64_t offset;   /* bytes from the start of the file */
	int64_t file_rows; /* rows the file holds (padded vocabulary rows included) */
	int transposed;    /* the file holds it [cols, rows] (Hugging Face's Conv1D) */
	int from;          /* the parameter (index in the naming table) whose bytes it takes: itself, or wte for a tied head */
} cli_import_src;

typedef struct cli_import {
	char path[4096];        /* the model file read (model.safetensors inside a folder) */
	char format[16];        /* "safetensors" or "llmc" */
	char hash[33];          /* xxh3-128 of the file's bytes (cli_import_open with hash) */
	uint64_t size;
	int head_tied;          /* an untied model's lm_head.weight was not in the file: it starts as a copy of wte */
	int skipped;            /* tensors in the file that are not parameters (skipped) */
	qe_model_config model;
	qe_names names;         /* the model as one stage: names and shapes */
	cli_import_src *src;    /* per parameter of names */
} cli_import;

/*
 * Read and check path's header against model m (the layers, shapes,
 * vocabulary); with hash, also hash the whole file.  QE_EINVAL / QE_ECORRUPT
 * / QE_EIO with a message naming the file and the tensor.  OUT *out:
 * released with cli_import_release (also after a failure).
 */
int cli_import_open(const char *path, const qe_model_config *m, int hash, cli_import *out);
void cli_import_release(cli_import *im);

/*
 * Load the parameters of every local stage of rank r from the file (the
 * rank's own slices, found by name through the naming table of its cut),
 * then invalidate its weight caches.  AdamW moments and FP8 meta are left as
 * the rank was created: zero and fresh.  QE_E* naming the file and tensor.
 */
int cli_import_load_rank(cli_import *im, qe_rank *r);

#endif
