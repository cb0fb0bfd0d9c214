/*
 * key.c - the invocation key K = (e, s, m, u, i) and how keys and tape
 * references are spelled in messages.  Every contract message goes through
 * these two formatters, so a key reads the same in every relation's errors.
 */
#include "runtime/contract/contract.h"

#include <stdio.h>

int qe_key_equal(const qe_key *a, const qe_key *b)
{
	return a->e == b->e && a->s == b->s && a->m == b->m && a->u == b->u && a->i == b->i;
}

char *qe_key_format(const qe_key *k, char *buf, size_t len)
{
	snprintf(buf, len, "K=(e=%lld,s=%d,m=%d,u=%d,i=%d)", (long long)k->e, (int)k->s, (int)k->m, (int)k->u,
		 (int)k->i);
	return buf;
}

char *qe_tape_ref_format(const qe_tape_ref *r, char *buf, size_t len)
{
	char kb[QE_KEY_FMT_LEN];
	snprintf(buf, len, "%s slot %d gen %llu", qe_key_format(&r->key, kb, sizeof(kb)), (int)r->slot,
		 (unsigned long long)r->gen);
	return buf;
}
