#!/usr/bin/env bash
# qeffect sample --backend cuda (issue 37, item 6): the KV-cache forward through the cuda backend.
#  1. two byte-vocabulary models are trained on the cpu (f32, 20 steps): --preset tiny (4 heads of
#     16, seq 32) and tiny with --hidden 128 --heads 2 --seq 64 (heads of 64), so attn_decode runs
#     both of its output paths and the cache restarts past seq;
#  2. per model, sampling on cuda repeats itself: the same seed twice gives the same bytes, text and
#     --json alike (and another seed other text);
#  3. per model, greedy decoding (--temperature 0 --json, 100 tokens, through the cache restart) on
#     cuda gives the host forward's tokens, and each token's logprob (log softmax of the logits, so
#     within twice the largest logit difference) is the host's within 1e-4.  Why 1e-4: cuda's f32
#     GEMMs (no TF32), layernorm and attention sum in other orders than the host; at these sizes
#     that moves a logit by a few 1e-7 of its size (cpu_gemm.c / cuda_gemm.cu: f32 GEMMs 1.7e-7 of
#     max|C|; tests/model/test_infer_dev.c: the whole forward on the cpu backend within 6e-7 of
#     max|logit|), some 1e-6 here.  The largest difference is printed.
# Prints PASS/FAIL per check.  Without a usable cuda backend (a build without CUDA, or no device)
# it exits 77 (skipped, saying why), or fails with QE_CUDA_REQUIRED=1.
# Run on a GPU machine: bash tests/cli/sample_cuda.sh BUILD/qeffect   (or ctest -R cli_sample_cuda)
set -u
Q=${1:?usage: sample_cuda.sh QEFFECT [SHARED]}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
skip() {
  [ "${QE_CUDA_REQUIRED:-0}" = 1 ] && fail "$* (QE_CUDA_REQUIRED is 1)"
  echo "SKIP: $*"; exit 77
}
pass() { echo "PASS: $*"; }

# Is there a cuda backend to run on?  sample opens it before it looks for the run, so a run that is
# not there tells: a usable backend gets as far as "no run" (exit 1).
"$Q" sample --run-dir "$T/none" --backend cuda >"$T/probe.out" 2>"$T/probe.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "without CUDA" "$T/probe.err"; then skip "this qeffect was built without CUDA"; fi
if grep -Eq "no CUDA device|cudaGetDeviceCount" "$T/probe.err"; then cat "$T/probe.err"; skip "no usable CUDA device"; fi
[ $rc -eq 1 ] || { cat "$T/probe.err"; fail "sample --backend cuda on a missing run exited $rc, not 1"; }

python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(20):
        f.write(json.dumps({'id': str(i), 'text': 'the quick brown fox jumps over the lazy dog. ' * 20}) + '\n')
" "$T/c.jsonl"
TRAIN=(--precision f32 --micro 2 --steps 20 --ckpt-every 10 --lr 1e-2 --quiet --data "$T/c.jsonl")
"$Q" train --preset tiny "${TRAIN[@]}" --run-dir "$T/m16" || fail "train the tiny model"
"$Q" train --preset tiny --hidden 128 --heads 2 --seq 64 "${TRAIN[@]}" --run-dir "$T/m64" ||
  fail "train the tiny model with heads of 64"

for m in m16 m64; do
  R=(--run-dir "$T/$m")
  # 2. the same seed, the same bytes
  "$Q" sample "${R[@]}" --prompt "the " --tokens 150 --seed 11 --backend cuda >"$T/a.txt" || fail "$m: cuda sample"
  "$Q" sample "${R[@]}" --prompt "the " --tokens 150 --seed 11 --backend cuda >"$T/b.txt" || fail "$m: cuda sample again"
  "$Q" sample "${R[@]}" --prompt "the " --tokens 150 --seed 12 --backend cuda >"$T/c.txt" || fail "$m: cuda sample, seed 12"
  cmp -s "$T/a.txt" "$T/b.txt" || fail "$m: two cuda samples with seed 11 differ: '$(head -c 80 "$T/a.txt")' vs '$(head -c 80 "$T/b.txt")'"
  cmp -s "$T/a.txt" "$T/c.txt" && fail "$m: seeds 11 and 12 gave the same text on cuda"
  "$Q" sample "${R[@]}" --tokens 150 --seed 3 --top-k 5 --json --backend cuda >"$T/a.json" || fail "$m: cuda --json"
  "$Q" sample "${R[@]}" --tokens 150 --seed 3 --top-k 5 --json --backend cuda >"$T/b.json" || fail "$m: cuda --json again"
  cmp -s "$T/a.json" "$T/b.json" || fail "$m: two cuda --json samples with seed 3 differ"
  pass "$m: cuda sampling repeats per seed (150 tokens, text and --json), another seed differs: '$(head -c 40 "$T/a.txt" | tr '\n' ' ')...'"

  # 3. greedy on cuda against the host forward
  G=(--prompt "the quick " --tokens 100 --temperature 0 --json)
  "$Q" sample "${R[@]}" "${G[@]}" >"$T/host.json" || fail "$m: greedy on the host"
  "$Q" sample "${R[@]}" "${G[@]}" --backend cuda >"$T/cuda.json" || fail "$m: greedy on cuda"
  python3 - "$T/host.json" "$T/cuda.json" "$m" <<'EOF' || exit 1
import json, sys
h, c, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
BOUND = 1e-4
if h["tokens"] != c["tokens"]:
    k = next(i for i, (a, b) in enumerate(zip(h["tokens"], c["tokens"])) if a != b)
    print(f"FAIL: {m}: greedy tokens differ first at {k}: host {h['tokens'][k]} cuda {c['tokens'][k]} "
          f"(logprobs host {h['logprobs'][k]:.9g} cuda {c['logprobs'][k]:.9g})")
    sys.exit(1)
d = [abs(a - b) for a, b in zip(h["logprobs"], c["logprobs"])]
k = max(range(len(d)), key=lambda i: d[i])
print(f"{'PASS' if d[k] <= BOUND else 'FAIL'}: {m}: greedy {len(d)} tokens on cuda == host; "
      f"max|logprob cuda - host| {d[k]:.3g} at token {k} (host {h['logprobs'][k]:.9g}), bound {BOUND:g}")
sys.exit(0 if d[k] <= BOUND else 1)
EOF
done
echo "PASS: sample_cuda"
