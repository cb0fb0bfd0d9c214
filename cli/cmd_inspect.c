/*
 * cmd_inspect.c - `qeffect inspect --run-dir DIR`: what one checkpoint holds.
 *
 * Configuration and recipe (from the run's stored config), epochs (e_W, steps
 * done, AdamW steps per stage), the FP8 scaling state per stage, linear and
 * role (amax history, scale, scale_inv, decoded from each stage's fp8_meta
 * tensor), the tensor table, and with --tensor a value summary.  Everything
 * shown is read back through the store, so every chunk read is re-hashed: a
 * damaged tensor is an error naming it, not silently wrong numbers.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/inspect_named.h"
#include "ckpt/query/ckpt_query.h"
#include "ckpt/session/rundir.h"
#include "cli/run_args.h"
#include "runtime/core/status.h"
#include "runtime/job/config.h"

#define NO_STAGE (-1000)

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect inspect --run-dir DIR [--step S] [--stage N] [--tensor NAME] [--names] [--json]\n\n"
		   "Show one checkpoint (default: the latest committed; --step S picks the committed one at\n"
		   "S, or the newest attempt at S when none there is committed):\n"
		   "  configuration and FP8 recipe of the run; epochs (e_W, steps done, AdamW steps);\n"
		   "  per stage, linear and FP8 role: amax history, scale and scale_inv;\n"
		   "  the tensor table (stage, name, kind, dtype, shape, bytes, chunks, first chunk hash);\n"
		   "  runtime-state bytes against total bytes;\n"
		   "  the named tensors: every parameter by its GPT-2 name (wte.weight, h.3.attn.c_attn.weight,\n"
		   "  ..., ln_f.weight, lm_head.weight) with its shape and where it is stored (--json:\n"
		   "  \"named\"; a tied model's lm_head.weight and its moments are marked \"tied: wte's copy\",\n"
		   "  --json \"tied\": true: training keeps them byte-identical to wte's, and export writes\n"
		   "  them once, as wte); --names also lists the AdamW moments (NAME.exp_avg, NAME.exp_avg_sq)\n"
		   "  and the FP8 meta (M.fp8.ROLE.amax_history, .scale, .scale_inv for each linear M and\n"
		   "  ROLE input, weight, grad_output).\n"
		   "--stage N limits the FP8 and tensor tables to global stage N (-1: run-wide records);\n"
		   "a stage the checkpoint does not have is bad usage.\n"
		   "--tensor NAME adds a value summary (count, min, max, mean, rms, non-finite, first\n"
		   "values) of that tensor, of --stage N or of every stage that has it.  A GPT-2 name\n"
		   "(--tensor h.0.attn.c_attn.weight) gives that tensor under any pipeline mapping: its shape\n"
		   "(a linear's weight as [out, in]; wte and lm_head without the vocabulary's padding rows),\n"
		   "the xxh3-128 and sha256 of its bytes (little-endian f32, row-major) and the summary.\n"
		   "Every tensor shown whose store is on this host is read through the store and re-hashed\n"
		   "(a damaged or missing chunk is an error naming the tensor); the others are listed.\n"
		   "Exit status: 0 shown, 1 missing or damaged checkpoint or run, 2 bad usage.\n");
}

static json_t *jreal(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* A small run-wide or per-stage record as 64-bit integers; -1 values when absent. */
/* Whether the store holding t is on this host (a multi-host run keeps each rank's on its own). */
static int on_this_host(ckpt_run *r, const cat_tensor *t)
{
	return ckpt_storeset_find(ckpt_run_stores(r), t->store_id) >= 0;
}

static int read_i64(ckpt_run *r, const cat_tensor *t, int64_t *v, int n)
{
	for (int i = 0; i < n; i++)
		v[i] = -1;
	if (!t)
		return QE_OK;
	void *d;
	int rc = ckpt_q_read(r, t, &d);
	if (rc)
		return rc;
	if (t->bytes == 1)
		v[0] = *(unsigned char *)d;
	for (int i = 0; i < n && (uint64_t)(i + 1) * 8 <= t->bytes; i++)
		memcpy(&v[i], (char *)d + i * 8, 8);
	free(d);
	return QE_OK;
}

static void print_config(const char *json)
{
	qe_train_config c;
	if (qe_train_config_from_json(json, &c)) {
		printf("configuration: %s\n", json);
		return;
	}
	printf("configuration: model %s (hidden %d, ffn %d, heads %d, layers %d, seq %d, vocab %d padded to %d, "
	       "batch %d)\n",
	       c.model.preset, c.model.hidden, c.model.ffn, c.model.heads, c.model.layers, c.model.seq, c.model.vocab,
	       qe_model_vocab_padded(&c.model), c.model.batch);
	printf("  parallel: pp %d, dp %d, chunks %d, micro %d; schedule %s/%s, exec %s, grad %s, backend %s, seed %llu\n",
	       c.pp, c.dp, c.chunks, c.micro, qe_sched_kind_name(c.schedule), qe_sched_backward_name(c.backward),
	       qe_exec_name(c.exec), qe_grad_name(c.grad), c.backend, (unsigned long long)c.seed);
	printf("  optimizer: AdamW lr %g, betas %g %g, eps %g, weight decay %g\n", c.optim.lr, c.optim.beta1,
	       c.optim.beta2, c.optim.eps, c.optim.weight_decay);
	if (c.init_from[0])
		printf("  weights from: %s (%s, xxh3-128 %s)\n", c.init_from, c.init_format, c.init_hash);
	else
		printf("  weights from: random initialization (seed %llu)\n", (unsigned long long)c.seed);
	printf("recipe: precision %s, format %s, margin %d, amax history %d, amax algo %s%s\n",
	       qe_prec_mode_name(c.prec.mode),
	       qe_fp8_format_name(c.prec.recipe.format), c.prec.recipe.margin, c.prec.recipe.history_len,
	       qe_amax_algo_name(c.prec.recipe.algo), c.prec.head_current ? ", head with current scaling" : "");
}

/*
 * The amax history newest first.  After a role update (every checkpoint is
 * taken after one) the newest recorded amax is at index L-1, older ones
 * below it down to index 1, and index 0 is the slot the next step fills
 * (fp8_recipe.c's roll): so "next" shows [0], then [L-1], [L-2], ...
 */
static void fmt_history(const ckpt_fp8_role *f, char *buf, size_t len)
{
	int L = f->history_len;
	size_t o = 0;
	buf[0] = 0;
	if (L < 1)
		return;
	o += (size_t)snprintf(buf, len, "next %.6g;", f->history[0]);
	int show = L - 1 <= 8 ? L - 1 : 8;
	for (int i = 0; i < show && o + 20 < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " %.6g", f->history[L - 1 - i]);
	if (show < L - 1 && o < len)
		snprintf(buf + o, len - o, " ... (%d values)", L);
}

int cli_inspect_main(int argc, char **argv)
{
	const char *dir = NULL, *tname = NULL;
	long step = -1, stage = NO_STAGE;
	int json = 0, all_names = 0, rc;
	const cli_flag extra[] = {
		{ "step", 0, CLI_FLAG_LONG, &step, .lo = 0, .hi = LLONG_MAX },
		{ "stage", 0, CLI_FLAG_LONG, &stage, .lo = -1, .hi = LLONG_MAX },
		{ "tensor", 0, CLI_FLAG_STRING, .dst = &tname },
		{ "names", 0, CLI_FLAG_BOOL, .dst = &all_names },
		{ 0 },
	};
	if ((rc = cli_run_args_parse("inspect", argc, argv, extra, &dir, &json)) < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;

	ckpt_run *r = NULL;
	cat_ckpt ck = { 0 };
	cat_tensor_rows tr = { 0 };
	cli_named nm = { 0 };
	int have_names = 0;
	char names_why[512] = "";
	json_t *o = NULL, *jfp8 = NULL, *jt = NULL, *jsum = NULL;
	int status = 1;
	char what[256];
	snprintf(what, sizeof(what), "%s", dir);
	if ((rc = ckpt_run_open(dir, CKPT_RUN_STORE, &r)) || (rc = ckpt_q_select(r, step, &ck)))
		goto fail;
	snprintf(what, sizeof(what), "%s: checkpoint step %lld", dir, (long long)ck.step);
	if ((rc = cat_ckpt_tensors(ckpt_run_catalog(r), ck.id, &tr)))
		goto fail;
	if (stage != NO_STAGE) {
		int found = 0, top = -1;
		for (size_t i = 0; i < tr.n; i++) {
			found |= ckpt_q_stage_of(&tr.rows[i]) == stage;
			if (ckpt_q_stage_of(&tr.rows[i]) > top)
				top = ckpt_q_stage_of(&tr.rows[i]);
		}
		if (!found) {
			fprintf(stderr, "qeffect inspect: --stage %ld: %s has global stages 0..%d (-1: run-wide records)\n",
				stage, what, top);
			status = 2;
			goto out;
		}
	}

	/* epochs and records */
	int64_t e_w[1], steps_done[1], rng[2], cache_valid[1];
	if ((rc = read_i64(r, ckpt_q_find(&tr, -1, "e_W"), e_w, 1)) ||
	    (rc = read_i64(r, ckpt_q_find(&tr, -1, "steps_done"), steps_done, 1)) ||
	    (rc = read_i64(r, ckpt_q_find(&tr, -1, "rng"), rng, 2)) ||
	    (rc = read_i64(r, ckpt_q_find(&tr, -1, "cache_valid_on_restore"), cache_valid, 1)))
		goto fail;
	uint64_t total = 0, runtime = 0, params = 0, moments = 0, nchunks = 0;
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		total += t->bytes;
		nchunks += t->n_chunks;
		if (ckpt_q_is_runtime_state(t))
			runtime += t->bytes;
		else if (strcmp(t->kind, "param") == 0)
			params += t->bytes;
		else
			moments += t->bytes;
	}

	if (json) {
		o = json_object();
		jfp8 = json_array();
		jt = json_array();
		jsum = json_array();
		/* o owns the arrays from here on; they are filled below */
		json_object_set_new(o, "fp8", jfp8);
		json_object_set_new(o, "tensors", jt);
		json_object_set_new(o, "summaries", jsum);
		json_t *cfg = json_loads(ckpt_run_config_json(r), 0, NULL);
		json_object_set_new(o, "run_dir", json_string(dir));
		json_object_set_new(o, "run_id", json_string(ckpt_run_id(r)));
		json_object_set_new(
			o, "checkpoint",
			json_pack("{s:I,s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "id", (json_int_t)ck.id, "step",
				  (json_int_t)ck.step, "e_W", (json_int_t)ck.e_w, "status", cat_status_name(ck.status),
				  "created", ck.created, "committed_at", ck.committed_at, "topology", ck.topology,
				  "schedule", ck.schedule, "recipe", ck.recipe, "note", ck.note));
		json_object_set_new(o, "config", cfg ? cfg : json_string(ckpt_run_config_json(r)));
		json_t *ep = json_pack("{s:I,s:I,s:I}", "e_W", (json_int_t)e_w[0], "e_W_catalog", (json_int_t)ck.e_w,
				       "steps_done", (json_int_t)steps_done[0]);
		json_object_set_new(ep, "rng", json_pack("[I,I]", (json_int_t)rng[0], (json_int_t)rng[1]));
		json_object_set_new(ep, "cache_valid_on_restore", json_integer(cache_valid[0]));
		json_object_set_new(o, "epochs", ep);
		json_object_set_new(o, "bytes",
				    json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "total", (json_int_t)total, "runtime_state",
					      (json_int_t)runtime, "params", (json_int_t)params, "adam_moments",
					      (json_int_t)moments, "catalog_total", (json_int_t)ck.bytes,
					      "catalog_runtime_state", (json_int_t)ck.runtime_state_bytes));
		ckpt_redundancy rd;
		if (!ckpt_q_redundancy(r, ck.id, &rd)) {
			json_object_set_new(o, "copies", json_integer(rd.copies));
			json_object_set_new(o, "hosts", json_integer(rd.hosts));
			json_object_set_new(o, "memory_copies", json_integer(rd.memory_copies));
			json_object_set_new(o, "memory_hosts", json_integer(rd.memory_hosts));
		}
	} else {
		printf("run %s (%s), checkpoint step %lld: id %lld, %s, created %s, committed %s\n", ckpt_run_id(r), dir,
		       (long long)ck.step, (long long)ck.id, cat_status_name(ck.status), ck.created,
		       ck.committed_at[0] ? ck.committed_at : "-");
		if (ck.note[0])
			printf("note: %s\n", ck.note);
		print_config(ckpt_run_config_json(r));
		printf("checkpoint records: topology '%s', schedule '%s', recipe '%s'\n", ck.topology, ck.schedule,
		       ck.recipe);
		ckpt_redundancy rd;
		if (!ckpt_q_redundancy(r, ck.id, &rd) && rd.copies)
			printf("copies: every tensor in at least %d store%s on %d host%s (--ckpt-replicas %d)\n", rd.copies,
			       rd.copies == 1 ? "" : "s", rd.hosts, rd.hosts == 1 ? "" : "s", rd.copies - 1);
		if (rd.memory_copies)
			printf("memory tier: every tensor also in the memory of at least %d host%s (--ckpt-memory; only the "
			       "latest checkpoint is kept there)\n",
			       rd.memory_hosts, rd.memory_hosts == 1 ? "" : "s");
		printf("epochs: e_W %lld (catalog row %lld), steps done %lld, cache valid on restore %lld, rng seed %lld "
		       "position %lld\n",
		       (long long)e_w[0], (long long)ck.e_w, (long long)steps_done[0], (long long)cache_valid[0],
		       (long long)rng[0], (long long)rng[1]);
	}

	/* AdamW steps per stage */
	if (!json)
		printf("adam steps:");
	json_t *jad = NULL;
	if (json) {
		jad = json_object();
		json_object_set_new(json_object_get(o, "epochs"), "adam_step", jad);
	}
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		if (strcmp(t->name, "adam_step") || (stage != NO_STAGE && ckpt_q_stage_of(t) != stage))
			continue;
		int64_t v[1];
		if ((rc = ckpt_q_store_gone(r, t->store_id)))
			goto fail;
		if (!on_this_host(r, t)) {
			/* Its store is on another host: the table above still lists it. */
			if (json)
				json_object_set_new(jad, t->name, json_null());
			else
				printf(" stage %d: (its store is not on this host)", t->stage);
			continue;
		}
		if ((rc = read_i64(r, t, v, 1)))
			goto fail;
		if (json) {
			char k[16];
			snprintf(k, sizeof(k), "%d", t->stage);
			json_object_set_new(jad, k, json_integer(v[0]));
		} else {
			printf(" stage %d: %lld", t->stage, (long long)v[0]);
		}
	}
	if (!json)
		printf("\n");

	/* FP8 scaling state */
	int header = 0;
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		if (strcmp(t->kind, "fp8_meta") || (stage != NO_STAGE && ckpt_q_stage_of(t) != stage))
			continue;
		void *d;
		ckpt_fp8_meta m;
		if ((rc = ckpt_q_store_gone(r, t->store_id)))
			goto fail;
		if (!on_this_host(r, t)) {
			if (!json)
				printf("fp8 scaling state of stage %d: its store is not on this host\n", t->stage);
			continue;
		}
		if ((rc = ckpt_q_read(r, t, &d)))
			goto fail;
		rc = ckpt_q_fp8_meta(t, d, &m);
		free(d);
		if (rc)
			goto fail;
		if (!json && !header++)
			printf("fp8 scaling state:\n%5s  %-5s %-12s %15s %15s  %s\n", "stage", "lin", "role", "scale",
			       "scale_inv", "amax history (the next step's slot, then newest first)");
		for (size_t k = 0; k < m.n; k++) {
			const ckpt_fp8_role *f = &m.rows[k];
			if (json) {
				json_t *h = json_array();
				for (int j = 0; j < f->history_len; j++)
					json_array_append_new(h, jreal(f->history[j]));
				json_t *e = json_pack("{s:i,s:s,s:i,s:s,s:o,s:o}", "stage", f->stage, "linear",
						      f->linear_name, "linear_index", f->linear, "role", f->role_name,
						      "scale", jreal(f->scale), "scale_inv", jreal(f->scale_inv));
				json_object_set_new(e, "amax_history", h);
				json_array_append_new(jfp8, e);
			} else {
				char hist[256];
				fmt_history(f, hist, sizeof(hist));
				printf("%5d  %-5s %-12s %15.9g %15.9g  %s\n", f->stage, f->linear_name, f->role_name,
				       f->scale, f->scale_inv, hist);
			}
		}
		ckpt_fp8_meta_free(&m);
	}
	if (!json && !header)
		printf("fp8 scaling state: none%s\n", stage != NO_STAGE ? " at this stage" : "");

	/* tensor table */
	if (!json)
		printf("tensors (stage -1: run-wide records):\n%5s  %-28s %-9s %-5s %-14s %12s %6s  %s\n", "stage", "name", "kind", "dtype", "shape",
		       "bytes", "chunks", "first chunk");
	for (size_t i = 0; i < tr.n; i++) {
		const cat_tensor *t = &tr.rows[i];
		if (stage != NO_STAGE && ckpt_q_stage_of(t) != stage)
			continue;
		/* Shown means read through the store and re-hashed: a damaged chunk is an error naming it,
		 * and so is a store made on this host that is gone. */
		if ((rc = ckpt_q_store_gone(r, t->store_id)))
			goto fail;
		if (on_this_host(r, t)) {
			void *d;
			if ((rc = ckpt_q_read(r, t, &d)))
				goto fail;
			free(d);
		}
		char hex[STORE_HASH_HEX] = "-";
		if (t->n_chunks) {
			store_hash h;
			memcpy(h.b, t->chunks[0].hash, STORE_HASH_BYTES);
			store_hash_hex(&h, hex);
		}
		if (json)
			json_array_append_new(jt, json_pack("{s:i,s:i,s:s,s:s,s:s,s:s,s:I,s:I,s:s}", "stage", ckpt_q_stage_of(t), "catalog_stage", t->stage, "name",
							    t->name, "kind", t->kind, "dtype", t->dtype, "shape",
							    t->shape, "bytes", (json_int_t)t->bytes, "chunks",
							    (json_int_t)t->n_chunks, "first_chunk", hex));
		else
			printf("%5d  %-28s %-9s %-5s %-14s %12llu %6zu  %s\n", ckpt_q_stage_of(t), t->name, t->kind, t->dtype, t->shape,
			       (unsigned long long)t->bytes, t->n_chunks, hex);
	}
	if (!json)
		printf("bytes: %llu in %zu tensors and %llu chunks; runtime state %llu (%.3f%%): parameters %llu, AdamW "
		       "moments %llu (catalog row: %llu total, %llu runtime state)\n",
		       (unsigned long long)total, tr.n, (unsigned long long)nchunks, (unsigned long long)runtime,
		       total ? 100.0 * (double)runtime / (double)total : 0.0, (unsigned long long)params,
		       (unsigned long long)moments, (unsigned long long)ck.bytes,
		       (unsigned long long)ck.runtime_state_bytes);

	/* named tensors: a view of the stage arrays, so a run the table cannot name still inspects */
	if (cli_named_open(r, &tr, &nm) == QE_OK) {
		have_names = 1;
		json_t *jn = json ? json_array() : NULL;
		if (jn)
			json_object_set_new(o, "named", jn);
		cli_inspect_named_list(&nm, all_names, jn);
	} else {
		snprintf(names_why, sizeof(names_why), "%s", qe_last_error());
		if (json)
			json_object_set_new(o, "named_error", json_string(names_why));
		else
			printf("named tensors: none (%s)\n", names_why);
	}

	/* value summary */
	const qe_named *ne = have_names && tname ? qe_names_find(&nm.names, tname) : NULL;
	if (ne) {
		snprintf(what, sizeof(what), "%s: checkpoint step %lld", dir, (long long)ck.step);
		if ((rc = cli_inspect_named_summary(&nm, ne, jsum)))
			goto fail;
	} else if (tname) {
		int found = 0;
		for (size_t i = 0; i < tr.n; i++) {
			const cat_tensor *t = &tr.rows[i];
			if ((strcmp(t->name, tname) && strcmp(ckpt_q_base_name(t), tname)) || (stage != NO_STAGE && ckpt_q_stage_of(t) != stage))
				continue;
			found++;
			void *d;
			ckpt_summary s;
			if ((rc = ckpt_q_read(r, t, &d)))
				goto fail;
			rc = ckpt_q_summarize(t, d, &s);
			free(d);
			if (rc)
				goto fail;
			if (json) {
				json_t *fv = json_array();
				for (int k = 0; k < s.nfirst; k++)
					json_array_append_new(fv, jreal(s.first[k]));
				json_t *e = json_pack("{s:i,s:s,s:s,s:I,s:o,s:o,s:o,s:o,s:I}", "stage", ckpt_q_stage_of(t), "name",
						      t->name, "as", s.as, "count", (json_int_t)s.count, "min",
						      jreal(s.min), "max", jreal(s.max), "mean", jreal(s.mean), "rms",
						      jreal(s.rms), "nonfinite", (json_int_t)s.nonfinite);
				json_object_set_new(e, "first", fv);
				json_array_append_new(jsum, e);
			} else {
				printf("tensor '%s' of stage %d (%s): count %llu, min %.9g, max %.9g, mean %.9g, rms %.9g, "
				       "non-finite %llu\n  first:",
				       t->name, ckpt_q_stage_of(t), s.as, (unsigned long long)s.count, s.min, s.max, s.mean, s.rms,
				       (unsigned long long)s.nonfinite);
				for (int k = 0; k < s.nfirst; k++)
					printf(" %.9g", s.first[k]);
				printf("\n");
			}
		}
		if (!found) {
			if (stage != NO_STAGE)
				rc = qe_fail(QE_ENOTFOUND, "no tensor '%s' at stage %ld", tname, stage);
			else if (have_names)
				rc = qe_fail(QE_ENOTFOUND, "no tensor '%s' in this checkpoint (neither a stage array nor a "
					     "GPT-2 name: see the named tensors above, --names for all)", tname);
			else
				rc = qe_fail(QE_ENOTFOUND, "no tensor '%s' in this checkpoint (its tensors cannot be named: %s)",
					     tname, names_why);
			goto fail;
		}
	}
	if (json) {
		char *s = json_dumps(o, JSON_INDENT(2));
		if (s)
			puts(s);
		free(s);
	}
	status = 0;
	goto out;
fail:
	status = cli_report("inspect", rc, what);
out:
	json_decref(o);
	cli_named_release(&nm);
	cat_tensor_rows_free(&tr);
	cat_ckpt_release(&ck);
	ckpt_run_close(r);
	return status;
}
