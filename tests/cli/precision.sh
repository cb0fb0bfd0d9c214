#!/usr/bin/env bash
# The precision switches: FP8 off (f32 GEMMs) and the current-scaling output head both
# train (finite, falling loss); FP8 on and off give different trajectories.
set -u
Q=${1:?usage: precision.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C="--preset tiny --micro 2 --steps 40 --lr 3e-3 --amax-history 4 --log-every 1 --trace on"
for v in "fp8-on|--fp8 on" "fp8-off|--fp8 off" "head-current|--fp8 on --head-scaling current"; do
  name=${v%%|*}; flags=${v#*|}
  if ! "$Q" train $C $flags --run-dir "$T/$name" >"$T/$name.log" 2>&1; then echo "FAIL: $name: $(tail -2 "$T/$name.log")"; fail=1; continue; fi
  first=$(grep -o 'loss [0-9.]*' "$T/$name.log" | head -1 | cut -d' ' -f2)
  last=$(grep -o 'loss [0-9.]*' "$T/$name.log" | tail -1 | cut -d' ' -f2)
  if python3 -c "import sys,math; a,b=map(float,sys.argv[1:]); sys.exit(0 if math.isfinite(b) and b < a - 0.5 else 1)" "$first" "$last"; then
    echo "ok: $name: loss $first -> $last"
  else echo "FAIL: $name: loss $first -> $last"; fail=1; fi
done
if "$Q" compare "$T/fp8-on" "$T/fp8-off" >/dev/null 2>&1; then echo "FAIL: fp8 on and off gave identical runs"; fail=1
else echo "ok: fp8 on and off differ"; fi
if "$Q" compare "$T/fp8-on" "$T/head-current" >/dev/null 2>&1; then echo "FAIL: delayed and current head scaling gave identical runs"; fail=1
else echo "ok: delayed and current head scaling differ"; fi
exit $fail
