#!/usr/bin/env bash
# session 5, call 3: sampling on cuda (issue 37), the merged env/launcher changes on cuda (issue 36),
# embed_bwd run walk in batches of 64 (issue 33), the attention benchmark against SDPA (issue 34)
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QP=$P/qeffect-prev; W=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader
QE_CUDA_REQUIRED=1 timeout 200 bash tests/cli/sample_cuda.sh $Q > $O/sample_cuda.log 2>&1; echo "sample_cuda.sh rc=$?"; grep -E "PASS|FAIL|SKIP" $O/sample_cuda.log
$Q train --backend cuda --preset gpt2 --batch 4 --pp 1 --steps 2 --ckpt-every 2 --run-dir $W/g --data $P/brown_train.bin --quiet > $W/g.out 2>&1; echo "gpt2 train rc=$?"
for b in cuda; do
  n=200
  s=$(date +%s.%N); $Q sample --run-dir $W/g --backend $b --tokens $n --seed 7 --encoder-dir $P/enc --json > $W/s-$b.json 2> $W/s-$b.err; rc=$?
  e=$(date +%s.%N); echo "gpt2 sample --backend $b --tokens $n rc=$rc wall $(python3 -c "print(round($e-$s,2))") s"; head -c 200 $W/s-$b.json; echo; tail -2 $W/s-$b.err
done
$Q sample --run-dir $W/g --backend cuda --tokens 200 --seed 7 --encoder-dir $P/enc --json > $W/s-cuda2.json 2>/dev/null; cmp $W/s-cuda.json $W/s-cuda2.json && echo "gpt2 cuda sample repeats: same bytes"
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "tiny pp1 rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "tiny pp2 (two ranks, one GPU) rc=$? $(grep -m1 'share one device' $W/c.out)"
QE_PROFILE=1 $Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "tiny pp1 graph QE_PROFILE=1 rc=$? profile lines: $(grep -ciE 'profile|action' $W/b.out)"
for x in b c; do echo "compare a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
for t in backend_test_cuda_attn model_test_infer_dev backend_test_cuda_layers; do
  timeout 120 $P/$t > $O/$t.log 2>&1; echo "$t rc=$? $(tail -1 $O/$t.log)"
done
grep -iE "fail" $O/backend_test_cuda_*.log $O/model_test_infer_dev.log | head -10
grep -iE "attn_decode" $O/backend_test_cuda_attn.log | head -8; grep -iE "cuda" $O/model_test_infer_dev.log | head -6
grep -E "embed_bwd dwte \(runs" $O/backend_test_cuda_layers.log
for q in $QP $Q; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 fp8 median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done
MIN_MS=200 bash bench/attention/run.sh $P $O/attention 2>&1 | tail -14
