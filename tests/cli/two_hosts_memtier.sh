#!/usr/bin/env bash
# The memory tier (--ckpt-memory DIR with --ckpt-replicas 1) on two simulated hosts
# (lib/hosts.sh), each with its own memory: a tmpfs this test mounts, one folder per host bound
# at the same path M, which outlives the ranks as /dev/shm outlives a host's processes.
# Checked:
#  - refusals: --ckpt-memory without --ckpt-replicas; a folder on disk (exit 2, nothing
#    written); a host whose M is on its disk fails every rank before any write, naming it;
#  - training records a memory copy of the latest checkpoint only (list/inspect), each host's
#    memory store holds exactly the chunks of its sources' latest checkpoint (async too: the
#    ranks' agreement at the end of the run confirms the last write), and the run is identical
#    to one without tiers;
#  - fresh processes on live hosts restore from memory even with their disks intact (0 bytes
#    read from disk);
#  - both hosts lose their disk stores (the catalog kept) and fresh processes resume
#    bit-exact from memory alone: every rank reports 0 bytes read from disk; an older
#    checkpoint, no longer in memory, is refused naming what is missing, nothing loaded;
#  - the same with --ckpt-async;
#  - a rank killed after a commit but before memory dropped what it replaced (kill phase
#    memgc), and a target killed while it kept a copy (replsync): the latest committed
#    checkpoint still resumes from memory alone.
set -u
Q=${1:?usage: two_hosts_memtier.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
. "$(dirname "$0")/lib/hosts.sh"
hosts_usable || { echo "FAIL: unshare -m is refused here (needs root): the host simulation cannot run"; exit 1; }
# The hosts' memory is a tmpfs in a mount namespace of this test's own: gone when the test is.
hosts_own_namespace "$0" "$@"
T=$(mktemp -d)
P="$T/mnt"
M="$T/memory"
mkdir -p "$P" "$M" "$T/tmpfs"
trap 'umount "$T/tmpfs" 2>/dev/null; rm -rf "$T"' EXIT
hosts_memory "$T/tmpfs" || { echo "FAIL: cannot mount a tmpfs for the hosts' memory"; exit 1; }
C="--preset tiny --micro 4 --amax-history 4 --quiet"
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=memtier-test-secret QE_LAUNCH_GRACE_MS=500
export HOST_MEM_PATH=$M
fail() { echo "FAIL: $*"; exit 1; }

"$Q" train $C --pp 2 --steps 8 --run-dir "$T/ref" || fail "reference run"

# 1. Refusals.
out=$("$Q" train $C --pp 2 --steps 2 --ckpt-every 2 --ckpt-memory "$T/tmpfs/x" --run-dir "$T/r1" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--ckpt-memory keeps replica copies in memory: it needs --ckpt-replicas" <<<"$out" \
  || { echo "$out"; fail "--ckpt-memory without --ckpt-replicas (rc $rc)"; }
out=$("$Q" train $C --pp 2 --steps 2 --ckpt-every 2 --ckpt-replicas 1 --ckpt-memory "$T/ondisk" --run-dir "$T/r2" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "the memory tier's folder '$T/ondisk' is on .*not in memory" <<<"$out" \
  || { echo "$out"; fail "a memory folder on disk (rc $rc)"; }
[ ! -e "$T/r1" ] && [ ! -e "$T/r2" ] || fail "a refused command wrote a run directory"
HOST_MEM_ROOT="$T/tmpfs/refuse" HOST_MEM_NONE=hostB job refuse "hostA:$T/ra hostB:$T/rb" \
  train $C --pp 2 --steps 2 --ckpt-every 2 --ckpt-replicas 1 --ckpt-memory "$M" --run-dir "$P" \
  && fail "a host whose memory folder is on its disk was accepted"
grep -q "memory tier: rank 1 on 'hostB'.*not in memory" "$T/refuse.rank0.log" \
  || { show refuse; fail "the refusal must name rank 1 on hostB"; }
[ ! -e "$T/ra/stores/rank-0/data.mdb" ] || fail "the refused memory tier let a checkpoint be written"
echo "refused: no replicas, a folder on disk, and hostB's folder on its disk (named by rank 0)"

# memory_chunks ROOT SOURCE_RANK RUN GENERATIONS: the chunks held by the memory store under ROOT
# (the one host's), and the distinct chunks of SOURCE_RANK's tensors in the latest GENERATIONS
# committed checkpoints.
memory_chunks() {
  local root=$1 src=$2 run=$3 gens=$4
  rm -rf "$T/catonly"; mkdir -p "$T/catonly"; cp "$run/catalog.db" "$T/catonly/"
  "$Q" verify --run-dir "$T/catonly" --ckpt-memory "$root" --json >"$T/memverify.json" 2>/dev/null
  python3 - "$T/memverify.json" "$run/catalog.db" "$src" "$gens" <<'EOF'
import json, sqlite3, sys
held = json.load(open(sys.argv[1]))["store_chunks"]
db = sqlite3.connect(sys.argv[2])
cks = [r[0] for r in db.execute("SELECT id FROM checkpoints WHERE status = 'committed' ORDER BY id DESC LIMIT ?",
                                (int(sys.argv[4]),))]
want = db.execute("SELECT count(DISTINCT c.hash) FROM tensor_chunks c JOIN tensors t ON t.id = c.tensor_id"
                  " JOIN stores s ON s.store_id = t.store_id WHERE t.checkpoint_id IN (%s) AND s.rank = ?"
                  % ",".join("?" * len(cks)), (*cks, int(sys.argv[3]))).fetchone()[0]
print(held, want)
EOF
}

# from_memory NAME: every rank of job NAME read 0 bytes from disk and some from memory.
from_memory() {
  python3 - "$T/$1".rank*.log <<'EOF'
import json, sys
mem = 0
for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f) if l.startswith('{"rank"')]
    if not rows or "restore" not in rows[-1]:
        print("no restore report in", f); sys.exit(1)
    r = rows[-1]["restore"]
    if r["read_disk_bytes"] != 0:
        print(f, "read", r["read_disk_bytes"], "bytes from disk"); sys.exit(1)
    mem += r["read_memory_bytes"]
print(mem)
sys.exit(0 if mem > 0 else 1)
EOF
}

# scenario NAME GENERATIONS EXTRA...: train on two hosts with the memory tier, lose both disks,
# resume from memory.  GENERATIONS: the checkpoints memory holds at the end of training.
scenario() {
  local name=$1 gens=$2; shift 2
  export HOST_MEM_ROOT="$T/tmpfs/$name"
  job "$name" "hostA:$T/$name-a hostB:$T/$name-b" train $C --pp 2 --steps 6 --ckpt-every 2 --ckpt-replicas 1 \
    --ckpt-memory "$M" --run-dir "$P" "$@" || { show "$name"; fail "$name: training with the memory tier"; }
  out=$("$Q" compare "$T/ref" "$T/$name-a" 2>&1) || { echo "$out"; fail "$name: training with the memory tier differs"; }
  "$Q" list --run-dir "$T/$name-a" --json >"$T/$name.list.json" || fail "$name: list"
  python3 - "$T/$name.list.json" <<'EOF' || { cat "$T/$name.list.json"; fail "$name: list must show a memory copy of the latest checkpoint only"; }
import json, sys
c = [k for k in json.load(open(sys.argv[1]))["checkpoints"] if k["status"] == "committed"]
ok = len(c) == 3 and all(k["copies"] == 2 and k["hosts"] == 2 for k in c)
# R=1: every tensor of the latest checkpoint also in one host's memory, the other host's
ok = ok and c[-1]["memory_copies"] == 1 and c[-1]["memory_hosts"] == 1 and all(k["memory_copies"] == 0 for k in c[:-1])
sys.exit(0 if ok else 1)
EOF
  "$Q" inspect --run-dir "$T/$name-a" | grep -q "memory tier: every tensor also in the memory of at least 1 host " \
    || fail "$name: inspect must show the memory copy"
  "$Q" list --run-dir "$T/$name-a" | grep -q "2 on 2 hosts +mem" || fail "$name: list text"
  # each host's memory holds its source's latest checkpoint(s), nothing older (hostA backs rank 1, hostB rank 0)
  read -r held want <<<"$(memory_chunks "$HOST_MEM_ROOT/hostA" 1 "$T/$name-a" "$gens")"
  [ -n "$want" ] && [ "$want" -gt 0 ] && [ "$held" = "$want" ] \
    || fail "$name: hostA's memory holds $held chunks, rank 1's latest $gens checkpoint(s) have $want"
  read -r held want <<<"$(memory_chunks "$HOST_MEM_ROOT/hostB" 0 "$T/$name-a" "$gens")"
  [ -n "$want" ] && [ "$want" -gt 0 ] && [ "$held" = "$want" ] \
    || fail "$name: hostB's memory holds $held chunks, rank 0's latest $gens checkpoint(s) have $want"
  # Fresh processes on live hosts, disks intact: the restore still reads memory, not a disk
  # (--steps 6: restore only, nothing new is written).
  job "$name-pref" "hostA:$T/$name-a hostB:$T/$name-b" resume --run-dir "$P" --from 6 --steps 6 --ckpt-replicas 1 \
    --ckpt-memory "$M" --json || { show "$name-pref"; fail "$name: restore with disks and memory"; }
  mem=$(from_memory "$name-pref") || { echo "$mem"; fail "$name: with disks intact the restore read a disk, not memory"; }
  # Both disks lose their stores; the catalog stays.  An older checkpoint is no longer in memory.
  rm -rf "$T/$name-a/stores" "$T/$name-b/stores"
  local before; before=$(cd "$T/$name-a" && find . -path ./stores -prune -o -type f ! -name lock -print0 | sort -z | xargs -0 sha256sum | sha256sum)
  job "$name-old" "hostA:$T/$name-a hostB:$T/$name-b" resume --run-dir "$P" --from 4 --steps 8 --ckpt-replicas 1 \
    --ckpt-memory "$M" --quiet && fail "$name: resumed step 4, which no store holds any more"
  grep -q "nothing loaded" "$T/$name-old.rank0.log" || { show "$name-old"; fail "$name: the refusal of step 4"; }
  local after; after=$(cd "$T/$name-a" && find . -path ./stores -prune -o -type f ! -name lock -print0 | sort -z | xargs -0 sha256sum | sha256sum)
  [ "$before" = "$after" ] || fail "$name: the refused restore changed host A's run directory"
  job "$name-mem" "hostA:$T/$name-a hostB:$T/$name-b" resume --run-dir "$P" --from 6 --steps 8 --ckpt-replicas 1 \
    --ckpt-memory "$M" --json || { show "$name-mem"; fail "$name: resume from memory"; }
  mem=$(from_memory "$name-mem") || { echo "$mem"; fail "$name: the resume read a disk"; }
  out=$("$Q" compare "$T/ref" "$T/$name-a" 2>&1) || { echo "$out"; fail "$name: resumed from memory differs"; }
  echo "$name: memory holds only the latest checkpoint; disks lost: step 4 refused, step 6 resumed from memory ($mem bytes, 0 from disk): $(tail -1 <<<"$out")"
}

# 2-3. Synchronous and asynchronous checkpoints.
scenario sync 1
scenario async 1 --ckpt-async

# 4. Kills: rank 1 (hostB, the target of rank 0) after the commit of step 2, before its memory
#    dropped anything (memgc #1); and rank 0 (hostA, the target of rank 1) while it keeps step
#    4's copies, before flushing them (replsync #2).  Either way the latest committed checkpoint
#    resumes from memory alone.
kill_trial() {
  local name=$1 kill=$2 want=$3
  export HOST_MEM_ROOT="$T/tmpfs/$name"
  QE_CKPT_KILL=$kill job "$name" "hostA:$T/$name-a hostB:$T/$name-b" train $C --pp 2 --steps 6 --ckpt-every 2 \
    --ckpt-replicas 1 --ckpt-memory "$M" --run-dir "$P" && fail "$name: QE_CKPT_KILL=$kill did not kill"
  local steps
  steps=$("$Q" list --run-dir "$T/$name-a" --json | python3 -c "
import json,sys
print(' '.join(str(k['step']) for k in json.load(sys.stdin)['checkpoints'] if k['status']=='committed'))")
  [ "${steps##* }" = "$want" ] || fail "$name: latest committed step '${steps##* }', expected $want"
  rm -rf "$T/$name-a/stores" "$T/$name-b/stores"
  job "$name-mem" "hostA:$T/$name-a hostB:$T/$name-b" resume --run-dir "$P" --from "$want" --steps 8 \
    --ckpt-replicas 1 --ckpt-memory "$M" --json || { show "$name-mem"; fail "$name: resume from memory after the kill"; }
  mem=$(from_memory "$name-mem") || { echo "$mem"; fail "$name: the resume after the kill read a disk"; }
  out=$("$Q" compare "$T/ref" "$T/$name-a" 2>&1) || { echo "$out"; fail "$name: resumed after the kill differs"; }
  echo "$name: killed at $kill, committed up to step $want, resumed from memory alone: $(tail -1 <<<"$out")"
}
kill_trial killgc memgc:1:1 2
kill_trial killkeep replsync:0:2 2
echo "ok: memory tier on two hosts: refusals, latest-only copies, disks lost and resumed from memory bit-exact (sync, async, kills)"
