#!/usr/bin/env bash
# s3-test-env.sh - an S3-compatible server for the replication tests: s3rver
# (npm, pinned) on 127.0.0.1, with the credentials S3RVER / S3RVER.
#
#   s3-test-env.sh install [PREFIX]            install s3rver into PREFIX (once; safe to run
#                                              concurrently) and print the path of its launcher.
#                                              Exit 3 with the reason on stderr when it cannot.
#   s3-test-env.sh start DATADIR [PORT] [BUCKET...]
#                                              start it in the background on 127.0.0.1:PORT
#                                              (0 or none: a free port), storing objects in
#                                              DATADIR, with the buckets created; print "PORT PID".
#   s3-test-env.sh stop PID                    stop it (TERM, then KILL after 5 s).
#   s3-test-env.sh env PORT                    print the exports a client needs.
#
# PREFIX defaults to $QE_S3RVER_PREFIX, else /tmp/qeffect-s3rver-$S3RVER_VERSION.
# s3rver checks that the access key id exists but does not verify V4 signatures;
# tests/store/test_remote_fake.c checks our signatures against the AWS algorithm.
set -euo pipefail
S3RVER_VERSION=3.7.1

die3() { echo "s3-test-env: $*" >&2; exit 3; }

launcher_of() { echo "$1/node_modules/s3rver/bin/s3rver.js"; }

cmd_install() {
  local prefix=${1:-${QE_S3RVER_PREFIX:-/tmp/qeffect-s3rver-$S3RVER_VERSION}}
  local js; js=$(launcher_of "$prefix")
  command -v node >/dev/null 2>&1 || die3 "node is not installed (scripts/deps.sh installs nodejs and npm)"
  local major; major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [ "$major" -ge 10 ] || die3 "node $(node --version 2>/dev/null) is too old for s3rver $S3RVER_VERSION (needs >= 10)"
  mkdir -p "$prefix" || die3 "cannot create $prefix"
  (
    # One installer at a time: tests start in parallel under ctest -j.
    flock -w 300 9 || die3 "timed out waiting for the install lock $prefix/.lock"
    if [ -f "$js" ] && grep -q "\"version\": \"$S3RVER_VERSION\"" "$prefix/node_modules/s3rver/package.json" 2>/dev/null; then
      exit 0
    fi
    command -v npm >/dev/null 2>&1 || die3 "npm is not installed (scripts/deps.sh installs it)"
    if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" >"$prefix/npm.log" 2>&1; then
      tail -5 "$prefix/npm.log" >&2
      die3 "npm install s3rver@$S3RVER_VERSION into $prefix failed (is the npm registry reachable?)"
    fi
  ) 9>"$prefix/.lock" || exit 3
  [ -f "$js" ] || die3 "s3rver's launcher $js is missing after the install"
  echo "$js"
}

cmd_start() {
  local data=${1:?usage: s3-test-env.sh start DATADIR [PORT] [BUCKET...]}
  local port=${2:-0}
  shift $(( $# >= 2 ? 2 : 1 ))
  local js; js=$(cmd_install "${QE_S3RVER_PREFIX:-}") || exit 3
  mkdir -p "$data"
  local log="$data.log"
  local args=(-d "$data" -a 127.0.0.1 -p "$port")
  for b in "$@"; do args+=(--configure-bucket "$b"); done
  : >"$log"
  # s3rver 3.7.1 encrypts ListObjectsV2 continuation tokens with DES, which
  # OpenSSL 3 (node >= 17) keeps in its legacy provider: without it every
  # listing longer than one page fails with HTTP 500.
  local nodeflags=()
  local major; major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 17 ] && nodeflags+=(--openssl-legacy-provider)
  setsid node "${nodeflags[@]}" "$js" "${args[@]}" >>"$log" 2>&1 </dev/null &
  local pid=$!
  local i
  for i in $(seq 1 150); do
    if grep -q "listening on" "$log"; then
      local got; got=$(grep -o 'listening on [0-9.]*:[0-9]*' "$log" | head -1 | sed 's/.*://')
      echo "$got $pid"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -5 "$log" >&2
      die3 "s3rver exited at start (log: $log)"
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die3 "s3rver did not start listening within 15 s (log: $log)"
}

cmd_stop() {
  local pid=${1:?usage: s3-test-env.sh stop PID}
  kill "$pid" 2>/dev/null || return 0
  local i
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

cmd_env() {
  local port=${1:?usage: s3-test-env.sh env PORT}
  echo "export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1"
  echo "export AWS_ENDPOINT_URL=http://127.0.0.1:$port"
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  env) shift; cmd_env "$@" ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
