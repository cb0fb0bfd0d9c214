#!/usr/bin/env bash
# Replicas (--ckpt-replicas R) on simulated hosts (lib/hosts.sh: each host a mount namespace
# with its own folder at one path).  Checked:
#  - R=1 with every rank on one host, and R=2 with two hosts, are refused before training,
#    naming the hosts;
#  - train on two hosts with R=1: every checkpoint lists 2 copies on 2 hosts, each host's
#    store holds the other rank's chunks, verify checks both copies of every tensor;
#  - host B is lost after the commit (its folder deleted): rank 1 starts on a fresh host with
#    an empty directory and the run resumes bit-exact, rank 1's stages coming from host A's
#    replica over the comm; the same when host A loses its stores (the catalog kept), and
#    with --ckpt-async;
#  - pp 4 on two hosts (two ranks each) loses host B and resumes bit-exact under pp 4;
#  - three hosts with R=2 lose two hosts at once and resume bit-exact;
#  - R=0 and no push: host B lost, resume refuses, naming what is missing, nothing loaded.
set -u
Q=${1:?usage: two_hosts_replicas.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
P="$T/mnt"
mkdir -p "$P"
trap 'rm -rf "$T"' EXIT
C="--preset tiny --micro 4 --amax-history 4 --quiet"
export QE_COMM_TIMEOUT_MS=60000 QE_CKPT_CHUNK_BYTES=65536 QE_JOB_SECRET=replicas-test-secret
. "$(dirname "$0")/lib/hosts.sh"
hosts_usable || { echo "FAIL: unshare -m is refused here (needs root): the host simulation cannot run"; exit 1; }

"$Q" train $C --pp 2 --steps 6 --run-dir "$T/ref" || { echo "FAIL: reference run"; exit 1; }

# 1. Refusals: one host, and more replicas than other hosts.
if "$Q" train $C --pp 2 --steps 6 --ckpt-every 3 --ckpt-replicas 1 --run-dir "$T/one" >"$T/one.log" 2>&1; then
  echo "FAIL: --ckpt-replicas 1 with every rank on one host was accepted"; exit 1
fi
grep -q "needs ranks on at least 2 hosts" "$T/one.log" || { cat "$T/one.log"; echo "FAIL: the one-host refusal"; exit 1; }
if job r2 "hostA:$T/r2a hostB:$T/r2b" train $C --pp 2 --steps 6 --ckpt-every 3 --ckpt-replicas 2 --run-dir "$P"; then
  echo "FAIL: --ckpt-replicas 2 on two hosts was accepted"; exit 1
fi
grep -q "needs ranks on at least 3 hosts.*'hostA': ranks 0; 'hostB': ranks 1" "$T/r2.rank0.log" \
  || { show r2; echo "FAIL: the refusal of R=2 on two hosts must name the hosts"; exit 1; }
[ ! -e "$T/r2a/stores/rank-0/data.mdb" ] || { echo "FAIL: a refused replica count wrote a checkpoint"; exit 1; }
echo "refused: R=1 on one host, R=2 on two hosts"

# 2. Two hosts, R=1.
job train "hostA:$T/a hostB:$T/b" train $C --pp 2 --steps 6 --ckpt-every 3 --ckpt-replicas 1 --run-dir "$P" \
  || { show train; echo "FAIL: two-host training with replicas"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a") || { echo "$out"; echo "FAIL: replicated training differs from the plain run"; exit 1; }
"$Q" list --run-dir "$T/a" --json >"$T/list.json" || { echo "FAIL: list"; exit 1; }
python3 - "$T/list.json" <<'EOF' || { cat "$T/list.json"; echo "FAIL: list must show 2 copies on 2 hosts"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
c = [k for k in d["checkpoints"] if k["status"] == "committed"]
sys.exit(0 if len(c) == 2 and all(k["copies"] == 2 and k["hosts"] == 2 for k in c) else 1)
EOF
"$Q" list --run-dir "$T/a" | grep -q "2 on 2 hosts" || { "$Q" list --run-dir "$T/a"; echo "FAIL: list text"; exit 1; }
"$Q" inspect --run-dir "$T/a" | grep -q "copies: every tensor in at least 2 stores on 2 hosts" \
  || { "$Q" inspect --run-dir "$T/a" | head; echo "FAIL: inspect must show the copies"; exit 1; }
# Both copies of every tensor verify once both hosts' stores are side by side; twice the tensors are checked.
rm -rf "$T/v"; cp -a "$T/a" "$T/v"; cp -a "$T/b/stores/rank-1" "$T/v/stores/rank-1"
"$Q" verify --run-dir "$T/v" --json >"$T/verify.json" 2>&1 || { cat "$T/verify.json"; echo "FAIL: verify of both copies"; exit 1; }
python3 - "$T/verify.json" <<'EOF' || { cat "$T/verify.json"; echo "FAIL: verify did not check the replicas"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
# 2 checkpoints x 24 tensors, each in 2 stores
sys.exit(0 if d["tensors"] == 96 and not d["faults"] else 1)
EOF
echo "trained on two hosts with R=1: $(tail -1 <<<"$out"), 2 copies on 2 hosts, verify checked 96 tensor copies"

snapshot() { rm -rf "$T/$1" "$T/$2"; cp -a "$3" "$T/$1"; cp -a "$4" "$T/$2"; }

# 3. Host B is lost: a new host B with an empty directory.
snapshot a1 b1 "$T/a" "$T/b"; rm -rf "$T/b1"; mkdir -p "$T/b1"
job lostB "hostA:$T/a1 hostB:$T/b1" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 1 --quiet \
  || { show lostB; echo "FAIL: resume after host B was lost"; exit 1; }
grep -q "on hostA served [1-9][0-9]* tensors" "$T/lostB.rank0.log" \
  || { show lostB; echo "FAIL: host A did not serve rank 1 its stages from the replica"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a1") || { echo "$out"; echo "FAIL: resumed after losing host B differs"; exit 1; }
"$Q" list --run-dir "$T/a1" | grep -q "2 on 2 hosts" || { echo "FAIL: the checkpoint after the loss is not replicated"; exit 1; }
echo "host B lost: resumed from host A's replica, $(tail -1 <<<"$out")"

# 4. Host A loses its stores (the catalog stays).
snapshot a2 b2 "$T/a" "$T/b"; rm -rf "$T/a2/stores"
job lostA "hostA:$T/a2 hostB:$T/b2" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 1 --quiet \
  || { show lostA; echo "FAIL: resume after host A lost its stores"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/a2") || { echo "$out"; echo "FAIL: resumed after host A lost its stores differs"; exit 1; }
echo "host A lost its stores: resumed from host B's replica, $(tail -1 <<<"$out")"

# 5. The same with asynchronous checkpoints (the replication runs in the background threads).
job async "hostA:$T/c hostB:$T/d" train $C --pp 2 --steps 6 --ckpt-every 3 --ckpt-replicas 1 --ckpt-async --run-dir "$P" \
  || { show async; echo "FAIL: async training with replicas"; exit 1; }
"$Q" list --run-dir "$T/c" | grep -c "2 on 2 hosts" | grep -q 2 || { "$Q" list --run-dir "$T/c"; echo "FAIL: async copies"; exit 1; }
rm -rf "$T/d"; mkdir -p "$T/d"
job asyncB "hostA:$T/c hostB:$T/d" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 1 --quiet \
  || { show asyncB; echo "FAIL: resume of the async run after host B was lost"; exit 1; }
out=$("$Q" compare "$T/ref" "$T/c") || { echo "$out"; echo "FAIL: async run resumed after losing host B differs"; exit 1; }
echo "async, host B lost: $(tail -1 <<<"$out")"

# 6. pp 4 on two hosts (ranks 0,1 on A; 2,3 on B): the copies spread 0->2, 1->3, 2->0, 3->1.
job pp4 "hostA:$T/e hostA:$T/e hostB:$T/f hostB:$T/f" train $C --pp 4 --steps 6 --ckpt-every 3 --ckpt-replicas 1 --run-dir "$P" \
  || { show pp4; echo "FAIL: pp 4 training with replicas"; exit 1; }
grep -q "copies its checkpoints to rank 3 ('hostB')" "$T/pp4.rank1.log" && grep -q "copies its checkpoints to rank 0 ('hostA')" "$T/pp4.rank2.log" \
  || { grep -h "replicas:" "$T"/pp4.rank*.log; echo "FAIL: the replica targets are not spread over host B's ranks"; exit 1; }
"$Q" train $C --pp 4 --steps 6 --run-dir "$T/ref4" || { echo "FAIL: pp 4 reference"; exit 1; }
rm -rf "$T/f"; mkdir -p "$T/f"
job pp4B "hostA:$T/e hostA:$T/e hostB:$T/f hostB:$T/f" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 1 --quiet \
  || { show pp4B; echo "FAIL: pp 4 resume after host B was lost"; exit 1; }
out=$("$Q" compare "$T/ref4" "$T/e") || { echo "$out"; echo "FAIL: pp 4 resumed after losing host B differs"; exit 1; }
echo "pp 4 on two hosts, host B lost: $(tail -1 <<<"$out")"

# 7. Three hosts, R=2: two of them are lost at once.
job three "hostA:$T/g hostA:$T/g hostB:$T/h hostC:$T/i" train $C --pp 4 --steps 6 --ckpt-every 3 --ckpt-replicas 2 --run-dir "$P" \
  || { show three; echo "FAIL: three hosts with R=2"; exit 1; }
"$Q" list --run-dir "$T/g" | grep -q "3 on 3 hosts" || { "$Q" list --run-dir "$T/g"; echo "FAIL: three hosts: 3 copies on 3 hosts"; exit 1; }
# Hosts B and C lost: everything comes from host A.
snapshot g1 h1 "$T/g" "$T/h"; rm -rf "$T/h1" "$T/i1"; mkdir -p "$T/h1" "$T/i1"
job three2 "hostA:$T/g1 hostA:$T/g1 hostB:$T/h1 hostC:$T/i1" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 2 --quiet \
  || { show three2; echo "FAIL: three hosts: resume after hosts B and C were lost"; exit 1; }
out=$("$Q" compare "$T/ref4" "$T/g1") || { echo "$out"; echo "FAIL: three hosts: resumed run differs"; exit 1; }
# Host A's stores and host B lost: everything comes from host C.
snapshot g2 i2 "$T/g" "$T/i"; rm -rf "$T/g2/stores" "$T/h2"; mkdir -p "$T/h2"
job three3 "hostA:$T/g2 hostA:$T/g2 hostB:$T/h2 hostC:$T/i2" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 2 --quiet \
  || { show three3; echo "FAIL: three hosts: resume after host A's stores and host B were lost"; exit 1; }
grep -q "on hostC served [1-9][0-9]* tensors" "$T/three3.rank3.log" || { show three3; echo "FAIL: host C did not serve"; exit 1; }
out=$("$Q" compare "$T/ref4" "$T/g2") || { echo "$out"; echo "FAIL: three hosts: resumed run (from C) differs"; exit 1; }
# All three lost: refused, naming every copy.
rm -rf "$T/g/stores" "$T/h" "$T/i"; mkdir -p "$T/h" "$T/i"
if job three4 "hostA:$T/g hostA:$T/g hostB:$T/h hostC:$T/i" resume --run-dir "$P" --from 3 --steps 6 --ckpt-replicas 2 --quiet; then
  echo "FAIL: three hosts: resumed with every copy lost"; exit 1
fi
grep -q "and a replica in store .* on host 'hostB'.*and a replica in store .* on host 'hostC'" "$T/three4.rank0.log" \
  || { show three4; echo "FAIL: the refusal must name every copy"; exit 1; }
echo "three hosts, R=2: B and C lost, then A's stores and B lost: resumed bit-exact; all lost: refused naming every copy"

# 8. R=0 and no push: losing host B loses the checkpoint; resume refuses, naming it, nothing loaded.
job plain "hostA:$T/j hostB:$T/k" train $C --pp 2 --steps 6 --ckpt-every 3 --run-dir "$P" \
  || { show plain; echo "FAIL: training without replicas"; exit 1; }
"$Q" list --run-dir "$T/j" | grep -q "1 on 1 host " || { "$Q" list --run-dir "$T/j"; echo "FAIL: list without replicas"; exit 1; }
rm -rf "$T/k"; mkdir -p "$T/k"
before=$(cd "$T/j" && find . -type f ! -name lock ! -name lock.mdb -print0 | sort -z | xargs -0 sha256sum | sha256sum)
if job plainB "hostA:$T/j hostB:$T/k" resume --run-dir "$P" --from 3 --steps 6 --quiet; then
  echo "FAIL: resumed without replicas after host B was lost"; exit 1
fi
grep -q "nothing loaded" "$T/plainB.rank0.log" && grep -q "rank 1 on host 'hostB'" "$T/plainB.rank0.log" \
  || { show plainB; echo "FAIL: the refusal must name the lost store and say nothing loaded"; exit 1; }
after=$(cd "$T/j" && find . -type f ! -name lock ! -name lock.mdb -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$before" = "$after" ] || { echo "FAIL: a refused restore changed host A's run directory"; exit 1; }
echo "R=0, host B lost: refused ($(grep -o "[0-9]* tensors are unreachable" "$T/plainB.rank0.log" | head -1)), nothing changed"
echo "ok: replicas on 2 and 3 hosts: refusals, copies recorded and verified, hosts lost and resumed bit-exact"
