#!/usr/bin/env bash
# Model shapes from flags (issue 18): a GPT-2-vocabulary model of 8 layers cut into 2 layers per
# chunk at --pp 2 (interleaved --chunks 2, and zbv), 2 sequences of 64 tokens per microbatch,
# vocabulary 50257 padded to 50304.
#   - under each schedule, split backward eager and graph == the matched full-backward eager
#     reference, in every fingerprint category;
#   - a checkpoint resumed in fresh processes (same mapping, then --pp 1 with the run's four
#     virtual stages) == the uninterrupted run;
#   - a mapping with another number of virtual stages, a shape flag on resume, and layers that do
#     not divide into P x V chunks are refused, naming what is wrong;
#   - the catalog records the shape (inspect --json).
# QE_SHAPE_STEPS (default 3) sets the steps of each run, QE_SHAPE_SEQ (default 64) the sequence
# length, and QE_SHAPE_EXTRA adds flags to every run (the GPU machine: QE_SHAPE_SEQ=512
# QE_SHAPE_EXTRA="--backend cuda").
set -u
Q=${1:?usage: model_shapes.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
N=${QE_SHAPE_STEPS:-3}
SEQ=${QE_SHAPE_SEQ:-64}
SHAPE="--preset gpt2 --layers 8 --hidden 32 --heads 2 --ffn 128 --seq $SEQ --batch 2"
C="$SHAPE --pp 2 --micro 4 --amax-history 4 --quiet ${QE_SHAPE_EXTRA:-}"
fail=0
same() { # name run_a run_b [compare flags]
  local out
  out=$("$Q" compare "$2" "$3" ${4:-})
  if [ $? -ne 0 ] || ! grep -q "^identical" <<<"$out"; then
    echo "FAIL: $1:"; echo "$out"; fail=1
  else
    echo "ok: $1 ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
  fi
}
for sched in interleaved zbv; do
  chunks=""; [ $sched = interleaved ] && chunks="--chunks 2"
  ref="$T/ref-$sched"
  if ! "$Q" train $C $chunks --schedule $sched --backward full --exec eager --steps $N --run-dir "$ref"; then
    echo "FAIL: reference run of $sched"; fail=1; continue
  fi
  for exec in eager graph; do
    run="$T/$sched-$exec"
    if "$Q" train $C $chunks --schedule $sched --exec $exec --steps $N --run-dir "$run"; then
      same "$sched split $exec == $sched full eager" "$ref" "$run"
    else echo "FAIL: run $sched $exec"; fail=1; fi
  done
done

# checkpoint and resume, same mapping and remapped (4 virtual stages of 2 layers either way)
K=$(( N > 1 ? N - 1 : 1 )); E=$(( K + 2 ))
"$Q" train $C --chunks 2 --exec graph --steps $E --run-dir "$T/full" || { echo "FAIL: uninterrupted run"; fail=1; }
"$Q" train $C --chunks 2 --exec graph --steps $K --ckpt-every $K --run-dir "$T/part" || { echo "FAIL: partial run"; fail=1; }
cp -r "$T/part" "$T/part-pp1"
if "$Q" resume --run-dir "$T/part" --steps $E --quiet ${QE_SHAPE_EXTRA:-}; then
  same "resumed at step $K == uninterrupted" "$T/full" "$T/part"
else echo "FAIL: resume"; fail=1; fi
if "$Q" resume --run-dir "$T/part-pp1" --steps $E --pp 1 --quiet ${QE_SHAPE_EXTRA:-}; then
  same "resumed at step $K under --pp 1 (4 chunks of 2 layers) == uninterrupted" "$T/full" "$T/part-pp1" "--steps 1:$E"
else echo "FAIL: resume --pp 1"; fail=1; fi

refused() { # name expected-text command...
  local name=$1 want=$2; shift 2
  local err
  err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$err"; then echo "ok: $name refused: $(head -1 <<<"$err")"
  else echo "FAIL: $name: exit $rc, want an error holding '$want', got: $err"; fail=1; fi
}
refused "resume with 2 virtual stages" "checkpoint has 4 virtual stages" \
  "$Q" resume --run-dir "$T/part" --steps $((E + 1)) --pp 1 --chunks 2
refused "resume with another shape" "conflicts with the run" \
  "$Q" resume --run-dir "$T/part" --steps $((E + 1)) --layers 4
refused "layers not dividing into P x V" "do not divide evenly" \
  "$Q" train $SHAPE --pp 2 --chunks 3 --steps 1 --run-dir "$T/bad"
refused "hidden not a multiple of heads" "not a multiple of --heads" \
  "$Q" train --preset tiny --hidden 30 --heads 4 --steps 1
[ -e "$T/bad" ] && { echo "FAIL: a refused train created $T/bad"; fail=1; }

# the catalog records the shape
json=$("$Q" inspect --run-dir "$T/part" --json 2>/dev/null)
if python3 -c "
import json, sys
c = json.loads(sys.argv[1])['config']['model']
want = dict(layers=8, hidden=32, heads=2, ffn=128, seq=int(sys.argv[2]), batch=2, vocab=50257)
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
sys.exit('recorded != wanted: %s' % bad if bad else 0)" "$json" "$SEQ"; then
  echo "ok: the catalog records layers 8, hidden 32, heads 2, ffn 128, seq $SEQ, batch 2, vocab 50257"
else echo "FAIL: inspect --json does not record the shape"; fail=1; fi
exit $fail
