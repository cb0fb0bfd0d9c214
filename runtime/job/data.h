/*
 * data.h - training text: JSONL records with a "text" field tokenized to
 * bytes, or llm.c token shards (magic 20240520, uint16 tokens).
 *
 * Records are split 80/20 into train and held-out by record index (every
 * fifth record is held out), each split concatenated into one token stream.
 * A shard is split 80/20 by position (its last fifth held out), except that
 * X_train.bin with X_val.bin beside it (as `qeffect tokenize` writes them)
 * trains on all of X_train.bin and holds out all of X_val.bin.
 * The sampler is a pure function of (seed, step, replica, microbatch): the
 * data position of a run is just its step, so resuming needs no file offset.
 */
#ifndef QE_DATA_H
#define QE_DATA_H

/* The longest JSONL record (one line) the reader takes, in bytes. */
#define QE_DATA_RECORD_MAX (16 << 20)

#include <stdint.h>

typedef struct qe_data {
	int32_t *train, *heldout; /* token streams, owned */
	int64_t ntrain, nheldout;
	int64_t records;
	int vocab;                /* smallest vocabulary that holds every token */
	char path[512];
} qe_data;

/*
 * Load path (a .jsonl file, or an llm.c .bin shard).  path NULL or "" uses a
 * small built-in text.  Fails with QE_EIO / QE_ECORRUPT naming the file and
 * line.  Free with qe_data_free.
 */
int qe_data_load(const char *path, qe_data *out);
void qe_data_free(qe_data *d);
/*
 * One llm.c .bin shard's whole token stream, unsplit and in file order (what
 * `qeffect eval` reads, as llm.c's loader does).  Fails with QE_EIO /
 * QE_ECORRUPT naming the file.  OUT *tokens (malloc'd, *n of them; the
 * caller frees it with free()), *max_token.
 */
int qe_data_load_stream(const char *path, int32_t **tokens, int64_t *n, int *max_token);
/*
 * XXH3 of the token streams (train, then held-out seeded by the train
 * stream's hash and length).  Two files with one fingerprint train the same run, wherever they
 * lie; a run records it so a resume can accept its data at another path.
 */
uint64_t qe_data_fingerprint(const qe_data *d);

/*
 * Fill tokens[T] and targets[T] (the next tokens) of microbatch m of replica
 * r at step k from the train (heldout 0) or held-out stream.
 */
int qe_data_sample(const qe_data *d, int heldout, uint64_t seed, int64_t step, int replica, int m, int T,
		   int32_t *tokens, int32_t *targets);
/* QE_EINVAL naming the file and its largest token when the data does not fit a model's vocabulary. */
int qe_data_check_vocab(const qe_data *d, int vocab, const char *model);
/*
 * Microbatch m of `batch` sequences: sequence b (tokens[b*T .. b*T+T-1]) is
 * what qe_data_sample gives for index m*batch + b, so batch 1 is exactly
 * qe_data_sample.  Then every token and target must be below vocab:
 * QE_EINVAL names the data file, the largest token and the model.
 */
int qe_data_sample_batch(const qe_data *d, int heldout, uint64_t seed, int64_t step, int replica, int m, int batch,
			 int T, int vocab, const char *model, int32_t *tokens, int32_t *targets);

#endif
