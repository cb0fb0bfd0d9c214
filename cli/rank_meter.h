/*
 * rank_meter.h - how much memory a rank process holds, for `train --json`
 * and the benchmarks (qeffect bench step/scale).
 *
 * Two measures, because neither alone answers "does anything allocate while
 * graphs replay?":
 *  - allocator bytes: every ops->alloc / ops->free made through the rank's
 *    backend handle, counted by interposing on that handle's op table (the
 *    backend struct keeps its identity; only b->ops points at a copy whose
 *    alloc/free count and forward).  That is everything the runtime
 *    provisions: stage parameters, non-matrix gradients, FP8 meta, tape
 *    slots, weight cache, workspace (qe_stage_create), AdamW m and v, the
 *    gradient arena, copy-mode scratch and the data-parallel reduce buffer
 *    (qe_rank_create).  Requested sizes, before the backend's rounding.  Not
 *    counted: memory a backend takes for itself (cuda: per-stream cuBLASLt
 *    workspace and scratch, instantiated graphs, the context; cpu: stream
 *    scratch), host staging buffers, communicator buffers.
 *  - a memory probe: on a cuda backend the device's used bytes (the
 *    backend's mem_info op: total - free, which includes everything above and
 *    what the allocator count misses); on cpu the process's resident set
 *    (VmRSS), since there the backend's memory is the process's own.
 *
 * One backend per process is metered (ranks are processes).  Thread-safe.
 */
#ifndef CLI_RANK_METER_H
#define CLI_RANK_METER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/backend.h"

typedef struct cli_alloc_stats {
	size_t live;      /* bytes allocated and not yet freed through the metered table */
	size_t peak;      /* most live at any moment since attach */
	uint64_t allocs;  /* successful ops->alloc calls */
	uint64_t frees;   /* ops->free calls on pointers allocated since attach */
} cli_alloc_stats;

/*
 * Meter b: b->ops is replaced by a counting copy of the table until
 * cli_rank_meter_detach(b).  Returns 0, or QE_EINVAL when another backend is
 * already metered in this process.
 */
int cli_rank_meter_attach(qe_backend *b);
/* Put b's own op table back (before qe_backend_close).  No-op when b is not metered. */
void cli_rank_meter_detach(qe_backend *b);
void cli_rank_meter_get(cli_alloc_stats *out);

/*
 * The memory probe for backend b.  OUT: *used in bytes, *what names the
 * measure ("cuda_used" or "rss", a static string).  Returns 0, or -1 when the
 * probe is unavailable (the value is then 0).
 */
int cli_rank_meter_probe(qe_backend *b, size_t *used, const char **what);

#endif
