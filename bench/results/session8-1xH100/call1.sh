#!/usr/bin/env bash
# session 8, call 1: dQ from stored dS^T tiles + one-pass residual/layernorm statistics (qeffect)
# against main 307bcb6 (qeffect-head): checks of qeffect first, then timings of both in this call.
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head; W=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for t in attn fused ops; do
  timeout 200 $P/backend_test_cuda_$t > $O/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $O/cuda_$t.log)"
done
grep -hiE "fail" $O/cuda_*.log | head -20
grep -hE "residual_add" $O/cuda_fused.log | head -4
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "tiny pp1 rc=$?"
$Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "tiny pp1 graph rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "tiny pp2 rc=$?"
$Q train $T --pp 1 --run-dir $W/d > $W/d.out 2>&1; echo "tiny pp1 again rc=$?"
for x in b c d; do echo "compare tiny a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin"
for sq in 512 2048; do
  $Q train $G --seq $sq --pp 1 --run-dir $W/g1-$sq > $W/g1-$sq.out 2>&1; echo "gpt2 L2 seq $sq rc=$?"
  $Q train $G --seq $sq --pp 1 --run-dir $W/g0-$sq > $W/g0-$sq.out 2>&1; echo "gpt2 L2 seq $sq again rc=$?"
  $Q train $G --seq $sq --pp 1 --backward full --run-dir $W/g2-$sq > $W/g2-$sq.out 2>&1; echo "gpt2 L2 seq $sq full rc=$?"
  $Q train $G --seq $sq --pp 1 --exec graph --run-dir $W/g3-$sq > $W/g3-$sq.out 2>&1; echo "gpt2 L2 seq $sq graph rc=$?"
  $Q train $G --seq $sq --pp 1 --steps 2 --ckpt-every 2 --run-dir $W/g4-$sq > $W/g4-$sq.out 2>&1 &&
    $Q resume --run-dir $W/g4-$sq --steps 4 > $W/g4r-$sq.out 2>&1; echo "gpt2 L2 seq $sq 2 steps + resume to 4 rc=$?"
  $QH train $G --seq $sq --pp 1 --run-dir $W/gh-$sq > $W/gh-$sq.out 2>&1; echo "head gpt2 L2 seq $sq rc=$?"
  for x in g0 g2 g3 g4 gh; do echo "compare g1-$sq $x-$sq: $($Q compare $W/g1-$sq $W/$x-$sq 2>&1 | tail -1)"; done
  grep -h "^step" $W/g1-$sq.out | tail -1; grep -h "^step" $W/gh-$sq.out | tail -1
done
for q in $QH $Q; do
  $q bench attention --backend cuda --min-ms 200 --json > $W/attn-$(basename $q).jsonl 2>&1; echo "$(basename $q) bench attention rc=$?"
  python3 -c "
import json,sys
for l in open('$W/attn-$(basename $q).jsonl'):
    if l.startswith('{'):
        o=json.loads(l); print('  $(basename $q)', o['shape'], 'fwd', o.get('fwd_tflops'), 'bwd', o.get('bwd_tflops'), o.get('unsupported',''))"
done
for q in $QH $Q $QH $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done; done
for q in $QH $Q; do
  timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
    --log-file $W/ncu-$(basename $q).csv $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 2 \
    --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1; echo "ncu $(basename $q) rc=$?"
  python3 bench/gpu-prof/ncu_sum.py $W/ncu-$(basename $q).csv > $O/ncu-$(basename $q).txt 2>&1; head -22 $O/ncu-$(basename $q).txt; tail -2 $O/ncu-$(basename $q).txt
done
MIN_MS=200 SHAPES=16:12:1024:64,8:25:1024:64,4:16:4096:64 bash bench/attention/run.sh $P $W/attention 2>&1 | tail -6; cp $W/attention/table.txt $O/attention-table.txt
gzip -c $W/ncu-qeffect.csv > $O/ncu-qeffect.csv.gz
