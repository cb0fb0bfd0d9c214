#!/usr/bin/env bash
# One writer per run directory: while a job writes a run (here a long resume), a second
# writer - resume, train, gc - is refused at once, naming the holder's pid and command; the
# read-only commands (list, inspect, verify) do not wait for the lock.  The lock goes with the
# holder: after it is killed, the run can be written again.
set -u
Q=${1:?usage: run_lock.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'kill $bg 2>/dev/null; rm -rf "$T"' EXIT
C="--preset tiny --micro 4 --amax-history 4 --quiet"
"$Q" train $C --pp 2 --steps 2 --ckpt-every 2 --run-dir "$T/r" || { echo "FAIL: train"; exit 1; }
"$Q" resume --run-dir "$T/r" --steps 100000 --quiet >"$T/bg.log" 2>&1 &
bg=$!
for _ in $(seq 50); do grep -q "qeffect resume" "$T/r/lock" 2>/dev/null && break; sleep 0.1; done
grep -q "pid $bg" "$T/r/lock" || { cat "$T/r/lock" "$T/bg.log"; echo "FAIL: the lock does not name the writer"; exit 1; }
for cmd in "resume --run-dir $T/r --steps 8" "gc --run-dir $T/r --keep-last 1" \
           "train $C --pp 2 --steps 2 --run-dir $T/r"; do
  out=$(timeout 20 "$Q" $cmd 2>&1); st=$?
  [ $st -ne 0 ] && [ $st -ne 124 ] && grep -q "pid $bg" <<<"$out" && grep -q "qeffect resume" <<<"$out" \
    || { echo "$out"; echo "FAIL: a second writer ($cmd) was not refused at once naming the holder (exit $st)"; exit 1; }
  # the refusal says it once (the message was once formatted into its own buffer: "in use: run directory ... in use: riter")
  [ "$(grep -o "is in use" <<<"$out" | wc -l)" -eq 1 ] && grep -q "held by another writer" <<<"$out" \
    || { echo "$out"; echo "FAIL: the refusal of $cmd is garbled"; exit 1; }
done
timeout 20 "$Q" list --run-dir "$T/r" >/dev/null && timeout 20 "$Q" inspect --run-dir "$T/r" >/dev/null \
  && timeout 60 "$Q" verify --run-dir "$T/r" >/dev/null || { echo "FAIL: a read-only command waited or failed during a write"; exit 1; }
kill -9 $bg; wait $bg 2>/dev/null
# Its forked ranks share the lock and die with it (PR_SET_PDEATHSIG), a moment later.
ok=0
for _ in $(seq 50); do
  if "$Q" gc --run-dir "$T/r" --keep-last 1 >/dev/null 2>"$T/again.log"; then ok=1; break; fi
  grep -q "in use" "$T/again.log" || break
  sleep 0.2
done
[ $ok -eq 1 ] || { cat "$T/again.log"; echo "FAIL: the lock outlived its holder"; exit 1; }
echo "ok: one writer per run directory, refused writers name the holder, readers never wait"
