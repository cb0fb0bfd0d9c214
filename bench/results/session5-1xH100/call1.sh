#!/usr/bin/env bash
# session 5, call 1: cuBLASLt algorithms of the arena's beta=1 dW GEMM (issue 33 item 5), then
# tied gpt2 b16 against the (now tied) PyTorch peer
set -u
P=gpu-pkg; O=${1:?}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 $P/gemm_accumulate > $O/gemm_accumulate.txt 2>&1; echo "probe rc=$?"; cat $O/gemm_accumulate.txt
OUT=$O/peers TOTAL=330 GPT2_MODELS=gpt2:1:16 PARTS=gpt2 timeout 420 bash bench/compare-peers/run.sh $P $P > $O/peers.log 2>&1; rm -f $O/peers/compare-peers.tar.gz; echo "peers rc=$?"
tail -25 $O/peers.log
