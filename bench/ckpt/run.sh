#!/usr/bin/env bash
# run.sh - the checkpoint benchmark, end to end (not part of `make test`):
#   1. what a real checkpoint holds: train tiny and small (cpu, pp 2) with a
#      checkpoint and report, from `qeffect list --json`, the runtime-state
#      payload (FP8 meta, AdamW steps, epochs, RNG, data position) against the
#      total (parameters and AdamW moments);
#   2. save / restore GB/s through the store for a random state of --gib GiB,
#      next to plain write+fsync / read of the same bytes (bench_ckpt).
#
# Usage: bash bench/ckpt/run.sh [BUILD_DIR] [GIB] [OUT_JSON]
#   BUILD_DIR  with qeffect and bench_ckpt built (default: build)
#   GIB        state size for the throughput part (default 2; check `df -h`:
#              it needs about 3 x GIB free in $QE_BENCH_DIR, default /tmp)
#   OUT_JSON   also write the numbers there (default: no file)
set -euo pipefail
B=${1:-build}
GIB=${2:-2}
OUT=${3:-}
Q=$B/qeffect
BENCH=$B/bench_ckpt
work=${QE_BENCH_DIR:-/tmp}/qe-bench-ckpt
for x in "$Q" "$BENCH"; do
	[ -x "$x" ] || { echo "run.sh: $x is missing: cmake --build $B --target qeffect bench_ckpt" >&2; exit 2; }
done
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "== 1. runtime-state bytes of real checkpoints"
printf '%-8s %8s %6s %14s %14s %12s %10s\n' preset history step bytes params+moments runtime rt_share
rows=""
# amax history 4 (our tests) and 1024 (the TransformerEngine default)
for cfg in "tiny 4" "small 4" "small 1024"; do
	set -- $cfg
	preset=$1 hist=$2 run="$work/$1-$2"
	"$Q" train --preset "$preset" --pp 2 --micro 4 --amax-history "$hist" --steps 2 --ckpt-every 2 \
		--run-dir "$run" --quiet >/dev/null
	"$Q" list --run-dir "$run" --json >"$run.json"
	read -r step bytes rt < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["checkpoints"][-1]
print(c["step"], c["bytes"], c["runtime_state_bytes"])' "$run.json")
	share=$(awk -v r="$rt" -v b="$bytes" 'BEGIN { printf "%.4f%%", 100 * r / b }')
	printf '%-8s %8s %6s %14s %14s %12s %10s\n' "$preset" "$hist" "$step" "$bytes" "$((bytes - rt))" "$rt" "$share"
	rows="$rows{\"preset\":\"$preset\",\"amax_history\":$hist,\"step\":$step,\"bytes\":$bytes,\"runtime_state_bytes\":$rt},"
	"$Q" verify --run-dir "$run" >/dev/null || { echo "run.sh: verify of $run failed" >&2; exit 1; }
done

echo
echo "== 2. store save/restore vs plain file I/O, $GIB GiB (df: $(df -h "$work" | awk 'NR==2 {print $4}') free)"
"$BENCH" --dir "$work/throughput" --gib "$GIB" --json "$work/throughput.json"

if [ -n "$OUT" ]; then
	printf '{"checkpoints":[%s],"throughput":%s}\n' "${rows%,}" "$(cat "$work/throughput.json")" >"$OUT"
	echo "wrote $OUT"
fi
