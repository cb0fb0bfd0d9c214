#!/usr/bin/env bash
# A run remembers where its stores are (issue 38, item 4).  train --local-dir records the folder
# (absolute) in the run config; verify, inspect, list, gc and resume then use it without the flag,
# and say so; where a store is missing they say where they looked.
#  1. trained with a relative --local-dir from one working directory, every command works from
#     another without the flag, and the resume is bit-exact with an uninterrupted run;
#  2. the folder moved away: verify exits 1 with BAD lines that name the folder looked in, and
#     inspect says the store is not there now, naming it;
#  3. --local-dir on the command line wins over the recorded one: verify with the new place passes.
set -u
Q=${1:?usage: local_dir_recorded.sh QEFFECT SHARED}
S=${2:?usage: local_dir_recorded.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --quiet --data $S/data/brown.jsonl"
mkdir -p "$T/w1" "$T/w2"
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/full" --steps 6 || fail "uninterrupted run"
# shellcheck disable=SC2086
(cd "$T/w1" && "$Q" train $C --run-dir "$T/run" --local-dir local --steps 4 --ckpt-every 2) || fail "train --local-dir"
[ -d "$T/w1/local/stores" ] && [ ! -d "$T/run/stores" ] || fail "the stores are not under the --local-dir"

# 1.
cd "$T/w2" || fail "cd"
for cmd in verify inspect list "gc --keep-last 2 --grace 0 --dry-run"; do
  # shellcheck disable=SC2086
  out=$("$Q" $cmd --run-dir "$T/run" 2>&1) || { echo "$out"; fail "$cmd without --local-dir"; }
  grep -q "keeps its stores under --local-dir $T/w1/local (as recorded)" <<<"$out" ||
    { echo "$out"; fail "$cmd does not say it used the recorded --local-dir"; }
  echo "ok: $cmd without --local-dir"
done
"$Q" resume --run-dir "$T/run" --steps 6 --quiet 2>/dev/null || fail "resume without --local-dir"
out=$("$Q" compare "$T/full" "$T/run") || { echo "$out"; fail "the resume differs from the uninterrupted run"; }
echo "ok: resume without --local-dir, bit-exact: $(tail -1 <<<"$out")"

# 2.
mv "$T/w1/local" "$T/w1/moved"
out=$("$Q" verify --run-dir "$T/run" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^BAD .*missing: .*(looked in $T/w1/local/stores)" <<<"$out" ||
  { echo "$out" | head -5; fail "verify with the stores moved: rc $rc, or the BAD lines do not say where it looked"; }
err=$("$Q" inspect --run-dir "$T/run" 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "is not there now (looked in $T/w1/local/stores)" <<<"$err" ||
  { echo "$err"; fail "inspect with the stores moved: rc $rc"; }
echo "ok: the stores moved: verify and inspect fail naming the folder they looked in"

# 3.
out=$("$Q" verify --run-dir "$T/run" --local-dir "$T/w1/moved" 2>&1) || { echo "$out"; fail "verify --local-dir NEW"; }
! grep -q "as recorded" <<<"$out" || fail "the recorded --local-dir was used although the flag was given"
echo "ok: --local-dir on the command line wins: $(tail -1 <<<"$out")"
