#!/usr/bin/env bash
# Crash consistency of replicated checkpoints (--ckpt-replicas 1) on two simulated hosts
# (lib/hosts.sh).  Every trial kills a rank with the QE_CKPT_KILL hook at a phase of a save:
# the replication phases - replsend (a source sent a tensor to its replica), replrecv (the
# replica received one), replwrite (it put its chunks), replsync (before it flushed the
# copies), replsynced (after), replack (the source heard the acknowledgement), memgc (a
# target that learned of a commit, before its memory tier dropped the replaced copy) - and
# the plain save phases around them (gate, chunk, synced, rows, row, commit, committed).
# Every trial also keeps the memory tier (--ckpt-memory: each host's own tmpfs at one path),
# and half use --ckpt-async, where the replication runs in the background threads.  After
# each trial:
#  - with no committed checkpoint, resume refuses with "no committed checkpoint";
#  - else every committed checkpoint lists 2 copies on 2 hosts, and on each host verify finds
#    every copy the catalog places there - on disk and in memory - whole (the only faults it
#    may report are copies that live on the other host);
#  - and the latest committed checkpoint resumes bit-exact after one host is lost (its
#    folder and its memory, or host A's stores with the catalog and memory kept,
#    alternately), from the replica alone.
# QE_REPL_CRASH_TRIALS (default 28: every phase twice, once sync and once async; about
# 7 minutes on two busy cores) asks for more trials; QE_REPL_CRASH_SEED picks them.
set -u
Q=${1:?usage: two_hosts_replicas_crash.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/lib/hosts.sh"
hosts_usable || { echo "FAIL: unshare -m is refused here (needs root): the two-host simulation cannot run"; exit 1; }
# The hosts' memory is a tmpfs in a mount namespace of this test's own: gone when the test is.
hosts_own_namespace "$0" "$@"
T=$(mktemp -d)
P="$T/mnt"
mkdir -p "$P" "$T/memory" "$T/tmpfs"
trap 'umount "$T/tmpfs" 2>/dev/null; rm -rf "$T"' EXIT
hosts_memory "$T/tmpfs" || { echo "FAIL: cannot mount a tmpfs for the hosts' memory"; exit 1; }
export HOST_MEM_PATH="$T/memory" HOST_MEM_ROOT="$T/tmpfs/mem"
MEM="--ckpt-memory $T/memory"
C="--preset tiny --micro 4 --amax-history 4 --quiet"
export QE_COMM_TIMEOUT_MS=30000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=replicas-crash-secret QE_LAUNCH_GRACE_MS=500
trials=${QE_REPL_CRASH_TRIALS:-28}
RANDOM=${QE_REPL_CRASH_SEED:-2107}
echo "replica crash trials: $trials (QE_REPL_CRASH_TRIALS), seed ${QE_REPL_CRASH_SEED:-2107} (QE_REPL_CRASH_SEED)"

"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || { echo "FAIL: reference run"; exit 1; }

# committed DIR: the committed steps, or "copies?" when one of them lists fewer than 2 copies on 2
# hosts, or when the memory tier holds another than the latest one.
committed() { "$Q" list --run-dir "$1" --json 2>/dev/null | python3 -c "
import json,sys
c=[k for k in json.load(sys.stdin)['checkpoints'] if k['status']=='committed']
ok=all(k['copies']==2 and k['hosts']==2 for k in c)
ok=ok and (not c or (c[-1]['memory_copies']==1 and all(k['memory_copies']==0 for k in c[:-1])))
print(' '.join(str(k['step']) for k in c) + ('' if ok else ' copies?'))"; }

# whole_on NAME HOST DIR: verify on one host (the catalog beside that host's stores and its
# memory) finds nothing wrong with the copies that are there.
whole_on() {
  local name=$1 host=$2 dir=$3
  QE_CKPT_MEMORY_DIR="$HOST_MEM_ROOT/$host" "$Q" verify --run-dir "$dir" --json >"$T/$name.verify.json" 2>/dev/null
  python3 - "$T/$name.verify.json" "$host" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [f for f in d["faults"] if not (f["kind"] == "missing" and "not on this host" in f["why"])]
for f in bad[:3]:
    print("  %s: step %d stage %d '%s': %s: %s" % (sys.argv[2], f["step"], f["stage"], f["tensor"], f["kind"], f["why"]))
sys.exit(1 if bad or d["checkpoints"] == 0 else 0)
EOF
}

# check NAME A B TRIAL: the guarantees above for the run left on (A, B).
check() {
  local name=$1 a=$2 b=$3 t=$4 steps
  if [ ! -f "$a/catalog.db" ]; then echo "  $name: killed before the catalog existed"; return 0; fi
  steps=$(committed "$a") || { echo "FAIL: $name: the catalog on host A does not list"; return 1; }
  rm -rf "$T/ca" "$T/cb"; cp -a "$a" "$T/ca"; cp -a "$b" "$T/cb"
  if [ -z "$steps" ]; then
    if job "$name.check" "hostA:$T/ca hostB:$T/cb" resume --run-dir "$P" --steps 6 --ckpt-replicas 1 $MEM --quiet; then
      echo "FAIL: $name: resume succeeded without a committed checkpoint"; return 1
    fi
    grep -q "no committed checkpoint" "$T/$name.check.rank0.log" || { show "$name.check"; echo "FAIL: $name: wrong refusal"; return 1; }
    echo "  $name: nothing committed, resume refuses"
    return 0
  fi
  case $steps in *copies*) "$Q" list --run-dir "$a"; echo "FAIL: $name: a committed checkpoint does not list 2 copies on 2 hosts, or memory holds another than the latest"; return 1 ;; esac
  whole_on "$name.A" hostA "$T/ca" || { echo "FAIL: $name: a copy on host A is not whole"; return 1; }
  rm -rf "$T/vb"; mkdir -p "$T/vb"; cp -a "$T/cb/stores" "$T/vb/stores" 2>/dev/null; cp "$T/ca/catalog.db" "$T/vb/"
  whole_on "$name.B" hostB "$T/vb" || { echo "FAIL: $name: a copy on host B is not whole"; return 1; }
  local lost
  if [ $((t % 2)) -eq 0 ]; then
    lost="host B"; rm -rf "$T/cb" "$HOST_MEM_ROOT/hostB"; mkdir -p "$T/cb"
  else
    lost="host A's stores"; rm -rf "$T/ca/stores"
  fi
  job "$name.check" "hostA:$T/ca hostB:$T/cb" resume --run-dir "$P" --steps 6 --ckpt-replicas 1 $MEM --quiet \
    || { show "$name.check"; echo "FAIL: $name: the latest committed checkpoint (of $steps) does not resume without $lost"; return 1; }
  local out; out=$("$Q" compare "$T/ref" "$T/ca") || { echo "$out" | tail -3; echo "FAIL: $name: resumed run differs"; return 1; }
  echo "  $name: committed $steps, whole on both hosts, resumed bit-exact without $lost"
}

phases=(replsend replrecv replwrite replsync replsynced replack memgc gate chunk synced rows row commit committed)
np=${#phases[@]}
fail=0 killed=0
for t in $(seq 0 $((trials - 1))); do
  ph=${phases[$((t % np))]}
  case $ph in row|commit|committed) rank=0 ;; *) rank=$((RANDOM % 2)) ;; esac
  # a save: rank 0 stores 14 tensors and keeps 10 of rank 1, rank 1 stores 10 and keeps 14
  case $ph in replsend|replrecv|replwrite|chunk) count=$((1 + RANDOM % 20)) ;; row) count=$((1 + RANDOM % 48)) ;; *) count=$((1 + RANDOM % 2)) ;; esac
  mode=""; [ $(((t / np) % 2)) -eq 1 ] && mode="--ckpt-async"
  rm -rf "$T/a" "$T/b" "$HOST_MEM_ROOT"
  if QE_CKPT_KILL=$ph:$rank:$count job "t$t" "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 6 --ckpt-every 3 \
      --ckpt-replicas 1 $MEM $mode --run-dir "$P"; then
    echo "  trial $t: $ph:$rank:$count ${mode:-sync} never fired"
  else
    killed=$((killed + 1))
  fi
  check "t$t-$ph:$rank:$count${mode:+-async}" "$T/a" "$T/b" "$t" || { fail=1; show "t$t"; }
done
echo "trials: $trials, killed: $killed"
[ $killed -ge $((trials * 3 / 4)) ] || { echo "FAIL: only $killed of $trials trials were killed"; fail=1; }
[ $fail -eq 0 ] || exit 1
echo "ok: $trials replica crash trials: every committed checkpoint whole on both hosts and resumed bit-exact from one"
