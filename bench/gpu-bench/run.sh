#!/usr/bin/env bash
# Issue 7's benchmarks on the GPU machine, for one device call (builds nothing):
#   bash bench/gpu-bench/run.sh [BUILD_DIR] [DATA_DIR]
# BUILD_DIR: made here with `make gpu-build` and carried (carry: ["build-gpu"]); DATA_DIR holds
# brown.jsonl (gpu-data/, carried too).  Runs, each under its own time limit:
#   qeffect bench handoff --backend cuda                       (3 processes x 200 checks per protocol)
#   qeffect bench step --backend cuda --presets h2048:4,h4096:8 --trials 3 --repl 2
#   qeffect bench scale --backend cuda --preset h4096 --micro 2,4,8,16
# and leaves two files under $OUT: summary.txt (the tables) and gpu-bench.tar.gz (every JSON
# report, chart or its gnuplot script + data, and every child's log).
#
# Time: the limits add up to under 9 minutes (handoff 40 s, step 300 s + 25 s grace, scale
# 120 s + 20 s grace).  `bench step` and `bench scale` start no run that would end past their
# --budget-s (estimated from the runs before it) and rewrite their report after every run.
# The whole matrix does not fit one call: on the 2xH200 machine an h4096 run took 22-30 s
# (almost all of it setup; bench/results/step-h4096-2xH200.csv), so 5 trials x 5 configurations
# x 2 presets is roughly 15-20 minutes.  Runs go trial by trial over both presets, main series
# first, so a cut leaves whole rounds; the report says "truncated" and where it stopped.
# To complete the matrix over several calls, set (each call's report stands on its own):
#   PARTS=handoff,step STEP_PRESETS=h4096:8 TRIALS=3 REPL=0 STEP_BUDGET=470
#   PARTS=step STEP_PRESETS=h4096:8,h2048:4 TRIALS=0 REPL=2 STEP_BUDGET=480
#   PARTS=step,scale STEP_PRESETS=h2048:4 TRIALS=3 REPL=0 STEP_BUDGET=330
# Knobs (environment): PARTS, STEP_PRESETS, TRIALS, REPL, STEPS, SCALE_PRESET, SCALE_MICRO,
# HANDOFF_LIMIT, STEP_BUDGET, SCALE_BUDGET, RUN_LIMIT (one training run), BACKEND (cuda; cpu
# with tiny presets to try the script here).
set -u
B=${1:-build-gpu}; DATA=${2:-gpu-data}; OUT=${OUT:-/tmp/gpu-bench-out}
Q=$B/qeffect
PARTS=${PARTS:-handoff,step,scale}
STEP_PRESETS=${STEP_PRESETS:-h2048:4,h4096:8}
BACKEND=${BACKEND:-cuda}
TRIALS=${TRIALS:-3}; REPL=${REPL:-2}; STEPS=${STEPS:-12}
SCALE_PRESET=${SCALE_PRESET:-h4096}; SCALE_MICRO=${SCALE_MICRO:-2,4,8,16}
HANDOFF_LIMIT=${HANDOFF_LIMIT:-40}; STEP_BUDGET=${STEP_BUDGET:-300}; SCALE_BUDGET=${SCALE_BUDGET:-120}
RUN_LIMIT=${RUN_LIMIT:-150}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
W=$(mktemp -d); R=$W/gpu-bench; mkdir -p "$R"
S=$R/summary.txt
say() { echo "$*" | tee -a "$S"; }
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
T0=$(date +%s)

say "== gpu-bench $(date -u +%FT%TZ): parts $PARTS"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$S"
[ -x "$Q" ] || { say "no binary at $Q (build it with make gpu-build and carry build-gpu)"; }

# run NAME LIMIT ARGS...: one bench command under `timeout`, its stdout+stderr into NAME.txt
run() {
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  timeout -k 5 "$limit" "$Q" bench "$@" >"$R/$name.txt" 2>&1
  local rc=$?
  say "-- $name: exit $rc in $(( $(date +%s) - t )) s (limit $limit s)$([ $rc -eq 124 ] && echo ', KILLED at the limit')"
  return $rc
}

if has handoff; then
  run handoff "$HANDOFF_LIMIT" handoff --backend "$BACKEND" --procs 3 --checks 200 --out "$R/handoff"
  grep -E '^(protocol|one-way|two-way|note)' "$R/handoff.txt" | tee -a "$S"
fi
if has step; then
  run step $((STEP_BUDGET + 25)) step --backend "$BACKEND" --presets "$STEP_PRESETS" --trials "$TRIALS" --repl "$REPL" \
      --steps "$STEPS" --warmup 3 --data "$DATA/brown.jsonl" --budget-s "$STEP_BUDGET" --timeout-s "$RUN_LIMIT" --out "$R/step"
  sed -n '/^floor /p; /^preset /,$p' "$R/step.txt" | tee -a "$S"
  grep -E 'cut short|failed' "$R/step.txt" | tee -a "$S"
fi
if has scale; then
  run scale $((SCALE_BUDGET + 20)) scale --backend "$BACKEND" --preset "$SCALE_PRESET" --micro "$SCALE_MICRO" --steps "$STEPS" \
      --warmup 3 --data "$DATA/brown.jsonl" --budget-s "$SCALE_BUDGET" --timeout-s "$RUN_LIMIT" --out "$R/scale"
  sed -n '/zbv captured direct, --pp 2/,$p' "$R/scale.txt" | tee -a "$S"
  grep -E 'cut short|failed' "$R/scale.txt" | tee -a "$S"
fi
say "== total $(( $(date +%s) - T0 )) s"
cp "$S" "$OUT/summary.txt"
tar -C "$W" -czf "$OUT/gpu-bench.tar.gz" gpu-bench && echo "wrote $OUT/gpu-bench.tar.gz ($(du -k "$OUT/gpu-bench.tar.gz" | cut -f1) KiB)"
