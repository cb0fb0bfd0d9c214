/*
 * launch.c - `--nproc N` on one machine: fork the rank processes, give each
 * the variables a cluster launcher would (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT, QE_RUN_ID), and watch them.
 *
 * The job is local, so MASTER_ADDR defaults to 127.0.0.1 (every listener of
 * the job then sits on loopback, rendezvous.c), and the launcher makes the
 * job's secret: unless the caller already set QE_JOB_SECRET or
 * QE_JOB_SECRET_FILE, each launch gets a fresh random QE_JOB_SECRET
 * (getrandom, auth.h) for its ranks only; the launcher's own variables are
 * left alone and the secret is never logged.
 *
 * A forked rank (function variant) gets its variables in its own memory
 * (qe_launch_var_set, launch_vars.h), never in its environment; an exec'd
 * rank gets them in the environment handed to execvpe, where the new
 * program's cli reads them as it would an external launcher's.
 *
 * One failing rank dooms the job: the others would only wait for it until
 * their comm timeouts.  So the first failure (non-zero exit or a signal)
 * makes the launcher send SIGTERM to the rest and SIGKILL after a grace
 * period, and the report names that first rank and how it ended - the useful
 * line when a run dies.  Children get PR_SET_PDEATHSIG so that a killed
 * launcher (or test) never leaves orphan ranks behind.
 *
 * The children are copies of the calling process (function variant) or exec
 * a command line (exec variant); both share everything but the last step.
 * Only children ever _exit here; the parent always returns.
 */
#define _GNU_SOURCE
#include "runtime/comm/comm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/auth.h"
#include "runtime/comm/launch_vars.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

extern char **environ;

/* The variables a launch sets; the last, QE_JOB_SECRET, only when the caller has no secret. */
#define NVARS 8
#define VAR_SECRET 7
#define VAL_MAX (QE_DIST_ADDR_MAX + QE_AUTH_GENERATED_CHARS + 32)
static const char *const var_names[NVARS] = { "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
					      "MASTER_ADDR", "MASTER_PORT", "QE_RUN_ID",  "QE_JOB_SECRET" };

typedef struct launch_spec {
	int (*rank_main)(void *arg); /* function variant */
	void *arg;
	char *const *argv; /* exec variant when not NULL */
} launch_spec;

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* environ without our variables, plus the first nvals of vals ("NAME=value"); NULL on no memory. */
static char **child_environ(char vals[NVARS][VAL_MAX], int nvals)
{
	size_t n = 0, k = 0;
	char **envp;
	while (environ && environ[n])
		n++;
	envp = malloc((n + NVARS + 1) * sizeof(char *));
	if (!envp)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int ours = 0;
		for (int v = 0; v < nvals; v++) {
			size_t l = strlen(var_names[v]);
			if (strncmp(environ[i], var_names[v], l) == 0 && environ[i][l] == '=')
				ours = 1;
		}
		if (!ours)
			envp[k++] = environ[i];
	}
	for (int v = 0; v < nvals; v++)
		envp[k++] = vals[v];
	envp[k] = NULL;
	return envp;
}

/* LeakSanitizer checks at exit, which _exit skips: in a sanitized build a forked
 * rank asks for the check itself, so its leaks fail the job like the launcher's. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static __attribute__((noreturn)) void child_run(const launch_spec *spec, int rank, pid_t parent,
						char vals[NVARS][VAL_MAX], int nvals, char **envp)
{
	sigset_t none;
	int rc;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1); /* the launcher died before we got here */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	/* Its own process group: a terminal's Ctrl-C reaches the launcher alone, which passes it on once. */
	setpgid(0, 0);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (spec->argv) {
		execvpe(spec->argv[0], spec->argv, envp);
		qe_log(QE_LOG_ERROR, "launch: rank %d: cannot exec '%s': %s", rank, spec->argv[0], strerror(errno));
		_exit(127);
	}
	for (int v = 0; v < nvals; v++) {
		char *eq = strchr(vals[v], '=');
		*eq = '\0';
		if (qe_launch_var_set(vals[v], eq + 1)) {
			qe_log(QE_LOG_ERROR, "launch: rank %d: %s", rank, qe_last_error());
			_exit(1);
		}
		*eq = '=';
	}
	rc = spec->rank_main(spec->arg);
	qe_fault_report();
	if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() && rc == 0)
		rc = 23; /* LeakSanitizer's exit code */
	fflush(NULL);
	_exit(rc >= 0 && rc <= 255 ? rc : 1);
}

static int failed_status(const qe_launch_rank *r)
{
	return r->signal != 0 || (r->exit_code != 0 && r->exit_code != QE_LAUNCH_EXIT_STOPPED);
}

/* SIGTERM and SIGINT to the launcher while it supervises: counted, and passed on to the ranks as SIGTERM. */
static volatile sig_atomic_t g_signals;

static void count_signal(int sig)
{
	(void)sig;
	g_signals++;
}

static void describe(const qe_launch_result *out, int r, char *buf, size_t len)
{
	const qe_launch_rank *k = &out->ranks[r];
	if (k->signal)
		snprintf(buf, len, "rank %d (pid %d) was killed by signal %d (%s)", r, (int)k->pid, k->signal,
			 strsignal(k->signal));
	else if (k->exit_code >= 0)
		snprintf(buf, len, "rank %d (pid %d) exited with status %d", r, (int)k->pid, k->exit_code);
	else
		snprintf(buf, len, "rank %d (pid %d) vanished (reaped elsewhere; is SIGCHLD ignored?)", r, (int)k->pid);
}

static int grace_ms(void)
{
	const char *s = qe_launch_var("QE_LAUNCH_GRACE_MS");
	int v = s ? atoi(s) : 0;
	return v > 0 ? v : 3000;
}

/* Wait for every child; stop the rest at the first failure. */
static int supervise(qe_launch_result *out)
{
	int n = out->nproc, alive = n, stopping = 0, killed = 0, nap = 1, stopped_others = 0;
	sig_atomic_t forwarded = 0;
	int64_t kill_at = 0;
	char first[256];
	while (alive > 0) {
		int reaped = 0;
		if (g_signals != forwarded) {
			/*
			 * The first signal to the launcher goes on to every rank still
			 * running as SIGTERM (the ranks' handlers decide what it means);
			 * a later one ends them at once, as a rank's own second signal
			 * would (two SIGTERMs sent together could arrive as one).
			 */
			int sig = forwarded ? SIGKILL : SIGTERM;
			forwarded = g_signals;
			for (int o = 0; o < n; o++)
				if (out->ranks[o].pid > 0 && out->ranks[o].exit_code == -1 && !out->ranks[o].signal)
					kill(out->ranks[o].pid, sig);
		}
		for (int r = 0; r < n; r++) {
			qe_launch_rank *k = &out->ranks[r];
			int st;
			pid_t w;
			if (k->pid <= 0 || k->exit_code >= 0 || k->signal)
				continue;
			if (k->exit_code == -2)
				continue; /* vanished, already counted */
			w = waitpid(k->pid, &st, WNOHANG);
			if (w == 0 || (w < 0 && errno == EINTR))
				continue;
			reaped = 1;
			alive--;
			if (w < 0) {
				k->exit_code = -2;
			} else if (WIFSIGNALED(st)) {
				k->signal = WTERMSIG(st);
			} else {
				k->exit_code = WEXITSTATUS(st);
			}
			if ((k->exit_code == -2 || failed_status(k)) && out->first_failed < 0 && !k->terminated)
				out->first_failed = r;
			if (out->first_failed >= 0 && !stopping) {
				stopping = 1;
				kill_at = qe_comm_now_ms() + grace_ms();
				for (int o = 0; o < n; o++) {
					qe_launch_rank *x = &out->ranks[o];
					if (x->pid > 0 && x->exit_code == -1 && !x->signal) {
						kill(x->pid, SIGTERM);
						x->terminated = 1;
						stopped_others++;
					}
				}
			}
		}
		if (stopping && !killed && alive > 0 && qe_comm_now_ms() >= kill_at) {
			killed = 1;
			for (int o = 0; o < n; o++) {
				qe_launch_rank *x = &out->ranks[o];
				if (x->pid > 0 && x->exit_code == -1 && !x->signal)
					kill(x->pid, SIGKILL);
			}
		}
		if (alive > 0) {
			nap = reaped ? 1 : (nap * 2 > 50 ? 50 : nap * 2);
			sleep_ms(nap);
		}
	}
	for (int r = 0; r < n; r++)
		if (out->ranks[r].exit_code == -2)
			out->ranks[r].exit_code = -1;
	if (out->first_failed < 0)
		return 0;
	describe(out, out->first_failed, first, sizeof(first));
	return qe_fail(QE_ECOMM, "launch of %d ranks failed: %s%s", n, first,
		       stopped_others ? "; the launcher stopped the other ranks" : "");
}

/* supervise with SIGTERM and SIGINT counted for the ranks, the caller's handlers put back after */
static int supervise_forwarding(qe_launch_result *out)
{
	struct sigaction sa, old_term, old_int;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = count_signal;
	sigemptyset(&sa.sa_mask);
	g_signals = 0;
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGINT, &sa, &old_int);
	int rc = supervise(out);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGINT, &old_int, NULL);
	return rc;
}

static int launch(int nproc, const launch_spec *spec, const char *master_addr, int port, qe_launch_result *out)
{
	char run_id[QE_DIST_RUN_ID_MAX], secret[QE_AUTH_GENERATED_CHARS + 1] = "";
	const char *rid = qe_launch_var("QE_RUN_ID");
	pid_t parent = getpid();
	int rc, nvals = NVARS - 1;
	memset(out, 0, sizeof(*out));
	out->first_failed = -1;
	if (nproc < 1 || nproc > QE_LAUNCH_MAX_PROCS)
		return qe_fail(QE_EINVAL, "launch: %d ranks requested (1..%d)", nproc, QE_LAUNCH_MAX_PROCS);
	if (!master_addr)
		master_addr = "127.0.0.1";
	if (!master_addr[0] || strlen(master_addr) >= QE_DIST_ADDR_MAX)
		return qe_fail(QE_EINVAL, "launch: master address '%s' is empty or too long", master_addr);
	if (port < 0 || port > 65535)
		return qe_fail(QE_EINVAL, "launch: master port %d out of range", port);
	if (port == 0 && (rc = qe_comm_free_port(master_addr, &port)))
		return rc;
	if (rid && rid[0] && strlen(rid) < sizeof(run_id)) {
		snprintf(run_id, sizeof(run_id), "%s", rid);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(run_id, sizeof(run_id), "launch-%d-%llx", (int)parent,
			 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	}
	/* The caller's own secret is inherited as it is; otherwise this launch makes one. */
	if (!qe_launch_var("QE_JOB_SECRET") && !qe_launch_var("QE_JOB_SECRET_FILE")) {
		if ((rc = qe_auth_generate(secret, sizeof(secret))))
			return rc;
		nvals = NVARS;
	}
	out->nproc = nproc;
	for (int r = 0; r < nproc; r++) {
		out->ranks[r].exit_code = -1;
		out->ranks[r].pid = -1;
	}
	qe_log(QE_LOG_DEBUG, "launch: %d ranks, master %s:%d, run id '%s'", nproc, master_addr, port, run_id);

	fflush(NULL); /* or buffered output would be written once per child too */
	for (int r = 0; r < nproc; r++) {
		char vals[NVARS][VAL_MAX];
		char **envp = NULL;
		pid_t pid;
		snprintf(vals[0], sizeof(vals[0]), "RANK=%d", r);
		snprintf(vals[1], sizeof(vals[1]), "WORLD_SIZE=%d", nproc);
		snprintf(vals[2], sizeof(vals[2]), "LOCAL_RANK=%d", r);
		snprintf(vals[3], sizeof(vals[3]), "LOCAL_WORLD_SIZE=%d", nproc);
		snprintf(vals[4], sizeof(vals[4]), "MASTER_ADDR=%s", master_addr);
		snprintf(vals[5], sizeof(vals[5]), "MASTER_PORT=%d", port);
		snprintf(vals[6], sizeof(vals[6]), "QE_RUN_ID=%s", run_id);
		snprintf(vals[VAR_SECRET], sizeof(vals[VAR_SECRET]), "QE_JOB_SECRET=%s", secret);
		/* Built before fork: only async-signal-safe calls stand between fork and exec. */
		if (spec->argv && !(envp = child_environ(vals, nvals))) {
			rc = qe_fail(QE_ENOMEM, "launch: environment of rank %d", r);
			goto kill_ranks;
		}
		pid = fork();
		if (pid == 0)
			child_run(spec, r, parent, vals, nvals, envp);
		free(envp);
		explicit_bzero(vals[VAR_SECRET], sizeof(vals[VAR_SECRET]));
		if (pid < 0) {
			rc = qe_fail(QE_EIO, "launch: fork of rank %d of %d: %s", r, nproc, strerror(errno));
			goto kill_ranks;
		}
		out->ranks[r].pid = pid;
	}
	explicit_bzero(secret, sizeof(secret));
	return supervise_forwarding(out);

kill_ranks:
	explicit_bzero(secret, sizeof(secret));
	for (int r = 0; r < nproc; r++) {
		int st;
		if (out->ranks[r].pid <= 0)
			continue;
		kill(out->ranks[r].pid, SIGKILL);
		if (waitpid(out->ranks[r].pid, &st, 0) == out->ranks[r].pid)
			out->ranks[r].signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
		out->ranks[r].terminated = 1;
	}
	return rc;
}

int qe_launch_local(int nproc, int (*rank_main)(void *arg), void *arg, const char *master_addr,
		    int master_port_or_0, qe_launch_result *out)
{
	launch_spec spec = { .rank_main = rank_main, .arg = arg };
	if (!rank_main)
		return qe_fail(QE_EINVAL, "launch: no rank function");
	return launch(nproc, &spec, master_addr, master_port_or_0, out);
}

int qe_launch_exec(int nproc, char *const argv[], const char *master_addr, int master_port_or_0,
		   qe_launch_result *out)
{
	launch_spec spec = { .argv = argv };
	if (!argv || !argv[0])
		return qe_fail(QE_EINVAL, "launch: empty command line");
	return launch(nproc, &spec, master_addr, master_port_or_0, out);
}
