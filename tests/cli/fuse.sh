#!/usr/bin/env bash
# QE_FUSE=1 (issue 20): producers run inside their consumers - each layernorm before a linear
# writes its statistics alone and the linear's input cast normalizes; FC2's input cast applies FC1's
# bias + GELU as a prologue and FC1's dY cast runs GELU's backward (adding that bias to
# fc1_out first), so neither GELU's output nor its input gradient is written and FC1's GEMM
# adds no bias; the projection's and FC2's biases are added by residual_add, the QKV bias by
# flash attention as it reads q, k and v; each
# bias gradient is summed by the cast of its dY; the backward's residual joins are added by
# layernorm_bwd.  The promise is the bits of the unfused ops:
#  1. each configuration trained with and without QE_FUSE=1 gives identical fingerprints in
#     every category (`qeffect compare` exits 0 and says identical): fp8, bf16 and f32;
#     interleaved and zbv; eager and graph; split and full backward; --pp 1/2, --dp 2;
#     a multi-sequence flash-attention shape;
#  2. a fused run's checkpoint resumed unfused ends where an unfused run of all the steps
#     ends (the fused path keeps no state of its own);
#  3. the knob is read: a fused run says so on stderr, an unfused one does not.
set -u
Q=${1:?usage: fuse.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C="--preset tiny --micro 4 --amax-history 4 --steps 4 --quiet"
n=0
same() { # same NAME A B: the runs in A and B have identical fingerprints
  local out
  if out=$("$Q" compare "$2" "$3") && grep -q "^identical" <<<"$out"; then
    echo "ok: $1 ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
  else
    echo "FAIL: $1: runs differ:"; echo "$out"; fail=1
  fi
}
pair() { # pair NAME FLAGS...: unfused against QE_FUSE=1, same flags
  local name=$1; shift
  n=$((n + 1))
  local a="$T/$n-plain" b="$T/$n-fused"
  if ! "$Q" train $C "$@" --run-dir "$a"; then echo "FAIL: $name unfused run"; fail=1; return; fi
  if ! QE_FUSE=1 "$Q" train $C "$@" --run-dir "$b"; then echo "FAIL: $name fused run"; fail=1; return; fi
  same "$name: unfused == QE_FUSE=1" "$a" "$b"
  rm -rf "$a" "$b"
}
for prec in fp8 bf16 f32; do
  pair "$prec interleaved pp2 graph direct" --precision $prec --pp 2 --exec graph --grad direct
  pair "$prec zbv pp2 eager copy" --precision $prec --pp 2 --schedule zbv --exec eager --grad copy
done
pair "fp8 pp1 full backward eager" --pp 1 --backward full --exec eager
pair "fp8 interleaved pp2 dp2 graph" --pp 2 --dp 2 --exec graph
pair "fp8 per-mb arena zbv pp2 graph" --pp 2 --schedule zbv --exec graph --arena per-mb
pair "fp8 eval every 2" --pp 2 --eval-every 2 --eval-micro 2
pair "bf16 flash attention pp2 graph" --precision bf16 --attention flash --pp 2 --exec graph
pair "f32 flash attention zbv" --precision f32 --attention flash --pp 2 --schedule zbv
pair "fp8 gpt2-shaped flash batch 2" --preset gpt2 --layers 2 --hidden 64 --heads 2 --ffn 256 --seq 128 \
  --vocab 512 --batch 2 --attention flash --pp 2 --exec graph

# 2. fused checkpoint, unfused resume == unfused uninterrupted
U="$T/uninterrupted" R="$T/resumed"
if "$Q" train $C --pp 2 --exec graph --run-dir "$U" &&
   QE_FUSE=1 "$Q" train $C --pp 2 --exec graph --steps 2 --ckpt-every 2 --run-dir "$R" &&
   "$Q" resume --run-dir "$R" --steps 4 --quiet; then
  same "fused to step 2, resumed unfused to 4 == unfused 4 steps" "$U" "$R"
else
  echo "FAIL: the resume pair did not run"; fail=1
fi

# 3. the knob is read
QE_FUSE=1 "$Q" train --preset tiny --steps 1 --micro 2 --trace off 2>"$T/err" >/dev/null
if grep -q "QE_FUSE=1" "$T/err"; then echo "ok: a fused run says so"; else echo "FAIL: QE_FUSE=1 run is silent about it: $(cat "$T/err")"; fail=1; fi
"$Q" train --preset tiny --steps 1 --micro 2 --trace off 2>"$T/err" >/dev/null
if grep -q "QE_FUSE" "$T/err"; then echo "FAIL: an unfused run mentions QE_FUSE"; fail=1; else echo "ok: an unfused run does not"; fi
exit $fail
