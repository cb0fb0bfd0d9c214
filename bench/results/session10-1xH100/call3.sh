#!/usr/bin/env bash
# session 10, call 3: the wgmma backward with S and dP in separate groups (P's exponentials
# overlap dP's products, dV's products overlap dS) = qeffect (4ba4d49 + WG_FWD_* knobs at their
# defaults); forward variants built with -D flags (the backward as qeffect's): qeffect-f1b (blocks
# of one warp group, key tiles of 64, 5 blocks an SM), qeffect-p64 / p128 (the pipelined forward,
# flashwg_fwdp_kernel: S of tile j issued with P V of tile j - 1; key tiles of 64, 4 blocks an SM /
# 128, 2 an SM).  qeffect-head (main fd4753a) was left out of this call (the package's size); its
# numbers are calls 1 and 2's.
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QH=$P/qeffect-head; W=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
timeout 300 $P/backend_test_cuda_attn > $O/cuda_attn.log 2>&1; echo "cuda_attn rc=$? $(tail -1 $O/cuda_attn.log)"
grep -iE "fail" $O/cuda_attn.log | head; grep -E "flash_bwd bf16" $O/cuda_attn.log | head -30
SH=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128
for q in $P/qeffect-f1b $P/qeffect-p64 $P/qeffect-p128; do timeout 120 $q bench attention --backend cuda --shapes $SH --min-ms 200 > $O/attn-$(basename $q).txt 2>&1; echo "$(basename $q) bench rc=$?"; cat $O/attn-$(basename $q).txt; done
SHAPES=$SH MIN_MS=200 timeout 200 bash bench/attention/run.sh $P $W/attn > $O/attn.log 2>&1; echo "attn bench rc=$?"; cat $O/attn.log | tail -6
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq 512 --pp 1"
$Q train $G --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 rc=$?"
$Q train $G --run-dir $W/g0 > $W/g0.out 2>&1; echo "gpt2 L2 again rc=$?"
$Q train $G --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "gpt2 L2 full rc=$?"
$Q train $G --exec graph --run-dir $W/g3 > $W/g3.out 2>&1; echo "gpt2 L2 graph rc=$?"
$Q train $G --steps 2 --ckpt-every 2 --run-dir $W/g4 > $W/g4.out 2>&1 && $Q resume --run-dir $W/g4 --steps 4 > $W/g4r.out 2>&1; echo "gpt2 L2 2 steps + resume to 4 rc=$?"
for x in g0 g2 g3 g4; do echo "compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
for v in f1b p64 p128; do $P/qeffect-$v train $G --run-dir $W/v$v > $W/v$v.out 2>&1; echo "gpt2 L2 $v rc=$?"; done
echo "compare f1b p64 (the same arithmetic, pipelined): $($Q compare $W/vf1b $W/vp64 2>&1 | tail -1)"
echo "compare g1 p128 (the same arithmetic, pipelined): $($Q compare $W/g1 $W/vp128 2>&1 | tail -1)"
grep -h "^step" $W/g1.out | tail -1
for q in $Q $P/qeffect-f1b $P/qeffect-p64 $P/qeffect-p128 $Q $P/qeffect-f1b $P/qeffect-p64 $P/qeffect-p128; do for prec in fp8; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000), 'peak GiB', round(d.get('alloc_peak_bytes',0)/2**30,2))"
done; done
