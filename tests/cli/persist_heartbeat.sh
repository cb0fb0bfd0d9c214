#!/usr/bin/env bash
# Background pushes (--ckpt-persist-every) that last several times QE_COMM_TIMEOUT_MS (issue
# 21), against s3rver on 127.0.0.1: tiny --pp 2 (two ranks upload), a time-out of 3000 ms, and
# QE_CKPT_PERSIST_SLOW_MS=300:RANK making one rank sleep 300 ms before each of its ~30 chunks,
# so its uploads take ~10 s (the sleeps are a lower bound: no timer race in the assertions):
#  1. rank 1 slow: rank 0 uploads its own part at once, then waits ~10 s for rank 1's report
#     while training ends; the push succeeds (its time asserted > 3 time-outs), rank 0 prints
#     rank 1's progress (bytes) while it waits, the manifest is written and the catalog records
#     the copy, and a pull of the pushed copy resumes bit-exact (qeffect compare);
#  2. rank 0 slow: rank 1 is done at once and waits ~10 s at the end of training for rank 0's
#     push; it succeeds the same way;
#  3. rank 1 hangs (SIGSTOP) during a push: the job fails within bounded time (one time-out of
#     silence, then the launcher's grace), rank 0 naming rank 1 and its host; no manifest;
#  4. rank 1 dies (SIGKILL) during a push: the job fails at once, naming rank 1; no manifest.
# Without the progress messages, 1 and 2 fail with a comm time-out.
# SKIP without node (s3rver) unless QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: persist_heartbeat.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/../../scripts/s3-test-lib.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed"
s3_start_server || skip "s3rver 3.7.1 could not be installed or started (see above)"
s3_use_test_credentials
# A rank this test stopped is continued and killed whatever happens.
victims=()
trap 'for v in "${victims[@]}"; do kill -CONT "$v" 2>/dev/null; kill -KILL "$v" 2>/dev/null; done; cleanup' EXIT
TMO=3000
export QE_COMM_TIMEOUT_MS=$TMO QE_CKPT_CHUNK_BYTES=65536
C="--preset tiny --pp 2 --micro 4 --amax-history 4"
cd "$T"

# pushed_ms OUT REMOTE: MS = the push's time in ms from rank 0's line, checked > 3 time-outs.
pushed_ms() {
  local line
  line=$(grep "checkpoint step 4 pushed to s3://qe-test/$2/checkpoints/.*/4/manifest.json in the background" "$1") \
    || { tail -5 "$1"; fail "$2: rank 0 did not report the push of step 4"; }
  MS=$(sed -n 's/.* in \([0-9]*\)\.[0-9]* ms.*/\1/p' <<<"$line")
  [ -n "$MS" ] && [ "$MS" -gt $((3 * TMO)) ] \
    || fail "$2: the push took ${MS:-?} ms, not more than 3 x $TMO ms (fewer chunks? raise the 300 ms of QE_CKPT_PERSIST_SLOW_MS): $line"
}
# jfield JSON KEY
jfield() { python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[sys.argv[2]]))" "$1" "$2"; }

# --- 1. rank 1's uploads take > 3 time-outs; rank 0 waits for its report --------------------
t0=$(date +%s)
QE_CKPT_PERSIST_SLOW_MS=300:1 "$Q" train $C --steps 6 --ckpt-every 2 --ckpt-persist-every 4 --remote s3://qe-test/hb1 \
  --endpoint "$EP" --json --run-dir A >a.out 2>a.err || { tail -5 a.err; fail "1: training with a push longer than the comm time-out failed"; }
pushed_ms a.out hb1
ms1=$MS
J=$(grep '^{"rank":0' a.out | tail -1)
[ "$(jfield "$J" persist_pushed)" = "[4]" ] && [ "$(jfield "$J" persist_failed)" = "[]" ] \
  || fail "1: --json says pushed $(jfield "$J" persist_pushed), failed $(jfield "$J" persist_failed); want [4] and []"
# rank 0 heard rank 1's progress while it waited for its report (the bytes done grew)
n=$(grep -o "waiting for ranks, [0-9]* of [0-9]* bytes done" a.out | sort -u | wc -l)
[ "$n" -ge 2 ] || { grep "waiting for" a.out; fail "1: rank 0 printed no progress of rank 1 while it waited for its report"; }
[ "$(sqlite3 A/catalog.db "select group_concat(c.step) from remotes r join checkpoints c on c.id = r.checkpoint_id")" = 4 ] \
  || fail "1: the catalog does not record the pushed copy of step 4"
"$Q" pull --run-dir B --remote s3://qe-test/hb1 --endpoint "$EP" --step 4 --quiet || fail "1: pulling the pushed copy (its manifest)"
"$Q" resume --run-dir B --steps 6 --quiet || fail "1: resume from the pushed copy"
"$Q" compare A B --steps 5:6 >cmp.txt || { cat cmp.txt; fail "1: the run resumed from the pushed copy differs"; }
echo "ok: 1. rank 1 uploaded for $ms1 ms (time-out $TMO ms); the push, training and the final wait succeeded," \
  "$n progress lines; resumed from the pushed copy: $(tail -1 cmp.txt) ($(($(date +%s) - t0)) s)"

# --- 2. rank 0's uploads take > 3 time-outs; rank 1 waits at the end of training --------------
t0=$(date +%s)
QE_CKPT_PERSIST_SLOW_MS=300:0 "$Q" train $C --steps 6 --ckpt-every 2 --ckpt-persist-every 4 --remote s3://qe-test/hb2 \
  --endpoint "$EP" --json --run-dir D >d.out 2>d.err || { tail -5 d.err; fail "2: training with rank 0's push longer than the comm time-out failed"; }
pushed_ms d.out hb2
ms2=$MS
grep -q "waiting for the background push of checkpoint step 4 to s3://qe-test/hb2: uploading, [0-9]* of [0-9]* bytes done" d.out \
  || fail "2: the final wait printed no progress"
[ "$(sqlite3 D/catalog.db "select count(*) from remotes")" = 1 ] || fail "2: the catalog does not record the pushed copy"
echo "ok: 2. rank 0 uploaded for $ms2 ms while rank 1 waited at the end; succeeded ($(($(date +%s) - t0)) s)"

# --- 3, 4. rank 1 hangs or dies during a push at the end of training ---------------------------
# fault SIG RUN: train with rank 1 slow, send rank 1 SIG once the push started; SEC = the seconds
# from the signal to the job's end (the job must end, non-zero, within 30 s).
fault() {
  QE_CKPT_PERSIST_SLOW_MS=300:1 "$Q" train $C --steps 4 --ckpt-every 4 --ckpt-persist-every 4 \
    --remote "s3://qe-test/$2" --endpoint "$EP" --run-dir "$2" >"$2.out" 2>"$2.err" &
  local launcher=$! kids v s i
  for _ in $(seq 600); do grep -q "checkpoint step 4: pushing it to" "$2.out" && break; sleep 0.1; done
  grep -q "checkpoint step 4: pushing it to" "$2.out" || { kill -KILL $launcher; cat "$2.err"; fail "$2: the push never started"; }
  # the launcher forks rank 0, then rank 1; rank 1 uploads for ~10 s from now
  kids=$(pgrep -P $launcher | sort -n)
  [ "$(wc -w <<<"$kids")" = 2 ] || { kill -KILL $launcher; fail "$2: expected 2 rank processes, found '$kids'"; }
  v=$(tail -n1 <<<"$kids")
  victims+=("$v")
  s=$(date +%s)
  kill -"$1" "$v"
  for i in $(seq 300); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    kill -KILL $launcher; cat "$2.err"; fail "$2: the job still runs 30 s after rank 1 got SIG$1"
  fi
  wait $launcher && { cat "$2.err"; fail "$2: exit status 0 although rank 1 got SIG$1 during the push"; }
  [ "$(sqlite3 "$2/catalog.db" "select count(*) from remotes")" = 0 ] || fail "$2: a push missing rank 1's part was recorded"
  SEC=$(($(date +%s) - s))
}
fault STOP hang
host=$(sqlite3 hang/catalog.db "select host from stores where rank = 1 limit 1")
grep -q "rank 1 on host '$host' fell silent or died during the push: .*timed out after $TMO ms" hang.err \
  || { cat hang.err; fail "3: rank 0 does not report rank 1 on host '$host' silent"; }
echo "ok: 3. rank 1 hung during the push: the job failed after $SEC s naming rank 1 on host '$host'"
fault KILL dead
grep -q "rank 1" dead.err || { cat dead.err; fail "4: the failure does not name rank 1"; }
echo "ok: 4. rank 1 died during the push: the job failed after $SEC s naming rank 1: $(grep -m1 'rank 1' dead.err)"
