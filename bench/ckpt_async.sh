#!/usr/bin/env bash
# bench/ckpt_async.sh - what a checkpoint costs training, synchronous against
# asynchronous (--ckpt-async): the stall per checkpoint (time the training
# thread spends in the checkpoint call: the whole save when synchronous, the
# gate + host snapshot when asynchronous), the host snapshot alone, and the
# step-time dip (mean ms/step of the steps right after a checkpoint, while the
# background write runs, against the other steps and a run without
# checkpoints).  Same run three times: no checkpoints, sync, async.
#
#   bench/ckpt_async.sh QEFFECT [PRESET small] [STEPS 60] [EVERY 5] [EXTRA TRAIN FLAGS...]
#   e.g. bench/ckpt_async.sh build/qeffect h4096 30 5 --backend cuda --pp 1 --micro 2
set -eu
Q=$(readlink -f "${1:?usage: ckpt_async.sh QEFFECT [PRESET] [STEPS] [EVERY] [FLAGS...]}")
PRESET=${2:-small}
STEPS=${3:-60}
EVERY=${4:-5}
shift $(( $# >= 4 ? 4 : $# ))
EXTRA=("$@")
[ ${#EXTRA[@]} -eq 0 ] && EXTRA=(--pp 2 --micro 4)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { # NAME FLAGS...
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$Q" train --preset "$PRESET" --steps "$STEPS" --log-every 100000 "${EXTRA[@]}" --run-dir "$T/$name" "$@" >"$T/$name.out"
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}' >"$T/$name.wall"
}
run none
run sync --ckpt-every "$EVERY"
run async --ckpt-every "$EVERY" --ckpt-async

stats() { awk '{ s += $1; n++; if ($1 > m) m = $1 } END { if (n) printf "%8.2f %8.2f %4d", s / n, m, n; else printf "%8s %8s %4d", "-", "-", 0 }'; }
steptimes() { # RUN WHICH: ms/step of steps after a checkpoint (after) or not (other), first step excluded
  local cond
  if [ "$2" = after ]; then cond="step > 1 and (step - 1) % $EVERY = 0"; else cond="step > 1 and (step - 1) % $EVERY != 0"; fi
  sqlite3 "$T/$1/catalog.db" "select ms_per_step from losses where $cond order by step"
}
bytes=$(grep -o 'committed: [0-9]* bytes' "$T/sync.out" | head -1 | awk '{print $2}')
echo "preset $PRESET, ${EXTRA[*]}, $STEPS steps, a checkpoint every $EVERY steps of $bytes bytes"
echo
printf "%-34s %8s %8s %4s\n" "per checkpoint (ms)" mean max n
printf "%-34s %s\n" "sync: stall (the whole save)" "$(grep -o 'in [0-9.]* ms$' "$T/sync.out" | awk '{print $2}' | stats)"
printf "%-34s %s\n" "async: stall (gate + snapshot)" "$(grep -o 'training stalled [0-9.]* ms' "$T/async.out" | awk '{print $3}' | stats)"
printf "%-34s %s\n" "async: of which host snapshot" "$(grep -o 'snapshot in [0-9.]* ms' "$T/async.out" | awk '{print $3}' | stats)"
printf "%-34s %s\n" "async: of which waiting" "$(grep -o '([0-9.]* ms waiting' "$T/async.out" | tr -d '(' | awk '{print $1}' | stats)"
printf "%-34s %s\n" "async: background write to commit" "$(grep -o 'background after [0-9.]* ms' "$T/async.out" | awk '{print $3}' | stats)"
echo
printf "%-34s %8s %8s %4s\n" "ms/step (step 1 excluded)" mean max n
printf "%-34s %s\n" "no checkpoints" "$(sqlite3 "$T/none/catalog.db" 'select ms_per_step from losses where step > 1' | stats)"
printf "%-34s %s\n" "sync: step after a checkpoint" "$(steptimes sync after | stats)"
printf "%-34s %s\n" "sync: other steps" "$(steptimes sync other | stats)"
printf "%-34s %s\n" "async: step after a checkpoint" "$(steptimes async after | stats)"
printf "%-34s %s\n" "async: other steps" "$(steptimes async other | stats)"
echo
echo "wall time (s): none $(cat "$T/none.wall"), sync $(cat "$T/sync.wall"), async $(cat "$T/async.wall")"
