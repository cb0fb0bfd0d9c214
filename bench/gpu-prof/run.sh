#!/usr/bin/env bash
# Where an h4096 step's time goes, for one device call (builds nothing):
#   bash bench/gpu-prof/run.sh [PKG_DIR] [DATA_DIR]
# PKG_DIR holds the qeffect binary of `make gpu-build`; DATA_DIR holds brown.jsonl.  Leaves
# under $OUT: prof.txt (what was run and its output) and ncu.csv.gz (one row per kernel).
#   time:  qeffect train h4096 --pp 2 --micro $MICRO, captured direct, $STEPS steps (--json)
#   prof:  the same, eager, QE_PROFILE=1 (every action waited for: sums exceed the step)
#   ncu:   gpu__time_duration and DRAM bytes of every kernel of an h4096 --pp 1 --chunks 4
#          eager run of 2 steps (the whole model on one GPU; bench/gpu-prof/ncu_sum.py sums
#          the second step per kernel)
# Knobs: PARTS (time,prof,ncu), MICRO (8), STEPS (12), SCHEDULES (interleaved), EXTRA (flags)
set -u
P=${1:-gpu-pkg}; DATA=${2:-gpu-data}; OUT=${OUT:-/tmp/gpu-prof-out}
Q=$P/qeffect
PARTS=${PARTS:-time,prof,ncu}; MICRO=${MICRO:-8}; STEPS=${STEPS:-12}
SCHEDULES=${SCHEDULES:-interleaved}; EXTRA=${EXTRA:-}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"; S=$OUT/prof.txt
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
say() { echo "$*" | tee -a "$S"; }
common="--backend cuda --preset h4096 --data $DATA/brown.jsonl --trace off $EXTRA"
if has time; then
  for sch in ${SCHEDULES//,/ }; do
    for g in direct copy; do
      say "== time: $sch captured $g, M=$MICRO"
      timeout -k 5 120 "$Q" train $common --pp 2 --micro "$MICRO" --schedule "$sch" --exec graph \
        --grad "$g" --steps "$STEPS" --log-every 4 --json 2>&1 | grep -vE '^\s*$' | tail -n 12 | tee -a "$S"
      [ "$g" = direct ] && [ -n "${DIRECT_ONLY:-}" ] && break
    done
  done
fi
if has prof; then
  say "== prof: interleaved eager, M=$MICRO, QE_PROFILE=1"
  QE_PROFILE=1 timeout -k 5 120 "$Q" train $common --pp 2 --micro "$MICRO" --steps 8 --log-every 4 2>&1 | tee -a "$S"
fi
if has ncu; then
  say "== ncu: --pp 1 --chunks 4 --micro $MICRO, eager, 2 steps"
  timeout -k 5 300 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --log-file "$OUT/ncu.csv" "$Q" train $common --pp 1 --chunks 4 --micro "$MICRO" --steps 2 \
    --log-every 1 2>&1 | tail -n 5 | tee -a "$S"
  python3 "$(dirname "$0")/ncu_sum.py" "$OUT/ncu.csv" 2>&1 | tee -a "$S"
  gzip -f "$OUT/ncu.csv"
fi
