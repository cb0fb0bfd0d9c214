#!/usr/bin/env bash
# bench/gpt2-speed/run.sh - issue 33 (FP8 that beats bf16 PyTorch on GPT-2) in one device call; builds
# nothing.
#   bash bench/gpt2-speed/run.sh PKG [OUT]
# PKG holds what `make gpu-build` made and the call needs: qeffect, backend_test_cuda_{ops,attn,layers,
# capture,fused,bf16_act,model}, brown.jsonl and brown_train.bin (`qeffect tokenize`), and optionally
# qeffect-base, the binary to compare against (timed with QE_FUSE=1, the knob it still had).
# Parts (PARTS, default tests,equiv,speed):
#   tests  the cuda backend tests against the cpu reference (each prints its bounds)
#   equiv  bench/gpu-check/run.sh PARTS=det,fuse: two tiny runs byte-identical, the fused forms byte for
#          byte, a 2-layer gpt2 (batch 2, seq 512, flash): split == reference, two runs identical, resume
#   speed  qeffect bench step --pp 1 captured direct, tokens/s and peak allocation, for every item of
#          MODELS (PRESET:M:B, default gpt2:1:16) and precision (PRECS, default fp8,bf16), base and new in
#          turn (same machine, same call), TRIALS (2) fresh processes each, STEPS (20), WARMUP (5)
#   prof   ncu of PROF_MODEL (gpt2, batch 16, one microbatch, eager, 2 steps): gpu time per kernel of the
#          second step (bench/gpu-prof/ncu_sum.py)
# Writes OUT/summary.txt (the table last) and OUT/logs.tar.gz.
set -u
P=${1:-gpu-pkg}; OUT=${2:-${OUT:-/tmp/gpt2-speed}}
HERE=$(cd "$(dirname "$0")" && pwd)
PARTS=${PARTS:-tests,equiv,speed}; MODELS=${MODELS:-gpt2:1:16}; PRECS=${PRECS:-fp8,bf16}
TRIALS=${TRIALS:-2}; STEPS=${STEPS:-20}; WARMUP=${WARMUP:-5}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"; L=$(mktemp -d); S=$OUT/summary.txt; : >"$S"
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
say() { echo "$*" | tee -a "$S"; }
declare -a ROWS
row() { ROWS+=("$(printf '%-46s %s' "$1" "$2")"); say "$(printf '%-46s %s' "$1" "$2")"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$S"

if has tests; then
  for t in ops attn layers capture fused bf16_act model; do
    b=$P/backend_test_cuda_$t
    [ -x "$b" ] || { row "cuda_$t" "not carried"; continue; }
    if timeout -k 5 300 "$b" >"$L/cuda_$t.log" 2>&1; then row "cuda_$t" "pass ($(tail -1 "$L/cuda_$t.log"))"
    else row "cuda_$t" "FAIL: $(grep -m3 FAIL "$L/cuda_$t.log" | tr '\n' ' ')"; fi
  done
fi

if has equiv; then
  # two ranks on one GPU: NCCL refuses them, the host links carry their messages (GPU.md)
  QE_P2P=host PARTS=det,fuse OUT=$L/check bash "$HERE/../gpu-check/run.sh" "$P" "$P" "$L/check" >"$L/check.txt" 2>&1
  grep -E 'pass|FAIL' "$L/check.txt" | grep -v '^name' | while read -r l; do say "$l"; done
fi

if has speed; then
  for m in ${MODELS//,/ }; do
    for prec in ${PRECS//,/ }; do
      for side in base new; do
        q=$P/qeffect; env=""
        if [ $side = base ]; then q=$P/qeffect-base; env="QE_FUSE=1"; [ -x "$q" ] || continue; fi
        d=$L/step-$side-${m//:/-}-$prec
        env $env timeout -k 5 420 "$q" bench step --backend cuda --pp 1 --presets "$m" --precision "$prec" \
          --configs captured_direct --trials "$TRIALS" --repl 0 --steps "$STEPS" --warmup "$WARMUP" --floor off \
          --data "$P/brown_train.bin" --out "$d" >"$d.txt" 2>&1
        tps=$(python3 - "$d/step.json" <<'PY' 2>/dev/null
import json, sys
def cells(x):
    if isinstance(x, dict):
        if isinstance(x.get("tokens_per_s"), (int, float)):
            yield x
        for v in x.values():
            yield from cells(v)
    elif isinstance(x, list):
        for v in x:
            yield from cells(v)
for c in cells(json.load(open(sys.argv[1]))):
    print(f"{c['tokens_per_s']:.0f} tok/s, step {c['step_ms']:.2f} ms, peak alloc {c['alloc_peak_bytes'] / 2**30:.2f} GiB,"
          f" growth {c.get('alloc_growth_bytes', 'n/a')}")
    break
PY
)
        [ -n "$tps" ] || tps="$(grep -E ' main [0-9]+/[0-9]+:' "$d.txt" | tr -s ' ' | tr '\n' ';')"
        row "$side $m $prec" "${tps:-FAIL (see logs)}"
      done
    done
  done
fi

if has prof; then
  PM=${PROF_MODEL:-"--preset gpt2 --batch 16"}
  say "== ncu: $PM --pp 1 --chunks 1 --micro 1, eager, 2 steps"
  # shellcheck disable=SC2086
  timeout -k 5 400 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --log-file "$L/ncu.csv" "$P/qeffect" train --backend cuda $PM --pp 1 --chunks 1 --micro 1 --steps 2 \
    --data "$P/brown_train.bin" --trace off --log-every 1 >"$L/ncu-run.txt" 2>&1
  python3 "$HERE/../gpu-prof/ncu_sum.py" "$L/ncu.csv" >"$OUT/kernels.txt" 2>&1
  head -40 "$OUT/kernels.txt" | tee -a "$S"
  gzip -f "$L/ncu.csv"
fi

say ""; say "== summary"; for r in "${ROWS[@]}"; do say "$r"; done
tar czf "$OUT/logs.tar.gz" -C "$L" . 2>/dev/null
