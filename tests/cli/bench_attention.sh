#!/usr/bin/env bash
# qeffect bench attention on the cpu backend (issue 34's kernel benchmark; the cuda numbers come
# from bench/attention/run.sh on a GPU): a supported shape reports positive times and the causal
# FLOP count 2 B NH T^2 D (head dimension 128 too, with the default bf16 operands); a head
# dimension the flash ops refuse (80) is reported as unsupported with
# the backend's message while the other shapes still run; the table has a row per shape; bad
# flags and shapes exit 2 naming the problem.
set -u
Q=${1:?usage: bench_attention.sh QEFFECT [SHARED]}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

"$Q" bench attention --backend cpu --shapes 2:2:64:16,1:2:64:80,1:2:64:128,1:4:96:32 --min-ms 1 --json >"$W/j" 2>"$W/e"
rc=$?
[ $rc -eq 0 ] && ok "json run exits 0" || { bad "json run exited $rc: $(cat "$W/e")"; }
python3 - "$W/j" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
errs = []
if [r["shape"] for r in rows] != ["2:2:64:16", "1:2:64:80", "1:2:64:128", "1:4:96:32"]:
    errs.append("shapes in order: %s" % [r.get("shape") for r in rows])
for r in rows:
    fl = 2.0 * r["batch"] * r["heads"] * r["seq"] ** 2 * r["head_dim"]
    if r["fwd_flop"] != fl:
        errs.append("%s: fwd_flop %s, not 2 B NH T^2 D = %s" % (r["shape"], r["fwd_flop"], fl))
    if r["head_dim"] == 80:
        if r["fwd_ms"] is not None or "head dimension 80" not in r.get("unsupported", ""):
            errs.append("%s: not reported unsupported: %s" % (r["shape"], r))
    else:
        if not (r["fwd_ms"] > 0 and r["bwd_ms"] > 0 and r["fwd_reps"] >= 1 and r["bwd_reps"] >= 1):
            errs.append("%s: times %s" % (r["shape"], r))
        elif abs(r["fwd_tflops"] - fl / (r["fwd_ms"] / 1e3) / 1e12) > 1e-9 * r["fwd_tflops"] or \
             abs(r["bwd_tflops"] - 2.5 * fl / (r["bwd_ms"] / 1e3) / 1e12) > 1e-9 * r["bwd_tflops"]:
            errs.append("%s: TFLOP/s not the FLOPs over the time: %s" % (r["shape"], r))
for e in errs: print("FAIL:", e)
sys.exit(1 if errs else 0)
PY
[ $? -eq 0 ] && ok "json rows: flops, times, the unsupported head dim, the shape after it" || bad "json rows"

"$Q" bench attention --backend cpu --shapes 1:2:64:16 --min-ms 1 >"$W/t" 2>&1 || bad "table run failed: $(cat "$W/t")"
grep -Eq '^1:2:64:16 +1 +2 +64 +16 ' "$W/t" && ok "table row" || bad "no table row: $(cat "$W/t")"

for args in "--shapes 1:2:x" "--shapes 0:2:64:16" "--operands fp16" "--backend tpu" "--min-ms abc" "--bogus"; do
  # shellcheck disable=SC2086
  "$Q" bench attention --backend cpu $args >"$W/o" 2>&1
  rc=$?
  # --backend tpu overrides the first --backend
  [ $rc -eq 2 ] && grep -q "bench attention" "$W/o" && ok "bad usage '$args': exit 2" || bad "'$args': exit $rc: $(cat "$W/o")"
done
"$Q" bench attention --help | grep -q "2 B NH T^2 D" && ok "--help states the FLOP count" || bad "--help"
"$Q" bench --help | grep -q "attention" && ok "bench --help lists it" || bad "bench --help lacks attention"
exit $fail
