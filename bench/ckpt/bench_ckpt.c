/*
 * bench_ckpt.c - how fast a checkpoint goes into and out of the chunk store,
 * next to what the disk itself does with the same bytes, in the same run, on
 * the same disk, for 1 and N writers.
 *
 * N writer processes are forked (one store each, as per-rank stores are,
 * opened after the fork), each holding total/N bytes of random state (never
 * all zeros, no two chunks alike, so dedup cannot flatter the store).  The
 * parent runs them through the phases in lock step and times each phase on
 * the wall clock, from "go" to the last writer's answer:
 *
 *   plain write    write() + fsync() of the bytes into a plain file
 *   store save     store_put_tensor + store_sync into a fresh store (default
 *                  options: what ckpt_save's write_shard does)
 *   plain read     read() of the plain file, page cache dropped first
 *   store restore  store_get_tensor (reads + re-hash of every chunk), page
 *                  cache dropped first ("cold"), checked against the source
 *
 * Each configuration runs --reps times (the order of plain and store
 * alternates) and the medians are reported.  Dropping the page cache:
 * `echo 3 > /proc/sys/vm/drop_caches` when permitted, else every writer
 * fadvises DONTNEED on its files; the output says which worked, because a
 * warm read measures memory, not the disk.
 *
 * --plain measures only the plain write and read (the baseline that
 * bench/ckpt/e2e.sh puts beside a real qeffect save and restore), and
 * --bytes N sets the exact total instead of --gib.
 *
 * Not a test: run it by hand or through bench/ckpt/run.sh.
 *   bench_ckpt [--dir DIR] [--gib G | --bytes N] [--writers 1,2,4] [--reps R] [--chunk-mib M] [--plain]
 *              [--json OUT] [--keep]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/status.h"
#include "store/store.h"

#define PIECE ((size_t)64 << 20)
#define MAX_WRITERS 64
#define MAX_CONFIGS 8
#define MAX_REPS 15

enum phase { PH_PREP = 'p', PH_WRITE = 'w', PH_SAVE = 's', PH_READ = 'r', PH_RESTORE = 'g', PH_DROP = 'd', PH_VERIFY = 'v', PH_QUIT = 'q' };

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

static int fadvise_drop(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	fdatasync(fd);
	int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return rc;
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

/* --- one writer process ------------------------------------------------------ */

typedef struct writer {
	int id;
	size_t bytes, chunk;
	char dir[1024], sdir[1100], plain[1100], dmdb[1200];
	unsigned char *src, *dst;
	store_chunk_list list;
} writer;

static int rm_rf(const char *path)
{
	char cmd[1300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	return system(cmd) == 0 ? 0 : -1;
}

/* One phase; 0 or -1 with a message on stderr. */
static int writer_phase(writer *w, int ph)
{
	store *s = NULL;
	int rc = 0;
	switch (ph) {
	case PH_PREP:
		store_chunk_list_free(&w->list);
		if (rm_rf(w->sdir) || (unlink(w->plain) && errno != ENOENT))
			return fprintf(stderr, "writer %d: cannot clear %s\n", w->id, w->dir), -1;
		sync();
		return 0;
	case PH_WRITE:
		if (write_plain(w->plain, w->src, w->bytes))
			return fprintf(stderr, "writer %d: write '%s': %s\n", w->id, w->plain, strerror(errno)), -1;
		return 0;
	case PH_SAVE: {
		store_opts o = { .create = 1 };
		if (!(rc = store_open(w->sdir, &o, &s)))
			rc = store_put_tensor(s, w->src, w->bytes, w->chunk, &w->list);
		if (!rc)
			rc = store_sync(s);
		store_close(s);
		if (rc)
			return fprintf(stderr, "writer %d: save: %s\n", w->id, qe_last_error()), -1;
		return 0;
	}
	case PH_READ:
		if (read_plain(w->plain, w->dst, w->bytes))
			return fprintf(stderr, "writer %d: read '%s' failed\n", w->id, w->plain), -1;
		return 0;
	case PH_RESTORE: {
		store_opts o = { .read_only = 1 };
		if (!(rc = store_open(w->sdir, &o, &s)))
			rc = store_get_tensor(s, &w->list, w->dst, w->bytes);
		store_close(s);
		if (rc)
			return fprintf(stderr, "writer %d: restore: %s\n", w->id, qe_last_error()), -1;
		return 0;
	}
	case PH_VERIFY: /* after each timed read, outside its timing */
		if (memcmp(w->src, w->dst, w->bytes))
			return fprintf(stderr, "writer %d: the last read returned other bytes\n", w->id), -1;
		return 0;
	case PH_DROP:
		rc = fadvise_drop(w->plain) || fadvise_drop(w->dmdb);
		return rc ? -1 : 0;
	}
	return -1;
}

/* The child: prepare, then answer each phase byte with a status byte. */
static int writer_main(writer *w, int in, int out)
{
	w->src = malloc(w->bytes);
	w->dst = malloc(w->bytes);
	if (!w->src || !w->dst) {
		fprintf(stderr, "writer %d: cannot allocate 2 x %zu bytes\n", w->id, w->bytes);
		return 1;
	}
	fill(w->src, w->bytes, 0x5eedbe7cull + (uint64_t)w->id * 0x1000193ull);
	memset(w->dst, 0xa5, w->bytes); /* fault the pages in outside the timings */
	if (mkdir(w->dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "writer %d: mkdir '%s': %s\n", w->id, w->dir, strerror(errno));
		return 1;
	}
	for (;;) {
		char ph;
		if (read(in, &ph, 1) != 1 || ph == PH_QUIT)
			break;
		if (ph == PH_RESTORE || ph == PH_READ)
			memset(w->dst, 0xa5, w->bytes); /* other bytes than src before each read */
		char ok = writer_phase(w, ph) == 0 ? 'y' : 'n';
		if (write(out, &ok, 1) != 1)
			break;
	}
	store_chunk_list_free(&w->list);
	free(w->src);
	free(w->dst);
	return 0;
}

/* --- the parent ----------------------------------------------------------------- */

typedef struct pool {
	int n;
	pid_t pid[MAX_WRITERS];
	int to[MAX_WRITERS], from[MAX_WRITERS];
} pool;

/* Send phase ph to every writer and wait for all; -1 if any failed. */
static int pool_run(pool *p, char ph)
{
	int bad = 0;
	for (int i = 0; i < p->n; i++)
		if (write(p->to[i], &ph, 1) != 1)
			bad = 1;
	for (int i = 0; i < p->n; i++) {
		char ok = 'n';
		if (read(p->from[i], &ok, 1) != 1 || ok != 'y')
			bad = 1;
	}
	return bad ? -1 : 0;
}

static const char *drop_caches(pool *p)
{
	sync();
	FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
	if (f) {
		int ok = fputs("3\n", f) >= 0;
		ok = (fclose(f) == 0) && ok;
		if (ok)
			return "drop_caches";
	}
	return pool_run(p, PH_DROP) == 0 ? "fadvise" : "none";
}

static int pool_start(pool *p, int n, const char *dir, size_t total, size_t chunk)
{
	p->n = 0;
	for (int i = 0; i < n; i++) {
		int a[2], b[2];
		if (pipe(a) || pipe(b))
			return -1;
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			return -1;
		if (pid == 0) {
			close(a[1]);
			close(b[0]);
			for (int k = 0; k < p->n; k++)
				close(p->to[k]), close(p->from[k]);
			writer w = { .id = i, .chunk = chunk };
			w.bytes = total / (size_t)n + (i == n - 1 ? total % (size_t)n : 0);
			snprintf(w.dir, sizeof(w.dir), "%s/w%d", dir, i);
			snprintf(w.sdir, sizeof(w.sdir), "%s/store", w.dir);
			snprintf(w.plain, sizeof(w.plain), "%s/plain.bin", w.dir);
			snprintf(w.dmdb, sizeof(w.dmdb), "%s/data.mdb", w.sdir);
			_exit(writer_main(&w, a[0], b[1]));
		}
		close(a[0]);
		close(b[1]);
		p->pid[i] = pid;
		p->to[i] = a[1];
		p->from[i] = b[0];
		p->n++;
	}
	return 0;
}

static void pool_stop(pool *p)
{
	char q = PH_QUIT;
	for (int i = 0; i < p->n; i++) {
		if (write(p->to[i], &q, 1) != 1)
			kill(p->pid[i], SIGTERM);
		close(p->to[i]);
		close(p->from[i]);
	}
	for (int i = 0; i < p->n; i++)
		waitpid(p->pid[i], NULL, 0);
	p->n = 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double t[MAX_REPS];
	memcpy(t, v, (size_t)n * sizeof(*t));
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

enum { OP_WRITE, OP_SAVE, OP_READ, OP_RESTORE, N_OPS };
static const char *op_name[N_OPS] = { "plain_write_fsync", "store_save", "plain_read_cold", "store_restore_cold" };
static const char op_phase[N_OPS] = { PH_WRITE, PH_SAVE, PH_READ, PH_RESTORE };

typedef struct config {
	int writers;
	double s[N_OPS][MAX_REPS];
	double med[N_OPS];
} config;

static int timed(pool *p, int op, double *out)
{
	double t = now_s();
	int rc = pool_run(p, op_phase[op]);
	*out = now_s() - t;
	return rc;
}

int main(int argc, char **argv)
{
	const char *dir = "/tmp/qe-bench-ckpt", *json = NULL, *wlist = "1,2,4";
	double gib = 2.0;
	long chunk_mib = 64;
	int reps = 3, keep = 0, plain = 0;
	size_t exact = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
			gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "--writers") && i + 1 < argc)
			wlist = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--chunk-mib") && i + 1 < argc)
			chunk_mib = atol(argv[++i]);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else if (!strcmp(argv[i], "--keep"))
			keep = 1;
		else if (!strcmp(argv[i], "--plain"))
			plain = 1;
		else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
			exact = (size_t)strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--gib G] [--writers 1,2,4] [--reps R] [--chunk-mib M] "
					"[--bytes N] [--plain] [--json OUT] [--keep]\n");
			return 2;
		}
	}
	size_t total = exact ? exact : (size_t)(gib * (double)(1ull << 30));
	if (exact)
		gib = (double)exact / (double)(1ull << 30);
	size_t chunk = (size_t)chunk_mib << 20;
	config cf[MAX_CONFIGS];
	int ncf = 0;
	for (const char *c = wlist; *c && ncf < MAX_CONFIGS;) {
		int n = atoi(c);
		if (n < 1 || n > MAX_WRITERS) {
			fprintf(stderr, "bench_ckpt: bad --writers '%s' (1..%d each)\n", wlist, MAX_WRITERS);
			return 2;
		}
		memset(&cf[ncf], 0, sizeof(cf[ncf]));
		cf[ncf++].writers = n;
		c = strchr(c, ',');
		if (!c)
			break;
		c++;
	}
	if (total < 4096 || chunk < 4096 || chunk > STORE_MAX_CHUNK || reps < 1 || reps > MAX_REPS || !ncf) {
		fprintf(stderr, "bench_ckpt: bad --gib, --chunk-mib, --reps (1..%d) or --writers\n", MAX_REPS);
		return 2;
	}
	if (rm_rf(dir) || (mkdir(dir, 0755) && errno != EEXIST)) {
		fprintf(stderr, "bench_ckpt: cannot prepare '%s'\n", dir);
		return 1;
	}
	printf("bench_ckpt: %zu bytes (%.2f GiB) of random state in total, %zu-byte chunks, in %s, %d reps\n", total, gib,
	       chunk, dir, reps);
	const char *how = "none";
	int failed = 0;
	for (int c = 0; c < ncf && !failed; c++) {
		config *k = &cf[c];
		pool p;
		if (pool_start(&p, k->writers, dir, total, chunk)) {
			fprintf(stderr, "bench_ckpt: cannot start %d writers: %s\n", k->writers, strerror(errno));
			return 1;
		}
		for (int r = 0; r < reps && !failed; r++) {
			/* alternate which goes first, so neither always finds the disk busier */
			int first_w = r % 2 ? OP_SAVE : OP_WRITE, second_w = r % 2 ? OP_WRITE : OP_SAVE;
			int first_r = r % 2 ? OP_RESTORE : OP_READ, second_r = r % 2 ? OP_READ : OP_RESTORE;
			if (plain) {
				failed = pool_run(&p, PH_PREP) || timed(&p, OP_WRITE, &k->s[OP_WRITE][r]);
				if (!failed) {
					how = drop_caches(&p);
					failed = timed(&p, OP_READ, &k->s[OP_READ][r]) || pool_run(&p, PH_VERIFY);
				}
				if (!failed)
					printf("  writers %d rep %d: write %.3f s, read %.3f s\n", k->writers, r,
					       k->s[OP_WRITE][r], k->s[OP_READ][r]);
				fflush(stdout);
				continue;
			}
			failed = pool_run(&p, PH_PREP) || timed(&p, first_w, &k->s[first_w][r]) ||
				 timed(&p, second_w, &k->s[second_w][r]);
			if (!failed) {
				how = drop_caches(&p);
				failed = timed(&p, first_r, &k->s[first_r][r]) || pool_run(&p, PH_VERIFY);
			}
			if (!failed) {
				how = drop_caches(&p);
				failed = timed(&p, second_r, &k->s[second_r][r]) || pool_run(&p, PH_VERIFY);
			}
			if (!failed)
				printf("  writers %d rep %d: write %.3f s, save %.3f s, read %.3f s, restore %.3f s\n", k->writers,
				       r, k->s[OP_WRITE][r], k->s[OP_SAVE][r], k->s[OP_READ][r], k->s[OP_RESTORE][r]);
			fflush(stdout);
		}
		pool_stop(&p);
		for (int op = 0; op < N_OPS; op++)
			k->med[op] = median(k->s[op], reps);
	}
	if (failed) {
		fprintf(stderr, "bench_ckpt: a writer failed (its message is above)\n");
		return 1;
	}

	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			fprintf(stderr, "bench_ckpt: cannot write '%s': %s\n", json, strerror(errno));
			return 1;
		}
		fprintf(f, "{\n  \"bytes_total\": %zu,\n  \"chunk_bytes\": %zu,\n  \"reps\": %d,\n  \"dir\": \"%s\",\n", total,
			chunk, reps, dir);
		fprintf(f, "  \"cache_drop\": \"%s\",\n  \"configs\": [\n", how);
		for (int c = 0; c < ncf; c++) {
			config *k = &cf[c];
			fprintf(f, "    {\"writers\": %d", k->writers);
			for (int op = 0; op < N_OPS; op++) {
				if (plain && (op == OP_SAVE || op == OP_RESTORE))
					continue;
				fprintf(f, ", \"%s\": {\"median_s\": %.6f, \"gb_per_s\": %.4f, \"s\": [", op_name[op], k->med[op],
					(double)total / k->med[op] / 1e9);
				for (int r = 0; r < reps; r++)
					fprintf(f, "%s%.6f", r ? ", " : "", k->s[op][r]);
				fprintf(f, "]}");
			}
			if (plain)
				fprintf(f, "}%s\n", c + 1 < ncf ? "," : "");
			else
				fprintf(f, ", \"save_vs_write\": %.4f, \"restore_vs_read\": %.4f}%s\n", k->med[OP_WRITE] / k->med[OP_SAVE],
				k->med[OP_READ] / k->med[OP_RESTORE], c + 1 < ncf ? "," : "");
		}
		fprintf(f, "  ]\n}\n");
		fclose(f);
		printf("wrote %s\n", json);
	}
	if (!keep && rm_rf(dir))
		fprintf(stderr, "bench_ckpt: could not remove %s\n", dir);

	printf("\ncold reads: page cache dropped with %s%s\n", how,
	       strcmp(how, "none") == 0 ? " - NOT dropped: the read numbers are warm reads" : "");
	printf("%.2f GiB in total, split over the writers; GB/s of all writers together, medians of %d\n", gib, reps);
	printf("%-8s %12s %12s %7s %12s %12s %7s\n", "writers", "write GB/s", "save GB/s", "save%", "read GB/s",
	       "restore GB/s", "rest%");
	for (int c = 0; c < ncf; c++) {
		config *k = &cf[c];
		double g[N_OPS];
		for (int op = 0; op < N_OPS; op++)
			g[op] = (double)total / k->med[op] / 1e9;
		if (plain) {
			printf("%-8d %12.3f %12s %7s %12.3f\n", k->writers, g[OP_WRITE], "-", "-", g[OP_READ]);
			continue;
		}
		printf("%-8d %12.3f %12.3f %6.0f%% %12.3f %12.3f %6.0f%%\n", k->writers, g[OP_WRITE], g[OP_SAVE],
		       100 * g[OP_SAVE] / g[OP_WRITE], g[OP_READ], g[OP_RESTORE], 100 * g[OP_RESTORE] / g[OP_READ]);
	}
	return 0;
}
