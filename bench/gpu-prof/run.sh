#!/usr/bin/env bash
# Where a step's time goes (h4096 by default), for one device call (builds nothing):
#   bash bench/gpu-prof/run.sh [PKG_DIR] [DATA_DIR]
# PKG_DIR holds the qeffect binary of `make gpu-build`; DATA_DIR holds brown.jsonl (or set
# DATA_FILE, e.g. a GPT-2 token shard brown_train.bin made by `qeffect tokenize`).  Leaves
# under $OUT: prof.txt (what was run and its output) and ncu.csv.gz (one row per kernel).
#   time:  qeffect train h4096 --pp 2 --micro $MICRO, captured direct, $STEPS steps (--json)
#   prof:  the same, eager, QE_PROFILE=1 (every action waited for: sums exceed the step)
#   ncu:   gpu__time_duration and DRAM bytes of every kernel of an h4096 --pp 1 --chunks 4
#          eager run of 2 steps (the whole model on one GPU; bench/gpu-prof/ncu_sum.py sums
#          the second step per kernel)
# Knobs: PARTS (time,prof,ncu), MICRO (8), STEPS (12), SCHEDULES (interleaved), EXTRA (flags),
#   PRESET (h4096), DATA_FILE ($DATA/brown.jsonl), MAP (time and prof mapping, "--pp 2"), NCU_FLAGS (the ncu
#   run's mapping, default "--pp 1 --chunks 4 --micro $MICRO").  GPT-2 small at seq 1024:
#   PRESET=gpt2 DATA_FILE=PKG/brown_train.bin MAP="--pp 1 --chunks 1" EXTRA="--batch 8"
#   NCU_FLAGS="--pp 1 --chunks 1 --micro 1"
set -u
P=${1:-gpu-pkg}; DATA=${2:-gpu-data}; OUT=${OUT:-/tmp/gpu-prof-out}
Q=$P/qeffect
PARTS=${PARTS:-time,prof,ncu}; MICRO=${MICRO:-8}; STEPS=${STEPS:-12}
SCHEDULES=${SCHEDULES:-interleaved}; EXTRA=${EXTRA:-}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
PRESET=${PRESET:-h4096}; DATA_FILE=${DATA_FILE:-$DATA/brown.jsonl}; MAP=${MAP:-"--pp 2"}
NCU_FLAGS=${NCU_FLAGS:-"--pp 1 --chunks 4 --micro $MICRO"}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"; S=$OUT/prof.txt
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
say() { echo "$*" | tee -a "$S"; }
common="--backend cuda --preset $PRESET --data $DATA_FILE --trace off $EXTRA"
if has time; then
  for sch in ${SCHEDULES//,/ }; do
    for g in direct copy; do
      say "== time: $sch captured $g, M=$MICRO"
      timeout -k 5 120 "$Q" train $common $MAP --micro "$MICRO" --schedule "$sch" --exec graph \
        --grad "$g" --steps "$STEPS" --log-every 4 --json 2>&1 | grep -vE '^\s*$' | tail -n 12 | tee -a "$S"
      [ "$g" = direct ] && [ -n "${DIRECT_ONLY:-}" ] && break
    done
  done
fi
if has prof; then
  say "== prof: interleaved eager, M=$MICRO, QE_PROFILE=1"
  QE_PROFILE=1 timeout -k 5 120 "$Q" train $common $MAP --micro "$MICRO" --steps 8 --log-every 4 2>&1 | tee -a "$S"
fi
if has ncu; then
  say "== ncu: $NCU_FLAGS, eager, 2 steps"
  timeout -k 5 300 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --log-file "$OUT/ncu.csv" "$Q" train $common $NCU_FLAGS --steps 2 \
    --log-every 1 2>&1 | tail -n 5 | tee -a "$S"
  python3 "$(dirname "$0")/ncu_sum.py" "$OUT/ncu.csv" 2>&1 | tee -a "$S"
  gzip -f "$OUT/ncu.csv"
fi
