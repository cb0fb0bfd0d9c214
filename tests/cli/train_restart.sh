#!/usr/bin/env bash
# A run with no committed checkpoint is no dead end (issue 15, item 4):
#  - a typo in --data, --steps 0, --ckpt-every past --steps and a wrong --nproc are refused
#    (exit 2, naming the flag or file) before anything exists on disk;
#  - a run killed before its first checkpoint commits (QE_CKPT_KILL) is started again by the
#    same train: it says so, keeps the run id, drops the aborted attempt, every rank empties its
#    own store (verify: no orphan chunks), the new configuration is the run's, and resume works;
#  - a run with a committed checkpoint is still refused ("continue it with resume"), unchanged;
#  - a second writer is still refused while one holds RUN/lock;
#  - on two simulated hosts (lib/hosts.sh, each rank's store on its own disk) each rank clears
#    its own store: host B's rank, whose store rank 0 never sees, says so in its log.
set -u
Q=${1:?usage: train_restart.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
P="$T/mnt"
mkdir -p "$P"
trap 'kill $bg 2>/dev/null; rm -rf "$T"' EXIT
bg=
C="--preset tiny --micro 4 --amax-history 4 --quiet"
fail() { echo "FAIL: $*"; exit 1; }

# refused (exit 2, stderr matching WANT) with nothing created: refused WANT DIR ARGS...
refused() {
  local want=$1 dir=$2; shift 2
  out=$("$Q" train $C "$@" --run-dir "$dir" 2>&1); st=$?
  [ $st -eq 2 ] && grep -q -- "$want" <<<"$out" || { echo "$out"; fail "train $* (exit $st) was not refused naming '$want'"; }
  [ ! -e "$dir" ] || { ls -la "$dir"; fail "train $* was refused but left '$dir' behind"; }
}
refused "/no/such/file.jsonl" "$T/r1" --steps 2 --ckpt-every 2 --data /no/such/file.jsonl
refused "steps 0" "$T/r2" --steps 0
refused "ckpt-every 5 is larger than --steps 2" "$T/r3" --steps 2 --ckpt-every 5
refused "nproc 3" "$T/r4" --pp 2 --nproc 3 --steps 2 --ckpt-every 2

# Killed before the first checkpoint commits: rank 1 dies once its store is synced.
QE_CKPT_KILL=synced:1:1 "$Q" train $C --pp 2 --steps 4 --ckpt-every 2 --run-dir "$T/r" >"$T/crash.log" 2>&1 \
  && fail "the killed run succeeded"
id0=$("$Q" list --run-dir "$T/r" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['run_id'])")
orph=$("$Q" verify --run-dir "$T/r" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['orphans'])")
[ "$orph" -gt 0 ] || fail "the killed run left no chunks: the test proves nothing"
# Another writer holds the lock: the restart must wait its turn (refused at once, naming it).
python3 -c "
import fcntl,sys,time
f=open(sys.argv[1],'a+'); fcntl.flock(f,fcntl.LOCK_EX); f.truncate(0); f.write('pid 4242 on test: the lock holder'); f.flush()
time.sleep(30)" "$T/r/lock" &
bg=$!
for _ in $(seq 50); do grep -q "pid 4242" "$T/r/lock" 2>/dev/null && break; sleep 0.1; done
out=$(timeout 20 "$Q" train $C --pp 2 --steps 4 --ckpt-every 2 --run-dir "$T/r" 2>&1); st=$?
[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q "pid 4242" <<<"$out" || { echo "$out"; fail "a restart while the lock is held was not refused (exit $st)"; }
kill $bg; wait $bg 2>/dev/null; bg=
# Started again, with another seed (so no chunk of the old attempt is reused by chance).
out=$("$Q" train $C --pp 2 --steps 4 --ckpt-every 2 --seed 7 --run-dir "$T/r" 2>&1) || { echo "$out"; fail "train could not start the run again"; }
grep -q "never committed a checkpoint: starting it again" <<<"$out" || { echo "$out"; fail "the restart did not say so"; }
[ "$(grep -c "deleted .* chunks .* from this rank's store" <<<"$out")" -eq 2 ] || { echo "$out"; fail "not every rank cleared its store"; }
"$Q" list --run-dir "$T/r" --json | python3 -c "
import json,sys
d=json.load(sys.stdin)
st=[(c['step'],c['status']) for c in d['checkpoints']]
assert d['run_id']=='$id0', 'run id changed: %s' % d['run_id']
assert st==[(2,'committed'),(4,'committed')], st" || fail "the restarted run's checkpoints are not exactly the new ones"
"$Q" verify --run-dir "$T/r" --json | python3 -c "
import json,sys
d=json.load(sys.stdin); assert d['ok'] and d['orphans']==0, (d['ok'], d['orphans'])" || fail "orphan chunks of the old attempt are left"
"$Q" inspect --run-dir "$T/r" --json | python3 -c "
import json,sys
d=json.load(sys.stdin); assert d['config']['seed']==7, d['config']" || fail "the run's configuration is not the new one"
"$Q" resume --run-dir "$T/r" --steps 6 --quiet || fail "resume of the restarted run"

# Committed checkpoints: refused as before, nothing dropped.
before=$("$Q" list --run-dir "$T/r" --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))")
out=$("$Q" train $C --pp 2 --steps 4 --ckpt-every 2 --run-dir "$T/r" 2>&1) && fail "train over committed checkpoints succeeded"
grep -q "continue it with 'qeffect resume" <<<"$out" || { echo "$out"; fail "wrong refusal over committed checkpoints"; }
after=$("$Q" list --run-dir "$T/r" --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)['checkpoints']))")
[ "$before" = "$after" ] || fail "a refused train changed the run ($before -> $after checkpoints)"

# Two hosts: rank 1's store is on host B's disk, which rank 0 never sees.
. "$(dirname "$0")/lib/hosts.sh"
if ! hosts_usable; then
  echo "ok (two-host part skipped: unshare -m is refused here)"
  exit 0
fi
export QE_COMM_TIMEOUT_MS=30000 QE_JOB_SECRET=train-restart-secret QE_LAUNCH_GRACE_MS=500
QE_CKPT_KILL=synced:1:1 job crash2 "hostA:$T/ha hostB:$T/hb" train $C --pp 2 --steps 4 --ckpt-every 2 --run-dir "$P" \
  && { show crash2; fail "the killed two-host run succeeded"; }
[ -f "$T/hb/stores/rank-1/data.mdb" ] && [ ! -e "$T/hb/catalog.db" ] || fail "host B's disk does not hold only rank 1's store"
job again2 "hostA:$T/ha hostB:$T/hb" train $C --pp 2 --steps 4 --ckpt-every 2 --seed 7 --run-dir "$P" \
  || { show again2; fail "the two-host run could not start again"; }
grep -q "starting it again" "$T/again2.rank0.log" || { show again2; fail "rank 0 did not say the run starts again"; }
grep -q "deleted .* chunks .* from this rank's store" "$T/again2.rank1.log" || { show again2; fail "rank 1 on host B did not clear its own store"; }
job resume2 "hostA:$T/ha hostB:$T/hb" resume --run-dir "$P" --steps 6 --quiet || { show resume2; fail "two-host resume after the restart"; }
echo "ok: bad flags and data refused before anything is written; a run that never committed starts again (lock taken, rows and every rank's chunks cleared, also across hosts); committed runs still refused"
