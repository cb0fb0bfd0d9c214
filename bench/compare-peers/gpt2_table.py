"""gpt2_table.py - the GPT-2 table of bench/compare-peers/run.sh (part gpt2): qeffect against the peers.

    python3 bench/compare-peers/gpt2_table.py RESULT_DIR [OUT_JSON]

Reads what the gpt2 part left in RESULT_DIR:
  qe-TAG/step.json           qeffect bench step --pp 1 (extended report): per row (preset, M, batch,
                             precision) the configuration's tokens_per_s = median over fresh-process
                             trials of micro x batch x seq / the trial's median step time
  peer/gpt2-torch-*.json     bench/peers/gpt2_torch.py: tokens_per_s = median over fresh-process
                             trials of the median per-step tokens/s (CUDA events)
and prints one table, one line per model and shape: seq, batch, micro, tokens/s of qeffect fp8,
qeffect bf16 (the captured_direct configuration, or QE_CONFIG), PyTorch compiled, each with its
trial count; llm.c's number measured earlier on an H200 (not in this call: llm.c is not on the
GPU machine), the faster peer (the larger of this call's PyTorch and that llm.c number), and
qeffect's ratios to it (> 1: qeffect is faster).  Writes all it read to OUT_JSON (default
RESULT_DIR/gpt2-compare.json).
"""
import glob
import json
import os
import sys

# qeffect preset -> the peers' model name
MODEL = {"gpt2": "d12", "gpt2-medium": "d24", "gpt2-large": "d36", "gpt2-xl": "d48"}
# measured earlier on an H200, seq 1024, tokens/s (issue 20): (model, batch) -> (llm.c, PyTorch compiled)
EARLIER = {("d12", 16): (353e3, 486e3), ("d24", 16): (135e3, 191e3), ("d48", 8): (34.1e3, 43.2e3)}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def qeffect_rows(d, config):
    """{(model, seq, batch, micro): {precision: dict(tps, n, step_ms, peak)}}"""
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "qe-*", "step.json"))):
        doc = load(path)
        for p in (doc or {}).get("presets", []):
            cells = p.get("series", {}).get("main", [])
            cell = next((c for c in cells if c.get("config") == config), None)
            if cell is None:
                continue
            key = (MODEL.get(p["preset"], p["preset"]), p.get("seq"), p.get("batch"), p.get("micro"))
            out.setdefault(key, {})[p.get("precision", "fp8")] = dict(
                tps=cell.get("tokens_per_s"), n=cell.get("trials", 0), runs=cell.get("runs", 0),
                step_ms=cell.get("step_ms"), alloc_peak_bytes=cell.get("alloc_peak_bytes"),
                mem_peak_bytes=cell.get("mem_peak_bytes"), report=path)
    return out


def peer_rows(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "peer", "gpt2-torch-*.json"))):
        doc = load(path)
        if not doc:
            continue
        ok = [t for t in doc.get("trials", []) if t.get("ok")]
        seq = ok[0]["seq"] if ok else doc.get("seq")
        key = (doc.get("model"), seq, doc.get("batch"), doc.get("micro"))
        how = ok[0] if ok else {}
        out[key] = dict(tps=doc.get("tokens_per_s"), n=doc.get("n", 0), runs=len(doc.get("trials", [])),
                        compile=doc.get("compile"), sdpa=how.get("sdpa"), torch=how.get("torch"), gpu=how.get("gpu"),
                        optimizer=how.get("optimizer"), autocast=how.get("autocast"),
                        peak_alloc_bytes=max((t.get("peak_alloc_bytes") or 0 for t in ok), default=None),
                        errors=[t.get("error") for t in doc.get("trials", []) if not t.get("ok")],
                        truncated=doc.get("truncated_why") or None, report=path)
    return out


def fmt(v, n=None):
    if v is None:
        return "-"
    s = "%.1fk" % (v / 1e3)
    return s + ("(%d)" % n if n is not None else "")


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: gpt2_table.py RESULT_DIR [OUT_JSON]\n")
        return 2
    d = sys.argv[1]
    out_json = sys.argv[2] if len(sys.argv) > 2 else os.path.join(d, "gpt2-compare.json")
    config = os.environ.get("QE_CONFIG", "captured_direct")
    qe, peer = qeffect_rows(d, config), peer_rows(d)
    keys = sorted(set(qe) | set(peer), key=lambda k: (str(k[0]), k[2] or 0, k[3] or 0))
    rows = []
    hdr = "%-5s %5s %5s %5s  %12s %12s %12s  %10s %10s  %6s %6s" % (
        "model", "seq", "batch", "micro", "qe fp8", "qe bf16", "PyTorch", "llm.c*", "faster", "fp8/p", "bf16/p")
    print("GPT-2, one GPU, tokens/s (median over fresh-process trials, trial count in brackets); qeffect: bench step "
          "--pp 1 %s; PyTorch: gpt2_torch.py (bf16 autocast, SDPA flash, fused AdamW, torch.compile)" % config)
    print(hdr)
    for k in keys:
        model, seq, batch, micro = k
        q = qe.get(k, {})
        f8, b16, pt = q.get("fp8", {}), q.get("bf16", {}), peer.get(k, {})
        llmc, pt_then = EARLIER.get((model, batch), (None, None)) if seq == 1024 and micro == 1 else (None, None)
        cands = [v for v in (pt.get("tps"), llmc) if v]
        best = max(cands) if cands else None
        r8 = f8["tps"] / best if best and f8.get("tps") else None
        r16 = b16["tps"] / best if best and b16.get("tps") else None
        print("%-5s %5s %5s %5s  %12s %12s %12s  %10s %10s  %6s %6s" % (
            model, seq, batch, micro, fmt(f8.get("tps"), f8.get("n", 0) if f8 else None),
            fmt(b16.get("tps"), b16.get("n", 0) if b16 else None), fmt(pt.get("tps"), pt.get("n", 0) if pt else None),
            fmt(llmc), fmt(best), "%.2f" % r8 if r8 else "-", "%.2f" % r16 if r16 else "-"))
        rows.append(dict(model=model, seq=seq, batch=batch, micro=micro, qeffect_fp8=f8 or None,
                         qeffect_bf16=b16 or None, pytorch=pt or None, llmc_earlier=llmc, pytorch_earlier=pt_then,
                         faster_peer=best, fp8_over_faster_peer=r8, bf16_over_faster_peer=r16))
    if not keys:
        print("(no results: see the logs in the result folder)")
    print("* llm.c (bf16, its own kernels) was measured earlier on an H200, not in this call; the faster peer is the "
          "larger of it and this call's PyTorch; ratios > 1: qeffect is faster")
    for r in rows:
        pt = r["pytorch"] or {}
        if pt.get("errors"):
            print("PyTorch %s batch %s failed trials: %s" % (r["model"], r["batch"], str(pt["errors"][0])[-200:]))
        if pt.get("n"):
            print("PyTorch %s batch %s: torch %s on %s, compile %s, autocast %s, sdpa %s, %s" % (
                r["model"], r["batch"], pt.get("torch"), pt.get("gpu") or "cpu", pt.get("compile"), pt.get("autocast"),
                pt.get("sdpa"), pt.get("optimizer")))
        if r["pytorch_earlier"] and pt.get("tps"):
            print("PyTorch %s batch %s: %.1fk now, %.1fk measured earlier" % (
                r["model"], r["batch"], pt["tps"] / 1e3, r["pytorch_earlier"] / 1e3))
    with open(out_json, "w") as f:
        json.dump(dict(config=config, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
