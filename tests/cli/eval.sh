#!/usr/bin/env bash
# qeffect eval (issue 37, item 5): the held-out loss of a checkpoint on an llm.c token shard.
#  1. Deterministic: two evals print the same bytes; the loss has at least 7 significant digits;
#     --json gives {"loss", "tokens"} with tokens = windows x seq.
#  2. Windows: --tokens N takes N / seq windows (700 and 640 at seq 64 are the same ten); they
#     start at the first token and step by seq: the first five windows' loss and the loss of a
#     shard that starts 320 tokens in (windows 5..9) average to the ten windows' loss.
#  3. --step picks the checkpoint; the run trained at --pp 2 is evaluated as one stage.
#  4. An exported-then-imported model (--init-from, one step at --lr 0) evaluates to the bit as
#     the original, at bf16 and f32.
#  5. The loss is GPT-2's: a tiny f32 run's eval equals lib/gpt2_forward.py (Hugging Face's
#     forward in plain Python, double precision) on the same windows of its export, to 1e-5.
#  6. Bad usage and bad data are refused: no --data, a token outside the vocabulary, --tokens
#     below seq, a file that is not a shard, a run directory that does not exist.
set -u
Q=${1:?usage: eval.sh QEFFECT SHARED}
D="${2:?usage: eval.sh QEFFECT SHARED}/data/brown.jsonl"
L="$(cd "$(dirname "$0")" && pwd)/lib"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# shards: the bytes of the corpus's text as tokens (below every vocabulary here), from token 0 and 320
python3 - "$D" "$T" <<'EOF' || fail "write the shards"
import json, struct, sys
toks = []
for line in open(sys.argv[1]):
    toks += list(json.loads(line)["text"].encode())
    if len(toks) > 3000:
        break
def shard(name, t):
    with open(sys.argv[2] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(t), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(t), *t))
shard("val.bin", toks[:3000])
shard("val320.bin", toks[320:3000])
shard("big.bin", toks[:100] + [60000] + toks[100:200])
open(sys.argv[2] + "/notashard.bin", "wb").write(b"\0" * 2048)
EOF
C="--preset gpt2 --layers 2 --hidden 128 --heads 4 --seq 64 --micro 2 --amax-history 4 --data $D --quiet"
# shellcheck disable=SC2086
"$Q" train $C --pp 2 --steps 2 --ckpt-every 1 --run-dir "$T/a" || fail "train"
E=("$Q" eval --run-dir "$T/a" --data "$T/val.bin")

# 1. deterministic, digits, --json
"${E[@]}" --tokens 640 >"$T/o1" || fail "eval"
"${E[@]}" --tokens 640 >"$T/o2" || fail "eval again"
cmp -s "$T/o1" "$T/o2" || { cat "$T/o1" "$T/o2"; fail "two evals differ"; }
grep -Eq "10 windows of 64 tokens \(640 targets\), fp8 on cpu: loss [0-9.]{8,}$" "$T/o1" ||
	{ cat "$T/o1"; fail "the text line (windows, precision, 7 significant digits)"; }
"${E[@]}" --tokens 640 --json >"$T/j640" || fail "eval --json"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tokens"] == 640 and j["windows"] == 10 and j["step"] == 2 and isinstance(j["loss"], float), j
assert len(repr(j["loss"]).replace(".", "").lstrip("0")) >= 7, j' "$T/j640" || { cat "$T/j640"; fail "--json"; }
echo "ok: deterministic: $(cat "$T/o1")"

# 2. windows
"${E[@]}" --tokens 700 --json >"$T/j700" || fail "eval --tokens 700"
cmp -s "$T/j640" "$T/j700" || fail "--tokens 700 and 640 are the same ten windows at seq 64"
"${E[@]}" --tokens 320 --json >"$T/j320" || fail "eval --tokens 320"
"$Q" eval --run-dir "$T/a" --data "$T/val320.bin" --tokens 320 --json >"$T/j320b" || fail "eval from token 320"
python3 -c '
import json, sys
a, b, c = (json.load(open(p))["loss"] for p in sys.argv[1:4])
print(f"windows 0-4 {a!r}, 5-9 {b!r}, 0-9 {c!r}")
assert abs((a + b) / 2 - c) <= 1e-6 * c, "windows do not step by seq from the first token"
assert a != b' "$T/j320" "$T/j320b" "$T/j640" || fail "windows"
echo "ok: --tokens N takes N / seq windows from the first token, stepping by seq"

# 3. --step
"${E[@]}" --tokens 640 --step 1 --json >"$T/s1" || fail "eval --step 1"
cmp -s "$T/s1" "$T/j640" && fail "--step 1 gave step 2's loss"
grep -q '"step": 1' "$T/s1" || fail "--step 1 did not evaluate step 1"
echo "ok: --step picks the checkpoint"

# 4. export -> import -> eval: to the bit
"$Q" export --run-dir "$T/a" --format safetensors -o "$T/ex/" >/dev/null || fail "export"
# shellcheck disable=SC2086
"$Q" train $C --steps 1 --ckpt-every 1 --lr 0 --init-from "$T/ex" --run-dir "$T/b" || fail "--init-from"
for p in bf16 f32; do
	la=$("${E[@]}" --tokens 640 --precision $p --json) || fail "eval a $p"
	lb=$("$Q" eval --run-dir "$T/b" --data "$T/val.bin" --tokens 640 --precision $p --json) || fail "eval b $p"
	[ "${la%%, \"step\"*}" = "${lb%%, \"step\"*}" ] || fail "$p: original $la, imported $lb"
	echo "ok: $p: imported == original: ${la%%, \"windows\"*}}"
done

# 5. the loss is GPT-2's (Hugging Face's forward in plain Python)
"$Q" train --preset tiny --precision f32 --micro 2 --steps 2 --ckpt-every 2 --data "$D" --quiet --run-dir "$T/t" ||
	fail "train tiny"
"$Q" export --run-dir "$T/t" --format safetensors -o "$T/te/" >/dev/null || fail "export tiny"
"$Q" eval --run-dir "$T/t" --data "$T/val.bin" --tokens 64 --json >"$T/jt" || fail "eval tiny"
python3 - "$L" "$T/te" "$T/val.bin" "$T/jt" <<'EOF' || fail "eval is not GPT-2's loss"
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import gpt2_forward as g
cfg, w = g.load(sys.argv[2])
raw = open(sys.argv[3], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
tok = struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])
T = cfg["n_positions"]
ls = [g.forward_loss(cfg, w, list(tok[k * T:k * T + T]), list(tok[k * T + 1:k * T + T + 1])) for k in range(2)]
want, got = sum(ls) / 2, json.load(open(sys.argv[4]))["loss"]
print(f"gpt2_forward {want!r}, eval {got!r}")
assert abs(want - got) <= 1e-5 * want
EOF
echo "ok: eval's f32 loss is Hugging Face GPT-2's on the same windows"

# 6. refused
"$Q" eval --run-dir "$T/a" >/dev/null 2>"$T/err"; [ $? = 2 ] && grep -q -- "--data" "$T/err" || fail "no --data"
"$Q" eval --run-dir "$T/a" --data "$T/big.bin" >/dev/null 2>"$T/err"; [ $? = 1 ] && grep -q "token 60000" "$T/err" ||
	{ cat "$T/err"; fail "a token outside the vocabulary"; }
"${E[@]}" --tokens 10 >/dev/null 2>"$T/err"; [ $? = 1 ] && grep -q "below seq" "$T/err" || { cat "$T/err"; fail "--tokens 10"; }
"$Q" eval --run-dir "$T/a" --data "$T/notashard.bin" >/dev/null 2>"$T/err"; [ $? = 1 ] && grep -q "bad magic" "$T/err" ||
	{ cat "$T/err"; fail "not a shard"; }
"$Q" eval --run-dir "$T/none" --data "$T/val.bin" >/dev/null 2>"$T/err"; [ $? = 1 ] || fail "a missing run directory"
[ -e "$T/none" ] && fail "eval created a run directory"
"${E[@]}" --tokens 100000 >/dev/null 2>"$T/err"; [ $? = 1 ] && grep -q "hold 46" "$T/err" || { cat "$T/err"; fail "--tokens past the shard"; }
echo "ok: bad usage and bad data refused"
