#!/usr/bin/env bash
# session 12, call 2: the three flash kernels made persistent (a block per SM walking the work items longest first, the own rows double-buffered, the ring running on from item to item; qeffect-fwd: the forward only, qeffect-fq: the forward and dQ), checked and timed beside call 1's main (aba909c, qeffect-prev) and SDPA; gpt2 L2 at seq 512 and 2048.
set -u
O=${1:?}; P=gpu-pkg/x; W=$(mktemp -d)
mkdir -p $P && python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('$P')" && cp gpu-pkg/brown_*.bin $P/
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
for t in attn ops model fused capture layers bf16_act; do
  timeout 90 $P/backend_test_cuda_$t > $W/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $W/cuda_$t.log)"
  { echo "=== backend_test_cuda_$t"; cat $W/cuda_$t.log; } >> $O/cuda_tests.log
done
grep -hiE "fail|error" $W/cuda_*.log | head -20
Q=$P/qeffect
for seq in 512 2048; do
  G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq $seq --pp 1"
  timeout 60 $Q train $G --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 seq $seq rc=$?"
  timeout 60 $Q train $G --run-dir $W/g0 > $W/g0.out 2>&1; echo "  again rc=$?"
  timeout 60 $Q train $G --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "  full rc=$?"
  timeout 60 $Q train $G --exec graph --run-dir $W/g3 > $W/g3.out 2>&1; echo "  graph rc=$?"
  timeout 60 $Q train $G --steps 2 --ckpt-every 2 --run-dir $W/g4 > $W/g4.out 2>&1 && timeout 60 $Q resume --run-dir $W/g4 --steps 4 > $W/g4r.out 2>&1; echo "  2 steps + resume to 4 rc=$?"
  timeout 60 $P/qeffect-prev train $G --run-dir $W/g5 > $W/g5.out 2>&1; echo "  prev rc=$?"
  for x in g0 g2 g3 g4 g5; do echo "  compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
  tail -1 $W/g1.out; rm -rf $W/g?
done
SH=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128,8:16:1024:128,1:12:1024:64
for v in prev fwd fq "" prev fwd fq ""; do
  b=$P/qeffect${v:+-$v}
  timeout 120 $b bench attention --backend cuda --shapes $SH --min-ms 100 > $W/a.txt 2>&1; echo "bench ${v:-new} rc=$?"; cat $W/a.txt; cat $W/a.txt >> $O/attn-${v:-new}.txt
done
SHAPES=$SH MIN_MS=100 timeout 120 bash bench/attention/run.sh $P $W/attn > $O/attn-sdpa.log 2>&1; echo "sdpa bench rc=$?"; tail -8 $O/attn-sdpa.log
for q in qeffect-prev qeffect-fq qeffect qeffect-prev qeffect-fq qeffect; do
  timeout 60 $P/$q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision fp8 --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$q gpt2 b16 fp8 median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done
