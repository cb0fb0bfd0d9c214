#!/usr/bin/env bash
# A run written before stores were per rank (catalog schema 2, one shared RUN/store, made by
# the binary of commit e431a5f: tests/data/legacy-run-v2.tar.gz, tiny --pp 2, checkpoint at
# step 3) still lists, inspects, verifies and resumes.  Opening it migrates the catalog to the
# current schema; its new checkpoints go to per-rank stores, and a second resume reads across
# both layouts.  The reference is a copy of the run resumed once to the end: steps 1-3 were
# computed by the old binary, whose cpu reference summed bias and layernorm gradients in 16
# row groups (colsum.h now takes groups of 64 rows), so an uninterrupted run of today's binary
# no longer has the checkpoint's bytes; the resume paths must agree bit for bit with each other.
set -u
Q=${1:?usage: legacy_run.sh QEFFECT SHARED}
# The fixture recorded its data under the worktree that made it; here the corpus lies in SHARED.
D="${2:?usage: legacy_run.sh QEFFECT SHARED}/data/brown.jsonl"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
tar xzf "$(dirname "$0")/../data/legacy-run-v2.tar.gz" -C "$T" || { echo "FAIL: cannot unpack the fixture"; exit 1; }
R="$T/run"
[ -d "$R/store" ] && [ ! -e "$R/stores" ] || { echo "FAIL: the fixture is not a shared-store run"; exit 1; }
"$Q" list --run-dir "$R" | grep -q committed || { "$Q" list --run-dir "$R"; echo "FAIL: list of an old run"; exit 1; }
"$Q" inspect --run-dir "$R" >"$T/inspect.txt" || { cat "$T/inspect.txt"; echo "FAIL: inspect of an old run"; exit 1; }
"$Q" verify --run-dir "$R" >"$T/verify.txt" || { cat "$T/verify.txt"; echo "FAIL: verify of an old run"; exit 1; }
ver=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('pragma user_version').fetchone()[0])" "$R/catalog.db")
[ "$ver" = 5 ] || { echo "FAIL: the catalog was not migrated (schema $ver)"; exit 1; }
cp -a "$R" "$T/ref"
"$Q" resume --run-dir "$T/ref" --data "$D" --steps 8 --quiet || { echo "FAIL: reference (one resume to the end)"; exit 1; }
"$Q" resume --run-dir "$R" --data "$D" --steps 6 --ckpt-every 3 --quiet || { echo "FAIL: resume of an old run"; exit 1; }
[ -f "$R/stores/rank-0/data.mdb" ] && [ -f "$R/stores/rank-1/data.mdb" ] || { ls -R "$R"; echo "FAIL: new checkpoints not in per-rank stores"; exit 1; }
"$Q" resume --run-dir "$R" --data "$D" --steps 8 --pp 1 --quiet || { echo "FAIL: second resume (new layout, remapped)"; exit 1; }
# Steps 1-3 were traced by the old binary: compare the steps today's binary computed.
out=$("$Q" compare "$T/ref" "$R" --steps 4:8) || { echo "$out"; echo "FAIL: the old run resumed differs"; exit 1; }
"$Q" verify --run-dir "$R" >"$T/verify2.txt" || { cat "$T/verify2.txt"; echo "FAIL: verify across both layouts"; exit 1; }
echo "ok: a schema-2 shared-store run lists, inspects, verifies, migrates, and resumes across both layouts as a single resume does: $(tail -1 <<<"$out")"
