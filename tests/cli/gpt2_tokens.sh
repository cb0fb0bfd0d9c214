#!/usr/bin/env bash
# GPT-2 tokens train (issue 18): the Brown corpus tokenized with GPT-2's BPE trains a model of
# GPT-2's vocabulary (50257 padded to 50304; layers and width reduced to fit CPU time) with
# falling training and held-out loss, the held-out stream coming from the val shard; a model
# with a byte vocabulary is refused naming the shard's largest token (50256, the EOT).
# QE_GPT2_TRAIN_STEPS (default 30) sets the length of the run.
set -u
Q=${1:?usage: gpt2_tokens.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
SHARED=${2:-}
. "$(dirname "$0")/lib/gpt2.sh"
gpt2_encoder
BROWN="$SHARED/data/brown.jsonl"
[ -f "$BROWN" ] || skip "the Brown corpus $BROWN is absent"
N=${QE_GPT2_TRAIN_STEPS:-30}
"$Q" tokenize --in "$BROWN" --out "$T/brown" --val-fraction 0.1 --encoder-dir "$ENC" --quiet || fail "tokenize"
"$Q" train --preset gpt2 --layers 2 --hidden 32 --heads 2 --ffn 128 --seq 64 --batch 2 --micro 2 --steps "$N" \
  --lr 3e-3 --amax-history 4 --data "$T/brown_train.bin" --eval-every "$N" --eval-micro 2 --log-every 1 \
  >"$T/train.log" 2>&1 || { tail -3 "$T/train.log"; fail "training on GPT-2 tokens"; }
grep -q "vocab 50257" "$T/train.log" || fail "the run is not a GPT-2-vocabulary model: $(head -1 "$T/train.log")"
first=$(grep -o 'loss [0-9.]*' "$T/train.log" | head -1 | cut -d' ' -f2)
last=$(grep -o ' loss [0-9.]*' "$T/train.log" | tail -1 | cut -d' ' -f3)
held=$(grep -o 'held-out [0-9.]*' "$T/train.log" | tail -1 | cut -d' ' -f2)
# an untrained model over 50257 tokens starts near ln(50257) = 10.8
python3 -c "
import math, sys
a, b, h = map(float, sys.argv[1:])
ok = 10.0 < a < 11.5 and math.isfinite(b) and b < a - 1.5 and math.isfinite(h) and h < a - 1.0
sys.exit(0 if ok else 1)" "$first" "$last" "$held" || fail "loss $first -> $last, held-out $held (want a fall of 1.5 and 1.0 from ~10.8)"
echo "ok: GPT-2 tokens train: loss $first -> $last over $N steps, held-out $held"
err=$("$Q" train --preset tiny --steps 1 --data "$T/brown_train.bin" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "token 50256 does not fit vocabulary 256" <<<"$err" \
  || fail "a byte-vocabulary model on GPT-2 tokens: exit $rc: $err"
echo "ok: a byte-vocabulary model is refused: $(grep -o "data .*" <<<"$err" | head -1)"
