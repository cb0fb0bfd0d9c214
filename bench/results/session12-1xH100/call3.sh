#!/usr/bin/env bash
# session 12, call 3: PyTorch's gpt2 step beside qeffect's (bench/compare-peers, PARTS=gpt2, whole-model torch.compile), qeffect being main after call 1 (aba909c, carried as qeffect-prev); run as is for gpt2 b16, then with TAG=-xl PEER_TOTAL=300 GPT2_MODELS=gpt2-xl:1:8.
set -u
O=${1:?}; P=gpu-pkg/x; W=$(mktemp -d)
mkdir -p $P && python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('$P')" && cp gpu-pkg/brown_*.bin $P/
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $W/pkg && cp $P/qeffect-prev $W/pkg/qeffect && cp $P/brown_*.bin $W/pkg/
L=$O/peers${TAG:-}.log; OUT=$W/peers TOTAL=${PEER_TOTAL:-250} GPT2_MODELS=${GPT2_MODELS:-gpt2:1:16} GPT2_COMPILE=model PARTS=gpt2 bash bench/compare-peers/run.sh $W/pkg $W/pkg > $L 2>&1
echo "peers rc=$?"; tail -22 $L
