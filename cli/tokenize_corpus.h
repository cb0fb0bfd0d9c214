/*
 * tokenize_corpus.h - the documents `qeffect tokenize` reads, one at a time,
 * from JSONL files (one document per record, its "text") and plain-text
 * files (one document per file, its bytes as they are).
 *
 * The inputs are resolved once, up front, into a list of files: a path
 * ending in ".txt" (any case) is a plain-text document, a folder stands for
 * the regular files directly inside it whose names end in ".txt" (not
 * subfolders, not names starting with "."), sorted by name byte for byte so
 * the order never depends on the file system or the locale; any other path
 * is JSONL.  Paths given on the command line keep their order.
 *
 * Errors are printed here ("qeffect tokenize: ..."), naming the file (and
 * the line, for JSONL), because only the reader knows where it was.
 */
#ifndef CLI_TOKENIZE_CORPUS_H
#define CLI_TOKENIZE_CORPUS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cli_corpus_file {
	char *path; /* owned */
	int text;   /* 1: plain text, one document; 0: JSONL */
} cli_corpus_file;

typedef struct cli_corpus {
	cli_corpus_file *files; /* owned, nfiles of them */
	size_t nfiles;
	int ntext;              /* how many are plain text */
	int64_t total_bytes;    /* sizes of the regular files, for progress */
	/* reading state */
	size_t cur;             /* index of the file being read */
	FILE *f;                /* the open JSONL file */
	char *line;             /* getline's buffer */
	size_t cap;
	char *buf;              /* the current plain-text document */
	void *json;             /* the current JSONL record (json_t), released by the next call */
	int64_t lineno;         /* line of the current JSONL file */
	int64_t lines;          /* lines read over all JSONL files */
	int64_t bytes_in;       /* bytes read so far */
} cli_corpus;

/* One document: text[0..len) is valid until the next cli_corpus_next or cli_corpus_close. */
typedef struct cli_doc {
	const char *text;
	size_t len;
	const char *path; /* the file it came from */
	int64_t line;     /* its line in a JSONL file; 0 for a plain-text file */
} cli_doc;

/*
 * Resolve paths[0..n) into c->files and check each can be read: a missing
 * or unreadable path, an empty .txt file and a folder without .txt files are
 * errors naming the path.  Returns 0, or -1 after printing why (then
 * cli_corpus_close is still needed).
 */
int cli_corpus_open(cli_corpus *c, char *const *paths, size_t n);
/*
 * The next document into *doc: returns 1, 0 at the end, -1 after printing
 * why (a file that cannot be read, a JSONL line that is not JSON or has no
 * string "text", a plain-text file that is empty, only whitespace, or not
 * UTF-8, with the byte offset).  Blank JSONL lines are skipped.
 */
int cli_corpus_next(cli_corpus *c, cli_doc *doc);
/* Close files and free everything; safe on a zeroed corpus. */
void cli_corpus_close(cli_corpus *c);

/*
 * Whether s[0..len) is valid UTF-8: no overlong forms, surrogates or code
 * points past U+10FFFF.  OUT: *bad, the offset of the first bad byte (set
 * only when it returns 0).
 */
int cli_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
