#!/usr/bin/env bash
# Issue 34 on one GPU (one device call; builds nothing): the flash attention's passes against
# PyTorch's scaled_dot_product_attention, on the same shapes, in the same call.
#   bash bench/attention/run.sh BUILD_DIR OUT_DIR
# BUILD_DIR holds qeffect from `make gpu-build`.  Knobs: SHAPES (B:NH:T:D list; default gpt2 b16,
# gpt2-xl b8, seq 4096 at head dim 64 and 128), MIN_MS (300: time each pass at least this long),
# PY (python3 with torch; the peer is skipped, saying so, without it), SDPA_BACKEND (default|flash).
# Writes OUT_DIR/qeffect.jsonl, sdpa.jsonl and table.txt; prints the table last.
set -u
B=${1:?BUILD_DIR}; OUT=${2:?OUT_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
SHAPES=${SHAPES:-16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128}
MIN_MS=${MIN_MS:-300}; PY=${PY:-python3}; SDPA_BACKEND=${SDPA_BACKEND:-default}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
"$B/qeffect" bench attention --backend cuda --shapes "$SHAPES" --min-ms "$MIN_MS" --json >"$OUT/qeffect.jsonl" 2>"$OUT/qeffect.err"
echo "qeffect bench attention: exit $? ($(wc -l <"$OUT/qeffect.jsonl") shapes)"; cat "$OUT/qeffect.err"
if $PY -c 'import torch' 2>/dev/null; then
  $PY "$HERE/../peers/attention_torch.py" --shapes "$SHAPES" --min-ms "$MIN_MS" --backend "$SDPA_BACKEND" \
    >"$OUT/sdpa.jsonl" 2>"$OUT/sdpa.err"
  echo "PyTorch SDPA: exit $? ($(wc -l <"$OUT/sdpa.jsonl") shapes)"; tail -3 "$OUT/sdpa.err"
else
  echo "PyTorch SDPA skipped: $PY cannot import torch" >"$OUT/sdpa.err"; : >"$OUT/sdpa.jsonl"; cat "$OUT/sdpa.err"
fi
$PY - "$OUT/qeffect.jsonl" "$OUT/sdpa.jsonl" <<'PY' | tee "$OUT/table.txt"
import json, sys
def load(p):
    d = {}
    for line in open(p):
        if line.startswith("{"):
            o = json.loads(line); d[o["shape"]] = o
    return d
q, t = load(sys.argv[1]), load(sys.argv[2])
f = lambda v: "%8.1f" % v if isinstance(v, (int, float)) else "%8s" % "-"
r = lambda a, b: "%6.2f" % (a / b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "%6s" % "-"
print("causal attention, TFLOP/s (forward 2 B NH T^2 D, backward 2.5x); ratio = qeffect / SDPA")
print("%-16s %8s %8s %6s   %8s %8s %6s" % ("B:NH:T:D", "qe fwd", "sdpa fwd", "ratio", "qe bwd", "sdpa bwd", "ratio"))
for s in list(q) + [s for s in t if s not in q]:
    a, b = q.get(s, {}), t.get(s, {})
    print("%-16s %s %s %s   %s %s %s" % (s, f(a.get("fwd_tflops")), f(b.get("fwd_tflops")), r(a.get("fwd_tflops"), b.get("fwd_tflops")),
          f(a.get("bwd_tflops")), f(b.get("bwd_tflops")), r(a.get("bwd_tflops"), b.get("bwd_tflops"))))
    for who, o in (("qeffect", a), ("sdpa", b)):
        if o.get("unsupported") or o.get("error"):
            print("    %s: %s" % (who, o.get("unsupported") or o.get("error")))
PY
