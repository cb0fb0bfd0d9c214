/*
 * bench_util.c - what the bench subcommands share: children with a time
 * limit whose output lands in a log, JSON lines out of that log, medians,
 * reports written atomically, and gnuplot.
 *
 * A child runs in its own process group so that a time limit takes its rank
 * processes with it, and dies with us (PR_SET_PDEATHSIG) so that a bench
 * killed by an outer timeout leaves nothing running on the GPUs.
 */
#include "cli/bench/bench.h"
#include "cli/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double bench_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double bench_unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int bench_self_exe(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0 || (size_t)n >= len - 1)
		return -1;
	buf[n] = 0;
	return 0;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n + 1 >= cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	if (buf) {
		buf[n] = 0;
		*len = n;
	}
	return buf;
}

int bench_run_child(char *const argv[], const char *log_path, double timeout_s, bench_child *out)
{
	memset(out, 0, sizeof(*out));
	out->exit_code = -1;
	int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "qeffect bench: cannot create log '%s': %s\n", log_path, strerror(errno));
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	out->start_unix_ms = bench_unix_ms();
	double t0 = bench_now_ms();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "qeffect bench: fork: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execv(argv[0], argv);
		fprintf(stderr, "exec '%s': %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid); /* both sides set it: no window where a kill of the group misses */
	close(fd);
	int st = 0;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			fprintf(stderr, "qeffect bench: waitpid: %s\n", strerror(errno));
			return -1;
		}
		if (timeout_s > 0 && !out->timed_out && bench_now_ms() - t0 > timeout_s * 1e3) {
			kill(-pid, SIGKILL);
			out->timed_out = 1;
		}
		struct timespec ts = { 0, 500000 };
		nanosleep(&ts, NULL);
	}
	out->wall_ms = bench_now_ms() - t0;
	if (out->timed_out)
		kill(-pid, SIGKILL); /* stragglers of the group */
	out->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	out->out = read_file(log_path, &out->out_len);
	if (!out->out) {
		fprintf(stderr, "qeffect bench: cannot read back log '%s': %s\n", log_path, strerror(errno));
		return -1;
	}
	return 0;
}

void bench_child_release(bench_child *c)
{
	free(c->out);
	c->out = NULL;
}

json_t *bench_json_lines(const char *text)
{
	json_t *arr = json_array();
	const char *p = text;
	while (p && *p) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n && p[0] == '{') {
			json_t *o = json_loadb(p, n, 0, NULL);
			if (json_is_object(o))
				json_array_append_new(arr, o);
			else
				json_decref(o);
		}
		p = e ? e + 1 : NULL;
	}
	return arr;
}

static int by_rank(const void *a, const void *b)
{
	json_int_t ra = json_integer_value(json_object_get(*(json_t *const *)a, "rank"));
	json_int_t rb = json_integer_value(json_object_get(*(json_t *const *)b, "rank"));
	return (ra > rb) - (ra < rb);
}

json_t *bench_rank_lines(const char *text)
{
	json_t *all = bench_json_lines(text), *out = json_array();
	size_t i, n = 0;
	json_t *v, *tmp[256];
	json_array_foreach(all, i, v)
		if (json_is_integer(json_object_get(v, "rank")) && n < 256)
			tmp[n++] = v;
	qsort(tmp, n, sizeof(tmp[0]), by_rank);
	for (i = 0; i < n; i++)
		json_array_append(out, tmp[i]);
	json_decref(all);
	return out;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_mkdirs(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		fprintf(stderr, "qeffect bench: path too long: '%s'\n", path);
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST) {
			fprintf(stderr, "qeffect bench: cannot create '%s': %s\n", buf, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST) {
		fprintf(stderr, "qeffect bench: cannot create '%s': %s\n", buf, strerror(errno));
		return -1;
	}
	return 0;
}

int bench_write_json(const char *path, json_t *doc)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
	if (json_dump_file(doc, tmp, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10))) {
		fprintf(stderr, "qeffect bench: cannot write '%s'\n", tmp);
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path)) {
		fprintf(stderr, "qeffect bench: cannot rename '%s' to '%s': %s\n", tmp, path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

json_t *bench_real(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

int bench_split_list(const char *s, char items[][32], int max)
{
	int n = 0;
	const char *p = s;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == 0 || len >= 32 || n == max)
			return -1;
		memcpy(items[n], p, len);
		items[n++][len] = 0;
		if (!e)
			break;
		p = e + 1;
		if (!*p)
			return -1;
	}
	return n ? n : -1;
}

const char *bench_bytes(double bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;
	while (fabs(bytes) >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
	return buf;
}

int bench_gnuplot(const char *dir, const char *script_name, char *err, size_t errlen)
{
	char exe[4096], errpath[4200];
	err[0] = 0;
	if (cli_gnuplot_find(exe, sizeof(exe))) {
		snprintf(err, errlen, "gnuplot not found in PATH (or $QE_GNUPLOT)");
		return -1;
	}
	snprintf(errpath, sizeof(errpath), "%s/gnuplot.err", dir);
	char why[1200];
	int rc = cli_gnuplot_run(exe, dir, script_name, errpath, why, sizeof(why));
	if (rc)
		snprintf(err, errlen, "gnuplot %s", why);
	unlink(errpath);
	return rc ? 1 : 0;
}
