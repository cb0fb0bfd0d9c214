#!/usr/bin/env bash
# --grad-clip across mappings and through a resume (issue 38, item 1; the formula itself is
# tests/exec/test_grad_clip.c).  A clip of 1.0 is below the tiny model's gradient norm (about 2 to 8
# over these steps), so every step is clipped.
#  1. the progress line shows the global gradient norm, and it is the same number under --pp 1,
#     --pp 2, --pp 2 --chunks 2 (interleaved) and zbv: the norm is summed in one global order;
#  2. the clipped runs are byte-identical across those mappings and against --backward full (split ==
#     reference), and differ from the unclipped run;
#  3. --dp 2 clips the replica sum: the same norms and bytes under --pp 1 and --pp 2, and the
#     clipped bytes differ from the unclipped run's;
#  4. a resume continues clipped runs exactly, and a resume that changes --grad-clip is refused;
#  5. the catalog records each step's lr and grad norm (losses table, schema version 5).
set -u
Q=${1:?usage: grad_clip.sh QEFFECT SHARED}
S=${2:?usage: grad_clip.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --micro 2 --steps 6 --data $S/data/brown.jsonl --log-every 1 --grad-clip 1.0"
norms() { sed -n 's/^step .* grad norm \([^ ]*\).*$/\1/p' "$1" | tr '\n' ' '; }

run() { # NAME FLAGS...
  local n=$1; shift
  # shellcheck disable=SC2086
  "$Q" train $C "$@" --run-dir "$T/$n" >"$T/$n.out" 2>&1 || { cat "$T/$n.out"; fail "train $n"; }
}
run pp1 --pp 1
run pp2 --pp 2
run pp2v2 --pp 2 --chunks 2
run zbv --pp 2 --schedule zbv
run full --pp 2 --backward full
run graph --pp 2 --exec graph --arena per-mb

# 1.
ref=$(norms "$T/pp1.out")
[ "$(wc -w <<<"$ref")" -eq 6 ] || { cat "$T/pp1.out"; fail "expected 6 grad norms in the pp1 progress lines, got '$ref'"; }
for n in pp2 pp2v2 zbv full graph; do
  [ "$(norms "$T/$n.out")" = "$ref" ] || fail "$n printed grad norms '$(norms "$T/$n.out")', pp1 '$ref'"
done
echo "ok: the same grad norms under every mapping: $ref"
awk -v r="$ref" 'BEGIN { split(r, a, " "); for (i in a) if (a[i] + 0 <= 1.0) exit 1 }' ||
  fail "a norm at or below the clip of 1.0: the test would not clip every step ($ref)"

# 2.
for n in pp2 pp2v2 zbv full graph; do
  out=$("$Q" compare "$T/pp1" "$T/$n" 2>&1) || { echo "$out"; fail "pp1 vs $n differ under --grad-clip"; }
done
echo "ok: clipped runs identical across pp1, pp2, interleaved, zbv, --backward full, graph per-mb"
# shellcheck disable=SC2086
"$Q" train ${C/--grad-clip 1.0/} --pp 2 --run-dir "$T/plain" >"$T/plain.out" 2>&1 || fail "unclipped run"
! "$Q" compare "$T/pp2" "$T/plain" >/dev/null 2>&1 || fail "--grad-clip 1.0 left the unclipped run's bytes"
echo "ok: the clipped run differs from the unclipped one"

# 3.
# shellcheck disable=SC2086
"$Q" train $C --pp 1 --dp 2 --nproc 2 --run-dir "$T/dp2" >"$T/dp2.out" 2>&1 || { cat "$T/dp2.out"; fail "dp 2"; }
# shellcheck disable=SC2086
"$Q" train $C --pp 2 --dp 2 --nproc 4 --run-dir "$T/pp2dp2" >"$T/pp2dp2.out" 2>&1 || { cat "$T/pp2dp2.out"; fail "pp 2 dp 2"; }
# shellcheck disable=SC2086
"$Q" train ${C/--grad-clip 1.0/} --pp 1 --dp 2 --nproc 2 --run-dir "$T/dp2plain" >"$T/dp2plain.out" 2>&1 || fail "dp 2 unclipped"
dp2=$(norms "$T/dp2.out")
[ "$(wc -w <<<"$dp2")" -eq 6 ] || { cat "$T/dp2.out"; fail "expected 6 grad norms under --dp 2, got '$dp2'"; }
[ "$(norms "$T/pp2dp2.out")" = "$dp2" ] || fail "--pp 2 --dp 2 norms '$(norms "$T/pp2dp2.out")', --pp 1 --dp 2 '$dp2'"
out=$("$Q" compare "$T/dp2" "$T/pp2dp2" 2>&1) || { echo "$out"; fail "--dp 2 clipped runs differ across --pp 1 and --pp 2"; }
[ "$(norms "$T/dp2plain.out" | cut -d' ' -f1)" = "$(cut -d' ' -f1 <<<"$dp2")" ] ||
  fail "the first step's norm differs with and without clipping under --dp 2"
! "$Q" compare "$T/dp2" "$T/dp2plain" >/dev/null 2>&1 || fail "--grad-clip under --dp 2 left the unclipped bytes"
echo "ok: --dp 2 clips the replica sum: the same norms and bytes under --pp 1 and --pp 2 ($dp2)"

# 4.
# shellcheck disable=SC2086
"$Q" train ${C/--steps 6/--steps 3} --pp 2 --ckpt-every 3 --run-dir "$T/half" --quiet || fail "first half"
"$Q" resume --run-dir "$T/half" --steps 6 --quiet || fail "resume"
out=$("$Q" compare "$T/pp2" "$T/half") || { echo "$out"; fail "the resumed clipped run differs"; }
echo "ok: resume 3 -> 6 with clipping is bit-exact: $(tail -1 <<<"$out")"
err=$("$Q" resume --run-dir "$T/half" --steps 8 --grad-clip 2 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--grad-clip 2 conflicts with the run" <<<"$err" || { echo "$err"; fail "resume --grad-clip 2: rc $rc"; }
echo "ok: resume --grad-clip 2 refused: $(head -1 <<<"$err" | cut -c1-120)"

# 5. the catalog keeps each step's learning rate and gradient norm beside its loss
python3 - "$T/pp2/catalog.db" "$ref" <<'PY' || fail "the catalog's losses table"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT step, lr, grad_norm FROM losses ORDER BY step").fetchall()
printed = sys.argv[2].split()
assert [r[0] for r in rows] == list(range(1, 7)), rows
for (step, lr, gn), p in zip(rows, printed):
    assert abs(lr - 1e-3) < 1e-9, (step, lr)
    assert '%.4e' % gn == p, (step, gn, p)
print('ok: the catalog records lr and grad norm of every step:', [(r[0], r[1], round(r[2], 5)) for r in rows])
PY
