#!/usr/bin/env bash
# The executor's device-link path (runtime/exec/links.c) on the cpu backend, where
# QE_P2P=device moves activations and gradients over cpu links (local sockets,
# runtime/backend/cpu/cpu_link.c) instead of the host comm:
#  1. --pp 2 runs with QE_P2P=device give the same fingerprints as the host path
#     (interleaved eager, zbv --exec graph), 20 steps, same seed;
#  2. the links are really used with QE_P2P=device, and not by default (the cpu
#     reference keeps the host path): the link sockets show in /proc/net/unix or not;
#  3. a rank killed mid-run ends the job (forked ranks, and externally launched ranks
#     where the survivor must notice by itself) within a bound, non-zero, naming rank 1.
set -u
Q=${1:?usage: p2p_links.sh QEFFECT SHARED}
T=$(mktemp -d)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --steps 20 --seed 7 --quiet"
fail=0

# 1. device links == host path, bit for bit
for variant in "interleaved eager" "zbv graph"; do
  set -- $variant
  sched=$1 exec=$2
  "$Q" train $C --schedule $sched --exec $exec --run-dir "$T/host-$sched" || { echo "FAIL: host run $variant"; fail=1; continue; }
  QE_P2P=device "$Q" train $C --schedule $sched --exec $exec --run-dir "$T/dev-$sched" \
    || { echo "FAIL: QE_P2P=device run $variant"; fail=1; continue; }
  out=$("$Q" compare "$T/host-$sched" "$T/dev-$sched")
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^identical" <<<"$out"; then
    echo "FAIL: $variant: QE_P2P=device differs from the host path:"; echo "$out"; fail=1
  else
    echo "ok: $variant: QE_P2P=device == host path ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
  fi
done

# 1b. replica sums over the links (data parallel): bitwise the host all-reduce in group order,
#     replicas byte-identical after every step (--check-replicas), and the run says which path
#     it took (--json: "p2p":"device" with messages counted, "host" by default)
for shape in "2 2" "1 3"; do
  set -- $shape
  D="--preset tiny --pp $1 --dp $2 --micro 2 --steps 5 --seed 7 --quiet --check-replicas on --json"
  "$Q" train $D --run-dir "$T/dph-$1-$2" >"$T/dph-$1-$2.json" || { echo "FAIL: host run pp $1 dp $2"; fail=1; continue; }
  # cpu links make a link's first send wait for the peer's first receive, as NCCL's lazy connect
  # may: replica sums whose host calls do not pair up hang there, and fail here within a minute
  QE_P2P=device QE_COMM_TIMEOUT_MS=60000 "$Q" train $D --run-dir "$T/dpd-$1-$2" >"$T/dpd-$1-$2.json" \
    || { echo "FAIL: QE_P2P=device run pp $1 dp $2"; fail=1; continue; }
  out=$("$Q" compare "$T/dph-$1-$2" "$T/dpd-$1-$2")
  if [ $? -ne 0 ] || ! grep -q "^identical" <<<"$out"; then
    echo "FAIL: pp $1 dp $2: the replica sum over links differs from the host path:"; echo "$out"; fail=1
  else
    echo "ok: pp $1 dp $2: replica sums over links == host path ($(grep -o 'all [0-9]* fingerprints' <<<"$out"))"
  fi
  ranks=$(( $1 * $2 ))
  ndev=$(grep -c '"p2p":"device","link_sends":[1-9]' "$T/dpd-$1-$2.json")
  nhost=$(grep -c '"p2p":"host","link_sends":0' "$T/dph-$1-$2.json")
  if [ "$ndev" -ne "$ranks" ] || [ "$nhost" -ne "$ranks" ]; then
    echo "FAIL: pp $1 dp $2: --json reports device links on $ndev of $ranks ranks (want all) and the host path on $nhost of $ranks (want all)"
    fail=1
  fi
done

# The rank processes of a forked job (children of the launcher), once both exist.
kids_of() {
  local kids=""
  for _ in $(seq 100); do
    kids=$(pgrep -P "$1" | sort -n)
    [ "$(wc -w <<<"$kids")" -ge 2 ] && break
    sleep 0.1
  done
  echo $kids
}
# How many link sockets the given processes hold (names carry the pid of the rank that made them).
link_sockets() {
  local n=0 p
  for p in "$@"; do n=$((n + $(grep -c "@qeffect-link\.$p\." /proc/net/unix))); done
  echo $n
}
# Wait up to $2 tenths of a second for pid $1 to end; 0 when it ended.
ends_within() {
  for _ in $(seq "$2"); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}
L="--preset tiny --pp 2 --micro 4 --steps 1000000 --quiet"

# 2. the default path on cpu opens no links
"$Q" train $L >"$T/host.out" 2>"$T/host.err" &
launcher=$!; bg+=($launcher)
kids=$(kids_of $launcher)
sleep 1.5
n=$(link_sockets $kids)
kill -TERM $launcher; wait $launcher 2>/dev/null
if [ "$n" -ne 0 ]; then echo "FAIL: a default cpu run opened $n link socket(s)"; fail=1
else echo "ok: the default cpu run moves messages through the host path (no link sockets)"; fi

# 3a. forked ranks with device links; rank 1 killed mid-run
QE_P2P=device "$Q" train $L >"$T/out" 2>"$T/err" &
launcher=$!; bg+=($launcher)
kids=$(kids_of $launcher)
n=0
for _ in $(seq 50); do n=$(link_sockets $kids); [ "$n" -ge 2 ] && break; sleep 0.1; done
if [ "$n" -lt 2 ]; then echo "FAIL: QE_P2P=device run shows $n link socket(s), expected 2 (one per direction)"; fail=1
else echo "ok: QE_P2P=device opened $n link sockets"; fi
sleep 0.5
victim=${kids##* }
t0=$EPOCHREALTIME
kill -KILL "$victim"
if ! ends_within $launcher 200; then
  echo "FAIL: the device-link run still runs 20 s after rank 1 was killed"; kill -KILL $launcher; fail=1
else
  wait $launcher; rc=$?
  dt=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
  if [ $rc -eq 0 ]; then echo "FAIL: exit status 0 after rank 1 died"; fail=1
  elif ! grep -q "rank 1" "$T/err"; then echo "FAIL: the error does not name rank 1:"; cat "$T/err"; fail=1
  else echo "ok: forked ranks: ended in ${dt} s with status $rc: $(grep -m1 'rank 1' "$T/err")"; fi
fi

# 3b. externally launched ranks: no launcher stops rank 0, it must see rank 1's death itself
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port QE_RUN_ID=p2p-test QE_P2P=device \
    "$Q" train $L >"$T/ext$r.out" 2>"$T/ext$r.err" &
  pids[$r]=$!; bg+=(${pids[$r]})
done
n=0
for _ in $(seq 100); do n=$(link_sockets ${pids[0]} ${pids[1]}); [ "$n" -ge 2 ] && break; sleep 0.1; done
[ "$n" -ge 2 ] || { echo "FAIL: external ranks show $n link socket(s)"; cat "$T"/ext*.err; fail=1; }
sleep 0.5
t0=$EPOCHREALTIME
kill -KILL ${pids[1]}
wait ${pids[1]} 2>/dev/null
if ! ends_within ${pids[0]} 200; then
  echo "FAIL: rank 0 still runs 20 s after rank 1 was killed (device links hang)"; kill -KILL ${pids[0]}; fail=1
else
  wait ${pids[0]}; rc=$?
  dt=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
  if [ $rc -eq 0 ]; then echo "FAIL: rank 0 exited 0 after rank 1 died"; fail=1
  elif ! grep -q "rank 1" "$T/ext0.err"; then echo "FAIL: rank 0's error does not name rank 1:"; cat "$T/ext0.err"; fail=1
  else echo "ok: external ranks: rank 0 ended in ${dt} s with status $rc: $(grep -m1 'rank 1' "$T/ext0.err")"; fi
fi
exit $fail
