#!/usr/bin/env bash
# What `qeffect tokenize` writes and refuses (cli/cmd_tokenize.c documents the rules):
#  1. usage: --help, missing flags and a fraction outside [0, 1) are usage errors (exit 2); a
#     missing encoder is an error naming where it looked;
#  2. the shards of the Brown corpus at --val-fraction 0.1 and 0.3: header 20240520, 1, token
#     count (= file size), the rest zero; every record starts with EOT 50256 and EOT appears
#     nowhere else; the records of the --val-fraction 0 shard, dealt out by the documented
#     rule (record i is val when floor((i+1)p/1e6) > floor(ip/1e6)), are exactly the train
#     and val shards; --json counts agree;
#  3. --val-fraction 0 removes an old PREFIX_val.bin;
#  4. bad input (a line that is not JSON, a record without "text", invalid UTF-8, a missing
#     file, no records, too few records for val, an output folder that does not exist) is an
#     error naming the file and line, and leaves the shards of the previous run untouched
#     and no temp file;
#  5. `qeffect train --data PREFIX_train.bin` loads the shard, and a model whose vocabulary is
#     too small is refused naming the token and the vocabulary; a PREFIX_val.bin beside it is
#     the held-out stream (a bad one is named, a 12-token one is too short for evaluation).
set -u
Q=${1:?usage: tokenize_shards.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
SHARED=${2:-}
. "$(dirname "$0")/lib/gpt2.sh"
gpt2_encoder
BROWN="$SHARED/data/brown.jsonl"
[ -f "$BROWN" ] || skip "the Brown corpus $BROWN is absent"
cd "$T"

# --- 1. usage ----------------------------------------------------------------------------
"$Q" tokenize --help | grep -q -- '--val-fraction' || fail "tokenize --help"
"$Q" --help | grep -q 'tokenize' || fail "qeffect --help does not list tokenize"
"$Q" tokenize --in "$BROWN" 2>/dev/null; [ $? -eq 2 ] || fail "no --out is not a usage error"
"$Q" tokenize --in "$BROWN" --out x --val-fraction 1 2>/dev/null; [ $? -eq 2 ] || fail "--val-fraction 1 accepted"
"$Q" tokenize --in "$BROWN" --out x --val-fraction -0.1 2>/dev/null; [ $? -eq 2 ] || fail "--val-fraction -0.1 accepted"
out=$("$Q" tokenize --in "$BROWN" --out x --encoder-dir "$T/noenc" 2>&1); [ $? -eq 1 ] || fail "a missing encoder dir is not exit 1"
grep -q "$T/noenc/encoder.json" <<<"$out" && grep -q 'gpt2-encoder.sh install' <<<"$out" \
  || fail "missing encoder: error does not name the path and the install: $out"
out=$(QE_GPT2_ENCODER_DIR="$T/noenv" "$Q" tokenize --in "$BROWN" --out x 2>&1); [ $? -eq 1 ] || fail "a missing QE_GPT2_ENCODER_DIR is not exit 1"
grep -q "$T/noenv/encoder.json.*QE_GPT2_ENCODER_DIR" <<<"$out" || fail "QE_GPT2_ENCODER_DIR: error does not say where it looked: $out"
ls x_* 2>/dev/null && fail "a usage error wrote files"
echo "ok: usage"

# --- 2. format and split -----------------------------------------------------------------
export QE_GPT2_ENCODER_DIR=$ENC
"$Q" tokenize --in "$BROWN" --out all --val-fraction 0 --quiet || fail "tokenize --val-fraction 0"
for F in 0.1 0.3; do
  "$Q" tokenize --in "$BROWN" --out "s$F" --val-fraction "$F" --json >"s$F.json" || fail "tokenize --val-fraction $F"
  python3 - "$F" all_train.bin "s${F}_train.bin" "s${F}_val.bin" "s$F.json" <<'PY' || fail "shards at --val-fraction $F"
import json, struct, sys
F, allp, trp, vap, js = sys.argv[1:]
def shard(p):
    b = open(p, "rb").read()
    h = struct.unpack("<256i", b[:1024])
    assert h[0] == 20240520 and h[1] == 1, f"{p}: header {h[:3]}"
    assert all(x == 0 for x in h[3:]), f"{p}: header ints 3..255 not zero"
    assert len(b) == 1024 + 2 * h[2], f"{p}: {len(b)} bytes for {h[2]} tokens"
    t = struct.unpack(f"<{h[2]}H", b[1024:])
    assert t and t[0] == 50256, f"{p}: does not start with EOT"
    assert max(t) <= 50256, f"{p}: token {max(t)} outside GPT-2's vocabulary"
    return t
def records(t):
    out, cur = [], None
    for x in t:
        if x == 50256:
            if cur is not None: out.append(cur)
            cur = [x]
        else:
            cur.append(x)
    out.append(cur)
    return out
allr = records(shard(allp))
assert len(allr) == 500, f"{allp}: {len(allr)} EOT-separated records, want 500"
p = round(float(F) * 1e6)
val = [i for i in range(len(allr)) if (i + 1) * p // 10**6 > i * p // 10**6]
vs = set(val)
want_tr = [x for i, r in enumerate(allr) if i not in vs for x in r]
want_va = [x for i in val for x in allr[i]]
tr, va = shard(trp), shard(vap)
assert list(tr) == want_tr, f"{trp}: not the non-val records of the F=0 shard in order"
assert list(va) == want_va, f"{vap}: not records {val[:5]}... of the F=0 shard"
j = json.load(open(js))
assert j["records"] == 500 and j["val"]["records"] == len(val) and j["train"]["records"] == 500 - len(val), j
assert j["train"]["tokens"] == len(tr) and j["val"]["tokens"] == len(va), j
print(f"ok: F={F}: train {j['train']['records']} records {len(tr)} tokens, val {len(val)} records "
      f"(1-based {[i + 1 for i in val[:4]]}...) {len(va)} tokens, {j['tokens_per_s']:.0f} tokens/s")
PY
done

# --- 3. --val-fraction 0 removes an old val shard --------------------------------------
cp s0.1_train.bin r_train.bin && cp s0.1_val.bin r_val.bin
"$Q" tokenize --in "$BROWN" --out r --val-fraction 0 --json >r.json || fail "tokenize over an old pair"
[ ! -e r_val.bin ] && grep -q '"removed_old_val":true' r.json || fail "--val-fraction 0 left the old r_val.bin"
cmp -s r_train.bin all_train.bin || fail "r_train.bin is not the --val-fraction 0 shard"
echo "ok: --val-fraction 0 removed the old val shard"

# --- 4. bad input: named, nothing written ------------------------------------------------
head -3 "$BROWN" >three.jsonl
cp s0.1_train.bin keep_train.bin && cp s0.1_val.bin keep_val.bin
sum0=$(cat keep_train.bin keep_val.bin | md5sum)
bad() { # NAME WANT: tokenize NAME.jsonl into the keep_ pair, expect an error with WANT naming the file
  local name=$1 want=$2
  out=$("$Q" tokenize --in "$name.jsonl" --out keep --val-fraction 0.1 2>&1) && fail "$name.jsonl accepted"
  grep -q -- "$name.jsonl" <<<"$out" && grep -q -- "$want" <<<"$out" || fail "$name.jsonl: want '$want' naming the file, got: $out"
  [ "$(cat keep_train.bin keep_val.bin | md5sum)" = "$sum0" ] || fail "$name.jsonl: the previous shards changed"
  ls | grep -q '\.tmp\.' && fail "$name.jsonl: a temp file was left: $(ls)"
  echo "ok: $name.jsonl refused: $(head -1 <<<"$out")"
}
{ head -2 "$BROWN"; echo '{"text": "unterminated'; head -5 "$BROWN" | tail -1; } >notjson.jsonl
bad notjson "line 3: not JSON"
{ head -1 "$BROWN"; echo '{"id": "x", "txt": "no text field"}'; } >notext.jsonl
bad notext 'line 2: no string field "text"'
{ head -1 "$BROWN"; echo '{"text": 5}'; } >numtext.jsonl
bad numtext 'line 2: no string field "text"'
{ head -3 "$BROWN"; printf '{"text": "bad \xff\xfe bytes"}\n'; } >badutf8.jsonl
bad badutf8 "line 4: not JSON"
: >empty.jsonl
bad empty "no records"
bad missing "cannot open"
bad three "puts none of its 3 records in val"
out=$("$Q" tokenize --in three.jsonl --out "$T/nodir/p" 2>&1) && fail "an output folder that does not exist was accepted"
grep -q "$T/nodir/p_train.bin" <<<"$out" || fail "missing output folder: error does not name the path: $out"
"$Q" tokenize --in three.jsonl --out three --val-fraction 0 --quiet || fail "3 records at --val-fraction 0"
echo "ok: output folder missing refused; 3 records at --val-fraction 0 fine"

# --- 5. the loader -----------------------------------------------------------------------
C="--preset tiny --micro 2 --steps 2 --quiet"
out=$("$Q" train $C --data s0.1_train.bin 2>&1) && fail "a GPT-2 shard trained a 256-token model"
n=$(grep -o 'token [0-9]* does not fit vocabulary 256' <<<"$out" | cut -d' ' -f2)
[ -n "$n" ] && [ "$n" -ge 256 ] && [ "$n" -le 50256 ] && grep -q 's0.1_train.bin' <<<"$out" \
  || fail "too small a vocabulary: want 'token N does not fit vocabulary 256' naming the shard, got: $out"
echo "ok: loads; refused for the tiny model: token $n does not fit vocabulary 256"
python3 - <<'PY'
import random, struct
random.seed(7)
def put(p, toks, magic=20240520):
    open(p, "wb").write(struct.pack("<256i", magic, 1, len(toks), *([0] * 253)) + struct.pack(f"<{len(toks)}H", *toks))
tr = [random.randrange(200) for _ in range(20000)]
put("small_train.bin", tr); put("small_val.bin", [random.randrange(200) for _ in range(4000)])
put("alone_train.bin", tr)
put("short_train.bin", tr); put("short_val.bin", list(range(12)))
put("badval_train.bin", tr); put("badval_val.bin", tr[:100], magic=12345)
PY
"$Q" train $C --data small_train.bin --eval-every 1 || fail "a train/val pair does not train"
"$Q" train $C --data alone_train.bin --eval-every 1 || fail "a train shard without val does not train"
out=$("$Q" train $C --data short_train.bin --eval-every 1 2>&1) && fail "a 12-token val shard was not used for evaluation"
grep -q "held-out split has 12 tokens" <<<"$out" || fail "12-token val shard: got: $out"
out=$("$Q" train $C --data badval_train.bin 2>&1) && fail "a val shard with a bad magic was accepted"
grep -q "badval_val.bin.*bad magic" <<<"$out" || fail "bad val shard: want its name and 'bad magic', got: $out"
echo "ok: X_val.bin beside X_train.bin is the held-out stream"
echo ok
