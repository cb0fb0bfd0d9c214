#!/usr/bin/env bash
# session 8, call 4: gpt2-xl after colsum_part_kernel's run counter (a 64-bit % per row before), head beside it
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 $P/backend_test_cuda_layers > $O/cuda_layers.log 2>&1; echo "cuda_layers rc=$? $(tail -1 $O/cuda_layers.log)"
for q in $QH $Q $QH $Q; do
  $q train --backend cuda --preset gpt2-xl --batch 8 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision fp8 --steps 12 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][4:12]); print('$(basename $q) gpt2-xl b8 fp8 median ms (steps 5-12)', round(m,2), 'tok/s', round(8192/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done
for q in $QH $Q; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision fp8 --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 fp8 median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done
echo "done at $SECONDS s"
