#!/usr/bin/env bash
# replicas.sh - the cost of --ckpt-replicas on two simulated hosts (tests/cli/lib/hosts.sh:
# mount namespaces, so both "hosts" share this machine's CPU and disk; the comm is loopback
# TCP).  For the small preset on cpu, pp 2 (one rank per host), it prints:
#  - the checkpoint stall: what a synchronous save costs training with R=0 and R=1 (rank 0's
#    "committed ... in X ms"), and an async save's stall with R=1 ("training stalled X ms");
#  - the restore time (rank 0's "resumed ... in X ms", fresh processes) from the local stores,
#    from the peer's replica after host B is lost (its folder deleted), and from S3 (push to
#    a local s3rver, both hosts' folders deleted, resume --remote: the pull's wall time plus
#    the restore).
# usage: bench/ckpt/replicas.sh QEFFECT [STEPS]   (needs root for unshare, node for s3rver)
set -u
Q=$(readlink -f "${1:?usage: replicas.sh QEFFECT [STEPS]}")
STEPS=${2:-6}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/s3-test-lib.sh"   # sets T (scratch) and the cleanup trap
P="$T/mnt"; mkdir -p "$P"
. "$ROOT/tests/cli/lib/hosts.sh"
C="--preset small --micro 4 --pp 2 --log-every 1000"
export QE_COMM_TIMEOUT_MS=120000 QE_JOB_SECRET=bench-replicas
ms() { grep -o "$2 [0-9.]* ms" "$1" | awk '{print $(NF-1)}' | tr '\n' ' '; }
restored() { grep -o "resumed from checkpoint step [0-9]* ([0-9]* bytes) in [0-9.]* ms" "$1" | awk '{print $(NF-1)}'; }

for R in 0 1; do
  rm -rf "$T/a$R" "$T/b$R"
  job s$R "hostA:$T/a$R hostB:$T/b$R" train $C --steps "$STEPS" --ckpt-every 2 --ckpt-replicas $R --run-dir "$P" \
    || { show s$R; exit 1; }
  bytes=$(grep -o "committed: [0-9]* bytes" "$T/s$R.rank0.log" | head -1 | awk '{print $2}')
  echo "sync save, R=$R ($bytes bytes): stall per checkpoint (ms): $(ms "$T/s$R.rank0.log" 'bytes) in')"
done
rm -rf "$T/aa" "$T/ba"
job as "hostA:$T/aa hostB:$T/ba" train $C --steps "$STEPS" --ckpt-every 2 --ckpt-replicas 1 --ckpt-async --run-dir "$P" \
  || { show as; exit 1; }
echo "async save, R=1: training stalled (ms): $(ms "$T/as.rank0.log" 'training stalled'); background (ms): $(ms "$T/as.rank0.log" 'background after')"

# Restores of the R=1 run's latest checkpoint, fresh processes, continuing two more steps.
more=$((STEPS + 2))
cp -a "$T/a1" "$T/la"; cp -a "$T/b1" "$T/lb"
job local "hostA:$T/la hostB:$T/lb" resume --run-dir "$P" --steps $more --ckpt-replicas 1 || { show local; exit 1; }
echo "restore from local stores: $(restored "$T/local.rank0.log") ms"
cp -a "$T/a1" "$T/pa"; mkdir -p "$T/pb"
job peer "hostA:$T/pa hostB:$T/pb" resume --run-dir "$P" --steps $more --ckpt-replicas 1 || { show peer; exit 1; }
echo "restore from the peer's replica (host B lost): $(restored "$T/peer.rank0.log") ms"

if s3_start_server >/dev/null 2>&1; then
  s3_use_test_credentials
  "$Q" push --run-dir "$T/a1" --remote s3://qe-test/bench --endpoint "$EP" >/dev/null 2>&1 \
    || echo "push from host A alone failed (host B's chunks are not on host A without replicas)"
  mkdir -p "$T/sa" "$T/sb"
  t0=$(date +%s.%N)
  job s3 "hostA:$T/sa hostB:$T/sb" resume --run-dir "$P" --steps $more --remote s3://qe-test/bench --endpoint "$EP" \
    || { show s3; exit 1; }
  t1=$(date +%s.%N)
  echo "restore from S3 (both hosts lost): restore $(restored "$T/s3.rank0.log") ms; pull + restore + $((more - STEPS)) steps wall $(python3 -c "print('%.0f' % (($t1 - $t0) * 1000))") ms"
else
  echo "restore from S3: skipped (s3rver could not start)"
fi
