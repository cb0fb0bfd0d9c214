#!/usr/bin/env bash
# One device call for a flash-attention change: checks, then timings beside the peers.
#   bash bench/attention/check.sh PKG OUT [VARIANT...]
# PKG : folder with the binaries carried to the GPU machine (stripped, as `make gpu-build` made
#       them): qeffect (the change), qeffect-VARIANT for each VARIANT (e.g. head: main before
#       the change), backend_test_cuda_* (whichever are there run), brown_train.bin (GPT-2 tokens)
# OUT : where the logs go ($OUT of the device tool)
# Runs, in this order (each step's verdict printed as one line):
#   - every backend_test_cuda_* in PKG (logs appended to OUT/cuda_tests.log);
#   - gpt2 with 2 layers, batch 2, at seq 512 and 2048: again, --backward full, --exec graph
#     and 2 steps + resume to 4 must give fingerprints identical to the first run, and so must
#     each variant binary (a change to the kernels' speed must not change a byte);
#   - qeffect bench attention for each binary over SHAPES, twice, interleaved (OUT/attn-NAME.txt),
#     then PyTorch's SDPA on the same shapes (bench/attention/run.sh, OUT/attn-sdpa.log);
#   - the gpt2 b16 fp8 step (captured, one microbatch), median of steps 6-15, each binary twice,
#     interleaved.
# Knobs (environment): SHAPES (B:NH:T:D,...), MIN_MS (100), TEST_LIMIT (90 s a test binary),
# STEP_PRESET (gpt2), STEP_BATCH (16), SDPA (1; 0 leaves the PyTorch peer out).
set -u
P=${1:?usage: check.sh PKG OUT [VARIANT...]}; O=${2:?usage: check.sh PKG OUT [VARIANT...]}; shift 2
VARIANTS=("$@")
SHAPES=${SHAPES:-16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128}
MIN_MS=${MIN_MS:-100}; TEST_LIMIT=${TEST_LIMIT:-90}
STEP_PRESET=${STEP_PRESET:-gpt2}; STEP_BATCH=${STEP_BATCH:-16}
W=$(mktemp -d); mkdir -p "$O"
Q=$P/qeffect
[ -x "$Q" ] || { echo "check.sh: no qeffect in $P" >&2; exit 2; }
for v in "${VARIANTS[@]}"; do
  [ -x "$P/qeffect-$v" ] || { echo "check.sh: no qeffect-$v in $P" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader

for t in "$P"/backend_test_cuda_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  timeout "$TEST_LIMIT" "$t" > "$W/$n.log" 2>&1; echo "$n rc=$? $(tail -1 "$W/$n.log")"
  { echo "=== $n"; cat "$W/$n.log"; } >> "$O/cuda_tests.log"
done
grep -hiE "fail|error" "$W"/backend_test_cuda_*.log 2>/dev/null | head -20

for seq in 512 2048; do
  G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq $seq --pp 1"
  timeout 60 "$Q" train $G --run-dir "$W/g1" > "$W/g1.out" 2>&1; echo "gpt2 L2 seq $seq rc=$?"
  timeout 60 "$Q" train $G --run-dir "$W/g0" > "$W/g0.out" 2>&1; echo "  again rc=$?"
  timeout 60 "$Q" train $G --backward full --run-dir "$W/g2" > "$W/g2.out" 2>&1; echo "  full rc=$?"
  timeout 60 "$Q" train $G --exec graph --run-dir "$W/g3" > "$W/g3.out" 2>&1; echo "  graph rc=$?"
  timeout 60 "$Q" train $G --steps 2 --ckpt-every 2 --run-dir "$W/g4" > "$W/g4.out" 2>&1 &&
    timeout 60 "$Q" resume --run-dir "$W/g4" --steps 4 > "$W/g4r.out" 2>&1; echo "  2 steps + resume to 4 rc=$?"
  runs=(g0 g2 g3 g4)
  for v in "${VARIANTS[@]}"; do
    timeout 60 "$P/qeffect-$v" train $G --run-dir "$W/v-$v" > "$W/v-$v.out" 2>&1; echo "  $v rc=$?"
    runs+=("v-$v")
  done
  for x in "${runs[@]}"; do echo "  compare g1 $x: $("$Q" compare "$W/g1" "$W/$x" 2>&1 | tail -1)"; done
  tail -1 "$W/g1.out"; rm -rf "$W"/g? "$W"/v-*
done

names=("" "${VARIANTS[@]}")
for round in 1 2; do
  for v in "${names[@]}"; do
    b=$P/qeffect${v:+-$v}
    timeout 120 "$b" bench attention --backend cuda --shapes "$SHAPES" --min-ms "$MIN_MS" > "$W/a.txt" 2>&1
    echo "bench ${v:-new} (round $round) rc=$?"; cat "$W/a.txt"; cat "$W/a.txt" >> "$O/attn-${v:-new}.txt"
  done
done
if [ "${SDPA:-1}" = 1 ]; then
  SHAPES=$SHAPES MIN_MS=$MIN_MS timeout 150 bash bench/attention/run.sh "$P" "$W/attn" > "$O/attn-sdpa.log" 2>&1
  echo "sdpa bench rc=$?"; tail -8 "$O/attn-sdpa.log"
fi

for round in 1 2; do
  for v in "${names[@]}"; do
    q=qeffect${v:+-$v}
    timeout 90 "$P/$q" train --backend cuda --preset "$STEP_PRESET" --batch "$STEP_BATCH" --pp 1 --chunks 1 --micro 1 \
      --exec graph --grad direct --precision fp8 --steps 16 --trace off --quiet --json --data "$P/brown_train.bin" 2>/dev/null |
      python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$q $STEP_PRESET b$STEP_BATCH fp8 median ms (steps 6-15)', round(m,2), 'tok/s', round($STEP_BATCH*1024/m*1000))" ||
      echo "$q: step run failed"
  done
done
