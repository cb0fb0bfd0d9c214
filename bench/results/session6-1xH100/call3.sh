#!/usr/bin/env bash
# session 6, call 3: the base binary (8599c5f, now linked statically) beside HEAD (qeffect: 14f652a + 5d00366's kernels),
# gpt2 b16 step times in two rounds and the base's attention benchmark (HEAD's is in call 2)
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QB=$P/qeffect-base; Q2=$P/qeffect-p2
nvidia-smi --query-gpu=name --format=csv,noheader
for q in $QB $Q $QB $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>$O/err-$(basename $q).txt |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done; done
head -3 $O/err-qeffect-base.txt
for q in $QB; do
  $q bench attention --backend cuda --min-ms 200 --shapes 16:12:1024:64,8:25:1024:64,4:16:4096:64 --json > $O/attn-$(basename $q).jsonl 2>&1; echo "$(basename $q) bench attention rc=$?"
  python3 -c "
import json
for l in open('$O/attn-$(basename $q).jsonl'):
    if l.startswith('{'):
        o=json.loads(l); print('  $(basename $q)', o['shape'], 'fwd', round(o.get('fwd_tflops') or 0,1), 'bwd', round(o.get('bwd_tflops') or 0,1))"
done
