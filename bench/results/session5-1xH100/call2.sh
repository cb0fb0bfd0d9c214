#!/usr/bin/env bash
# session 5, call 2: xent's online sum, embed_bwd's run walk, colsum_fin unrolled - checks, kernel times, step times beside the previous binary
set -u
P=gpu-pkg; O=${1:?}; Q=$P/qeffect; QP=$P/qeffect-prev; W=$(mktemp -d)
nvidia-smi --query-gpu=name --format=csv,noheader
for t in ops layers model; do
  timeout 240 $P/backend_test_cuda_$t > $O/cuda_$t.log 2>&1; echo "cuda_$t rc=$? $(tail -1 $O/cuda_$t.log)"
done
grep -iE "fail|xent|embed_bwd dwte \(runs" $O/cuda_ops.log $O/cuda_layers.log | head -20
T="--backend cuda --preset tiny --micro 4 --steps 6 --log-every 1"
$Q train $T --pp 1 --run-dir $W/a > $W/a.out 2>&1; echo "pp1 rc=$?"
$Q train $T --pp 1 --exec graph --run-dir $W/b > $W/b.out 2>&1; echo "pp1 graph rc=$?"
$Q train $T --pp 2 --run-dir $W/c > $W/c.out 2>&1; echo "pp2 rc=$?"
$Q train $T --pp 1 --run-dir $W/d > $W/d.out 2>&1; echo "pp1 again rc=$?"
$QP train $T --pp 1 --run-dir $W/e > $W/e.out 2>&1; echo "prev pp1 rc=$?"
G="--backend cuda --preset gpt2 --layers 2 --batch 2 --seq 512 --steps 4 --log-every 1 --data $P/brown_train.bin"
$Q train $G --pp 1 --run-dir $W/g1 > $W/g1.out 2>&1; echo "gpt2 L2 rc=$?"
$Q train $G --pp 1 --backward full --run-dir $W/g2 > $W/g2.out 2>&1; echo "gpt2 L2 full rc=$?"
$Q train $G --pp 1 --exec graph --run-dir $W/g3 > $W/g3.out 2>&1; echo "gpt2 L2 graph rc=$?"
for x in b c d e; do echo "compare a $x: $($Q compare $W/a $W/$x 2>&1 | tail -1)"; done
for x in g2 g3; do echo "compare g1 $x: $($Q compare $W/g1 $W/$x 2>&1 | tail -1)"; done
grep -h "^step" $W/a.out | tail -2; grep -h "^step" $W/e.out | tail -2; grep -h "^step" $W/g1.out | tail -1
for q in $QP $Q; do
  timeout 300 /usr/local/cuda/bin/ncu --kernel-name regex:"xent|embed|colsum_fin|clear_rows" --metrics gpu__time_duration.sum --csv \
    --log-file $W/ncu-$(basename $q).csv $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --steps 2 \
    --data $P/brown_train.bin --trace off --quiet > /dev/null 2>&1
  python3 - $W/ncu-$(basename $q).csv $(basename $q) <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui] == "nsecond" else v
    k = r[ki].split("(")[0][:40]; tot[k] += v; cnt[k] += 1
for k in sorted(tot, key=lambda k: -tot[k]):
    print("%-12s %-40s n %4d  total %9.1f us  each %8.2f us (2 steps)" % (sys.argv[2], k, cnt[k], tot[k], tot[k] / cnt[k]))
PY
done
for q in $QP $Q $QP $Q; do for prec in fp8 bf16; do
  $q train --backend cuda --preset gpt2 --batch 16 --pp 1 --chunks 1 --micro 1 --exec graph --grad direct --precision $prec --steps 16 --trace off --quiet --json --data $P/brown_train.bin 2>/dev/null |
    python3 -c "import json,sys,statistics; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; m=statistics.median(d['step_ms'][5:15]); print('$(basename $q) gpt2 b16 $prec median ms (steps 6-15)', round(m,2), 'tok/s', round(16384/m*1000))"
done; done
