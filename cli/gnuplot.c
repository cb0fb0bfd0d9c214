/*
 * gnuplot.c - finding and running gnuplot: we write data files and a script,
 * gnuplot draws.  One copy for `qeffect plot` and the bench charts.
 */
#define _GNU_SOURCE
#include "cli/gnuplot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/storage_options.h"

int cli_gnuplot_find(char *buf, size_t len)
{
	const char *env = cli_storage_get()->gnuplot;
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return access(buf, X_OK) == 0 ? 0 : -1;
	}
	const char *path = cli_storage_get()->path;
	while (path && *path) {
		const char *e = strchr(path, ':');
		size_t n = e ? (size_t)(e - path) : strlen(path);
		if (n && n + 10 < len) {
			snprintf(buf, len, "%.*s/gnuplot", (int)n, path);
			if (access(buf, X_OK) == 0)
				return 0;
		}
		path += n + (e ? 1 : 0);
	}
	return -1;
}

int cli_gnuplot_run(const char *exe, const char *dir, const char *script, const char *errpath, char *err,
		    size_t errlen)
{
	err[0] = 0;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		if (!freopen(errpath, "w", stderr) || (dir && chdir(dir)))
			_exit(127);
		execl(exe, "gnuplot", script, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			snprintf(err, errlen, "waitpid: %s", strerror(errno));
			return -1;
		}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char msg[1024] = "";
	FILE *f = fopen(errpath, "r");
	if (f) {
		size_t n = fread(msg, 1, sizeof(msg) - 1, f);
		while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
			n--;
		msg[n] = 0;
		fclose(f);
	}
	snprintf(err, errlen, "%s %d: %s", WIFEXITED(st) ? "exit status" : "signal",
		 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), msg);
	return -1;
}
