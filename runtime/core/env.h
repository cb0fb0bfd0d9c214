/*
 * env.h - the one place qeffect reads and sets environment variables.
 *
 * qe_env_vars lists every variable the program honours, with its meaning;
 * README's table of variables shows the same list, and
 * tests/cli/env_table.sh checks that every name the sources pass to qe_env
 * or qe_env_set is in it, that README shows each, and that no other file of
 * the program calls getenv, setenv or unsetenv.  Options travel as structs
 * where they have been moved there (issue 36); the variables listed here are
 * the ones still read where they are used, plus the launchers' own (RANK,
 * WORLD_SIZE, ...) and the AWS credentials.
 */
#ifndef QE_ENV_H
#define QE_ENV_H

typedef struct qe_env_var {
	const char *name;
	const char *meaning;
} qe_env_var;

/* The table, qe_env_nvars entries. */
extern const qe_env_var qe_env_vars[];
extern const int qe_env_nvars;

/*
 * getenv(name) for a listed name.  An unlisted name is a programming error:
 * it is logged once and NULL is returned, as if it were unset.
 */
const char *qe_env(const char *name);

/* setenv(name, value, overwrite) for a listed name; -1 (errno EINVAL) for an unlisted one. */
int qe_env_set(const char *name, const char *value, int overwrite);

#endif
