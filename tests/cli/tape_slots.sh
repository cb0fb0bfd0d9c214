#!/usr/bin/env bash
# Tape slots (runtime/exec/slots.c): a rank without pipeline peers keeps only the slots its
# schedule needs (microbatch m in slot m % K) unless per-step traces want every microbatch's
# outputs at the step's end.  Under interleaved and zbv, eager and graph, full and split
# backward, --dp 2 too, a run with the fewest slots (no run directory) ends with the same
# parameters (the XXH3 fingerprint of every byte) and loss as one with a slot per microbatch
# (traces on), allocates less, and reports its slot count; --pp 2 keeps M slots.
set -u
Q=${1:?usage: tape_slots.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1].strip().splitlines()[-1])[sys.argv[2]])" "$1" "$2"; }
for v in "interleaved|--schedule interleaved" "zbv|--schedule zbv" "graph|--exec graph" \
         "graph-zbv|--exec graph --schedule zbv" "full|--backward full" "dp2|--dp 2 --exec graph"; do
  name=${v%%|*}; flags=${v#*|}
  C="--preset tiny --micro 4 --amax-history 4 --steps 4 --quiet --json $flags"
  few=$("$Q" train $C 2>/dev/null | grep '"rank":0'); all=$("$Q" train $C --run-dir "$T/$name" 2>/dev/null | grep '"rank":0')
  if [ -z "$few" ] || [ -z "$all" ]; then echo "FAIL: $name: a run failed"; fail=1; continue; fi
  fk=$(field "$few" tape_slots); ak=$(field "$all" tape_slots)
  fb=$(field "$few" alloc_setup_bytes); ab=$(field "$all" alloc_setup_bytes)
  if [ "$(field "$few" params_fp)" = "$(field "$all" params_fp)" ] && [ "$(field "$few" last_loss)" = "$(field "$all" last_loss)" ] &&
     [ "$ak" = 4 ] && [ "$fk" -lt 4 ] && [ "$fb" -lt "$ab" ]; then
    echo "ok: $name: $fk slot(s) per stage (${fb} B) == 4 slots (${ab} B): parameters $(field "$few" params_fp), loss $(field "$few" last_loss)"
  else
    echo "FAIL: $name: few $fk slots fp $(field "$few" params_fp) loss $(field "$few" last_loss) $fb B; all $ak slots fp $(field "$all" params_fp) loss $(field "$all" last_loss) $ab B"; fail=1
  fi
done
pp2=$("$Q" train --preset tiny --pp 2 --micro 4 --steps 2 --quiet --json 2>/dev/null | grep '"rank":0')
[ "$(field "$pp2" tape_slots)" = 4 ] && echo "ok: --pp 2 keeps a slot per microbatch" || { echo "FAIL: --pp 2 slots: $pp2"; fail=1; }
exit $fail
