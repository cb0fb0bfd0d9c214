/*
 * preempt.c - the SIGTERM/SIGINT handlers of a training rank (preempt.h).
 */
#include "cli/preempt.h"

#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	if (g_stop) {
		/* the second signal: end now, by it */
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	g_stop = 1;
	static const char msg[] = "qeffect: signal caught: finishing this step, then a checkpoint and exit "
				  "(a second signal ends at once)\n";
	ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
	(void)w;
}

void cli_preempt_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

const volatile sig_atomic_t *cli_preempt_flag(void) { return &g_stop; }
