#!/usr/bin/env bash
# Session 13, call 3: what main now has (the forward at call 2's vD, dQ persistent, dK/dV as before),
# built by make gpu-build and carried as qeffect with every backend_test_cuda_*, against f49df36
# (qeffect-main), through bench/attention/check.sh (SDPA beside it); then PyTorch's gpt2 b16
# step beside it (bench/compare-peers, PARTS=gpt2, whole-model torch.compile).
set -u
O=${1:?OUT}; P=gpu-pkg/x; W=$(mktemp -d)
python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('$P')" && cp gpu-pkg/brown_*.bin $P/
SHAPES=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128,8:16:1024:128 bash bench/attention/check.sh $P "$O" main
mkdir -p $W/pkg && cp $P/qeffect $W/pkg/qeffect && cp $P/brown_*.bin $W/pkg/
L=$O/peers.log; OUT=$W/peers TOTAL=${PEER_TOTAL:-220} GPT2_MODELS=gpt2:1:16 GPT2_COMPILE=model PARTS=gpt2 bash bench/compare-peers/run.sh $W/pkg $W/pkg > $L 2>&1
echo "peers rc=$?"; tail -22 $L
