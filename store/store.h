/*
 * store.h - the checkpoint blob store: an LMDB environment (one per rank,
 * STORES/rank-R/; ckpt/session/rundir.h owns the paths) that
 * holds tensor bytes as content-addressed chunks (DESIGN.md section 8).
 *
 * A tensor is split into chunks (64 MiB by default: LMDB values are limited
 * to 4 GiB and need contiguous pages).  Each chunk is keyed by its 128-bit
 * XXH3 hash, so identical chunks - an unchanged embedding, a zero moment - are
 * stored once.  Every read re-hashes what it returns; a mismatch is
 * QE_ECORRUPT naming the chunk.  The catalog (catalog/) records which chunks
 * make up which tensor; this module knows nothing about tensors beyond bytes.
 *
 * Processes and threads:
 *  - Open the store in each rank process AFTER fork, never before: an LMDB
 *    environment (its map, lock file descriptors and reader slot) must not be
 *    inherited.  A handle used in a process other than the one that opened it
 *    fails with QE_EINVAL.
 *  - Several processes may write at once; LMDB lets one write transaction run
 *    at a time across all of them and the others wait.
 *  - One handle may be shared by the threads of its process; calls on it are
 *    serialized by an internal mutex (hashing runs outside it).
 *
 * The map grows on demand: it starts at store_opts.initial_map_size and, when
 * a write finds it full, the write is aborted, the map enlarged (doubled, or
 * more to fit the write) and the write retried, up to max_map_size.
 *
 * Disk layout and speed: a writable handle maps data.mdb writable (LMDB's
 * MDB_WRITEMAP), so data.mdb is a sparse file as long as the map (its blocks
 * are allocated as pages are used, a write transaction ahead, so that a full
 * disk is QE_ENOSPC rather than a fault).  Chunk payloads go to the file with
 * pwrite and their writeback starts at once; hashing runs on a helper thread
 * ahead of the writes; reads pread each chunk into the caller's buffer with
 * the next one read ahead.  Size a checkpoint's commits with txn_bytes.
 *
 * Errors: QE_ESTORE for LMDB failures (message: the store path, what failed
 * and mdb_strerror's text), QE_ECORRUPT for a damaged environment or a chunk
 * whose bytes no longer match its hash, QE_ENOTFOUND for a missing store or
 * chunk, QE_ENOSPC when the disk (or quota) is full, QE_EIO for other failed
 * reads and writes, QE_EINVAL for bad arguments.  Messages are read with
 * qe_last_error() and name the store's path.
 */
#ifndef QE_STORE_H
#define QE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_HASH_BYTES 16
#define STORE_HASH_HEX 33 /* 32 lowercase hex digits and a NUL */
#define STORE_DEFAULT_CHUNK ((size_t)64 << 20)
/* Largest chunk: an LMDB value is at most 4 GiB and carries a 16-byte header. */
#define STORE_MAX_CHUNK (((size_t)4 << 30) - 4096)

typedef struct store store;

/* A chunk's content hash: XXH3-128 in its canonical (big-endian) byte order,
 * the order `xxhsum -H2` prints. */
typedef struct store_hash {
	unsigned char b[STORE_HASH_BYTES];
} store_hash;

/* One chunk of a tensor.  Same layout as cat_chunk in catalog/catalog.h. */
typedef struct store_chunk {
	store_hash hash;
	uint64_t size;
} store_chunk;

/* A tensor's chunks in order.  chunks is malloc'd by the store and freed with
 * store_chunk_list_free(); a list built by the caller is the caller's. */
typedef struct store_chunk_list {
	size_t n;
	store_chunk *chunks;
} store_chunk_list;

/* How much a commit waits for the disk.  store_sync() always forces a flush. */
typedef enum store_sync_mode {
	/* Commits flush data pages (most of them already on their way: writeback
	 * starts as each chunk is written), and defer the flush of the meta page
	 * to the next commit or store_sync(): a crash may lose the last commit but
	 * never damages the environment.  The default. */
	STORE_SYNC_META = 0,
	/* Every commit is durable when it returns (slowest). */
	STORE_SYNC_FULL,
	/* No flushes except store_sync(), and no early writeback; a system crash
	 * (not a process crash) may damage the environment: the kernel writes the
	 * map's pages back in any order.  For tests. */
	STORE_SYNC_NONE,
} store_sync_mode;

typedef struct store_opts {
	int create;                /* create the folder and environment when missing */
	int read_only;             /* no writes; the map cannot grow.  Without write permission on
	                            * lock.mdb (a read-only run directory) LMDB's lock file is not used */
	size_t initial_map_size;   /* 0: 64 MiB.  An existing larger map is kept. */
	size_t max_map_size;       /* 0: 16 TiB (address space only; the file grows as written) */
	size_t txn_bytes;          /* chunk bytes per write transaction (one data flush each); 0: 1 GiB */
	store_sync_mode sync_mode;
	int grow_on_full_only;     /* tests: skip the up-front grow, so writes hit MDB_MAP_FULL */
} store_opts;

typedef struct store_stats {
	uint64_t chunks;     /* distinct chunks stored */
	uint64_t bytes;      /* their payload bytes */
	uint64_t map_size;   /* current map size of this handle */
	uint64_t used_bytes; /* pages in use up to the last one, including free pages */
	uint64_t file_bytes; /* blocks data.mdb holds on disk (its length is the map size: sparse) */
	uint64_t grows;      /* times this handle enlarged the map */
	uint64_t adopts;     /* times it adopted a map grown by another process */
} store_stats;

/* --- environment ------------------------------------------------------------ */

/*
 * Open the store in folder dir (STORES/rank-R).  opts may be NULL (defaults,
 * create = 0).  Clears reader slots left by dead processes.  A folder without
 * an environment is QE_ENOTFOUND unless opts->create; a data.mdb that is not
 * an LMDB file, is truncated, or holds another format is QE_ECORRUPT (or
 * QE_EUNSUPPORTED for a newer store format), and is left untouched.
 * OUT *out: the handle, closed with store_close(); NULL on failure.
 */
int store_open(const char *dir, const store_opts *opts, store **out);
/* Close the handle (NULL is a no-op).  Unsynced commits may still be lost on
 * a system crash with STORE_SYNC_META/NONE; call store_sync() first. */
void store_close(store *s);
/* Flush everything committed so far to disk (mdb_env_sync with force). */
int store_sync(store *s);
/* The folder the store was opened on; valid while the handle is open. */
const char *store_path(const store *s);
int store_stats_get(store *s, store_stats *out);

/* --- chunks ------------------------------------------------------------------- */

/*
 * Split data[0..bytes) into chunks of chunk_size (0: STORE_DEFAULT_CHUNK; the
 * last chunk may be shorter), hash each and store each chunk not already
 * present, in a few write transactions.  bytes == 0 gives an empty list.
 * OUT *out: the chunk list, freed with store_chunk_list_free(); on failure it
 * is empty.  Chunks written before a failure stay (gc collects them).
 * Durable after store_sync().  A chunk already present is trusted, not
 * re-read; store_verify_all() finds damaged ones, and deleting a damaged
 * chunk and putting its tensor again repairs it.
 */
int store_put_tensor(store *s, const void *data, size_t bytes, size_t chunk_size, store_chunk_list *out);
/*
 * Read the chunks of list into dst (bytes long; must equal the sum of the
 * chunk sizes) and re-hash each.  A chunk whose bytes or size do not match
 * is QE_ECORRUPT naming its hash and index; a missing one QE_ENOTFOUND.
 * dst holds garbage after a failure.
 */
int store_get_tensor(store *s, const store_chunk_list *list, void *dst, size_t bytes);
/*
 * Chunks [first, first + count) of list into dst (bytes long: their sizes'
 * sum), re-hashed as store_get_tensor does; messages number the chunks
 * within the whole list.  The chunk after the range is read ahead (no
 * wait), so a tensor read range by range keeps the disk busy.
 */
int store_get_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, void *dst, size_t bytes);
/*
 * store_get_chunks split in two, for a reader that hashes on another thread
 * than the one that reads: store_read_chunks copies the chunks into dst
 * without re-hashing them (sizes and presence are still checked), and
 * store_check_chunks re-hashes chunks [first, first + count) held in buf
 * (bytes long) against their keys, failing as store_get_chunks would.  Bytes
 * read this way are untrusted until checked.
 */
int store_read_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, void *dst, size_t bytes);
int store_check_chunks(store *s, const store_chunk_list *list, size_t first, size_t count, const void *buf,
		       size_t bytes);
/*
 * Ask the kernel to start reading chunks [first, first + count) of list
 * from the disk (no wait), for a reader that will store_get_chunks them
 * soon.  Only a hint: a missing or damaged chunk is skipped here and is the
 * read's failure.  The lookups hold the handle's lock briefly; the hints are
 * given outside it, so a concurrent read is not held up.
 */
void store_prefetch_chunks(store *s, const store_chunk_list *list, size_t first, size_t count);

/*
 * A tensor of `bytes` put in pieces (the caller copies each from the device
 * into a small reused buffer): the same chunks, hashes and stored values as
 * store_put_tensor of the whole tensor with the same chunk_size.  Every
 * piece but the last is a whole number of chunks; the pieces add up to
 * bytes.  The write transaction stays open between calls (it holds the
 * handle's mutex, so other threads' calls on this handle wait): make every
 * call of one stream on one thread, and do not wait between them for
 * another thread that uses the handle.  A failed put or end releases
 * everything (end or abort still frees the stream); chunks of transactions
 * already committed stay, as with store_put_tensor.
 * begin OUT *out: the stream.  put OUT *piece (may be NULL): the piece's
 * chunks, pointing into the stream (valid until end or abort).  end OUT
 * *out: the whole tensor's chunk list (store_chunk_list_free), after the
 * last commit; it frees the stream.
 */
typedef struct store_stream store_stream;
int store_stream_begin(store *s, size_t bytes, size_t chunk_size, store_stream **out);
int store_stream_put(store_stream *w, const void *data, size_t len, store_chunk_list *piece);
int store_stream_end(store_stream *w, store_chunk_list *out);
void store_stream_abort(store_stream *w);

/* Store one chunk (for replication pulls).  OUT *hash (may be NULL): its hash. */
int store_put_chunk(store *s, const void *data, size_t size, store_hash *hash);
/*
 * Copy chunk h into dst (cap bytes) and verify it.  QE_EINVAL when cap is too
 * small (then *size still says how big it is).  OUT *size (may be NULL).
 */
int store_get_chunk(store *s, const store_hash *h, void *dst, size_t cap, uint64_t *size);
/* OUT *present: 1 when chunk h is stored, else 0.  OUT *size (may be NULL): its size, or 0. */
int store_has_chunk(store *s, const store_hash *h, int *present, uint64_t *size);
/* Re-hash stored chunk h in place: 0, QE_ECORRUPT (message names it) or QE_ENOTFOUND. */
int store_chunk_verify(store *s, const store_hash *h);
/*
 * Delete the chunks in hashes[0..n); absent ones are skipped.
 * OUT *reclaimed (may be NULL): payload bytes freed.  The file does not shrink:
 * LMDB reuses the freed pages for later writes.
 */
int store_delete_chunks(store *s, const store_hash *hashes, size_t n, uint64_t *reclaimed);

/*
 * Call cb once per stored chunk, in hash order, with its size and the unix
 * time it was last put (written or found present by a put).  The key list is
 * read first and no transaction is held during the calls, so cb may call
 * into the store, including deletes.  A non-zero return from cb stops the
 * iteration and is returned.
 */
typedef int (*store_chunk_cb)(void *ctx, const store_hash *h, uint64_t size, uint64_t touched);
int store_iterate_chunks(store *s, store_chunk_cb cb, void *ctx);

/* --- verify and gc ------------------------------------------------------------ */

typedef struct store_verify_result {
	uint64_t checked;
	uint64_t bad;       /* corrupt: bytes or length do not match the hash */
	uint64_t bad_bytes;
} store_verify_result;
/*
 * Re-hash every chunk.  on_bad (may be NULL) is called per corrupt chunk with
 * the reason; a non-zero return stops.  Returns 0 when the walk completed,
 * even if it found corrupt chunks: read out->bad.
 */
int store_verify_all(store *s, int (*on_bad)(void *ctx, const store_hash *h, const char *why), void *ctx,
		     store_verify_result *out);

typedef struct store_gc_result {
	uint64_t examined;
	uint64_t kept;         /* in the keep set */
	uint64_t young;        /* unreferenced but put within grace_s: left for a later gc */
	uint64_t deleted;      /* or, for a dry run, that would be deleted */
	uint64_t bytes_reclaimed;
} store_gc_result;
/*
 * Delete every chunk not in keep[0..n_keep) (the hashes the catalog still
 * references) and not put within the last grace_s seconds.  The grace period
 * protects a checkpoint being written right now, whose chunks are stored
 * before the catalog lists them.  keep need not be sorted or unique.
 */
int store_gc(store *s, const store_hash *keep, size_t n_keep, uint64_t grace_s, int dry_run, store_gc_result *out);

/* --- compaction ----------------------------------------------------------------- */

typedef struct store_compact_result {
	uint64_t disk_before;   /* blocks data.mdb held on disk before, in bytes */
	uint64_t disk_after;    /* and after */
	uint64_t length_before; /* its length before (with WRITEMAP the map size: sparse) */
	uint64_t length_after;  /* and after: the pages in use, dense */
	uint64_t chunks;        /* chunks the store holds (the same before and after) */
} store_compact_result;

/*
 * Rewrite the store in folder dir with LMDB's compacting copy
 * (mdb_env_copyfd2, MDB_CP_COMPACT: live pages only, free pages left out)
 * into dir/data.mdb.compact, fsync it, check that it opens and holds every
 * chunk, rename it over data.mdb and fsync dir (tmp, fsync, rename, fsync
 * the folder: a crash leaves the old file or the new one, each a whole
 * store).  A failure before the rename (a full disk, an I/O error) removes
 * the temporary file and leaves the old store as it was.
 *
 * The store must be open in no process, this one included: store_compact
 * takes LMDB's lock file (lock.mdb, the byte every opener locks) for itself
 * and fails with QE_EBUSY naming the holder's pid when another process has
 * the store open; while it holds it, a process that opens the store waits.
 * Keeping writers away for the whole operation is the caller's part (the
 * run's and the store's locks; ckpt).  When done, lock.mdb is emptied so the
 * next opener builds a fresh reader table for the new file; a process that
 * was waiting to open the store at that moment fails its open (LMDB:
 * "Invalid argument") and may simply retry.
 *
 * OUT: *out (may be NULL).  Returns 0, QE_ENOTFOUND (no store in dir),
 * QE_EBUSY, QE_ENOSPC, QE_EIO, QE_ESTORE, QE_ECORRUPT (a damaged store, as
 * store_open reports it; or a copy that does not hold what the store did,
 * which is then not used), QE_ENOMEM, QE_EINVAL.  Messages name the folder.
 */
int store_compact(const char *dir, store_compact_result *out);

/* --- helpers ------------------------------------------------------------------- */

void store_chunk_list_free(store_chunk_list *l);
/* Hash data with XXH3-128 into the canonical byte order. */
void store_hash_of(const void *data, size_t size, store_hash *out);
/* 32 lowercase hex digits and a NUL into out; returns out. */
char *store_hash_hex(const store_hash *h, char out[STORE_HASH_HEX]);
/* Parse 32 hex digits (either case): 0 or QE_EINVAL. */
int store_hash_parse(const char *hex, store_hash *out);
int store_hash_cmp(const store_hash *a, const store_hash *b);

#endif
