#!/usr/bin/env bash
# The accumulating gradient arena (issue 19): one f32 view per matrix parameter, written by
# microbatch 0's dW and added into by every later one, in ascending microbatch order.
#  1. bitwise: each configuration trained with --arena per-mb and with --arena accumulate gives
#     identical fingerprints in every category (`qeffect compare` exits 0): interleaved and zbv,
#     eager and graph, direct and copy, split and full backward, --pp 1/2/4, --pp 2 x --dp 2.
#     (tiny, --micro 4, 4 steps, --amax-history 4)
#  2. capacity: `train --json` reports the same arena_bytes for M = 2, 4, 8, 16 with the
#     accumulating arena, and M times that with per-mb views; the accumulating layout's whole
#     setup allocation is flat in M (non-matrix gradients accumulate too).
#  3. the layout is recorded in the run config: a resumed per-mb run stays per-mb, and resume
#     refuses --arena.
set -u
Q=${1:?usage: arena_accumulate.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C="--preset tiny --micro 4 --amax-history 4 --steps 4 --quiet"
n=0
pair() { # pair NAME FLAGS...: per-mb against accumulate, same flags
  local name=$1; shift
  n=$((n + 1))
  local a="$T/$n-permb" b="$T/$n-acc"
  if ! "$Q" train $C "$@" --arena per-mb --run-dir "$a"; then echo "FAIL: $name per-mb run"; fail=1; return; fi
  if ! "$Q" train $C "$@" --arena accumulate --run-dir "$b"; then echo "FAIL: $name accumulate run"; fail=1; return; fi
  local out
  if out=$("$Q" compare "$a" "$b") && grep -q "^identical" <<<"$out"; then
    echo "ok: $name: per-mb == accumulate ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
  else
    echo "FAIL: $name: per-mb and accumulate differ:"; echo "$out"; fail=1
  fi
  rm -rf "$a" "$b"
}
for sched in interleaved zbv; do
  for exec in eager graph; do
    for grad in direct copy; do
      pair "$sched pp2 $exec $grad" --pp 2 --schedule $sched --exec $exec --grad $grad
    done
  done
  pair "$sched pp2 full backward eager" --pp 2 --schedule $sched --backward full --exec eager
done
pair "interleaved pp1 graph direct" --pp 1 --exec graph --grad direct
pair "interleaved pp1 eager copy" --pp 1 --exec eager --grad copy
pair "interleaved pp4 graph direct" --pp 4 --chunks 1 --exec graph --grad direct
pair "interleaved pp4 eager copy" --pp 4 --chunks 1 --exec eager --grad copy
pair "interleaved pp2 dp2 eager direct" --pp 2 --dp 2 --exec eager --grad direct
pair "zbv pp2 dp2 graph copy" --pp 2 --dp 2 --schedule zbv --exec graph --grad copy

# 2. arena bytes against M (rank 0's line of --json); with the accumulating layout the whole
#    allocation at setup is flat in M too (the non-matrix gradients accumulate as well; tape
#    slots stay 2 at --pp 1): only the per-microbatch loss floats (4 bytes each) may grow.
field() { "$Q" train --preset tiny --pp 1 --steps 1 --quiet --json --trace off "${@:2}" | grep '"rank":0,' |
            grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
bytes() { field arena_bytes "$@"; }
acc0=""; setup0=""
for M in 2 4 8 16; do
  setup=$(field alloc_setup_bytes --micro $M --arena accumulate)
  [ -z "$setup0" ] && setup0=$setup
  if [ -z "$setup" ] || [ $((setup - setup0)) -gt $((64 * (M - 2))) ]; then
    echo "FAIL: M=$M: accumulate alloc_setup_bytes '$setup', M=2 had $setup0 (more than 64 bytes a microbatch)"; fail=1
  else echo "ok: M=$M: accumulate alloc_setup_bytes $setup (M=2: $setup0)"; fi
  acc=$(bytes --micro $M --arena accumulate)
  per=$(bytes --micro $M --arena per-mb)
  if [ -z "$acc" ] || [ -z "$per" ]; then echo "FAIL: M=$M: no arena_bytes in --json"; fail=1; continue; fi
  [ -z "$acc0" ] && acc0=$acc
  if [ "$acc" -ne "$acc0" ]; then echo "FAIL: M=$M: accumulate arena_bytes $acc, M=2 had $acc0"; fail=1
  else echo "ok: M=$M: accumulate arena_bytes $acc (same as M=2)"; fi
  if [ "$per" -ne $((M * acc)) ]; then echo "FAIL: M=$M: per-mb arena_bytes $per, expected $M x $acc"; fail=1
  else echo "ok: M=$M: per-mb arena_bytes $per = M x $acc"; fi
done

# 3. resume keeps the run's layout; --arena on resume is refused
R="$T/resume"
if "$Q" train --preset tiny --pp 1 --micro 4 --steps 2 --ckpt-every 2 --quiet --arena per-mb --run-dir "$R"; then
  if command -v sqlite3 >/dev/null; then
    if sqlite3 "$R/catalog.db" 'select config_json from runs' | grep -q '"arena":"per-mb"'; then
      echo "ok: the run config records \"arena\":\"per-mb\""
    else echo "FAIL: the run config does not record the arena layout"; fail=1; fi
  fi
  out=$("$Q" resume --run-dir "$R" --steps 3 --quiet --json) || { echo "FAIL: resume of a per-mb run"; fail=1; }
  got=$(grep '"rank":0,' <<<"$out" | grep -o '"arena_bytes":[0-9]*' | cut -d: -f2)
  want=$(bytes --micro 4 --arena per-mb)
  if [ -n "$got" ] && [ "$got" = "$want" ]; then echo "ok: resumed per-mb run keeps per-mb views ($got bytes)"
  else echo "FAIL: resumed per-mb run has arena_bytes '$got', expected $want"; fail=1; fi
  "$Q" resume --run-dir "$R" --steps 4 --quiet --arena accumulate 2>"$T/err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q -- "--arena belongs to train" "$T/err"; then echo "ok: resume refuses --arena"
  else echo "FAIL: resume --arena: exit $rc: $(cat "$T/err")"; fail=1; fi
else
  echo "FAIL: per-mb run with a checkpoint"; fail=1
fi
exit $fail
