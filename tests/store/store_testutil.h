/*
 * store_testutil.h - helpers for the store tests: the common ones of
 * testutil.h (scratch folder, seeded bytes, whole files) and the raw LMDB
 * edit that tampers with a stored chunk.  Header-only (static functions) so
 * each test stays one file.  It needs LMDB: tests of other modules include
 * testutil.h instead.
 */
#ifndef QE_STORE_TESTUTIL_H
#define QE_STORE_TESTUTIL_H

#include <lmdb.h>

#include "store/store.h"
#include "testutil.h"

/* Rewrite the value of chunk h through LMDB directly: flip byte `at` of the
 * stored value (16-byte header included).  mapsize: set on the environment
 * before opening it; 0 leaves the size the environment records.  Returns 0 or
 * an MDB_* code. */
__attribute__((unused)) static int tu_raw_flip(const char *dir, const store_hash *h, size_t at, size_t mapsize)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	int rc = mdb_env_create(&env);
	if (rc)
		return rc;
	mdb_env_set_maxdbs(env, 4);
	if (mapsize)
		mdb_env_set_mapsize(env, mapsize);
	if ((rc = mdb_env_open(env, dir, MDB_NOTLS, 0644)) || (rc = mdb_txn_begin(env, NULL, 0, &txn))) {
		mdb_env_close(env);
		return rc;
	}
	MDB_val k = { STORE_HASH_BYTES, (void *)h->b }, v;
	if (!(rc = mdb_dbi_open(txn, "chunks", 0, &dbi)) && !(rc = mdb_get(txn, dbi, &k, &v))) {
		unsigned char *copy = malloc(v.mv_size);
		memcpy(copy, v.mv_data, v.mv_size);
		copy[at] ^= 0x10;
		MDB_val nv = { v.mv_size, copy };
		rc = mdb_put(txn, dbi, &k, &nv, 0);
		free(copy);
	}
	if (rc)
		mdb_txn_abort(txn);
	else
		rc = mdb_txn_commit(txn);
	mdb_env_close(env);
	return rc;
}

#endif
