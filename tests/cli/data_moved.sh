#!/usr/bin/env bash
# A run's data may lie at another path on the host that resumes it.  Without --data a missing
# data file is refused before anything is written; --data naming a copy with the same tokens
# resumes bit-exact with an uninterrupted run; a file with other tokens is refused, naming both
# fingerprints.
set -u
Q=${1:?usage: data_moved.sh QEFFECT SHARED}
S=${2:?usage: data_moved.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T/a" "$T/b"
cp "$S/data/brown.jsonl" "$T/a/brown.jsonl"
"$Q" train --run-dir "$T/full" --data "$T/a/brown.jsonl" --steps 4 --pp 2 --quiet || fail "uninterrupted run"
"$Q" train --run-dir "$T/r" --data "$T/a/brown.jsonl" --steps 2 --ckpt-every 2 --pp 2 --quiet || fail "first half"
mv "$T/a/brown.jsonl" "$T/b/moved.jsonl"
before=$(md5sum "$T/r/catalog.db")
err=$("$Q" resume --run-dir "$T/r" --steps 4 --quiet 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "the run's data '$T/a/brown.jsonl' cannot be read on this host" <<<"$err" ||
	{ echo "$err"; fail "a missing data file was not refused (rc $rc)"; }
[ "$(md5sum "$T/r/catalog.db")" = "$before" ] || fail "the refused resume changed the catalog"
head -n 100 "$T/b/moved.jsonl" >"$T/b/other.jsonl"
err=$("$Q" resume --run-dir "$T/r" --data "$T/b/other.jsonl" --steps 4 --quiet 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--data '$T/b/other.jsonl' (tokens [0-9a-f]\{16\}) conflicts with the run" <<<"$err" ||
	{ echo "$err"; fail "data with other tokens was not refused (rc $rc)"; }
"$Q" resume --run-dir "$T/r" --data "$T/b/moved.jsonl" --steps 4 --quiet || fail "resume with the moved data"
out=$("$Q" compare "$T/full" "$T/r") || { echo "$out"; fail "the resume with moved data differs"; }
echo "ok: missing data refused, other tokens refused, moved data resumes bit-exact: $(tail -1 <<<"$out")"
