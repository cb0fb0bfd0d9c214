#!/usr/bin/env bash
# Four stages on four rank processes (--pp 4, one chunk each), captured, against its matched
# reference over 20 steps; and --pp 2 x --dp 2: the replicas hold byte-identical parameters
# after every step (--check-replicas, on by default, fails the run otherwise) and at the end.
set -u
Q=${1:?usage: pp4_dp.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C="--preset tiny --pp 4 --chunks 1 --micro 4 --amax-history 4 --steps 20 --quiet"
"$Q" train $C --backward full --exec eager --run-dir "$T/ref" || { echo "FAIL: pp4 reference"; fail=1; }
"$Q" train $C --exec graph --grad direct --run-dir "$T/cap" || { echo "FAIL: pp4 captured"; fail=1; }
if out=$("$Q" compare "$T/ref" "$T/cap"); then echo "ok: pp4 captured == reference: $(tail -1 <<<"$out")"
else echo "FAIL: pp4 captured differs:"; echo "$out"; fail=1; fi

out=$("$Q" train --preset tiny --pp 2 --dp 2 --micro 4 --steps 10 --amax-history 4 --quiet --json --check-replicas on) \
  || { echo "FAIL: pp2 x dp2 run (replica check)"; fail=1; }
for pr in 0 1; do
  n=$(grep "\"pipeline_rank\":$pr," <<<"$out" | grep -o '"params_fp":"[0-9a-f]*"' | sort -u | wc -l)
  if [ "$n" -ne 1 ]; then echo "FAIL: pipeline rank $pr: replicas end with different parameters"; echo "$out"; fail=1
  else echo "ok: pipeline rank $pr: both replicas hold identical parameters"; fi
done
[ "$(grep -c '"replica":1' <<<"$out")" -eq 2 ] || { echo "FAIL: expected two ranks of replica 1"; fail=1; }
exit $fail
