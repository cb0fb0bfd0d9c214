/*
 * bench_handoff.c - `qeffect bench handoff`: does the caller see what a
 * replayed graph wrote?  Producer-consumer checks across a captured graph
 * and its caller, through the op table only, with the one-way protocol the
 * issue warns about and the two-way protocol the executor uses
 * (runtime/exec/rank_step.c replay()).
 *
 * The graph, captured once on a graph stream, is busy work (several large
 * fills of a pad buffer) followed by the marker: a 4-byte copy from a static
 * input buffer `src` into `dst`.  Per check the caller writes a fresh value
 * k into src (H2D on the caller stream: the dynamic input), records ev_in,
 * the graph stream waits on it and launches the graph; then
 *   one-way: the caller copies dst to the host at once;
 *   two-way: the graph stream records the tail event and the caller waits
 *            on it first.
 * A stale read is a host value other than k.  The graph stream is drained
 * after every check so that checks are independent.  Each protocol runs in
 * --procs fresh processes (this binary re-executed with the hidden --child).
 *
 * On the cpu backend every op runs when enqueued, so neither protocol can
 * race: both counts are 0 by construction and prove nothing about a GPU.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"

static const char *protocols[2] = { "one-way", "two-way" };

static void help(FILE *f)
{
	fprintf(f, "usage: qeffect bench handoff [--backend cpu|cuda] [--procs 3] [--checks 200] [--out DIR] [--json]\n\n"
		   "Producer-consumer checks across a captured graph and its caller.  The graph (captured once\n"
		   "on a graph stream) runs --fills large fills of a pad buffer, then copies a 4-byte marker from\n"
		   "a static input buffer into dst.  Per check the caller writes a fresh value k into the input\n"
		   "(H2D on its stream), records ev_in; the graph stream waits on it and launches the graph.\n"
		   "  one-way: the caller then copies dst to the host at once;\n"
		   "  two-way: the graph stream records the tail event, the caller waits on it, then copies.\n"
		   "A stale read is a host value other than k.  Each protocol runs in --procs fresh processes.\n"
		   "On the cpu backend ops run synchronously when enqueued, so both counts are 0 by construction;\n"
		   "on cuda the one-way count is what an unguarded handoff risks, and two-way must be 0.\n\n"
		   "flags:\n"
		   "  --backend cpu|cuda   (default cpu)\n"
		   "  --procs N            fresh processes per protocol (default 3)\n"
		   "  --checks N           checks per process (default 200)\n"
		   "  --fills N            fills of the pad buffer before the marker (default 8)\n"
		   "  --pad-mib N          pad buffer size (default 256 on cuda, 1 on cpu)\n"
		   "  --timeout-s S        time limit per process (default 120)\n"
		   "  --out DIR            report folder: handoff.json, logs/ (default bench-out)\n"
		   "  --json               print the report as JSON instead of the table\n"
		   "Exit status: 0 when two-way saw no stale read, 1 otherwise or when a process failed.\n");
}

/* One process's checks; prints one JSON line.  Returns an exit status. */
static int run_child(const char *backend, int two_way, int proc, long checks, long fills, long pad_mib)
{
	qe_backend *b = NULL;
	qe_stream *caller = NULL, *gs = NULL;
	qe_event *ev_in = NULL, *ev_tail = NULL;
	qe_graph *g = NULL;
	void *pad = NULL, *src = NULL, *dst = NULL;
	int rc = qe_backend_open(backend, &b);
	if (rc)
		return cli_report("bench handoff", rc, "opening the backend");
	const qe_backend_ops *o = b->ops;
	if (pad_mib < 0)
		pad_mib = o->device == QE_DEV_CUDA ? 256 : 1;
	size_t padb = (size_t)pad_mib << 20;
	long stale = 0, stale_prev = 0, first_at = -1;
	uint32_t first_want = 0, first_got = 0;
	double t0 = 0, dt = 0;
	int nops = 0;
	if ((rc = o->stream_create(b, &caller)) || (rc = o->stream_create(b, &gs)) || (rc = o->event_create(b, &ev_in)) ||
	    (rc = o->event_create(b, &ev_tail)) || (rc = o->alloc(b, padb ? padb : 256, &pad)) ||
	    (rc = o->alloc(b, 256, &src)) || (rc = o->alloc(b, 256, &dst)))
		goto out;
	/* Capture: busy work first, the marker write last. */
	if ((rc = o->capture_begin(gs)))
		goto out;
	for (long f = 0; f < fills && !rc; f++)
		rc = o->fill(gs, pad, (uint8_t)(0x11 + f), padb);
	if (!rc)
		rc = o->copy(gs, dst, src, 4, QE_COPY_D2D);
	int rc2 = o->capture_end(gs, &g);
	if (rc || (rc = rc2))
		goto out;
	nops = o->graph_op_count(g);
	uint32_t base = ((uint32_t)proc << 20) | ((uint32_t)two_way << 19) | 1u;
	t0 = bench_now_ms();
	for (long i = 0; i < checks; i++) {
		uint32_t k = base + (uint32_t)i, host = 0;
		if ((rc = o->copy(caller, src, &k, 4, QE_COPY_H2D)) || (rc = o->event_record(ev_in, caller)) ||
		    (rc = o->stream_wait(gs, ev_in)) || (rc = o->graph_launch(g, gs)))
			goto out;
		if (two_way && ((rc = o->event_record(ev_tail, gs)) || (rc = o->stream_wait(caller, ev_tail))))
			goto out;
		if ((rc = o->copy(caller, &host, dst, 4, QE_COPY_D2H)) || (rc = o->stream_sync(caller)))
			goto out;
		if (host != k) {
			stale++;
			stale_prev += i > 0 && host == k - 1;
			if (first_at < 0) {
				first_at = i;
				first_want = k;
				first_got = host;
			}
		}
		if ((rc = o->stream_sync(gs)))
			goto out;
	}
	dt = bench_now_ms() - t0;
out:
	if (rc)
		cli_report("bench handoff", rc, "running the checks");
	else {
		json_t *line = json_pack("{s:s,s:s,s:i,s:I,s:I,s:I,s:o,s:f,s:i,s:I,s:I,s:b}", "protocol",
					 protocols[two_way], "backend", o->name, "proc", proc, "checks", (json_int_t)checks,
					 "stale", (json_int_t)stale, "stale_previous_value", (json_int_t)stale_prev,
					 "first_stale",
					 first_at < 0 ? json_null()
						      : json_pack("{s:I,s:I,s:I}", "check", (json_int_t)first_at, "want",
								  (json_int_t)first_want, "got", (json_int_t)first_got),
					 "us_per_check", checks ? dt * 1e3 / checks : 0.0, "graph_ops", nops, "fills",
					 (json_int_t)fills, "pad_bytes", (json_int_t)padb, "synchronous_backend",
					 o->device == QE_DEV_CPU);
		char *txt = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
		printf("%s\n", txt ? txt : "{}");
		free(txt);
		json_decref(line);
	}
	if (g)
		o->graph_destroy(g);
	o->free(b, pad);
	o->free(b, src);
	o->free(b, dst);
	if (ev_in)
		o->event_destroy(ev_in);
	if (ev_tail)
		o->event_destroy(ev_tail);
	if (caller)
		o->stream_destroy(caller);
	if (gs)
		o->stream_destroy(gs);
	qe_backend_close(b);
	return rc ? 1 : 0;
}

int bench_handoff_main(int argc, char **argv)
{
	const char *backend = "cpu", *out = "bench-out", *child = NULL;
	long procs = 3, checks = 200, fills = 8, pad_mib = -1, proc = 0;
	double timeout_s = 120;
	int json = 0;
	const cli_flag table[] = {
		{ "backend", 0, CLI_FLAG_STRING, .dst = &backend },
		{ "procs", 0, CLI_FLAG_LONG, &procs, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "checks", 0, CLI_FLAG_LONG, &checks, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "fills", 0, CLI_FLAG_LONG, &fills, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "pad-mib", 0, CLI_FLAG_LONG, &pad_mib, .lo = LONG_MIN, .hi = LONG_MAX },
		{ "timeout-s", 0, CLI_FLAG_DOUBLE, &timeout_s, .dlo = -HUGE_VAL, .dhi = HUGE_VAL },
		{ "out", 0, CLI_FLAG_STRING, .dst = &out },
		{ "json", 0, CLI_FLAG_BOOL, .dst = &json },
		{ "child", 0, CLI_FLAG_STRING, .dst = &child },
		{ "proc", 0, CLI_FLAG_LONG, &proc, .lo = LONG_MIN, .hi = LONG_MAX },
		{ 0 },
	};
	int rc = cli_flags_parse("bench handoff", table, argc, argv, NULL);
	if (rc < 0) {
		help(stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (procs < 1 || procs > 64 || checks < 1 || fills < 0 || fills > 64 || pad_mib > 4096) {
		fprintf(stderr, "qeffect bench handoff: --procs 1..64, --checks >= 1, --fills 0..64, --pad-mib <= 4096\n");
		return 2;
	}
	if (child) {
		int two = strcmp(child, "two-way") == 0;
		if (!two && strcmp(child, "one-way") != 0) {
			fprintf(stderr, "qeffect bench handoff: --child one-way|two-way\n");
			return 2;
		}
		return run_child(backend, two, (int)proc, checks, fills, pad_mib);
	}

	char exe[4096], logs[4200], path[4400];
	if (bench_self_exe(exe, sizeof(exe))) {
		fprintf(stderr, "qeffect bench handoff: cannot find this executable (/proc/self/exe)\n");
		return 1;
	}
	snprintf(logs, sizeof(logs), "%s/logs", out);
	if (bench_mkdirs(logs))
		return 1;
	long total[2] = { 0, 0 }, done[2] = { 0, 0 };
	int failed = 0, sync_backend = -1;
	json_t *runs = json_array();
	char sp[32], sc[32], sf[32], spad[32];
	snprintf(sc, sizeof(sc), "%ld", checks);
	snprintf(sf, sizeof(sf), "%ld", fills);
	snprintf(spad, sizeof(spad), "%ld", pad_mib);
	for (long p = 1; p <= procs; p++) {
		for (int two = 0; two < 2; two++) {
			snprintf(sp, sizeof(sp), "%ld", p);
			char *args[] = { exe,	  "bench",   "handoff", "--child", (char *)protocols[two],
					 "--backend", (char *)backend, "--proc", sp, "--checks", sc, "--fills", sf,
					 "--pad-mib", spad, NULL };
			snprintf(path, sizeof(path), "%s/handoff-%s-%ld.log", logs, protocols[two], p);
			bench_child ch;
			json_t *line = NULL;
			if (!bench_run_child(args, path, timeout_s, &ch)) {
				json_t *lines = bench_json_lines(ch.out);
				if (ch.exit_code == 0 && json_array_size(lines) == 1)
					line = json_incref(json_array_get(lines, 0));
				json_decref(lines);
			}
			if (!line) {
				failed = 1;
				fprintf(stderr, "qeffect bench handoff: %s process %ld failed (exit %d%s); log %s:\n%s\n",
					protocols[two], p, ch.exit_code, ch.timed_out ? ", timed out" : "", path,
					ch.out ? ch.out : "");
				json_array_append_new(runs, json_pack("{s:s,s:I,s:i,s:b,s:s}", "protocol", protocols[two],
								      "proc", (json_int_t)p, "exit", ch.exit_code,
								      "timed_out", ch.timed_out, "log", path));
			} else {
				total[two] += (long)json_integer_value(json_object_get(line, "stale"));
				done[two] += checks;
				sync_backend = json_is_true(json_object_get(line, "synchronous_backend"));
				json_object_set_new(line, "wall_ms", json_real(ch.wall_ms));
				json_array_append_new(runs, line);
			}
			bench_child_release(&ch);
		}
	}
	const char *note = sync_backend == 1
				   ? "cpu backend: ops run synchronously when enqueued, so neither protocol can race; "
				     "both counts are 0 by construction and say nothing about a GPU"
			   : sync_backend == 0 ? "asynchronous backend: one-way is what an unguarded handoff risks; two-way "
						 "must be 0"
					       : "no process completed its checks (see the logs)";
	json_t *doc = json_pack("{s:s,s:s,s:I,s:I,s:I,s:{s:{s:I,s:I},s:{s:I,s:I}},s:s,s:b,s:o}", "bench", "handoff",
				"backend", backend, "procs", (json_int_t)procs, "checks_per_proc", (json_int_t)checks,
				"fills", (json_int_t)fills, "totals", "one-way", "checks", (json_int_t)done[0], "stale",
				(json_int_t)total[0], "two-way", "checks", (json_int_t)done[1], "stale",
				(json_int_t)total[1], "note", note, "ok", !failed && total[1] == 0, "runs", runs);
	snprintf(path, sizeof(path), "%s/handoff.json", out);
	int werr = bench_write_json(path, doc);
	if (json) {
		char *txt = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
		printf("%s\n", txt ? txt : "{}");
		free(txt);
	} else {
		printf("%-8s %5s %7s %6s %10s %10s\n", "protocol", "proc", "checks", "stale", "stale=k-1", "us/check");
		size_t i;
		json_t *r;
		json_array_foreach(runs, i, r)
		{
			if (!json_object_get(r, "stale"))
				continue;
			printf("%-8s %5lld %7lld %6lld %10lld %10.1f\n", json_string_value(json_object_get(r, "protocol")),
			       (long long)json_integer_value(json_object_get(r, "proc")),
			       (long long)json_integer_value(json_object_get(r, "checks")),
			       (long long)json_integer_value(json_object_get(r, "stale")),
			       (long long)json_integer_value(json_object_get(r, "stale_previous_value")),
			       json_real_value(json_object_get(r, "us_per_check")));
		}
		printf("one-way: %ld stale of %ld checks; two-way: %ld stale of %ld checks\n", total[0], done[0], total[1],
		       done[1]);
		printf("note: %s\n", note);
		printf("report: %s\n", path);
	}
	json_decref(doc);
	return failed || werr || total[1] ? 1 : 0;
}
