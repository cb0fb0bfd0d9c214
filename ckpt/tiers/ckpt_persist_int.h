/*
 * ckpt_persist_int.h - what ckpt_persist.c (when and what to push, the
 * collective points, the final wait) and ckpt_persist_push.c (the push
 * itself, on every rank's background thread) share: the push's state.
 */
#ifndef QE_CKPT_PERSIST_INT_H
#define QE_CKPT_PERSIST_INT_H

#include <pthread.h>
#include <stdint.h>

#include "ckpt/session/ckpt_int.h"
#include "ckpt/tiers/ckpt_persist.h"
#include "runtime/exec/pstate.h"

struct ckpt_persist {
	ckpt_session *s;
	char url[1024];
	char endpoint[512];
	int has_endpoint;
	int64_t every;
	int keep;
	uint64_t grace_s;
	int64_t min_step;
	char cat_path[CKPT_PATH_MAX];
	int rank, world;
	qe_comm *comm;
	/* the push in flight */
	pthread_t th;
	int running;
	pthread_mutex_t mu;
	int finished;
	int64_t id, step;
	ckpt_persist_progress prog;
	uint64_t own_bytes, own_chunks; /* this rank's uploads so far (under mu) */
	uint64_t heard_bytes;           /* rank 0: the other ranks' bytes, as their progress said (under mu) */
	double last_log;                /* rank 0's thread: when it last logged the progress */
	/* its outcome (rank 0 has the full one) */
	int reported;  /* the outcome was handed out in an event */
	int rc;
	char msg[1024];
	char done_url[1400];
	uint64_t chunks, uploaded, bytes_up;
	int remote_dropped;
	double t0, ms;
	cat *bg_cat; /* rank 0's thread's own catalog handle */
	/* rank 0: the step whose last push failed, and the steps given up after two failures */
	int64_t failed_step;
	int64_t pushed_upto; /* the newest step pushed by this job: older ones are never pushed again */
	int64_t given_up[64];
	int ngiven_up;
};

/* The push of checkpoint p->id on this rank (pthread entry; rank 0 also writes the manifest): sets
 * p->rc, p->msg, p->ms and p->finished under p->mu when done. */
void *ckpt__persist_thread(void *arg);
/* A quarter of the comm's time-out: the longest a waiting rank goes without word from a live one. */
int ckpt__persist_beat_ms(const ckpt_persist *p);

/* The remote of p opened with its options, then checked with one request (store_remote_check). */
int ckpt__persist_remote(ckpt_persist *p, store_remote **rem);

#endif
