#!/usr/bin/env bash
# Progress a person can read (issue 38, item 5).
#  1. text: each progress line gives step, loss, grad norm, tok/s, model TFLOP/s, ms/step, elapsed,
#     eta and lr; --log-every 2 prints steps 2, 4 and the last; one summary line ends the run;
#  2. --log-format json: stdout is JSON lines alone, one per logged step and a summary last, and
#     model_tflops = tok/s x (6 (N - T H) + 12 L H T) / 1e12 with N counted here from the shape;
#     the last step's eta is 0; the summary's numbers match the steps';
#  3. a resume's summary names the steps it ran; a bad --log-format exits 2.
set -u
Q=${1:?usage: progress_log.sh QEFFECT SHARED}
S=${2:?usage: progress_log.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --data $S/data/brown.jsonl"

# 1.
# shellcheck disable=SC2086
"$Q" train $C --steps 5 --log-every 2 --run-dir "$T/a" >"$T/a.out" 2>&1 || { cat "$T/a.out"; fail "text run"; }
steps=$(sed -n 's/^step *\([0-9]*\)\/5 .*/\1/p' "$T/a.out" | tr '\n' ' ')
[ "$steps" = "2 4 5 " ] || { cat "$T/a.out"; fail "--log-every 2 printed steps '$steps', want 2 4 5"; }
re='^step +[0-9]+/5  loss [0-9.]+  grad norm [0-9.e+-]+ +[0-9]+ tok/s +[0-9.]+ TFLOP/s +[0-9.]+ ms/step  [0-9:]+ elapsed  eta [0-9:]+  lr [0-9.e+-]+$'
[ "$(grep -cE "$re" "$T/a.out")" -eq 3 ] || { cat "$T/a.out"; fail "progress lines do not all have every field"; }
[ "$(grep -c '^done: steps 1 to 5 in [0-9:]*: loss [0-9.]*, [0-9]* tok/s, [0-9.]* model TFLOP/s$' "$T/a.out")" -eq 1 ] ||
  { cat "$T/a.out"; fail "no single summary line"; }
echo "ok: text progress at steps 2 4 5 with every field, one summary line"

# 2.
# shellcheck disable=SC2086
"$Q" train $C --steps 4 --eval-every 2 --log-format json --run-dir "$T/j" >"$T/j.out" 2>"$T/j.err" ||
  { cat "$T/j.out" "$T/j.err"; fail "json run"; }
python3 - "$T/j.out" <<'PY' || fail "the JSON lines"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]  # every stdout line is JSON
steps = [r for r in rows if r["event"] == "step"]
assert [r["step"] for r in steps] == [1, 2, 3, 4], rows
assert rows[-1]["event"] == "summary" and sum(r["event"] == "summary" for r in rows) == 1, rows
V, H, F, T, L = 256, 64, 256, 32, 4          # the tiny preset
N = V * H + T * H + L * (4 * H + 3 * H * H + 3 * H + H * H + H + F * H + F + H * F + H) + 2 * H + V * H
flops = 6 * (N - T * H) + 12 * L * H * T
for r in steps:
    for k in ("loss", "lr", "grad_norm", "tokens_per_s", "model_tflops", "ms", "elapsed_s", "eta_s"):
        assert r[k] is not None, (k, r)
    want = r["tokens_per_s"] * flops / 1e12
    assert abs(r["model_tflops"] - want) <= 1e-3 + 1e-3 * want, (r, want)
    assert (r["eval_loss"] is not None) == (r["step"] % 2 == 0), r
assert steps[-1]["eta_s"] == 0, steps[-1]
s = rows[-1]
assert s["steps_run"] == 4 and s["last_step"] == 4 and s["loss"] == steps[-1]["loss"], s
assert s["eval_loss"] == steps[-1]["eval_loss"] and s["best_eval_loss"] == min(r["eval_loss"] for r in steps[1::2]), s
print("ok: %d JSON step lines and a summary; model TFLOP/s = tok/s x %d FLOPs per token" % (len(steps), flops))
PY

# 3.
# shellcheck disable=SC2086
"$Q" train $C --steps 2 --ckpt-every 2 --run-dir "$T/r" --quiet || fail "first half"
"$Q" resume --run-dir "$T/r" --steps 4 >"$T/r.out" 2>&1 || { cat "$T/r.out"; fail "resume"; }
grep -q '^done: steps 3 to 4 in ' "$T/r.out" || { cat "$T/r.out"; fail "the resume's summary does not name steps 3 to 4"; }
# shellcheck disable=SC2086
"$Q" train $C --steps 1 --log-format yaml >"$T/bad.out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "log-format" "$T/bad.out" || { cat "$T/bad.out"; fail "--log-format yaml: rc $rc"; }
echo "ok: a resume's summary names steps 3 to 4; --log-format yaml exits 2"
