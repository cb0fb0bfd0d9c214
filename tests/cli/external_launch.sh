#!/usr/bin/env bash
# Ranks started by an external launcher (as torchrun or srun would: RANK, WORLD_SIZE,
# LOCAL_RANK, MASTER_ADDR, MASTER_PORT set per process) train exactly like `--nproc`.
set -u
Q=${1:?usage: external_launch.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --steps 6 --quiet"
"$Q" train $C --run-dir "$T/forked" || { echo "FAIL: forked run"; exit 1; }
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port QE_RUN_ID=ext-test \
    "$Q" train $C --run-dir "$T/external" >"$T/rank$r.log" 2>&1 &
  pids[$r]=$!
  [ $r -eq 0 ] && sleep 0.5   # rank 0 creates the run directory
done
fail=0
for r in 0 1; do wait ${pids[$r]} || { echo "FAIL: rank $r exited non-zero:"; cat "$T/rank$r.log"; fail=1; }; done
[ $fail -eq 0 ] || exit 1
out=$("$Q" compare "$T/forked" "$T/external") || { echo "$out"; echo "FAIL: externally launched run differs"; exit 1; }
echo "ok: externally launched ranks == --nproc ranks: $(tail -1 <<<"$out")"
