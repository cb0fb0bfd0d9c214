#!/usr/bin/env bash
# resume --from S with newer committed checkpoints (issue 35, item 6): resume names those steps, says
# they stay restorable with --from until this run saves the same step again, and which steps it
# will save again; the catalog's note on a superseded checkpoint names the step, not a row id.
#  1. train to step 6 (checkpoints 2, 4, 6), resume --from 2 --steps 4: the note names steps 4, 6
#     and "saves step 4"; afterwards step 4's earlier save is superseded ("step 4 saved again"),
#     step 6 is still committed and restorable with --from 6.
set -u
Q=${1:?usage: resume_from.sh QEFFECT SHARED}
S=${2:?usage: resume_from.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --data $S/data/brown.jsonl"
# shellcheck disable=SC2086
"$Q" train $C --quiet --run-dir "$T/e" --steps 6 --ckpt-every 2 || fail "train to step 6"
out=$("$Q" resume --run-dir "$T/e" --from 2 --steps 4 2>&1) || { echo "$out"; fail "resume --from 2"; }
note=$(grep "^note: " <<<"$out")
grep -q "after step 2 (steps 4, 6)" <<<"$note" && grep -q "restorable with --from" <<<"$note" &&
  grep -q "this run saves step 4$" <<<"$note" || { echo "$out"; fail "resume does not say which steps are newer"; }
echo "ok: $note"
grep -q "step 4 saved again" <<<"$out" || { echo "$out"; fail "the supersede message does not name the step"; }
notes=$(sqlite3 "$T/e/catalog.db" "select step, status, note from checkpoints order by id")
grep -q "^4|aborted|superseded: step 4 saved again$" <<<"$notes" || { echo "$notes"; fail "the superseded note"; }
! grep -q "superseded by checkpoint" <<<"$notes" || { echo "$notes"; fail "a note names a row id"; }
[ "$(grep -c '^6|committed|' <<<"$notes")" -eq 1 ] || { echo "$notes"; fail "step 6 is no longer committed"; }
out=$("$Q" resume --run-dir "$T/e" --from 6 --steps 6 2>&1) || { echo "$out"; fail "--from 6 after the branch"; }
grep -q "from checkpoint step 6" <<<"$out" || { echo "$out"; fail "--from 6 did not restore step 6"; }
echo "ok: step 4's earlier save superseded with a note naming the step; step 6 still restorable with --from 6"
