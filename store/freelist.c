/*
 * freelist.c - how much of a write LMDB will place in pages a gc freed
 * inside data.mdb rather than past its end (store.c's reserve_blocks leaves
 * those pages out of the disk blocks it reserves, so that after a gc on a
 * full disk a save fits in the freed pages; issue 35).
 */
#include "store/store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mdb_reader_list's lines: "pid thread txnid", txnid "-" for a slot no transaction holds. */
static int count_active_reader(const char *msg, void *ctx)
{
	int pid;
	size_t tid;
	char txn[32];
	if (sscanf(msg, "%d %zx %31s", &pid, &tid, txn) == 3 && strcmp(txn, "-") != 0)
		(*(int *)ctx)++;
	return 0;
}

static int cmp_pgno(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * Pages of the file a write of values up to max_value bytes each will take
 * from LMDB's free list rather than from past its end - a lower bound: LMDB
 * reuses the pages freed by earlier transactions (a gc's deletes) when no
 * reader holds a snapshot that still sees them, and an overflow value of v
 * pages needs v contiguous free pages, so a run of r free pages is counted as
 * r - v + 1 (first-fit leaves less than one value unused in each run).  Any
 * doubt (a reader in a transaction, a read error) gives 0: then the whole
 * write is reserved past the end, as before.  s->mu held, no transaction open.
 */
size_t store__reusable_pages(store *s, size_t max_value)
{
	int dead = 0, active = 0;
	mdb_reader_check(s->env, &dead);
	if (mdb_reader_list(s->env, count_active_reader, &active) < 0 || active)
		return 0;
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))
		return 0;
	size_t *pg = NULL, n = 0, cap = 0, reuse = 0;
	int ok = mdb_cursor_open(txn, 0 /* FREE_DBI */, &cur) == 0;
	MDB_val k, v;
	while (ok && mdb_cursor_get(cur, &k, &v, MDB_NEXT) == 0) {
		/* a record: its count, then that many page numbers */
		size_t cnt;
		if (v.mv_size < sizeof(size_t)) {
			ok = 0;
			break;
		}
		memcpy(&cnt, v.mv_data, sizeof(cnt));
		if (cnt > v.mv_size / sizeof(size_t) - 1) {
			ok = 0;
			break;
		}
		if (n + cnt > cap) {
			size_t nc = cap ? cap : 4096;
			while (nc < n + cnt)
				nc *= 2;
			size_t *p = realloc(pg, nc * sizeof(*pg));
			if (!p) {
				ok = 0;
				break;
			}
			pg = p;
			cap = nc;
		}
		memcpy(pg + n, (const size_t *)v.mv_data + 1, cnt * sizeof(size_t));
		n += cnt;
	}
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (ok && n) {
		size_t need = max_value > s->page_size ? (LMDB_PAGEHDR - 1 + max_value) / s->page_size + 1 : 1;
		qsort(pg, n, sizeof(*pg), cmp_pgno);
		for (size_t i = 0; i < n;) {
			size_t j = i + 1;
			while (j < n && pg[j] == pg[j - 1] + 1)
				j++;
			if (j - i >= need)
				reuse += j - i - need + 1;
			i = j;
		}
	}
	free(pg);
	return ok ? reuse : 0;
}
