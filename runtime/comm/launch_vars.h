/*
 * launch_vars.h - the launcher's variables, handed to the runtime in memory
 * (issue 36 item 2).
 *
 * An external launcher (torchrun, srun, mpirun) places a rank through its
 * environment: RANK, SLURM_PROCID, MASTER_ADDR, the job's secret, ... (the
 * list below, README's table says what each means).  cli reads them once at
 * start-up (cli/storage_options.c, the one place that reads variables) and
 * puts each here; dist_env.c, auth.c, rendezvous.c, launch.c, the cpu links
 * and the cuda backend look them up here and read no variable themselves.
 * A rank forked by --nproc gets its RANK, WORLD_SIZE, ... put here by the
 * launcher in the child's own memory, not in its environment.
 *
 * Unset and set-but-empty stay apart (a value "" is refused where a value
 * is parsed, naming the variable, as before).  One set per process: set
 * before the threads that read them start.  A program that puts nothing
 * (a test binary) sees every variable unset.
 */
#ifndef QE_LAUNCH_VARS_H
#define QE_LAUNCH_VARS_H

/* The names, qe_launch_nvars of them; a lookup of another name is a programming error. */
extern const char *const qe_launch_var_names[];
extern const int qe_launch_nvars;

/*
 * Set name to a copy of value (NULL: unset).  QE_EINVAL for a name not in
 * the list, QE_ENOMEM; the old value is kept on failure.
 */
int qe_launch_var_set(const char *name, const char *value);
/*
 * name's value, or NULL when unset (or not in the list: logged as an error).
 * Valid until the next set of that name.
 */
const char *qe_launch_var(const char *name);

#endif
