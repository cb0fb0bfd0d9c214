/*
 * ckpt_restore_read_int.h - a restore's reading side on one rank
 * (ckpt_restore_read.c, its one owner): which store on this host holds a row,
 * staging, the rank's own rows read and re-hashed, the load after the
 * agreement.  ckpt_restore.c plans, moves rows between ranks and decides.
 * Not public.
 */
#ifndef QE_CKPT_RESTORE_READ_INT_H
#define QE_CKPT_RESTORE_READ_INT_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt/protocol/ckpt_prefetch_int.h"
#include "ckpt/session/ckpt_int.h"
#include "runtime/exec/pstate.h"
#include "store/store.h"

/*
 * Where a rank's rows wait until every rank agreed: buf[i] for item i,
 * device staging of rank r (qe_pstate_stage_*) when on_dev[i], else host
 * memory: mapped (huge pages where the kernel allows) when mapped[i] > 0
 * (its length), else malloc'd.
 */
typedef struct staging {
	void **buf;
	unsigned char *on_dev;
	size_t *mapped;
	int n;
	qe_rank *r;
} staging;
/* 1 when device items are staged on the device: not on cpu; QE_CKPT_STAGING=device|host overrides. */
int ckpt__want_device_staging(qe_rank *r);
/* Staging for item i: on the device when dev allows and the item is a device array, else host memory. */
int ckpt__stage_alloc(staging *g, int i, const qe_pstate_item *it, int dev);
void ckpt__stage_free(staging *g);
/* Read rows[0..nrows) from this host's stores into their staging, re-hashed, kill point "read" after each. */
int ckpt__read_own(ckpt_session *s, qe_rank *r, own_row *rows, int nrows, const qe_pstate_item *items, staging *g,
		   int64_t step);
/* After agreement: every staged row into the rank's state. */
int ckpt__load_items(qe_rank *r, const qe_pstate_item *items, int n, const staging *g);
/* One row of t into host memory dst, re-hashed by the store; errors name the tensor, rank and host. */
int ckpt__read_row(ckpt_session *s, const cat_tensor *t, void *dst, int64_t step);
/*
 * The store on this host holding t's chunks: a memory-tier store first (no
 * disk read), then the one the row names, then any other (another rank's,
 * a replica's copy).
 */
int ckpt__store_of(ckpt_session *s, const cat_tensor *t, store **out);
/* A restore is about to read bytes of a row from st, one of the seen stores: counted by tier. */
void ckpt__count_read(ckpt_session *s, const store *st, uint64_t bytes);
/* The run-wide records checked against the catalog row and this run (stage -1 only). */
int ckpt__check_record(const qe_rank *r, const qe_pstate_item *it, const void *buf, int64_t step);

#endif
