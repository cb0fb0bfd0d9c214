/*
 * rt_options.c - the process's runtime options (rt_options.h).
 */
#include "runtime/core/rt_options.h"

static qe_rt_options options;

void qe_rt_options_set(const qe_rt_options *o)
{
	options = *o;
}

const qe_rt_options *qe_rt_options_get(void)
{
	return &options;
}
