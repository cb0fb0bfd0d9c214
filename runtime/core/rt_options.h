/*
 * rt_options.h - what the runtime is told instead of reading the environment
 * (issue 36 item 2): its knobs (the path of pipeline messages, how long a
 * wait on a peer may last, profiling, the flash kernels' row blocks) and its
 * test hooks (injected faults, a delay before cpu links connect).
 *
 * One set per process, as ckpt/session/ckpt_options.h is.  cli fills it once
 * from the variables users set (cli/storage_options.c, the one place that
 * reads them) before it starts any rank, backend or fault counter; ranks
 * forked by --nproc inherit it with the rest of their parent's memory, ranks
 * of an external launcher run the same start-up.  A program that never sets
 * it (a test binary) gets the defaults: every field "", i.e. unset.
 *
 * Each field is the text of the variable that sets it, parsed where it is
 * used exactly as the variable was, so values behave as before and errors
 * still name the variable (README's table says what each does).
 */
#ifndef QE_RT_OPTIONS_H
#define QE_RT_OPTIONS_H

typedef struct qe_rt_options {
	char p2p[16];                          /* QE_P2P: host|device */
	char profile[16];                      /* QE_PROFILE: 1 logs each action kind's time at exit */
	char flash_rows[16];                   /* QE_FLASH_ROWS: 128 for the cuda flash kernels' larger blocks */
	/* test hooks */
	char fault[1024];                      /* QE_FAULT: KIND:N,... (fault.h) */
	char fault_count[512];                 /* QE_FAULT_COUNT: 1 or a file for the counts line (fault.h) */
	char link_test_connect_delay_ms[32];   /* QE_LINK_TEST_CONNECT_DELAY_MS */
} qe_rt_options;

/*
 * Copy o into the process's options.  Set before the first use (qe_fault_init,
 * a backend, a rank): the readers keep no lock and some read a field once.
 */
void qe_rt_options_set(const qe_rt_options *o);
/* The process's options (all "" before any set); valid for the life of the process. */
const qe_rt_options *qe_rt_options_get(void);

#endif
