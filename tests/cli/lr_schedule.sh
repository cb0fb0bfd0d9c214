#!/usr/bin/env bash
# The learning-rate schedule and the optimizer flags (issue 38, item 1).
#  1. cosine with warmup: every step's learning rate (the progress line's "lr") is the formula
#     written here, in float32: lr (s+1)/W during warmup, then lr_min + (lr - lr_min)(1 + cos(pi p))/2,
#     p = (s - W)/(D - W); linear with --lr-decay-steps ends at --lr-min and stays there;
#  2. the rate reaches the update: --warmup 1 with a constant rate gives the bytes of a plain run,
#     and the cosine run's parameters differ from the constant run's;
#  3. a resume continues the schedule exactly (bit-exact against the uninterrupted run);
#  4. a resume that changes --warmup, --lr-schedule or --weight-decay is refused naming the flag.
set -u
Q=${1:?usage: lr_schedule.sh QEFFECT SHARED}
S=${2:?usage: lr_schedule.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --data $S/data/brown.jsonl --log-every 1"
check_rates() { # OUT LR LRMIN WARMUP DECAY KIND
  python3 - "$@" <<'PY' || exit 1
import math, re, struct, sys
out, lr, lo, w, d, kind = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]
lr32, lo32 = f32(lr), f32(lo)
rows = [(int(m.group(1)), m.group(2)) for m in re.finditer(r'^step +(\d+)/\d+ .* lr (\S+)$', open(out).read(), re.M)]
if len(rows) < 5:
    sys.exit('FAIL: %d steps with a learning rate in the output' % len(rows))
for step, printed in rows:
    s = step - 1
    if w > 0 and s < w:
        want = lr32 * (s + 1) / w
    else:
        p = min(1.0, max(0.0, (s - w) / (d - w))) if d > w else 1.0
        want = lo32 + (lr32 - lo32) * 0.5 * (1 + math.cos(math.pi * p)) if kind == 'cosine' else lr32 - (lr32 - lo32) * p
    if '%.6e' % f32(want) != printed:
        sys.exit('FAIL: step %d: lr %s, the formula gives %.6e' % (step, printed, f32(want)))
print('ok: %d steps of %s (warmup %d, decay to step %d) match the formula, last lr %s' % (len(rows), kind, w, d, rows[-1][1]))
PY
}
# 1.
# shellcheck disable=SC2086
"$Q" train $C --steps 10 --lr 1e-3 --lr-min 1e-4 --lr-schedule cosine --warmup 3 --run-dir "$T/cos" >"$T/cos.out" 2>&1 ||
  { cat "$T/cos.out"; fail "cosine run"; }
check_rates "$T/cos.out" 1e-3 1e-4 3 10 cosine || fail "cosine rates"
# shellcheck disable=SC2086
"$Q" train $C --steps 10 --lr 2e-3 --lr-min 5e-4 --lr-schedule linear --lr-decay-steps 7 --run-dir "$T/lin" >"$T/lin.out" 2>&1 ||
  { cat "$T/lin.out"; fail "linear run"; }
check_rates "$T/lin.out" 2e-3 5e-4 0 7 linear || fail "linear rates"
grep -q "^step    10/10 .* lr 5.000000e-04$" "$T/lin.out" || fail "linear did not stay at --lr-min after its decay steps"

# 2.
# shellcheck disable=SC2086
"$Q" train $C --steps 6 --quiet --run-dir "$T/plain" || fail "plain run"
# shellcheck disable=SC2086
"$Q" train $C --steps 6 --quiet --warmup 1 --run-dir "$T/w1" || fail "warmup-1 run"
out=$("$Q" compare "$T/plain" "$T/w1") || { echo "$out"; fail "--warmup 1 does not give the plain run's bytes"; }
echo "ok: --warmup 1 (rate lr from step 0) gives the plain run's bytes: $(tail -1 <<<"$out")"
# shellcheck disable=SC2086
"$Q" train $C --steps 6 --quiet --lr-schedule cosine --run-dir "$T/c6" || fail "cosine 6"
! "$Q" compare "$T/plain" "$T/c6" >/dev/null 2>&1 || fail "the cosine schedule left the parameters as a constant rate does"
echo "ok: the cosine run's parameters differ from the constant run's"

# 3.
# shellcheck disable=SC2086
"$Q" train $C --steps 5 --quiet --lr-schedule cosine --warmup 3 --lr-min 1e-4 --lr-decay-steps 10 --ckpt-every 5 \
  --run-dir "$T/half" || fail "first half"
"$Q" resume --run-dir "$T/half" --steps 10 --quiet || fail "resume"
out=$("$Q" compare "$T/cos" "$T/half") || { echo "$out"; fail "the resumed schedule differs from the uninterrupted one"; }
echo "ok: resume 5 -> 10 continues the schedule bit-exact: $(tail -1 <<<"$out")"

# 4.
for flag in "--warmup 4" "--lr-schedule linear" "--weight-decay 0.2"; do
  # shellcheck disable=SC2086
  err=$("$Q" resume --run-dir "$T/half" --steps 12 $flag 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q -- "${flag%% *} ${flag#* } conflicts with the run" <<<"$err" ||
    { echo "$err"; fail "resume with $flag: rc $rc"; }
  echo "ok: resume $flag refused: $(head -1 <<<"$err" | cut -c1-120)"
done
