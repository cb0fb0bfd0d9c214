#!/usr/bin/env bash
# Session 13, call 3 (cut to what was left of the device budget after failed starts): dK/dV's
# producer loading lse and Dt one tile ahead, against fa624a0, through bench/attention/check.sh
# without the PyTorch peer.  Binaries (make gpu-build, stripped, in gpu-pkg/pkg.tar.xz):
#   qeffect       fa624a0 + the loads one tile ahead, with its backend_test_cuda_attn
#   qeffect-fa6   fa624a0 (the forward at call 2's vD, dQ persistent, dK/dV a block per key block)
set -u
O=${1:?OUT}; P=gpu-pkg/x
python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('$P')" && cp gpu-pkg/brown_*.bin $P/
SDPA=0 SHAPES=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128 bash bench/attention/check.sh $P "$O" fa6
