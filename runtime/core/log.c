/*
 * log.c - one line per call, written with a single fprintf so lines from
 * several rank processes sharing a terminal do not interleave mid-line.
 */
#include "runtime/core/log.h"

#include <stdarg.h>
#include <stdio.h>

static qe_log_level cur_level = QE_LOG_INFO;
static int cur_rank = -1;

void qe_log_set_level(qe_log_level lvl)
{
	cur_level = lvl;
}

void qe_log_set_rank(int rank)
{
	cur_rank = rank;
}

void qe_log(qe_log_level lvl, const char *fmt, ...)
{
	static const char *tag[] = { "error", "warn", "info", "debug" };
	char msg[2048];
	va_list ap;
	if (lvl > cur_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cur_rank >= 0)
		fprintf(stderr, "[rank %d] %s: %s\n", cur_rank, tag[lvl], msg);
	else
		fprintf(stderr, "%s: %s\n", tag[lvl], msg);
}
