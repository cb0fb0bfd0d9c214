#!/usr/bin/env bash
# Three defects a new user met (issue 38, item 7):
#  1. --preset gpt2 --hidden 128 kept ffn 3072: a shape field left unset follows the ones given
#     (ffn = 4 x hidden), and the start line prints the whole shape and the parameter count;
#  2. resume without --steps, with the run's steps already done, trained 0 steps and exited 0:
#     it now exits 2 saying why (and --steps equal to the checkpoint's step still only restores);
#  3. inspect's amax history said "newest first" but listed the oldest (zero) slots first: the
#     text now shows the next step's slot [0], then [L-1], [L-2], ... (the roll puts the newest
#     recorded amax at L-1), checked against the raw history of inspect --json.
set -u
Q=${1:?usage: train_defaults.sh QEFFECT SHARED}
S=${2:?usage: train_defaults.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
D="--data $S/data/brown.jsonl"

# 1.
# shellcheck disable=SC2086
out=$("$Q" train --preset gpt2 --hidden 128 --heads 4 --layers 1 --seq 64 --vocab 512 --pp 1 --micro 1 --steps 1 $D 2>&1) ||
  { echo "$out"; fail "a gpt2 shape with --hidden 128"; }
line=$(grep -m1 "^training" <<<"$out")
grep -q "hidden 128, heads 4, ffn 512," <<<"$line" || fail "--hidden 128 without --ffn: $line"
# gpt2 ties its head to wte: the vocabulary's matrix counts once
want=$(python3 -c "H,F,V,T,L=128,512,512,64,1; print('%.2fM' % ((V*H+T*H+L*(4*H+3*H*H+3*H+H*H+H+F*H+F+H*F+H)+2*H)/1e6))")
grep -q "; $want parameters)" <<<"$line" || fail "the start line does not give $want parameters: $line"
echo "ok: --hidden 128 gives ffn 512; the start line: $(cut -c1-110 <<<"$line")"

# 2.
# shellcheck disable=SC2086
"$Q" train --preset tiny --pp 2 --micro 2 --quiet $D --run-dir "$T/r" --steps 4 --ckpt-every 2 --amax-history 4 || fail "train"
err=$("$Q" resume --run-dir "$T/r" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "nothing to train: the checkpoint is at step 4" <<<"$err" ||
  { echo "$err"; fail "resume without --steps at the run's end: rc $rc"; }
"$Q" resume --run-dir "$T/r" --steps 4 --quiet 2>/dev/null || fail "resume --steps 4 (restore only)"
echo "ok: resume without --steps at the end exits 2 saying why; --steps 4 only restores"

# 3.
"$Q" inspect --run-dir "$T/r" >"$T/i.txt" || fail "inspect"
"$Q" inspect --run-dir "$T/r" --json >"$T/i.json" || fail "inspect --json"
python3 - "$T/i.txt" "$T/i.json" <<'PY' || exit 1
import json, sys
text = open(sys.argv[1]).read().splitlines()
roles = json.load(open(sys.argv[2]))['fp8']
checked = 0
for r in roles:
    h = r['amax_history']
    if len(h) != 4 or not any(h):
        continue
    want = 'next %.6g; %s' % (h[0], ' '.join('%.6g' % h[i] for i in (3, 2, 1)))
    rows = [l for l in text if l.split()[:3] == [str(r['stage']), r['linear'], r['role']]]
    if not rows or not rows[0].endswith(want):
        sys.exit('FAIL: stage %d %s %s: want "...%s", got %r' % (r['stage'], r['linear'], r['role'], want, rows[:1]))
    checked += 1
if checked < 4:
    sys.exit('FAIL: only %d roles with a history to check' % checked)
print('ok: %d roles: the amax history reads next slot, then newest first' % checked)
PY
