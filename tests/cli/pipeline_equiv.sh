#!/usr/bin/env bash
# Every schedule/execution combination against its matched reference, 20 steps, tiny, --pp 2
# (two rank processes), --micro 4, --amax-history 4: zero mismatches in every category.
#   interleaved x {eager,graph} x {copy,direct}  vs  interleaved --backward full --exec eager
#   zbv         x {eager,graph} x {copy,direct}  vs  zbv --backward full --exec eager
# Then a negative control: a run with another learning rate must mismatch.
set -u
Q=${1:?usage: pipeline_equiv.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --steps 20 --quiet"
fail=0
for sched in interleaved zbv; do
  if ! "$Q" train $C --schedule $sched --backward full --exec eager --run-dir "$T/ref-$sched"; then
    echo "FAIL: reference run of $sched"; fail=1; continue
  fi
  for exec in eager graph; do
    for grad in copy direct; do
      run="$T/$sched-$exec-$grad"
      if ! "$Q" train $C --schedule $sched --exec $exec --grad $grad --run-dir "$run"; then
        echo "FAIL: run $sched $exec $grad"; fail=1; continue
      fi
      out=$("$Q" compare "$T/ref-$sched" "$run")
      rc=$?
      if [ $rc -ne 0 ] || ! grep -q "^identical" <<<"$out"; then
        echo "FAIL: $sched split $exec $grad differs from its reference:"; echo "$out"; fail=1
      else
        echo "ok: $sched split $exec $grad == $sched full eager ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
      fi
    done
  done
done
# negative control: the comparison must be able to fail
"$Q" train $C --schedule interleaved --lr 0.002 --run-dir "$T/other-lr" || { echo "FAIL: lr run"; fail=1; }
if "$Q" compare "$T/ref-interleaved" "$T/other-lr" >/dev/null; then
  echo "FAIL: compare accepted runs with different learning rates"; fail=1
else
  echo "ok: a run with another learning rate is reported as mismatching"
fi
exit $fail
