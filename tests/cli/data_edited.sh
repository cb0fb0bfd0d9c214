#!/usr/bin/env bash
# A resume never trains on other data without a word (issue 35, item 2).  train records the data's
# absolute path and the fingerprint of its tokens; every resume fingerprints the file it will read
# and refuses a mismatch naming the file and both fingerprints - also without --data, and with
# --data naming the run's own path, where a file edited in place used to be read silently.
#  1. the recorded path is absolute: a resume from another working directory reads the same file
#     and ends bit-exact with an uninterrupted run;
#  2. the file edited in place (one record appended): resume without --data, and with --data
#     naming the same path (relative and absolute), is refused, exit 2, the catalog unchanged;
#  3. --data naming a copy of the original tokens at a new path is accepted, bit-exact.
set -u
Q=${1:?usage: data_edited.sh QEFFECT SHARED}
S=${2:?usage: data_edited.sh QEFFECT SHARED}
Q=$(readlink -f "$Q")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T/a" "$T/elsewhere" "$T/keep"
cp "$S/data/brown.jsonl" "$T/a/brown.jsonl"
cp "$S/data/brown.jsonl" "$T/keep/original.jsonl"
C="--preset tiny --pp 2 --micro 2 --quiet"
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/full" --data "$T/a/brown.jsonl" --steps 4 || fail "uninterrupted run"
# 1. trained with a relative path from $T/a, resumed from another directory
# shellcheck disable=SC2086
(cd "$T/a" && "$Q" train $C --run-dir "$T/r1" --data brown.jsonl --steps 2 --ckpt-every 2) || fail "first half (relative --data)"
(cd "$T/elsewhere" && "$Q" resume --run-dir "$T/r1" --steps 4 --quiet) || fail "resume from another directory"
out=$("$Q" compare "$T/full" "$T/r1") || { echo "$out"; fail "the resume from another directory differs"; }
echo "ok: relative --data recorded absolute, resumed from elsewhere: $(tail -1 <<<"$out")"

# 2. the file edited in place
# shellcheck disable=SC2086
"$Q" train $C --run-dir "$T/r2" --data "$T/a/brown.jsonl" --steps 2 --ckpt-every 2 || fail "first half"
echo '{"text": "One more record, appended after the run started."}' >>"$T/a/brown.jsonl"
before=$(md5sum "$T/r2/catalog.db")
for form in none same-abs same-rel; do
  case $form in
    none) err=$(cd "$T/elsewhere" && "$Q" resume --run-dir "$T/r2" --steps 4 --quiet 2>&1); rc=$? ;;
    same-abs) err=$("$Q" resume --run-dir "$T/r2" --data "$T/a/brown.jsonl" --steps 4 --quiet 2>&1); rc=$? ;;
    same-rel) err=$(cd "$T/a" && "$Q" resume --run-dir "$T/r2" --data brown.jsonl --steps 4 --quiet 2>&1); rc=$? ;;
  esac
  [ $rc -eq 2 ] && grep -q "has changed since the run recorded it" <<<"$err" && grep -q "brown.jsonl" <<<"$err" &&
    [ "$(grep -o '[0-9a-f]\{16\}' <<<"$err" | sort -u | wc -l)" -eq 2 ] ||
    { echo "$err"; fail "an edited data file was not refused ($form, rc $rc)"; }
  [ "$(md5sum "$T/r2/catalog.db")" = "$before" ] || fail "the refused resume ($form) changed the catalog"
  echo "ok: edited data refused ($form): $(head -1 <<<"$err" | cut -c1-160)"
done

# 3. the original tokens at a new path
"$Q" resume --run-dir "$T/r2" --data "$T/keep/original.jsonl" --steps 4 --quiet || fail "resume with a copy of the original"
out=$("$Q" compare "$T/full" "$T/r2") || { echo "$out"; fail "the resume with the original's copy differs"; }
echo "ok: a copy of the original tokens resumes bit-exact: $(tail -1 <<<"$out")"
