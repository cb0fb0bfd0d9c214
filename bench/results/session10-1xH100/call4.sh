#!/usr/bin/env bash
# session 10, call 4 (cf2b3dc): the final code (wgmma forward of two warp groups, wgmma dQ and dK/dV with
# split groups; the losing variants of call 3 removed) against main fd4753a (qeffect-head):
# cuda tests, gpt2 2-layer equivalences, the attention benchmark of both and SDPA, gpt2 b16 steps
# of both (fp8), ncu sections of the three wgmma kernels at gpt2's shape (stall reasons), then an ncu
# kernel table of the new fp8 step.
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head; W=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for t in attn ops model fused; do
  timeout 200 $P/backend_test_cuda_$t > $W/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $W/cuda_$t.log)"
  { echo "=== backend_test_cuda_$t"; cat $W/cuda_$t.log; } >> $O/cuda_tests.log
done
grep -hiE "fail" $W/cuda_*.log | head -20
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq 512 --pp 1"
$Q train $G --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 rc=$?"
$Q train $G --run-dir $W/g0 > $W/g0.out 2>&1; echo "gpt2 L2 again rc=$?"
$Q train $G --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "gpt2 L2 full rc=$?"
$Q train $G --exec graph --run-dir $W/g3 > $W/g3.out 2>&1; echo "gpt2 L2 graph rc=$?"
$Q train $G --steps 2 --ckpt-every 2 --run-dir $W/g4 > $W/g4.out 2>&1 && $Q resume --run-dir $W/g4 --steps 4 > $W/g4r.out 2>&1; echo "gpt2 L2 2 steps + resume to 4 rc=$?"
for x in g0 g2 g3 g4; do echo "compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
SH=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128
timeout 120 $QH bench attention --backend cuda --shapes $SH --min-ms 200 > $O/attn-head.txt 2>&1; echo "head bench rc=$?"; cat $O/attn-head.txt
SHAPES=$SH MIN_MS=200 timeout 200 bash bench/attention/run.sh $P $W/attn > $O/attn.log 2>&1; echo "attn bench rc=$?"; tail -6 $O/attn.log
for q in $QH $Q $QH $Q; do for prec in fp8; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done; done
for k in fwd dq dkv; do
  timeout 60 /usr/local/cuda/bin/ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section MemoryWorkloadAnalysis -k regex:flashwg_${k}_kernel --launch-count 1 \
    $Q bench attention --backend cuda --shapes 16:12:1024:64 --min-ms 1 > $O/ncu-$k.txt 2>&1; echo "ncu $k rc=$?"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Theoretical Occupancy" $O/ncu-$k.txt | head -12
done
timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
  --log-file $W/ncu.csv $Q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 2 \
  --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1; echo "ncu rc=$?"
python3 bench/gpu-prof/ncu_sum.py $W/ncu.csv > $O/ncu-qeffect.txt 2>&1; head -30 $O/ncu-qeffect.txt
