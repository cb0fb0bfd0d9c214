#!/usr/bin/env bash
# Fault loops over the checkpoint service, in the manner of SQLite's malloc and I/O error
# tests: for each operation - save (sync and async), restore, local gc, push, pull and
# remote gc - and each kind of call it makes (runtime/core/fault.h: alloc, lmdb_put,
# lmdb_commit, lmdb_sync, sqlite_step, sqlite_commit, write, fsync, rename, copy, s3), a
# first run without faults counts the calls (QE_FAULT_COUNT), then QE_FAULT=KIND:N fails
# call N in a fresh copy of the operation's starting state.  After every trial:
#  - the command succeeded, or it failed with an error naming the injected call
#    ("injected fault: fsync #3"), without a signal, sanitizer report or leak (under
#    `make test-sanitize` the binary is built with ASan, UBSan and LSan);
#  - `list` and `verify` pass: every committed checkpoint reads back intact, and each holds
#    as many bytes as the same checkpoint of a run without faults (nothing half-written is
#    committed);
#  - the latest committed checkpoint resumes to step 3 bit-exact against an uninterrupted
#    run (`compare`); with none committed, resume refuses;
#  - a failed pull leaves a directory that the same pull, run again, completes; after a
#    failed push or remote gc, the remote's latest checkpoint pulls and resumes bit-exact.
# Sampling: for each operation and kind with C calls, N = 1 .. K/2 and then K/2 more spread
# evenly up to C (K = QE_FAULT_TRIALS, default 4; the count and the Ns are printed).
# QE_FAULT_TRIALS=all fails every N = 1 .. C (a long run).  The S3 operations need s3rver
# (scripts/s3-test-env.sh); without it they are skipped, unless QE_S3_REQUIRED=1.
set -u
Q=${1:?usage: fault_loop.sh QEFFECT [SHARED]}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/../../scripts/s3-test-lib.sh"
K=${QE_FAULT_TRIALS:-4}
case $K in all | [1-9] | [1-9][0-9] | [1-9][0-9][0-9]) ;; *) fail "QE_FAULT_TRIALS='$K': a number from 1 or 'all'" ;; esac
KINDS="alloc lmdb_put lmdb_commit lmdb_sync sqlite_step sqlite_commit write fsync rename copy s3"
C="--preset tiny --micro 2 --amax-history 4 --quiet"
export QE_CKPT_CHUNK_BYTES=65536 QE_COMM_TIMEOUT_MS=30000 QE_S3_RETRIES=0 QE_S3_BACKOFF_MS=1
unset QE_FAULT QE_FAULT_COUNT
cd "$T"
t0=$(date +%s)

S3=1
if s3_start_server; then
  s3_use_test_credentials
  echo "s3rver on $EP (pid $PID)"
else
  [ "${QE_S3_REQUIRED:-0}" = 1 ] && fail "s3rver could not be started (QE_S3_REQUIRED=1)"
  echo "SKIP: push, pull and gc --remote: s3rver could not be installed or started"
  S3=0
fi

# The uninterrupted reference (3 steps) and the good run every trial starts from (checkpoints at 1, 2).
"$Q" train $C --steps 3 --run-dir ref || fail "reference run"
"$Q" train $C --steps 2 --ckpt-every 1 --run-dir good || fail "good run"
BYTES=$("$Q" list --run-dir good --json | python3 -c "import json,sys; print(json.load(sys.stdin)['checkpoints'][0]['bytes'])")
if [ $S3 = 1 ]; then
  "$Q" push --run-dir good --remote s3://qe-test/good --endpoint "$EP" --all --quiet || fail "push of the good run"
fi

# --- the operations: prep_X DIR ID makes the starting state, run_X DIR ID runs it -------------
prep_fresh() { :; }
prep_good() { cp -a good "$1"; }
prep_gcr() { cp -a good "$1" && "$Q" push --run-dir "$1" --remote "s3://qe-test/$2" --endpoint "$EP" --all --quiet; }
run_save() { "$Q" train $C --steps 2 --ckpt-every 1 --run-dir "$1"; }
run_async() { "$Q" train $C --steps 2 --ckpt-every 1 --ckpt-async --run-dir "$1"; }
run_restore() { "$Q" resume --run-dir "$1" --steps 3 --ckpt-every 1 --quiet; }
run_gc() { "$Q" gc --run-dir "$1" --keep-last 1 --grace 0; }
run_push() { "$Q" push --run-dir "$1" --remote "s3://qe-test/$2" --endpoint "$EP" --all --quiet; }
run_pull() { "$Q" pull --run-dir "$1" --remote s3://qe-test/good --endpoint "$EP" --quiet; }
run_gcr() { "$Q" gc --run-dir "$1" --remote "s3://qe-test/$2" --endpoint "$EP" --keep-last 1 --grace 0; }
OPS="save:fresh async:fresh restore:good gc:good"
[ $S3 = 1 ] && OPS="$OPS push:good pull:fresh gcr:gcr"

bad=0 trials=0 points=0 failed_trials=0
problem() { echo "FAIL: $*"; bad=$((bad + 1)); }

# check_run DIR WHAT: the invariants of a run directory after a trial.
check_run() {
  local d=$1 what=$2 steps
  [ -f "$d/catalog.db" ] || return 0
  steps=$("$Q" list --run-dir "$d" --json 2>"$d.list.err" | python3 -c "
import json,sys
d=json.load(sys.stdin); c=[x for x in d['checkpoints'] if x['status']=='committed']
bad=[x['step'] for x in c if x['bytes']!=$BYTES]
print('BAD %s' % bad if bad else ' '.join(str(x['step']) for x in c))" 2>/dev/null) \
    || { grep -q "has no run yet" "$d.list.err" && return 0
         problem "$what: list fails: $(tail -1 "$d.list.err")"; return 1; }
  case $steps in BAD*) problem "$what: committed checkpoints with other sizes than $BYTES bytes: ${steps#BAD }"; return 1 ;; esac
  "$Q" verify --run-dir "$d" >"$d.verify" 2>&1 || { problem "$what: verify fails: $(tail -2 "$d.verify")"; return 1; }
  if [ -z "$steps" ]; then
    "$Q" resume --run-dir "$d" --steps 3 --quiet >"$d.resume" 2>&1 && { problem "$what: resume without a committed checkpoint succeeded"; return 1; }
    grep -q "no committed checkpoint" "$d.resume" || { problem "$what: resume refused wrongly: $(tail -1 "$d.resume")"; return 1; }
    return 0
  fi
  "$Q" resume --run-dir "$d" --steps 3 --quiet >"$d.resume" 2>&1 \
    || { problem "$what: the latest committed checkpoint (of $steps) does not resume: $(tail -1 "$d.resume")"; return 1; }
  "$Q" compare ref "$d" >"$d.compare" 2>&1 || { problem "$what: resumed run (from $steps) differs: $(tail -2 "$d.compare")"; return 1; }
}

# check_remote PREFIX WHAT: the remote's latest checkpoint pulls into a new folder and resumes bit-exact.
check_remote() {
  local d=$T/w/remote.$RANDOM
  if ! "$Q" pull --run-dir "$d" --remote "s3://qe-test/$1" --endpoint "$EP" --quiet >"$d.pull" 2>&1; then
    grep -qi "no checkpoint\|no pushed\|nothing to pull\|not found" "$d.pull" && return 0
    problem "$2: the remote does not pull: $(tail -1 "$d.pull")"
    return 1
  fi
  check_run "$d" "$2 (pulled back)"
}

# max_counts FILE: "kind=n ..." with each kind's largest count over the processes of the run.
max_counts() {
  python3 -c "
import sys
m={}
for line in open(sys.argv[1]):
    for f in line.split()[3:]:
        if '=' in f and not f.startswith('fired='):
            k,v=f.split('='); m[k]=max(m.get(k,0),int(v))
print(' '.join('%s=%d' % (k, m.get(k,0)) for k in sys.argv[2].split()))" "$1" "$KINDS"
}

# the Ns for C calls
sample() {
  local c=$1
  if [ "$K" = all ] || [ "$c" -le "$K" ]; then seq 1 "$c"; return; fi
  local h=$(((K + 1) / 2)) i
  seq 1 $h
  for i in $(seq 1 $((K - h))); do echo $((h + i * (c - h) / (K - h))); done
}

mkdir -p w
n=0
for spec in $OPS; do
  op=${spec%%:*} prep=${spec#*:}
  d=w/$op.base
  prep_$prep "$d" "$op-base" >/dev/null 2>&1 || fail "$op: preparing its starting state"
  QE_FAULT_COUNT=$T/$d.counts run_$op "$d" "$op-base" >"$d.out" 2>&1 || { tail -5 "$d.out"; fail "$op without faults"; }
  counts=$(max_counts "$d.counts")
  echo "$op: calls $counts"
  for kc in $counts; do
    kind=${kc%%=*} c=${kc#*=}
    [ "$c" -gt 0 ] || continue
    points=$((points + c))
    ns=$(sample "$c" | tr '\n' ' ')
    echo "  $kind: $c calls, failing N = $ns"
    for N in $ns; do
      n=$((n + 1)) trials=$((trials + 1))
      id="t$n-$op-$kind-$N" d=w/$id
      prep_$prep "$d" "$id" >/dev/null 2>&1 || { problem "$id: preparing the starting state"; continue; }
      QE_FAULT=$kind:$N QE_FAULT_COUNT=$T/$d.counts run_$op "$d" "$id" >"$d.out" 2>&1
      rc=$?
      what="$op $kind:$N"
      if grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:\|Segmentation\|core dumped" "$d.out"; then
        problem "$what: crash or sanitizer report:"; grep -m3 "ERROR\|runtime error\|SUMMARY" "$d.out"
        continue
      fi
      if [ $rc -ge 128 ]; then problem "$what: killed by signal $((rc - 128))"; continue; fi
      if [ $rc -ne 0 ]; then
        failed_trials=$((failed_trials + 1))
        grep -q "injected fault: $kind #$N" "$d.out" \
          || { problem "$what: failed (exit $rc) without naming the injected call: $(grep -v '^fault counts' "$d.out" | tail -2)"; continue; }
      fi
      case $op in
        pull)
          check_run "$d" "$what" || continue
          if [ $rc -ne 0 ]; then
            run_pull "$d" >"$d.again" 2>&1 || { problem "$what: the same pull run again fails: $(tail -1 "$d.again")"; continue; }
            check_run "$d" "$what (pulled again)" || continue
          fi
          ;;
        push | gcr)
          check_run "$d" "$what" || continue
          check_remote "$id" "$what" || continue
          ;;
        save | async)
          check_run "$d" "$what" || continue
          # Nothing committed: the same command on the same directory starts the run again.
          if [ $rc -ne 0 ] && ! grep -q '"status": "committed"' <("$Q" list --run-dir "$d" --json 2>/dev/null); then
            run_$op "$d" "$id" >"$d.again" 2>&1 || { problem "$what: training again in that directory fails: $(tail -1 "$d.again")"; continue; }
            check_run "$d" "$what (trained again)" || continue
          fi
          ;;
        *) check_run "$d" "$what" || continue ;;
      esac
      rm -rf "$d" "$d".*
    done
  done
done

secs=$(($(date +%s) - t0))
echo "fault points: $points (calls that could fail, over the operations), trials: $trials ($failed_trials failed" \
  "with an error, the rest succeeded), QE_FAULT_TRIALS=$K, $secs s"
[ $bad -eq 0 ] || fail "$bad of $trials trials broke an invariant"
echo "ok: every trial succeeded or failed cleanly, and every committed checkpoint verified and resumed bit-exact"
