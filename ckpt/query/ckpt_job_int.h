/*
 * ckpt_job_int.h - the part every job over the stores shares (ckpt_job.c):
 * rank 0 sends tasks, the ranks answer, in rounds over the comm's service
 * lane; the first round is the census of the stores each rank sees.  Tasks
 * and answers are JSON objects (jansson).  Not public.
 */
#ifndef QE_CKPT_JOB_INT_H
#define QE_CKPT_JOB_INT_H

#include <jansson.h>

#include "ckpt/query/ckpt_job.h"
#include "store/store.h"

/* Service-lane tags of the jobs (apart from ckpt_int.h's). */
enum { CKJ_SVC_TASK = 0x58430010u, CKJ_SVC_ANSWER = 0x58430011u };

typedef struct ckj ckj;
/*
 * One rank's part of a round: answer task (a new object; {"rc": code, "msg":
 * text} when it failed).  Called on every rank, rank 0 included.
 */
typedef json_t *(*ckj_serve_fn)(ckj *j, json_t *task, void *ctx);

struct ckj {
	qe_comm *comm; /* NULL: a job of one */
	int rank, world;
	const char *run_dir;
	char run_id[64];
	char host[CKPT_HOST_MAX];
	/* rank 0, after the census: every rank's host, and every store the job sees with its rank */
	char (*hosts)[CKPT_HOST_MAX];
	ckpt_job_report rep;
};

int ckj_open(ckj *j, qe_comm *comm, const char *run_dir);
void ckj_close(ckj *j);

/*
 * Ranks other than 0: answer rank 0's tasks with fn until it says done or
 * abort (then 0: rank 0 reports); QE_ECOMM naming this rank when rank 0 is lost.
 */
int ckj_serve(ckj *j, ckj_serve_fn fn, void *ctx);

/*
 * Rank 0: the census.  rc0 != 0: rank 0 already failed (its message is
 * current): the other ranks are told to stop and rc0 comes back.  Else every
 * rank reports its host and the stores of run_id on its disk, and each store
 * goes to one rank that sees it (its owner when it does, else the lowest):
 * j->rep.  Stores of the catalog (known, may be NULL) that no rank sees are
 * added with rank -1.
 */
int ckj_census(ckj *j, const char *run_id, int rc0, const cat_store_rows *known);

/*
 * Rank 0: send tasks[q] to every rank q (tasks[0] is served here, meanwhile
 * the others work), collect answers[q] (new references).  A rank that failed
 * or did not answer makes the round fail with every such rank's message,
 * each naming rank and host; answers are filled as far as they came.
 */
int ckj_round(ckj *j, json_t **tasks, json_t **answers, ckj_serve_fn fn, void *ctx);

/* Rank 0: end the job: done (rc == 0) or abort; the other ranks return from ckj_serve. */
void ckj_finish(ckj *j, int rc);

/* "rank R on host 'H'" of rank q, for messages. */
const char *ckj_who(const ckj *j, int q, char *buf, size_t len);

/* The store of the census with store_id (and, for the shared store "", host), or NULL. */
ckpt_job_store *ckj_store_find(ckj *j, const char *store_id, const char *host);

/* An answer that failed: {"rc": rc, "msg": the current error message}. */
json_t *ckj_failed(int rc);
/* The stores task lists for this rank: every entry {"id", "path"} of task["stores"]. */
json_t *ckj_task_stores(json_t *task);
/* Take the lock of a rank store (a store folder with a lock file; the shared store has none). */
int ckj_store_lock(const char *path, const char *store_id, const char *what, ckpt_lock **out);

/* Chunks as JSON: [[hex, size], ...]. */
int ckj_chunk_add(json_t *arr, const store_hash *h, uint64_t size);
int ckj_chunk_get(json_t *arr, size_t i, store_hash *h, uint64_t *size);
uint64_t ckj_u64(json_t *o, const char *key);

#endif
