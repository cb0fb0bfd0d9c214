/*
 * inspect_named.h - what `qeffect inspect` shows of the named tensors
 * (cli/named.h): the table, and one tensor's summary with its hashes.
 */
#ifndef CLI_INSPECT_NAMED_H
#define CLI_INSPECT_NAMED_H

#include <jansson.h>

#include "cli/named.h"

/*
 * Print the table of named tensors: the parameters and a line on the moment
 * and FP8 names, or with all every entry.  With arr non-NULL, append the
 * same entries (the parameters, or with all every one) to that JSON array
 * instead of printing.
 */
void cli_inspect_named_list(const cli_named *nm, int all, json_t *arr);

/*
 * Read named tensor e and print its shape, where it is stored, the xxh3-128
 * and sha256 of its bytes (row-major little-endian f32 in the shape shown) and
 * a value summary; with arr non-NULL append it as a JSON object instead.
 * QE_E* naming the tensor when it cannot be read.
 */
int cli_inspect_named_summary(cli_named *nm, const qe_named *e, json_t *arr);

#endif
