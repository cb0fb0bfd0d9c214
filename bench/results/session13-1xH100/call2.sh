#!/usr/bin/env bash
# Session 13, call 2: which of the three kernels gains from persistence.  Binaries (gpu-pkg/pkg.tar.xz):
#   qeffect       persistent-headmajor.patch (all three persistent; call 1's "new")
#   qeffect-vFQ   forward and dQ persistent, dK/dV as main
#   qeffect-vF    forward persistent, dQ and dK/dV as main
#   qeffect-main  f49df36
#   qeffect-vD    vF with the d128 forward at two consumer groups of 168 registers, key tiles of
#                 128, two stages (no spill; vF: three groups of 128 registers, tiles of 64, 540 bytes)
#   qeffect-vE    vF with the d128 forward at two groups, tiles of 64, three stages
# backend_test_cuda_attn-vD and -vE: the attention tests built with vD's and vE's forward.
# Then gpt2 L2 fingerprints of each against main, then bench/attention/profile.sh (ncu --set
# full) of main and the patch, then the gpt2 b16 fp8 step's kernel table (ncu, main).
set -u
O=${1:?OUT}
P=gpu-pkg/x
python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('gpu-pkg/x')"
cp gpu-pkg/brown_train.bin $P/
W=$(mktemp -d)
SHAPES=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128,8:16:1024:128
for round in 1 2; do for v in "" -vF -vFQ -main -vD -vE; do
  timeout 120 $P/qeffect$v bench attention --backend cuda --shapes "$SHAPES" --min-ms 100 > $W/a.txt 2>&1
  echo "bench qeffect$v (round $round) rc=$?"; cat $W/a.txt; cat $W/a.txt >> $O/attn-qeffect$v.txt
done; done
for t in "" -vD -vE; do timeout 90 $P/backend_test_cuda_attn$t > $W/t.log 2>&1; echo "backend_test_cuda_attn$t rc=$? $(tail -1 $W/t.log)"; done
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin --seq 512 --pp 1"
timeout 60 $P/qeffect-main train $G --run-dir $W/m > /dev/null 2>&1; echo "main L2 rc=$?"
for v in "" -vF -vFQ; do
  timeout 60 $P/qeffect$v train $G --run-dir $W/v$v > /dev/null 2>&1; echo "qeffect$v L2 rc=$? $($P/qeffect-main compare $W/m $W/v$v 2>&1 | tail -1)"
done
SHAPES=16:12:1024:64,2:16:4096:128 timeout 280 bash bench/attention/profile.sh $P "$O" main; echo "profile rc=$?"
timeout 100 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
  --log-file $W/ncu.csv $P/qeffect-main train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 \
  --precision fp8 --steps 2 --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1; echo "step ncu rc=$?"
python3 bench/gpu-prof/ncu_sum.py $W/ncu.csv > $O/ncu-gpt2-step.txt 2>&1; head -40 $O/ncu-gpt2-step.txt
