#!/usr/bin/env bash
# An exported model means what Hugging Face's GPT2LMHeadModel means by it (issue 37, item 2):
# lib/gpt2_forward.py, GPT-2's forward written in plain Python from transformers' definitions
# (Conv1D x @ W, q | k | v heads, gelu_new, layer_norm_epsilon, untied lm_head), reads the
# safetensors export of the step-2 checkpoint of an f32 tiny run at --pp 2 and gives the loss
# qeffect logged for step 3, the step that ran on those weights.  The data is "abc" repeated, so
# each window is one of three phases and the step's loss (two microbatches) must be the mean of
# two phases' losses, to 1e-6.  The same weights with one square Conv1D weight left untransposed
# must not match: the check sees orientation.
set -u
Q=${1:?usage: export_forward.sh QEFFECT SHARED}
L="$(cd "$(dirname "$0")" && pwd)/lib"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(5):
        f.write(json.dumps({'id': str(i), 'text': 'abc' * 700}) + '\n')
" "$T/abc.jsonl"
"$Q" train --preset tiny --precision f32 --pp 2 --micro 2 --steps 3 --ckpt-every 2 --data "$T/abc.jsonl" \
  --run-dir "$T/r" --quiet || fail "train"
"$Q" export --run-dir "$T/r" --step 2 --format safetensors -o "$T/e/" >/dev/null || fail "export"
python3 - "$L" "$T/e" "$T/r/catalog.db" <<'EOF' || fail "the export's loss"
import itertools, sqlite3, sys
sys.path.insert(0, sys.argv[1])
import gpt2_forward as g
cfg, w = g.load(sys.argv[2])
logged = sqlite3.connect(sys.argv[3]).execute("select loss from losses where step = 3").fetchone()[0]
T = cfg["n_positions"]
def phases(w):
    out = []
    for p in range(3):
        s = [97 + (p + i) % 3 for i in range(T + 1)]
        out.append(g.forward_loss(cfg, w, s[:T], s[1:]))
    return out
def pairs(ls):
    return [((ls[i] + ls[j]) / 2, i, j) for i, j in itertools.combinations_with_replacement(range(3), 2)]
ls = phases(w)
best = min(pairs(ls), key=lambda x: abs(x[0] - logged))
print(f"step 3 logged {logged!r}; export's phase losses {ls}; nearest mean {best[0]!r} (phases {best[1]}, {best[2]})")
assert abs(best[0] - logged) <= 1e-6 * abs(logged), "no pair of phases gives the logged loss"
name = "transformer.h.0.attn.c_proj.weight"
w[name] = [list(c) for c in zip(*w[name])]
bad = phases(w)
near = min(abs(m - logged) for m, _, _ in pairs(bad))
print(f"with {name} transposed: nearest mean off by {near:.3g}")
assert near > 1e-5 * abs(logged), "the check does not see the orientation of a square Conv1D weight"
EOF
echo "ok: the safetensors export, run as Hugging Face's GPT-2 in plain Python, gives the loss qeffect logged"
