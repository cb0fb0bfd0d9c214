#!/usr/bin/env bash
# session 9, call 3: xent's statistics in one streaming pass (online max and sum) and colsum_fin's
# batched partial reads, on top of f3052b6 (qeffect) against main c152c94 (qeffect-head): the cuda
# tests and the equivalences first, then step times of both in the same call, ncu, and PyTorch's step.
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head; W=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for t in ops xent_cast layers model bf16_act; do
  timeout 200 $P/backend_test_cuda_$t > $W/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $W/cuda_$t.log)"
  { echo "=== backend_test_cuda_$t"; cat $W/cuda_$t.log; } >> $O/cuda_tests.log
done
grep -hiE "fail" $W/cuda_*.log | head -20
grep -hE "xent" $W/cuda_ops.log $W/cuda_bf16_act.log | head -20
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "tiny pp1 rc=$?"
$Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "tiny pp1 graph rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "tiny pp2 rc=$?"
for x in b c; do echo "compare tiny a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq 512 --pp 1"
$Q train $G --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 rc=$?"
$Q train $G --run-dir $W/g0 > $W/g0.out 2>&1; echo "gpt2 L2 again rc=$?"
$Q train $G --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "gpt2 L2 full rc=$?"
$Q train $G --steps 2 --ckpt-every 2 --run-dir $W/g4 > $W/g4.out 2>&1 && $Q resume --run-dir $W/g4 --steps 4 > $W/g4r.out 2>&1; echo "gpt2 L2 2 steps + resume to 4 rc=$?"
for x in g0 g2 g4; do echo "compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
grep -h "^step" $W/g1.out | tail -1
for q in $QH $Q $QH $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done; done
timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
  --log-file $W/ncu.csv $Q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 2 \
  --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1; echo "ncu rc=$?"
python3 bench/gpu-prof/ncu_sum.py $W/ncu.csv > $O/ncu-qeffect.txt 2>&1; head -32 $O/ncu-qeffect.txt
OUT=$W/peers TOTAL=${PEER_TOTAL:-200} GPT2_MODELS=gpt2:1:16 GPT2_COMPILE=model PARTS=gpt2 bash bench/compare-peers/run.sh $P $P > $O/peers.log 2>&1
echo "peers rc=$?"; grep -A6 "== GPT-2 table" $O/peers.log; grep -E "^peer|main [0-9]/" $O/peers.log
