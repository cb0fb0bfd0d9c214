#!/usr/bin/env bash
# e2e.sh - a real qeffect checkpoint, end to end, next to the disk itself
# (issue 16): for each rank count N, train PRESET with a checkpoint, take the
# save's bytes and time from `train --json`, drop the page cache, restore it
# in fresh processes (`resume --json`, restore only), then time plain
# write+fsync and a cold plain read of the same number of bytes with N
# parallel writers on the same disk (bench_ckpt --plain), and print a table
# last.  Builds nothing.
#
# Usage: bash bench/ckpt/e2e.sh QEFFECT [PRESET] [BACKEND] [OUT_DIR]
#   QEFFECT  the qeffect binary; bench_ckpt must sit beside it (same build)
#   PRESET   default h4096 (10.79 GB of state on one rank)
#   BACKEND  cuda (default) or cpu
#   OUT_DIR  where runs, logs and e2e.json go (default /tmp/qe-e2e); the runs
#            and plain files live here, so this is the disk being measured
# Environment:
#   RANKS    comma list of rank counts (default 1): N ranks are --pp N (one
#            store each, all on OUT_DIR's disk); presets of 4 layers get
#            --layers N when N > 4
#   MICRO (8), EXEC (graph), STEPS (2: the checkpoint is at the last step)
#   EXTRA    more train flags (for example "--layers 2 --seq 32" to make a
#            preset fit a small machine)
#   REPS     repetitions of the plain baseline (default 1; medians)
#   AHEAD    comma list of restore read-ahead windows in MiB (QE_CKPT_READ_AHEAD_MIB; 0 is
#            off): one more cold restore for each, printed and in e2e.json's restore_ahead_ms
#   KEEP=1   keep the runs and plain files
#   DCP=1    also PyTorch DCP (bench/peers/run_peers.py ckpt: dcp.save and a cold dcp.load) of
#            the same preset with the same N ranks and stage placement on the same disk (cpu
#            backend: host tensors over gloo; cuda: one GPU per rank); its GB/s join the row
# Cold reads: /proc/sys/vm/drop_caches when writable (root), else fadvise
# DONTNEED on every file of the run (bench/compare-peers/dropcache.py); the
# JSON says which.
set -euo pipefail
Q=${1:?usage: e2e.sh QEFFECT [PRESET] [BACKEND] [OUT_DIR]}
PRESET=${2:-h4096}
BACKEND=${3:-cuda}
OUT=${4:-/tmp/qe-e2e}
RANKS=${RANKS:-1}
MICRO=${MICRO:-8}
EXEC=${EXEC:-graph}
STEPS=${STEPS:-2}
EXTRA=${EXTRA:-}
REPS=${REPS:-1}
AHEAD=${AHEAD:-}
DCP=${DCP:-0}
here=$(cd "$(dirname "$0")" && pwd)
BENCH=$(dirname "$Q")/bench_ckpt
[ -x "$Q" ] || { echo "e2e.sh: $Q is not an executable" >&2; exit 2; }
[ -x "$BENCH" ] || { echo "e2e.sh: $BENCH is missing (build the bench_ckpt target beside qeffect)" >&2; exit 2; }
mkdir -p "$OUT"
work="$OUT/work"
rm -rf "$work"
mkdir -p "$work"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT

drop_cache() { # $1: the folder whose files must leave the page cache
	sync
	if { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
		echo drop_caches
	else
		python3 "$here/../compare-peers/dropcache.py" "$1" >/dev/null
		echo fadvise
	fi
}

# rank 0's JSON line of a train/resume --json output: FIELD of its last checkpoint or of its
# restore; for binaries older than those fields, the progress lines rank 0 prints
json_field() { # $1 file, $2 ckpt|restore, $3 bytes|ms
	python3 - "$1" "$2" "$3" <<'EOF'
import json, re, sys
path, what, field = sys.argv[1:4]
text = open(path).read().splitlines()
for line in text:
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("rank") != 0 or ("ckpts" not in d and "restore" not in d):
        continue
    rec = d["ckpts"][-1] if what == "ckpt" else d["restore"]
    print(rec[field])
    sys.exit(0)
pat = (r"checkpoint step \d+ committed: (\d+) bytes .* in ([0-9.]+) ms" if what == "ckpt"
       else r"resumed from checkpoint step \d+ \((\d+) bytes\) in ([0-9.]+) ms")
hits = [m for m in (re.search(pat, l) for l in text) if m]
if not hits:
    sys.exit("no %s record of rank 0 in %s" % (what, path))
print(hits[-1].group(1 if field == "bytes" else 2))
EOF
}

rows=()
json_rows=""
IFS=, read -r -a counts <<<"$RANKS"
for n in "${counts[@]}"; do
	run="$work/run-$n"
	flags=(--preset "$PRESET" --backend "$BACKEND" --pp "$n" --micro "$MICRO" --exec "$EXEC" --trace off)
	case "$PRESET" in tiny | small | h2048 | h4096) [ "$n" -gt 4 ] && flags+=(--layers "$n") ;; esac
	# shellcheck disable=SC2206
	extra=($EXTRA)
	echo "== $n rank(s): train ${flags[*]} ${extra[*]} --steps $STEPS --ckpt-every $STEPS"
	"$Q" train "${flags[@]}" "${extra[@]}" --steps "$STEPS" --ckpt-every "$STEPS" --run-dir "$run" --json \
		>"$OUT/train-$n.log" 2>&1 || { echo "e2e.sh: train failed, see $OUT/train-$n.log" >&2; tail -5 "$OUT/train-$n.log" >&2; exit 1; }
	bytes=$(json_field "$OUT/train-$n.log" ckpt bytes)
	save_ms=$(json_field "$OUT/train-$n.log" ckpt ms)
	how=$(drop_cache "$run")
	echo "== $n rank(s): cold restore (page cache: $how)"
	"$Q" resume --run-dir "$run" --backend "$BACKEND" --pp "$n" --exec "$EXEC" --trace off --steps "$STEPS" --json \
		>"$OUT/resume-$n.log" 2>&1 || { echo "e2e.sh: resume failed, see $OUT/resume-$n.log" >&2; tail -5 "$OUT/resume-$n.log" >&2; exit 1; }
	rbytes=$(json_field "$OUT/resume-$n.log" restore bytes)
	restore_ms=$(json_field "$OUT/resume-$n.log" restore ms)
	grep -h "restore: rank" "$OUT/resume-$n.log" || true
	ahead_json=""
	IFS=, read -r -a windows <<<"$AHEAD"
	for w in "${windows[@]}"; do
		drop_cache "$run" >/dev/null
		QE_CKPT_READ_AHEAD_MIB=$w "$Q" resume --run-dir "$run" --backend "$BACKEND" --pp "$n" --exec "$EXEC" --trace off \
			--steps "$STEPS" --json >"$OUT/resume-$n-ahead$w.log" 2>&1 ||
			{ echo "e2e.sh: resume (read-ahead $w MiB) failed, see $OUT/resume-$n-ahead$w.log" >&2; exit 1; }
		wms=$(json_field "$OUT/resume-$n-ahead$w.log" restore ms)
		echo "== $n rank(s): cold restore, read-ahead $w MiB: $wms ms ($(python3 -c "print('%.3f' % ($rbytes / $wms / 1e6))") GB/s)"
		grep -h "restore: rank" "$OUT/resume-$n-ahead$w.log" || true
		ahead_json="$ahead_json${ahead_json:+, }\"$w\": $wms"
	done
	stored=$(du -s -B1 "$run/stores" | cut -f1) # blocks held (data.mdb is sparse)
	[ "${KEEP:-0}" = 1 ] || rm -rf "$run"
	echo "== $n rank(s): plain write+fsync and cold read of $bytes bytes, $n writers"
	"$BENCH" --dir "$work/plain-$n" --bytes "$bytes" --writers "$n" --reps "$REPS" --plain \
		--json "$OUT/plain-$n.json" >"$OUT/plain-$n.log" 2>&1 || { echo "e2e.sh: bench_ckpt failed, see $OUT/plain-$n.log" >&2; exit 1; }
	read -r pw pr phow < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); c = d["configs"][0]
print(c["plain_write_fsync"]["median_s"], c["plain_read_cold"]["median_s"], d["cache_drop"])' "$OUT/plain-$n.json")
	row=$(python3 -c '
import sys
n, b, rb, sm, rm, pw, pr = sys.argv[1:8]
b, rb, sm, rm, pw, pr = int(b), int(rb), float(sm) / 1e3, float(rm) / 1e3, float(pw), float(pr)
sg, rg, pwg, prg = b / sm / 1e9, rb / rm / 1e9, b / pw / 1e9, b / pr / 1e9
print("%-5s %14d %8.2f %8.3f %8.3f %6.0f%% %8.2f %8.3f %8.3f %6.0f%%" % (n, b, sm, sg, pwg, 100 * sg / pwg, rm, rg, prg, 100 * rg / prg))
print("{\"ranks\": %s, \"bytes\": %d, \"save_s\": %.4f, \"save_gb_s\": %.4f, \"plain_write_fsync_s\": %.4f, "
      "\"plain_write_gb_s\": %.4f, \"save_vs_plain\": %.4f, \"restore_bytes\": %d, \"restore_s\": %.4f, "
      "\"restore_gb_s\": %.4f, \"plain_read_s\": %.4f, \"plain_read_gb_s\": %.4f, \"restore_vs_plain\": %.4f}"
      % (n, b, sm, sg, pw, pwg, sg / pwg, rb, rm, rg, pr, prg, rg / prg))' \
		"$n" "$bytes" "$rbytes" "$save_ms" "$restore_ms" "$pw" "$pr")
	dcp_json=""
	if [ "$DCP" = 1 ]; then
		layers=0
		case "$PRESET" in tiny | small | h2048 | h4096) [ "$n" -gt 4 ] && layers=$n ;; esac
		seq=$(echo "$EXTRA" | grep -o -- '--seq [0-9]*' | awk '{print $2}' || true)
		dev=cuda; [ "$BACKEND" = cpu ] && dev=cpu
		echo "== $n rank(s): PyTorch DCP save and cold load, $n ranks ($dev)"
		python3 "$here/../peers/run_peers.py" ckpt --preset "$PRESET" --dir "$work/dcp-$n" --out "$OUT/dcp-$n" \
			--reps 1 --variants save,load --cold 1 --nproc "$n" --device "$dev" --schedule interleaved \
			--layers "$layers" --seq "${seq:-0}" --timeout-s 400 >"$OUT/dcp-$n.log" 2>&1 || true
		rm -rf "$work/dcp-$n"
		read -r ds dl db < <(python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1])); v = d.get("variants", {})
    g = lambda k: v.get(k, {}).get("gbps_median")
    print(g("save") or "null", g("load") or "null", int(d.get("bytes_total") or 0))
except Exception:
    print("null null 0")' "$OUT/dcp-$n/peers-ckpt.json")
		echo "== $n rank(s): DCP $db bytes: save $ds GB/s, cold load $dl GB/s (qeffect $(echo "$row" | head -1 | awk '{print $4" / "$8}') GB/s)"
		grep -h "^dcp" "$OUT/dcp-$n.log" | head -4 || true
		dcp_json="\"dcp_bytes\": $db, \"dcp_save_gb_s\": $ds, \"dcp_load_gb_s\": $dl, "
		row="$(echo "$row" | head -1) $(printf '%8s %8s' "$ds" "$dl")
$(echo "$row" | tail -1)"
	fi
	rows+=("$(echo "$row" | head -1)")
	echo "== $n rank(s): ranks bytes save_s save_GB/s write_GB/s save% rest_s rest_GB/s read_GB/s rest%: $(echo "$row" | head -1)" # as it goes: a killed run keeps its rows
	j=$(echo "$row" | tail -1)
	json_rows="$json_rows${json_rows:+,
}    ${j%\}}, $dcp_json\"restore_ahead_ms\": {$ahead_json}, \"stored_bytes\": $stored, \"restore_cache_drop\": \"$how\", \"plain_cache_drop\": \"$phow\"}"
done

cat >"$OUT/e2e.json" <<EOF
{
  "preset": "$PRESET", "backend": "$BACKEND", "micro": $MICRO, "exec": "$EXEC", "steps": $STEPS,
  "extra": "$EXTRA", "plain_reps": $REPS, "dir": "$OUT", "host": "$(hostname)",
  "qeffect": "$Q",
  "results": [
$json_rows
  ]
}
EOF
echo
echo "save: train --json (gate to commit, all ranks); restore: resume --json, cold; plain: bench_ckpt --plain, N writers"
printf '%-5s %14s %8s %8s %8s %7s %8s %8s %8s %7s%s\n' ranks bytes save_s save_GB/s write_GB/s save% rest_s rest_GB/s read_GB/s rest% \
	"$([ "$DCP" = 1 ] && printf ' %8s %8s' dcp_save dcp_load)"
for r in "${rows[@]}"; do echo "$r"; done
echo "wrote $OUT/e2e.json"
