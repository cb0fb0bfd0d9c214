#!/usr/bin/env bash
# session 9, call 4: gpt2-xl batch 8 against PyTorch (bench/compare-peers, PARTS=gpt2), aceff02.
set -u
P=gpu-pkg; O=${1:?}; W=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$W/peers TOTAL=${PEER_TOTAL:-330} GPT2_MODELS=gpt2-xl:1:8 GPT2_COMPILE=model PARTS=gpt2 GPT2_QE_TRIALS=2 bash bench/compare-peers/run.sh $P $P > $O/peers-xl.log 2>&1
echo "peers rc=$?"; grep -A6 "== GPT-2 table" $O/peers-xl.log; grep -E "^peer|main [0-9]/|skipped|KILLED" $O/peers-xl.log
