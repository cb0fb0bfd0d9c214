/*
 * bench_ckpt.c - how fast a checkpoint goes into and out of the chunk store,
 * next to what the disk itself does with the same bytes.
 *
 *   save     store_put_tensor (split, XXH3-128 each chunk, LMDB writes) + store_sync,
 *            with the default sync mode (flush per write transaction) and with
 *            only the final store_sync
 *   restore  store_get_tensor (LMDB reads + re-hash of every chunk), page cache
 *            dropped first when we can ("cold") and again with it warm
 *   write    the same bytes with write() + fsync() into a plain file
 *   read     read() of that file back, page cache dropped first when we can
 *   hash     XXH3-128 of the buffer in memory (what verification costs)
 *
 * The state is random (never all zeros, no two chunks alike), so dedup cannot
 * flatter the store.  Dropping the page cache: `echo 3 > /proc/sys/vm/drop_caches`
 * when permitted (root outside a read-only /proc), else posix_fadvise(DONTNEED)
 * on the closed file; the table says which one worked, because a warm read
 * measures memory, not the disk.
 *
 * Not a test: run it by hand or through bench/ckpt/run.sh.
 *   bench_ckpt [--dir DIR] [--gib G] [--chunk-mib M] [--json OUT] [--keep]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/status.h"
#include "store/store.h"

#define PIECE ((size_t)64 << 20)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t z = (s += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(p + i, &z, 8);
	}
	for (size_t i = n & ~(size_t)7; i < n; i++)
		p[i] = (unsigned char)(i * 131 + 7);
}

/* fadvise DONTNEED over a file (after its writes are synced). */
static int fadvise_drop(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	fdatasync(fd);
	int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return rc;
}

/* Drop the page cache of the given files: "drop_caches", "fadvise" or "none". */
static const char *drop_cache(const char **files, int n)
{
	sync();
	FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
	if (f) {
		int ok = fputs("3\n", f) >= 0;
		ok = (fclose(f) == 0) && ok;
		if (ok)
			return "drop_caches";
	}
	int ok = 1;
	for (int i = 0; i < n; i++)
		ok = fadvise_drop(files[i]) == 0 && ok;
	return ok ? "fadvise" : "none";
}

static int write_plain(const char *path, const unsigned char *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	for (size_t o = 0; o < n;) {
		ssize_t w = write(fd, p + o, n - o < PIECE ? n - o : PIECE);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		o += (size_t)w;
	}
	int rc = fsync(fd);
	return close(fd) || rc ? -1 : 0;
}

static int read_plain(const char *path, unsigned char *p, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (size_t o = 0; o < n;) {
		ssize_t r = read(fd, p + o, n - o < PIECE ? n - o : PIECE);
		if (r <= 0) {
			close(fd);
			return -1;
		}
		o += (size_t)r;
	}
	close(fd);
	return 0;
}

typedef struct row {
	const char *name;
	double s;
	const char *cache;
	const char *what;
} row;

int main(int argc, char **argv)
{
	const char *dir = "/tmp/qe-bench-ckpt", *json = NULL;
	double gib = 2.0;
	long chunk_mib = 64;
	int keep = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
			gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "--chunk-mib") && i + 1 < argc)
			chunk_mib = atol(argv[++i]);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else if (!strcmp(argv[i], "--keep"))
			keep = 1;
		else {
			fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--gib G] [--chunk-mib M] [--json OUT] [--keep]\n");
			return 2;
		}
	}
	size_t n = (size_t)(gib * (double)(1ull << 30));
	size_t chunk = (size_t)chunk_mib << 20;
	if (n < 1 || chunk < 4096 || chunk > STORE_MAX_CHUNK) {
		fprintf(stderr, "bench_ckpt: bad --gib or --chunk-mib\n");
		return 2;
	}
	char sdir[1024], plain[1024], dmdb[1100], cmd[3300];
	snprintf(sdir, sizeof(sdir), "%s/store", dir);
	snprintf(plain, sizeof(plain), "%s/plain.bin", dir);
	snprintf(dmdb, sizeof(dmdb), "%s/data.mdb", sdir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/store' '%s/store-nosync' '%s/plain.bin'", dir, dir, dir);
	if (system(cmd) != 0 || (mkdir(dir, 0755) && errno != EEXIST)) {
		fprintf(stderr, "bench_ckpt: cannot prepare '%s'\n", dir);
		return 1;
	}
	unsigned char *src = malloc(n), *dst = malloc(n);
	if (!src || !dst) {
		fprintf(stderr, "bench_ckpt: cannot allocate 2 x %zu bytes\n", n);
		return 1;
	}
	printf("bench_ckpt: %zu bytes (%.2f GiB) of random state, %zu-byte chunks, in %s\n", n, gib, chunk, dir);
	fill(src, n, 0x5eedbe7cull);
	memset(dst, 0xa5, n); /* touch the pages so the timing excludes page faults of dst */

	row rows[10];
	int nr = 0;
	double t;
	store_hash h;
	t = now_s();
	store_hash_of(src, n, &h);
	rows[nr++] = (row){ "hash XXH3-128 (memory)", now_s() - t, "-", "in memory" };

	/* save */
	store *s = NULL;
	store_opts o = { .create = 1, .sync_mode = STORE_SYNC_META };
	store_chunk_list l = { 0 };
	int rc = store_open(sdir, &o, &s);
	t = now_s();
	if (!rc)
		rc = store_put_tensor(s, src, n, chunk, &l);
	if (!rc)
		rc = store_sync(s);
	double save_s = now_s() - t;
	store_close(s);
	s = NULL;
	if (rc) {
		fprintf(stderr, "bench_ckpt: save: %s\n", qe_last_error());
		return 1;
	}
	rows[nr++] = (row){ "store save (put + sync)", save_s, "-", "store_put_tensor + store_sync, sync_mode meta" };

	/* the same with no flush per write transaction, only the final store_sync
	 * (shows what the per-commit flushes of STORE_SYNC_META cost) */
	char sdir2[1100];
	snprintf(sdir2, sizeof(sdir2), "%s/store-nosync", dir);
	o = (store_opts){ .create = 1, .sync_mode = STORE_SYNC_NONE };
	store_chunk_list l2 = { 0 };
	rc = store_open(sdir2, &o, &s);
	t = now_s();
	if (!rc)
		rc = store_put_tensor(s, src, n, chunk, &l2);
	if (!rc)
		rc = store_sync(s);
	double save2_s = now_s() - t;
	store_close(s);
	s = NULL;
	store_chunk_list_free(&l2);
	if (rc) {
		fprintf(stderr, "bench_ckpt: save (sync none): %s\n", qe_last_error());
		return 1;
	}
	rows[nr++] = (row){ "store save, one final sync", save2_s, "-", "sync_mode none + store_sync" };

	/* plain write */
	t = now_s();
	if (write_plain(plain, src, n)) {
		fprintf(stderr, "bench_ckpt: write '%s': %s\n", plain, strerror(errno));
		return 1;
	}
	rows[nr++] = (row){ "plain write + fsync", now_s() - t, "-", "write() + fsync()" };

	/* cold restore */
	const char *files[] = { dmdb, plain };
	const char *how = drop_cache(files, 2);
	o = (store_opts){ .read_only = 1 };
	if ((rc = store_open(sdir, &o, &s))) {
		fprintf(stderr, "bench_ckpt: reopen: %s\n", qe_last_error());
		return 1;
	}
	t = now_s();
	rc = store_get_tensor(s, &l, dst, n);
	double cold_s = now_s() - t;
	if (rc || memcmp(src, dst, n)) {
		fprintf(stderr, "bench_ckpt: restore %s\n", rc ? qe_last_error() : "returned other bytes");
		return 1;
	}
	rows[nr++] = (row){ "store restore (get + re-hash)", cold_s, how, "store_get_tensor" };
	memset(dst, 0xa5, n);
	t = now_s();
	rc = store_get_tensor(s, &l, dst, n);
	rows[nr++] = (row){ "store restore (get + re-hash)", now_s() - t, "warm", "store_get_tensor, cache warm" };
	store_close(s);
	if (rc || memcmp(src, dst, n)) {
		fprintf(stderr, "bench_ckpt: warm restore failed\n");
		return 1;
	}

	/* plain read */
	how = drop_cache(files, 2);
	memset(dst, 0xa5, n);
	t = now_s();
	if (read_plain(plain, dst, n) || memcmp(src, dst, n)) {
		fprintf(stderr, "bench_ckpt: read '%s' failed\n", plain);
		return 1;
	}
	rows[nr++] = (row){ "plain read", now_s() - t, how, "read()" };
	t = now_s();
	read_plain(plain, dst, n);
	rows[nr++] = (row){ "plain read", now_s() - t, "warm", "read(), cache warm" };

	struct stat sb;
	uint64_t mdb_bytes = stat(dmdb, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	printf("\n%-32s %-12s %10s %10s\n", "operation", "page cache", "seconds", "GB/s");
	for (int i = 0; i < nr; i++)
		printf("%-32s %-12s %10.3f %10.3f\n", rows[i].name, rows[i].cache, rows[i].s, (double)n / rows[i].s / 1e9);
	printf("\nchunks: %zu; data.mdb %llu bytes for %zu payload bytes (%.2f%% overhead)\n", l.n,
	       (unsigned long long)mdb_bytes, n, n ? 100.0 * ((double)mdb_bytes - (double)n) / (double)n : 0.0);
	printf("cold reads: page cache dropped with %s%s\n", how,
	       strcmp(how, "none") == 0 ? " - NOT dropped: the cold numbers are warm reads" : "");

	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			fprintf(stderr, "bench_ckpt: cannot write '%s': %s\n", json, strerror(errno));
			return 1;
		}
		fprintf(f, "{\n  \"bytes\": %zu,\n  \"chunk_bytes\": %zu,\n  \"chunks\": %zu,\n  \"dir\": \"%s\",\n", n, chunk,
			l.n, dir);
		fprintf(f, "  \"data_mdb_bytes\": %llu,\n  \"cache_drop\": \"%s\",\n  \"results\": [\n",
			(unsigned long long)mdb_bytes, how);
		for (int i = 0; i < nr; i++)
			fprintf(f, "    {\"op\": \"%s\", \"cache\": \"%s\", \"seconds\": %.6f, \"gb_per_s\": %.4f}%s\n",
				rows[i].name, rows[i].cache, rows[i].s, (double)n / rows[i].s / 1e9, i + 1 < nr ? "," : "");
		fprintf(f, "  ]\n}\n");
		fclose(f);
		printf("wrote %s\n", json);
	}
	store_chunk_list_free(&l);
	free(src);
	free(dst);
	if (!keep && system(cmd) != 0)
		fprintf(stderr, "bench_ckpt: could not remove the files in %s\n", dir);
	return 0;
}
