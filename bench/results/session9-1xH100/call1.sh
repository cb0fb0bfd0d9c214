#!/usr/bin/env bash
# session 9, call 1: the residual stream in bf16 (qeffect) against main c152c94 (qeffect-head):
# and the logits' gradient made by the head's dY cast (xent_rows + pre_xent):
# the cuda tests and the equivalences first, then step times of both in the same call, then ncu.
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head; W=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for t in layers fused ops model xent_cast; do
  timeout 200 $P/backend_test_cuda_$t > $W/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $W/cuda_$t.log)"
  { echo "=== backend_test_cuda_$t"; cat $W/cuda_$t.log; } >> $O/cuda_tests.log
done
grep -hiE "fail" $W/cuda_*.log | head -20
grep -hE "bf16|xent" $W/cuda_layers.log $W/cuda_fused.log $W/cuda_xent_cast.log | head -40
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "tiny pp1 rc=$?"
$Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "tiny pp1 graph rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "tiny pp2 rc=$?"
$Q train $T --pp 1 --run-dir $W/d > $W/d.out 2>&1; echo "tiny pp1 again rc=$?"
$Q train $T --pp 2 --precision bf16 --schedule zbv --run-dir $W/e > $W/e.out 2>&1; echo "tiny bf16 zbv pp2 rc=$?"
$Q train $T --pp 1 --precision bf16 --run-dir $W/f > $W/f.out 2>&1; echo "tiny bf16 pp1 rc=$?"
for x in b c d; do echo "compare tiny a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
echo "compare tiny bf16 zbv pp2 vs pp1: $($Q compare $W/f $W/e 2>&1 | tail -1)"
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq 512 --pp 1"
$Q train $G --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 rc=$?"
$Q train $G --run-dir $W/g0 > $W/g0.out 2>&1; echo "gpt2 L2 again rc=$?"
$Q train $G --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "gpt2 L2 full rc=$?"
$Q train $G --exec graph --run-dir $W/g3 > $W/g3.out 2>&1; echo "gpt2 L2 graph rc=$?"
$Q train $G --steps 2 --ckpt-every 2 --run-dir $W/g4 > $W/g4.out 2>&1 && $Q resume --run-dir $W/g4 --steps 4 > $W/g4r.out 2>&1; echo "gpt2 L2 2 steps + resume to 4 rc=$?"
$QH train $G --run-dir $W/gh > $W/gh.out 2>&1; echo "head gpt2 L2 rc=$?"
for x in g0 g2 g3 g4 gh; do echo "compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
grep -h "^step" $W/g1.out | tail -1; grep -h "^step" $W/gh.out | tail -1
for q in $QH $Q $QH $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done; done
for q in $QH $Q; do
  $q train --backend cuda --preset gpt2-xl --batch 8 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision fp8 --steps 12 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][4:12]); print('$(basename $q) gpt2-xl b8 fp8 median ms (steps 5-12)', round(m,2), 'tok/s', round(8192/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done
timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
  --log-file $W/ncu.csv $Q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 2 \
  --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1; echo "ncu rc=$?"
python3 bench/gpu-prof/ncu_sum.py $W/ncu.csv > $O/ncu-qeffect.txt 2>&1; head -30 $O/ncu-qeffect.txt
