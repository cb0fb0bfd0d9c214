#!/usr/bin/env bash
# A 300-step run of the small preset on the Brown corpus lowers the held-out loss
# (first evaluation at step 10 against the last at step 300).
set -u
Q=${1:?usage: train_small.sh QEFFECT SHARED}
SHARED=${2:-}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
data=()
if [ -f "$SHARED/data/brown.jsonl" ]; then data=(--data "$SHARED/data/brown.jsonl"); else echo "note: Brown corpus absent, built-in text used"; fi
"$Q" train --preset small --pp 2 --micro 4 --steps 300 --lr 2e-3 --eval-every 10 --log-every 50 "${data[@]}" \
  --run-dir "$T/run" | tee "$T/log" || { echo "FAIL: training"; exit 1; }
first=$(grep -o 'held-out [0-9.]*' "$T/log" | head -1 | cut -d' ' -f2)
last=$(grep -o 'held-out [0-9.]*' "$T/log" | tail -1 | cut -d' ' -f2)
echo "held-out loss: step 10 $first, step 300 $last"
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if b < a - 0.3 else 1)" "$first" "$last" \
  || { echo "FAIL: held-out loss did not fall by 0.3"; exit 1; }
echo ok
