#!/usr/bin/env bash
# The precision switches: --precision fp8 | bf16 | f32 (and the --fp8 on|off alias) and the
# current-scaling output head all train (finite, falling loss); fp8, bf16 and f32 give three
# different trajectories; --fp8 off is --precision f32 bit for bit; the catalog records the
# precision and a resume under another one is refused.
set -u
Q=${1:?usage: precision.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C="--preset tiny --micro 2 --steps 40 --lr 3e-3 --amax-history 4 --log-every 1 --trace on"
for v in "fp8-on|--fp8 on" "fp8-off|--fp8 off" "head-current|--fp8 on --head-scaling current" \
         "bf16|--precision bf16" "f32|--precision f32"; do
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
differ() { # a b what
  if "$Q" compare "$T/$1" "$T/$2" >/dev/null 2>&1; then echo "FAIL: $3 gave identical runs"; fail=1
  else echo "ok: $3 differ"; fi
}
differ bf16 fp8-on "bf16 and fp8"
differ bf16 f32 "bf16 and f32"
if out=$("$Q" compare "$T/fp8-off" "$T/f32"); then echo "ok: --fp8 off == --precision f32 ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
else echo "FAIL: --fp8 off and --precision f32 differ"; echo "$out"; fail=1; fi
"$Q" train $C --precision bf16 --steps 2 --ckpt-every 2 --run-dir "$T/b2" --quiet || { echo "FAIL: bf16 checkpoint run"; fail=1; }
mode=$("$Q" inspect --run-dir "$T/b2" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['config']['precision']['mode'])")
[ "$mode" = bf16 ] && echo "ok: the catalog records precision bf16" || { echo "FAIL: recorded precision '$mode'"; fail=1; }
err=$("$Q" resume --run-dir "$T/b2" --steps 3 --precision fp8 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q -- "--precision fp8 conflicts with the run, which was trained with precision bf16" <<<"$err"; then
  echo "ok: resume under another precision refused: $err"
else echo "FAIL: resume --precision fp8 of a bf16 run: exit $rc: $err"; fail=1; fi
exit $fail
