/*
 * rundir_int.h - the inside of an open run (rundir.c, its one owner), read
 * directly by the queries (ckpt/query/) that take a ckpt_run.  Not public.
 */
#ifndef QE_CKPT_RUNDIR_INT_H
#define QE_CKPT_RUNDIR_INT_H

#include "catalog/catalog.h"
#include "ckpt/session/rundir.h"

struct ckpt_run {
	char *dir;
	char *run_id;
	char *config_json;
	char *created;
	cat *cat;
	ckpt_storeset *stores; /* every store of the run on this host (CKPT_RUN_STORE) */
	int flags;
};

#endif
