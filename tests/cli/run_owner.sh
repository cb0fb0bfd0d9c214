#!/usr/bin/env bash
# A run directory holds one run (issue 35, items 6 and 7).  Every command that opens a run checks
# that the stores beside its catalog belong to the catalog's run, before it reads or changes
# anything, as resume always did:
#  1. another run's catalog copied over this run's: verify, inspect, list, gc and resume each exit
#     non-zero naming the store and both runs, and leave the catalog and the stores byte for byte;
#  2. a new train into a directory whose stores belong to another run (its catalog deleted) fails
#     before step 1, naming the store and both runs, and the old stores are untouched;
#  3. two runs sharing one --local-dir: the second fails before step 1; the first still verifies.
set -u
Q=${1:?usage: run_owner.sh QEFFECT SHARED}
S=${2:?usage: run_owner.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --quiet --data $S/data/brown.jsonl"
snap() { (cd "$1" && find . -type f ! -name lock -print0 | sort -z | xargs -0 md5sum) ; }
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/a" --steps 4 --ckpt-every 2 || fail "run a"
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/b" --steps 4 --ckpt-every 2 || fail "run b"
ida=$(sqlite3 "$T/a/catalog.db" "select value from meta where key='run_id'" 2>/dev/null)
[ -n "$ida" ] || fail "no run id in the catalog of run a"
cp "$T/a/catalog.db" "$T/b/catalog.db"
before=$(snap "$T/b")

# 1. every command refuses another run's catalog before it changes anything
for cmd in verify inspect list "gc --keep-last 1 --grace 0" "resume --steps 6"; do
  # shellcheck disable=SC2086
  err=$("$Q" $cmd --run-dir "$T/b" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "$err"; fail "$cmd accepted another run's catalog"; }
  grep -q "belongs to run" <<<"$err" && grep -q "catalog.db" <<<"$err" && grep -q "rank-" <<<"$err" ||
    { echo "$err"; fail "$cmd: the refusal does not name the store, the runs and the catalog"; }
  grep -q "$ida" <<<"$err" || { echo "$err"; fail "$cmd: the catalog's run id is not named"; }
  [ "$(snap "$T/b")" = "$before" ] || fail "$cmd changed the run directory it refused"
  echo "ok: $cmd refused (rc $rc): $(head -1 <<<"$err" | cut -c1-150)"
done

# 2. a new train into a directory of another run's stores (catalog deleted)
rm "$T/a/catalog.db"
stores=$(snap "$T/a/stores")
# shellcheck disable=SC2086
err=$("$Q" train $C --run-dir "$T/a" --steps 4 --ckpt-every 2 --log-every 1 2>&1); rc=$?
[ $rc -ne 0 ] || { echo "$err"; fail "a train into another run's stores was accepted"; }
grep -q "belongs to run" <<<"$err" || { echo "$err"; fail "the refusal does not name the other run"; }
! grep -q "^step " <<<"$err" || { echo "$err"; fail "the run trained before it refused the stores"; }
[ "$(snap "$T/a/stores")" = "$stores" ] || fail "the refused train changed the other run's stores"
echo "ok: train into another run's stores refused before step 1 (rc $rc)"

# 3. two runs sharing one --local-dir
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/c" --local-dir "$T/local" --steps 4 --ckpt-every 2 || fail "run c"
# shellcheck disable=SC2086
err=$("$Q" train $C --run-dir "$T/d" --local-dir "$T/local" --steps 4 --ckpt-every 2 --log-every 1 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "belongs to run" <<<"$err" && ! grep -q "^step " <<<"$err" ||
  { echo "$err"; fail "a second run on a shared --local-dir was not refused before step 1 (rc $rc)"; }
"$Q" verify --run-dir "$T/c" --local-dir "$T/local" >/dev/null || fail "the first run no longer verifies"
echo "ok: a second run on a shared --local-dir refused before step 1; the first verifies"
