#!/usr/bin/env bash
# GPU checks for the CUDA backend (one device call; builds nothing).
#   bash bench/gpu-check/run.sh BUILD_DIR DATA_DIR OUT_DIR
# BUILD_DIR: a build made here with `make gpu-build` (carried to the GPU machine)
# DATA_DIR : folder holding brown.jsonl
# Runs: CUDA ops vs the cpu reference, whole-model cuda vs cpu, the sampling forward
# (model_test_infer_dev, tests/cli/sample_cuda.sh), determinism (two runs
# byte-identical), schedule equivalence against matched references over 20 steps
# (--amax-history 4), checkpoint at step 3 resumed in fresh processes to step 8, and
# h2048 (M=4) / h4096 (M=8) --pp 2 for 100 steps on the Brown corpus.  Prints a table
# last and writes results.json into OUT_DIR.
# PARTS (environment) picks what runs: ops, det, sched, resume, p2p, dp, fuse, big (default: all).
# fuse: the fused forms (producers inside their consumers: layernorms inside the input casts,
#       FC1's bias and GELU inside FC2's input cast, GELU's backward inside FC1's dY cast, the
#       projection's and FC2's biases inside residual_add, the QKV bias inside flash attention,
#       bias gradients inside the dY casts, the backward's residual adds inside layernorm_bwd)
#       against the ops they replace (backend_test_cuda_fused, byte for byte), then a 2-layer
#       gpt2 shape (batch 2, seq 512, flash): split == reference, two runs identical, resume.
# p2p: messages over the device links (NCCL) against QE_P2P=host, byte-identical runs.
# dp: two data-parallel replicas (--pp 1 --dp 2, one per GPU, --check-replicas on) whose
#     gradient sums go over NCCL, against the same run summed through the host comm.
set -u
PARTS=${PARTS:-ops,det,sched,resume,p2p,dp,fuse,big}
has() { case ",$PARTS," in *,$1,*) return 0;; esac; return 1; }
B=${1:-build-gpu}; DATA=${2:-gpu-data}; OUT=${3:-${OUT:-/tmp/gpu-out}}
Q=$B/qeffect
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
W=$(mktemp -d)
declare -A R
note() { R[$1]=$2; printf '%-44s %s\n' "$1" "$2"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"

# 1. ops and whole model against the cpu reference
if has ops; then
# the cuda op tests: casts and GEMMs, attention, the other layers' ops and AdamW, capture and replay
for t in ops attn layers capture; do
  if "$B/backend_test_cuda_$t" >"$OUT/cuda_$t.log" 2>&1; then note cuda_$t "pass ($(tail -1 "$OUT/cuda_$t.log"))"; else note cuda_$t "FAIL (see cuda_$t.log)"; fi
done
if "$B/backend_test_cuda_model" >"$OUT/cuda_model.log" 2>&1; then note cuda_model "pass ($(tail -1 "$OUT/cuda_model.log"))"; else note cuda_model "FAIL (see cuda_model.log)"; fi
# the sampling forward on cuda: its logits against the host forward's (a skipped cuda part fails
# here), then `qeffect sample --backend cuda` (tests/cli/sample_cuda.sh, a skip a failure too)
if "$B/model_test_infer_dev" >"$OUT/infer_dev.log" 2>&1 && grep -q '^cuda backend$' "$OUT/infer_dev.log"; then
  note infer_dev "pass ($(tail -1 "$OUT/infer_dev.log"))"; else note infer_dev "FAIL (see infer_dev.log)"; fi
if QE_CUDA_REQUIRED=1 bash "$(dirname "$0")/../../tests/cli/sample_cuda.sh" "$Q" >"$OUT/sample_cuda.log" 2>&1; then
  note sample_cuda "pass ($(tail -1 "$OUT/sample_cuda.log"))"; else note sample_cuda "FAIL (see sample_cuda.log)"; fi
fi

C="--backend cuda --preset tiny --pp 2 --micro 4 --amax-history 4 --quiet --data $DATA/brown.jsonl"
run() { local name=$1; shift; "$Q" train $C "$@" --run-dir "$W/$name" >>"$OUT/runs.log" 2>&1; }
cmp_runs() { "$Q" compare "$W/$1" "$W/$2" "${@:3}" >"$OUT/compare-$1-$2.txt" 2>&1; local rc=$?; tail -1 "$OUT/compare-$1-$2.txt"; return $rc; }

# 2. determinism: two identical runs, byte-identical fingerprints
if has det; then
run det1 --steps 10 && run det2 --steps 10
if r=$(cmp_runs det1 det2); then note determinism "pass: $r"; else note determinism "FAIL: $r"; fi
fi

# 3. schedules against their matched references, 20 steps
if has sched || has resume; then run iref --schedule interleaved --backward full --exec eager --steps 20; fi
if has sched; then
run iref2 --schedule interleaved --backward full --exec eager --steps 20
run isplit --schedule interleaved --exec eager --steps 20
if r=$(cmp_runs iref isplit); then note interleaved_vs_reference "pass: $r"; else note interleaved_vs_reference "FAIL: $r"; fi
if r=$(cmp_runs iref iref2); then note reference_repeat "pass: $r"; else note reference_repeat "FAIL: $r"; fi
run zref --schedule zbv --backward full --exec eager --steps 20
run zsplit --schedule zbv --exec eager --steps 20
if r=$(cmp_runs zref zsplit); then note zbv_vs_reference "pass: $r"; else note zbv_vs_reference "FAIL: $r"; fi
for g in copy direct; do
  run icap-$g --schedule interleaved --exec graph --grad $g --steps 20
  if r=$(cmp_runs iref icap-$g); then note "interleaved_graph_${g}_vs_reference" "pass: $r"; else note "interleaved_graph_${g}_vs_reference" "FAIL: $r"; fi
  run zcap-$g --schedule zbv --exec graph --grad $g --steps 20
  if r=$(cmp_runs zref zcap-$g); then note "zbv_graph_${g}_vs_reference" "pass: $r"; else note "zbv_graph_${g}_vs_reference" "FAIL: $r"; fi
  # issue 19: per-microbatch views against the (default) accumulating arena, beta = 1 on the GPU
  for sc in i z; do
    run ${sc}cap-$g-permb --schedule $([ $sc = i ] && echo interleaved || echo zbv) --exec graph --grad $g --steps 20 --arena per-mb
    if r=$(cmp_runs ${sc}cap-$g-permb ${sc}cap-$g); then note "${sc}graph_${g}_permb_vs_accumulate" "pass: $r"; else note "${sc}graph_${g}_permb_vs_accumulate" "FAIL: $r"; fi
  done
done
fi

# 4. checkpoint at 3, resume in fresh processes to 8, against uninterrupted
if has resume; then
for ex in eager graph; do
  run full-$ex --steps 8 --exec $ex
  run part-$ex --steps 3 --ckpt-every 3 --exec $ex
  "$Q" resume --run-dir "$W/part-$ex" --steps 8 --quiet >>"$OUT/runs.log" 2>&1
  if r=$(cmp_runs full-$ex part-$ex --steps 4:8); then note "resume_3_to_8_$ex" "pass: $r"; else note "resume_3_to_8_$ex" "FAIL: $r"; fi
done
fi

# 4b. device links against the host path: the same bytes must arrive, so the runs are identical
if has p2p; then
  for sc in interleaved zbv; do
    run p2p-nccl-$sc --schedule $sc --exec graph --steps 10
    QE_P2P=host run p2p-host-$sc --schedule $sc --exec graph --steps 10
    if r=$(cmp_runs p2p-nccl-$sc p2p-host-$sc); then note "p2p_nccl_vs_host_$sc" "pass: $r"; else note "p2p_nccl_vs_host_$sc" "FAIL: $r"; fi
  done
fi

# 4c. data parallelism over the device links: the replica sums must be the same bytes as the
# host path's, and --check-replicas (default on) fails a run whose replicas differ
if has dp; then
  for ex in eager graph; do
    run dp-nccl-$ex --pp 1 --dp 2 --exec $ex --steps 10
    QE_P2P=host run dp-host-$ex --pp 1 --dp 2 --exec $ex --steps 10
    if r=$(cmp_runs dp-nccl-$ex dp-host-$ex); then note "dp2_nccl_vs_host_$ex" "pass: $r"; else note "dp2_nccl_vs_host_$ex" "FAIL: $r"; fi
  done
fi

# 4d. the fused forms on the GPU (each against the ops it replaces, byte for byte: the cast's
# prologues and column sums, residual_add, layernorm_bwd's residual, flash attention's QKV bias),
# then a 2-layer gpt2 at batch 2, seq 512 (flash): split == reference, two runs identical, a
# resume exact
if has fuse; then
  if "$B/backend_test_cuda_fused" >"$OUT/cuda_fused.log" 2>&1; then note cuda_fused "pass ($(tail -1 "$OUT/cuda_fused.log"))"; else note cuda_fused "FAIL (see cuda_fused.log)"; fi
  G2="--backend cuda --preset gpt2 --layers 2 --batch 2 --seq 512 --attention flash --pp 1 --micro 2
      --amax-history 4 --quiet --data $DATA/brown.jsonl"
  g2() { local name=$1; shift; "$Q" train $G2 "$@" --run-dir "$W/$name" >>"$OUT/runs.log" 2>&1; }
  g2 gpt2-ref --backward full --exec eager --steps 6
  g2 gpt2-split --exec graph --steps 6
  g2 gpt2-split2 --exec graph --steps 6
  g2 gpt2-part --exec graph --steps 3 --ckpt-every 3
  "$Q" resume --run-dir "$W/gpt2-part" --steps 6 --quiet >>"$OUT/runs.log" 2>&1
  if r=$(cmp_runs gpt2-ref gpt2-split); then note gpt2_seq512_split_vs_reference "pass: $r"; else note gpt2_seq512_split_vs_reference "FAIL: $r"; fi
  if r=$(cmp_runs gpt2-split gpt2-split2); then note gpt2_seq512_two_runs "pass: $r"; else note gpt2_seq512_two_runs "FAIL: $r"; fi
  if r=$(cmp_runs gpt2-split gpt2-part --steps 4:6); then note gpt2_seq512_resume_3_to_6 "pass: $r"; else note gpt2_seq512_resume_3_to_6 "FAIL: $r"; fi
fi

# 5. the big presets: 100 steps, loss must fall and stay finite; median step time
has big && for cfg in ${BIG:-"h2048:4" "h4096:8"}; do
  cfg=${cfg/:/ }
  set -- $cfg
  log="$OUT/train-$1.log"
  "$Q" train --backend cuda --preset $1 --pp 2 --micro $2 --steps 100 --log-every 1 --lr 3e-4 \
      --data "$DATA/brown.jsonl" --run-dir "$W/big-$1" >"$log" 2>&1
  rc=$?
  stats=$(python3 - "$log" <<'PY'
import re, statistics, sys
l=[(float(a),float(b)) for a,b in re.findall(r'loss ([0-9.naif-]+) .* ([0-9.]+) ms/step', open(sys.argv[1]).read())]
if not l: print("no steps"); sys.exit(1)
loss=[a for a,_ in l]; ms=[b for _,b in l[5:]] or [b for _,b in l]
first=sum(loss[:10])/min(10,len(loss)); last=sum(loss[-10:])/min(10,len(loss))
ok = all(x==x and abs(x)!=float('inf') for x in loss) and last < first
print(f"{'pass' if ok else 'FAIL'}: steps {len(l)}, loss {first:.3f} -> {last:.3f}, median {statistics.median(ms):.2f} ms/step")
PY
)
  [ $rc -ne 0 ] && stats="FAIL (exit $rc): $(tail -2 "$log" | tr '\n' ' ')"
  note "train_100_$1_pp2" "$stats"
done

python3 - "$OUT/results.json" <<PY
import json, sys
r = {$(for k in "${!R[@]}"; do printf '"%s": %s,' "$k" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "${R[$k]}")"; done)}
json.dump(r, open(sys.argv[1], "w"), indent=2)
PY
echo
echo "== gpu-check summary"
for k in $(printf '%s\n' "${!R[@]}" | sort); do printf '%-44s %s\n' "$k" "${R[$k]}"; done
