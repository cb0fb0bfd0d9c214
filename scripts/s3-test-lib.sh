# Sourced by the S3 shell tests (tests/cli/s3_*.sh) after they set Q to the qeffect binary:
# a temporary folder $T removed at exit together with the s3rver started by
# s3_start_server, fail/skip helpers (skip fails instead when QE_S3_REQUIRED=1, as .ci/run
# sets), and the credentials s3rver accepts.
HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
ENV_SH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/s3-test-env.sh"
T=$(mktemp -d)
PID=""
cleanup() { [ -n "$PID" ] && bash "$ENV_SH" stop "$PID"; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
skip() {
  if [ "${QE_S3_REQUIRED:-0}" = 1 ]; then fail "$* (QE_S3_REQUIRED=1)"; fi
  echo "SKIP: $*"; exit 0
}
export QE_S3RVER_PREFIX=${QE_S3RVER_PREFIX:-$(dirname "$Q")/s3rver}

# Start s3rver (bucket qe-test) on PORT (0: a free one); sets PORT, PID and EP.
s3_start_server() { # [PORT]
  local out
  out=$(bash "$ENV_SH" start "$T/s3data" "${1:-0}" qe-test 2>&1) || { echo "$out"; return 1; }
  read -r PORT PID <<<"$out"
  EP="http://127.0.0.1:$PORT"
}

# s3rver's default credentials; nothing from the caller's AWS setup leaks in.
s3_use_test_credentials() {
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1
  unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL
}
