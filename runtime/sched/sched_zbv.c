/*
 * sched_zbv.c - the handcrafted ZB-V order of the Zero Bubble paper
 * (DESIGN.md 7; the same recipe as PyTorch's ScheduleZBVZeroBubble).
 *
 * Rank r holds chunk 0 = stage r and chunk 1 = stage 2P-1-r: activations run
 * down the ranks on chunk 0 and back up on chunk 1, so rank 0 holds both the
 * first stage and the loss.  The recipe is written for n = max(2P-1, M)
 * microbatches, the smallest count that fills the V; with fewer, the actions
 * of the missing microbatches are simply dropped.  Dropping is safe: every
 * dependency joins actions of the same microbatch, and removing actions (and
 * their messages, in pairs) only lets the remaining ones run earlier.
 *
 * DW is what fills the bubbles: each I (DI) pushes its microbatch on a
 * per-chunk FIFO and each W takes the oldest pending one, so in the cooldown
 * DWs run long after their DI and not in LIFO order.
 *
 * The recipe is used literally: the validator accepts it, split and full, for
 * every P in 1..8 and M in 1..20 (tests/sched/test_sched_build.c).  The one
 * thing it needs beyond "recv right before the consumer" is message order:
 * neighbours exchange activations and gradients interleaved, and one FIFO per
 * pair of ranks carries both, so some recvs are placed early
 * (qe_sched_add_comm).
 */
#include <stdlib.h>

#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

typedef struct zbv_state {
	qe_sched *s;
	int r, M;
	int f[2], b[2];   /* next forward / input-gradient microbatch per chunk */
	int *wq[2];       /* pending DW microbatches per chunk, oldest at head */
	int wh[2], wt[2]; /* FIFO head and tail */
	int cap;          /* entries of each FIFO */
	int rc;
} zbv_state;

static void emit(zbv_state *z, qe_action_kind k, int c, int mb)
{
	if (!z->rc && mb < z->M)
		z->rc = qe_sched_push(z->s, z->r, k, c, mb);
}

static void F(zbv_state *z, int c)
{
	emit(z, QE_ACT_F, c, z->f[c]++);
}

static void I(zbv_state *z, int c)
{
	int mb = z->b[c]++;
	if (z->wt[c] == z->cap) {
		if (!z->rc)
			z->rc = qe_fail(QE_ESCHEDULE, "zbv rank %d: more than %d DI on chunk %d", z->r, z->cap, c);
		return;
	}
	z->wq[c][z->wt[c]++] = mb;
	emit(z, QE_ACT_DI, c, mb);
}

static void W(zbv_state *z, int c)
{
	if (z->wh[c] == z->wt[c])
		return; /* nothing pending: the recipe never asks for that */
	emit(z, QE_ACT_DW, c, z->wq[c][z->wh[c]++]);
}

static int gen_rank(zbv_state *z, int P, int n)
{
	const int r = z->r;
	for (int i = 0; i < 2 * (P - r) - 1; i++) /* (1) fill chunk 0 down the V */
		F(z, 0);
	for (int i = 0; i < r; i++) { /* (2) first chunk-1 forwards arrive */
		F(z, 1);
		F(z, 0);
	}
	for (int i = 0; i < P - r; i++) { /* (3) first backwards of chunk 1 */
		F(z, 1);
		I(z, 1);
		W(z, 1);
	}
	while (z->f[1] < z->f[0] || z->f[0] < n) { /* (4) steady state */
		if (z->f[0] < n)
			F(z, 0);
		I(z, 0);
		W(z, 0);
		F(z, 1);
		I(z, 1);
		W(z, 1);
	}
	for (int i = 0; i < r; i++) { /* (5) cooldown: DI only, DW deferred */
		I(z, 0);
		I(z, 1);
	}
	for (int i = 0; i < P - r; i++) { /* (6) */
		I(z, 0);
		W(z, 0);
	}
	while (z->wh[1] < z->wt[1]) /* (7) drain deferred DWs */
		W(z, 1);
	while (z->wh[0] < z->wt[0])
		W(z, 0);
	if (!z->rc && (z->f[0] != n || z->f[1] != n || z->b[0] != n || z->b[1] != n))
		z->rc = qe_fail(QE_ESCHEDULE, "zbv rank %d: recipe produced f=%d/%d b=%d/%d, expected %d each", r,
				z->f[0], z->f[1], z->b[0], z->b[1], n);
	return z->rc;
}

int qe_sched_gen_zbv(qe_sched *s)
{
	const int P = s->P;
	const int n = 2 * P - 1 > s->M ? 2 * P - 1 : s->M;
	int rc = 0;
	if (s->V != 2 || s->placement != QE_PLACE_VSHAPE)
		return qe_fail(QE_EINVAL, "zbv needs the V-shape placement with 2 chunks per rank (got %d chunks)", s->V);
	/* Each chunk sees exactly n DIs (checked at the end of gen_rank). */
	int *q = malloc(2 * (size_t)n * sizeof(int));
	if (!q)
		return qe_fail(QE_ENOMEM, "zbv work queues for %d microbatches", n);
	for (int r = 0; r < P && !rc; r++) {
		zbv_state z = { .s = s, .r = r, .M = s->M, .cap = n };
		z.wq[0] = q;
		z.wq[1] = q + n;
		rc = gen_rank(&z, P, n);
	}
	free(q);
	return rc;
}
