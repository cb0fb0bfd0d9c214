"""table.py - the one comparison table of bench/compare-peers/run.sh, from the parts' reports.

    python3 bench/compare-peers/table.py RESULT_DIR [OUT_JSON]

Reads what run.sh left in RESULT_DIR:
  qstep/step.json            qeffect bench step (per preset, main series: step_ms = median over
                             trials of the median slowest-rank step, trials = successful runs)
  qckpt/{sync,resume,async}.log  qeffect train/resume output: 'checkpoint step N committed: B bytes
                             ... in X ms' (sync save), 'resumed from checkpoint step N (B bytes) in
                             X ms' (restore), 'checkpoint step N: B bytes snapshot in S ms, training
                             stalled T ms (W ms waiting for the previous write)' and 'committed in
                             the background after X ms' (async)
  peers/*/peers-step.json    PyTorch pipelining (bench/peers/run_peers.py step), one folder per preset
  peers/peers-ckpt.json      PyTorch DCP (bench/peers/run_peers.py ckpt)
and prints one table: system, schedule, precision, step ms (median) with its trial count, the
ratio of the row's step time to qeffect captured zbv direct (> 1: slower than qeffect), and
checkpoint save GB/s, restore GB/s, training stall ms, each with its count.  GB/s is 1e9 bytes
per second.  Writes everything it read and derived to OUT_JSON (default RESULT_DIR/compare.json).
"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


QE_LABELS = {
    "reference_eager": ("interleaved 1F1B, full backward, eager", "fp8 delayed"),
    "qeffect_eager": ("interleaved 1F1B, split dI/dW, eager", "fp8 delayed"),
    "captured_copy": ("interleaved 1F1B, captured, grad copy", "fp8 delayed"),
    "captured_direct": ("interleaved 1F1B, captured, direct", "fp8 delayed"),
    "captured_zbv_direct": ("ZB-V, captured, direct", "fp8 delayed"),
}
PEER_SCHED = {"zbv": "ScheduleZBVZeroBubble", "interleaved": "ScheduleInterleaved1F1B",
              "izb": "ScheduleInterleavedZeroBubble"}
PEER_PREC = {"bf16": "bf16 autocast", "fp8": "fp8 _scaled_mm current"}


def qeffect_steps(d):
    """{preset: {config: {step_ms, trials, micro}}} from bench step's report."""
    out = {}
    doc = load(os.path.join(d, "qstep", "step.json"))
    if not doc:
        return out, None
    for p in doc.get("presets", []):
        for c in p.get("series", {}).get("main", []):
            out.setdefault(p["preset"], {})[c["config"]] = dict(step_ms=c.get("step_ms"), trials=c.get("trials", 0),
                                                                runs=c.get("runs", 0), micro=p.get("micro"))
    return out, doc


def parse_qckpt(d):
    r = {}
    text = {}
    for name in ("sync", "resume", "async"):
        try:
            with open(os.path.join(d, "qckpt", name + ".log"), errors="replace") as f:
                text[name] = f.read()
        except OSError:
            text[name] = ""
    saves = [(int(b), float(ms)) for b, ms in
             re.findall(r"checkpoint step \d+ committed: (\d+) bytes \(\d+ runtime-state bytes\) in ([0-9.]+) ms", text["sync"])]
    r["save"] = [dict(bytes=b, ms=ms, gbps=b / ms / 1e6) for b, ms in saves]
    rest = [(int(b), float(ms)) for b, ms in re.findall(r"resumed from checkpoint step \d+ \((\d+) bytes\) in ([0-9.]+) ms",
                                                      text["resume"])]
    r["restore"] = [dict(bytes=b, ms=ms, gbps=b / ms / 1e6) for b, ms in rest]
    asy = re.findall(r"checkpoint step \d+: (\d+) bytes snapshot in ([0-9.]+) ms, training stalled ([0-9.]+) ms "
                     r"\(([0-9.]+) ms waiting", text["async"])
    r["async"] = [dict(bytes=int(b), snapshot_ms=float(s), stall_ms=float(t), wait_ms=float(w),
                       stall_excl_wait_ms=float(t) - float(w)) for b, s, t, w in asy]
    r["async_commit_ms"] = [float(x) for x in re.findall(r"committed in the background after ([0-9.]+) ms", text["async"])]
    r["cold_restore"] = "dropped" in text["resume"][:2000] or os.path.exists(os.path.join(d, "qckpt", "dropped.txt"))
    for name in ("sync", "resume", "async"):
        m = re.search(r"(qeffect[^\n]*(?:error|failed|refused)[^\n]*)", text[name], re.I)
        if m:
            r.setdefault("errors", []).append("%s: %s" % (name, m.group(1)[:300]))
    return r


def fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v


def cell(v, n, spec="%.2f", failed=False):
    if v is None:
        return "failed (0)" if failed else ("-" if not n else "- (%d)" % n)
    return (spec % v) + " (%d)" % n


def main():
    d = sys.argv[1]
    out_json = sys.argv[2] if len(sys.argv) > 2 else os.path.join(d, "compare.json")
    qs, qdoc = qeffect_steps(d)
    qck = parse_qckpt(d)
    peers = {}
    for p in sorted(glob.glob(os.path.join(d, "peers", "*", "peers-step.json"))):
        doc = load(p)
        if doc:
            peers[doc["preset"]] = doc
    dcp = load(os.path.join(d, "peers", "peers-ckpt.json"))
    skipped = None
    try:
        with open(os.path.join(d, "peers", "skipped.txt")) as f:
            skipped = f.read().strip()
    except OSError:
        pass

    rows = []
    presets = list(qs) + [p for p in peers if p not in qs]
    ratios = {}
    for preset in presets:
        base = qs.get(preset, {}).get("captured_zbv_direct", {}).get("step_ms")
        micro = next((v.get("micro") for v in qs.get(preset, {}).values()), None) or peers.get(preset, {}).get("micro")
        for cfg, v in qs.get(preset, {}).items():
            sch, prec = QE_LABELS.get(cfg, (cfg, "fp8 delayed"))
            rows.append(dict(preset=preset, micro=micro, system="qeffect", schedule=sch, precision=prec,
                             step_ms=v["step_ms"], step_n=v["trials"],
                             ratio=(v["step_ms"] / base) if base and v["step_ms"] else None))
        for name, c in peers.get(preset, {}).get("configs", {}).items():
            r = (c["step_ms"] / base) if base and c.get("step_ms") else None
            rows.append(dict(preset=preset, micro=micro, system="pytorch", schedule=PEER_SCHED.get(c["schedule"], c["schedule"]),
                             precision=PEER_PREC.get(c["precision"], c["precision"]), step_ms=c.get("step_ms"),
                             step_n=c.get("trials", 0), ratio=r, errors=c.get("errors")))
            if r is not None:
                ratios.setdefault(preset, []).append((r, name))

    ck = []
    sv, rs, asy = qck["save"], qck["restore"], qck["async"]
    ck.append(dict(system="qeffect", schedule="checkpoint, synchronous (ckpt_save)", precision="fp32 state",
                   save_gbps=med([x["gbps"] for x in sv]), save_n=len(sv),
                   restore_gbps=med([x["gbps"] for x in rs]), restore_n=len(rs),
                   stall_ms=med([x["ms"] for x in sv]), stall_n=len(sv),
                   bytes=sv[0]["bytes"] if sv else (rs[0]["bytes"] if rs else None)))
    ac = qck["async_commit_ms"]
    abytes = asy[0]["bytes"] if asy else None
    ck.append(dict(system="qeffect", schedule="checkpoint, --ckpt-async", precision="fp32 state",
                   save_gbps=med([abytes / ms / 1e6 for ms in ac]) if abytes and ac else None, save_n=len(ac),
                   restore_gbps=None, restore_n=0,
                   stall_ms=med([x["stall_excl_wait_ms"] for x in asy]), stall_n=len(asy), bytes=abytes))
    if dcp:
        v = dcp.get("variants", {})
        total = dcp.get("bytes_total")

        def vrow(name, label, restore=False):
            e = v.get(name)
            if not e:
                return
            reps = e.get("reps", [])
            row = dict(system="pytorch DCP", schedule=label, precision="fp32 state", bytes=total,
                       save_gbps=e.get("gbps_median") if not name.startswith("async") else None,
                       save_n=len(reps) if not name.startswith("async") else 0,
                       restore_gbps=None, restore_n=0, stall_ms=e.get("stall_ms_median"),
                       stall_n=len([r for r in reps if r.get("stall_ms") is not None]), errors=e.get("errors"))
            if name.startswith("async"):
                row["save_gbps"] = e.get("gbps_median")  # background write, staging to done
                row["save_n"] = len(reps)
                if name in ("async_pinned", "async_stager") and row["stall_n"] > 1:
                    row["stall_n"] -= 1  # the first rep (allocating pinned buffers) is left out
            if restore:
                le = v.get("load", {})
                row["restore_gbps"] = le.get("gbps_median")
                row["restore_n"] = len(le.get("reps", []))
                if le.get("errors"):
                    row.setdefault("errors", []).extend(le["errors"])
            ck.append(row)

        vrow("save", "dcp.save + dcp.load (defaults)", restore=True)
        vrow("save_t8", "dcp.save, FileSystemWriter(thread_count=8)")
        vrow("async", "dcp.async_save (defaults)")
        vrow("async_pinned", "dcp.async_save, cache_staged_state_dict")
        vrow("async_stager", "dcp.async_save, DefaultStager async staging")

    # ---- print
    hdr = "%-10s %-12s %-46s %-23s %14s %7s %13s %13s %14s" % (
        "preset", "system", "schedule / checkpoint", "precision", "step ms (n)", "ratio", "save GB/s (n)",
        "restore GB/s", "stall ms (n)")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print("%-10s %-12s %-46s %-23s %14s %7s %13s %13s %14s" % (
            "%s M=%s" % (r["preset"], r["micro"]) if r["micro"] else r["preset"], r["system"], r["schedule"][:46],
            r["precision"], cell(r["step_ms"], r["step_n"], failed=bool(r.get("errors"))), fmt(r["ratio"]), "-", "-", "-"))
    try:
        with open(os.path.join(d, "qckpt", "preset.txt")) as f:
            ck_preset = f.read().strip()
    except OSError:
        ck_preset = dcp.get("preset") if dcp else ""
    for r in ck:
        print("%-10s %-12s %-46s %-23s %14s %7s %13s %13s %14s" % (
            ck_preset or "", r["system"], r["schedule"][:46], r["precision"], "-", "-",
            cell(r["save_gbps"], r["save_n"], failed=bool(r.get("errors"))), cell(r["restore_gbps"], r["restore_n"]),
            cell(r["stall_ms"], r["stall_n"], "%.1f", failed=bool(r.get("errors")))))
    print("(n) = trials (step: fresh process sets; checkpoints: saves/restores measured).  ratio = row's step time /"
          " qeffect captured ZB-V direct (> 1: slower).")
    print("step ms: median over trials of the median over steps after warmup of the slowest rank's step.  GB/s:"
          " 1e9 bytes/s of the whole state (all ranks).")
    print("qeffect async stall: training stalled minus waiting for the previous write; async 'save GB/s': bytes /"
          " background time to commit.  DCP async stall: until async_save returns (pinned/stager: steady state, "
          "first save left out).")
    notes = []
    for preset, rs in ratios.items():
        best = min(rs)
        notes.append("%s: fastest PyTorch pipelining (%s) takes %.2fx qeffect captured ZB-V's step time "
                     "(goal >= 2x)" % (preset, best[1], best[0]))
    if skipped:
        notes.append(skipped)
    qsave = ck[0]
    if dcp and qsave.get("save_gbps"):
        d_save = next((r for r in ck if r["system"] == "pytorch DCP" and r["schedule"].startswith("dcp.save +")), None)
        if d_save and d_save.get("save_gbps"):
            notes.append("checkpoint save: qeffect %.2f GB/s vs DCP %.2f GB/s (%.2fx); restore: qeffect %s vs DCP %s GB/s"
                         % (qsave["save_gbps"], d_save["save_gbps"], qsave["save_gbps"] / d_save["save_gbps"],
                            fmt(qsave.get("restore_gbps")), fmt(d_save.get("restore_gbps"))))
        qa = ck[1].get("stall_ms")
        das = [r["stall_ms"] for r in ck if r["system"] == "pytorch DCP" and "async" in r["schedule"] and r.get("stall_ms")]
        if qa is not None and das:
            notes.append("async stall: qeffect %.1f ms vs best DCP async_save %.1f ms" % (qa, min(das)))
    if qsave.get("bytes") and dcp and dcp.get("bytes_total"):
        notes.append("state bytes: qeffect checkpoint %d, DCP state %d (%.4f)" % (
            qsave["bytes"], dcp["bytes_total"], dcp["bytes_total"] / qsave["bytes"]))
    for r in rows + ck:
        for e in (r.get("errors") or [])[:3]:
            notes.append("%s %s: %s" % (r["system"], r["schedule"], str(e)[:300]))
    for e in qck.get("errors", []):
        notes.append("qeffect checkpoint: " + e)
    if qdoc and qdoc.get("truncated"):
        notes.append("qeffect bench step cut short: " + str(qdoc.get("truncated_why")))
    for p, doc in peers.items():
        if doc.get("truncated"):
            notes.append("peers %s cut short: %s" % (p, doc["truncated"]))
    for n in notes:
        print("note: " + n)
    with open(out_json, "w") as f:
        json.dump(dict(step_rows=rows, checkpoint_rows=ck, notes=notes, qeffect_checkpoint=qck,
                       peers_step=peers, peers_ckpt=dcp, qeffect_step=qdoc), f, indent=1)


if __name__ == "__main__":
    main()
