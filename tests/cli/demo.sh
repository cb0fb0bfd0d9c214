#!/usr/bin/env bash
# `make demo` must stay true: run the demo script end to end into a temporary folder.
set -eu
Q=${1:?usage: demo.sh QEFFECT SHARED}
here=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
QE_DEMO_DIR="$T/demo" bash "$here/scripts/demo.sh" "$Q" >"$T/log" 2>&1 || { cat "$T/log"; echo "FAIL: the demo failed"; exit 1; }
grep -q "^identical: all" "$T/log" || { cat "$T/log"; echo "FAIL: resumed run differs from the uninterrupted one"; exit 1; }
[ -s "$T/demo/loss.png" ] || { echo "FAIL: no plot"; exit 1; }
echo "ok: demo ran; $(grep '^identical' "$T/log")"
