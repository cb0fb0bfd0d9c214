#!/usr/bin/env bash
# run.sh - the checkpoint benchmark, end to end (not part of `make test`):
#   1. what a real checkpoint holds (only when BUILD_DIR has qeffect): train
#      tiny and small (cpu, pp 2) with a checkpoint and report, from
#      `qeffect list --json`, the runtime-state payload against the total;
#   2. store save / cold restore of GIB GiB of random state next to plain
#      write+fsync / cold plain read of the same bytes, same run, same disk,
#      for 1 and N writer processes (one store each, like per-rank stores):
#      bench_ckpt, REPS repetitions, medians, a table last.
#
# Usage: bash bench/ckpt/run.sh [BUILD_DIR] [GIB] [OUT_JSON]
#   BUILD_DIR  with bench_ckpt (and optionally qeffect) built (default: build;
#              for the GPU machine `make gpu-build`, which links LMDB statically)
#   GIB        total state, split over the writers (default 2; the h4096 state
#              is 10.05 GiB = 10.79 GB).  Needs about 2 x GIB free in
#              $QE_BENCH_DIR (default /tmp) and 2 x GIB of memory.
#   OUT_JSON   also write the numbers there (default: no file)
#   WRITERS    environment: comma list of writer counts (default 1,2,4)
#   REPS       environment: repetitions per configuration (default 3)
# Cold reads drop the page cache with /proc/sys/vm/drop_caches (as root) or
# fadvise DONTNEED per file; the output says which.  Needs only bash, awk
# and python3 (section 1), no network.
set -euo pipefail
B=${1:-build}
GIB=${2:-2}
OUT=${3:-}
WRITERS=${WRITERS:-1,2,4}
REPS=${REPS:-3}
Q=$B/qeffect
BENCH=$B/bench_ckpt
work=${QE_BENCH_DIR:-/tmp}/qe-bench-ckpt
[ -x "$BENCH" ] || { echo "run.sh: $BENCH is missing: cmake --build $B --target bench_ckpt" >&2; exit 2; }
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

rows=""
if [ -x "$Q" ]; then
echo "== 1. runtime-state bytes of real checkpoints"
printf '%-8s %8s %6s %14s %14s %12s %10s\n' preset history step bytes params+moments runtime rt_share
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
else
	echo "== 1. skipped: $Q is not there (bench_ckpt alone measures the throughput)"
fi

echo
echo "== 2. store save/restore vs plain file I/O, $GIB GiB, writers $WRITERS, $REPS reps (df: $(df -h "$work" | awk 'NR==2 {print $4}') free)"
"$BENCH" --dir "$work/throughput" --gib "$GIB" --writers "$WRITERS" --reps "$REPS" --json "$work/throughput.json"

if [ -n "$OUT" ]; then
	printf '{"checkpoints":[%s],"throughput":%s}\n' "${rows%,}" "$(cat "$work/throughput.json")" >"$OUT"
	echo "wrote $OUT" >&2
fi
