/*
 * detok.h - token ids back to text: GPT-2's vocabulary read backwards, and
 * UTF-8 made safe to show (issue 37, item 6: `qeffect sample`).
 *
 * GPT-2's encoder.json maps each token to an id; its keys spell bytes with
 * the byte-level stand-in alphabet (Encoder.js's bytes_to_unicode: printable
 * Latin-1 bytes stand for themselves, the other bytes for U+0100 onwards), so
 * the bytes of id k are its key with each stand-in turned back into its
 * byte.  Concatenating the bytes of a run of ids gives the text they encode
 * (what Encoder.js's decode gives before its UTF-8 decoding); a run cut in
 * the middle of a character is not valid UTF-8, which qe_utf8_lossy repairs
 * for display.  The encoder (tokenizer.h) reads the same file forwards.
 */
#ifndef QE_DETOK_H
#define QE_DETOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct qe_gpt2_detok qe_gpt2_detok;

/*
 * Load DIR/encoder.json.  Codes: QE_ENOTFOUND (the file is missing: the
 * message names the path), QE_ECORRUPT (not a JSON object of token -> id in
 * 0..65535, or a key with a character outside the stand-in alphabet: the
 * message names the token), QE_EIO, QE_ENOMEM.  OUT *out, freed with
 * qe_gpt2_detok_free; NULL after a failure.
 */
int qe_gpt2_detok_open(const char *dir, qe_gpt2_detok **out);
void qe_gpt2_detok_free(qe_gpt2_detok *d);

/* One more than the largest id in the file (50257 for GPT-2's). */
int qe_gpt2_detok_size(const qe_gpt2_detok *d);

/*
 * The bytes of token id.  OUT *bytes (not NUL-terminated; valid while d
 * lives), *len.  QE_EINVAL when no token has that id.
 */
int qe_gpt2_detok_token(const qe_gpt2_detok *d, int32_t id, const char **bytes, size_t *len);

/*
 * in[0..n) as valid UTF-8: each maximal ill-formed subsequence becomes one
 * U+FFFD, as the WHATWG decoder (TextDecoder, so Encoder.js's decode) and
 * Python's errors="replace" do.  OUT *out (NUL-terminated, freed by the
 * caller with free) and *outlen.  QE_ENOMEM (*out NULL).
 */
int qe_utf8_lossy(const char *in, size_t n, char **out, size_t *outlen);

#endif
