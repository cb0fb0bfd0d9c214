/*
 * store_int.h - internals shared by the store's files: the handle, the value
 * header, and the write-transaction wrapper that grows the map and retries.
 * Not part of the public API.
 */
#ifndef QE_STORE_INT_H
#define QE_STORE_INT_H

#include "store/store.h"

#include <lmdb.h>
#include <pthread.h>
#include <string.h>
#include <sys/types.h>

/* Stored value: a 16-byte little-endian header, then the chunk's bytes.  The
 * header lets a reader tell a truncated or foreign value from a chunk whose
 * bytes changed, and leaves room (flags) for compression later. */
#define STORE_VAL_MAGIC 0x31434551u /* "QEC1" read as little-endian */
#define STORE_VAL_HDR 16

/* The format written in the meta database; a store with another one is refused. */
#define STORE_FORMAT "qeffect-store/1"

struct store {
	MDB_env *env;
	MDB_dbi dbi_chunks; /* hash -> header + bytes */
	MDB_dbi dbi_touch;  /* hash -> u64 unix time of the last put (for gc's grace) */
	MDB_dbi dbi_meta;   /* "format", "bytes" (u64 payload total) */
	char *path;
	pid_t pid;
	pthread_mutex_t mu; /* every LMDB transaction of this handle runs under it */
	size_t page_size;
	size_t db_page_size; /* LMDB's page size of this environment */
	size_t max_map_size;
	size_t txn_bytes;
	uint64_t grows;
	uint64_t adopts;
	int read_only;
	int grow_on_full_only;
	/* Writable handles map data.mdb writable (MDB_WRITEMAP): chunk payloads are
	 * written with pwrite at their place in the file (the same page cache the
	 * map shows) and their writeback starts at once, so the disk works while
	 * the next chunk is hashed and copied.  See store.c. */
	int writemap;
	int data_fd; /* our descriptor of data.mdb for pread, pwrite, fallocate (lock_fd when writable) */
	int own_read_fd; /* data_fd was opened for a read-only handle: close it */
	int lock_fd; /* our own descriptor of data.mdb, flock'd around map resizes; -1 when read-only */
	store_sync_mode sync_mode;
	int no_fallocate; /* the file system has no fallocate */
	int failed; /* QE code after MDB_PANIC: the environment must be reopened */
};

/* Convert an LMDB code into a QE code with a message naming the store and what failed. */
int store_mdb_fail(store *s, int mdb_rc, const char *what);
/* mdb_put and mdb_txn_commit of a write transaction, each failing with EIO when
 * QE_FAULT asks (runtime/core/fault.h); a failed commit frees txn, as LMDB's does. */
int store__mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags);
int store__txn_commit(MDB_txn *txn);
/* QE_EINVAL when s is NULL, used after fork, or failed. Call before locking. */
int store_check(store *s);

/* A read transaction (call with s->mu held); adopts a map another process grew. */
int store_read_begin(store *s, MDB_txn **txn);

/*
 * Body of a write transaction.  Returns 0 or a QE code; on an LMDB failure it
 * stores the LMDB code in *mdb_rc and returns QE_ESTORE, so that the wrapper
 * can tell MDB_MAP_FULL (grow and retry) from real failures.  It may run
 * several times (after each grow) and must start from scratch each time.
 */
typedef int (*store_txn_fn)(store *s, MDB_txn *txn, void *ctx, int *mdb_rc);
/*
 * Run fn in a write transaction under s->mu and commit it, growing the map
 * and retrying on MDB_MAP_FULL.  expect_bytes (payload about to be written)
 * lets the map grow once up front instead of failing a large write first;
 * max_value (the largest value it writes, 0: small ones) tells how much of
 * LMDB's free list the write can reuse when the disk is full.
 */
int store_write_txn(store *s, size_t expect_bytes, size_t max_value, store_txn_fn fn, void *ctx, const char *what);

/* Chunks of one write transaction: chunks[first..end) of the bytes at data,
 * chunk i at data + i * chunk_size (chunk.c's put, stream.c's pieces). */
struct store_put_ctx {
	const unsigned char *data; /* base of the tensor (or of a piece) */
	const store_chunk *chunks; /* hashed; offsets implied by chunk_size */
	size_t chunk_size;
	size_t first, end; /* chunk index range of this transaction */
	uint64_t now;
	uint64_t written; /* chunks written (not deduplicated), for the log */
};
/* A store_txn_fn (ctx: struct store_put_ctx): look each chunk up, write the
 * absent ones, stamp every one's put time, update the byte counter. */
int store__put_body(store *s, MDB_txn *txn, void *ctx, int *mdb_rc);
/*
 * The start of a write transaction that stays open over several calls
 * (stream.c): with s->mu held, no transaction open, make room for about
 * expect_bytes (map and file blocks) and begin one.  On failure s->mu is
 * still held; the caller unlocks.
 */
int store__write_begin(store *s, size_t expect_bytes, size_t max_value, MDB_txn **txn);
/* LMDB's page header (lmdb.h's on-disk format 1, 64-bit builds): page number
 * (8 bytes), pad (2), flags (2), then for an overflow page its page count (4);
 * a large value starts right after it. */
#define LMDB_PAGEHDR 16
#define LMDB_P_OVERFLOW 0x04

/* The header of the page at page (lmdb's format above). */
typedef struct lmdb_page_head {
	uint64_t pgno;
	uint16_t flags;
	uint32_t pages; /* overflow pages only */
} lmdb_page_head;

static inline lmdb_page_head lmdb_page_head_at(const unsigned char *page)
{
	lmdb_page_head h;
	memcpy(&h.pgno, page, 8);
	memcpy(&h.flags, page + 10, 2);
	memcpy(&h.pages, page + 12, 4);
	return h;
}

/*
 * Pages of data.mdb a write of values up to max_value bytes each will take
 * from LMDB's free list, a lower bound (0 while a reader holds a snapshot);
 * s->mu held, no transaction open (freelist.c).
 */
size_t store__reusable_pages(store *s, size_t max_value);
/*
 * Before an existing store is opened: its pages walked by a forked child
 * (check.c), so that damage is an error naming data.mdb, never a signal in
 * this process.  QE_OK when data.mdb does not exist.
 */
int store__check_pages(const char *dir, const char *datafile);
/* Bytes of the map beyond its last used page (s->mu held). */
size_t store__map_room(store *s);

/* The offset in data.mdb of value bytes val (len long, as mdb_get or an
 * MDB_RESERVE put returned them), read from the header of the overflow page
 * that holds them.  LMDB's API does not give the map's address; its file
 * format is fixed.  0, or -1 when val is not the start of an overflow value
 * (then copy through the map). */
int store_value_offset(store *s, const void *val, size_t len, uint64_t *off);
/* pwrite all of data at off of data.mdb and start its writeback (not waiting).
 * QE_EIO (QE_ENOSPC for a full disk) naming the store on failure. */
int store_write_at(store *s, const void *data, size_t size, uint64_t off);
/* pread all of size bytes at off of data.mdb into dst: 0 or QE_EIO. */
int store_read_at(store *s, void *dst, size_t size, uint64_t off);

/* Little-endian u64 helpers for values. */
void store_put_u64(unsigned char *p, uint64_t v);
uint64_t store_get_u64(const unsigned char *p);

#endif
