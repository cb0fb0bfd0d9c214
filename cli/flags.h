/*
 * flags.h - the one flag parser of the qeffect commands (issue 36 item 5).
 *
 * A command describes its flags in a table of cli_flag, one row a flag: its
 * long name, an optional short letter, the kind of value, where the value
 * goes and the range it must lie in; cli_flags_parse walks argv once and
 * fills the destinations.  The rules are getopt_long's, so command lines
 * that worked before still do: "--name VALUE" and "--name=VALUE" (a value
 * may start with '-'), "-x VALUE" and "-xVALUE", a unique prefix of a long
 * name ("--run" for --run-dir), operands anywhere, "--" ends the flags, and
 * "-h" or "--help" asks for help.  Every usage error is printed on stderr
 * as "qeffect CMD: ..." naming the flag, and parse returns 2 (the exit
 * status of bad usage): an unknown or ambiguous flag, a missing value, a
 * value on a flag that takes none, a number that does not parse or lies
 * outside its range, a word not among the flag's choices.
 *
 * A row may include another table (CLI_FLAG_INCLUDE), so flag groups that
 * several commands share (the checkpoint tiers of train and resume, the
 * storage flags of every command) are one table each.
 */
#ifndef CLI_FLAGS_H
#define CLI_FLAGS_H

#include <stddef.h>

typedef enum cli_flag_kind {
	CLI_FLAG_END = 0, /* ends a table */
	CLI_FLAG_BOOL,    /* no value: *(int *)dst = 1 */
	CLI_FLAG_INT,     /* an integer in [lo, hi] into *(int *)dst (hi LLONG_MAX: no upper bound) */
	CLI_FLAG_LONG,    /* ... into *(long *)dst */
	CLI_FLAG_INT64,   /* ... into *(int64_t *)dst */
	CLI_FLAG_UINT64,  /* ... into *(uint64_t *)dst (lo >= 0) */
	CLI_FLAG_DOUBLE,  /* a number in [dlo, dhi) into *(double *)dst */
	CLI_FLAG_FLOAT,   /* ... into *(float *)dst */
	CLI_FLAG_STRING,  /* *(const char **)dst points into argv */
	CLI_FLAG_PATH,    /* a file or folder: as STRING, or as TEXT when cap > 0; '' (an unset shell variable) is refused */
	CLI_FLAG_TEXT,    /* copied into the char[cap] at dst; '' is refused, so is a value too long */
	CLI_FLAG_CHOICE,  /* one of words (NULL-terminated): its index into *(int *)dst */
	CLI_FLAG_PARSE,   /* parse(value, dst) != 0: "bad value 'V' for --F: " qe_last_error() */
	CLI_FLAG_FN,      /* fn(cmd, flag, value, dst) checks and stores, printing its own error; 0 or 2 */
	CLI_FLAG_INCLUDE, /* the rows of another table (include; NULL: none), searched in place of this row */
} cli_flag_kind;

typedef struct cli_flag {
	const char *name;  /* long name without the dashes ("run-dir"); NULL: no long name */
	char short_name;   /* 'o' for -o; 0: none */
	cli_flag_kind kind;
	void *dst;         /* where the value goes (its type by kind); not owned */
	long long lo, hi;  /* INT, LONG, INT64, UINT64: the values accepted, both ends in */
	double dlo, dhi;   /* DOUBLE, FLOAT: the values accepted, [dlo, dhi) */
	size_t cap;        /* TEXT, PATH: bytes at dst, the terminating 0 included */
	const char *const *words;                      /* CHOICE */
	int (*parse)(const char *value, void *dst);   /* PARSE */
	int (*fn)(const char *cmd, const char *flag, const char *value, void *dst); /* FN */
	unsigned *given;   /* when set, bit is or-ed into *given each time the flag is seen */
	unsigned bit;
	/* A flag whose value is optional: it is taken only after '=' ("--ckpt-async=skip"); the flag alone
	 * stands for this value ("wait").  NULL: the value is required (or, for BOOL, refused). */
	const char *bare;
	const struct cli_flag *include; /* INCLUDE: the table; not owned */
} cli_flag;

/* Word lists of CHOICE rows that several commands share (NULL-terminated). */
extern const char *const cli_on_off[];   /* "on", "off" */
extern const char *const cli_backends[]; /* "cpu", "cuda": --backend */

/*
 * An integer flag value into *out: 0, or 2 after printing "qeffect CMD: FLAG
 * needs an integer, got 'S'" (for CLI_FLAG_FN rows that check more).
 */
int cli_parse_long(const char *cmd, const char *flag, const char *s, long *out);

/*
 * Parse argv[1..argc) (argv[0] is the command's name) against the table.
 * Operands (arguments that are not flags, and everything after "--") are
 * moved, in their order, to argv[1..1 + *noperands); with noperands NULL
 * any operand is a usage error ("unexpected argument").  cmd names the
 * command in messages ("qeffect CMD: ..."; NULL: "qeffect: ...").
 *
 * Returns 0, 2 after printing a usage error, or -1 when -h or --help came
 * before any error (the caller prints its help and exits 0).  Flags after a
 * --help are not read.
 */
int cli_flags_parse(const char *cmd, const cli_flag *table, int argc, char **argv, int *noperands);

/*
 * Take the table's flags out of argv and leave every other argument, in its
 * order, for a later parse (*argc updated, argv[*argc] = NULL); used for
 * the flags main.c reads for every command before the command's own table.
 * Returns 0 or 2 after printing a usage error.
 */
int cli_flags_take(const char *cmd, const cli_flag *table, int *argc, char **argv);

#endif
