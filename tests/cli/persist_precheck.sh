#!/usr/bin/env bash
# --ckpt-persist-every checks its remote before step 1 (issue 35, item 5).  It used to fail only at
# the first background push, then every push failed and train exited 0.  Here, with no S3 server
# needed: each case exits non-zero before any step, names the cause, and commits no checkpoint.
#  1. --endpoint ftp://...: "must start with http:// or https://";
#  2. no credentials in the environment: "no credentials";
#  3. an endpoint where nothing listens (one retry): the refused connection, naming the endpoint.
set -u
Q=${1:?usage: persist_precheck.sh QEFFECT SHARED}
S=${2:?usage: persist_precheck.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --data $S/data/brown.jsonl --steps 4 --ckpt-every 2 --ckpt-persist-every 2 --log-every 1"
export QE_S3_RETRIES=1 QE_S3_BACKOFF_MS=10
n=0
for case in ftp nocreds refused; do
  n=$((n + 1))
  d="$T/$case"
  case $case in
    ftp) want="must start with http:// or https://"
      err=$(AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$Q" train $C --run-dir "$d" --remote s3://qe-test/p \
        --endpoint ftp://127.0.0.1:21 2>&1); rc=$? ;;
    nocreds) want="no credentials"
      err=$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$Q" train $C --run-dir "$d" --remote s3://qe-test/p \
        --endpoint http://127.0.0.1:9 2>&1); rc=$? ;;
    refused) want="127.0.0.1:9"
      err=$(AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$Q" train $C --run-dir "$d" --remote s3://qe-test/p \
        --endpoint http://127.0.0.1:9 2>&1); rc=$? ;;
  esac
  [ $rc -ne 0 ] || { echo "$err"; fail "$n ($case): train exited 0"; }
  grep -q "checked before training" <<<"$err" && grep -qF "$want" <<<"$err" ||
    { echo "$err"; fail "$n ($case): the refusal does not say '$want' before training"; }
  ! grep -q "^step " <<<"$err" || { echo "$err"; fail "$n ($case): steps ran before the remote was refused"; }
  if [ -f "$d/catalog.db" ]; then
    k=$(sqlite3 "$d/catalog.db" "select count(*) from checkpoints")
    [ "$k" = 0 ] || fail "$n ($case): $k checkpoints were taken"
  fi
  echo "ok: $n ($case) refused before step 1 (rc $rc): $(grep -m1 'checked before training' <<<"$err" | cut -c1-170)"
done
