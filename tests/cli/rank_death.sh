#!/usr/bin/env bash
# A rank that dies makes the others fail with a clear error, not hang.
set -u
Q=${1:?usage: rank_death.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$Q" train --preset tiny --pp 2 --micro 4 --steps 100000 --quiet >"$T/out" 2>"$T/err" &
launcher=$!
# wait for both rank processes to exist, then kill rank 1 (the second child)
for _ in $(seq 100); do
  kids=$(pgrep -P $launcher | sort -n)
  [ "$(wc -w <<<"$kids")" -ge 2 ] && break
  sleep 0.1
done
sleep 1
victim=$(tail -n1 <<<"$kids")
kill -KILL "$victim"
# the launcher and the surviving rank must end on their own within 30 s
for _ in $(seq 300); do
  kill -0 $launcher 2>/dev/null || break
  sleep 0.1
done
if kill -0 $launcher 2>/dev/null; then
  echo "FAIL: the run still hangs 30 s after rank 1 was killed"; kill -KILL $launcher; exit 1
fi
wait $launcher; rc=$?
cat "$T/err"
if [ $rc -eq 0 ]; then echo "FAIL: exit status 0 after a rank died"; exit 1; fi
if ! grep -q "rank 1" "$T/err"; then echo "FAIL: the error does not name rank 1"; exit 1; fi
echo "ok: exit status $rc, the error names the dead rank"
