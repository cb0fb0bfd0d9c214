#!/usr/bin/env bash
# Training data: an llm.c token shard (magic 20240520, uint16 tokens) trains; a shard with a
# bad magic, a truncated shard, a JSONL line without "text" and a missing file are refused
# with errors naming the file.  Input read without limits is refused before it is read (issue
# 35, item 4): /dev/zero, a directory and a pipe (no hang), a shard of another version, a shard
# longer than its header says, and a JSONL record over the 16 MiB limit (naming its line).
set -u
Q=${1:?usage: data_formats.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
python3 - "$T" <<'PY'
import struct, sys, random
d = sys.argv[1]
random.seed(5)
toks = [random.randrange(200) for _ in range(20000)]
hdr = [20240520, 1, len(toks)] + [0] * 253
open(f"{d}/good.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(toks)}H", *toks))
bad = [12345, 1, len(toks)] + [0] * 253
open(f"{d}/badmagic.bin", "wb").write(struct.pack("<256i", *bad) + struct.pack(f"<{len(toks)}H", *toks))
open(f"{d}/short.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<100H", *toks[:100]))
open(f"{d}/notext.jsonl", "w").write('{"text": "fine"}\n{"id": 2}\n')
v7 = [20240520, 7, len(toks)] + [0] * 253
open(f"{d}/version7.bin", "wb").write(struct.pack("<256i", *v7) + struct.pack(f"<{len(toks)}H", *toks))
open(f"{d}/long.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(toks)}H", *toks) + b"\0" * 4000)
with open(f"{d}/huge.jsonl", "w") as f:
    for i in range(6):
        f.write('{"text": "a fine record"}\n')
    f.write('{"text": "' + "x" * (17 << 20) + '"}\n')
PY
mkdir "$T/adir"
mkfifo "$T/apipe"
C="--preset tiny --micro 2 --steps 5 --quiet"
if out=$("$Q" train $C --data "$T/good.bin" --json 2>&1); then echo "ok: llm.c shard trains"; else echo "FAIL: shard: $out"; fail=1; fi
expect_err() {
  local file=$1 want=$2
  out=$("$Q" train $C --data "$file" 2>&1) && { echo "FAIL: $file accepted"; fail=1; return; }
  if grep -q "$(basename "$file")" <<<"$out" && grep -qi "$want" <<<"$out"; then echo "ok: $(basename "$file") refused: $want"
  else echo "FAIL: $(basename "$file"): expected '$want' naming the file, got: $out"; fail=1; fi
}
expect_err "$T/badmagic.bin" "bad magic"
expect_err "$T/short.bin" "truncated"
expect_err "$T/notext.jsonl" "no string field"
expect_err "$T/missing.jsonl" "cannot open"
expect_err "$T/version7.bin" "version 7"
expect_err "$T/long.bin" "header says 20000 tokens but the file holds"
expect_err "$T/huge.jsonl" "line 7: a record over 16777216 bytes"
expect_err "$T/adir" "a directory"
expect_err "$T/apipe" "a pipe"
start=$(date +%s)
out=$(timeout 20 "$Q" train $C --data /dev/zero 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "'/dev/zero': a character device" <<<"$out" && [ $(( $(date +%s) - start )) -lt 10 ]; then
  echo "ok: /dev/zero refused at once"
else echo "FAIL: /dev/zero: rc $rc after $(( $(date +%s) - start )) s: $out"; fail=1; fi
exit $fail
