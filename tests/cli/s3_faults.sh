#!/usr/bin/env bash
# Bad answers and slow servers between qeffect and S3 (issue 15): a
# fault-injecting proxy (tests/store/s3_fault_proxy.c, built beside qeffect)
# sits on 127.0.0.1 in front of s3rver 3.7.1 and, per mode, spoils answers:
#  1. a listing answered with HTTP 200 and an HTML page, cut in half (with a
#     matching Content-Length), empty, or "IsTruncated true" without a token:
#     `qeffect gc --remote --grace 0` exits non-zero naming the request
#     ("GET s3://qe-test/f1/checkpoints/?list-type=2: answer is ...") and
#     every manifest and chunk is still there (listed directly from s3rver
#     with curl, not through the proxy or qeffect);
#  2. `qeffect pull` under the same faults fails the same way and commits
#     nothing (a cut listing must not make it pull an older step);
#  3. a server trickling 2 bytes per second: push, pull and gc each fail
#     within a few seconds with "slower than 65536 B/s for 2 s"
#     (QE_S3_LOW_SPEED_S=2), where they used to hang; with 4 retries a push ends within the
#     request's retry budget (QE_S3_RETRY_BUDGET_S=7 here, 150 s by default), saying why it
#     stopped retrying;
#  4. a server steady at 100 B/s, above a low-speed limit of 10 B/s: the
#     request fails at its deadline (QE_S3_TIMEOUT_S=2 + bytes at
#     QE_S3_MIN_RATE) with "over its deadline";
#  5. back in pass-through mode the same proxy serves a dry-run gc and a pull;
#  6. (run before 5) a server answering HTTP 200 and some XML to every request, storing nothing:
#     push fails naming the object that was not believed, and the catalog records no remote copy.
# Without node/npm it prints SKIP and passes, unless QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: s3_faults.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/../../scripts/s3-test-lib.sh"
PROXY=${QE_FAULT_PROXY:-$(dirname "$Q")/s3_fault_proxy}
[ -x "$PROXY" ] || fail "no fault proxy at $PROXY (cmake builds s3_fault_proxy beside qeffect)"
command -v curl >/dev/null || skip "curl is not installed"
command -v python3 >/dev/null || skip "python3 is not installed"
s3_start_server || skip "s3rver 3.7.1 could not be installed or started"
echo "s3rver on $EP (pid $PID)"
s3_use_test_credentials
export QE_CKPT_CHUNK_BYTES=262144 # a few dozen chunks a checkpoint: the push stays short
cd "$T"

echo pass >mode
"$PROXY" "$PORT" "$T/mode" "$T/proxy.log" >proxy.port 2>proxy.err &
PROXY_PID=$!
trap 'kill "$PROXY_PID" 2>/dev/null; cleanup' EXIT
for _ in $(seq 1 50); do [ -s proxy.port ] && break; sleep 0.1; done
[ -s proxy.port ] || { cat proxy.err; fail "the fault proxy did not start"; }
PX=http://127.0.0.1:$(cat proxy.port)
echo "fault proxy on $PX (pid $PROXY_PID)"
R=s3://qe-test/f1
# No retries: each fault is seen once, and the slow cases stay short.
export QE_S3_RETRIES=0

EMPTY_SHA=$(printf '' | sha256sum | cut -d' ' -f1)
# "KEY SIZE" lines of everything under f1/, straight from s3rver.
s3ls() {
  curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER -H "x-amz-content-sha256: $EMPTY_SHA" \
    "$EP/qe-test?list-type=2&max-keys=1000&prefix=f1%2F" >ls.xml || return 1
  python3 - ls.xml <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = root.tag.split('}')[0] + '}' if root.tag.startswith('{') else ''
assert root.find(ns + 'IsTruncated').text == 'false', 'listing truncated'
for k, s in sorted((c.find(ns + 'Key').text, c.find(ns + 'Size').text) for c in root.findall(ns + 'Contents')):
    print(k, s)
EOF
}
unchanged() { # WHAT: the remote is as it was after the push
  s3ls >now.txt || fail "$1: listing s3rver directly"
  cmp -s before.txt now.txt || { diff before.txt now.txt | head -5; fail "$1: the remote changed ($(grep -c . now.txt) of $(grep -c . before.txt) objects left)"; }
}
# run SECONDS OUT ERR CMD...: CMD under a time limit; sets st (124: it hung) and secs.
run() {
  local lim=$1 out=$2 err=$3; shift 3
  local t0; t0=$(date +%s.%N)
  timeout "$lim" "$@" >"$out" 2>"$err"; st=$?
  secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
}
expect_fail() { # WHAT PATTERN...: the last run failed, its stderr matching every PATTERN
  local what=$1; shift
  [ "$st" = 124 ] && fail "$what: still running after the time limit (it hangs)"
  [ "$st" != 0 ] || { cat err.txt; fail "$what: exit 0"; }
  for p in "$@"; do
    grep -qF -- "$p" err.txt || { cat err.txt; fail "$what: the error does not say '$p'"; }
  done
  echo "$what: exit $st in $secs s: $(tail -1 err.txt | cut -c1-240)"
}

# --- 0. four checkpoints pushed through the proxy (pass-through) ----------------------------
"$Q" train --preset tiny --pp 2 --micro 4 --steps 8 --ckpt-every 2 --run-dir A --quiet || fail "training A"
"$Q" push --run-dir A --remote $R --endpoint "$PX" --all --quiet || { tail -5 proxy.log; fail "push --all through the proxy"; }
s3ls >before.txt || fail "listing with curl"
[ "$(grep -c 'manifest.json ' before.txt)" = 4 ] || fail "4 manifests expected after push --all"
echo "pushed: 4 manifests, $(grep -c '^f1/chunks/' before.txt) chunks"

# --- 1. remote gc after a faulty listing -----------------------------------------------------
LIST="GET s3://qe-test/f1/checkpoints/?list-type=2"
echo "html-list checkpoints" >mode
run 60 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, manifests listed as an HTML page" "nothing was deleted" "$LIST" "answer is not a ListBucketResult (HTML page?)"
grep -q '^html-list\* GET' proxy.log || fail "the proxy never served its HTML page"
unchanged "gc after an HTML listing"
echo "truncate-list checkpoints" >mode
run 60 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, manifests listing cut in half" "$LIST" "answer is truncated"
unchanged "gc after a truncated listing"
echo "empty-list checkpoints" >mode
run 60 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, manifests listing empty" "$LIST" "answer is empty"
unchanged "gc after an empty listing"
echo "flag-list checkpoints" >mode
run 60 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, truncated listing without a token" "$LIST" "without a usable continuation token"
unchanged "gc after a listing without its token"
echo "html-list" >mode # every listing, the first (the bucket check) included
run 60 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, every listing an HTML page" "GET s3://qe-test/f1/?list-type=2" "not a ListBucketResult (HTML page?)"
unchanged "gc after HTML listings"

# --- 2. pull after a faulty listing ----------------------------------------------------------
n=0
for m in html-list truncate-list empty-list; do
  n=$((n + 1))
  echo "$m checkpoints" >mode
  run 60 out.txt err.txt "$Q" pull --run-dir P$n --remote $R --endpoint "$PX"
  case $m in
    html-list) why="answer is not a ListBucketResult (HTML page?)" ;;
    truncate-list) why="answer is truncated" ;;
    empty-list) why="answer is empty" ;;
  esac
  expect_fail "pull, $m" "GET s3://qe-test/f1/checkpoints/" "?list-type=2" "$why"
  if [ -f P$n/catalog.db ]; then
    c=$(sqlite3 P$n/catalog.db "select count(*) from checkpoints where status = 'committed'" 2>/dev/null || echo 0)
    [ "$c" = 0 ] || fail "pull, $m: committed $c checkpoint(s) from a faulty listing"
  fi
done
unchanged "pulls after faulty listings"

# --- 3. a server trickling 2 bytes per second -----------------------------------------------
echo "trickle 2 1000" >mode
export QE_S3_LOW_SPEED_S=2
run 25 out.txt err.txt "$Q" push --run-dir A --remote $R --endpoint "$PX" --all
expect_fail "push, trickled" "slower than 65536 B/s for 2 s" "GET s3://qe-test/f1/"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)" "$secs" || fail "push took $secs s to fail"
run 25 out.txt err.txt "$Q" pull --run-dir P9 --remote $R --endpoint "$PX"
expect_fail "pull, trickled" "slower than 65536 B/s for 2 s"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)" "$secs" || fail "pull took $secs s to fail"
run 25 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc, trickled" "slower than 65536 B/s for 2 s"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)" "$secs" || fail "gc took $secs s to fail"
# with retries, the request and its retries end within the budget (150 s by default; 7 s here)
QE_S3_RETRIES=4 QE_S3_RETRY_BUDGET_S=7 run 40 out.txt err.txt "$Q" push --run-dir A --remote $R --endpoint "$PX" --all
expect_fail "push, trickled, retried within a budget" "no retry: another attempt could end past the request's 7 s budget"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 7.5 else 1)" "$secs" || fail "the retried push took $secs s, past its 7 s budget"
unset QE_S3_LOW_SPEED_S

# --- 4. steady but too slow for the deadline --------------------------------------------------
echo "trickle 10 100" >mode
export QE_S3_LOW_SPEED_BPS=10 QE_S3_TIMEOUT_S=2 QE_S3_MIN_RATE=1048576
run 25 out.txt err.txt "$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0
expect_fail "gc at 100 B/s" "over its deadline of 2 s" "GET s3://qe-test/f1/"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)" "$secs" || fail "gc took $secs s to fail"
unset QE_S3_LOW_SPEED_BPS QE_S3_TIMEOUT_S QE_S3_MIN_RATE
unchanged "slow servers"

# --- 6. a server that answers 200 to everything and stores nothing -----------------------------
echo lie >mode
n0=$(sqlite3 A/catalog.db "select count(*) from remotes")
run 60 out.txt err.txt "$Q" push --run-dir A --remote s3://qe-test/lie --endpoint "$PX" --all
expect_fail "push to a server that says yes to everything" "not believed" "s3://qe-test/lie/"
n1=$(sqlite3 A/catalog.db "select count(*) from remotes")
[ "$n1" = "$n0" ] || fail "push to a lying server recorded $((n1 - n0)) remote copies"
echo "ok: a lying server: push failed, no remote copy recorded"

# --- 5. pass-through again ---------------------------------------------------------------------
echo pass >mode
"$Q" gc --remote $R --endpoint "$PX" --keep-last 2 --grace 0 --dry-run --json >dry.json || fail "dry-run gc through the proxy"
python3 -c "import json,sys; sys.exit(0 if json.load(open('dry.json'))['dropped'] == 2 else 1)" \
  || { cat dry.json; fail "dry-run gc: want 2 dropped"; }
"$Q" pull --run-dir OK --remote $R --endpoint "$PX" --quiet || fail "pull through the proxy"
unchanged "pass-through"
echo ok
