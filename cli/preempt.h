/*
 * preempt.h - stopping a run on SIGTERM or SIGINT at a quiescent step.
 *
 * The first signal only raises a flag; the rank's next loss all-reduce
 * carries it to every rank (qe_rank_set_stop_source), so all of them finish
 * the same step, take a checkpoint there when the run has a run directory,
 * and exit with CLI_EXIT_PREEMPTED.  A second signal ends the process at
 * once, by that signal: what was committed stays committed (a checkpoint is
 * committed by one SQLite transaction after its chunks are durable).
 */
#ifndef QE_CLI_PREEMPT_H
#define QE_CLI_PREEMPT_H

#include <signal.h>

#include "runtime/comm/comm.h"

/* The exit status of a run that stopped early on a signal (75, sysexits' EX_TEMPFAIL: try again, by resume). */
#define CLI_EXIT_PREEMPTED QE_LAUNCH_EXIT_STOPPED

/* Catch SIGTERM and SIGINT as above (this process's handlers; call once per rank process). */
void cli_preempt_install(void);
/* The flag the handlers raise (0 until the first signal). */
const volatile sig_atomic_t *cli_preempt_flag(void);

#endif
