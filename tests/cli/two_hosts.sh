#!/usr/bin/env bash
# Two hosts with no shared filesystem, simulated on one machine: each host is a mount (and
# UTS) namespace that binds its own folder at the same path, so `--run-dir $P` is a different
# disk on each, as `--run-dir /scratch/run` is on a real cluster.  Ranks get the same command
# line and the torchrun variables.  Checked:
#  - train with checkpoints: the catalog and rank 0's store only on host A, rank 1's store
#    only on host B; list and inspect on host A;
#  - resume in fresh processes under the same mapping and under --pp 4 (rank 1 now on host A:
#    its stages come over the comm from host B), bit-exact against an uninterrupted run, and
#    under --dp 2, bit-exact against the same resume on one host (compare);
#  - --pp 1 on host A alone, and a host that lost its store: refused, naming the missing
#    tensors and the rank and host that held them, with nothing loaded or changed;
#  - verify of every store once the stores are on one host.
# unshare needs root (CI runs as root); if it is refused the test fails rather than skipping.
set -u
Q=${1:?usage: two_hosts.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
P="$T/mnt"          # the path every host calls its run directory
mkdir -p "$P"
trap 'rm -rf "$T"' EXIT
C="--preset tiny --micro 4 --amax-history 4 --quiet"
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=two-hosts-test-secret

. "$(dirname "$0")/lib/hosts.sh"
if ! hosts_usable; then
  echo "FAIL: unshare -m is refused here (needs root): the two-host simulation cannot run"; exit 1
fi

# The uninterrupted reference, on one host.
"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || { echo "FAIL: reference run"; exit 1; }

# 1. Train on two hosts, checkpoints every 3 steps.
job train "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P" \
  || { show train; echo "FAIL: two-host training"; exit 1; }
[ -f "$T/a/catalog.db" ] && [ ! -e "$T/b/catalog.db" ] || { ls -R "$T/a" "$T/b"; echo "FAIL: the catalog must be on host A only"; exit 1; }
[ -f "$T/a/stores/rank-0/data.mdb" ] && [ -f "$T/b/stores/rank-1/data.mdb" ] && [ ! -e "$T/a/stores/rank-1" ] \
  && [ ! -e "$T/b/stores/rank-0" ] || { ls -R "$T/a" "$T/b"; echo "FAIL: each rank's store must be on its own host"; exit 1; }
grep -q "host=hostB" "$T/b/stores/rank-1/identity" || { cat "$T/b/stores/rank-1/identity"; echo "FAIL: the store does not name its host"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a") || { echo "$out"; echo "FAIL: two-host run differs from the one-host run"; exit 1; }
echo "trained on two hosts: $(tail -1 <<<"$out")"
"$Q" list --run-dir "$T/a" | grep -q committed || { "$Q" list --run-dir "$T/a"; echo "FAIL: list"; exit 1; }
"$Q" inspect --run-dir "$T/a" --json >"$T/inspect.json" || { echo "FAIL: inspect"; exit 1; }
python3 - "$T/inspect.json" <<'EOF' || { echo "FAIL: inspect does not show both ranks' tensors"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
stages = {t["stage"] for t in d["tensors"]}
sys.exit(0 if {0, 1, 2, 3} <= stages else 1)
EOF

snapshot() { rm -rf "$T/$2" "$T/$3"; cp -a "$T/a" "$T/$2"; cp -a "$T/b" "$T/$3"; }

# 2. Resume under the same mapping, under --pp 4 and under --dp 2, fresh processes on both hosts.
snapshot x a1 b1
job same "hostA:$T/a1 hostB:$T/b1" resume --run-dir "$P" --from 3 --steps 6 --quiet \
  || { show same; echo "FAIL: resume, same mapping"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a1") || { echo "$out"; echo "FAIL: resumed (same mapping) differs"; exit 1; }
echo "resume pp 2 -> 2: $(tail -1 <<<"$out")"

snapshot x a2 b2
job pp4 "hostA:$T/a2 hostA:$T/a2 hostB:$T/b2 hostB:$T/b2" resume --run-dir "$P" --from 3 --steps 6 --pp 4 --quiet \
  || { show pp4; echo "FAIL: resume --pp 4 on two hosts"; exit 1; }
cat "$T"/pp4.rank[23].log | grep -q "on hostB served [1-9][0-9]* tensors" \
  || { show pp4; echo "FAIL: host B's ranks did not send rank 1 its stages"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a2" --steps 1:6) || { echo "$out"; echo "FAIL: resumed under --pp 4 differs"; exit 1; }
echo "resume pp 2 -> 4: $(tail -1 <<<"$out")"

snapshot x a3 b3
job dp2 "hostA:$T/a3 hostA:$T/a3 hostB:$T/b3 hostB:$T/b3" resume --run-dir "$P" --from 3 --steps 6 --dp 2 --quiet \
  || { show dp2; echo "FAIL: resume --dp 2 on two hosts"; exit 1; }
# A data-parallel continuation has no uninterrupted twin: its reference is the same resume on one host.
"$Q" train $C --pp 2 --steps 3 --ckpt-every 3 --run-dir "$T/refdp" && "$Q" resume --run-dir "$T/refdp" --steps 6 --dp 2 --quiet \
  || { echo "FAIL: one-host --dp 2 reference"; exit 1; }
out=$("$Q" compare "$T/refdp" "$T/a3") || { echo "$out"; echo "FAIL: resumed under --dp 2 on two hosts differs from one host"; exit 1; }
echo "resume pp 2 -> pp 2 x dp 2: $(tail -1 <<<"$out")"

# 3. Host A alone (--pp 1) cannot reach host B's store: refused, named, nothing changed.
snapshot x a4 b4
before=$(cd "$T/a4" && find . -type f ! -name lock ! -name lock.mdb -print0 | sort -z | xargs -0 sha256sum | sha256sum)
if job pp1 "hostA:$T/a4" resume --run-dir "$P" --from 3 --steps 6 --pp 1 --quiet; then
  echo "FAIL: --pp 1 on host A alone resumed without host B's store"; exit 1
fi
grep -q "rank 1 on host 'hostB'" "$T/pp1.rank0.log" && grep -q "nothing loaded" "$T/pp1.rank0.log" \
  || { show pp1; echo "FAIL: the refusal must name the rank and host that held the missing chunks"; exit 1; }
after=$(cd "$T/a4" && find . -type f ! -name lock ! -name lock.mdb -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$before" = "$after" ] || { echo "FAIL: a refused restore changed the run directory"; exit 1; }
echo "pp 1 on host A alone: refused ($(grep -o "[0-9]* tensors are unreachable" "$T/pp1.rank0.log" | head -1))"

# 4. Host B loses its store after the commit: refused the same way, on both ranks.
snapshot x a5 b5
rm -rf "$T/b5/stores"
if job lost "hostA:$T/a5 hostB:$T/b5" resume --run-dir "$P" --from 3 --steps 6 --quiet; then
  echo "FAIL: resumed although host B lost its store"; exit 1
fi
grep -q "rank 1 on host 'hostB'" "$T/lost.rank0.log" || { show lost; echo "FAIL: the lost store is not named"; exit 1; }
echo "host B lost its store: refused, naming it"

# 5. verify checks every store it can see; with host B's store beside host A's all verify.
rm -rf "$T/v"; cp -a "$T/a" "$T/v"; cp -a "$T/b/stores/rank-1" "$T/v/stores/rank-1"
"$Q" verify --run-dir "$T/v" >"$T/verify.log" 2>&1 || { cat "$T/verify.log"; echo "FAIL: verify"; exit 1; }
if "$Q" verify --run-dir "$T/a" >"$T/verify-a.log" 2>&1; then
  cat "$T/verify-a.log"; echo "FAIL: verify on host A alone must say host B's chunks were not checked"; exit 1
fi
grep -q "not on this host" "$T/verify-a.log" || { cat "$T/verify-a.log"; echo "FAIL: verify does not say where"; exit 1; }
echo "ok: two hosts, no shared filesystem: train, list, inspect, resume (same, pp 4, dp 2) bit-exact, refusals named, verify"
