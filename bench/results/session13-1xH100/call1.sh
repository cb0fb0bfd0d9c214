#!/usr/bin/env bash
# Session 13, call 1: persistent-headmajor.patch (session 12's results) as the change, main
# (f49df36) as the variant, through bench/attention/check.sh.  gpu-pkg/pkg.tar.xz holds
# qeffect (the patch, built in a worktree), qeffect-main (make gpu-build of main),
# backend_test_cuda_attn (the patch) and brown_train.bin beside it.
set -u
O=${1:?OUT}
python3 -c "import tarfile; tarfile.open('gpu-pkg/pkg.tar.xz').extractall('gpu-pkg/x')"
cp gpu-pkg/brown_train.bin gpu-pkg/x/
SHAPES=16:12:1024:64,8:25:1024:64,4:16:4096:64,2:16:4096:128,8:16:1024:128 \
  bash bench/attention/check.sh gpu-pkg/x "$O" main
