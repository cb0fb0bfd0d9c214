/*
 * gnuplot.h - running the external gnuplot program, shared by `qeffect plot`
 * and the bench charts.
 */
#ifndef QE_CLI_GNUPLOT_H
#define QE_CLI_GNUPLOT_H

#include <stddef.h>

/* The gnuplot executable into buf: $QE_GNUPLOT when set, else the first in PATH.  0 when found. */
int cli_gnuplot_find(char *buf, size_t len);

/*
 * Run exe on script (relative to dir when dir is not NULL: the child works
 * there) with its stderr in errpath.  0 when gnuplot exits 0; otherwise -1
 * and err says how it ended, then what gnuplot wrote to stderr.  errpath is
 * left for the caller to remove.
 */
int cli_gnuplot_run(const char *exe, const char *dir, const char *script, const char *errpath, char *err,
		    size_t errlen);

#endif
