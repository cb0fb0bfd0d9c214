#!/usr/bin/env bash
# A read-only run directory can be read (issue 15, item 5): with the run bind-mounted
# read-only (a mount namespace of our own: unshare -rm, no root needed), list, inspect,
# verify, compare and gc --dry-run succeed and change nothing; and, when this test runs as
# root, the same as an unprivileged user who may read but not write the run (setpriv), the
# case of a run directory without write permission.  None of them takes RUN/lock.
set -u
Q=${1:?usage: read_only_run.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
C="--preset tiny --pp 2 --micro 4 --amax-history 4 --quiet"
"$Q" train $C --steps 4 --ckpt-every 2 --run-dir "$T/r" || { echo "FAIL: train"; exit 1; }
chmod -R a+rX "$T/r"
sum() { (cd "$T/r" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(sum)
readers=("list --run-dir R" "inspect --run-dir R" "inspect --run-dir R --step 2 --stage 1 --tensor params" \
         "verify --run-dir R" "compare R R" "gc --run-dir R --keep-last 1 --dry-run")
fail=0
run_all() { # run_all HOW...: every reader under HOW (a command prefix)
  local how=("$@") c
  for c in "${readers[@]}"; do
    out=$("${how[@]}" "$Q" ${c//R/$T/r} 2>&1) || { echo "$out" | tail -3; echo "FAIL: '$c' on a read-only run (${how[*]:0:1})"; fail=1; }
  done
}
if unshare -rm --propagation private true 2>/dev/null; then
  ro() { unshare -rm --propagation private sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"' _ "$T/r" "$@"; }
  ro touch "$T/r/probe" 2>/dev/null && { echo "FAIL: the read-only bind mount is writable"; exit 1; }
  run_all ro
else
  echo "(read-only bind mount skipped: unshare -rm is refused here)"
fi
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  run_all setpriv --reuid=65534 --regid=65534 --clear-groups
elif [ "$(id -u)" != 0 ]; then
  chmod -R a-w "$T/r"; run_all env; chmod -R u+w "$T/r"
fi
[ "$before" = "$(sum)" ] || { echo "FAIL: a reader changed the run directory"; fail=1; }
[ $fail -eq 0 ] || exit 1
echo "ok: list, inspect, verify, compare and gc --dry-run read a read-only run directory and change nothing"
