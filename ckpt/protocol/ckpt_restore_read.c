/*
 * ckpt_restore_read.c - a restore's reading and loading on one rank: which
 * store on this host holds a row (a memory-tier one first), where
 * rows wait until every rank agreed (staging, apart from the live state),
 * the rows a rank reads from its own disk streamed piece by piece by a
 * helper thread (device rows through the ring of page-locked buffers, host
 * rows straight into their staging), with a second one keeping reads in
 * flight ahead of it (ckpt_prefetch.c), while the training thread re-hashes
 * the previous piece and copies it to the device, and the load
 * once everyone agreed.  ckpt_restore.c plans, moves rows between ranks and
 * decides; see its header for the protocol.
 */
#include "ckpt/protocol/ckpt_restore_read_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/session/ckpt_options.h"
#include "runtime/core/fault.h"
#include "runtime/core/log.h"
#include "runtime/core/status.h"

/* ---- this host's stores: which one holds a row, reading a row whole ----------------- */

/* 1 in *all when seen store i holds every chunk of t. */
static int holds_all(ckpt_session *s, int i, const cat_tensor *t, store **st, int *all)
{
	int rc = ckpt__seen_open(s, i, st);
	*all = 1;
	for (size_t k = 0; !rc && *all && k < t->n_chunks; k++) {
		store_hash h;
		int present = 0;
		memcpy(h.b, t->chunks[k].hash, STORE_HASH_BYTES);
		rc = store_has_chunk(*st, &h, &present, NULL);
		*all = present;
	}
	return rc;
}

/*
 * A seen store holding every chunk of t: a memory-tier store first, then the
 * one the row names, else any other (chunks are content addressed and re-hashed on read, so a copy
 * pulled from S3 into this host's RUN/store serves as well).  OUT *out, or
 * QE_ENOTFOUND.
 */
int ckpt__store_of(ckpt_session *s, const cat_tensor *t, store **out)
{
	int all, rc;
	store *st;
	for (int i = 0; i < s->nseen; i++) {
		if (!ckpt_store_id_is_memory(s->seen[i].where.id.store_id))
			continue;
		if ((rc = holds_all(s, i, t, &st, &all)))
			return rc;
		if (all) {
			*out = st;
			return QE_OK;
		}
	}
	for (int i = 0; i < s->nseen; i++)
		if (strcmp(s->seen[i].where.id.store_id, t->store_id) == 0)
			return ckpt__seen_open(s, i, out);
	for (int i = 0; i < s->nseen; i++) {
		if ((rc = holds_all(s, i, t, &st, &all)))
			return rc;
		if (all) {
			*out = st;
			return QE_OK;
		}
	}
	return qe_fail(QE_ENOTFOUND, "rank %d on %s: no store here holds '%s' of stage %d (store %s)", s->rank, s->host,
		       t->name, t->stage, t->store_id[0] ? t->store_id : "RUN/store");
}

int ckpt__read_row(ckpt_session *s, const cat_tensor *t, void *dst, int64_t step)
{
	store *st;
	int rc = ckpt__store_of(s, t, &st);
	if (rc)
		return rc;
	store_chunk_list list = { t->n_chunks, qe_calloc(t->n_chunks + 1, sizeof(store_chunk)) };
	if (!list.chunks)
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	for (size_t k = 0; k < t->n_chunks; k++) {
		memcpy(list.chunks[k].hash.b, t->chunks[k].hash, STORE_HASH_BYTES);
		list.chunks[k].size = t->chunks[k].size;
	}
	ckpt__count_read(s, st, t->bytes);
	rc = store_get_tensor(st, &list, dst, (size_t)t->bytes);
	free(list.chunks);
	if (rc)
		return qe_fail_ctx(rc, "tensor '%s' of stage %d (%zu chunks) of checkpoint step %lld, rank %d on %s", t->name,
				   t->stage, t->n_chunks, (long long)step, s->rank, s->host);
	return QE_OK;
}

void ckpt__count_read(ckpt_session *s, const store *st, uint64_t bytes)
{
	for (int i = 0; i < s->nseen; i++)
		if (s->seen[i].st == st) {
			s->read_bytes[ckpt_store_id_is_memory(s->seen[i].where.id.store_id)] += bytes;
			return;
		}
	s->read_bytes[0] += bytes;
}

/*
 * Where a rank's rows wait until every rank agreed: staging apart from the
 * live state, so a failed restore leaves the rank as it was.  A device item
 * (not a run-wide record) is staged on the device when the backend has
 * device memory (not the cpu backend; QE_CKPT_STAGING=device|host forces
 * the choice, for tests): chunks are read into the ring's page-locked slots
 * and copied up while the next ones are read, and the load is one copy on
 * the device.  Everything else, and a device item whose staging allocation
 * fails, is staged in plain host memory, read there directly, and copied in
 * at the load.
 */

/* Host staging at least this large is mapped rather than malloc'd. */
#define HOST_MAP_MIN ((size_t)8 << 20)

int ckpt__want_device_staging(qe_rank *r)
{
	const char *e = ckpt_opt_text(ckpt_options_get()->staging);
	if (e && strcmp(e, "device") == 0)
		return 1;
	if (e && strcmp(e, "host") == 0)
		return 0;
	return qe_pstate_has_device(r);
}

int ckpt__stage_alloc(staging *g, int i, const qe_pstate_item *it, int dev)
{
	if (dev && it->stage >= 0 && it->bytes && ckpt__device_path(it)) {
		if (!qe_pstate_stage_alloc(g->r, it->bytes, &g->buf[i])) {
			g->on_dev[i] = 1;
			return QE_OK;
		}
		g->buf[i] = NULL;
		qe_log(QE_LOG_INFO, "restore: no device memory to stage '%s' of stage %d (%zu bytes): staged on the host (%s)",
		       it->name, it->stage, it->bytes, qe_last_error());
		qe_clear_error();
	}
	if (it->bytes >= HOST_MAP_MIN && !qe_fault_hit(QE_FAULT_ALLOC)) {
		/* A large buffer the store preads into: mapped with huge pages where the kernel
		 * allows them (MADV_HUGEPAGE), so its first touch costs 512 times fewer faults. */
		void *p = mmap(NULL, it->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED) {
			madvise(p, it->bytes, MADV_HUGEPAGE);
			g->buf[i] = p;
			g->mapped[i] = it->bytes;
			return QE_OK;
		}
	}
	if (!(g->buf[i] = qe_malloc(it->bytes ? it->bytes : 1)))
		return qe_fail(QE_ENOMEM, "restore: no host memory for '%s' of stage %d (%zu bytes)", it->name, it->stage,
			       it->bytes);
	return QE_OK;
}

void ckpt__stage_free(staging *g)
{
	for (int i = 0; g->buf && i < g->n; i++) {
		if (g->on_dev && g->on_dev[i])
			qe_pstate_stage_free(g->r, g->buf[i]);
		else if (g->mapped && g->mapped[i])
			munmap(g->buf[i], g->mapped[i]);
		else
			free(g->buf[i]);
	}
	free(g->buf);
	free(g->on_dev);
	free(g->mapped);
	memset(g, 0, sizeof(*g));
}


typedef struct read_job {
	ckpt_session *s;
	own_row *rows;
	int nrows;
	staging *g;
	int64_t step;
	store **stores; /* [nrows]: each row's store, opened before the threads start */
	ckpt_prefetch *ahead;
	ckpt_pipe pipe;
} read_job;

/* Chunks [k, end) of t: as many as fit `cap` bytes, at least one. */
static size_t piece_end(const cat_tensor *t, size_t k, size_t cap, size_t *len)
{
	size_t end = k, sum = 0;
	while (end < t->n_chunks && (end == k || sum + t->chunks[end].size <= cap))
		sum += t->chunks[end++].size;
	*len = sum;
	return end;
}

/* t's chunks as the store's list type, in buf (t->n_chunks entries). */
static void chunk_list(const cat_tensor *t, store_chunk *buf, store_chunk_list *l)
{
	for (size_t c = 0; c < t->n_chunks; c++) {
		memcpy(buf[c].hash.b, t->chunks[c].hash, STORE_HASH_BYTES);
		buf[c].size = t->chunks[c].size;
	}
	l->n = t->n_chunks;
	l->chunks = buf;
}

/*
 * The helper thread: each own row read by the store a piece at a time
 * (store_read_chunks, which reads the next chunk ahead), without
 * re-hashing: device rows into the ring's slots, host rows straight into
 * their staging at the piece's offset.  Every piece is re-hashed by the
 * training thread (check_piece) before it is trusted: the copy out of the
 * page cache is this thread's whole work, hashing would halve its pace,
 * and the training thread is otherwise idle while it waits for the next
 * piece.  Host rows use the ring's pipe for its order and its failure path
 * only; their bytes never pass through a slot.
 */
static void *restore_reader(void *arg)
{
	read_job *j = arg;
	ckpt_session *s = j->s;
	size_t host_cap = ckpt__piece_bytes(s);
	store_chunk *cur = NULL;
	int rc = QE_OK;
	for (int r = 0; r < j->nrows && !rc; r++) {
		const cat_tensor *t = j->rows[r].t;
		int i = j->rows[r].item, slot, dev = j->g->on_dev[i];
		size_t cap = dev ? s->ring.slot_bytes : host_cap;
		ckpt_piece *m;
		store *st = j->stores[r];
		free(cur);
		if (!(cur = qe_calloc(t->n_chunks + 1, sizeof(*cur)))) {
			rc = qe_fail(QE_ENOMEM, "restore: out of memory");
			break;
		}
		store_chunk_list l;
		chunk_list(t, cur, &l);
		size_t off = 0, len, end;
		if (t->n_chunks == 0) {
			/* an empty row still completes its item (its record is checked at the last piece) */
			if (!(m = ckpt__pipe_fill_wait(&j->pipe, &slot)))
				goto out;
			*m = (ckpt_piece){ .item = r, .last = 1 };
			ckpt__pipe_fill_post(&j->pipe);
			continue;
		}
		for (size_t k = 0; k < t->n_chunks && !rc; k = end) {
			end = piece_end(t, k, cap, &len);
			if (!(m = ckpt__pipe_fill_wait(&j->pipe, &slot)))
				goto out;
			void *dst = dev ? s->ring.slot[slot] : (unsigned char *)j->g->buf[i] + off;
			if ((rc = store_read_chunks(st, &l, k, end - k, dst, len))) {
				rc = qe_fail_ctx(rc, "tensor '%s' of stage %d (%zu chunks) of checkpoint step %lld, rank %d on %s",
						 t->name, t->stage, t->n_chunks, (long long)j->step, s->rank, s->host);
				break;
			}
			m->item = r;
			m->off = off;
			m->len = len;
			m->last = end == t->n_chunks;
			m->in_slot = dev;
			m->chunk = k;
			m->nchunks = end - k;
			ckpt__pipe_fill_post(&j->pipe);
			ckpt__prefetch_advance(j->ahead, len);
			off += len;
		}
	}
	if (rc)
		ckpt__pipe_fail(&j->pipe, rc);
	else
		ckpt__pipe_close(&j->pipe);
out:
	free(cur);
	return NULL;
}

/* Re-hash the chunks of piece m of tensor t from store st, held at buf: what is checked is what is loaded. */
static int check_piece(ckpt_session *s, store *st, const cat_tensor *t, const ckpt_piece *m, const void *buf,
		       int64_t step)
{
	/* the whole tensor's list, so that a message numbers the chunk within
	 * the tensor, as a read of all of it would */
	store_chunk *c = qe_calloc(t->n_chunks + 1, sizeof(*c));
	if (!c)
		return qe_fail(QE_ENOMEM, "restore: out of memory");
	store_chunk_list l;
	chunk_list(t, c, &l);
	int rc = store_check_chunks(st, &l, m->chunk, m->nchunks, buf, m->len);
	free(c);
	if (rc)
		rc = qe_fail_ctx(rc, "tensor '%s' of stage %d (%zu chunks) of checkpoint step %lld, rank %d on %s", t->name,
				 t->stage, t->n_chunks, (long long)step, s->rank, s->host);
	return rc;
}

/* The training thread's side of reading its own rows: each piece re-hashed, a slot's copied into its device staging. */
int ckpt__read_own(ckpt_session *s, qe_rank *r, own_row *rows, int nrows, const qe_pstate_item *items, staging *g,
		    int64_t step)
{
	qe_backend *b = qe_pstate_backend(r);
	int me = qe_pstate_rank(r), rc = QE_OK;
	size_t biggest = 0;
	for (int k = 0; k < nrows; k++)
		if (g->on_dev[rows[k].item])
			for (size_t c = 0; c < rows[k].t->n_chunks; c++)
				if (rows[k].t->chunks[c].size > biggest)
					biggest = (size_t)rows[k].t->chunks[c].size;
	if (biggest) {
		size_t piece = ckpt__piece_bytes(s);
		if ((rc = ckpt__ring_get(s, b, piece > biggest ? piece : biggest)))
			return rc;
	}
	/* Every row's store opened here, on this thread, so that neither helper thread opens one. */
	store **stores = qe_calloc((size_t)nrows + 1, sizeof(*stores));
	if (!stores)
		return qe_fail(QE_ENOMEM, "restore: rank %d: out of memory", me);
	for (int k = 0; k < nrows && !rc; k++)
		if (!(rc = ckpt__store_of(s, rows[k].t, &stores[k])))
			ckpt__count_read(s, stores[k], rows[k].t->bytes);
	if (rc) {
		free(stores);
		return rc;
	}
	read_job j = { .s = s, .rows = rows, .nrows = nrows, .g = g, .step = step, .stores = stores };
	ckpt__pipe_init(&j.pipe);
	j.ahead = ckpt__prefetch_start(rows, stores, nrows);
	pthread_t tid;
	if (pthread_create(&tid, NULL, restore_reader, &j)) {
		ckpt__prefetch_stop(j.ahead);
		ckpt__pipe_destroy(&j.pipe);
		free(stores);
		return qe_fail(QE_ENOMEM, "restore: rank %d could not start its reader thread", me);
	}
	ckpt_piece *m;
	int slot;
	while ((m = ckpt__pipe_drain_wait(&j.pipe, &slot))) {
		int i = rows[m->item].item;
		const qe_pstate_item *it = &items[i];
		if (m->nchunks)
			rc = check_piece(s, stores[m->item], rows[m->item].t, m,
					 m->in_slot ? s->ring.slot[slot] : (unsigned char *)g->buf[i] + m->off, step);
		if (!rc && m->in_slot && m->len &&
		    (rc = qe_pstate_stage_put(r, g->buf[i], m->off, s->ring.slot[slot], m->len)))
			rc = qe_fail_ctx(rc, "restore: copying '%s' of stage %d to its device staging", it->name, it->stage);
		if (!rc && m->last && !g->on_dev[i])
			rc = ckpt__check_record(r, it, g->buf[i], step);
		if (rc) {
			ckpt__pipe_fail(&j.pipe, rc);
			break;
		}
		if (m->last)
			ckpt__maybe_kill(s, "read", me);
		ckpt__pipe_drain_done(&j.pipe);
	}
	pthread_join(tid, NULL);
	ckpt__prefetch_stop(j.ahead);
	free(stores);
	int prc = ckpt__pipe_rc(&j.pipe);
	ckpt__pipe_destroy(&j.pipe);
	return rc ? rc : prc;
}

/* Consistency of the run-wide records with the catalog row and this run. */
int ckpt__check_record(const qe_rank *r, const qe_pstate_item *it, const void *buf, int64_t step)
{
	int64_t v[2];
	if (it->stage >= 0)
		return QE_OK;
	if (strcmp(it->name, "steps_done") == 0 && it->bytes == sizeof(int64_t)) {
		memcpy(v, buf, sizeof(int64_t));
		if (v[0] != step)
			return qe_fail(QE_ECORRUPT, "record 'run/steps_done' says %lld steps, the catalog says step %lld",
				       (long long)v[0], (long long)step);
	}
	if (strcmp(it->name, "rng") == 0 && it->bytes == 2 * sizeof(uint64_t)) {
		memcpy(v, buf, sizeof(v));
		if ((uint64_t)v[0] != qe_pstate_seed(r))
			return qe_fail(QE_EMISMATCH, "the checkpoint's data/initialization seed is %llu, this run's is %llu",
				       (unsigned long long)v[0], (unsigned long long)qe_pstate_seed(r));
	}
	return QE_OK;
}

/*
 * The load of host items (every item on the cpu backend) is a memcpy from
 * staging; one thread copies at a few GB/s, which at a rank's whole state is
 * a tenth of the cold read.  So they are copied in pieces by up to
 * QE_CKPT_LOAD_THREADS threads (default 4, at most the online cpus), the
 * calling thread among them, in pieces of 16 MiB (QE_CKPT_LOAD_PIECE_BYTES,
 * for tests).  Device items keep their copy on the calling thread (the
 * backend's stream and fault hook).
 */
#define LOAD_PIECE ((size_t)16 << 20)
#define LOAD_THREADS_MAX 16

typedef struct load_piece {
	int item;
	size_t off, len;
} load_piece;

typedef struct host_load {
	qe_rank *r;
	const qe_pstate_item *items;
	const staging *g;
	load_piece *pc;
	int npc, next, rc, bad; /* bad: the item of the first failed piece */
	pthread_mutex_t mu;
} host_load;

static void *host_load_worker(void *arg)
{
	host_load *h = arg;
	for (;;) {
		pthread_mutex_lock(&h->mu);
		int k = h->rc ? h->npc : h->next++;
		pthread_mutex_unlock(&h->mu);
		if (k >= h->npc)
			return NULL;
		const load_piece *p = &h->pc[k];
		const qe_pstate_item *it = &h->items[p->item];
		int rc = qe_pstate_write_at(h->r, it, p->off, p->len, (const unsigned char *)h->g->buf[p->item] + p->off);
		if (rc) {
			pthread_mutex_lock(&h->mu);
			if (!h->rc) {
				h->rc = rc;
				h->bad = p->item;
			}
			pthread_mutex_unlock(&h->mu);
		}
	}
}

static int load_threads(int npc)
{
	int t = 4;
	const char *e = ckpt_opt_text(ckpt_options_get()->load_threads);
	if (e && *e)
		t = atoi(e);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus > 0 && t > cpus)
		t = (int)cpus;
	if (t > LOAD_THREADS_MAX)
		t = LOAD_THREADS_MAX;
	if (t > npc)
		t = npc;
	return t < 1 ? 1 : t;
}

static size_t load_piece_bytes(void)
{
	const char *e = ckpt_opt_text(ckpt_options_get()->load_piece_bytes);
	long long v = e && *e ? atoll(e) : 0;
	return v > 0 ? (size_t)v : LOAD_PIECE;
}

static int load_host_items(qe_rank *r, const qe_pstate_item *items, int n, const staging *g)
{
	size_t piece = load_piece_bytes();
	int npc = 0;
	for (int i = 0; i < n; i++)
		if (items[i].bytes && !items[i].on_device && !g->on_dev[i])
			npc += (int)((items[i].bytes + piece - 1) / piece);
	if (!npc)
		return QE_OK;
	host_load h = { .r = r, .items = items, .g = g, .pc = malloc((size_t)npc * sizeof(load_piece)) };
	if (!h.pc)
		return qe_fail(QE_ENOMEM, "restore: out of memory planning the load of %d pieces", npc);
	for (int i = 0; i < n; i++) {
		if (!items[i].bytes || items[i].on_device || g->on_dev[i])
			continue;
		for (size_t off = 0; off < items[i].bytes; off += piece) {
			size_t len = items[i].bytes - off < piece ? items[i].bytes - off : piece;
			h.pc[h.npc++] = (load_piece){ .item = i, .off = off, .len = len };
		}
	}
	pthread_mutex_init(&h.mu, NULL);
	pthread_t tid[LOAD_THREADS_MAX];
	int nt = 0, want = load_threads(npc);
	while (nt < want - 1 && !pthread_create(&tid[nt], NULL, host_load_worker, &h))
		nt++; /* a thread that cannot start leaves its share to the others */
	host_load_worker(&h);
	for (int t = 0; t < nt; t++)
		pthread_join(tid[t], NULL);
	pthread_mutex_destroy(&h.mu);
	int rc = h.rc;
	free(h.pc);

	if (rc)
		return qe_fail_ctx(rc, "restore: rank %d loading '%s' of stage %d", qe_pstate_rank(r), items[h.bad].name,
				   items[h.bad].stage);
	return QE_OK;
}

/* Everyone agreed: copy the staged rows into the rank's state. */
int ckpt__load_items(qe_rank *r, const qe_pstate_item *items, int n, const staging *g)
{
	for (int i = 0; i < n; i++) {
		const qe_pstate_item *it = &items[i];
		if (!it->bytes || (!it->on_device && !g->on_dev[i]))
			continue; /* host items: load_host_items below */
		int rc = g->on_dev[i] ? qe_pstate_stage_load(r, it, g->buf[i]) : qe_pstate_write(r, it, g->buf[i]);
		if (rc)
			return qe_fail_ctx(rc, "restore: copying '%s' of stage %d to the device", it->name, it->stage);
	}
	return load_host_items(r, items, n, g);
}
