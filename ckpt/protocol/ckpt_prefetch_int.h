/*
 * ckpt_prefetch_int.h - the restore's read-ahead hints (ckpt_prefetch.c, its
 * one owner), and the row type the restore's reader (ckpt_restore_read.c)
 * walks and hands to them.  Not public.
 */
#ifndef QE_CKPT_PREFETCH_INT_H
#define QE_CKPT_PREFETCH_INT_H

#include <stdint.h>

#include "catalog/catalog.h"
#include "store/store.h"

/* A row and the item it fills. */
typedef struct own_row {
	const cat_tensor *t;
	int item;
} own_row;
/* The restore's read-ahead hints (ckpt_prefetch.c): a thread asking the kernel to read
 * rows' chunks (each in stores[row], open) at most ckpt__read_ahead_bytes() beyond what
 * the reader reported consumed.  NULL when off or it cannot start: only a hint. */
typedef struct ckpt_prefetch ckpt_prefetch;
uint64_t ckpt__read_ahead_bytes(void);
ckpt_prefetch *ckpt__prefetch_start(const own_row *rows, store *const *stores, int nrows);
void ckpt__prefetch_advance(ckpt_prefetch *p, uint64_t bytes);
void ckpt__prefetch_stop(ckpt_prefetch *p);

#endif
