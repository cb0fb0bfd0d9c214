#!/usr/bin/env bash
# bench/shapes/gpu.sh - the GPU machine's check of the real-model shapes (issue 18, and the
# starting point of issue 20), one call:
#   1. the cuda op tests (bf16 cast and GEMM, padded-vocabulary xent among them), the cuda model
#      test and the capture test;
#   2. tests/cli/model_shapes.sh on cuda at seq 512: 8 layers, 2 per chunk at --pp 2, batch 2,
#      GPT-2's padded vocabulary; split == full under interleaved and zbv, eager and graph;
#      resume exact (same mapping and --pp 1);
#   3. tokens/s of gpt2 (d12) at --pp 1, one stage of 12 layers, captured graphs, on GPT-2
#      tokens of the Brown corpus: fp8 and bf16, flash and probs attention, at seq 1024 (batch
#      B, M microbatches) and at seq 256 (batch 4B): peak allocation and growth from --json.
# usage: bench/shapes/gpu.sh PKG OUT   (PKG: qeffect, the test binaries, brown_{train,val}.bin)
set -u
PKG=${1:?PKG}; OUT=${2:?OUT}
mkdir -p "$OUT"
log() { echo "== $*"; }
fail=0
for t in backend_test_cuda_ops backend_test_cuda_attn backend_test_cuda_layers backend_test_cuda_capture \
    backend_test_cuda_model backend_test_capture; do
  if "$PKG/$t" >"$OUT/$t.log" 2>&1; then log "$t: $(tail -1 "$OUT/$t.log")"
  else log "$t FAILED: $(grep -m5 FAIL "$OUT/$t.log")"; tail -3 "$OUT/$t.log"; fail=1; fi
done
log "model_shapes on cuda, seq 512"
QE_P2P=host QE_SHAPE_SEQ=512 QE_SHAPE_EXTRA="--backend cuda" bash tests/cli/model_shapes.sh "$PKG/qeffect" "$PKG" \
  >"$OUT/model_shapes.log" 2>&1 || fail=1
cat "$OUT/model_shapes.log"
B=${SHAPES_BATCH:-8}; M=${SHAPES_MICRO:-4}; STEPS=${SHAPES_STEPS:-8}
gpt2() { # name flags...
  local name=$1; shift
  log "gpt2 $name"
  "$PKG/qeffect" train --preset gpt2 --micro "$M" --pp 1 --chunks 1 --backend cuda --exec graph --trace off \
    --steps "$STEPS" --amax-history 16 --lr 6e-4 --data "$PKG/brown_train.bin" --log-every 1 --json "$@" \
    >"$OUT/gpt2-$name.log" 2>&1 || fail=1
  grep -E "^step|error|QE_" "$OUT/gpt2-$name.log" | tail -2
  grep -o '"alloc_peak_bytes":[0-9]*,"alloc_live_bytes":[0-9]*,"alloc_growth_bytes":[0-9]*' "$OUT/gpt2-$name.log"
}
gpt2 fp8-flash --batch "$B" --precision fp8 --attention flash
gpt2 bf16-flash --batch "$B" --precision bf16 --attention flash
gpt2 fp8-probs --batch "$B" --precision fp8 --attention probs
gpt2 bf16-probs --batch "$B" --precision bf16 --attention probs
gpt2 fp8-flash-t256 --batch $((B * 4)) --seq 256 --precision fp8 --attention flash
gpt2 fp8-probs-t256 --batch $((B * 4)) --seq 256 --precision fp8 --attention probs
exit $fail
