#!/usr/bin/env bash
# replicas.sh - the cost of --ckpt-replicas on two simulated hosts (tests/cli/lib/hosts.sh:
# mount namespaces, so both "hosts" share this machine's CPU and disk; the comm is loopback
# TCP).  For the small preset on cpu, pp 2 (one rank per host), it prints:
#  - the checkpoint stall: what a synchronous save costs training with R=0 and R=1 (rank 0's
#    "committed ... in X ms"), and an async save's stall with R=1 ("training stalled X ms");
#  - the restore time (rank 0's "resumed ... in X ms", fresh processes) from the local stores,
#    from the peer's replica after host B is lost (its folder deleted), and from S3 (push to
#    a local s3rver, both hosts' folders deleted, resume --remote: the pull's wall time plus
#    the restore);
#  - with the memory tier (--ckpt-memory, each host's memory a folder of /dev/shm, or of the
#    tmpfs MEM_PARENT, bound at one path): the sync stall with R=1 and memory, what each host's
#    memory holds, and the restore with both hosts' disk stores deleted, from memory alone.
# usage: bench/ckpt/replicas.sh QEFFECT [STEPS]   (needs root for unshare, node for s3rver)
# Environment: PRESET (small), BACKEND (cpu; cuda puts both ranks on the machine's GPUs, modulo
# their count, talking over host memory), MICRO (4), CKPT_EVERY (2), EXTRA (more train flags),
# PARTS (sync,async,local,peer,mem,s3: which measurements), LEAN=1 (a large state: every run's
# folders go as soon as they are measured, and the restores use the run's own folders instead
# of copies, so the disk holds one run at a time).
set -u
Q=$(readlink -f "${1:?usage: replicas.sh QEFFECT [STEPS]}")
STEPS=${2:-6}
PRESET=${PRESET:-small}; BACKEND=${BACKEND:-cpu}; MICRO=${MICRO:-4}; CKPT_EVERY=${CKPT_EVERY:-2}
PARTS=${PARTS:-sync,async,local,peer,mem,s3}; LEAN=${LEAN:-0}
has() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/s3-test-lib.sh"   # sets T (scratch) and the cleanup trap
P="$T/mnt"; mkdir -p "$P"
. "$ROOT/tests/cli/lib/hosts.sh"
C="--preset $PRESET --backend $BACKEND --micro $MICRO --pp 2 --log-every 1000 ${EXTRA:-}"
export QE_COMM_TIMEOUT_MS=${QE_COMM_TIMEOUT_MS:-600000} QE_JOB_SECRET=bench-replicas
[ "$BACKEND" = cuda ] && export QE_P2P=${QE_P2P:-host}
echo "replicas.sh: $C, steps $STEPS, checkpoint every $CKPT_EVERY, scratch $T ($(df -h "$T" | awk 'NR==2 {print $4}') free)"
ms() { grep -o "$2 [0-9.]* ms" "$1" | awk '{print $(NF-1)}' | tr '\n' ' '; }
restored() { grep -o "resumed from checkpoint step [0-9]* ([0-9]* bytes) in [0-9.]* ms" "$1" | awk '{print $(NF-1)}'; }

for R in 0 1; do
  { has sync || [ $R = 1 ]; } || continue
  rm -rf "$T/a$R" "$T/b$R"
  job s$R "hostA:$T/a$R hostB:$T/b$R" train $C --steps "$STEPS" --ckpt-every "$CKPT_EVERY" --ckpt-replicas $R --run-dir "$P" \
    || { show s$R; exit 1; }
  bytes=$(grep -o "committed: [0-9]* bytes" "$T/s$R.rank0.log" | head -1 | awk '{print $2}')
  echo "sync save, R=$R ($bytes bytes): stall per checkpoint (ms): $(ms "$T/s$R.rank0.log" 'bytes) in')"
  [ "$LEAN" = 1 ] && [ $R = 0 ] && rm -rf "$T/a0" "$T/b0"
done
if has async; then
  rm -rf "$T/aa" "$T/ba"
  job as "hostA:$T/aa hostB:$T/ba" train $C --steps "$STEPS" --ckpt-every "$CKPT_EVERY" --ckpt-replicas 1 --ckpt-async --run-dir "$P" \
    || { show as; exit 1; }
  echo "async save, R=1: training stalled (ms): $(ms "$T/as.rank0.log" 'training stalled'); background (ms): $(ms "$T/as.rank0.log" 'background after')"
  [ "$LEAN" = 1 ] && rm -rf "$T/aa" "$T/ba"
fi

# Restores of the R=1 run's latest checkpoint, fresh processes, continuing two more steps
# (LEAN: restore only, in the run's own folders, so that no restore adds a checkpoint).
more=$((STEPS + 2))
[ "$LEAN" = 1 ] && more=$STEPS
fresh_copy() { # SRC DST: a host's folder as it was after training (LEAN: the folder itself)
  if [ "$LEAN" = 1 ]; then ln -sfn "$1" "$2"; else cp -a "$1" "$2"; fi
}
if has local; then
  fresh_copy "$T/a1" "$T/la"; fresh_copy "$T/b1" "$T/lb"
  job local "hostA:$(readlink -f "$T/la") hostB:$(readlink -f "$T/lb")" resume --run-dir "$P" --steps $more --ckpt-replicas 1 || { show local; exit 1; }
  echo "restore from local stores: $(restored "$T/local.rank0.log") ms"
fi
if has peer; then
  fresh_copy "$T/a1" "$T/pa"
  if [ "$LEAN" = 1 ]; then rm -rf "$T/b1"; fi
  mkdir -p "$T/pb"
  job peer "hostA:$(readlink -f "$T/pa") hostB:$T/pb" resume --run-dir "$P" --steps $more --ckpt-replicas 1 || { show peer; exit 1; }
  echo "restore from the peer's replica (host B lost): $(restored "$T/peer.rank0.log") ms"
  [ "$LEAN" = 1 ] && rm -rf "$T/pb"
fi

if has mem; then
  MR=$(mktemp -d "${MEM_PARENT:-/dev/shm}/qe-replicas-bench.XXXXXX")
  mem_done() { rm -rf "$MR"; unset HOST_MEM_ROOT HOST_MEM_PATH; }
  export HOST_MEM_ROOT=$MR HOST_MEM_PATH="$T/memory"
  job mt "hostA:$T/am hostB:$T/bm" train $C --steps "$STEPS" --ckpt-every "$CKPT_EVERY" --ckpt-replicas 1 \
    --ckpt-memory "$T/memory" --run-dir "$P" || { show mt; mem_done; exit 1; }
  echo "sync save, R=1 and the memory tier: stall per checkpoint (ms): $(ms "$T/mt.rank0.log" 'bytes) in')"
  echo "memory held after training: $(du -sh "$MR"/host* | awk '{print $2": "$1}' | sed "s|$MR/||" | tr '\n' ' ')"
  rm -rf "$T/am/stores" "$T/bm/stores"
  job mem "hostA:$T/am hostB:$T/bm" resume --run-dir "$P" --steps $more --ckpt-replicas 1 --ckpt-memory "$T/memory" \
    || { show mem; mem_done; exit 1; }
  echo "restore from memory (both hosts' disk stores deleted, hosts alive): $(restored "$T/mem.rank0.log") ms;" \
    "$(grep -o "gave [0-9]* bytes from disk, [0-9]* from memory" "$T/mem.rank0.log" | head -1) (rank 0)"
  mem_done
  [ "$LEAN" = 1 ] && rm -rf "$T/am" "$T/bm"
fi

if ! has s3; then
  :
elif s3_start_server >/dev/null 2>&1; then
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
