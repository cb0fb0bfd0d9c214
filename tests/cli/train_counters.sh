#!/usr/bin/env bash
# Counters reproduce the provisioned resources: with two local chunks per rank, graph mode
# captures 3*M*2 graphs per rank (12, 24, 48, 96 for M = 2, 4, 8, 16); for zbv the peak
# live tapes and delayed dW counted while running equal what `qeffect schedule --stats`
# predicts for each rank.
set -u
Q=${1:?usage: train_counters.sh QEFFECT SHARED}
fail=0
for M in 2 4 8 16; do
  out=$("$Q" train --preset tiny --pp 2 --micro $M --steps 2 --exec graph --quiet --json) || { echo "FAIL: train M=$M"; fail=1; continue; }
  want=$((3 * M * 2))
  n=$(grep -c "\"graphs\":$want," <<<"$out")
  if [ "$n" -ne 2 ]; then echo "FAIL: M=$M expected $want graphs on both ranks:"; echo "$out"; fail=1
  else echo "ok: M=$M: $want graphs on each rank"; fi
done
for M in 4 8; do
  sched=$("$Q" schedule --pp 2 --micro $M --schedule zbv --stats --json) || { echo "FAIL: schedule"; fail=1; continue; }
  run=$("$Q" train --preset tiny --pp 2 --micro $M --steps 2 --schedule zbv --quiet --json) || { echo "FAIL: train zbv"; fail=1; continue; }
  for r in 0 1; do
    sp=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); s=d['ranks'][$r]['stats']; print(s['peak_live_tapes'], s['delayed_dw'])" "$sched")
    rp=$(grep "\"rank\":$r," <<<"$run" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(d['peak_live_tapes'], d['delayed_dw'])")
    if [ "$sp" != "$rp" ]; then echo "FAIL: zbv M=$M rank $r: schedule says (peak, delayed) $sp, run counted $rp"; fail=1
    else echo "ok: zbv M=$M rank $r: peak live tapes and delayed dW $sp as scheduled"; fi
  done
done
exit $fail
