/*
 * sched_interleaved.c - Megatron's interleaved 1F1B order (DESIGN.md 7).
 *
 * Chunk c of rank r is stage c*P + r.  Microbatches go in groups of P: a rank
 * runs the group through chunk 0, then chunk 1, ..., and its backwards walk the
 * chunks in reverse with the same grouping, first in, first out per chunk.
 * The warmup is deep enough that the first backward's gradient has had time to
 * come back around the pipeline; then one forward and one backward alternate;
 * the cooldown drains the remaining backwards.  V = 1 is plain 1F1B.
 * Every backward here is DI immediately followed by its DW; the full-backward
 * reference is derived from this order by qe_sched_build.
 */
#include "runtime/core/status.h"
#include "runtime/sched/sched_int.h"

/* The chunk and microbatch of a rank's k-th forward (backward when bwd). */
static void kth(const qe_sched *s, long k, int bwd, int *chunk, int *mb)
{
	long group = (long)s->P * s->V;
	int c = (int)((k % group) / s->P);
	*chunk = bwd ? s->V - 1 - c : c;
	*mb = (int)((k / group) * s->P + k % s->P);
}

static int push_fwd(qe_sched *s, int r, long k)
{
	int c, mb;
	kth(s, k, 0, &c, &mb);
	return qe_sched_push(s, r, QE_ACT_F, c, mb);
}

static int push_bwd(qe_sched *s, int r, long k)
{
	int c, mb;
	kth(s, k, 1, &c, &mb);
	int rc = qe_sched_push(s, r, QE_ACT_DI, c, mb);
	return rc ? rc : qe_sched_push(s, r, QE_ACT_DW, c, mb);
}

int qe_sched_gen_interleaved(qe_sched *s)
{
	const int P = s->P, V = s->V, M = s->M;
	const long total = (long)M * V;
	int rc = 0;
	if (V > 1 && M % P != 0)
		return qe_fail(QE_EINVAL, "interleaved: %d microbatches is not a multiple of %d ranks", M, P);
	for (int r = 0; r < P && !rc; r++) {
		long warm;
		if (V == 1)
			warm = P - r - 1 < M ? P - r - 1 : M;
		else
			warm = 2L * (P - r - 1) + (long)(V - 1) * P;
		if (warm > total)
			warm = total;
		for (long k = 0; k < warm && !rc; k++)
			rc = push_fwd(s, r, k);
		for (long k = 0; k < total - warm && !rc; k++) {
			rc = push_fwd(s, r, k + warm);
			if (!rc)
				rc = push_bwd(s, r, k);
		}
		for (long k = total - warm; k < total && !rc; k++)
			rc = push_bwd(s, r, k);
	}
	return rc;
}
