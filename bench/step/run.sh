#!/usr/bin/env bash
# Step-time benchmark of the five configurations on the GPU machine (one device call):
#   reference eager  interleaved, --backward full, --exec eager
#   qeffect eager    interleaved, split, eager
#   captured copy    interleaved, split, --exec graph --grad copy
#   captured direct  interleaved, split, --exec graph --grad direct
#   captured zbv     zbv, split, --exec graph --grad direct
# for h2048 (M=4) and h4096 (M=8), --pp 2, two local chunks per rank.  Each trial is a fresh
# set of processes; the first 3 steps (eager warmup + capture) are excluded; a trial's step
# time is the median ms/step of the rest as measured by rank 0 (the loss all-reduce makes it
# the slowest rank's time).  TRIALS trials plus an independent REPL-trial replication.
#   bash bench/step/run.sh BUILD_DIR DATA_DIR OUT_DIR [PRESETS]
set -u
B=${1:-build-gpu}; DATA=${2:-gpu-data}; OUT=${3:-${OUT:-/tmp/step-out}}; PRESETS=${4:-"h2048:4 h4096:8"}
TRIALS=${TRIALS:-3}; REPL=${REPL:-2}; STEPS=${STEPS:-12}
Q=$B/qeffect
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
W=$(mktemp -d)
configs=("reference_eager|--schedule interleaved --backward full --exec eager"
         "qeffect_eager|--schedule interleaved --exec eager"
         "captured_copy|--schedule interleaved --exec graph --grad copy"
         "captured_direct|--schedule interleaved --exec graph --grad direct"
         "captured_zbv_direct|--schedule zbv --exec graph --grad direct")
echo "preset,config,series,trial,median_ms,setup_ms,graphs,replays_per_step,arena_bytes" >"$OUT/step.csv"
for pm in $PRESETS; do
  preset=${pm%%:*}; M=${pm##*:}
  for series in main repl; do
    n=$TRIALS; [ $series = repl ] && n=$REPL
    for t in $(seq $n); do
      for c in "${configs[@]}"; do
        name=${c%%|*}; flags=${c#*|}
        log="$W/$preset-$name-$series-$t.log"
        start=$(date +%s%N)
        "$Q" train --backend cuda --preset $preset --pp 2 --micro $M --steps $STEPS --lr 3e-4 --json \
            --data "$DATA/brown.jsonl" $flags >"$log" 2>&1 || { echo "FAIL $preset $name: $(tail -2 "$log")"; continue; }
        end=$(date +%s%N)
        python3 - "$log" "$preset" "$name" "$series" "$t" "$start" "$end" "$STEPS" >>"$OUT/step.csv" <<'PY'
import json, re, statistics, sys
log, preset, name, series, t, start, end, steps = sys.argv[1:]
text = open(log).read()
ms = [float(x) for x in re.findall(r'([0-9.]+) ms/step', text)]
tail = ms[3:] or ms
rows = [json.loads(l) for l in text.splitlines() if l.startswith('{')]
g = max((r['graphs'] for r in rows), default=0)
rep = max((r['replays'] for r in rows), default=0)
arena = max((r['arena_bytes'] for r in rows), default=0)
total = (int(end) - int(start)) / 1e6
setup = total - sum(ms[1:])   # process start, init, capture and the first step
print(f"{preset},{name},{series},{t},{statistics.median(tail):.3f},{setup:.0f},{g},{rep/int(steps):.1f},{arena}")
PY
      done
    done
  done
done
cp "$W"/*.log "$OUT/" 2>/dev/null
python3 - "$OUT/step.csv" "$OUT/step.json" <<'PY'
import csv, json, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = {}
print(f"\n{'preset':7} {'config':21} {'series':6} {'trials':6} {'median ms':>10} {'speedup':>8} {'setup ms':>9} {'graphs':>6} {'replays/step':>12} {'arena MB':>9}")
for preset in sorted({r['preset'] for r in rows}):
  for series in ('main', 'repl'):
    sel = [r for r in rows if r['preset'] == preset and r['series'] == series]
    ref = [float(r['median_ms']) for r in sel if r['config'] == 'reference_eager']
    refm = statistics.median(ref) if ref else float('nan')
    for cfg in ('reference_eager', 'qeffect_eager', 'captured_copy', 'captured_direct', 'captured_zbv_direct'):
      c = [r for r in sel if r['config'] == cfg]
      if not c: continue
      med = statistics.median(float(r['median_ms']) for r in c)
      setup = statistics.median(float(r['setup_ms']) for r in c)
      out.setdefault(preset, {}).setdefault(series, {})[cfg] = dict(trials=len(c), median_ms=med, speedup=refm/med, setup_ms=setup,
          graphs=int(c[0]['graphs']), replays_per_step=float(c[0]['replays_per_step']), arena_bytes=int(c[0]['arena_bytes']))
      print(f"{preset:7} {cfg:21} {series:6} {len(c):6} {med:10.2f} {refm/med:8.2f} {setup:9.0f} {int(c[0]['graphs']):6} {float(c[0]['replays_per_step']):12.1f} {int(c[0]['arena_bytes'])/2**20:9.1f}")
json.dump(out, open(sys.argv[2], 'w'), indent=2)
PY
