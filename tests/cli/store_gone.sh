#!/usr/bin/env bash
# A store made on this host that is gone is damage, not "another host's store" (issue 35, item 6):
#  1. train --pp 2 with checkpoints on one host, then delete rank 1's store: inspect (text and
#     --json) and verify exit non-zero naming the store, its rank, this host and its folder;
#  2. the same with rank 0's store deleted.
# (A store recorded on another host stays informational: the two-host tests cover that.)
set -u
Q=${1:?usage: store_gone.sh QEFFECT SHARED}
S=${2:?usage: store_gone.sh QEFFECT SHARED}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="--preset tiny --pp 2 --micro 2 --quiet --data $S/data/brown.jsonl"
for rank in 1 0; do
  d="$T/r$rank"
  # shellcheck disable=SC2086
  "$Q" train $C --run-dir "$d" --steps 4 --ckpt-every 2 || fail "train"
  "$Q" inspect --run-dir "$d" >/dev/null || fail "inspect of the intact run"
  rm -rf "$d/stores/rank-$rank"
  for form in text json verify; do
    case $form in
      text) err=$("$Q" inspect --run-dir "$d" 2>&1 >/dev/null); rc=$? ;;
      json) err=$("$Q" inspect --run-dir "$d" --json 2>&1 >/dev/null); rc=$? ;;
      verify) err=$("$Q" verify --run-dir "$d" 2>&1); rc=$? ;;
    esac
    [ $rc -ne 0 ] || { echo "$err"; fail "rank $rank's store deleted: $form exited 0"; }
    grep -q "rank-$rank" <<<"$err" || { echo "$err"; fail "rank $rank's store deleted: $form does not name the store"; }
    [ "$form" = verify ] || grep -q "of rank $rank was made on this host ('$(hostname)')" <<<"$err" ||
      { echo "$err"; fail "rank $rank's store deleted: $form does not say the store was made on this host"; }
    echo "ok: rank $rank's store deleted: $form exits $rc: $(grep -m1 "rank-$rank" <<<"$err" | cut -c1-150)"
  done
done
