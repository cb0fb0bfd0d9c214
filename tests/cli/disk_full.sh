#!/usr/bin/env bash
# A full disk is reported as one (issue 15, item 5): training into a run directory on a
# small tmpfs (a mount namespace of our own: unshare -rm, no root needed) fails, and every
# error line says "no space left on device", names a path on that disk and carries the code
# QE_ENOSPC, never "input/output error" (QE_EIO) or a catalog error (QE_ECATALOG) - with
# synchronous and with --ckpt-async saves, and when the catalog itself does not fit.
set -u
Q=${1:?usage: disk_full.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# One rank: two ranks racing for the last blocks make the outcome timing-dependent (see the report of issue 15).
C="--preset tiny --pp 1 --chunks 4 --micro 4 --amax-history 4 --steps 8 --ckpt-every 2 --quiet"
unshare -rm --propagation private true 2>/dev/null || { echo "ok (skipped: unshare -rm is refused here)"; exit 0; }
fail=0
# sizes: the catalog does not fit (120k), the first checkpoint does not (300k, 1500k), a later one does not (4m)
for mode in "" "--ckpt-async"; do
  for size in 120k 300k 1500k 4m; do
    mkdir -p "$T/mnt"
    unshare -rm --propagation private sh -c 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"' \
      _ "$size" "$T/mnt" "$Q" train $C $mode --run-dir "$T/mnt/r" >"$T/out" 2>&1
    st=$?
    errs=$(grep -E '^qeffect' "$T/out" | grep -v "launch of .* ranks failed" | grep -v "closed its comm\|closed its connection")
    if [ $st -eq 0 ]; then echo "FAIL: $size $mode: training on a full disk succeeded"; fail=1; continue; fi
    if [ -z "$errs" ]; then cat "$T/out"; echo "FAIL: $size $mode: no error line"; fail=1; continue; fi
    while IFS= read -r l; do
      if ! grep -q "no space left on device" <<<"${l,,}" || ! grep -q "$T/mnt/r" <<<"$l" || ! grep -q "(QE_ENOSPC)$" <<<"$l" \
         || grep -qi "input/output error\|QE_EIO\|QE_ECATALOG" <<<"$l"; then
        echo "$l"; echo "FAIL: $size $mode: the line above does not report a full disk (no space left on device, the path, QE_ENOSPC)"; fail=1
      fi
    done <<<"$errs"
    [ $fail -eq 0 ] && echo "  $size ${mode:-sync}: $(head -c 160 <<<"$errs" | head -1)..."
  done
done
[ $fail -eq 0 ] || exit 1
echo "ok: a full disk says 'no space left on device', names the path and is QE_ENOSPC, sync and async"
