#!/usr/bin/env bash
# qeffect bench on the cpu backend, tiny preset, minimal counts: each subcommand runs, its
# JSON report has the fields the GPU run will be read for, and they are sane: no stale
# read with the two-way handoff (and none with one-way either here: cpu ops are synchronous),
# 3*M*2 graphs and 3*M*2 handoffs per replaying step in every captured configuration, no
# persistent growth, floor > 0 with the floor's parameter count matching the model, a PNG.
# Failure paths: a failing run makes the bench exit 1 and is recorded; a run past its time
# limit is killed; --budget-s cuts a series short and says so; bad flags exit 2.
# bench step --pp 1 (one rank, one chunk): a row per precision and PRESET:M:B item, the
# shape flags reach the children, tokens/s = micro x batch x seq / step time.
set -u
Q=${1:?usage: bench.sh QEFFECT [SHARED]}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }
# py FILE CODE: run python checks against the JSON report d; prints ok/FAIL lines itself
py() { python3 - "$1" <<PY || fail=1
import json, math, sys
d = json.load(open(sys.argv[1]))
errs = []
def want(cond, what):
    if not cond: errs.append(what)
$2
for e in errs: print("FAIL:", e)
if errs: sys.exit(1)
print("ok:", sys.argv[1], "checks")
PY
}

# 1. handoff
"$Q" bench handoff --procs 2 --checks 20 --out h >h.out 2>&1 || { cat h.out; bad "bench handoff exited $?"; }
grep -q 'synchronously' h.out || bad "handoff output does not say cpu ops run synchronously"
py h/handoff.json '
t = d["totals"]
want(t["two-way"]["checks"] == 40 and t["one-way"]["checks"] == 40, "40 checks per protocol: %s" % t)
want(t["two-way"]["stale"] == 0, "two-way stale reads: %s" % t["two-way"])
want(t["one-way"]["stale"] == 0, "one-way stale reads on the synchronous cpu backend: %s" % t["one-way"])
want(d["ok"] is True, "ok flag")
runs = d["runs"]
want(len(runs) == 4 and sorted((r["protocol"], r["proc"]) for r in runs) == [("one-way",1),("one-way",2),("two-way",1),("two-way",2)], "one run per protocol and process")
want(all(r["synchronous_backend"] and r["graph_ops"] == 9 and r["checks"] == 20 for r in runs), "8 fills + marker captured, 20 checks each")
'

# 2. floor alone
"$Q" bench floor --preset tiny --micro 4 --json >f.json 2>f.err || { cat f.err; bad "bench floor exited $?"; }
py f.json '
want(d["model_check"] == "ok", "model check: %s" % d["model_check"])
want(d["gemm"]["tflops"] > 0 and d["copy"]["gbps"] > 0, "rates > 0")
for pl in ("interleaved", "zbv"):
    p = d["placements"][pl]
    want(p["floor_ms"] > 0 and len(p["ranks"]) == 2, pl + " floor")
    want(max(r["floor_ms"] for r in p["ranks"]) == p["floor_ms"], pl + ": floor is the heavier rank")
want(d["placements"]["zbv"]["ranks"][0]["stages"] == [0, 3], "zbv rank 0 holds stages 0 and 3")
want(d["placements"]["interleaved"]["ranks"][0]["stages"] == [0, 2], "interleaved rank 0 holds stages 0 and 2")
# tiny: T=32 H=64 F=256 V=256; stage flops per microbatch = 6*T*sum(in*out); M=4
per = 6*32*(64*192 + 64*64 + 64*256 + 256*64); head = 6*32*64*256
want(d["placements"]["interleaved"]["ranks"][1]["gemm_flops"] == 4*(2*per + head), "interleaved rank 1 FLOPs")
want(d["placements"]["zbv"]["ranks"][0]["gemm_flops"] == 4*(2*per + head), "zbv rank 0 FLOPs")
# gradient bytes of interleaved rank 0 (stages 0 and 2), M=4: the matrix arena 2M passes; the
# non-matrix sum but the embedding (biases, layernorms, wpe) 2 + 4(M-1); wte cleared and read
# once each, plus its token rows 1 + 2(M-1) times
mat = 2*(64*192 + 64*64 + 64*256 + 256*64); other = 2*(9*64 + 256) + 32*64; wte = 256*64
want(d["placements"]["interleaved"]["ranks"][0]["grad_bytes"] == 4*(8*mat + 14*other + 2*wte + 7*32*64),
     "interleaved rank 0 gradient bytes %s" % d["placements"]["interleaved"]["ranks"][0]["grad_bytes"])
'

# 3. step: five configurations, main + replication
"$Q" bench step --presets tiny:4 --trials 1 --repl 1 --steps 5 --out s >s.out 2>&1 || { cat s.out; bad "bench step exited $?"; }
[ "$(head -c 8 s/step-tiny.png 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || bad "no PNG chart s/step-tiny.png"
grep -q 'captured direct (main) / floor' s.out || bad "step output lacks the floor ratio"
py s/step.json '
want(d["truncated"] is False, "not truncated")
p = d["presets"][0]
want(p["preset"] == "tiny" and p["micro"] == 4, "preset")
want(p["floor_ms_interleaved"] > 0 and p["floor_ms_zbv"] > 0, "floor > 0")
want(p["chart"]["png"] == "step-tiny.png", "chart recorded")
names = ["reference_eager", "qeffect_eager", "captured_copy", "captured_direct", "captured_zbv_direct"]
for se in ("main", "repl"):
    cs = p["series"][se]
    want([c["config"] for c in cs] == names, se + ": five configurations")
    for c in cs:
        cap = c["config"].startswith("captured")
        n = c["config"] + " " + se
        want(c["trials"] == 1 and c["step_ms"] > 0 and c["setup_ms"] > 0, n + ": step and setup times")
        want(c["graphs"] == (24 if cap else 0) == c["expected_graphs"], n + ": graphs %s" % c["graphs"])
        want(c["handoffs_per_step"] == (24 if cap else 0), n + ": handoffs per step %s" % c["handoffs_per_step"])
        want(c["arena_bytes"] > 0 and c["alloc_peak_bytes"] > c["arena_bytes"], n + ": arena and peak")
        want(c["alloc_growth_bytes"] == 0, n + ": persistent growth %s" % c["alloc_growth_bytes"])
        want(c["speedup"] > 0 and c["over_floor"] > 0 and c["floor_ms"] > 0, n + ": speedup and floor ratio")
        want("break_even_steps" in c and "mem_growth_bytes" in c and c["mem_probe"] == "rss", n + ": fields")
    ref = cs[0]
    want(ref["speedup"] == 1 and ref["peak_over_reference"] == 1 and ref["break_even_steps"] is None, se + ": reference row")
    cp = [c for c in cs if c["config"] == "captured_copy"][0]
    want(cp["peak_over_reference"] > 1, se + ": copy mode holds scratch beyond the reference")
want(len(d["runs"]) == 10 and all(r["ok"] and len(r["slowest_step_ms"]) == 5 and len(r["ranks"]) == 2 for r in d["runs"]), "ten raw runs")
'

# 3b. step --pp 1 (one GPU mode of issue 20): a tiny GPT-2 shape, rows per precision, tokens/s
"$Q" bench step --pp 1 --presets gpt2:2,gpt2:1:4 --layers 1 --hidden 32 --heads 2 --seq 64 --vocab 256 --batch 2 \
  --trials 1 --repl 0 --steps 4 --warmup 2 --out p1 >p1.out 2>&1 || { cat p1.out; bad "bench step --pp 1 exited $?"; }
grep -q 'tok/s' p1.out || bad "--pp 1 table lacks tok/s"
grep -q 'pp 1, dp 1, 2 microbatches.*precision bf16' p1/logs/gpt2-m2-b2-bf16-main-1-captured_direct.log || bad "bf16 row's child is not --pp 1 bf16"
grep -q 'hidden 32, heads 2, ffn 128, seq 64, batch 4' p1/logs/gpt2-m1-b4-fp8-main-1-reference_eager.log || bad "PRESET:M:B batch or shape flags not passed"
py p1/step.json '
want(d["pp"] == 1 and d["truncated"] is False, "pp 1, not truncated")
want(d["shape_overrides"] == {"layers": 1, "hidden": 32, "heads": 2, "seq": 64, "vocab": 256}, "shape %s" % d["shape_overrides"])
rows = [(p["preset"], p["micro"], p["batch"], p["precision"]) for p in d["presets"]]
want(rows == [("gpt2", 2, 2, "fp8"), ("gpt2", 2, 2, "bf16"), ("gpt2", 1, 4, "fp8"), ("gpt2", 1, 4, "bf16")], "rows %s" % rows)
for p in d["presets"]:
    n = p["tag"]
    want(p["pp"] == 1 and p["chunks_per_rank"] == 1 and p["seq"] == 64, n + ": pp, chunks, seq")
    want(p["tokens_per_step"] == p["micro"] * p["batch"] * 64 == 256, n + ": tokens per step")
    want(p["floor"] is None and p["chart"]["png"] == "step-%s.png" % n, n + ": no floor, chart")
    cs = p["series"]["main"]
    want([c["config"] for c in cs] == ["reference_eager", "captured_direct"], n + ": default configurations")
    for c in cs:
        cap = c["config"] == "captured_direct"
        want(c["graphs"] == (3 * p["micro"] if cap else 0) == c["expected_graphs"], n + " " + c["config"] + ": graphs")
        want(c["alloc_growth_bytes"] == 0, n + ": growth")
        tps = p["tokens_per_step"] / (c["step_ms"] / 1e3)
        want(abs(c["tokens_per_s"] - tps) < 1e-6 * tps and c["tokens_per_s_trials"] == [c["tokens_per_s"]], n + ": tokens/s")
want(all(r["precision"] in ("fp8", "bf16") and len(r["ranks"]) == 1 for r in d["runs"]) and len(d["runs"]) == 8, "eight one-rank runs")
'

# 4. scale
"$Q" bench scale --preset tiny --micro 2,4 --steps 4 --out c >c.out 2>&1 || { cat c.out; bad "bench scale exited $?"; }
py c/scale.json '
rows = d["rows"]
want([r["micro"] for r in rows] == [2, 4], "two rows")
for r in rows:
    M = r["micro"]
    want(r["graphs"] == 3*M*2 == r["expected_graphs"], "M=%d graphs %s" % (M, r["graphs"]))
    want(r["step_ms"] > 0 and abs(r["tokens_per_s"] - M*32/(r["step_ms"]/1e3)) < 1e-6*r["tokens_per_s"], "M=%d tokens/s" % M)
    want(len(r["peak_live_tapes_per_rank"]) == 2 and min(r["peak_live_tapes_per_rank"]) >= 1, "M=%d peak live tapes" % M)
    want(len(r["delayed_dw_per_rank"]) == 2 and r["alloc_growth_bytes"] == 0, "M=%d delayed dW, growth" % M)
    want(r["arena_bytes"] > 0 and r["alloc_peak_bytes"] > r["arena_bytes"] and r["capture_ms"] > 0, "M=%d memory, capture" % M)
want(rows[1]["arena_bytes"] == rows[0]["arena_bytes"], "arena capacity does not grow with M (accumulating arena)")
'
# --pp 1 (one rank, both chunks) and --arena per-mb: the arena now grows with M, by the same
# bytes per microbatch as one accumulating view set; --arena is recorded; a bad kind is refused.
"$Q" bench scale --preset tiny --pp 1 --arena per-mb --micro 2,4 --steps 4 --out p1 >p1.out 2>&1 || { cat p1.out; bad "bench scale --pp 1 exited $?"; }
py p1/scale.json '
rows = d["rows"]
want(d["pp"] == 1 and d["arena"] == "per-mb" and "--pp 1" in d["config"], "pp and arena recorded: %s" % d["config"])
want([r["micro"] for r in rows] == [2, 4] and all(r["trials"] == 1 for r in rows), "two rows at --pp 1")
want(all(len(r["peak_live_tapes_per_rank"]) == 1 for r in rows), "one rank per row")
want(rows[1]["arena_bytes"] == 2 * rows[0]["arena_bytes"], "per-mb arena doubles from M=2 to 4: %s" % [r["arena_bytes"] for r in rows])
'
"$Q" bench scale --preset tiny --arena sideways --out p2 >p2.out 2>&1
rc=$?; [ $rc -eq 2 ] && grep -q "accumulate or per-mb" p2.out || bad "bench scale --arena sideways: exit $rc, $(cat p2.out)"
"$Q" bench scale --preset tiny --pp 9 --out p2 >p2.out 2>&1
rc=$?; [ $rc -eq 2 ] && grep -q -- "--pp 1..8" p2.out || bad "bench scale --pp 9: exit $rc, $(cat p2.out)"

# 5. failure paths
"$Q" bench step --presets tiny:4 --configs captured_direct --trials 1 --repl 0 --floor off --data "$W/none.jsonl" --out e >e.out 2>&1
rc=$?; [ $rc -eq 1 ] || bad "a failing run: exit $rc, expected 1"
py e/step.json '
r = d["runs"]
want(len(r) == 1 and r[0]["ok"] is False and "none.jsonl" in r[0]["error"], "failed run recorded with its error: %s" % r)
'
start=$(date +%s%N)
"$Q" bench scale --preset tiny --micro 2 --steps 100000 --timeout-s 0.5 --out k >k.out 2>&1
rc=$?; took=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -eq 1 ] || bad "a run past its time limit: exit $rc, expected 1"
[ $took -lt 5000 ] || bad "the time limit took ${took} ms to act"
py k/scale.json '
r = d["runs"]
want(len(r) == 1 and r[0]["timed_out"] is True and r[0]["ok"] is False, "timed-out run recorded: %s" % r)
'
"$Q" bench step --presets tiny:4 --configs reference_eager,captured_direct --trials 3 --repl 0 --steps 3 --warmup 2 --floor off --budget-s 0.001 --out b >b.out 2>&1 || bad "budgeted bench exited $?"
py b/step.json '
want(d["truncated"] is True and "budget" in d["truncated_why"], "truncated by the budget: %s" % d["truncated_why"])
want(len(d["runs"]) == 1, "one run before the budget stopped it: %d" % len(d["runs"]))
'
for args in "step --pp 3" "step --pp 1 --configs captured_zbv_direct" "step --pp 1 --floor on" "step --batch 2 --floor on" "step --precision fp9" "step --precision fp8,fp8" "step --presets gpt2:1:0" "step --pp 1 --layers 0" \
            "step --warmup 1" "step --presets tiny:3" "step --configs nope" "scale --micro 2,,4" "handoff --procs 0" "nosuch" "floor --preset nope"; do
  "$Q" bench $args >u.out 2>&1; rc=$?
  [ $rc -eq 2 ] || bad "bench $args: exit $rc, expected 2 ($(head -1 u.out))"
done
for sub in handoff step scale floor; do
  "$Q" bench $sub --help | grep -q "usage: qeffect bench $sub" || bad "bench $sub --help"
done
[ $fail -eq 0 ] && ok "bench handoff, floor, step, scale on the cpu backend"
exit $fail
