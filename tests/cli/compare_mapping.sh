#!/usr/bin/env bash
# compare decides per step whether resource counts are comparable: a run resumed under another
# pipeline mapping (--pp 1 after --pp 2) matches the uninterrupted run in every category, and
# its peak-tape and delayed-dW rows of the remapped steps are skipped and said to be skipped.
set -u
Q=${1:?usage: compare_mapping.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C="--preset tiny --micro 4 --amax-history 4 --quiet"
"$Q" train $C --pp 2 --steps 6 --run-dir "$T/full" || exit 1
"$Q" train $C --pp 2 --steps 3 --ckpt-every 3 --run-dir "$T/part" || exit 1
"$Q" resume --run-dir "$T/part" --steps 6 --pp 1 --quiet || exit 1
out=$("$Q" compare "$T/full" "$T/part" --steps 1:6) || { echo "$out"; echo "FAIL: remapped resume differs"; exit 1; }
echo "$out" | tail -4
grep -q "^peak_tapes  *12  *0  *skipped 12 rows" <<<"$out" || { echo "FAIL: expected steps 1-3 compared and 4-6 skipped for peak_tapes"; exit 1; }
json=$("$Q" compare "$T/full" "$T/part" --steps 1:6 --json)
python3 -c "import json,sys; d=json.loads(sys.argv[1]); s={x['category']:x['rows'] for x in d['skipped']}; sys.exit(0 if s.get('delayed_dw')==12 and d['mismatches']==0 else 1)" "$json" \
  || { echo "$json"; echo "FAIL: JSON does not list the skipped rows"; exit 1; }
echo "ok: remapped steps compared where comparable, resource counts skipped where the mapping changed"
