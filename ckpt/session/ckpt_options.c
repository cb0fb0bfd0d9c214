/*
 * ckpt_options.c - the process's checkpoint options (ckpt_options.h).
 */
#include "ckpt/session/ckpt_options.h"

static ckpt_options current; /* zero: the defaults */

void ckpt_options_set(const ckpt_options *o)
{
	current = *o;
}

const ckpt_options *ckpt_options_get(void)
{
	return &current;
}
