/*
 * export.h - `qeffect export`: a checkpoint's weights as files other tools
 * read (issue 37 item 2).  The formats are written here from their own
 * documentation:
 *   - safetensors (Hugging Face): u64 little-endian header length N, N bytes
 *     of JSON {"__metadata__": {...}, NAME: {"dtype", "shape",
 *     "data_offsets": [begin, end]}, ...} padded with spaces so the data
 *     starts 8-byte aligned, then the tensors' bytes back to back (offsets
 *     relative to the end of the header, no holes), each row-major
 *     little-endian; plus a config.json GPT2LMHeadModel reads.  A tied
 *     model (names.h) is written as Hugging Face writes GPT-2: no
 *     lm_head.weight (nor its moments), tie_word_embeddings true; an untied
 *     one has lm_head.weight and tie_word_embeddings false.
 *   - llm.c's GPT-2 model file (train_gpt2.c gpt2_build_from_checkpoint):
 *     256 int32 (magic 20240326, version 3 = f32, maxT, V, L, NH, C, Vp, the
 *     rest 0), then 16 f32 tensors in its order, the per-block ones stacked
 *     over the layers.  llm.c ties its head to wte, so a tied model fits it
 *     whole; an untied model's head has no place in it.
 * Each output is written to a temporary file beside it, fsync'd, renamed
 * into place and its folder fsync'd; a failure removes the temporary files
 * and leaves nothing new behind.
 */
#ifndef CLI_EXPORT_H
#define CLI_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "cli/named.h"

/* One output written durably: tmp, fsync, rename, fsync of the folder. */
typedef struct cli_xfile {
	char path[4096];
	char tmp[4200];
	FILE *f;
	uint64_t bytes;
} cli_xfile;

/* Create x->tmp (PATH.tmp.PID, exclusive) for path.  QE_EIO naming it. */
int cli_xfile_open(cli_xfile *x, const char *path);
/* Write n bytes at the current position, or at offset off when off >= 0. */
int cli_xfile_write(cli_xfile *x, const void *p, size_t n, int64_t off);
/* Flush, fsync and close the temporary file (not yet in place). */
int cli_xfile_sync(cli_xfile *x);
/* Rename the synced temporary file into place. */
int cli_xfile_commit(cli_xfile *x);
/* Close and remove the temporary file, if any (safe to call after commit). */
void cli_xfile_abort(cli_xfile *x);
/* fsync the folder holding path, so its renames are durable. */
int cli_fsync_dir_of(const char *path);

typedef struct cli_export_opts {
	int with_optimizer; /* safetensors: NAME.exp_avg, NAME.exp_avg_sq too (a tied head's are wte's: not written) */
	int with_fp8;       /* safetensors: M.fp8.ROLE.amax_history, .scale, .scale_inv too */
	int untied_ok;      /* llmc: write an untied model anyway (its head is left out); a tied model needs none */
	const char *run_id;
	int64_t step;
} cli_export_opts;

typedef struct cli_export_result {
	int tensors;
	uint64_t bytes;    /* of the model file */
	int head_dropped;  /* llmc with untied_ok: an untied lm_head.weight was not written */
} cli_export_result;

/* The Hugging Face name of a named tensor: transformer.NAME, lm_head.* as is. */
void cli_export_hf_name(const qe_named *e, char *buf, size_t len);

/*
 * Write the safetensors file st_path and the GPT2LMHeadModel config.json at
 * cfg_path (both durably; nothing left behind on failure).  QE_E* naming the
 * file or the tensor.
 */
int cli_export_safetensors(cli_named *nm, const cli_export_opts *o, const char *st_path, const char *cfg_path,
			   cli_export_result *res);

/*
 * Write llm.c's model file at path.  QE_EINVAL (nothing written) when the
 * model does not fit llm.c's: ffn other than 4 x hidden, or an untied head
 * without o->untied_ok (a tied head is wte: written whole).
 */
int cli_export_llmc(cli_named *nm, const cli_export_opts *o, const char *path, cli_export_result *res);

#endif
