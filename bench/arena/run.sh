#!/usr/bin/env bash
# Issue 19 on one GPU (one device call; builds nothing): the accumulating gradient arena
# against per-microbatch views on the CUDA backend.
#   bash bench/arena/run.sh BUILD_DIR OUT_DIR [TRIALS]
# BUILD_DIR holds qeffect and backend_test_cuda_{ops,attn,layers,capture} from `make gpu-build`.
# 1. the cuda op tests; among them backend_test_cuda_ops (beta = 1 accumulation in the cuBLASLt
#    epilogue gives the bytes of beta = 0 plus a separate add, with the algorithm fixed per shape);
# 2. tiny --pp 1 on cuda: per-mb and accumulate runs byte-identical (eager/graph x direct/copy);
# 3. tiny checkpoint at step 3 resumed in a fresh process to step 6 equals the uninterrupted run;
# 4. h4096 M=8 --pp 1 captured direct: step time (median of steps 6.. in each process, then
#    the median over TRIALS fresh processes) and peak allocation, per-mb against accumulate.
# Prints a table last and writes results.json into OUT_DIR.
set -u
B=${1:?BUILD_DIR}; OUT=${2:?OUT_DIR}; TRIALS=${3:-3}
Q=$B/qeffect
mkdir -p "$OUT"
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0
declare -A R
note() { R[$1]=$2; printf '%-40s %s\n' "$1" "$2"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"

for t in ops attn layers capture; do
  if "$B/backend_test_cuda_$t" >"$OUT/cuda_$t.log" 2>&1; then note cuda_$t "pass ($(tail -1 "$OUT/cuda_$t.log"))"; else note cuda_$t "FAIL ($(tail -1 "$OUT/cuda_$t.log"))"; fi
done

T="--backend cuda --preset tiny --pp 1 --micro 4 --amax-history 4 --quiet --steps 12"
for ex in eager graph; do for g in direct copy; do
  "$Q" train $T --exec $ex --grad $g --arena per-mb --run-dir "$W/pm-$ex-$g" >>"$OUT/runs.log" 2>&1
  "$Q" train $T --exec $ex --grad $g --arena accumulate --run-dir "$W/acc-$ex-$g" >>"$OUT/runs.log" 2>&1
  if r=$("$Q" compare "$W/pm-$ex-$g" "$W/acc-$ex-$g" 2>&1 | tail -1) && [[ $r == identical* ]]; then
    note "tiny_permb_vs_accumulate_${ex}_$g" "pass: $r"; else note "tiny_permb_vs_accumulate_${ex}_$g" "FAIL: $r"; fi
done; done

"$Q" train --backend cuda --preset tiny --pp 1 --micro 4 --amax-history 4 --quiet --steps 3 --ckpt-every 3 --exec graph --run-dir "$W/part" >>"$OUT/runs.log" 2>&1
"$Q" resume --run-dir "$W/part" --steps 6 --quiet >>"$OUT/runs.log" 2>&1
"$Q" train --backend cuda --preset tiny --pp 1 --micro 4 --amax-history 4 --quiet --steps 6 --exec graph --run-dir "$W/full" >>"$OUT/runs.log" 2>&1
if r=$("$Q" compare "$W/full" "$W/part" 2>&1 | tail -1) && [[ $r == identical* ]]; then note tiny_resume_exact "pass: $r"; else note tiny_resume_exact "FAIL: $r"; fi

H="--backend cuda --preset h4096 --pp 1 --micro 8 --exec graph --grad direct --steps 30 --trace off --quiet --json"
for t in $(seq 1 "$TRIALS"); do
  for a in per-mb accumulate; do
    "$Q" train $H --arena $a >"$OUT/h4096-$a-$t.json" 2>>"$OUT/runs.log" || echo "h4096 $a trial $t failed" >>"$OUT/runs.log"
  done
done
python3 - "$OUT" "$TRIALS" <<'PY' | tee "$OUT/h4096.txt"
import json, statistics, sys, glob
out, trials = sys.argv[1], int(sys.argv[2])
res = {}
for a in ("per-mb", "accumulate"):
    ms, peak, arena, loss = [], [], [], []
    for t in range(1, trials + 1):
        try:
            line = [l for l in open(f"{out}/h4096-{a}-{t}.json") if l.startswith("{")][-1]
            d = json.loads(line)
        except Exception as e:
            continue
        ms.append(statistics.median(d["step_ms"][5:]))
        peak.append(d["alloc_peak_bytes"]); arena.append(d["arena_bytes"]); loss.append(d["last_loss"])
    res[a] = {"trials": len(ms), "ms": statistics.median(ms) if ms else None, "ms_all": ms,
              "alloc_peak_gib": max(peak) / 2**30 if peak else None, "arena_gib": arena[0] / 2**30 if arena else None,
              "last_loss": loss}
    print(f"h4096 M=8 pp1 captured direct {a:10s}: {res[a]['ms']} ms/step (trials {ms}), "
          f"peak alloc {res[a]['alloc_peak_gib']} GiB, arena {res[a]['arena_gib']} GiB, last loss {loss}")
json.dump(res, open(f"{out}/h4096.json", "w"), indent=1)
PY
{ echo "{"; for k in "${!R[@]}"; do printf '  "%s": "%s",\n' "$k" "${R[$k]//\"/\'}"; done; echo '  "done": true'; echo "}"; } >"$OUT/results.json"
echo; echo "== summary"; for k in $(printf '%s\n' "${!R[@]}" | sort); do printf '%-40s %s\n' "$k" "${R[$k]}"; done
rm -rf "$W"
