#!/usr/bin/env bash
# README's quick start stays true (issue 38, item 8): the code block under "## Quick start on
# your own text" runs as written, with Q set to the qeffect under test, in a scratch folder holding
# mytexts/ (40 Brown documents as .txt files); each step leaves what the next needs: both shards,
# a checkpoint at step 20 and then 30, the plot, a finite eval loss, sampled text, the export.
# The Python line that loads the export into transformers runs only where transformers is
# installed (it is not here: tests/cli/export_*.sh check the export against the formats).
# QE_QUICK_SHORT=1 (test-sanitize) runs the block with 10 and 20 steps instead of 20 and 30.
set -u
Q=$(cd "$(dirname "${1:?usage: quick_start.sh QEFFECT SHARED}")" && pwd)/$(basename "$1")
S=$(cd "${2:?usage: quick_start.sh QEFFECT SHARED}" && pwd)
README="$(cd "$(dirname "$0")/../.." && pwd)/README.md"
# shellcheck source=lib/gpt2.sh
source "$(dirname "$0")/lib/gpt2.sh"
gpt2_encoder
export QE_GPT2_ENCODER_DIR="$ENC"
block=$(awk '/^## Quick start on your own text/ { q = 1 } q && /^```$/ { n++; if (n == 2) exit; next } q && n == 1' "$README")
[ -n "$block" ] || fail "no code block under '## Quick start on your own text' in $README"
grep -q '^Q=build/qeffect$' <<<"$block" || fail "the block no longer starts with Q=build/qeffect"
block=$(sed "s|^Q=build/qeffect$|Q='$Q'|" <<<"$block")
if [ "${QE_QUICK_SHORT:-0}" = 1 ]; then
  block=$(sed -e 's/--steps 20/--steps 10/; s/--lr-decay-steps 30/--lr-decay-steps 20/; s/--steps 30/--steps 20/' <<<"$block")
fi
python3 -c "import transformers" 2>/dev/null || block=$(grep -v '^python3 -c "from transformers' <<<"$block")
cd "$T" && mkdir mytexts
python3 - "$S/data/brown.jsonl" <<'PY' || fail "making mytexts/"
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i == 40:
        break
    open('mytexts/doc%03d.txt' % i, 'w').write(json.loads(line)['text'])
PY
echo "$block" >quick.sh
bash -e quick.sh >quick.out 2>&1 || { cat quick.out; fail "the quick start failed"; }
last=30; [ "${QE_QUICK_SHORT:-0}" = 1 ] && last=20
for f in data/my_train.bin data/my_val.bin runs/my/loss.png runs/my/hf/model.safetensors runs/my/hf/config.json; do
  [ -s "$f" ] || { cat quick.out; fail "the quick start left no $f"; }
done
grep -q "^checkpoint step $last committed" quick.out || { cat quick.out; fail "no checkpoint at step $last"; }
grep -qE "^eval: .* loss [0-9]+\.[0-9]{7,}$" quick.out || { cat quick.out; fail "no eval loss"; }
grep -q '^The jury said' quick.out || { cat quick.out; fail "no sample after the prompt"; }
echo "ok: README's quick start runs as written: tokenize, train, plot, resume to $last, eval, sample, export"
