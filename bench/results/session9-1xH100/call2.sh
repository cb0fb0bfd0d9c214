#!/usr/bin/env bash
# session 9, call 2: PyTorch's gpt2 step beside qeffect's (bench/compare-peers, PARTS=gpt2), then
# fidelity after the residual stream went bf16 - gpt2 on the Brown tokens, 2000 steps, fp8 and bf16
# (bench/fidelity/gpu.sh), then the same fp8 run with main c152c94 (qeffect-head: fp32 residual
# stream) for the bf16 stream's effect on the held-out loss.
set -u
P=gpu-pkg; O=${1:?}; W=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader
# embed_bwd's position sums moved to a kernel of their own after call 1: its tests again
timeout 120 $P/backend_test_cuda_layers > $W/cuda_layers.log 2>&1; echo "cuda_layers rc=$? $(tail -1 $W/cuda_layers.log)"
grep -iE "fail|embed_bwd" $W/cuda_layers.log | head -12
OUT=$W/peers TOTAL=${PEER_TOTAL:-230} GPT2_MODELS=gpt2:1:16 GPT2_COMPILE=model PARTS=gpt2 bash bench/compare-peers/run.sh $P $P > $W/peers.log 2>&1
echo "peers rc=$?"; tail -25 $W/peers.log; cp $W/peers.log $O/peers.log
bash bench/fidelity/gpu.sh $P $O
mkdir -p $W/pkg; ln -s $PWD/$P/qeffect-head $W/pkg/qeffect
timeout 150 "$W/pkg/qeffect" train --preset gpt2 --batch 4 --micro 2 --pp 1 --chunks 1 --precision fp8 --backend cuda \
  --exec graph --trace off --steps 2000 --lr 3e-4 --amax-history 16 --data $P/brown_train.bin --eval-every 100 \
  --eval-micro 8 --log-every 100 --run-dir $W/head > $O/fidelity-fp8-head.log 2>&1; echo "head fp8 rc=$?"
tail -2 $O/fidelity-fp8-head.log
