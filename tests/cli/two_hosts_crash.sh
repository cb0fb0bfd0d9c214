#!/usr/bin/env bash
# Crash consistency of the per-rank-store protocol on two simulated hosts (lib/hosts.sh):
# every trial kills a rank with the QE_CKPT_KILL hook at a phase of a save - gate, begin,
# chunk, sync, synced, rows (rows in flight to rank 0), row (rank 0 writing every rank's rows
# in the commit transaction), commit, committed - or of a restore under --pp 4, where host B
# sends rank 1 its stages - read, serve (after a chunk transfer).  After each trial:
#  - the catalog on host A opens, and its latest committed checkpoint (if any) resumes on the
#    two hosts in fresh processes and matches the uninterrupted run bit for bit; with none
#    committed, resume refuses with "no committed checkpoint";
#  - a killed restore changed no committed checkpoint, and the same resume then succeeds.
# QE_CRASH_TRIALS (default 33 here: each of the 9 save phases and 2 restore phases three times;
# ckpt_test_crash's default is 50) asks for more trials; QE_CRASH_SEED picks them.
set -u
Q=${1:?usage: two_hosts_crash.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
P="$T/mnt"
mkdir -p "$P"
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/hosts.sh"
hosts_usable || { echo "FAIL: unshare -m is refused here (needs root): the two-host simulation cannot run"; exit 1; }
C="--preset tiny --micro 4 --amax-history 4 --quiet"
export QE_COMM_TIMEOUT_MS=30000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=two-hosts-crash-secret QE_LAUNCH_GRACE_MS=500
trials=${QE_CRASH_TRIALS:-33}
RANDOM=${QE_CRASH_SEED:-1201}
echo "two-host crash trials: $trials (QE_CRASH_TRIALS), seed ${QE_CRASH_SEED:-1201} (QE_CRASH_SEED)"

"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || { echo "FAIL: reference run"; exit 1; }
# A good two-host run with checkpoints at 3 and 6, the start of every restore trial.
job good "hostA:$T/ga hostB:$T/gb" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P" \
  || { show good; echo "FAIL: two-host training"; exit 1; }

committed() { "$Q" list --run-dir "$1" --json 2>/dev/null | python3 -c "
import json,sys
d=json.load(sys.stdin); print(' '.join(str(c['step']) for c in d['checkpoints'] if c['status']=='committed'))"; }

# check NAME A B: the latest committed checkpoint of the run on (A, B) resumes bit-exact.
check() {
  local name=$1 a=$2 b=$3 steps
  if [ ! -f "$a/catalog.db" ]; then echo "  $name: killed before the catalog existed"; return 0; fi
  steps=$(committed "$a") || { echo "FAIL: $name: the catalog on host A does not list"; return 1; }
  rm -rf "$T/ca" "$T/cb"; cp -a "$a" "$T/ca"; cp -a "$b" "$T/cb"
  if [ -z "$steps" ]; then
    if job "$name.check" "hostA:$T/ca hostB:$T/cb" resume --run-dir "$P" --steps 6 --quiet; then
      echo "FAIL: $name: resume succeeded without a committed checkpoint"; return 1
    fi
    grep -q "no committed checkpoint" "$T/$name.check.rank0.log" || { show "$name.check"; echo "FAIL: $name: wrong refusal"; return 1; }
    echo "  $name: nothing committed, resume refuses"
    return 0
  fi
  job "$name.check" "hostA:$T/ca hostB:$T/cb" resume --run-dir "$P" --steps 6 --quiet \
    || { show "$name.check"; echo "FAIL: $name: the latest committed checkpoint (of $steps) does not resume"; return 1; }
  local out; out=$("$Q" compare "$T/ref" "$T/ca") || { echo "$out" | tail -3; echo "FAIL: $name: resumed run differs"; return 1; }
  echo "  $name: committed $steps, resumed bit-exact"
}

save_phases=(gate begin chunk sync synced rows row commit committed)
fail=0 killed=0
for t in $(seq 0 $((trials - 1))); do
  k=$((t % 11))
  if [ $k -lt 9 ]; then
    ph=${save_phases[$k]}
    case $ph in begin|row|commit|committed) rank=0 ;; *) rank=$((RANDOM % 2)) ;; esac
    case $ph in chunk) count=$((1 + RANDOM % 24)) ;; row) count=$((1 + RANDOM % 48)) ;; *) count=$((1 + RANDOM % 2)) ;; esac
    rm -rf "$T/a" "$T/b"
    if QE_CKPT_KILL=$ph:$rank:$count job "t$t" "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P"; then
      echo "  trial $t: save $ph:$rank:$count never fired"
    else
      killed=$((killed + 1))
    fi
    check "t$t-$ph" "$T/a" "$T/b" || { fail=1; show "t$t"; }
  else
    ph=$([ $k -eq 9 ] && echo read || echo serve)
    if [ "$ph" = serve ]; then rank=$((2 + RANDOM % 2)); else rank=$((RANDOM % 4)); fi
    count=$((1 + RANDOM % 6))
    rm -rf "$T/a" "$T/b"; cp -a "$T/ga" "$T/a"; cp -a "$T/gb" "$T/b"
    before=$(committed "$T/a")
    if QE_CKPT_KILL=$ph:$rank:$count job "t$t" "hostA:$T/a hostA:$T/a hostB:$T/b hostB:$T/b" \
        resume --run-dir "$P" --from 3 --steps 6 --pp 4 --quiet; then
      echo "  trial $t: restore $ph:$rank:$count never fired"
    else
      killed=$((killed + 1))
    fi
    after=$(committed "$T/a")
    [ "$before" = "$after" ] || { echo "FAIL: trial $t: a killed restore changed the committed checkpoints ($before -> $after)"; fail=1; }
    rm -rf "$T/ca" "$T/cb"; cp -a "$T/a" "$T/ca"; cp -a "$T/b" "$T/cb"
    if job "t$t.again" "hostA:$T/ca hostA:$T/ca hostB:$T/cb hostB:$T/cb" resume --run-dir "$P" --from 3 --steps 6 --pp 4 --quiet \
       && "$Q" compare "$T/ref" "$T/ca" --steps 1:6 >/dev/null; then
      echo "  t$t-$ph:$rank:$count: restore killed, nothing changed, resumed bit-exact afterwards"
    else
      show "t$t.again"; echo "FAIL: trial $t: resume after a killed restore"; fail=1
    fi
  fi
done
echo "trials: $trials, killed: $killed"
[ $killed -ge $((trials * 3 / 4)) ] || { echo "FAIL: only $killed of $trials trials were killed"; fail=1; }
[ $fail -eq 0 ] || exit 1
echo "ok: $trials two-host crash trials, every committed checkpoint resumed bit-exact"
