#!/usr/bin/env bash
# Where the flash kernels' time goes (one device call; builds nothing): an Nsight Compute
# profile of each pass, for each binary, on each shape.
#   bash bench/attention/profile.sh PKG OUT [VARIANT...]
# PKG : folder holding qeffect (and qeffect-VARIANT for each VARIANT), as for check.sh
# OUT : where the results go ($OUT of the device tool)
# For every binary, shape and pass (forward, dQ, dK/dV), ncu --set full profiles one launch of
# `qeffect bench attention` (the third of that kernel, past the warm-up), with ncu's default
# clock control (base clocks: the absolute times read low; compare within the report).
# Leaves OUT/attn-prof.tar.xz with, per binary NAME and shape S:
#   NAME-S.ncu-rep   the reports (open with ncu-ui or ncu -i)
#   NAME-S.txt       the details page of every section (stall reasons, L2 hit rates, occupancy)
#   NAME-S-sass.csv  per SASS instruction: executed counts and warp stall samples
# and prints each pass's duration, L2 hit rate and top stall reasons as a short table (also
# appended to OUT/prof-summary.txt as it goes).
# Knobs: SHAPES (16:12:1024:64,2:16:4096:128), NCU (/usr/local/cuda/bin/ncu), SET (full).
set -u
P=${1:?usage: profile.sh PKG OUT [VARIANT...]}; O=${2:?usage: profile.sh PKG OUT [VARIANT...]}; shift 2
SHAPES=${SHAPES:-16:12:1024:64,2:16:4096:128}
NCU=${NCU:-/usr/local/cuda/bin/ncu}; SET=${SET:-full}
[ -x "$NCU" ] || { echo "profile.sh: no ncu at $NCU" >&2; exit 2; }
[ -x "$P/qeffect" ] || { echo "profile.sh: no qeffect in $P" >&2; exit 2; }
for v in "$@"; do [ -x "$P/qeffect-$v" ] || { echo "profile.sh: no qeffect-$v in $P" >&2; exit 2; }; done
W=$(mktemp -d); mkdir -p "$O"
for name in new "$@"; do
  b=$P/qeffect; [ "$name" = new ] || b=$P/qeffect-$name
  for s in ${SHAPES//,/ }; do
    tag=$name-${s//:/-}
    for k in fwd dq dkv; do
      timeout -k 5 120 "$NCU" --set "$SET" -k "regex:flashwg_${k}_kernel" --launch-skip 2 --launch-count 1 \
        -o "$W/$tag-$k" -f "$b" bench attention --backend cuda --shapes "$s" --min-ms 1 > "$W/$tag-$k.log" 2>&1
      echo "ncu $tag $k rc=$?"
    done
    for k in fwd dq dkv; do
      [ -f "$W/$tag-$k.ncu-rep" ] || continue
      "$NCU" -i "$W/$tag-$k.ncu-rep" --page details --print-details all >> "$W/$tag.txt" 2>&1
      "$NCU" -i "$W/$tag-$k.ncu-rep" --page source --csv --print-source sass > "$W/$tag-$k-sass.csv" 2>&1
      "$NCU" -i "$W/$tag-$k.ncu-rep" --page raw --csv > "$W/$tag-$k-raw.csv" 2>&1
    done
    python3 "$(dirname "$0")/prof_sum.py" "$W"/$tag-{fwd,dq,dkv}-raw.csv 2>&1 | sed "s/^/$tag /" | tee -a "$O/prof-summary.txt"
  done
done
(cd "$W" && tar cf - ./*.ncu-rep ./*.txt ./*.csv ./*.log 2>/dev/null | xz -T4 -6 > "$O/attn-prof.tar.xz")
ls -la "$O/attn-prof.tar.xz"
