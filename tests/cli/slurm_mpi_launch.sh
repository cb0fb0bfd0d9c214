#!/usr/bin/env bash
# Ranks placed by SLURM's variables alone (an srun step's tasks), or by Open MPI's alone (mpirun),
# train exactly like torchrun-style ranks and like --nproc (issue 38, item 3): the fingerprints of
# every step compare equal.  Covered: the master from the first host of a node list in SLURM's
# compressed form (127.0.0.[1-4]), the port derived from SLURM_JOB_ID, SLURM_STEP_NODELIST over
# SLURM_JOB_NODELIST, MASTER_ADDR with Open MPI, and Open MPI without MASTER_ADDR refused with a
# message that says how to set it.  Then (in a mount namespace of our own, where /etc/hosts maps
# the node names to 127.0.1.1 as Debian does for the machine's own name) SLURM ranks whose first
# node resolves to loopback: rank 0 says so and listens on every interface, and the job trains.
# Ranks sharing one GPU (also item 3) need a GPU and are not tested here.
set -u
Q=${1:?usage: slurm_mpi_launch.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --steps 6 --quiet"
fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
port_free() { python3 -c "import socket,sys; s=socket.socket(); s.bind(('0.0.0.0',int(sys.argv[1])))" "$1" 2>/dev/null; }
# Clear whatever launcher this test itself runs under.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT QE_RUN_ID SLURM_PROCID SLURM_STEP_ID \
  SLURM_NTASKS SLURM_LOCALID SLURM_STEP_NODELIST SLURM_JOB_NODELIST SLURM_LAUNCH_NODE_IPADDR SLURM_JOB_ID \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE

"$Q" train $C --run-dir "$T/forked" >"$T/forked.log" 2>&1 || { cat "$T/forked.log"; fail "forked run"; }

# launch NAME 'VARS of rank 0' 'VARS of rank 1': two ranks with only the given variables, rank 0 first
launch() {
  local name=$1 r
  shift
  for r in 0 1; do
    env $1 "$Q" train $C --run-dir "$T/$name" >"$T/$name.$r.log" 2>&1 &
    pids[$r]=$!
    [ $r -eq 0 ] && sleep 0.5 # rank 0 creates the run directory
    shift
  done
  local bad=0
  for r in 0 1; do wait ${pids[$r]} || { echo "rank $r of $name exited non-zero:"; cat "$T/$name.$r.log"; bad=1; }; done
  [ $bad -eq 0 ] || fail "$name: a rank failed"
  out=$("$Q" compare "$T/forked" "$T/$name") || { echo "$out"; fail "$name: the run differs from --nproc's"; }
  echo "ok: $name == --nproc: $(tail -1 <<<"$out")"
}

# torchrun-style, the reference the others must equal
p=$(free_port)
launch torchrun "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p" \
  "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p"

# SLURM: master = first host of SLURM_JOB_NODELIST, port = 20000 + SLURM_JOB_ID mod 12000
job=
for j in 4242 7310 1234 9876 555 11111 3030 8080; do port_free $((20000 + j)) && { job=$j; break; }; done
[ -n "$job" ] || fail "no free port among the derived ones"
S="SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_JOB_ID=$job SLURM_JOB_NODELIST=127.0.0.[1-4] SLURM_LAUNCH_NODE_IPADDR=192.0.2.1"
launch slurm "$S SLURM_PROCID=0 SLURM_LOCALID=0" "$S SLURM_PROCID=1 SLURM_LOCALID=1"
"$Q" compare "$T/torchrun" "$T/slurm" >/dev/null || fail "slurm differs from torchrun"

# SLURM: the step's node list wins over the job's (which names a host that does not exist)
p=$(free_port)
S="SLURM_STEP_ID=1 SLURM_NTASKS=2 SLURM_JOB_ID=99 SLURM_JOB_NODELIST=nosuchhost[1-2] MASTER_PORT=$p"
S="$S SLURM_STEP_NODELIST=localhost,gpu[01-04,07]"
launch slurm_step "$S SLURM_PROCID=0 SLURM_LOCALID=0" "$S SLURM_PROCID=1 SLURM_LOCALID=0"

# Open MPI, with MASTER_ADDR and MASTER_PORT passed as mpirun -x would
p=$(free_port)
O="OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p"
launch ompi "$O OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0" "$O OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1"
"$Q" compare "$T/torchrun" "$T/ompi" >/dev/null || fail "ompi differs from torchrun"

# Open MPI without MASTER_ADDR: refused at once, saying how to set it
env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 timeout 60 "$Q" train $C >"$T/nomaster.log" 2>&1 &&
  fail "Open MPI ranks without MASTER_ADDR trained"
grep -q "Open MPI" "$T/nomaster.log" && grep -q "mpirun -x MASTER_ADDR=" "$T/nomaster.log" ||
  { cat "$T/nomaster.log"; fail "Open MPI without MASTER_ADDR: the message does not say how to set it"; }
echo "ok: Open MPI without MASTER_ADDR: $(grep -o 'which does not say.*' "$T/nomaster.log" | head -1)"

# A batch script's own variables (SLURM_PROCID=0, SLURM_NTASKS=2, no step) are no job: --nproc runs
env SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_NODELIST=n[1-2] "$Q" train $C --run-dir "$T/batch" >"$T/batch.log" 2>&1 ||
  { cat "$T/batch.log"; fail "a batch script's SLURM variables made qeffect wait for ranks"; }
"$Q" compare "$T/forked" "$T/batch" >/dev/null || fail "the run in a batch script differs"
echo "ok: in a batch script (no SLURM_STEP_ID) qeffect forks its own ranks"

# The first node resolves to loopback on rank 0's host (127.0.1.1, as Debian's /etc/hosts maps a
# machine's own name) and to another address on the other host.  Two "hosts", each a mount
# namespace with its own /etc/hosts, two ranks each (--pp 2 --dp 2): on host A node01 is
# 127.0.1.1, on host B node01 is 127.0.0.2.  Rank 0 must listen on every interface (on
# 127.0.1.1 alone, host B's ranks are refused), saying so; rank 1, on rank 0's host, announces
# node01's name rather than a loopback address; the job trains as --nproc 4 does.
if ! unshare -rm --propagation private true 2>/dev/null; then
  echo "SKIP (part): unshare -rm is refused here; the loopback case is not tested"
  exit 0
fi
D="--preset tiny --pp 2 --dp 2 --micro 4 --amax-history 4 --steps 4 --quiet"
"$Q" train $D --run-dir "$T/forked4" >"$T/forked4.log" 2>&1 || { cat "$T/forked4.log"; fail "forked run of 4"; }
printf '127.0.0.1 localhost\n127.0.1.1 node01\n127.0.0.3 node02\n' >"$T/hostsA"
printf '127.0.0.1 localhost\n127.0.0.2 node01\n127.0.1.1 node02\n' >"$T/hostsB"
cat >"$T/host.sh" <<'IN'
# host.sh HOSTS Q T D JOB FIRST: ranks FIRST and FIRST+1 on a host whose /etc/hosts is HOSTS
set -u
H=$1 Q=$2 T=$3 D=$4 job=$5 r0=$6
mount --bind "$H" /etc/hosts || { echo "FAIL: bind-mount /etc/hosts"; exit 1; }
S="SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_JOB_ID=$job SLURM_STEP_NODELIST=node[01-02] QE_COMM_TIMEOUT_MS=60000"
for l in 0 1; do
  r=$((r0 + l))
  env $S SLURM_PROCID=$r SLURM_LOCALID=$l "$Q" train $D --run-dir "$T/loop" >"$T/loop.$r.log" 2>&1 &
  p[$l]=$!
  [ $r -eq 0 ] && sleep 0.5 # rank 0 creates the run directory
done
st=0
for l in 0 1; do wait ${p[$l]} || { cat "$T/loop.$((r0 + l)).log"; st=1; }; done
exit $st
IN
job=
for j in 4343 7411 1335 9977 656 11212; do port_free $((20000 + j)) && { job=$j; break; }; done
[ -n "$job" ] || fail "no free port among the derived ones"
unshare -rm --propagation private bash "$T/host.sh" "$T/hostsA" "$Q" "$T" "$D" "$job" 0 &
pa=$!
sleep 0.7
unshare -rm --propagation private bash "$T/host.sh" "$T/hostsB" "$Q" "$T" "$D" "$job" 2 || fail "host B's ranks"
wait $pa || fail "host A's ranks (rank 0's master name resolves to 127.0.1.1 there)"
grep -q "resolves to the loopback address 127.0.1.1" "$T/loop.0.log" && grep -q "listening on every interface" "$T/loop.0.log" ||
  { cat "$T/loop.0.log"; fail "rank 0 did not say that the master's name resolves to loopback"; }
grep -q "announcing 'node01' to the other ranks" "$T/loop.1.log" ||
  { cat "$T/loop.1.log"; fail "rank 1, on rank 0's host, did not announce the master's name"; }
"$Q" compare "$T/forked4" "$T/loop" >/dev/null || fail "the two-host loopback-master run differs from --nproc 4"
echo "ok: node01 -> 127.0.1.1 on rank 0's host, 127.0.0.2 on the other: $(grep -o 'listening on every interface[^(]*' "$T/loop.0.log" | head -1)and rank 1 announces node01; == --nproc 4"
