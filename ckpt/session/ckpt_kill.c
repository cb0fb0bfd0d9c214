/*
 * ckpt_kill.c - the crash-test kill hook (QE_CKPT_KILL=PHASE:RANK:COUNT,
 * documented in ckpt.h): the session parses the variable once, and the
 * protocol and the tiers call ckpt__maybe_kill at their named phases, where
 * the process dies by SIGKILL - no cleanup, as a crash.  A file of its own
 * so that the files calling it (ckpt/tiers/ckpt_replica.c, ckpt_memtier.c,
 * ...) do not depend on the session that owns their state.
 */
#include "ckpt/session/ckpt_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

int ckpt__kills_parse(ckpt_session *s, const char *spec)
{
	static const char *phases[] = { "gate", "begin", "chunk", "sync", "synced", "rows",
					"row", "commit", "committed", "read", "serve",
					"replsend", "replrecv", "replwrite", "replsync", "replsynced", "replack", "memgc" };
	char buf[512];
	if (strlen(spec) >= sizeof(buf))
		return qe_fail(QE_EINVAL, "QE_CKPT_KILL is too long");
	snprintf(buf, sizeof(buf), "%s", spec);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char phase[16], rank[16];
		int count, nch = 0;
		if (s->nkill == CKPT_MAX_KILLS)
			return qe_fail(QE_EINVAL, "QE_CKPT_KILL: more than %d kill points", CKPT_MAX_KILLS);
		if (sscanf(tok, "%15[a-z]:%15[-*0-9]:%d%n", phase, rank, &count, &nch) != 3 || tok[nch] || count < 1)
			return qe_fail(QE_EINVAL, "QE_CKPT_KILL: '%s' is not PHASE:RANK:COUNT (COUNT >= 1)", tok);
		int known = 0;
		for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
			known |= strcmp(phase, phases[i]) == 0;
		if (!known)
			return qe_fail(QE_EINVAL,
				       "QE_CKPT_KILL: unknown phase '%s' (gate, begin, chunk, sync, synced, rows, row, "
				       "commit, committed, replsend, replrecv, replwrite, replsync, replsynced, replack, read, serve)",
				       phase);
		ckpt_kill *k = &s->kills[s->nkill++];
		snprintf(k->phase, sizeof(k->phase), "%s", phase);
		k->rank = strcmp(rank, "*") == 0 ? -1 : atoi(rank);
		k->count = count;
		k->seen = 0;
	}
	return QE_OK;
}

void ckpt__maybe_kill(ckpt_session *s, const char *phase, int rank)
{
	for (int i = 0; i < s->nkill; i++) {
		ckpt_kill *k = &s->kills[i];
		if (strcmp(k->phase, phase) || (k->rank >= 0 && k->rank != rank))
			continue;
		if (++k->seen == k->count) {
			qe_log(QE_LOG_WARN, "checkpoint: QE_CKPT_KILL: rank %d dies at %s #%d", rank, phase, k->count);
			raise(SIGKILL);
		}
	}
}
