#!/usr/bin/env bash
# bench/fidelity/gpu.sh - FP8 against bf16 on a real model (issue 20): gpt2 (d12, seq 1024)
# trained from scratch on GPT-2 tokens of the Brown corpus, same data, seed and settings, once
# with --precision fp8 and once with --precision bf16; held-out cross-entropy (the val shard)
# every EVAL steps; both curves in one PNG (qeffect plot --vs); the last held-out losses and
# their ratio in a table last.  The goal: FP8's final held-out loss within 2% of bf16's.
# usage: bench/fidelity/gpu.sh PKG OUT   (PKG: qeffect, brown_train.bin, brown_val.bin)
# knobs: FID_STEPS (2000), FID_BATCH (4), FID_MICRO (2), FID_EVAL (100), FID_LR (3e-4),
#        FID_ATTN (auto), FID_EXTRA (flags appended, e.g. a small shape on --backend cpu)
set -u
PKG=${1:?PKG}; OUT=${2:?OUT}
mkdir -p "$OUT"
STEPS=${FID_STEPS:-2000}; B=${FID_BATCH:-4}; M=${FID_MICRO:-2}; EVAL=${FID_EVAL:-100}; LR=${FID_LR:-3e-4}
ATTN=${FID_ATTN:-auto}
RUNS=$(mktemp -d)
fail=0
for prec in fp8 bf16; do
  echo "== gpt2 $prec: $STEPS steps, batch $B x micro $M x seq 1024"
  "$PKG/qeffect" train --preset gpt2 --batch "$B" --micro "$M" --pp 1 --chunks 1 --precision $prec \
    --attention "$ATTN" --backend cuda --exec graph --trace off --steps "$STEPS" --lr "$LR" --amax-history 16 \
    --data "$PKG/brown_train.bin" --eval-every "$EVAL" --eval-micro 8 --log-every "$EVAL" \
    --run-dir "$RUNS/$prec" ${FID_EXTRA:-} >"$OUT/fidelity-$prec.log" 2>&1 || { echo "FAIL: $prec run"; tail -3 "$OUT/fidelity-$prec.log"; fail=1; }
  tail -2 "$OUT/fidelity-$prec.log"
done
"$PKG/qeffect" plot --run-dir "$RUNS/fp8" --vs "$RUNS/bf16" -o "$OUT/fidelity.png" || fail=1
held() { grep -o 'held-out [0-9.]*' "$OUT/fidelity-$1.log" | tail -1 | cut -d' ' -f2; }
hf=$(held fp8); hb=$(held bf16)
python3 - "$hf" "$hb" "$STEPS" <<'PY' | tee "$OUT/fidelity.txt"
import sys
f, b, n = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
r = f / b
print(f"precision  held-out loss at step {n}")
print(f"fp8        {f:.4f}")
print(f"bf16       {b:.4f}")
print(f"fp8/bf16   {r:.4f}  ({'within' if abs(r - 1) <= 0.02 else 'NOT within'} 2%)")
PY
rm -rf "$RUNS"
exit $fail
