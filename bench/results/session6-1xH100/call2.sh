#!/usr/bin/env bash
# session 6, call 2: every flash activation in bf16 (p2: qkv, out, dout, dqkv; the bias added to every tile in shared memory),
# then p3 = qeffect: the streamed K and V tiles' bias as row terms - checks of p3, then timings of base (8599c5f), p2, p3
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QB=$P/qeffect-base; Q2=$P/qeffect-p2; W=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader
for t in attn fused ops model bf16_act; do
  [ -x $P/backend_test_cuda_$t ] || continue
  timeout 240 $P/backend_test_cuda_$t > $O/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $O/cuda_$t.log)"
done
grep -hiE "fail" $O/cuda_*.log | head -20
grep -hE "flash bf16 rows|flash_(fwd|bwd) bf16 .*(out|dqkv)" $O/cuda_attn.log | head -12
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "tiny pp1 rc=$?"
$Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "tiny pp1 graph rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "tiny pp2 rc=$?"
$Q train $T --pp 1 --run-dir $W/d > $W/d.out 2>&1; echo "tiny pp1 again rc=$?"
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --steps 4 --log-every 1 --data $P/brown_train.bin"
for sq in 512 2048; do
  $Q train $G --seq $sq --pp 1 --run-dir $W/g1-$sq > $W/g1-$sq.out 2>&1; echo "gpt2 L2 seq $sq rc=$?"
  $Q train $G --seq $sq --pp 1 --backward full --run-dir $W/g2-$sq > $W/g2-$sq.out 2>&1; echo "gpt2 L2 seq $sq full rc=$?"
  $Q train $G --seq $sq --pp 1 --exec graph --run-dir $W/g3-$sq > $W/g3-$sq.out 2>&1; echo "gpt2 L2 seq $sq graph rc=$?"
  $Q train $G --seq $sq --pp 1 --steps 2 --ckpt-every 2 --run-dir $W/g4-$sq > $W/g4-$sq.out 2>&1 &&
    $Q resume --run-dir $W/g4-$sq --steps 4 > $W/g4r-$sq.out 2>&1; echo "gpt2 L2 seq $sq 2 steps + resume to 4 rc=$?"
  for x in g2 g3 g4; do echo "compare g1-$sq $x-$sq: $($Q compare $W/g1-$sq $W/$x-$sq 2>&1 | tail -1)"; done
done
for x in b c d; do echo "compare tiny a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
grep -h "^step" $W/a.out | tail -1; grep -h "^step" $W/g1-512.out | tail -1; grep -h "^step" $W/g1-2048.out | tail -1
for q in $QB $Q2 $Q; do
  $q bench attention --backend cuda --min-ms 200 --json > $O/attn-$(basename $q).jsonl 2>&1; echo "$(basename $q) bench attention rc=$?"
  python3 -c "
import json,sys
for l in open('$O/attn-$(basename $q).jsonl'):
    if l.startswith('{'):
        o=json.loads(l); print('  $(basename $q)', o['shape'], 'fwd', o.get('fwd_tflops'), 'bwd', o.get('bwd_tflops'), o.get('unsupported',''))"
done
for q in $QB $Q2 $Q $QB $Q2 $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done; done
for q in $QB $Q2 $Q; do
  timeout 200 /usr/local/cuda/bin/ncu --kernel-name regex:"flash16|heads16|dot16|flash_dot|bf16_copy|cast4" --metrics gpu__time_duration.sum --csv \
    --log-file $W/ncu-$(basename $q).csv $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 1 \
    --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1
  python3 - $W/ncu-$(basename $q).csv $(basename $q) <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); u = r[ui]
    v = v / 1000 if u in ("nsecond", "ns") else v * 1000 if u in ("msecond", "ms") else v
    k = r[ki].split("(")[0][:40]; tot[k] += v; cnt[k] += 1
for k in sorted(tot, key=lambda k: -tot[k]):
    print("%-14s %-40s n %4d  total %9.1f us  each %8.2f us (1 step)" % (sys.argv[2], k, cnt[k], tot[k], tot[k] / cnt[k]))
PY
done
MIN_MS=200 SHAPES=16:12:1024:64,4:16:4096:64 bash bench/attention/run.sh $P $O/attention 2>&1 | tail -8
