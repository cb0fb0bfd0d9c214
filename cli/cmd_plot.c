/*
 * cmd_plot.c - `qeffect plot --run-dir DIR -o FILE.png|.svg`: training and
 * held-out loss curves from the catalog's loss rows, optionally two runs
 * overlaid (--vs), drawn by gnuplot.
 *
 * gnuplot is an external program: we write data files and a script into a
 * temporary folder and run it with fork/exec (no shell, so odd characters in
 * paths cannot inject commands).  It writes FILE.partial-PID next to the
 * target, renamed into place only when gnuplot succeeded and the file is not
 * empty, so a failure leaves no half-written picture.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/gnuplot.h"
#include "cli/storage_options.h"
#include "ckpt/query/ckpt_query.h"
#include "runtime/core/status.h"

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect plot --run-dir DIR [--vs DIR2] -o FILE.png|FILE.svg [--title T]\n\n"
		   "Plot the training loss and the held-out loss of a run (from its catalog) against the\n"
		   "step; --vs overlays a second run.  The picture type follows the extension of FILE\n"
		   "(.png: pngcairo, .svg: svg).  Needs gnuplot in PATH (Debian: gnuplot-nox).\n"
		   "Exit status: 0 written, 1 a run cannot be read, has no losses, or gnuplot failed or is\n"
		   "missing, 2 bad usage.\n");
}

typedef struct series {
	const char *dir;
	char label[128];
	cat_loss_rows rows;
	size_t ntrain, neval;
} series;

static int load(series *s)
{
	ckpt_run *r;
	int rc = ckpt_run_open(s->dir, 0, &r);
	if (rc)
		return rc;
	rc = cat_loss_get(ckpt_run_catalog(r), ckpt_run_id(r), &s->rows);
	ckpt_run_close(r);
	if (rc)
		return qe_fail_ctx(rc, "run '%s': losses", s->dir);
	for (size_t i = 0; i < s->rows.n; i++) {
		s->ntrain += isfinite(s->rows.rows[i].loss) != 0;
		s->neval += isfinite(s->rows.rows[i].eval_loss) != 0;
	}
	if (!s->ntrain && !s->neval)
		return qe_fail(QE_ENOTFOUND, "run '%s' has no recorded losses (train it with --run-dir)", s->dir);
	/* label: the folder's last component */
	size_t n = strlen(s->dir);
	while (n > 1 && s->dir[n - 1] == '/')
		n--;
	size_t b = n;
	while (b > 0 && s->dir[b - 1] != '/')
		b--;
	snprintf(s->label, sizeof(s->label), "%.*s", (int)(n - b), s->dir + b);
	return QE_OK;
}

/* Write "step value" rows of one curve; eval picks the held-out column. */
static int write_data(const char *path, const series *s, int eval)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return qe_fail(QE_EIO, "cannot write '%s': %s", path, strerror(errno));
	for (size_t i = 0; i < s->rows.n; i++) {
		double v = eval ? s->rows.rows[i].eval_loss : s->rows.rows[i].loss;
		if (isfinite(v))
			fprintf(f, "%lld %.9g\n", (long long)s->rows.rows[i].step, v);
	}
	if (fclose(f))
		return qe_fail(QE_EIO, "cannot write '%s': %s", path, strerror(errno));
	return QE_OK;
}

/* A gnuplot single-quoted string: '' stands for a quote. */
static void put_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		if (*s != '\n' && *s != '\r')
			fputc(*s, f);
	}
	fputc('\'', f);
}

static void remove_tmp(const char *tmp)
{
	static const char *names[] = { "a_train.dat", "a_eval.dat", "b_train.dat", "b_eval.dat", "plot.gp",
				       "gnuplot.err" };
	char p[4200];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmp, names[i]);
		unlink(p);
	}
	rmdir(tmp);
}

int cli_plot_main(int argc, char **argv)
{
	const char *dir = NULL, *vs = NULL, *outp = NULL, *title = NULL;
	const cli_flag flags[] = {
		{ "run-dir", 0, CLI_FLAG_PATH, .dst = &dir },
		{ "vs", 0, CLI_FLAG_PATH, .dst = &vs },
		{ "output", 'o', CLI_FLAG_PATH, .dst = &outp },
		{ "title", 0, CLI_FLAG_STRING, .dst = &title },
		{ 0 },
	};
	int rc = cli_flags_parse("plot", flags, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (!dir || !outp) {
		fprintf(stderr, "qeffect plot: --run-dir DIR and -o FILE are required (see --help)\n");
		return 2;
	}
	const char *ext = strrchr(outp, '.');
	int svg = ext && strcmp(ext, ".svg") == 0, png = ext && strcmp(ext, ".png") == 0;
	if (!svg && !png) {
		fprintf(stderr, "qeffect plot: output '%s' must end in .png or .svg\n", outp);
		return 2;
	}
	char exe[4096];
	if (cli_gnuplot_find(exe, sizeof(exe))) {
		fprintf(stderr, "qeffect plot: gnuplot not found in PATH%s (install it: apt-get install gnuplot-nox)\n",
			cli_storage_get()->gnuplot ? " or QE_GNUPLOT" : "");
		return 1;
	}
	series A = { .dir = dir }, B = { .dir = vs };
	int status = 1;
	char tmp[4096] = "", path[4200], script[4200], errp[4200], partial[4200];
	partial[0] = 0;
	if ((rc = load(&A))) {
		cli_report("plot", rc, dir);
		goto out;
	}
	if (vs && (rc = load(&B))) {
		cli_report("plot", rc, vs);
		goto out;
	}
	if (vs && strcmp(A.label, B.label) == 0) {
		snprintf(A.label, sizeof(A.label), "%s", dir);
		snprintf(B.label, sizeof(B.label), "%s", vs);
	}
	const char *base = cli_storage_get()->tmpdir;
	snprintf(tmp, sizeof(tmp), "%s/qeffect-plot-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmp)) {
		fprintf(stderr, "qeffect plot: cannot create a temporary folder '%s': %s\n", tmp, strerror(errno));
		tmp[0] = 0;
		goto out;
	}
	series *all[2] = { &A, vs ? &B : NULL };
	for (int k = 0; k < 2 && all[k]; k++)
		for (int e = 0; e < 2; e++) {
			snprintf(path, sizeof(path), "%s/%c_%s.dat", tmp, "ab"[k], e ? "eval" : "train");
			if ((rc = write_data(path, all[k], e))) {
				cli_report("plot", rc, "data file");
				goto out;
			}
		}
	snprintf(partial, sizeof(partial), "%s.partial-%ld", outp, (long)getpid());
	snprintf(script, sizeof(script), "%s/plot.gp", tmp);
	FILE *f = fopen(script, "w");
	if (!f) {
		fprintf(stderr, "qeffect plot: cannot write '%s': %s\n", script, strerror(errno));
		goto out;
	}
	fprintf(f, "set terminal %s size 1000,600\n", svg ? "svg dynamic" : "pngcairo");
	fprintf(f, "set output ");
	put_quoted(f, partial);
	fprintf(f, "\nset title ");
	put_quoted(f, title ? title : "loss");
	fprintf(f, " noenhanced\nset xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right noenhanced\n");
	fprintf(f, "plot ");
	int nplots = 0;
	for (int k = 0; k < 2 && all[k]; k++)
		for (int e = 0; e < 2; e++) {
			if ((e ? all[k]->neval : all[k]->ntrain) == 0)
				continue;
			char t[200];
			snprintf(t, sizeof(t), "%s %s", all[k]->label, e ? "held-out" : "train");
			snprintf(path, sizeof(path), "%s/%c_%s.dat", tmp, "ab"[k], e ? "eval" : "train");
			fprintf(f, "%s", nplots++ ? ", \\\n     " : "");
			put_quoted(f, path);
			fprintf(f, " using 1:2 with %s lw 2 dt %d lc %d title ", e ? "linespoints pt 7 ps 0.6" : "lines",
				k ? 2 : 1, 1 + 2 * k + e);
			put_quoted(f, t);
		}
	fprintf(f, "\nunset output\n");
	if (fclose(f)) {
		fprintf(stderr, "qeffect plot: cannot write '%s': %s\n", script, strerror(errno));
		goto out;
	}
	snprintf(errp, sizeof(errp), "%s/gnuplot.err", tmp);
	char why[1200];
	if (cli_gnuplot_run(exe, NULL, script, errp, why, sizeof(why))) {
		fprintf(stderr, "qeffect plot: gnuplot (%s) failed (%s) writing '%s'\n", exe, why, outp);
		goto out;
	}
	struct stat sb;
	if (stat(partial, &sb) || sb.st_size == 0) {
		fprintf(stderr, "qeffect plot: gnuplot wrote nothing to '%s'\n", outp);
		goto out;
	}
	if (rename(partial, outp)) {
		fprintf(stderr, "qeffect plot: cannot rename '%s' to '%s': %s\n", partial, outp, strerror(errno));
		goto out;
	}
	partial[0] = 0;
	printf("wrote %s (%lld bytes): %s %zu train / %zu held-out points", outp, (long long)sb.st_size, A.label,
	       A.ntrain, A.neval);
	if (vs)
		printf(", %s %zu train / %zu held-out points", B.label, B.ntrain, B.neval);
	printf("\n");
	status = 0;
out:
	if (partial[0])
		unlink(partial);
	if (tmp[0])
		remove_tmp(tmp);
	cat_loss_rows_free(&A.rows);
	cat_loss_rows_free(&B.rows);
	return status;
}
